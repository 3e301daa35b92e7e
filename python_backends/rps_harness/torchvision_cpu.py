"""Lets PyPI's CUDA build of torchvision import beside a CPU-only torch.

torchvision registers fake kernels for its C++ operators when it is imported. With a CPU-only torch
its CUDA extension cannot load, those operators do not exist, and `import torchvision` fails
("operator torchvision::nms does not exist"). Qwen2-VL's video processor needs only torchvision's
Python transforms, so just before torchvision is first imported we declare placeholder schemas for
the operators it registers. They have no kernels: calling one raises. Nothing happens when torch
has CUDA or torchvision is a CPU build. `make setup` installs a .pth file that calls `install()` at
interpreter start-up, so every process of the virtualenv (vLLM's engine core, Triton's Python
backend stub) gets it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

_OPERATORS = (
    "nms",
    "qnms",
    "roi_align",
    "_roi_align_backward",
    "roi_pool",
    "_roi_pool_backward",
    "ps_roi_align",
    "_ps_roi_align_backward",
    "ps_roi_pool",
    "_ps_roi_pool_backward",
    "deform_conv2d",
    "_deform_conv2d_backward",
)


def _is_cuda_build(package_dir: Path) -> bool:
    version = package_dir / "version.py"
    return version.is_file() and "+cu" in version.read_text()


def _declare_operators() -> None:
    import torch

    if torch.version.cuda is not None:
        return
    library = torch.library.Library("torchvision", "DEF")
    for name in _OPERATORS:
        library.define(f"{name}(Tensor x) -> Tensor")
    # Keep the library alive: dropping it would undefine the operators.
    _declare_operators.library = library  # type: ignore[attr-defined]


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "torchvision":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torchvision")
        if spec is not None and spec.origin and _is_cuda_build(Path(spec.origin).parent):
            _declare_operators()
        return spec


def install() -> None:
    """Arm the hook; a no-op once torchvision is imported or the hook is armed."""
    if "torchvision" in sys.modules or any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _BeforeTorchvision())
