"""Owns the Parquet form of training samples: the public schema, columnar batches, file write/read.

One row per sample (``parquet_schema``): ``sample_id``, ``kind``, ``reward``, ``messages`` (a list
of structs ``role, content, weight, tool_calls, tool_call_id, name, reasoning`` where
``tool_calls`` is a list of ``{id, name, arguments}`` with arguments as JSON text, as in the OpenAI
format), ``provenance`` and ``tools`` (both JSON text: their values are heterogeneous). Files are
written in row groups with pyarrow so only one chunk sits in memory, and are readable by HF
``datasets`` (``Dataset.from_parquet``). ``parquet_batch`` turns a chunk of samples into one
columnar record batch; every Parquet writer of samples (``write_parquet``, the HTTP export) uses it.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from pathlib import Path
from typing import Any

from core.domain.trajectory import Message, ToolCall, TrainingSample
from core.formats.records import FormatError

_json = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode  # one encoder, sorted keys


def _atomic_target(path: Path) -> tuple[int, str]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)


def parquet_schema() -> Any:
    """The ``pyarrow.Schema`` of a Parquet dataset (see the module docstring)."""
    import pyarrow as pa

    call = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("weight", pa.int8()),
            ("tool_calls", pa.list_(call)),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
            ("reasoning", pa.string()),
        ]
    )
    return pa.schema(
        [
            ("sample_id", pa.string()),
            ("kind", pa.string()),
            ("reward", pa.float64()),
            ("messages", pa.list_(message)),
            ("provenance", pa.string()),  # JSON text
            ("tools", pa.string()),  # JSON text: a list of OpenAI function definitions
        ]
    )


def _field(sample: TrainingSample | dict[str, Any], name: str) -> Any:
    """A sample-level field of a TrainingSample or of a plain stored sample dict (its defaults)."""
    if not isinstance(sample, dict):
        return getattr(sample, name)
    if name in ("sample_id", "kind"):
        return sample[name]
    if name == "reward":
        return sample.get("reward")
    if name == "provenance":
        return sample.get("provenance") or {}
    return tuple(sample.get("tools") or ())


def parquet_batch(samples: Sequence[TrainingSample | dict[str, Any]], schema: Any | None = None) -> Any:
    """``samples`` as one ``pyarrow.RecordBatch`` of ``parquet_schema()``, built column by column.
    A sample is a TrainingSample or a plain stored sample dict (``core.formats.records.is_plain``),
    which gives the same row as the TrainingSample it decodes to.

    The nested columns are assembled from flat arrays plus list offsets, so no per-message Python
    dict is made and pyarrow never infers nested Python objects.
    """
    schema = parquet_schema() if schema is None else schema
    columns: dict[str, list[Any]] = {n: [] for n in ("role", "content", "weight", "id", "mname", "reasoning")}
    call_ids: list[str] = []
    call_names: list[str] = []
    call_args: list[str] = []
    call_offsets = [0]
    offsets = [0]
    plain_columns = all(isinstance(sample, dict) for sample in samples)
    if plain_columns:  # plain stored samples only: each column in one pass
        plain: list[dict[str, Any]] = list(samples)  # type: ignore[arg-type]
        flat = [d for stored in plain for d in stored["messages"]]
        columns["role"] = [d["role"] for d in flat]
        columns["content"] = [d["content"] for d in flat]
        columns["weight"] = [d.get("weight", 0) for d in flat]
        columns["id"] = [d.get("tool_call_id") for d in flat]
        columns["mname"] = [d.get("name") for d in flat]
        columns["reasoning"] = [d.get("reasoning", "") for d in flat]
        call_offsets = [0] * (len(flat) + 1)  # plain messages call no tools
        for stored in plain:
            offsets.append(offsets[-1] + len(stored["messages"]))
    for sample in () if plain_columns else samples:
        if isinstance(sample, dict):  # a plain stored sample (core.formats.records.is_plain)
            for d in sample["messages"]:
                columns["role"].append(d["role"])
                columns["content"].append(d["content"])
                columns["weight"].append(d.get("weight", 0))
                columns["id"].append(d.get("tool_call_id"))
                columns["mname"].append(d.get("name"))
                columns["reasoning"].append(d.get("reasoning", ""))
                call_offsets.append(len(call_ids))
            offsets.append(len(columns["role"]))
            continue
        for m in sample.messages:
            columns["role"].append(m.role)
            columns["content"].append(m.content)
            columns["weight"].append(m.weight)
            columns["id"].append(m.tool_call_id)
            columns["mname"].append(m.name)
            columns["reasoning"].append(m.reasoning)
            for call in m.tool_calls:
                call_ids.append(call.call_id)
                call_names.append(call.name)
                call_args.append(call.arguments)
            call_offsets.append(len(call_ids))
        offsets.append(len(columns["role"]))
    return _assemble(
        schema,
        columns,
        (call_ids, call_names, call_args, call_offsets),
        offsets,
        [_field(s, "sample_id") for s in samples],
        [_field(s, "kind") for s in samples],
        [_field(s, "reward") for s in samples],
        [_json(_field(s, "provenance")) for s in samples],
        [_json(list(_field(s, "tools"))) for s in samples],
    )


def _assemble(
    schema: Any,
    columns: dict[str, Any],
    calls_columns: tuple[list[str], list[str], list[str], list[int]],
    offsets: list[int],
    sample_ids: list[Any],
    kinds: list[Any],
    rewards: list[Any],
    provenances: list[str],
    tools: list[str],
) -> Any:
    """The record batch of flat message ``columns`` (role, content, weight, id, mname, reasoning),
    their tool calls (ids, names, arguments, per-message offsets), per-sample message ``offsets``
    and the sample-level columns (provenance and tools as their JSON text)."""
    import pyarrow as pa

    message_type = schema.field("messages").type
    struct = message_type.value_type
    call_type = struct.field("tool_calls").type
    call_ids, call_names, call_args, call_offsets = calls_columns
    calls = pa.ListArray.from_arrays(
        pa.array(call_offsets, pa.int32()),
        pa.StructArray.from_arrays(
            [
                pa.array(call_ids, pa.string()),
                pa.array(call_names, pa.string()),
                pa.array(call_args, pa.string()),
            ],
            fields=list(call_type.value_type),
        ),
        type=call_type,
    )

    def array(values: Any, kind: Any) -> Any:
        return values if isinstance(values, pa.Array) else pa.array(values, kind)

    messages = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()),
        pa.StructArray.from_arrays(
            [
                array(columns["role"], struct.field("role").type),
                array(columns["content"], struct.field("content").type),
                array(columns["weight"], struct.field("weight").type),
                calls,
                array(columns["id"], pa.string()),
                array(columns["mname"], pa.string()),
                array(columns["reasoning"], pa.string()),
            ],
            fields=list(struct),
        ),
        type=message_type,
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array(sample_ids, pa.string()),
            pa.array(kinds, pa.string()),
            pa.array(rewards, pa.float64()),
            messages,
            pa.array(provenances, pa.string()),
            pa.array(tools, pa.string()),
        ],
        schema=schema,
    )


def rendered_batch(block: bytes, schema: Any) -> Any:
    """The record batch ``parquet_batch`` makes of plain stored samples given as the database
    renders them (core.store.export_lines, Parquet): NDJSON lines ``{"p": provenance JSON text (as
    ``_json`` writes it), "s": the stored sample without its provenance and tools}``. pyarrow's
    JSON reader parses the block against an explicit schema of the stored sample, so no Python
    object is made per sample or message; a key it does not know, a value of another type, or a
    missing role, content or tool call field (which Python would not read as such) raises
    ValueError, and the caller renders those samples in Python. An absent weight is 0, an absent
    reasoning ``""`` and absent or null tool calls none, as Python reads them (the database leaves
    an explicit null weight or reasoning to Python)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    list_type = schema.field("messages").type
    message = list_type.value_type
    stored = pa.struct([("sample_id", pa.string()), ("kind", pa.string()), ("reward", pa.float64())])
    stored = pa.struct([*stored, ("messages", pa.list_(pa.struct([*message, ("why", pa.string())])))])
    options = pj.ParseOptions(
        explicit_schema=pa.schema([("p", pa.string()), ("s", stored)]), unexpected_field_behavior="error"
    )
    try:
        table = pj.read_json(
            pa.BufferReader(block),
            read_options=pj.ReadOptions(use_threads=True, block_size=1 << 18),
            parse_options=options,
        ).combine_chunks()
    except pa.ArrowInvalid as exc:
        raise ValueError(f"rendered samples not of the plain shape: {exc}") from exc
    samples = table.column("s").chunk(0)
    messages = samples.field("messages")
    flat = messages.values
    calls = flat.field("tool_calls")
    checked = [samples, messages, flat.field("role"), flat.field("content"), *calls.values.flatten()]
    if any(array.null_count for array in checked):
        raise ValueError("rendered samples with a missing sample, message list, role, content or call field")
    columns = {
        "weight": pc.fill_null(flat.field("weight"), 0),
        "reasoning": pc.fill_null(flat.field("reasoning"), ""),
        "tool_calls": pa.ListArray.from_arrays(
            calls.offsets, calls.values, type=message.field("tool_calls").type
        ),
    }
    struct = pa.StructArray.from_arrays(
        [columns.get(field.name, flat.field(field.name)) for field in message], fields=list(message)
    )
    return pa.RecordBatch.from_arrays(
        [
            samples.field("sample_id"),
            samples.field("kind"),
            samples.field("reward"),
            pa.ListArray.from_arrays(messages.offsets, struct, type=list_type),
            table.column("p").chunk(0),
            pa.array(["[]"] * len(samples), pa.string()),
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


def _message(m: dict[str, Any]) -> Message:
    calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in m.get("tool_calls") or ())
    return Message(
        m["role"],
        m["content"],
        int(m["weight"]),
        tool_calls=calls,
        tool_call_id=m.get("tool_call_id"),
        name=m.get("name"),
        reasoning=m.get("reasoning") or "",
    )


def iter_parquet(path: str | Path, batch_size: int = 1000) -> Iterator[TrainingSample]:
    """Read back a file written by ``write_parquet``, one record batch at a time (files written
    before tool calls existed, without the tool columns, read as samples without tools)."""
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
                messages=tuple(_message(m) for m in row["messages"]),
                reward=row["reward"],
                provenance=json.loads(row["provenance"] or "{}"),
                tools=tuple(json.loads(row.get("tools") or "[]")),
            )
