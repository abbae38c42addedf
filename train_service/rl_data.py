"""Owns the files of the non-SFT learners: preference pairs (DPO) and transitions (ArCHer) as JSONL.

One record per line, the domain object through ``core.domain.serde`` (``PreferencePair`` /
``Transition``), written atomically (temp file + rename) beside a ``.manifest.json`` of the
manifest. ``read_*`` raise ``FormatError``-style ``ValueError``s naming the file and line.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from core.domain.preferences import PreferencePair
from core.domain.serde import from_dict, to_dict
from core.domain.transitions import Transition

T = TypeVar("T")


def write_records(path: str | Path, records: Iterable[Any], manifest: Any | None = None) -> int:
    """Write ``records`` (dataclasses) as JSONL into ``path`` atomically; returns how many."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for record in records:
                fh.write(json.dumps(to_dict(record), ensure_ascii=False, sort_keys=True) + "\n")
                count += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if manifest is not None:
        manifest_path(target).write_text(json.dumps(to_dict(manifest), indent=1, sort_keys=True))
    return count


def manifest_path(path: str | Path) -> Path:
    target = Path(path)
    return target.with_name(target.name.removesuffix(".jsonl") + ".manifest.json")


def _read(path: str | Path, cls: type[T]) -> Iterator[T]:
    src = Path(path)
    if not src.is_file():
        raise FileNotFoundError(f"data file not found: {src}")
    with src.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield from_dict(cls, json.loads(line))
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"{src}:{lineno}: not a {cls.__name__}: {exc}") from exc


def read_preference_pairs(path: str | Path) -> list[PreferencePair]:
    return list(_read(path, PreferencePair))


def read_transitions(path: str | Path) -> list[Transition]:
    return list(_read(path, Transition))
