"""core.runtime.cpu_features: the native-bfloat16 probe and its /proc/cpuinfo fallback."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.runtime import cpu_features


@pytest.mark.parametrize(
    "flags, expected",
    [
        ("fpu sse2 avx2 avx512f avx512_bf16 avx512_vnni", True),
        ("fpu sse2 avx2 amx_bf16 amx_tile", True),
        ("fpu sse2 avx2 avx512f avx512bw", False),  # AVX-512 alone emulates bfloat16
    ],
)
def test_cpuinfo_flags(tmp_path: Path, flags: str, expected: bool) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nmodel name\t: Some CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\n")
    assert cpu_features.cpuinfo_has_bf16(info) is expected


def test_unreadable_or_flagless_cpuinfo_is_no(tmp_path: Path) -> None:
    assert cpu_features.cpuinfo_has_bf16(tmp_path / "missing") is False
    (tmp_path / "arm").write_text("processor\t: 0\nFeatures\t: fp asimd\n")
    assert cpu_features.cpuinfo_has_bf16(tmp_path / "arm") is False


def test_probe_agrees_with_this_machines_cpuinfo() -> None:
    """torch's own probes and the kernel's flags tell the same story on this machine."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo here")
    assert cpu_features.native_bf16() is cpu_features.cpuinfo_has_bf16(cpuinfo)
