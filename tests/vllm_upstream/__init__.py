"""vLLM's own V1 scheduler unit tests, run offline against the RPS scheduler (or vLLM's, for reference).

`plugin` is the pytest plug-in (`-p vllm_upstream.plugin`, with this folder's parent on `sys.path`);
`fake_hub` writes the Hugging Face cache the tests' model configs load from; `expected` lists the
upstream tests that fail against RPS by design. `tools/vllm_upstream_tests.sh` drives the run.
"""
