"""The code behind `model_repository/`, run inside tritonserver: request parsing, media, engine setup,
metrics."""
