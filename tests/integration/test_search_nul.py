"""A model may sample NUL characters, which PostgreSQL's JSON cannot hold: a search whose policy
writes them in its thoughts and actions still stores its whole tree on the real PostgreSQL store
(each NUL kept as U+FFFD), where before the first NodesExpanded append failed ("unsupported Unicode
escape sequence") and the worker dead-lettered the search after five deliveries."""

from __future__ import annotations

import random

from core.domain.events import NodesExpanded, TreeCompleted
from core.domain.ids import tree_stream
from core.domain.mcts import SearchConfig
from core.envs.textcraft import TextCraftEnv
from core.llm.ports import Conversation
from core.store.factory import open_store
from search_service.engine import TreeRequest, TreeSearch
from search_service.noisy_expert import NoisyExpertPolicy


class NulPolicy(NoisyExpertPolicy):
    """The noisy expert with a NUL in every thought and in every third action."""

    def _answer(self, conversation: Conversation, rng: random.Random) -> str:
        text = super()._answer(conversation, rng).replace("Thought: ", "Thought: \x00 ")
        return text + "\x00" if rng.random() < 0.33 else text


async def test_nul_in_sampled_text_is_stored_as_replacement_characters(pg_url: str) -> None:
    store = await open_store(pg_url, create_tables=True)
    try:
        config = SearchConfig(iterations=6, max_depth=6, alpha=1.0, beta=0.5, seed=3)
        request = TreeRequest("tree-nul", "textcraft", "200", "nul-expert", config)

        async def sink(events: list) -> None:  # type: ignore[type-arg]
            await store.append(events)

        engine = TreeSearch(request, TextCraftEnv(), NulPolicy(mistake_rate=0.5), sink)
        await engine.run()
        await store.append(engine.final_events())
        recorded = [r.event for r in await store.read_stream(tree_stream("tree-nul"))]
        nodes = [n for e in recorded if isinstance(e, NodesExpanded) for n in e.nodes if n.parent_id]
        assert nodes and any(isinstance(e, TreeCompleted) for e in recorded)
        assert all("\x00" not in n.thought + n.action for n in nodes)
        assert all(n.thought.startswith("\ufffd") for n in nodes), [n.thought for n in nodes][:3]
    finally:
        await store.close()
