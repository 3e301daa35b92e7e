"""What the machine has, decided apart from the code under test, so that a test knows its outcome."""

from __future__ import annotations

from pathlib import Path

# NVIDIA's kernel driver announces itself here; without it NVML cannot start.
HAS_NVIDIA_DRIVER = Path("/proc/driver/nvidia/version").is_file()
