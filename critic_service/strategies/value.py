"""Owns the ``value`` critic strategy: ArCHer's advantage choosing Agent-R's transition point.

For the bad path's steps after the divergence node, in order, the ArCHer critic
(``train_service.value_model``, trained by a ``train.method = "archer"`` run and saved in its
checkpoint's ``critic/``) gives ``A_t = min(Q_1, Q_2)(s_t, a_t) - min(V_1, V_2)(s_t)``, with s_t the
history before step t and a_t its assistant turn (the same rendering the critic was trained on:
``core.domain.transitions``). t' is the FIRST step with ``A_t < value_threshold`` (default 0: an
action worse than what the critic expects from that state). Steps before it are "good", t' is
"bad", later steps are not judged; each verdict carries ``q``, ``v`` and ``advantage`` as its
scores. When no step falls below the threshold, t' falls back to the last action and the critique
says so (``fallback``: Direct-Revision's rule), exactly as the ``model`` strategy does; the
TextCraft oracle scores it like every other strategy (``FirstErrorMarked.oracle_index``).

Which critic: ``critic.value_model`` (a checkpoint folder of an archer run), else the iteration's
actor folder, which holds a critic when the actor itself was trained with archer. A folder without
one is an error naming it (the pair is rejected with that reason, never judged at random).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.domain.critic import judged_range, transition_index
from core.domain.events import CriticStrategyName, StepVerdict
from core.domain.trajectory import Trajectory
from core.domain.transitions import action_text, history_messages
from core.llm.ports import Policy
from critic_service.strategies.base import ActorUse, CriticConfigError, CriticOptions, Critique, TraceUse


@dataclass(frozen=True)
class StepValue:
    step_index: int
    q: float
    v: float

    @property
    def advantage(self) -> float:
        return self.q - self.v


def value_verdicts(values: Sequence[StepValue], threshold: float) -> tuple[tuple[StepVerdict, ...], bool]:
    """(verdicts through the first step whose advantage < threshold, fallback). Pure."""
    verdicts: list[StepVerdict] = []
    for value in values:
        scores = {"q": value.q, "v": value.v, "advantage": value.advantage}
        if value.advantage < threshold:
            reason = f"advantage {value.advantage:.4f} < threshold {threshold}"
            verdicts.append(StepVerdict(value.step_index, "bad", scores, "scores", reason))
            return tuple(verdicts), False
        verdicts.append(StepVerdict(value.step_index, "good", scores, "scores"))
    return tuple(verdicts), True


def folder_of(policy: Any) -> str | None:
    """The local model folder a policy was loaded from (HF policies: ``model_version`` is
    ``<folder>@<fingerprint>``), or None."""
    version = getattr(policy, "model_version", "") or ""
    folder = version.rsplit("@", 1)[0] if "@" in version else version
    return folder if folder and Path(folder).is_dir() else None


class ValueScorer:
    """An ArCHer critic and its tokenizer, loaded once from a checkpoint folder."""

    def __init__(self, checkpoint: str | Path) -> None:
        from transformers import AutoTokenizer

        from train_service.value_model import load_critic

        self.checkpoint = str(checkpoint)
        self.critic = load_critic(checkpoint)
        self.tokenizer = AutoTokenizer.from_pretrained(checkpoint)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokens_processed = 0

    def step_values(self, path: Trajectory, steps: Sequence[int]) -> list[StepValue]:
        import torch

        from train_service.value_model import encode_texts, state_text

        shape = self.critic.shape
        states = [
            state_text(self.tokenizer, history_messages(path.instruction, path.task, path.steps[:i]))
            for i in steps
        ]
        actions = [action_text(path.steps[i]) for i in steps]
        s = encode_texts(self.tokenizer, states, shape.max_state_tokens, left=True)
        a = encode_texts(self.tokenizer, actions, shape.max_action_tokens, left=False)
        self.tokens_processed += int(s["attention_mask"].sum() + a["attention_mask"].sum())
        with torch.inference_mode():
            q1, q2, v1, v2 = self.critic(s, a)
        q, v = torch.minimum(q1, q2).tolist(), torch.minimum(v1, v2).tolist()
        return [StepValue(i, float(qi), float(vi)) for i, qi, vi in zip(steps, q, v, strict=True)]


_SCORERS: dict[str, ValueScorer] = {}


def scorer_for(checkpoint: str) -> ValueScorer:
    """One loaded critic per checkpoint folder in this process."""
    if checkpoint not in _SCORERS:
        _SCORERS[checkpoint] = ValueScorer(checkpoint)
    return _SCORERS[checkpoint]


async def judge_value(
    path: Trajectory, steps: Sequence[int], checkpoint: str, threshold: float
) -> tuple[tuple[StepVerdict, ...], bool, int]:
    """(verdicts, fallback, tokens processed) of the value strategy on ``path``'s ``steps``."""
    scorer = await asyncio.to_thread(scorer_for, checkpoint)
    before = scorer.tokens_processed
    values = await asyncio.to_thread(scorer.step_values, path, list(steps))
    verdicts, fallback = value_verdicts(values, threshold)
    return verdicts, fallback, scorer.tokens_processed - before


@dataclass(frozen=True)
class ValueStrategy:
    name: CriticStrategyName = "value"
    needs_policy: bool = False  # the critic comes from critic.value_model, else the actor's folder
    on_traces: TraceUse = "runs-only"  # needs an archer checkpoint (critic.value_model)

    def actor_use(self, options: CriticOptions) -> ActorUse:
        return "required" if options.value_model is None else "none"  # else: the actor's critic/

    async def judge(
        self, options: CriticOptions, path: Trajectory, shared_steps: int, policy: Policy | None
    ) -> Critique:
        checkpoint = options.value_model or (folder_of(policy) if policy is not None else None)
        if checkpoint is None:
            raise CriticConfigError(
                "the value strategy needs critic.value_model (an archer checkpoint) or a local actor folder"
            )
        judged = list(judged_range(len(path.steps), shared_steps))
        try:
            valued, fallback, used = await judge_value(path, judged, checkpoint, options.value_threshold)
        except (ValueError, OSError) as exc:
            raise CriticConfigError(f"value critic: {exc}") from exc
        return Critique(
            self.name,
            valued,
            transition_index(valued, len(path.steps), shared_steps),
            tokens_processed=used,
            model_version=checkpoint,
            fallback=fallback,
        )


STRATEGY = ValueStrategy()
