"""Pre-tokenised Parquet and the Hugging Face ``datasets`` folder, for a real (tiny) model's tokenizer:
the labels are the trainer's loss mask (tokens of weight-1 assistant messages, -100 elsewhere), read
back with pyarrow, ``datasets.load_from_disk`` and TRL's dataset utilities. The samples call tools,
so the tokenizer carries a template that renders tool calls (Qwen2.5's); a plain ChatML
(templates/chatml_drops_tool_calls.jinja) drops them, and a tokenised export of tool-call samples
with it is refused, naming the model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from trl.data_utils import is_conversational

from core.domain.trajectory import Message, ToolCall, TrainingSample
from core.llm.chat_template import TemplateError
from tests.api.seed import revision_sample
from tests.support import TinySpec
from train_service.tokenize import IGNORE_INDEX
from train_service.tokenized_export import load_tokenizer, write_hf_dataset, write_tokenized_parquet

TOOLS_TEMPLATE = Path(__file__).parent / "templates" / "qwen2_5_tools.jinja"
DROPPING_TEMPLATE = Path(__file__).parent / "templates" / "chatml_drops_tool_calls.jinja"


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name="tiny-exports", seed=4)


def _tool_tokenizer(folder: Path) -> Any:
    """The tiny model's tokenizer with a chat template that renders tool calls."""
    tokenizer = load_tokenizer(str(folder))
    tokenizer.chat_template = TOOLS_TEMPLATE.read_text()
    return tokenizer


def _samples() -> list[TrainingSample]:
    tool = TrainingSample(
        "tool-sample",
        "good",
        (
            Message("system", "Use the tools."),
            Message("user", "Refund order 7."),
            Message("assistant", "Looking it up.", 1, tool_calls=(ToolCall("c1", "lookup", '{"order": 7}'),)),
            Message("tool", '{"paid": true}', tool_call_id="c1", name="lookup"),
            Message("assistant", "Refunded order 7.", 1),
        ),
        1.0,
        tools=({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},),
    )
    return [revision_sample("rev-0", 0), tool]


def test_tokenized_parquet_labels_are_the_trainers_loss_mask(tiny_folder: Path, tmp_path: Path) -> None:
    samples = _samples()
    path = tmp_path / "tok.parquet"
    dropping = load_tokenizer(str(tiny_folder))
    dropping.chat_template = DROPPING_TEMPLATE.read_text()
    with pytest.raises(TemplateError, match="sample tool-sample calls tools.*drops tool calls"):
        write_tokenized_parquet(path, dropping, samples, max_length=1024)
    assert not path.exists()  # nothing half-written
    tokenizer = _tool_tokenizer(tiny_folder)
    assert write_tokenized_parquet(path, tokenizer, samples, max_length=1024) == 2
    table = pq.read_table(path)
    assert table.column_names == ["sample_id", "input_ids", "labels", "attention_mask"]
    rows = table.to_pylist()
    assert [r["sample_id"] for r in rows] == ["rev-0", "tool-sample"]
    for row, sample in zip(rows, samples, strict=True):
        assert len(row["input_ids"]) == len(row["labels"]) == len(row["attention_mask"])
        assert set(row["attention_mask"]) == {1}
        trained = tokenizer.decode(
            [t for t, lab in zip(row["input_ids"], row["labels"], strict=True) if lab != IGNORE_INDEX]
        )
        for message in sample.messages:
            if message.role == "assistant" and message.content:
                assert (message.content in trained) == bool(message.weight), message.content
            elif message.content and message.role != "assistant":
                assert message.content not in trained
        assert all(
            lab in (IGNORE_INDEX, tok) for tok, lab in zip(row["input_ids"], row["labels"], strict=True)
        )
    # max_length cuts from the right, as the trainer does; a sample with nothing left is dropped
    short = tmp_path / "short.parquet"
    assert write_tokenized_parquet(short, tokenizer, samples, max_length=12) == 0


def test_hf_folder_loads_with_datasets_and_trl(tiny_folder: Path, tmp_path: Path) -> None:
    tokenizer = _tool_tokenizer(tiny_folder)
    folder = tmp_path / "hf"
    assert write_hf_dataset(folder, _samples(), tokenizer, max_length=1024) == 2
    loaded = datasets.load_from_disk(str(folder))
    assert {
        "sample_id",
        "kind",
        "reward",
        "messages",
        "tools",
        "input_ids",
        "labels",
        "attention_mask",
    } <= set(loaded.column_names)
    tool_row = loaded[1]
    assert [m["role"] for m in tool_row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert tool_row["messages"][2]["tool_calls"] == [
        {"id": "c1", "name": "lookup", "arguments": '{"order": 7}'}
    ]
    assert is_conversational({"messages": tool_row["messages"]})
    tokenized = pq.read_table(_parquet(tmp_path, tokenizer)).to_pylist()
    assert [r["input_ids"] for r in loaded] == [r["input_ids"] for r in tokenized]
    assert [r["labels"] for r in loaded] == [r["labels"] for r in tokenized]
    # without a tokenizer: the chat columns only
    plain = tmp_path / "plain"
    write_hf_dataset(plain, _samples())
    assert "input_ids" not in datasets.load_from_disk(str(plain)).column_names


def _parquet(tmp_path: Path, tokenizer: object) -> Path:
    path = tmp_path / "again.parquet"
    write_tokenized_parquet(path, tokenizer, _samples(), max_length=1024)
    return path
