"""Masks for any chat template: incremental rendering with a prefix-stability check, tool calls
through a tool-aware template (Qwen2.5's published format), and loud refusals of templates that
rewrite history, ignore the generation prompt or are missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.domain.trajectory import Message, TrainingSample
from core.llm.chat_template import (
    TemplateError,
    check_template,
    conversation_spans,
    folder_template_problem,
    hf_messages,
)
from core.llm.tiny import build_tiny_model
from train_service.tokenize import IGNORE_INDEX, tokenize_sample

TEMPLATES = Path(__file__).parent / "templates"
TEXTS = [
    "You are a crafting agent. Reply with Thought: ... then Action: ...",
    "Goal: craft stick. craft 4 stick using 2 oak planks",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Could not find dirt. Got 2 oak planks. Crafted 4 minecraft:stick",
    '<tool_call> {"name": "get_weather", "arguments": {"city": "Paris"}} </tool_call> <tool_response>',
] * 20


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=400
    )


@pytest.fixture
def tokenizer(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def stock(template: str) -> str:
    """The project's tiny template without its generation blocks: a plain stock ChatML template."""
    return template.replace("{%- generation -%}", "").replace("{%- endgeneration -%}", "")


def revision() -> TrainingSample:
    return TrainingSample(
        sample_id="rev1",
        kind="revision",
        messages=(
            Message("system", "You are a crafting agent."),
            Message("user", "Goal: craft stick."),
            Message("assistant", "Thought: dirt first.\nAction: get 1 dirt", 0),
            Message("user", "Could not find dirt."),
            Message("assistant", "Thought: I was wrong, I need planks.\nAction: get 2 oak planks", 1),
            Message("user", "Got 2 oak planks"),
            Message("assistant", "Thought: now craft.\nAction: craft 4 stick using 2 oak planks", 1),
        ),
    )


def decoded_runs(tokenizer: Any, ids: list[int], labels: list[int]) -> list[str]:
    runs: list[list[int]] = []
    current: list[int] = []
    for tok, lab in zip(ids, labels, strict=True):
        if lab != IGNORE_INDEX:
            assert lab == tok
            current.append(tok)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return [tokenizer.decode(r, skip_special_tokens=True) for r in runs]


def test_stock_template_gives_the_same_tokens_and_labels_as_generation_blocks(tokenizer: Any) -> None:
    tagged = tokenize_sample(tokenizer, revision())
    tokenizer.chat_template = stock(tokenizer.chat_template)
    assert "{%- generation" not in tokenizer.chat_template
    plain = tokenize_sample(tokenizer, revision())
    assert plain.input_ids == tagged.input_ids
    assert plain.labels == tagged.labels
    wanted = [m.content for m in revision().messages if m.role == "assistant" and m.weight == 1]
    assert decoded_runs(tokenizer, plain.input_ids, plain.labels) == wanted
    # the end-of-turn token is trained (the model must learn to stop); the newline after it is not
    eos = tokenizer.eos_token_id
    trained = [i for i, x in enumerate(plain.labels) if x != IGNORE_INDEX]
    assert plain.input_ids[trained[-1]] == eos


def test_history_rewriting_template_is_refused_naming_it_and_the_difference(tokenizer: Any) -> None:
    tokenizer.chat_template = (TEMPLATES / "think_stripping.jinja").read_text()
    sample = TrainingSample(
        "think",
        "good",
        (
            Message("user", "Goal: craft stick."),
            Message("assistant", "<think>planks first</think>\nAction: get 2 oak planks", 1),
            Message("user", "Got 2 oak planks"),
            Message("assistant", "Action: craft 4 stick using 2 oak planks", 1),
        ),
    )
    with pytest.raises(TemplateError) as err:
        tokenize_sample(tokenizer, sample)
    message = str(err.value)
    assert "not prefix-stable" in message and "sample think" in message
    assert "template sha256" in message and "<think>" in message  # names the template, shows the diff
    # the same template is prefix-stable on a conversation with no reasoning to strip
    tok = tokenize_sample(tokenizer, revision())
    assert tok.trained_tokens > 0


def test_template_that_ignores_the_generation_prompt_is_refused(tokenizer: Any) -> None:
    tokenizer.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    with pytest.raises(TemplateError, match="ignores add_generation_prompt"):
        tokenize_sample(tokenizer, revision())


def test_missing_and_single_span_templates_are_refused(tokenizer: Any) -> None:
    tokenizer.chat_template = (
        "{% generation %}{% for m in messages %}{{ m['content'] }}{% endfor %}{% endgeneration %}"
    )
    with pytest.raises(TemplateError, match="marked 1 assistant span"):
        tokenize_sample(tokenizer, revision())
    tokenizer.chat_template = None
    with pytest.raises(TemplateError, match="no chat template"):
        tokenize_sample(tokenizer, revision())
    with pytest.raises(TemplateError, match="no chat template"):
        check_template(tokenizer)


def test_tool_calls_render_through_a_tool_aware_template(tokenizer: Any) -> None:
    tokenizer.chat_template = (TEMPLATES / "qwen2_5_tools.jinja").read_text()
    check_template(tokenizer)  # its text path is prefix-stable too
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    call = {"id": "call_1", "name": "get_weather", "arguments": json.dumps({"city": "Paris"})}
    messages = hf_messages(
        [
            Message("user", "Weather in Paris?"),
            _Msg("assistant", "", tool_calls=(call,)),
            _Msg("tool", "sunny, 21C", tool_call_id="call_1"),
            Message("assistant", "It is sunny in Paris."),
        ]
    )
    assert messages[1]["tool_calls"] == [
        {
            "type": "function",
            "id": "call_1",
            "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
        }
    ]
    assert messages[2] == {
        "role": "tool",
        "content": "sunny, 21C",
        "tool_call_id": "call_1",
        "name": "get_weather",
    }
    text, spans = conversation_spans(tokenizer, messages, tools)
    assert '"name": "get_weather"' in text.split("<tools>")[2]  # the tool definitions are rendered
    assert len(spans) == 2
    first, second = (text[a:b] for a, b in spans)
    assert (
        first
        == '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'
    )
    assert second == "It is sunny in Paris.<|im_end|>"
    assert "<tool_response>\nsunny, 21C\n</tool_response>" in text


class _Msg:
    """A message with the tool fields, duck-typed the way hf_messages reads them."""

    def __init__(self, role: str, content: str, **extra: Any) -> None:
        self.role = role
        self.content = content
        self.weight = 1
        self.tool_calls = extra.get("tool_calls", ())
        self.tool_call_id = extra.get("tool_call_id")


def test_folder_problems_at_submission(folder: Path, tmp_path: Path) -> None:
    assert folder_template_problem(folder) is None
    assert folder_template_problem(tmp_path / "not-here") is None  # not on this machine: trainer checks
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "tokenizer.json", "special_tokens_map.json"):
        if (folder / name).exists():
            (bare / name).write_bytes((folder / name).read_bytes())
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(config))
    problem = folder_template_problem(bare)
    assert problem is not None and "has no chat template" in problem
    (bare / "chat_template.jinja").write_text((TEMPLATES / "think_stripping.jinja").read_text())
    assert folder_template_problem(bare) is None  # the probe has no reasoning: stable
    (bare / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    )
    problem = folder_template_problem(bare)
    assert problem is not None and "ignores add_generation_prompt" in problem


def test_agentr_run_refuses_a_model_folder_whose_template_is_unusable(folder: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agentr.cli import app

    model = tmp_path / "stateful"
    model.mkdir()
    for path in folder.iterdir():
        (model / path.name).write_bytes(path.read_bytes())
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    (model / "chat_template.jinja").write_text((TEMPLATES / "think_stripping.jinja").read_text())
    assert folder_template_problem(model) is None  # stable on the probe: accepted
    (model / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] if loop.last else '' }}"
        "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    result = CliRunner().invoke(
        app, ["run", "--model", str(model), "--quick", "--home", str(tmp_path / "home")]
    )
    assert result.exit_code == 2, result.output
    assert "not prefix-stable" in " ".join(result.output.split())


def test_domain_tool_call_samples_train_on_the_assistant_turns_only(tokenizer: Any) -> None:
    from core.domain.trajectory import ToolCall

    tokenizer.chat_template = (TEMPLATES / "qwen2_5_tools.jinja").read_text()
    tools = (
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
        },
    )
    call = ToolCall("call_7", "get_weather", '{"city": "Paris"}')
    sample = TrainingSample(
        "tool-sample",
        "good",
        (
            Message("user", "Weather in Paris?"),
            Message("assistant", "", 1, tool_calls=(call,)),
            Message("tool", "sunny, 21C", tool_call_id="call_7", name="get_weather"),
            Message("assistant", "It is sunny in Paris.", 1),
        ),
        tools=tools,
    )
    tok = tokenize_sample(tokenizer, sample)
    decoded = decoded_runs(tokenizer, tok.input_ids, tok.labels)
    assert len(decoded) == 2
    assert '"name": "get_weather"' in decoded[0] and '"city": "Paris"' in decoded[0]
    assert decoded[1] == "It is sunny in Paris."
    whole = tokenizer.decode(tok.input_ids)
    assert "<tools>" in whole and "sunny, 21C" in whole  # definitions and the result are context
    assert not any("sunny, 21C" in d for d in decoded)
