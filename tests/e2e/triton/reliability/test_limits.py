"""Every limit refused with INVALID_ARG by both models, the output cap applied, media never fetched
from what a request names, and the served model free of pickles."""

from __future__ import annotations

import base64
import http.server
import threading
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from rps_harness.client import Generation, encode_image, encode_video
from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_serve.requests import Modality
from rps_serve.triton import protocol as p
from tests.e2e.triton.conftest import MODELS, VLLM_MODEL, Requests, Server, generate, run, serves
from tests.e2e.triton.reliability.conftest import LIMITS
from tests.fuzzing import (
    bomb_png,
    png,
)
from tests.prompts import chat_prompt

BAD_REQUEST = 400  # what Triton's HTTP endpoint answers for INVALID_ARG (an internal error is 500)
RNG = np.random.default_rng(5)


def _text(requests: Requests, words: int) -> Generation:
    return replace(
        requests.make(Modality.TEXT), prompt=chat_prompt(filler_text(words, requests.rng), Modality.TEXT)
    )


def over_the_limits(requests: Requests) -> dict[str, tuple[Generation, str]]:
    """One request over each limit, and a fragment of the error it must get."""
    image, video = requests.make(Modality.IMAGE), requests.make(Modality.VIDEO)
    return {
        "text bytes": (
            replace(requests.make(Modality.TEXT), prompt="a" * 70000),
            "bytes; the limit is 65536",
        ),
        "prompt tokens": (_text(requests, 5000), "the limit is 4000"),
        "output tokens": (
            replace(requests.make(Modality.TEXT), sampling_parameters={"max_tokens": 257}),
            "max_tokens is 257; the limit is 256",
        ),
        "images": (
            replace(
                image,
                prompt=chat_prompt("two", Modality.IMAGE).replace(
                    "user\n", "user\n" + image.prompt[:0] + "<|vision_start|><|image_pad|><|vision_end|>"
                ),
                images=image.images * 2,
            ),
            "2 images; the limit is 1",
        ),
        "image bytes": (
            replace(image, images=(png(random_image(300, 300, RNG)),)),
            "bytes; the limit is 200000",
        ),
        "image pixels": (
            replace(image, images=(bomb_png(1000, 1000),)),
            "1000x1000; the limit is 65536 pixels",
        ),
        "video bytes": (replace(video, video=bytes(1_000_001)), "1000001 bytes; the limit is 1000000"),
        "video frames": (
            replace(video, video=encode_video(random_video(33, 16, 16, RNG))),
            "33 frames; the limit is 32",
        ),
        "video pixels": (
            replace(video, video=encode_video(random_video(2, 256, 256, RNG))),
            "256x256; the limit is 57600 pixels",
        ),
    }


@pytest.mark.parametrize("model", MODELS)
def test_every_limit_is_refused_with_invalid_arg(server: Server, requests: Requests, model: str) -> None:
    assert (
        len(_text(requests, 5000).prompt.encode()) < LIMITS["max_text_bytes"]
    )  # tokens, not bytes, refuse it
    for name, (generation, message) in over_the_limits(requests).items():
        status, body = generate(server, model, generation)
        assert status == BAD_REQUEST, (name, status, body)
        assert message in body, (name, body)
    serves(server, requests)


def test_max_tokens_null_is_capped_at_the_output_limit(server: Server, requests: Requests) -> None:
    generation = replace(
        requests.make(Modality.TEXT),
        sampling_parameters={"max_tokens": None, "ignore_eos": True},
        stream=False,
        additional_outputs=(p.NUM_OUTPUT_TOKENS,),
    )
    result = run(server, VLLM_MODEL, generation.tensors())
    assert result.error is None
    assert result.outputs["num_output_tokens"][0] == LIMITS["max_output_tokens"]


class _CountingHandler(http.server.BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(self.server.payload)  # type: ignore[attr-defined]

    def log_message(self, *args: object) -> None:
        pass


def test_media_named_in_a_request_is_never_fetched(
    server: Server, requests: Requests, tmp_path: Path
) -> None:
    """A URL or a local path in the prompt or in place of media bytes is never opened: a local HTTP
    server that serves a valid image counts its hits, and a valid image file lies at the named path."""
    jpeg = encode_image(random_image(64, 64, RNG))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _CountingHandler)
    httpd.payload = jpeg  # type: ignore[attr-defined]
    _CountingHandler.hits = []
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/cat.jpg"
    image_file, video_file = tmp_path / "cat.jpg", tmp_path / "clip.mp4"
    image_file.write_bytes(jpeg)
    video_file.write_bytes(encode_video(random_video(4, 16, 16, RNG)))
    image, video = requests.make(Modality.IMAGE), requests.make(Modality.VIDEO)
    try:
        for model in MODELS:
            for named in (url, f"file://{image_file}", str(image_file)):
                # Named in the text only: served as text, nothing fetched.
                prompt = chat_prompt(f"Describe {named}", Modality.TEXT)
                text = replace(requests.make(Modality.TEXT, max_tokens=2), prompt=prompt)
                assert generate(server, model, text)[0] == 200
                # In place of the image's bytes, base64 or not: refused, nothing fetched or opened.
                for field in (base64.b64encode(named.encode()), named.encode()):
                    tensors = image.tensors()
                    tensors[p.IMAGE] = np.array([field], dtype=np.object_)
                    result = run(server, model, tensors)
                    assert result.error is not None, named
                    assert "cannot be decoded" in result.error or "base64" in result.error, result.error
            tensors = video.tensors()
            tensors[p.VIDEO] = np.array([base64.b64encode(str(video_file).encode())], dtype=np.object_)
            result = run(server, model, tensors)
            assert result.error is not None and "video cannot be decoded" in result.error
    finally:
        httpd.shutdown()
    assert _CountingHandler.hits == []


def test_the_served_model_is_safetensors_and_json(server: Server) -> None:
    """vLLM and the processor load the weights from safetensors, nothing from a pickle-based format."""
    suffixes = {f.suffix for f in server.model.rglob("*") if f.is_file()}
    assert ".safetensors" in suffixes
    assert suffixes <= {".safetensors", ".json", ".txt", ".jinja"}, suffixes
