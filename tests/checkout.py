"""Where the checkout under test lies, whatever directory pytest was started from."""

from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]
REPOSITORY = CHECKOUT / "model_repository"
