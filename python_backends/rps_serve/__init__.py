"""RPS-Serve: rocks, pebbles and sand scheduling for multimodal LLM serving."""
