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
from itertools import accumulate, islice
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


ROLE_CODES = ("system", "user", "assistant")  # plain_columns_batch's role codes 0, 1, 2
_CODE = bytes(range(256)).translate(bytes((b - 48) % 256 for b in range(256)))  # b"0" -> 0, b"1" -> 1


def plain_columns_batch(
    schema: Any,
    sample_ids: list[str],
    kinds: list[str],
    rewards: list[float | None],
    provenances: list[str],
    counts: list[int],
    messages: tuple[str, str, str, str, list[Any], list[Any], list[Any]],
) -> Any:
    """The record batch of plain samples given as columns (the database's rendering,
    core.store.export_lines): per sample its ids, reward, provenance JSON text (as ``_json``
    writes it) and message count; their messages (in order, all samples together) as the role
    codes (one digit each, ``ROLE_CODES``), the contents joined, their UTF-8 lengths (comma
    separated), the weights (one digit each), and lists of tool_call_id, name and reasoning. No
    tool calls, no tools. The same batch ``parquet_batch`` makes of the samples, built from
    buffers: no Python object per role, content or weight."""
    import pyarrow as pa

    roles, contents, lengths, weights, ids, names, reasonings = messages
    n = len(roles)
    struct = schema.field("messages").type.value_type
    role_codes = pa.Array.from_buffers(pa.int8(), n, [None, pa.py_buffer(roles.encode().translate(_CODE))])
    role = pa.DictionaryArray.from_arrays(role_codes, pa.array(ROLE_CODES)).cast(struct.field("role").type)
    data = contents.encode()
    ends = [int(x) for x in lengths.split(",")] if n else []
    offsets = pa.array([0, *accumulate(ends)], pa.int32())
    if offsets[-1].as_py() != len(data):
        raise ValueError(f"content lengths sum to {offsets[-1]}, not the {len(data)} bytes given")
    content = pa.Array.from_buffers(pa.string(), n, [None, offsets.buffers()[1], pa.py_buffer(data)])
    weight_codes = pa.py_buffer(weights.encode().translate(_CODE))
    weight = pa.Array.from_buffers(struct.field("weight").type, n, [None, weight_codes])
    columns = {
        "role": role,
        "content": content,
        "weight": weight,
        "id": ids,
        "mname": names,
        "reasoning": reasonings,
    }
    calls: tuple[list[str], list[str], list[str], list[int]] = ([], [], [], [0] * (n + 1))
    sample_offsets = [0, *accumulate(counts)]
    return _assemble(
        schema,
        columns,
        calls,
        sample_offsets,
        sample_ids,
        kinds,
        rewards,
        provenances,
        ["[]"] * len(sample_ids),
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
