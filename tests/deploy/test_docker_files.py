"""The H100 image, compose file and Kubernetes manifests agree with the repository and with each other.
(Docker, a GPU and a cluster are not available to the tests: these are the checks that need none.)"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml
from tools.requirements import read_project

from rps_serve.triton.settings import read_settings
from rps_serve.vllm_plugin import SUPPORTED_VLLM_VERSIONS
from tests.checkout import CHECKOUT, REPOSITORY

DOCKER = CHECKOUT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
# The probes `rps_serve.probe` runs, as the image, compose and Kubernetes call them.
READY = ["python3", "-m", "rps_serve.probe", "ready"]
LIVE = ["python3", "-m", "rps_serve.probe", "live"]
# A replica that will not recover by itself (a dead stub, whose streams hang until the server goes) is
# reported for replacing within this many seconds of the first failed check.
REPLACE_WITHIN_S = 60


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined and comments dropped."""
    logical, current = [], ""
    for line in text.splitlines():
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        logical.append(current)
        current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1].strip()) for line in logical]


INSTRUCTIONS = dockerfile_instructions(DOCKERFILE.read_text())
ARGS = dict(arg.split("=", 1) for kind, arg in INSTRUCTIONS if kind == "ARG" and "=" in arg)
CMD = json.loads(next(arg for kind, arg in INSTRUCTIONS if kind == "CMD"))


def build_stages(instructions: list[tuple[str, str]]) -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions by its name (`FROM ... AS name`; the last, unnamed one is `""`),
    its FROM first; the ARGs before the first FROM belong to none."""
    stages: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for kind, arg in instructions:
        if kind == "FROM":
            words = arg.split()
            current = stages.setdefault(words[2] if len(words) == 3 and words[1].upper() == "AS" else "", [])
        current.append((kind, arg))
    return stages


STAGES = build_stages(INSTRUCTIONS)


def stage_chain(name: str) -> list[str]:
    """The stages `name` is built on, itself first, up to the one FROM an image."""
    chain = [name]
    while (parent := STAGES[chain[-1]][0][1].split()[0]) in STAGES:
        chain.append(parent)
    return chain


def _flag(name: str) -> str:
    return next(a.split("=", 1)[1] for a in CMD if a.startswith(f"--{name}="))


SERVED_PORTS = {name: int(_flag(f"{name}-port")) for name in ("http", "grpc", "metrics")}


def _tensor_parallel(config: str) -> int:
    settings = read_settings(DOCKER / "configs" / config / "model.json", REPOSITORY, {})
    return int(settings.engine_args["tensor_parallel_size"])


def test_the_base_is_nvidias_general_triton_container() -> None:
    """The `-py3` container: the one of NVIDIA's that holds the ONNX Runtime backend beside Python's."""
    base = STAGES[stage_chain("")[-1]][0][1].split()[0]
    assert base == "nvcr.io/nvidia/tritonserver:${TRITON_TAG}-py3"
    assert re.fullmatch(r"\d{2}\.\d{2}", ARGS["TRITON_TAG"])


def test_the_build_checks_every_backend_of_the_repository_it_serves() -> None:
    """`rps_serve.backend_check` runs in the served stage, after the repository and its model.json are
    in place, on the directory CMD serves and the container's backend directory."""
    serving = STAGES[stage_chain("")[-1]]
    runs = [arg for kind, arg in serving if kind == "RUN"]
    check = next(i for i, arg in enumerate(runs) if "rps_serve.backend_check" in arg)
    argv = shlex.split(runs[check])
    assert argv[:3] == ["python3", "-m", "rps_serve.backend_check"]
    workdir = next(arg for kind, arg in serving if kind == "WORKDIR")
    assert str(Path(workdir) / argv[3]) == _flag("model-repository")
    assert argv[argv.index("--backend-directory") + 1] == "/opt/tritonserver/backends"
    assert check > next(i for i, arg in enumerate(runs) if "model_repository/vllm_model/model.json" in arg)


def test_the_pinned_vllm_is_one_the_plugin_supports() -> None:
    assert ARGS["VLLM_VERSION"] in SUPPORTED_VLLM_VERSIONS
    assert read_project()["gpu"] == [f"vllm=={ARGS['VLLM_VERSION']}"]  # pyproject's gpu extra, the one pin
    install = next(arg for kind, arg in INSTRUCTIONS if kind == "RUN" and "vllm==" in arg)
    assert '"vllm==${VLLM_VERSION}"' in install


def test_the_default_config_exists() -> None:
    assert (DOCKER / "configs" / ARGS["RPS_CONFIG"] / "model.json").is_file()


def test_the_images_rps_serve_steps_run_here(tmp_path: Path) -> None:
    """Every `rps-serve` command of the build, with the build's arguments, runs with this checkout's
    CLI (its output redirected under `tmp_path`): a renamed option fails here, not in `docker build`."""
    from rps_harness.cli import main

    steps = [
        shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: ARGS[m.group(1)], part))
        for kind, arg in INSTRUCTIONS
        if kind == "RUN"
        for part in arg.split("&&")
        if part.strip().startswith("rps-serve ")
    ]
    assert steps, "the image runs no rps-serve step"
    for argv in steps:
        out = argv.index("--out") + 1
        argv[out] = str(tmp_path / argv[out])
        assert main(argv[1:]) == 0, argv


def test_every_copied_file_exists_and_is_not_docker_ignored() -> None:
    ignored = [
        line.strip()
        for line in (CHECKOUT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copies = [
        shlex.split(arg)[:-1]
        for kind, arg in INSTRUCTIONS
        if kind == "COPY" and not arg.startswith("--from=")
    ]
    sources = [source for sources in copies for source in sources]
    assert "python_backends" in sources and "model_repository" in sources
    for source in sources:
        assert (CHECKOUT / source).exists(), source
        parts = Path(source).parts
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        assert not [p for p in ignored for prefix in prefixes if fnmatch.fnmatch(prefix, p)], source


def test_the_served_image_holds_the_serving_package_only() -> None:
    """What the default image is built from copies `rps_serve` and never the harness: no other folder of
    python_backends, no install of the project (its `rps-serve` script is the harness's); from the
    harness's stage it takes the trained model repository only."""
    served = [step for stage in stage_chain("") for step in STAGES[stage]]
    sources = [
        source
        for kind, arg in served
        if kind == "COPY" and not arg.startswith("--from=")
        for source in shlex.split(arg)[:-1]
    ]
    assert "python_backends/rps_serve" in sources
    assert not [s for s in sources if s.startswith("python_backends") and s != "python_backends/rps_serve"]
    assert not [arg for kind, arg in served if kind == "RUN" and re.search(r"pip install[^&]* \.( |$)", arg)]
    taken = [shlex.split(arg) for kind, arg in served if kind == "COPY" and arg.startswith("--from=")]
    assert all(Path(words[1]).name == "model_repository" for words in taken), taken
    assert "PYTHONPATH=/opt/rps-serve/python_backends" in next(arg for kind, arg in served if kind == "ENV")


def test_the_image_installs_every_runtime_dependency_of_the_package() -> None:
    """The package goes in with --no-deps, so docker/requirements.txt must name what it needs."""
    declared = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["dependencies"]
    required = {re.split(r"[<>=!\[; ]", d, maxsplit=1)[0].lower() for d in declared} - {"numpy"}
    lines = (DOCKER / "requirements.txt").read_text().splitlines()
    installed = {re.split(r"[<>=!\[; ]", line, maxsplit=1)[0].lower() for line in lines if line[:1].isalnum()}
    assert required <= installed


def test_the_server_serves_http_grpc_and_metrics() -> None:
    assert CMD[0] == "tritonserver"
    assert _flag("model-repository") == "/opt/rps-serve/model_repository"
    assert _flag("allow-metrics") == "true"
    assert sorted(SERVED_PORTS.values()) == [8000, 8001, 8002]
    exposed = {int(p) for kind, arg in INSTRUCTIONS if kind == "EXPOSE" for p in arg.split()}
    assert exposed == set(SERVED_PORTS.values())
    healthcheck = next(arg for kind, arg in INSTRUCTIONS if kind == "HEALTHCHECK")
    options, command = healthcheck.split(" CMD ", 1)
    assert json.loads(command) == LIVE
    flags = dict(option.removeprefix("--").split("=", 1) for option in options.split())
    assert int(flags["interval"].removesuffix("s")) * int(flags["retries"]) <= REPLACE_WITHIN_S


def test_the_server_lets_vllm_model_unload_itself() -> None:
    """`vllm_model` asks Triton to unload it once its engine cannot be restarted; Triton acts on that
    only under explicit model control, and then loads at start only what `--load-model` names: `*`,
    alone, is every model of the repository."""
    assert _flag("model-control-mode") == "explicit"
    assert [a for a in CMD if a.startswith("--load-model")] == ["--load-model=*"]


def test_compose_serves_each_config_on_its_gpus() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    services = compose["services"]
    configs = {s["build"]["args"]["RPS_CONFIG"] for s in services.values()}
    assert configs == {p.name for p in (DOCKER / "configs").iterdir()}
    for name, service in services.items():
        config = service["build"]["args"]["RPS_CONFIG"]
        assert (CHECKOUT / "docker" / service["build"]["context"]).resolve() == CHECKOUT, name
        assert (DOCKER / service["build"]["context"] / service["build"]["dockerfile"]).resolve() == DOCKERFILE
        assert service["image"].endswith(f":{config}")
        (gpus,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert gpus["count"] == _tensor_parallel(config), name
        published = {int(p.split(":")[1]) for p in service["ports"]}
        assert published == set(SERVED_PORTS.values()), name
        assert service["healthcheck"]["test"] == ["CMD", *LIVE], name
        assert any(volume.endswith(":/models:ro") for volume in service["volumes"])


_UNITS = {"": 1, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def _quantity(value: str | int) -> float:
    """A Kubernetes quantity (`64Gi`, `500m`, `8`) as a number."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(m|[KMGT]i|[kMGT])?", str(value))
    assert match, value
    number, unit = float(match[1]), match[2] or ""
    return number / 1000 if unit == "m" else number * _UNITS[unit]


def _k8s() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((DOCKER / "k8s" / "kustomization.yaml").read_text())
    documents = [
        doc
        for resource in kustomization["resources"]
        for doc in yaml.safe_load_all((DOCKER / "k8s" / resource).read_text())
    ]
    return {doc["kind"]: doc for doc in documents}


@pytest.fixture(scope="module")
def k8s() -> dict[str, dict[str, Any]]:
    return _k8s()


def test_k8s_runs_several_replicas_with_the_probes(k8s: dict[str, dict[str, Any]]) -> None:
    deployment = k8s["Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == SERVED_PORTS
    startup = container["startupProbe"]
    assert ports[startup["httpGet"]["port"]] == SERVED_PORTS["http"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 30 * 60  # loading a large model
    readiness = container["readinessProbe"]
    assert readiness["exec"]["command"] == READY
    # Liveness judges whether the replica recovers by itself (an engine restart does): it fails only
    # where it will not, so the pod goes at once, yet not on one slow answer.
    liveness = container["livenessProbe"]
    assert liveness["exec"]["command"] == LIVE
    assert liveness["failureThreshold"] >= 2
    assert liveness["periodSeconds"] * liveness["failureThreshold"] <= REPLACE_WITHIN_S
    # Stopped, the server waits this long for requests in flight (a dead stub's never end), then exits.
    assert pod["spec"]["terminationGracePeriodSeconds"] >= int(_flag("exit-timeout-secs"))
    config = container["image"].rsplit(":", 1)[1]
    resources = container["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == _tensor_parallel(config)
    assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"]
    assert _quantity(resources["requests"]["cpu"]) >= 1
    # /dev/shm is memory-backed: the pod's memory holds it beside the processes.
    shm_limit = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")["emptyDir"]["sizeLimit"]
    assert _quantity(resources["requests"]["memory"]) > _quantity(shm_limit)
    assert _quantity(resources["limits"]["memory"]) >= _quantity(resources["requests"]["memory"])
    # Stopped, the pod first leaves the Service while it still serves, then the server drains what is in
    # flight: both within the grace period, after which the kubelet kills.
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep" and int(pre_stop[1]) >= 5
    drain_s = int(pre_stop[1]) + int(_flag("exit-timeout-secs"))
    assert pod["spec"]["terminationGracePeriodSeconds"] >= drain_s
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
    assert mounts["/models"] in volumes
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()


def test_k8s_service_and_metrics_scrape_match_the_pods(k8s: dict[str, dict[str, Any]]) -> None:
    pod = k8s["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    container_ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    service = k8s["Service"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for name, port in service_ports.items():
        assert port["targetPort"] in container_ports, name
        assert port["port"] == container_ports[port["targetPort"]], name
    assert set(service_ports) == set(SERVED_PORTS)
    monitor = k8s["ServiceMonitor"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics"
    assert service_ports[endpoint["port"]]["targetPort"] == "metrics"
    annotations = pod["metadata"]["annotations"]
    assert int(annotations["prometheus.io/port"]) == SERVED_PORTS["metrics"]
    assert annotations["prometheus.io/path"] == "/metrics"
