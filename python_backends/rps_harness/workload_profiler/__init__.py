"""Workload Profiler: isolated runs on a real vLLM engine, recorded as profile records."""
