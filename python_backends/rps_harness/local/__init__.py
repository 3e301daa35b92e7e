"""The local development stack: a tritonserver launched on 127.0.0.1 from the nvidia-pytriton wheel (with
an ONNX Runtime stand-in), the build outputs a checkout's model repository needs, and the tiny model."""
