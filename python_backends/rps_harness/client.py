"""Client side of the repository's interface with tritonclient: encoding media, building inputs,
streaming generation over gRPC and collecting the responses."""

from __future__ import annotations

import base64
import io
import json
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from rps_serve.cost import features as cols
from rps_serve.cost.model import Assessment
from rps_serve.requests import CostEstimate, Modality, RequestFeatures
from rps_serve.triton import protocol as p


def encode_image(pixels: np.ndarray, quality: int = 90) -> bytes:
    """An RGB uint8 array as JPEG file bytes."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def encode_video(frames: np.ndarray, fps: float = 8.0) -> bytes:
    """RGB uint8 frames [F, H, W, 3] as MP4 (MPEG-4 Part 2) file bytes."""
    import cv2

    height, width = frames.shape[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "video.mp4"
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), fps, (width, height))
        if not writer.isOpened():
            raise RuntimeError("OpenCV cannot write MP4 here")
        for frame in frames:
            writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
        writer.release()
        return path.read_bytes()


@dataclass(frozen=True)
class Generation:
    """One generate request as a client sends it."""

    prompt: str
    images: tuple[bytes, ...] = ()  # encoded image files
    video: bytes | None = None  # an encoded video file
    sampling_parameters: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = True
    exclude_input_in_output: bool = True
    # vllm_backend's additional outputs to ask for (`protocol.ADDITIONAL_OUTPUTS`), by output name
    additional_outputs: tuple[str, ...] = ()

    def tensors(self) -> dict[str, np.ndarray]:
        def strings(*values: bytes) -> np.ndarray:
            return np.array(list(values), dtype=np.object_)

        tensors = {
            p.TEXT_INPUT: strings(self.prompt.encode("utf-8")),
            p.STREAM: np.array([self.stream]),
            p.SAMPLING_PARAMETERS: strings(json.dumps(dict(self.sampling_parameters)).encode()),
            p.EXCLUDE_INPUT_IN_OUTPUT: np.array([self.exclude_input_in_output]),
        }
        if self.images:
            tensors[p.IMAGE] = strings(*(base64.b64encode(image) for image in self.images))
        if self.video is not None:
            tensors[p.VIDEO] = strings(base64.b64encode(self.video))
        for name in self.additional_outputs:
            if name not in p.ADDITIONAL_OUTPUTS:
                raise ValueError(f"{name!r} is not one of the additional outputs {p.ADDITIONAL_OUTPUTS}")
            tensors[p.return_flag(name)] = np.array([True])
        return tensors


def infer_inputs(module: Any, tensors: Mapping[str, np.ndarray | bytes]) -> list[Any]:
    """tritonclient InferInputs (`module` is tritonclient.grpc or tritonclient.http)."""
    from tritonclient.utils import np_to_triton_dtype

    inputs = []
    for name, value in tensors.items():
        array = np.asarray(value)
        dtype = "BYTES" if array.dtype == np.object_ else np_to_triton_dtype(array.dtype)
        tensor = module.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


@dataclass
class StreamResult:
    """What came back for one request: streamed chunks, the outputs of the first response, the error."""

    chunks: list[str] = field(default_factory=list)
    outputs: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    first_response_s: float | None = None  # client clock (time.monotonic) of the first non-empty response
    done_s: float | None = None

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    @property
    def refused(self) -> bool:
        """Refused because the server held too many requests (retry later), not failed."""
        return self.error is not None and p.is_refusal(self.error)


@dataclass(frozen=True)
class Tally:
    """How the requests sent on a stream ended. `lost` got neither a final response nor an error."""

    sent: int
    completed: int
    refused: int
    failed: int
    lost: int

    @classmethod
    def total(cls, tallies: Sequence[Tally]) -> Tally:
        """Several streams' tallies added up."""
        return cls(*(sum(getattr(t, f.name) for t in tallies) for f in fields(cls)))

    def __str__(self) -> str:
        return (
            f"sent {self.sent}, completed {self.completed}, refused (overloaded) {self.refused}, "
            f"failed {self.failed}, lost {self.lost}"
        )


class StreamClient:
    """One gRPC stream carrying many concurrent requests; results are collected by request id.

    tritonclient hands an error to the stream's callback without the response's id; the repository's
    models name the request in the message (`protocol.attributed`), which is how an error finds its
    request here. An error that names none (one of Triton's own) goes to the only request outstanding,
    if there is one; otherwise it is kept in `unattributed_errors`, each standing for one of the
    requests still outstanding. An error with a gRPC status is the stream's own end (the connection
    broke, or the stream was cancelled): tritonclient reads no more responses after it, so every
    request still outstanding ends with it (`stream_error`).

    With `silence_timeout_s`, a request that has heard nothing (no response, no error) for that long
    since it was sent or last answered ends with an error of the client's (`protocol.SILENCE`), checked
    while `wait` and `wait_all` wait: Triton 2.51 never ends a decoupled model's requests whose stub
    died (docs/limits-and-guarantees.md; python_backend up to r26.07 the same), so without it such a
    stream stays open for good. Choose it
    above the longest silence a healthy request can have (its queueing and prefill, or a whole
    non-streamed generation).
    """

    def __init__(self, url: str, silence_timeout_s: float | None = None) -> None:
        import tritonclient.grpc as grpcclient
        from tritonclient.utils import InferenceServerException

        self._module = grpcclient
        self._exception = InferenceServerException
        self.client = grpcclient.InferenceServerClient(url)
        self.results: dict[str, StreamResult] = {}
        self._done: dict[str, threading.Event] = {}
        self.silence_timeout_s = silence_timeout_s
        self._heard: dict[str, float] = {}  # request id -> when it was sent or last answered
        self.silenced: list[str] = []  # requests the client ended for their silence
        self._lock = threading.Lock()
        self.unattributed_errors: list[str] = []
        self.stream_error: str | None = None
        self.client.start_stream(callback=self._on_response)

    def _on_response(self, result: Any, error: Any) -> None:
        now = time.monotonic()
        if error is not None:
            if error.status() is not None:  # a gRPC status: the stream itself has ended
                self._on_stream_end(str(error), now)
            else:
                self._on_error(str(error), now)
            return
        response = result.get_response()
        request_id = response.id
        entry = self.results[request_id]
        self._heard[request_id] = now
        text = result.as_numpy(p.TEXT_OUTPUT)
        if text is not None:
            if entry.first_response_s is None:
                entry.first_response_s = now
                entry.outputs.update(self._outputs(result))
            entry.chunks.extend(t.decode("utf-8", "replace") for t in text.reshape(-1))
        elif not entry.outputs:  # a response without text: an assessment's (`protocol.ASSESS`)
            entry.outputs.update(self._outputs(result))
        final = response.parameters.get("triton_final_response")
        if final is not None and final.bool_param:
            entry.done_s = now
            self._done[request_id].set()

    @staticmethod
    def _outputs(result: Any) -> dict[str, Any]:
        return {output.name: result.as_numpy(output.name) for output in result.get_response().outputs}

    def _fail(self, request_id: str, error: str, now: float) -> None:
        """End `request_id` with `error` (the caller holds the lock)."""
        entry = self.results[request_id]
        entry.error, entry.done_s = error, now
        self._done[request_id].set()

    def _on_stream_end(self, message: str, now: float) -> None:
        with self._lock:
            self.stream_error = message
            for request_id, done in self._done.items():
                if not done.is_set():
                    self._fail(request_id, p.attributed(request_id, message), now)

    def _on_error(self, message: str, now: float) -> None:
        request_id = p.attributed_request(message)
        pending = self.pending()
        with self._lock:
            if request_id not in self._done or self._done[request_id].is_set():
                if len(pending) != 1:
                    self.unattributed_errors.append(message)
                    return
                request_id = pending[0]
            self._fail(request_id, message, now)

    def submit(
        self,
        model: str,
        request_id: str,
        tensors: Mapping[str, np.ndarray],
        outputs: Sequence[str] | None = None,
        parameters: Mapping[str, bool | int | float | str] | None = None,
    ) -> None:
        """Send one request; `outputs` names the outputs wanted (default: all the model has), and
        `parameters` are the request's own Triton parameters (vllm_backend's sampling parameters
        where `tensors` hold no `sampling_parameters`). On a stream the server has already broken
        (tritonclient then refuses to send) the request ends at once with that error (the stream's
        own arrives through the callback, unattributed)."""
        with self._lock:
            self.results[request_id] = StreamResult()
            self._done[request_id] = threading.Event()
            self._heard[request_id] = time.monotonic()
        try:
            self.client.async_stream_infer(
                model,
                infer_inputs(self._module, tensors),
                request_id=request_id,
                outputs=None if outputs is None else [self._module.InferRequestedOutput(o) for o in outputs],
                enable_empty_final_response=True,
                parameters=None if parameters is None else dict(parameters),
            )
        except self._exception as error:
            with self._lock:
                self._fail(request_id, p.attributed(request_id, str(error)), time.monotonic())

    def pending(self) -> list[str]:
        """Requests without a final response (or an error attributed to them) yet."""
        with self._lock:
            return [r for r, done in self._done.items() if not done.is_set()]

    def wait(self, request_id: str, timeout_s: float = 600.0, poll_s: float = 0.2) -> StreamResult:
        deadline = time.monotonic() + timeout_s
        while not self._done[request_id].wait(min(poll_s, max(0.0, deadline - time.monotonic()))):
            self.end_silent()
            if time.monotonic() >= deadline and not self._done[request_id].is_set():
                raise TimeoutError(f"request {request_id} got no final response within {timeout_s:.0f} s")
        return self.results[request_id]

    def wait_all(self, deadline_s: float, poll_s: float = 0.2) -> Tally:
        """Wait until every request has ended or the clock (`time.monotonic`) passes `deadline_s`."""
        while self._outstanding() > 0 and time.monotonic() < deadline_s:
            time.sleep(poll_s)
            self.end_silent()
        return self.tally()

    def end_silent(self) -> list[str]:
        """End with an error every request silent for longer than `silence_timeout_s`; their ids."""
        if self.silence_timeout_s is None:
            return []
        now = time.monotonic()
        ended = []
        with self._lock:
            for request_id, done in self._done.items():
                silent_s = now - self._heard[request_id]
                if done.is_set() or silent_s <= self.silence_timeout_s:
                    continue
                message = (
                    f"{p.SILENCE} for {silent_s:.0f} s; the client ended it (the server may have lost it)"
                )
                self._fail(request_id, p.attributed(request_id, message), now)
                ended.append(request_id)
        self.silenced += ended
        return ended

    def _outstanding(self) -> int:
        """Requests that have not ended, counting each unattributed error as the end of one."""
        return max(0, len(self.pending()) - len(self.unattributed_errors))

    def tally(self) -> Tally:
        with self._lock:
            ended = [self.results[r] for r, done in self._done.items() if done.is_set()]
            unattributed = list(self.unattributed_errors)
        refused = sum(r.refused for r in ended) + sum(map(p.is_refusal, unattributed))
        errors = sum(r.error is not None for r in ended) + len(unattributed)
        return Tally(
            sent=len(self.results),
            completed=len(ended) - sum(r.error is not None for r in ended),
            refused=refused,
            failed=errors - refused,
            lost=self._outstanding(),
        )

    def close(self, cancel_requests: bool = False) -> None:
        """End the stream; with requests the client ended for their silence, cancel them too, or
        closing would wait for answers the server will never send."""
        self.client.stop_stream(cancel_requests=cancel_requests or bool(self.silenced))
        self.client.close()


_ASSESSED = (p.ASSESSED_LEVEL, p.ASSESSED_PREFILL_S, p.ASSESSED_KV_TOKENS, p.NUM_CLASSES)


class ServedClasses:
    """How a running server's `vllm_model` would class requests now, asked over gRPC at `url`
    (HOST:PORT): with the fit it serves, the online one if it refits (`protocol.ASSESS`)."""

    def __init__(self, url: str, model: str = p.VLLM_MODEL) -> None:
        self._url, self._model = url, model
        self.num_classes = int(self._ask([RequestFeatures(Modality.TEXT, 1)])[p.NUM_CLASSES][0])

    def _ask(self, requests: Sequence[RequestFeatures]) -> dict[str, np.ndarray]:
        client = StreamClient(self._url)
        try:
            client.submit(self._model, "assess", {p.ASSESS: cols.feature_matrix(requests)}, _ASSESSED)
            result = client.wait("assess", timeout_s=60)
        finally:
            client.close()
        if result.error is not None:
            raise RuntimeError(result.error)
        return result.outputs

    def assess(self, requests: Sequence[RequestFeatures]) -> list[Assessment]:
        outputs = self._ask(requests)
        return [
            Assessment(CostEstimate(float(prefill_s), int(kv_tokens)), int(level))
            for level, prefill_s, kv_tokens in zip(
                outputs[p.ASSESSED_LEVEL],
                outputs[p.ASSESSED_PREFILL_S],
                outputs[p.ASSESSED_KV_TOKENS],
                strict=True,
            )
        ]
