"""Triton entry point of `vllm_model`; the model lives in rps_serve.triton.vllm_model."""

import locale

# The Python-backend stub starts with an ASCII locale; torch, transformers and vLLM need UTF-8.
# Seen on Triton 2.51's stub; kept on 26.10 (not checked there), where it is harmless.
locale.setlocale(locale.LC_CTYPE, "C.UTF-8")

from rps_serve.triton.vllm_model import TritonPythonModel  # noqa: E402

__all__ = ["TritonPythonModel"]
