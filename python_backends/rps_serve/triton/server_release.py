"""The Triton Inference Server releases RPS-Serve was tested on, and the start-up line that names any other.

Several parts of the serving code work around Triton 2.51's Python backend (docs/deploy.md, "Triton
releases"); later releases fix some of those faults and change some behaviour the code relies on. A
server on a release the tests have not run says so once, in its log, when `preprocess` loads; it still
serves (unlike the vLLM guard, `rps_serve.vllm_plugin.version`, nothing here reaches into Triton's
internals).

A Python-backend model learns the server's release from the environment: NVIDIA's containers set
`TRITON_SERVER_VERSION` (the server's version, e.g. 2.51.0) and `NVIDIA_TRITON_SERVER_VERSION` (the
container release, e.g. 24.10) in their image (the server's build.py writes both), the stub inherits
them, and the local launcher sets the first for the server it runs. Neither the model's `args` nor
`pb_utils` carry a version, and the server's HTTP metadata (`/v2`) is not served until every model has
loaded.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SERVER_VERSION_ENV = "TRITON_SERVER_VERSION"
CONTAINER_VERSION_ENV = "NVIDIA_TRITON_SERVER_VERSION"

# Server version -> container release, for the releases named below (one server release a month:
# 24.10 is 2.51.0, 26.11 is 2.75.0).
CONTAINER_OF = {"2.51.0": "24.10", "2.74.0": "26.10"}
# The releases the tests run on: the tritonserver of PyPI's nvidia-pytriton 0.7.0 (the CPU stack).
TESTED_SERVER_VERSIONS = ("2.51.0",)
# The release of the H100 image's base (docker/Dockerfile's TRITON_TAG): built for, not run by the tests.
IMAGE_CONTAINER_RELEASE = "26.10"


@dataclass(frozen=True)
class TritonRelease:
    """The running server's release as its environment tells it (either part may be unknown)."""

    server: str | None
    container: str | None

    def __str__(self) -> str:
        if self.server and self.container:
            return f"{self.server} (container {self.container})"
        if self.container:
            return f"container {self.container}"
        return self.server or "unknown"

    @property
    def tested(self) -> bool:
        if self.server is not None:
            return self.server in TESTED_SERVER_VERSIONS
        return self.container is not None and self.container in {
            CONTAINER_OF[v] for v in TESTED_SERVER_VERSIONS
        }


def running_release(environ: Mapping[str, str] | None = None) -> TritonRelease:
    """The release named by `SERVER_VERSION_ENV` and `CONTAINER_VERSION_ENV` (each None where unset)."""
    env = os.environ if environ is None else environ
    server = env.get(SERVER_VERSION_ENV, "").strip() or None
    container = env.get(CONTAINER_VERSION_ENV, "").strip() or None
    if container is None and server is not None:
        container = CONTAINER_OF.get(server)
    return TritonRelease(server, container)


def _tested() -> str:
    return ", ".join(f"{version} (container {CONTAINER_OF[version]})" for version in TESTED_SERVER_VERSIONS)


def release_message(release: TritonRelease) -> tuple[int, str]:
    """The level and text of the start-up line for `release`."""
    if release.tested:
        return logging.INFO, f"Triton Inference Server {release}: a release RPS-Serve is tested on"
    if release.server is None and release.container is None:
        return logging.WARNING, (
            f"Triton Inference Server release unknown ({SERVER_VERSION_ENV} and {CONTAINER_VERSION_ENV} "
            f"are unset, as NVIDIA's containers set them); RPS-Serve is tested on {_tested()}: "
            "see docs/deploy.md, Triton releases"
        )
    note = (
        "the H100 image's base, built for but not run by the tests"
        if release.container == IMAGE_CONTAINER_RELEASE
        else "its Python backend may differ from what the code works around"
    )
    return logging.WARNING, (
        f"Triton Inference Server {release} is a release RPS-Serve has not been tested on ({note}); "
        f"tested: {_tested()}; see docs/deploy.md, Triton releases"
    )


def log_triton_release(environ: Mapping[str, str] | None = None) -> TritonRelease:
    """Log one line naming the running release, a warning where it is not a tested one."""
    release = running_release(environ)
    level, message = release_message(release)
    logger.log(level, message)
    return release
