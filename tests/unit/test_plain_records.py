"""Dataset downloads build records of plain stored samples straight from their dicts
(core.formats.records ``*_plain``, ``parquet_batch`` with dicts) and encode lines with
``dumps_line``: each must give exactly what the TrainingSample path and ``json.dumps`` give."""

from __future__ import annotations

import json
from typing import Any

import pytest

from core.domain.serde import from_dict, to_dict
from core.domain.trajectory import Message, ToolCall, TrainingSample
from core.formats.export import dumps_line, loads, parquet_batch, record_fn
from core.formats.records import PLAIN_RECORD, is_plain


def _stored(sample: TrainingSample) -> dict[str, Any]:
    """The sample as the store holds it (serialised, then read back from JSON text)."""
    data: dict[str, Any] = json.loads(json.dumps(to_dict(sample)))
    return data


def _json_line(value: Any) -> bytes:
    return (json.dumps(value, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


PLAIN = [
    TrainingSample(
        "s1",
        "revision",
        (
            Message("system", "You craft items."),
            Message("user", "Goal: craft 1 stick é😀", name="alice"),
            Message("assistant", "Thought: logs.\nAction: get 1 oak logs", 0, reasoning="hmm", why="bad"),
            Message("user", "Got 1 oak logs"),
            Message("assistant", "Action: craft", 1, name="agent"),
        ),
        reward=0.75,
        provenance={"index": 3, "tiny": 1e-05, "nested": {"a": [1, 2.5, None, True]}},
    ),
    TrainingSample("s2", "general", (Message("user", ""), Message("assistant", "x", 1)), reward=None),
]


@pytest.mark.parametrize("sample", PLAIN, ids=["revision", "general"])
@pytest.mark.parametrize("fmt", ["openai", "sharegpt", "samples"])
def test_plain_record_equals_the_sample_record(sample: TrainingSample, fmt: str) -> None:
    data = _stored(sample)
    assert is_plain(data)
    ours = dumps_line(PLAIN_RECORD[fmt](data))
    assert ours == dumps_line(record_fn(fmt)(from_dict(TrainingSample, data)))
    assert (
        ours
        == (json.dumps(record_fn(fmt)(sample), ensure_ascii=False, separators=(",", ":")) + "\n").encode()
    )


def test_stored_sample_without_optional_keys_is_plain_and_gets_the_defaults() -> None:
    data = {"sample_id": "s3", "kind": "revision", "messages": [{"role": "assistant", "content": "hi"}]}
    assert is_plain(data)
    decoded = from_dict(TrainingSample, data)
    for fmt in ("openai", "sharegpt", "samples"):
        assert PLAIN_RECORD[fmt](data) == record_fn(fmt)(decoded)


def test_parquet_batch_of_plain_dicts_equals_the_batch_of_samples() -> None:
    stored = [_stored(s) for s in PLAIN]
    assert parquet_batch(stored).equals(parquet_batch(PLAIN))
    mixed: list[TrainingSample | dict[str, Any]] = [stored[0], PLAIN[1]]
    assert parquet_batch(mixed).equals(parquet_batch(PLAIN))


@pytest.mark.parametrize(
    "data",
    [
        _stored(
            TrainingSample(
                "t", "revision", (Message("assistant", "", 1, tool_calls=(ToolCall("c1", "f", "{}"),)),)
            )
        ),
        _stored(TrainingSample("t", "revision", (Message("tool", "42", tool_call_id="c1"),))),
        _stored(TrainingSample("t", "revision", (Message("user", "x"),), tools=({"type": "function"},))),
        {"sample_id": "t", "kind": "revision", "messages": [{"role": "user"}]},
        {"sample_id": "t", "kind": "revision", "messages": [{"role": "user", "content": "x", "extra": 1}]},
        {"sample_id": "t", "kind": "revision", "messages": [], "steps": []},
        {"kind": "revision", "messages": []},
        {"sample_id": "t", "kind": "revision", "messages": "not a list"},
        ["not", "a", "dict"],
    ],
)
def test_samples_with_tools_or_unknown_shapes_are_not_plain(data: Any) -> None:
    assert not is_plain(data)


@pytest.mark.parametrize(
    "value",
    [
        {"a": 1e-05, "b": 2.5e-07, "c": 1e-10, "d": 0.0001, "e": 1e16, "f": -0.0, "g": 1.5e300},
        {"big": 2**70, "neg": -(2**63), "u64": 2**64 - 1},
        {"text": 'é😀\u2028\x00\x1f\x7f"\\/\t\n<>&', "mentions": "0.00001 and 1e-5 as text"},
        [True, False, None, 0.1, 1 / 3, 12345678901234567890.0],
        {"ids": ["0b9e-41aa-9e-1", "9e-7"], "list": [1e-07, 3e-07], "last": 1e-07},
        [2e-07],
        3e-07,
    ],
)
def test_dumps_line_is_byte_identical_to_json_dumps(value: Any) -> None:
    assert dumps_line(value) == _json_line(value)


def test_dumps_line_refuses_what_json_refuses() -> None:
    from datetime import UTC, datetime

    for value in ({"at": datetime(2026, 1, 1, tzinfo=UTC)}, {"m": Message("user", "x")}):
        with pytest.raises(TypeError):
            json.dumps(value)
        with pytest.raises(TypeError):
            dumps_line(value)


def test_loads_reads_what_json_reads() -> None:
    for text in [
        '{"a": 123456789012345678901234567890}',
        '{"x": [1.0, 1e-05, "é"]}',
        "0.00001",
        "[9223372036854775807, 18446744073709551616, -9223372036854775809]",
    ]:
        assert loads(text) == json.loads(text)


def test_manifest_read_directly_equals_the_generic_decoding() -> None:
    from api.trace_datasets import manifest_from_data
    from core.domain.trace_datasets import DatasetEntry, DatasetManifest, DatasetQuery

    manifest = DatasetManifest(
        dataset_id="d1",
        name="refunds",
        version=2,
        query=DatasetQuery(kinds=("revision",), task_keys=("a", "b"), include_reasoning=True),
        log_position=99,
        entries=(DatasetEntry("s1", "revision", 7, "r01"), DatasetEntry("s2", "good", 9)),
        code_version="agentr test",
        warnings=("no tools",),
    )
    data = json.loads(json.dumps(to_dict(manifest)))
    assert manifest_from_data(data) == from_dict(DatasetManifest, data) == manifest
    odd = {**data, "entries": [{**data["entries"][0], "extra": 1}]}  # unknown key: the generic path
    with pytest.raises(ValueError, match="unknown field"):
        from_dict(DatasetManifest, odd)
    with pytest.raises(ValueError, match="unknown field"):
        manifest_from_data(odd)
