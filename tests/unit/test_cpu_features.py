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


def test_cpu_model_from_cpuinfo_or_the_platform(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum\n")
    assert cpu_features.cpu_model(info) == "Intel(R) Xeon(R) Platinum"
    assert cpu_features.cpu_model(tmp_path / "missing")  # the platform's name, never empty


def test_describe_names_the_isa_caps_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in cpu_features.ISA_CAP_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert cpu_features.describe()["isa_caps"] == {}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    described = cpu_features.describe()
    assert described["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "default"}
    assert described["cores"] >= 1 and described["model"] and described["capability"]
