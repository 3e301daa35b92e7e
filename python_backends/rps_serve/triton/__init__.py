"""The code behind `model_repository/`: request parsing, media, engine setup, metrics, local server."""
