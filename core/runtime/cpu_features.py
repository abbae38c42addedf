"""Owns what this machine's CPU offers torch beyond plain fp32: native bfloat16 matmuls.

``native_bf16()`` is True on an x86 CPU with AVX512-BF16 or AMX tiles, where oneDNN runs bfloat16
matmuls in hardware, so bfloat16 training is faster there (docs/results.md has the figures).
Elsewhere autocast
emulates bfloat16 and training gets slower, so the demo only asks for ``mixed_bf16`` where this
says yes. Read from torch's own CPU probes, with /proc/cpuinfo's flags as the fallback when a
torch build lacks them.

``describe()`` is the CPU part of a run's recorded conditions (``core.runtime.torch_threads.
run_conditions``): the model name, the vector ISA torch dispatches to, and the environment
variables that cap the ISA (``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``, ``MKL_ENABLE_INSTRUCTIONS``:
docs/testing.md "Testing on other CPUs"), since float results depend on which kernels ran.
"""

from __future__ import annotations

import functools
import os
import platform
from pathlib import Path
from typing import Any

_CPUINFO_FLAGS = ("avx512_bf16", "amx_bf16")
# the environment variables that cap the kernels torch's libraries dispatch to (oneDNN, ATen's
# vectorised kernels, MKL on Intel CPUs): set, they make this CPU compute like an older one
ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS")


@functools.cache
def native_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX)."""
    try:
        import torch

        probes = [
            getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
        ]
        if all(callable(probe) for probe in probes):
            return any(bool(probe()) for probe in probes)  # type: ignore[misc]
    except ImportError:
        pass
    return cpuinfo_has_bf16(Path("/proc/cpuinfo"))


def cpuinfo_has_bf16(cpuinfo: Path) -> bool:
    """Whether a /proc/cpuinfo-style file lists a native bfloat16 flag (False when unreadable)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.partition(":")[2].split())
            return any(flag in flags for flag in _CPUINFO_FLAGS)
    return False


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's model name (/proc/cpuinfo's ``model name``, else the platform's processor string)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def describe() -> dict[str, Any]:
    """The CPU a result was computed on: model name, logical cores, the vector ISA torch's own kernels
    dispatch to (``AVX2``, ``AVX512``, ``DEFAULT`` under ``ATEN_CPU_CAPABILITY=default``), native
    bfloat16, and the ISA caps set in the environment ({} when none)."""
    capability = "unknown"
    try:
        import torch

        capability = str(torch.backends.cpu.get_cpu_capability())
    except (ImportError, AttributeError):
        pass
    return {
        "model": cpu_model(),
        "cores": os.cpu_count() or 1,
        "capability": capability,
        "native_bf16": native_bf16(),
        "isa_caps": {name: os.environ[name] for name in ISA_CAP_VARIABLES if os.environ.get(name)},
    }
