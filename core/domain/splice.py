"""Owns the splice: bad path + good path + transition point -> a revision training sample.

Pure (stdlib only). A revision trajectory is, in order (DESIGN §1 step 4):

    system instruction, task                                  weight 0 (context)
    shared prefix: the steps both paths took                  weight 0
    bad actions after the divergence, through t'             weight 0 (and their observations)
    first good action after the divergence, whose Thought
      starts with the reflection sentence                      weight 1
    the rest of the good continuation                          weight 1 (observations 0)

where the good continuation is the pair's own good path or, under ``splice_partners``'s
``adjacent`` rule, another good path of the tree that leaves the bad path nearer to t'; and
except the good continuation's steps named in ``masked`` (the caller's loss-masking rule: the
environment rejected them, or they repeat a loop; core.domain.good_samples.revision_masks), which
stay in the conversation at weight 0, as in good samples.

Every message says why it has its weight (``Message.why``, core.domain.weight_reasons), set here
as the weight is: ``system``, ``task``, ``observation`` (observations and tool results),
``shared_prefix``, ``bad_step``, ``reflection`` (the first good turn), ``continuation``, and for a
masked continuation step the reason ``masked`` names (``masked_invalid`` / ``masked_loop``).

The reflection lives in the Thought of the first good action; no fake action is ever inserted, so
the action sequence (``SplicedPath.actions``) is exactly what an environment can replay.

Messages are built per step kind (``step_messages``; see core.domain.trajectory): a text ``action``
step is one ReAct assistant turn then a user observation; a ``tool`` step stays native: one
assistant message with its ``tool_calls`` (content = the step's thought), then one ``tool`` message
per call (``tool_call_id``, the result's content); an ``answer`` step is one assistant message whose
content is the answer text. In tool conversations the reflection is the start of the first good
assistant message's content (before its thought, or before the answer text), never a fake call.
Tool messages and observations are always weight 0. An empty observation after the last step is
not emitted (no empty trailing user turn), nor are tool messages for the last step's calls that got
no result (no invented empty result; ``_drop_unanswered``); a system message is emitted only for a
non-empty instruction. Tool-call ids are unique within every conversation (``unique_tool_call_ids``:
a deterministic remap of ids a spliced path reuses).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from core.domain.trajectory import Message, Step, ToolResult, TrainingSample, Trajectory
from core.domain.weight_reasons import mask_reason


class SpliceError(ValueError):
    """The pair cannot be spliced; the message is the rejection reason."""


def format_assistant(thought: str, action: str) -> str:
    """The ReAct assistant turn: "Thought: ...\\nAction: ..." (single-line action, as core.llm.prompts)."""
    return f"Thought: {thought.strip()}\nAction: {' '.join(action.split())}"


def _same_action(a: str, b: str) -> bool:
    return " ".join(a.split()).lower() == " ".join(b.split()).lower()


@dataclass(frozen=True)
class SplicedPath:
    """The three segments of a revision path (steps keep their observations)."""

    prefix: tuple[Step, ...]
    bad: tuple[Step, ...]  # bad actions after the divergence, through t'
    good: tuple[Step, ...]  # the good continuation after the divergence

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.prefix + self.bad + self.good

    @property
    def actions(self) -> list[str]:
        return [step.action for step in self.steps]

    @property
    def revision_length(self) -> int:
        return len(self.bad)

    def with_observations(self, observed: Sequence[Step]) -> SplicedPath:
        """The same actions with the observations (and rewards) an environment actually returned."""
        if len(observed) != len(self.steps):
            raise SpliceError(f"replay returned {len(observed)} steps for a {len(self.steps)}-step path")
        merged = [
            replace(mine, observation=got.observation, reward=got.reward, done=got.done, valid=got.valid)
            for mine, got in zip(self.steps, observed, strict=True)
        ]
        a, b = len(self.prefix), len(self.prefix) + len(self.bad)
        return SplicedPath(prefix=tuple(merged[:a]), bad=tuple(merged[a:b]), good=tuple(merged[b:]))


def check_pair(bad: Trajectory, good: Trajectory, shared_steps: int, *, same_task: bool = True) -> None:
    """Raise ``SpliceError`` unless both paths share the task and the first ``shared_steps`` actions.

    ``same_task=False`` (production-trace pairs, matched by task key): the task texts may differ; the
    sample keeps the failed path's own task text and instruction (``revision_sample``)."""
    if same_task and bad.task != good.task:
        raise SpliceError("the bad and good paths have different tasks")
    if shared_steps < 0:
        raise SpliceError(f"shared_steps must be >= 0, got {shared_steps}")
    for name, path in (("bad", bad), ("good", good)):
        if len(path.steps) <= shared_steps:
            raise SpliceError(
                f"the {name} path has {len(path.steps)} step(s), none after the stated shared prefix "
                f"of {shared_steps}"
            )
    for index in range(shared_steps):
        if not _same_action(bad.steps[index].action, good.steps[index].action):
            raise SpliceError(
                f"the paths do not share the stated prefix: step {index} is {bad.steps[index].action!r} "
                f"in the bad path but {good.steps[index].action!r} in the good one"
            )


def splice_path(
    bad: Trajectory, good: Trajectory, shared_steps: int, transition: int, *, same_task: bool = True
) -> SplicedPath:
    """Cut and join the two paths (checks the pair and that t' lies after the divergence).

    A *recovery* partner - a good path that took the bad path's actions through t' too and then
    succeeded (the replay critic's verified continuation after the decisive step, issue #47) - is
    continued after t', not from the divergence: the revision is the bad path through t', the
    reflection, and the good path's steps after t'. (A pair's own good path otherwise leaves the bad
    path at the divergence, so this changes nothing for search or trace pairs.)"""
    check_pair(bad, good, shared_steps, same_task=same_task)
    if not shared_steps <= transition < len(bad.steps):
        raise SpliceError(
            f"transition index {transition} is outside the bad path's steps after the divergence "
            f"({shared_steps}..{len(bad.steps) - 1})"
        )
    resume = shared_steps
    if longest_common_prefix(bad.steps[: transition + 1], good.steps) == transition + 1:
        resume = transition + 1  # a recovery: it took a_{t'} too
        if len(good.steps) <= resume:
            raise SpliceError(
                f"the good path takes the bad path's actions through t' = {transition} and nothing "
                "after them: no recovery to train"
            )
    return SplicedPath(
        prefix=tuple(good.steps[:shared_steps]),
        bad=tuple(bad.steps[shared_steps : transition + 1]),
        good=tuple(good.steps[resume:]),
    )


def _prefixed(prefix: str, text: str) -> str:
    """``text`` after the reflection ``prefix``; without a prefix, ``text`` exactly as it is."""
    if not prefix.strip():
        return text
    return f"{prefix.strip()} {text.strip()}".strip()


def step_messages(
    step: Step,
    weight: int,
    prefix: str = "",
    formatter: Callable[[str, str], str] = format_assistant,
    why: str = "",
) -> tuple[list[Message], list[Message]]:
    """One step as (its assistant/tool messages, the user messages that answered it).

    ``prefix`` (the reflection) starts the assistant content; ``weight`` and ``why`` (its reason,
    core.domain.weight_reasons) go on the assistant message only; tool results and observations
    are ``observation``. A tool step's results become ``tool`` messages in call order (a call with
    no result gets the step's observation when it has no results at all, else an empty content).
    The answer: the step's recorded ``replies`` each as one user message with its speaker's name
    (none when nothing answered it), else (not recorded) its ``observation`` as one user message
    (none after a tool step: its results are the tool messages).
    """
    name = step.name or None
    replies = [
        Message("user", reply.content, 0, name=reply.name or None, why="observation")
        for reply in step.replies or ()
    ]
    if step.kind == "tool":
        results: dict[str, ToolResult] = {r.call_id: r for r in step.tool_results}
        out = [
            Message(
                "assistant",
                _prefixed(prefix, step.thought),
                weight,
                tool_calls=step.tool_calls,
                name=name,
                reasoning=step.reasoning,
                why=why,
            )
        ]
        for position, call in enumerate(step.tool_calls):
            result = results.get(call.call_id)
            if result is not None:
                content = result.content
            else:
                fallback = not step.tool_results and position == 0 and step.replies is None
                content = step.observation if fallback else ""
            out.append(
                Message("tool", content, 0, tool_call_id=call.call_id, name=call.name, why="observation")
            )
        return out, replies
    if step.replies is None:
        replies = [Message("user", step.observation, 0, why="observation")]
    if step.kind == "answer":
        body = f"{step.thought.strip()}\n{step.action.strip()}" if step.thought.strip() else step.action
        answer = Message(
            "assistant", _prefixed(prefix, body), weight, name=name, reasoning=step.reasoning, why=why
        )
        return [answer], replies
    thought = _prefixed(prefix, step.thought)
    action = Message(
        "assistant", formatter(thought, step.action), weight, name=name, reasoning=step.reasoning, why=why
    )
    return [action], replies


PlannedStep = tuple[Step, int, str, str]  # (step, weight, reflection prefix, why: the weight's reason)


def conversation(
    instruction: str,
    task: str,
    steps: Sequence[PlannedStep],
    formatter: Callable[[str, str], str] = format_assistant,
    *,
    task_name: str = "",
) -> tuple[Message, ...]:
    """System (when non-empty) + task (with its speaker's ``task_name``) + each ``(step, weight,
    prefix, why)``'s messages (see the module docstring); an empty observation after the last step is
    dropped, and a step nothing answered gets no user message (two assistant turns in a row stay
    so). Every message says why it has its weight (core.domain.weight_reasons): ``system``, ``task``,
    ``observation`` for tool results and observations, the planned ``why`` for the step's assistant
    turn."""
    messages: list[Message] = [Message("system", instruction, 0, why="system")] if instruction.strip() else []
    messages.append(Message("user", task, 0, name=task_name or None, why="task"))
    for index, (step, weight, prefix, why) in enumerate(steps):
        turn, observations = step_messages(step, weight, prefix, formatter, why)
        last = index == len(steps) - 1
        if last:
            turn = _drop_unanswered(step, turn)
        messages.extend(turn)
        if last and step.replies is None:
            observations = [m for m in observations if m.content.strip()]
        messages.extend(observations)
    return unique_tool_call_ids(messages)


def _drop_unanswered(step: Step, turn: list[Message]) -> list[Message]:
    """The last step's calls that got no result end the conversation unanswered: no tool message is
    invented for them (in the middle of a conversation the chat format needs one, so it stays)."""
    if step.kind != "tool" or step.observation.strip():
        return turn
    answered = {r.call_id for r in step.tool_results}
    return [m for m in turn if m.role != "tool" or m.tool_call_id in answered]


def unique_tool_call_ids(messages: Sequence[Message]) -> tuple[Message, ...]:
    """The same messages with every tool-call id unique within the conversation.

    A spliced sample joins paths from separate conversations, which may reuse ids (``call_1`` is
    ``lookup_customer`` in the bad prefix and ``get_order`` in the good continuation). A call whose id
    was already used earlier gets ``{id}_{n}`` (the smallest n >= 2 not used), and the tool messages
    answering it (the next ones naming that id, in order) follow; ids used once are unchanged, so the
    remap is deterministic and a conversation without collisions is returned as it is."""
    used: set[str] = set()
    waiting: dict[str, list[str]] = {}  # original id -> the ids given to its calls not yet answered
    out: list[Message] = []
    changed = False
    for message in messages:
        if message.tool_calls:
            calls = []
            for call in message.tool_calls:
                new_id = call.call_id
                if new_id in used:
                    n = 2
                    while f"{call.call_id}_{n}" in used:
                        n += 1
                    new_id = f"{call.call_id}_{n}"
                    changed = True
                used.add(new_id)
                waiting.setdefault(call.call_id, []).append(new_id)
                calls.append(replace(call, call_id=new_id) if new_id != call.call_id else call)
            message = replace(message, tool_calls=tuple(calls))
        elif message.role == "tool" and message.tool_call_id is not None:
            queue = waiting.get(message.tool_call_id)
            if queue:
                new_id = queue.pop(0)
                if new_id != message.tool_call_id:
                    message = replace(message, tool_call_id=new_id)
        out.append(message)
    return tuple(out) if changed else tuple(messages)


def revision_messages(
    instruction: str,
    task: str,
    path: SplicedPath,
    reflection: str,
    formatter: Callable[[str, str], str] = format_assistant,
    masked: Collection[int] = (),
    *,
    task_name: str = "",
) -> tuple[Message, ...]:
    """The conversation with per-message loss weights and their reasons (see module docstring and
    core.domain.weight_reasons); ``masked``: indexes into ``path.good`` of the good continuation's
    steps kept at weight 0 (a ``MaskedSteps`` names each one's reason, else they are ``masked``);
    ``task_name``: the task message's speaker."""
    if not reflection.strip():
        raise SpliceError("the reflection sentence is empty")
    planned: list[PlannedStep] = [(step, 0, "", "shared_prefix") for step in path.prefix]
    planned += [(step, 0, "", "bad_step") for step in path.bad]
    for i, step in enumerate(path.good):
        prefix = reflection if i == 0 else ""
        if i in masked:
            planned.append((step, 0, prefix, mask_reason(masked, i)))
        else:
            planned.append((step, 1, prefix, "reflection" if i == 0 else "continuation"))
    return conversation(instruction, task, planned, formatter, task_name=task_name)


def revision_sample(
    sample_id: str,
    bad: Trajectory,
    good: Trajectory,
    path: SplicedPath,
    reflection: str,
    provenance: dict[str, Any] | None = None,
    formatter: Callable[[str, str], str] = format_assistant,
    masked: Collection[int] = (),
) -> TrainingSample:
    """The revision TrainingSample (reward = the good path's reward); ``masked`` as in
    ``revision_messages``.

    The context is the FAILED path's own instruction and task text (the prompt under which the error
    was made; for search pairs both paths share them, for trace pairs matched by task key they may
    differ in wording), falling back to the good path's instruction when the failed one has none."""
    messages = revision_messages(
        bad.instruction or good.instruction,
        bad.task,
        path,
        reflection,
        formatter,
        masked,
        task_name=bad.task_name,
    )
    return TrainingSample(
        sample_id=sample_id,
        kind="revision",
        messages=messages,
        reward=good.reward,
        provenance=dict(provenance or {}),
        tools=good.tools or bad.tools,
    )


def longest_common_prefix(a: Sequence[Step], b: Sequence[Step]) -> int:
    """How many leading actions two step sequences share (actions compared whitespace/case-insensitively)."""
    shared = 0
    for left, right in zip(a, b, strict=False):
        if not _same_action(left.action, right.action):
            break
        shared += 1
    return shared


@dataclass(frozen=True)
class Partner:
    """A good path to splice a bad path onto: ``shared`` leading actions in common with the bad path."""

    leaf_id: str | None
    path: Trajectory
    shared: int
    own: bool  # the pair's own good path (the others are the tree's other good leaves)


SPLICE_PARTNERS = ("pair", "adjacent")  # RunConfig.splice["partner"]; the first is the default


def check_partner_rule(rule: str) -> str:
    """``rule`` when it names a ``splice.partner`` rule, else a SpliceError naming it."""
    if rule not in SPLICE_PARTNERS:
        raise SpliceError(f"splice.partner: unknown rule {rule!r} ({', '.join(SPLICE_PARTNERS)})")
    return rule


def splice_partners(
    bad: Trajectory,
    own: Partner,
    others: Sequence[tuple[str, Trajectory]],
    transition: int,
    rule: str = "pair",
) -> list[Partner]:
    """The good paths a bad path can be spliced onto at ``transition``, in the order to try them.

    ``pair``: the pair's own good path only. ``adjacent`` (the paper's "adjacent correct path, which
    shares the same parent node"): every good path of the tree that leaves the bad path at or before
    t' (its shared prefix with the bad path is at most ``transition`` actions and it has a step after
    it), deepest branch first - the one that branches off right at t' when the tree holds it, so the
    fewest bad actions run between the branch and the reflection and the good continuation starts
    from the state nearest to the one it was found in; ties: the pair's own path first, then by leaf
    id. Paths that took the erroneous action too (shared beyond t') are no partners."""
    if check_partner_rule(rule) == "pair":
        return [own]
    found = [own]
    for leaf_id, path in others:
        if leaf_id == own.leaf_id or path.task != bad.task:
            continue
        shared = longest_common_prefix(bad.steps, path.steps)
        if shared <= transition and shared < len(path.steps) and shared < len(bad.steps):
            found.append(Partner(leaf_id, path, shared, own=False))
    return sorted(found, key=lambda p: (-p.shared, not p.own, p.leaf_id or ""))


def rejection_kind(reason: str) -> str:
    """The kind of a ``RevisionRejected`` reason, for counting (numbers and details dropped):
    ``unverified: ended early`` (the replay's episode ended before the last action), ``unverified:
    reward below the good path's``, ``unverified: other``, ``replay failed`` (the environment
    raised), ``critic``, ``splice`` (the splice itself refused the pair), or the reason's own
    prefix before ":" for anything else."""
    head, _, detail = reason.partition(":")
    head = head.strip().lower()
    if head == "unverified":
        if "ended at step" in detail:
            return "unverified: ended early"
        if "below the good reward" in detail:
            return "unverified: reward below the good path's"
        return "unverified: other"
    return head or "unknown"
