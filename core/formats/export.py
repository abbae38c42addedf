"""Owns the dataset file formats on the export side: streamed writers of training samples, the
internal sample file, and the reader of general chat data.

Formats (one JSON object per line unless noted):

* ``openai``: OpenAI fine-tuning JSONL, ``{"messages": [{"role", "content", "weight"?}]}`` where
  every assistant message carries ``weight`` 0/1 (the per-message loss flag).
* ``sharegpt``: ShareGPT / AgentGym, ``{"id", "conversations": [{"from", "value", "loss"}]}`` with
  ``from`` in system / human / gpt and ``loss`` true/false on gpt turns, null elsewhere (AgentGym).
* ``samples``: the internal format, one serialised ``TrainingSample`` per line (ids, kind, reward,
  provenance kept): what a training job reads back with ``read_samples_jsonl``.
* Parquet (``write_parquet``): one row per sample (``parquet_schema``), written in row groups with
  pyarrow so only one chunk sits in memory; readable by HF ``datasets`` (``Dataset.from_parquet``).
  ``parquet_batch`` turns a chunk of samples into one columnar record batch; any other Parquet
  writer (the HTTP export) uses it too.

Writers are iterators (and async iterators) of lines, so a caller can stream a dataset from the
store into a file or an HTTP response; ``write_jsonl`` / ``write_parquet`` write to a temporary file
and rename it, so a failure never leaves a half-written file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any, Literal

from core.domain.ids import derived_id
from core.domain.serde import from_dict, to_dict
from core.domain.trajectory import Message, TrainingSample

ExportFormat = Literal["openai", "sharegpt", "samples"]
FORMATS: tuple[str, ...] = ("openai", "sharegpt", "samples")

_TO_SHAREGPT = {"system": "system", "user": "human", "assistant": "gpt"}
_FROM_SHAREGPT = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
}


class FormatError(ValueError):
    """A file or record is not in the expected format; the message names the file and line."""


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def openai_record(sample: TrainingSample) -> dict[str, Any]:
    msgs: list[dict[str, Any]] = []
    for m in sample.messages:
        rec: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.role == "assistant":
            rec["weight"] = 1 if m.weight else 0
        msgs.append(rec)
    return {"messages": msgs}


def sharegpt_record(sample: TrainingSample) -> dict[str, Any]:
    conv = [
        {
            "from": _TO_SHAREGPT[m.role],
            "value": m.content,
            "loss": bool(m.weight) if m.role == "assistant" else None,
        }
        for m in sample.messages
    ]
    return {"id": sample.sample_id, "conversations": conv}


def samples_record(sample: TrainingSample) -> dict[str, Any]:
    data: dict[str, Any] = to_dict(sample)
    return data


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
    target = Path(path)
    lines = iter_lines(samples, fmt)
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


_provenance_json = json.JSONEncoder(sort_keys=True).encode  # = json.dumps(sort_keys=True), one encoder


def parquet_schema() -> Any:
    """The ``pyarrow.Schema`` of a Parquet dataset: one row per sample, messages as a list of
    structs. Every Parquet writer of samples (``write_parquet``, the HTTP export) uses this one."""
    import pyarrow as pa

    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("weight", pa.int8())])
    return pa.schema(
        [
            ("sample_id", pa.string()),
            ("kind", pa.string()),
            ("reward", pa.float64()),
            ("messages", pa.list_(message)),
            ("provenance", pa.string()),  # JSON text: provenance values are heterogeneous
        ]
    )


def parquet_batch(samples: Sequence[TrainingSample], schema: Any | None = None) -> Any:
    """``samples`` as one ``pyarrow.RecordBatch`` of ``parquet_schema()``, built column by column.

    The messages column is assembled from flat role / content / weight arrays plus list offsets,
    so no per-message Python dict is made and pyarrow never infers nested Python objects.
    """
    import pyarrow as pa

    schema = parquet_schema() if schema is None else schema
    message_type = schema.field("messages").type
    roles: list[str] = []
    contents: list[str] = []
    weights: list[int] = []
    offsets = [0]
    for sample in samples:
        for m in sample.messages:
            roles.append(m.role)
            contents.append(m.content)
            weights.append(m.weight)
        offsets.append(len(roles))
    struct = message_type.value_type
    messages = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.StructArray.from_arrays(
            [
                pa.array(roles, struct.field("role").type),
                pa.array(contents, struct.field("content").type),
                pa.array(weights, struct.field("weight").type),
            ],
            fields=list(struct),
        ),
        type=message_type,
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([s.sample_id for s in samples], pa.string()),
            pa.array([s.kind for s in samples], pa.string()),
            pa.array([s.reward for s in samples], pa.float64()),
            messages,
            pa.array([_provenance_json(s.provenance) for s in samples], pa.string()),
        ],
        schema=schema,
    )


def write_parquet(path: str | Path, samples: Iterable[TrainingSample], row_group_size: int = 1000) -> int:
    """Write samples as Parquet, ``row_group_size`` rows at a time (only one group in memory)."""
    import pyarrow.parquet as pq

    if row_group_size < 1:
        raise FormatError(f"row_group_size must be >= 1, got {row_group_size}")
    target = Path(path)
    schema = parquet_schema()
    fd, tmp = _atomic_target(target)
    os.close(fd)
    count = 0
    it = iter(samples)
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            while chunk := list(islice(it, row_group_size)):
                writer.write_batch(parquet_batch(chunk, schema), row_group_size=row_group_size)
                count += len(chunk)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def iter_parquet(path: str | Path, batch_size: int = 1000) -> Iterator[TrainingSample]:
    """Read back a file written by ``write_parquet``, one record batch at a time."""
    import pyarrow.parquet as pq

    src = Path(path)
    if not src.is_file():
        raise FileNotFoundError(f"parquet dataset not found: {src}")
    pf = pq.ParquetFile(src)
    for batch in pf.iter_batches(batch_size=batch_size):
        for row in batch.to_pylist():
            yield TrainingSample(
                sample_id=row["sample_id"],
                kind=row["kind"],
                messages=tuple(Message(m["role"], m["content"], int(m["weight"])) for m in row["messages"]),
                reward=row["reward"],
                provenance=json.loads(row["provenance"] or "{}"),
            )


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


def _weight(value: Any, where: str) -> int:
    if value is None:
        return 1
    if value in (0, 1) or isinstance(value, bool):
        return int(value)
    raise FormatError(f"{where}: loss flag must be 0/1 or true/false, got {value!r}")


def general_record_to_sample(record: Any, where: str) -> TrainingSample:
    """An OpenAI-messages or ShareGPT-conversations record as a ``general`` training sample.

    Assistant turns are trained on unless the record says otherwise (``weight`` / ``loss``).
    The sample id is derived from the record's content, so re-reading a file gives the same ids.
    """
    if not isinstance(record, dict):
        raise FormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    msgs: list[Message] = []
    if isinstance(record.get("messages"), list):
        for m in record["messages"]:
            role = m.get("role") if isinstance(m, dict) else None
            if role not in ("system", "user", "assistant"):
                raise FormatError(f"{where}: unsupported message role {role!r}")
            content = m.get("content")
            if not isinstance(content, str):
                raise FormatError(f"{where}: message content must be text, got {type(content).__name__}")
            w = _weight(m.get("weight"), where) if role == "assistant" else 0
            msgs.append(Message(role, content, w))
    elif isinstance(record.get("conversations"), list):
        for turn in record["conversations"]:
            who = turn.get("from") if isinstance(turn, dict) else None
            role = _FROM_SHAREGPT.get(who) if isinstance(who, str) else None
            if role is None:
                raise FormatError(f"{where}: unsupported ShareGPT speaker {who!r}")
            value = turn.get("value")
            if not isinstance(value, str):
                raise FormatError(f"{where}: conversation value must be text")
            w = _weight(turn.get("loss"), where) if role == "assistant" else 0
            msgs.append(Message(role, value, w))  # type: ignore[arg-type]
    else:
        raise FormatError(f"{where}: neither 'messages' (OpenAI) nor 'conversations' (ShareGPT) found")
    if not any(m.role == "assistant" for m in msgs):
        raise FormatError(f"{where}: conversation has no assistant turn")
    sid = derived_id("general", json.dumps(record, sort_keys=True, ensure_ascii=False))
    return TrainingSample(sample_id=sid, kind="general", messages=tuple(msgs), provenance={"source": where})


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
