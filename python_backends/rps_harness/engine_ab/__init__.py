"""The engine A/B harness (`rps-serve ab`): policies side by side on an in-process vLLM `AsyncLLM`, no
Triton; experiment code, apart from the production scheduler in `rps_serve.vllm_plugin`."""
