"""Synthetic images and videos: random pixels, so the multimodal cache never hits across requests."""

from __future__ import annotations

import numpy as np


def random_image(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """An RGB uint8 image of shape (height, width, 3)."""
    return rng.integers(0, 256, size=(height, width, 3), dtype=np.uint8)


def random_video(frames: int, height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """RGB uint8 frames of shape (frames, height, width, 3)."""
    return rng.integers(0, 256, size=(frames, height, width, 3), dtype=np.uint8)
