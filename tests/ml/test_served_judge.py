"""The model critic against an OpenAI-compatible chat endpoint in WORDS (plans ``text`` and ``whole``):
the project's own server (`agentr model serve`, a subprocess) over a tiny model. Each answer is
parsed strictly (a non-verdict is ``uncertain`` with the answer kept as the reason; a whole-trajectory
answer names a step in range or none), never guessed, and the tokens each trace cost (the server's
``usage``) are recorded on ``TraceCritiqued``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from core.domain.events import Metadata, NewEvent, TraceCritiqued, TraceIngested
from core.domain.ids import new_id, trace_stream
from core.domain.trajectory import Step, Trajectory
from core.llm.ports import Completion
from critic_service.critic import CriticConfig, critique
from tests.support import TinySpec

NAME = "tiny-served-judge"


@pytest.fixture(scope="module")
def tiny_spec() -> TinySpec:
    return TinySpec(name=NAME, seed=11, hidden=32, layers=2, vocab_size=512)


def _path() -> Trajectory:
    steps = (
        Step("I need logs.", "get 1 oak logs", "Got 1 oak logs"),
        Step("Planks next.", "craft 4 oak planks using 1 oak logs", "Crafted 4 minecraft:oak_planks"),
        Step("Again.", "craft 4 oak planks using 1 oak logs", "Could not find enough items to craft"),
        Step("Look.", "inventory", "Inventory: [oak planks] (4)"),
    )
    return Trajectory("Goal: craft stick.", "Craft items.", steps, reward=0.0)


class Recording:
    """The served policy, recording every answer it gave (to check parsing and token counts)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_version = inner.model_version
        self.answers: list[Completion] = []

    async def sample(self, conversations: Sequence[Any], **kwargs: Any) -> list[list[Completion]]:
        out = await self.inner.sample(conversations, **kwargs)
        self.answers += [c for row in out for c in row]
        return list(out)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_step_by_step_and_whole_trajectory_judging_over_the_served_chat_endpoint(server: str) -> None:
    from core.domain.critic import parse_first_error_answer, verdict_from_text
    from core.llm.registry import open_policy

    policy = Recording(open_policy(f"{server}#{NAME}"))
    path = _path()
    text = await critique(CriticConfig(strategy="model", plan="text"), path, 1, policy)  # type: ignore[arg-type]
    assert [v.step_index for v in text.verdicts] == [1, 2, 3] and {v.method for v in text.verdicts} == {
        "text"
    }
    for verdict, answer in zip(text.verdicts, policy.answers, strict=True):
        assert verdict == verdict_from_text(verdict.step_index, answer.text)  # strict, never guessed
        assert answer.prompt_tokens > 0  # the server's usage
    spent = sum(a.prompt_tokens + a.tokens for a in policy.answers)
    assert text.tokens_processed == spent and text.model_version == policy.model_version
    if all(v.label != "bad" for v in text.verdicts):
        assert text.fallback and text.transition_index == 3

    policy.answers.clear()
    whole = await critique(CriticConfig(strategy="model", plan="whole"), path, 1, policy)  # type: ignore[arg-type]
    (answer,) = policy.answers
    number, why = parse_first_error_answer(answer.text, 2, 4)
    (verdict,) = whole.verdicts
    if number is None:
        assert (verdict.label, verdict.reason, whole.fallback) == ("uncertain", why, True)
    else:
        assert (verdict.step_index, verdict.label, whole.transition_index) == (number - 1, "bad", number - 1)
    assert whole.tokens_processed == answer.prompt_tokens + answer.tokens > 0


async def test_a_failed_trace_records_the_tokens_its_judge_spent(server: str, sqlite_url: str) -> None:
    from core.llm.policy_cache import PolicyCache
    from core.llm.registry import open_policy
    from core.runtime.settings import Settings
    from core.store.factory import open_store
    from critic_service.service import CriticHandlers

    store = await open_store(sqlite_url, create_tables=True)
    try:
        project, trace_id = new_id(), new_id()
        trace = TraceIngested(trace_id, project, "stick", _path(), "failure", "openai",
                              critic_strategy="model", critic_model=f"{server}#{NAME}")  # fmt: skip
        await store.append([NewEvent(trace_stream(trace_id), trace, Metadata(project_id=project))])
        settings = Settings(critic_trace_plan="whole")  # type: ignore[call-arg]
        handlers = CriticHandlers(settings, store, PolicyCache(open_policy))
        (recorded,) = await store.read_stream(trace_stream(trace_id))
        result = await handlers.on_trace_ingested(recorded)
        (critiqued,) = [e.event for e in result.events if isinstance(e.event, TraceCritiqued)]
        assert critiqued.strategy == "model" and critiqued.tokens_processed > 0
        assert {v.method for v in critiqued.verdicts} == {"text"} and len(critiqued.verdicts) == 1
    finally:
        await store.close()
