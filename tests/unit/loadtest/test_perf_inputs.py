"""`rps-serve perf-inputs`: files in perf_analyzer's --input-data format, one per modality."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest

from rps_harness.cli import main
from rps_harness.client import Generation
from rps_harness.loadtest.perf_inputs import perf_input_data
from rps_harness.workload.request_format import MediaShape
from rps_serve.triton import protocol as p


@pytest.mark.slow
def test_cli_writes_one_valid_file_per_modality(tmp_path: Path, tiny_qwen: Path) -> None:
    out = tmp_path / "inputs"
    model = str(tiny_qwen)
    media = MediaShape.of_model(tiny_qwen)
    argv = ["perf-inputs", "--out", str(out), "--model", model, "--per-modality", "3", "--max-tokens", "5"]
    assert main(argv) == 0
    for modality in ("text", "image", "video"):
        data = json.loads((out / f"{modality}.json").read_text())["data"]
        assert len(data) == 3
        prompts = set()
        for entry in data:
            assert set(entry) >= {p.TEXT_INPUT, p.STREAM, p.SAMPLING_PARAMETERS, p.EXCLUDE_INPUT_IN_OUTPUT}
            assert (p.IMAGE in entry) == (modality == "image")
            assert (p.VIDEO in entry) == (modality == "video")
            for tensor in entry.values():  # perf_analyzer's layout: flattened content, explicit shape
                assert set(tensor) == {"content", "shape"}
                assert int(np.prod(tensor["shape"])) == len(tensor["content"])
            assert entry[p.STREAM]["content"] == [True]
            sampling = json.loads(entry[p.SAMPLING_PARAMETERS]["content"][0])
            assert sampling == {"max_tokens": sampling["max_tokens"], "ignore_eos": True}
            assert 1 <= sampling["max_tokens"] <= 5
            prompts.add(entry[p.TEXT_INPUT]["content"][0])
            if modality == "image":
                from PIL import Image

                jpeg = base64.b64decode(entry[p.IMAGE]["content"][0])
                assert Image.open(io.BytesIO(jpeg)).size == (media.image_size, media.image_size)
            if modality == "video":
                assert base64.b64decode(entry[p.VIDEO]["content"][0])[4:8] == b"ftyp"  # an MP4 file
        assert len(prompts) == 3  # fresh content: no prefix-cache hits in perf_analyzer's loop


def test_mixed_input_sets_are_refused() -> None:
    text = Generation("hello")
    image = Generation("look", images=(b"jpeg",))
    assert len(perf_input_data([text, text])["data"]) == 2
    with pytest.raises(ValueError, match="one input set"):
        perf_input_data([text, image])
