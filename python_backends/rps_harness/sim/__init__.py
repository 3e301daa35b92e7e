"""Simulator of the vLLM V1 engine driven by the shared RPS policy code: timing model, engine, event loop."""
