"""Where a user reads about serving TextCraft to AgentGym clients, the numbering difference is said,
with the figures this machine measures (issue 49, item 6)."""

from __future__ import annotations

from pathlib import Path

from core.envs.textcraft import TextCraftEnv

ROOT = Path(__file__).resolve().parents[2]


def test_readme_and_docs_say_that_plain_textcraft_numbers_goals_our_way() -> None:
    ours, theirs = TextCraftEnv(), TextCraftEnv(rules="agentgym")
    first = sum(ours.goal_of(str(i)) == theirs.goal_of(str(i)) for i in range(50))
    every = sum(ours.goal_of(t) == theirs.goal_of(t) for t in ours.task_ids("all"))
    docs = " ".join((ROOT / "docs" / "envs.md").read_text(encoding="utf-8").split())
    assert f"{first} of ids 0-49 and {every} of all 544 name the same goal" in docs
    assert "`agentr env serve 'textcraft?rules=agentgym'`" in docs
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `agentr env serve ENV"))
    assert "textcraft?rules=agentgym" in row and "numbers goals our way" in row
