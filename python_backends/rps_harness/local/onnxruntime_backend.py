"""Stand-in for Triton's ONNX Runtime backend, as a Python-based backend (`backends/onnxruntime/model.py`).

The tritonserver in the nvidia-pytriton wheel has no ONNX Runtime backend. Triton serves a directory
`backends/<name>/` holding a `model.py` as a Python-based backend, so a model with
`platform: "onnxruntime_onnx"` loads unchanged: this file runs `<model>/<version>/model.onnx` with the
onnxruntime package. Inputs and outputs are those listed in the model's config.pbtxt. On NVIDIA's
containers the real backend serves the same repository. The launcher (`local.server`) copies this
file into its server tree; nothing imports it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils

from rps_serve.triton.protocol import attributed


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        path = Path(args["model_repository"]) / args["model_version"] / "model.onnx"
        if not path.is_file():
            raise pb_utils.TritonModelException(f"{path} not found")
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self.inputs = [(i["name"], pb_utils.triton_string_to_numpy(i["data_type"])) for i in config["input"]]
        self.outputs = [o["name"] for o in config["output"]]

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                feeds = {
                    name: pb_utils.get_input_tensor_by_name(request, name)
                    .as_numpy()
                    .astype(dtype, copy=False)
                    for name, dtype in self.inputs
                }
                # Only the outputs the request asked for: Triton 2.51's Python backend frees the arrays of
                # the others without the GIL (fixed in 2.53).
                requested = set(request.requested_output_names())
                wanted = [n for n in self.outputs if n in requested]
                results = self.session.run(wanted, feeds)
                tensors = [
                    pb_utils.Tensor(n, np.ascontiguousarray(r)) for n, r in zip(wanted, results, strict=True)
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except Exception as error:  # one bad request must not fail the others in the batch
                # Named as the repository's other models name theirs (the real backend does not).
                message = attributed(request.request_id(), str(error))
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(message)))
        return responses
