"""Profile data: isolated-run records, the published reference fits, and default profiles built from them."""
