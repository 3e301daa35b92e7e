"""The RPS scheduler as a vLLM V1 `scheduler_cls` plug-in: the only code that imports vllm.v1.core."""
