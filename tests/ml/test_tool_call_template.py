"""The tool-call probe (issue 27, item 8): a chat template that drops ``tool_calls`` (a plain ChatML, the
tiny model's template before it rendered calls: templates/chatml_drops_tool_calls.jinja) is named at
submission, while templates that render the calls inside the trained span pass - the tiny model's own
(ReAct "Action: name({...})" lines), generation blocks with <tool_call> JSON, and incremental
rendering (Qwen2.5's published format). The
tokenizers are real tiny-model folders loaded with ``AutoTokenizer.from_pretrained``; ``agentr run`` on
a tau2 environment with the dropping template exits 2 with the message."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from core.domain.config import RunConfig
from core.domain.trajectory import Message, ToolCall, TrainingSample
from core.llm.chat_template import (
    TemplateError,
    calls_tools,
    folder_template_problem,
    hf_messages,
    run_template_problem,
    tool_call_problem,
)
from core.llm.tiny import build_tiny_model
from train_service.tokenize import IGNORE_INDEX, tokenize_sample
from train_service.tokenized_export import tokenized_rows

TEMPLATES = Path(__file__).parent / "templates"
TEXTS = [
    "You are a retail agent. Where is my order #W2378156? Your order was delivered.",
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W2378156"}}</tool_call>',
    '{"status": "delivered"} Thought: look it up. Action: get_order_details',
] * 20

# The tiny model's ChatML with generation blocks, plus the assistant's tool calls inside the block.
GENERATION_TOOLS = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}{{- message['content'] or '' -}}"
    "{%- for call in message.get('tool_calls') or [] -%}"
    "{{- '<tool_call>' + ({'name': call['function']['name'], 'arguments': call['function']['arguments']}"
    " | tojson) + '</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_model(
        tmp_path_factory.mktemp("tiny") / "m", TEXTS, hidden=32, layers=1, heads=2, vocab_size=300
    )


def with_template(tiny: Path, folder: Path, template: str) -> Path:
    """A copy of the tiny model folder whose tokenizer carries ``template`` (saved by transformers)."""
    from transformers import AutoTokenizer

    shutil.copytree(tiny, folder)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def folders(tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("templates")
    return {
        "tiny": tiny,
        "dropping": with_template(
            tiny, base / "dropping", (TEMPLATES / "chatml_drops_tool_calls.jinja").read_text()
        ),
        "generation": with_template(tiny, base / "generation", GENERATION_TOOLS),
        "qwen": with_template(tiny, base / "qwen", (TEMPLATES / "qwen2_5_tools.jinja").read_text()),
    }


def load(folder: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def tool_sample() -> TrainingSample:
    """A revision whose corrective step is a tool call (weight 1), as a tau2 splice makes it."""
    call = ToolCall("call_9", "get_order_details", '{"order_id": "#W1000001"}')
    return TrainingSample(
        "tool-revision",
        "revision",
        (
            Message("system", "You are a retail agent."),
            Message("user", "Where is my order #W1000001?"),
            Message("assistant", "Let me check.", 0),
            Message("user", "I have given you everything I know."),
            Message("assistant", "", 1, tool_calls=(call,)),
            Message("tool", '{"status": "delivered"}', tool_call_id="call_9", name="get_order_details"),
            Message("assistant", "Your order was delivered.", 1),
        ),
        reward=1.0,
    )


def trained_text(tokenizer: Any, sample: TrainingSample) -> str:
    tok = tokenize_sample(tokenizer, sample)
    return tokenizer.decode(
        [i for i, label in zip(tok.input_ids, tok.labels, strict=True) if label != IGNORE_INDEX]
    )


def test_the_probe_names_a_template_that_drops_tool_calls(folders: dict[str, Path]) -> None:
    tokenizer = load(folders["dropping"])
    problem = tool_call_problem(tokenizer)
    assert problem is not None
    assert str(folders["dropping"]) in problem and "drops tool calls" in problem  # names the model
    assert "get_order_details" in problem
    # what the probe predicts is what training does: the corrective call is not among the trained tokens
    assert "get_order_details" not in trained_text(tokenizer, tool_sample())


@pytest.mark.parametrize("name", ["tiny", "generation", "qwen"])
def test_templates_that_render_tool_calls_pass_the_probe(folders: dict[str, Path], name: str) -> None:
    tokenizer = load(folders[name])
    assert tool_call_problem(tokenizer) is None
    trained = trained_text(tokenizer, tool_sample())
    assert "get_order_details" in trained and "#W1000001" in trained  # the call is trained
    assert "delivered" in trained and '"status"' not in trained  # the tool result stays context


def test_calls_tools_reads_our_messages_and_hf_dicts() -> None:
    sample = tool_sample()
    assert calls_tools(sample.messages) and calls_tools(hf_messages(sample.messages))
    assert not calls_tools([Message("user", "hi"), Message("assistant", "Thought: x\nAction: y", 1)])


def test_submission_refuses_a_tool_env_on_a_dropping_template(folders: dict[str, Path]) -> None:
    tiny = str(folders["dropping"])
    assert folder_template_problem(tiny) is None  # ReAct text: the template is fine
    refused = run_template_problem(RunConfig(model=tiny, env="tau2:retail"))
    assert refused is not None and refused[0] == "model" and "drops tool calls" in refused[1]
    assert tiny in refused[1]
    assert run_template_problem(RunConfig(model=tiny, env="textcraft")) is None
    assert run_template_problem(RunConfig(model=tiny, env="tau2:retail", data_only=True)) is None
    for name in ("tiny", "generation", "qwen"):
        assert (
            run_template_problem(RunConfig(model=str(folders[name]), env="tau2:retail?max_steps=8")) is None
        )
    served = RunConfig(model="http://127.0.0.1:1/v1#m", env="tau2:airline", train={"model_path": tiny})
    refused = run_template_problem(served)
    assert refused is not None and refused[0] == "train.model_path" and "drops tool calls" in refused[1]


def test_tokenised_export_refuses_tool_samples_on_a_dropping_template(folders: dict[str, Path]) -> None:
    plain = TrainingSample(
        "plain", "good", (Message("user", "Goal: x"), Message("assistant", "Thought: a\nAction: b", 1))
    )
    assert [r["sample_id"] for r in tokenized_rows(load(folders["dropping"]), [plain])] == ["plain"]
    with pytest.raises(TemplateError, match="sample tool-revision calls tools.*drops tool calls"):
        list(tokenized_rows(load(folders["dropping"]), [plain, tool_sample()]))
    rows = list(tokenized_rows(load(folders["qwen"]), [plain, tool_sample()]))
    assert [r["sample_id"] for r in rows] == ["plain", "tool-revision"]


def test_agentr_run_on_tau2_with_a_dropping_template_exits_2(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from agentr.cli import app

    model = tmp_path / "dropping"
    shutil.copytree(folders["dropping"], model)
    result = CliRunner().invoke(
        app, ["run", "--model", str(model), "--env", "tau2:retail", "--quick", "--home", str(tmp_path / "h")]
    )
    output = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "cannot start the run: model:" in output and "drops tool calls" in output
    assert str(model) in "".join(result.output.split())  # names the model folder


def test_the_tiny_template_trains_a_call_as_the_react_text_the_policy_writes(
    folders: dict[str, Path],
) -> None:
    """Training and acting agree: the tiny model is prompted to answer "Thought: ...\\nAction:
    name({json})" (tau2's instruction, parsed by core.envs.tau2.parse_call), and its template trains a
    tool call as exactly that text, so a trained call is one the policy can emit again."""
    from core.domain.splice import format_assistant
    from core.envs.tau2 import parse_call

    tokenizer = load(folders["tiny"])
    call = ToolCall("call_1", "get_order_details", '{"order_id": "#W1000001"}')
    sample = TrainingSample(
        "s",
        "good",
        (
            Message("user", "Where is my order?"),
            Message("assistant", "I will look it up.", 1, tool_calls=(call,)),
            Message("tool", "{}", tool_call_id="call_1", name="get_order_details"),
        ),
    )
    action = 'get_order_details({"order_id": "#W1000001"})'
    assert format_assistant("I will look it up.", action) in trained_text(tokenizer, sample)
    assert parse_call(action, frozenset({"get_order_details"})) == (
        "get_order_details",
        {"order_id": "#W1000001"},
    )
