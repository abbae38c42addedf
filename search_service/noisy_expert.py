"""Owns the noisy-expert policy: the TextCraft expert solver with seeded random mistakes.

A real Policy (it implements core.llm.ports.Policy) for tests and benches where a tiny random model
would never reach the goal: it reads the conversation like a model does - the goal from the task's
"Goal: craft X." line, the actions it already took and whether the environment accepted them - and
proposes the expert's next action, except that with probability ``mistake_rate`` it makes one of
these mistakes instead: skipping ahead in the plan (usually an invalid craft), a wrong count, an
ingredient that does not exist, or a useless ``inventory``; with probability ``garbage_rate`` it
answers without any ``Action:`` line. Each answer is "Thought: ...\\nAction: ...".

Randomness: seeds are per conversation (``core.llm.ports.conversation_seeds``: ``seed + i`` for an
int, ``seed[i]`` for a sequence); sample j of a conversation with seed s draws from
``random.Random(f"{s}:0:{j}")``, so the same seed gives the same answers in any process and in any
batch.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from core.envs.textcraft.recipes import RecipeBook, recipe_book
from core.envs.textcraft.solver import solve
from core.llm.ports import Completion, Conversation, PolicyError, Seeds, conversation_seeds
from core.llm.prompts import normalize_action, parse_action

_GOAL = re.compile(r"Goal:\s*craft\s+(.+?)\.?\s*$", re.MULTILINE)
_FAILED_PREFIXES = ("could not", "wrong item format", "environment error", "the episode is over")


class NoisyExpertPolicy:
    """The expert with mistakes; see the module docstring."""

    def __init__(
        self,
        mistake_rate: float = 0.3,
        garbage_rate: float = 0.0,
        book: RecipeBook | None = None,
        seed: int = 0,
    ) -> None:
        for name, value in (("mistake_rate", mistake_rate), ("garbage_rate", garbage_rate)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"noisy expert: {name} must be in [0, 1], got {value}")
        self.mistake_rate = mistake_rate
        self.garbage_rate = garbage_rate
        self.book = book or recipe_book()
        self.model_version = f"noisy-expert(mistake={mistake_rate},garbage={garbage_rate})"
        self._rng = random.Random(seed)
        self._plans: dict[str, list[str]] = {}
        self.calls = 0

    def plan(self, goal: str) -> list[str]:
        if goal not in self._plans:
            self._plans[goal] = solve(goal, self.book)
        return self._plans[goal]

    def _progress(self, conversation: Conversation, plan: list[str]) -> int:
        """How many plan actions the history has executed successfully, in order."""
        done = 0
        messages = list(conversation)
        for index, message in enumerate(messages):
            if message.role != "assistant" or done >= len(plan):
                continue
            parsed = parse_action(message.content)
            reply = messages[index + 1].content.strip().lower() if index + 1 < len(messages) else ""
            if parsed is None or reply.startswith(_FAILED_PREFIXES):
                continue
            if parsed.normalized == normalize_action(plan[done]):
                done += 1
        return done

    def _answer(self, conversation: Conversation, rng: random.Random) -> str:
        task = next((m.content for m in conversation if m.role == "user"), "")
        match = _GOAL.search(task)
        if match is None:
            return "Thought: I cannot find the goal in the task.\nAction: inventory"
        goal = match.group(1).strip()
        try:
            plan = self.plan(goal)
        except ValueError:
            return f"Thought: I do not know how to craft {goal}.\nAction: inventory"
        step = self._progress(conversation, plan)
        if rng.random() < self.garbage_rate:
            return "Thought: I am not sure what to do next."
        if step >= len(plan):
            return f"Thought: I should have {goal} by now.\nAction: inventory"
        expert = plan[step]
        if rng.random() >= self.mistake_rate:
            return f"Thought: Next in my plan for {goal}.\nAction: {expert}"
        return f"Thought: Trying something for {goal}.\nAction: {self._mistake(plan, step, rng)}"

    def _mistake(self, plan: list[str], step: int, rng: random.Random) -> str:
        expert = plan[step]
        kinds = ["inventory", "nonexistent", "count"]
        if step + 1 < len(plan):
            kinds.append("skip")
        kind = rng.choice(kinds)
        if kind == "skip":
            return plan[step + 1]
        if kind == "count":
            words = expert.split()
            if len(words) > 1 and words[1].isdigit():
                words[1] = str(int(words[1]) + rng.randint(1, 3))
                return " ".join(words)
        if kind == "nonexistent":
            return f"get {rng.randint(1, 4)} {rng.choice(['diamond blocks', 'magic dust', 'stone sword'])}"
        return "inventory"

    async def sample(
        self,
        conversations: Sequence[Conversation],
        n: int = 1,
        temperature: float = 1.0,
        max_tokens: int = 64,
        seed: Seeds = None,
        stop: Sequence[str] | None = None,
        logprobs: bool = False,
    ) -> list[list[Completion]]:
        self.calls += 1
        seeds = conversation_seeds(seed, len(conversations))
        out: list[list[Completion]] = []
        for i, conversation in enumerate(conversations):
            samples = []
            for j in range(n):
                rng = random.Random(f"{seeds[i]}:0:{j}") if seeds is not None else self._rng
                text = self._answer(conversation, rng)
                samples.append(Completion(text=text, tokens=len(text.split())))
            out.append(samples)
        return out

    async def score_labels(
        self, conversations: Sequence[Conversation], labels: Sequence[str]
    ) -> list[dict[str, float]]:
        raise PolicyError(
            "the noisy expert proposes actions only and cannot judge them: "
            "use the critic strategy 'rules' or 'direct' with it"
        )

    async def close(self) -> None:
        return None


REF_PREFIX = "noisy-expert"


def from_ref(ref: str) -> NoisyExpertPolicy | None:
    """``noisy-expert[?mistake=0.3&garbage=0.05&seed=1]`` -> a NoisyExpertPolicy; None for other refs."""
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(ref.strip())
    if parts.scheme or parts.netloc or parts.path != REF_PREFIX:
        return None
    options = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(options) - {"mistake", "garbage", "seed"})
    if unknown:
        raise ValueError(f"model ref {ref!r}: unknown option(s) {unknown} (known: mistake, garbage, seed)")
    try:
        return NoisyExpertPolicy(
            mistake_rate=float(options.get("mistake", 0.3)),
            garbage_rate=float(options.get("garbage", 0.0)),
            seed=int(options.get("seed", 0)),
        )
    except ValueError as exc:
        raise ValueError(f"model ref {ref!r}: {exc}") from exc


class Tau2NoisyExpertPolicy(NoisyExpertPolicy):
    """The same noisy expert for a tool-calling environment (tau2): ``plans`` maps a task's first
    user turn to its gold actions (``Tau2Env.gold_actions``); progress counts the gold actions
    already taken that the environment accepted (a reply not starting with ``Error``). With
    probability ``mistake_rate`` the answer is a mistake instead: ending the conversation early
    (``###STOP###`` before the work is done, reward 0) or a call to a tool with a wrong id."""

    def __init__(self, plans: dict[str, list[str]], mistake_rate: float = 0.3, seed: int = 0) -> None:
        super().__init__(mistake_rate=mistake_rate, seed=seed)
        self.plans = plans
        self.model_version = f"tau2-noisy-expert(mistake={mistake_rate})"

    def _answer(self, conversation: Conversation, rng: random.Random) -> str:
        messages = list(conversation)
        task = next((m.content for m in messages if m.role == "user"), "")
        plan = self.plans.get(task)
        if plan is None:
            return "Thought: I do not know this customer.\nAction: Sorry, I cannot help. ###STOP###"
        done = 0
        for index, message in enumerate(messages):
            parsed = parse_action(message.content) if message.role == "assistant" else None
            reply = messages[index + 1].content if index + 1 < len(messages) else ""
            if parsed is not None and done < len(plan) and not reply.startswith("Error"):
                done += parsed.action.strip() == plan[done]
        if done >= len(plan):
            return "Thought: All done.\nAction: Thank you. ###STOP###"
        if rng.random() >= self.mistake_rate:
            return f"Thought: Next step of the procedure.\nAction: {plan[done]}"
        if rng.random() < 0.5:
            return "Thought: I think this is handled.\nAction: Your request is handled. ###STOP###"
        return 'Thought: Let me look that order up.\nAction: get_order_details({"order_id": "#W0000000"})'
