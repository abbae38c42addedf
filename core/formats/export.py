"""Owns the dataset files on the export side: streamed writers of training samples in every
format, the internal sample file, and the reader of general chat data files.

Formats (one JSON object per line; the record shapes live in core.formats.records):

* ``openai``: OpenAI fine-tuning JSONL with ``tools``, assistant ``tool_calls`` (arguments as a
  JSON string), ``tool`` messages with ``tool_call_id`` and ``weight`` 0/1 on assistant messages.
* ``sharegpt``: ShareGPT / AgentGym ``conversations`` of ``{from, value, loss}``; samples with tools
  in the LLaMA-Factory convention (``function_call`` / ``observation`` turns, ``tools`` as a JSON
  string, ``system`` field).
* ``samples``: the internal format, one serialised ``TrainingSample`` per line (ids, kind, reward,
  provenance, tools kept): what a training job reads back with ``read_samples_jsonl``.
* Parquet (core.formats.parquet, re-exported here): one row per sample, in row groups.

Writers are iterators (and async iterators) of lines, so a caller can stream a dataset from the
store into a file or an HTTP response; ``write_jsonl`` / ``write_parquet`` write to a temporary file
and rename it, so a failure never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import orjson

from core.domain.serde import from_dict
from core.domain.trajectory import TrainingSample
from core.formats.parquet import iter_parquet, parquet_batch, parquet_schema, write_parquet
from core.formats.records import (
    FormatError,
    general_record_to_sample,
    openai_record,
    samples_record,
    sharegpt_record,
)

__all__ = [
    "FORMATS",
    "ExportFormat",
    "FormatError",
    "aiter_lines",
    "file_fingerprint",
    "general_record_to_sample",
    "iter_lines",
    "iter_parquet",
    "loads",
    "loads_many",
    "dumps_line",
    "record_fn",
    "openai_record",
    "parquet_batch",
    "parquet_schema",
    "read_general_chat",
    "read_samples_jsonl",
    "samples_record",
    "sharegpt_record",
    "write_jsonl",
    "write_lines",
    "write_parquet",
]

ExportFormat = Literal["openai", "sharegpt", "samples"]
FORMATS: tuple[str, ...] = ("openai", "sharegpt", "samples")


# a negative exponent ending where a JSON number ends: a float orjson may write unlike json ("e-" in
# a string, say inside an id like "...9e-4f1a...", is not one, and its line needs no second encoder)
_EXPONENT = re.compile(rb"[0-9]e-[0-9]+[,}\]\n]")
_DIGITS_ONLY = bytes(48 if 48 <= c <= 57 else 32 for c in range(256))  # every digit "0", the rest blank
_LONG_DIGITS = b"0" * 19  # after the translation: a run of 19 or more digits
# dataclasses and datetimes are not JSON to ``json``: orjson must refuse them too, not encode them
_ORJSON_OPTIONS = (
    orjson.OPT_APPEND_NEWLINE | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)


def _dumps(obj: Any) -> str:
    return dumps_line(obj).decode()


def dumps_line(obj: Any) -> bytes:
    """``obj`` as one compact JSON line in UTF-8, byte for byte what
    ``json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\\n"`` gives.

    orjson writes the same bytes for strings, integers, booleans, null and most floats; it differs
    only on floats below 1e-4 (``0.00001`` / ``1e-7`` where ``json`` writes ``1e-05`` / ``1e-07``)
    and refuses what it cannot encode (integers beyond 64 bits, lone surrogates). A line with a
    ``0.0000`` anywhere or a number ending in a negative exponent (``_EXPONENT``: such a float, or
    a string that merely looks like one) and any refused value are encoded by ``json`` instead,
    so the output never depends on the encoder.
    """
    try:
        out = orjson.dumps(obj, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: a value json encodes (or refuses) its own way
        return _json_line(obj)
    if b"0.0000" in out or (b"e-" in out and _EXPONENT.search(out)):
        return _json_line(obj)
    return out


def _json_line(obj: Any) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def loads(text: str | bytes) -> Any:
    """Parse JSON text read from the store: orjson, except for text with a run of 19 or more
    digits (orjson reads an integer beyond 64 bits as a float; ``json`` keeps it exact), so both
    paths read the same values. (The digit-run test is a byte translation and a substring
    search: a regular expression would cost more than the parse.)"""
    data = text.encode() if isinstance(text, str) else text
    if _LONG_DIGITS not in data.translate(_DIGITS_ONLY):
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # let json raise (or read) it with its own message
    return json.loads(text)


def loads_many(texts: Sequence[str]) -> list[Any]:
    """``loads`` of each of ``texts``, with the digit-run test made once for the whole batch (a
    text holding a run of 19 or more digits sends the batch through ``loads`` one by one)."""
    if _LONG_DIGITS not in "\n".join(texts).encode().translate(_DIGITS_ONLY):
        try:
            return [orjson.loads(text) for text in texts]
        except orjson.JSONDecodeError:
            pass  # let loads raise (or read) it with json's message
    return [loads(text) for text in texts]


_RECORD: dict[str, Callable[[TrainingSample], dict[str, Any]]] = {
    "openai": openai_record,
    "sharegpt": sharegpt_record,
    "samples": samples_record,
}


def _record_fn(fmt: str) -> Callable[[TrainingSample], dict[str, Any]]:
    try:
        return _RECORD[fmt]
    except KeyError:
        raise FormatError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}") from None


def iter_lines(samples: Iterable[TrainingSample], fmt: ExportFormat | str) -> Iterator[str]:
    """One JSON line (ending in a newline) per sample, produced lazily."""
    record = _record_fn(fmt)
    for s in samples:
        yield _dumps(record(s))


def record_fn(fmt: ExportFormat | str) -> Callable[[TrainingSample], dict[str, Any]]:
    """The record builder of ``fmt`` (openai, sharegpt or samples)."""
    return _record_fn(fmt)


async def aiter_lines(samples: AsyncIterable[TrainingSample], fmt: ExportFormat | str) -> AsyncIterator[str]:
    """Async twin of ``iter_lines`` (e.g. samples streamed from the store into an HTTP response)."""
    record = _record_fn(fmt)
    async for s in samples:
        yield _dumps(record(s))


def _atomic_target(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)


def write_jsonl(path: str | Path, samples: Iterable[TrainingSample], fmt: ExportFormat | str) -> int:
    """Stream ``samples`` into ``path`` in ``fmt``; returns the number written. Atomic (temp + rename)."""
    return write_lines(path, iter_lines(samples, fmt))


def write_lines(path: str | Path, lines: Iterable[str]) -> int:
    """Write ``lines`` into ``path``; returns how many. Atomic (temp + rename)."""
    target = Path(path)
    fd, tmp = _atomic_target(target)
    count = 0
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for line in lines:
                fh.write(line)
                count += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def _open_lines(path: Path) -> Iterator[tuple[int, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"data file not found: {path}")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                yield lineno, line


def read_samples_jsonl(path: str | Path) -> Iterator[TrainingSample]:
    """Stream the internal ``samples`` format back into ``TrainingSample`` objects."""
    src = Path(path)
    for lineno, line in _open_lines(src):
        try:
            yield from_dict(TrainingSample, json.loads(line))
        except (ValueError, TypeError, KeyError) as exc:
            raise FormatError(f"{src}:{lineno}: not a training sample: {exc}") from exc


def read_general_chat(path: str | Path) -> Iterator[TrainingSample]:
    """Stream general chat data from a ShareGPT or OpenAI JSONL file (formats may mix per line).

    A ``.json`` file holding one JSON array (the common ShareGPT dump) is also accepted; it is
    parsed whole. A missing file raises ``FileNotFoundError`` naming the path; a bad record raises
    ``FormatError`` naming ``path:line``.
    """
    src = Path(path)
    if not src.is_file():
        raise FileNotFoundError(f"general chat data file not found: {src}")
    with src.open(encoding="utf-8") as fh:
        head = fh.read(64).lstrip()
    if head.startswith("["):
        try:
            records = json.loads(src.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise FormatError(f"{src}: invalid JSON: {exc}") from exc
        for i, rec in enumerate(records):
            yield general_record_to_sample(rec, f"{src}#{i}")
        return
    for lineno, line in _open_lines(src):
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FormatError(f"{src}:{lineno}: invalid JSON: {exc}") from exc
        yield general_record_to_sample(rec, f"{src}:{lineno}")


def file_fingerprint(path: str | Path) -> str:
    """``"<path> sha256=<hex>"``: what a dataset manifest records about its general-data file."""
    import hashlib

    src = Path(path)
    if not src.is_file():
        raise FileNotFoundError(f"data file not found: {src}")
    h = hashlib.sha256()
    with src.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return f"{src} sha256={h.hexdigest()}"
