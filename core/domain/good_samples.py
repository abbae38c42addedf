"""Owns turning a trajectory into a ``good`` training sample, with the loss-masking rule.

Pure logic (stdlib only, no I/O). Good trajectories carry no false lessons: in a good trajectory the
assistant turns whose step the environment rejected (``Step.valid`` False or an invalid-action
observation, as ``core.domain.critic.invalid_signal`` reads it) and the repeats of a loop (the same
action and observation window occurring again back to back, as ``core.domain.critic.loop_starts``
defines a loop; the first occurrence stays trained) get loss weight 0 by default
(``mask_invalid_steps`` / ``mask_loop_steps``, from ``RunConfig``). Those messages stay in the
conversation as context, so the model still sees the mistake and what followed, but is never taught
the invalid action as correct. ``trajectory_to_sample`` applies the rule and records it in the
sample's provenance (``loss_masked``); ``core.domain.datasets`` counts the masked turns per reason
in the manifest. Every message says why it has its weight (``Message.why``,
core.domain.weight_reasons): ``good_step`` for a trained turn, ``masked_invalid`` /
``masked_loop`` for a masked one, ``system`` / ``task`` / ``observation`` for the context.

Revision samples follow the same rule on their good continuation (``revision_masks``: the
continuation's rejected steps and loop repeats, a loop counted over the whole spliced path); the
splice worker records the counts in the sample's ``loss_masked`` too, and the manifest counts them
apart (``revision_masked_invalid_steps`` / ``revision_masked_loop_steps``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.domain.critic import invalid_signal
from core.domain.datasets import DatasetError
from core.domain.splice import PlannedStep, SplicedPath, conversation
from core.domain.trajectory import Step, TrainingSample, Trajectory
from core.domain.weight_reasons import MaskedSteps


def loop_repeats(steps: Sequence[Step], max_period: int = 3, min_span: int = 3) -> set[int]:
    """Indexes of the steps that REPEAT a loop: the (action, observation) window of ``p`` steps
    (p <= max_period) occurring again right after itself, with at least ``min_span`` steps taking
    part (the rule of ``core.domain.critic.loop_starts``: one legitimate double "get" is not a loop,
    three identical steps are). The first occurrence of the window is not a repeat."""
    keys = [(" ".join(s.action.lower().split()), s.observation.strip()) for s in steps]
    out: set[int] = set()
    for end in range(len(keys)):
        for period in range(1, max_period + 1):
            span = max(2 * period, min_span)
            start = end - span + 1
            if start < 0:
                continue
            if all(keys[i] == keys[i - period] for i in range(start + period, end + 1)):
                out.update(range(start + period, end + 1))
                break
    return out


def trajectory_to_sample(
    trajectory: Trajectory,
    sample_id: str,
    *,
    mask_invalid_steps: bool = True,
    mask_loop_steps: bool = True,
) -> TrainingSample:
    """A good trajectory as a training sample: each assistant turn trained on (weight 1), except
    (by default) the turns whose step the environment rejected and the repeats of a loop, which stay
    in the conversation at weight 0 (see the module docstring). The rule and its counts are recorded
    in ``provenance["loss_masked"]``.

    The observation after the final action is dropped (nothing follows it to train on). Tool
    steps stay native (core.domain.splice.conversation: assistant ``tool_calls`` + ``tool``
    messages, which are kept after a final tool call); the tool definitions travel along.
    """
    if not trajectory.steps:
        raise DatasetError(f"trajectory for sample {sample_id} has no steps")
    loops = loop_repeats(trajectory.steps) if mask_loop_steps else set()
    planned: list[PlannedStep] = []
    invalid_count = loop_count = 0
    for i, step in enumerate(trajectory.steps):
        weight, why = 1, "good_step"
        if mask_invalid_steps and invalid_signal(step) is not None:
            weight, why, invalid_count = 0, "masked_invalid", invalid_count + 1
        elif i in loops:
            weight, why, loop_count = 0, "masked_loop", loop_count + 1
        planned.append((step, weight, "", why))
    msgs = conversation(trajectory.instruction, trajectory.task, planned, task_name=trajectory.task_name)
    if trajectory.steps[-1].kind != "tool" and msgs[-1].role == "user":
        msgs = msgs[:-1]
    provenance = dict(trajectory.provenance)
    provenance["loss_masked"] = {
        "invalid_steps": mask_invalid_steps,
        "loop_steps": mask_loop_steps,
        "invalid": invalid_count,
        "loop": loop_count,
    }
    return TrainingSample(
        sample_id=sample_id,
        kind="good",
        messages=msgs,
        reward=trajectory.reward,
        provenance=provenance,
        tools=trajectory.tools,
    )


def revision_masks(
    path: SplicedPath, *, mask_invalid_steps: bool = True, mask_loop_steps: bool = True
) -> tuple[MaskedSteps, dict[str, Any]]:
    """The good continuation's steps to keep at weight 0 in a revision sample (indexes into
    ``path.good``) and the ``loss_masked`` record (rule and counts, as ``trajectory_to_sample``
    writes it). A step is masked when the environment rejected it (``invalid_signal``), or else
    when it repeats a loop of the spliced path (``loop_repeats`` over prefix + bad + good, so a
    loop the bad segment started and the continuation goes on with counts too). The indexes come
    as ``MaskedSteps``, each with its reason (``masked_invalid`` / ``masked_loop``), which the
    splice writes on the masked messages (``Message.why``)."""
    offset = len(path.prefix) + len(path.bad)
    loops = loop_repeats(path.steps) if mask_loop_steps else set()
    reasons: dict[int, str] = {}
    for i, step in enumerate(path.good):
        if mask_invalid_steps and invalid_signal(step) is not None:
            reasons[i] = "masked_invalid"
        elif offset + i in loops:
            reasons[i] = "masked_loop"
    record = {
        "invalid_steps": mask_invalid_steps,
        "loop_steps": mask_loop_steps,
        "invalid": sum(1 for why in reasons.values() if why == "masked_invalid"),
        "loop": sum(1 for why in reasons.values() if why == "masked_loop"),
    }
    return MaskedSteps(reasons), record
