"""The RPS scheduler as a vLLM V1 `scheduler_cls` plug-in: the only code that imports vllm.v1.core.

The scheduler interface is not public: we pin the vLLM releases whose internals we rely on, and the
contract tests (tests/e2e/engine/test_vllm_contract.py) fail loudly when an upgrade changes them; the
engine refuses any other release at start (`vllm_plugin.version`).
"""

from rps_serve.vllm_plugin.version import SUPPORTED_VLLM_VERSIONS

__all__ = ["SUPPORTED_VLLM_VERSIONS"]
