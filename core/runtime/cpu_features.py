"""Owns what this machine's CPU offers torch beyond plain fp32: native bfloat16 matmuls.

``native_bf16()`` is True on an x86 CPU with AVX512-BF16 or AMX tiles, where oneDNN runs bfloat16
matmuls in hardware (measured on the 2-core AMD EPYC these machines have: the demo's tiny model
trained its warm start 1.8x faster under full bfloat16 autocast, 1.4x with ``mixed_bf16``'s fp32
islands, docs/results.md). Elsewhere autocast
emulates bfloat16 and training gets slower, so the demo only asks for ``mixed_bf16`` where this
says yes. Read from torch's own CPU probes, with /proc/cpuinfo's flags as the fallback when a
torch build lacks them.
"""

from __future__ import annotations

import functools
from pathlib import Path

_CPUINFO_FLAGS = ("avx512_bf16", "amx_bf16")


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
