"""Owns the learner tests' shared inputs (test_archer.py, test_dpo.py, test_value_critic.py): the
tiny Llama they train (hidden 32, 2 layers, a tokenizer trained on crafting text) and the
hand-built tree whose transitions they train ArCHer on.

The tree: root "Goal: craft stick." with two children, "get 2 oak planks" (valid, expanded) and
"get 1 dirt" (rejected by the environment, a leaf at max_depth with reward 0); under the planks,
"craft 4 stick using 2 oak planks" ends the episode with reward 1. Three transitions.
"""

from __future__ import annotations

from pathlib import Path

import torch

from core.domain.events import NodeRecord
from core.domain.mcts import SearchTree
from core.domain.transitions import Transition, TreeSource, tree_transitions
from core.llm.tiny import build_tiny_model

INSTRUCTION = "You are a crafting agent."
TASK = "Goal: craft stick."
TEXTS = [
    INSTRUCTION,
    "Goal: craft stick. craft 4 stick using 2 oak planks",
    "Thought: I need oak planks.\nAction: get 2 oak planks",
    "Could not find dirt. Got 2 oak planks. Crafted 4 minecraft:stick",
] * 20


def tiny_learner_model(folder: Path) -> Path:
    """The learner tests' tiny model, saved in ``folder`` (one torch thread)."""
    torch.set_num_threads(1)
    return build_tiny_model(folder, TEXTS, hidden=32, layers=2, heads=2, vocab_size=400)


def hand_tree() -> SearchTree:
    tree = SearchTree("t1", "root", 10)
    tree.add_nodes([NodeRecord("root", None, 0, "", "", TASK)])
    tree.add_nodes(
        [
            NodeRecord("a", "root", 1, "get 2 oak planks", "I need oak planks.", "Got 2 oak planks"),
            NodeRecord("d", "root", 1, "get 1 dirt", "dirt", "Could not find dirt", 0.0, False, False),
        ]
    )
    tree.add_nodes(
        [NodeRecord("b", "a", 2, "craft 4 stick using 2 oak planks", "craft", "Crafted 4 stick", 1.0, True)]
    )
    tree.finish_rollout("b", 1.0, "done")
    tree.record_leaf("d", 0.0, "max_depth")
    return tree


def hand_transitions() -> list[Transition]:
    return tree_transitions(TreeSource(hand_tree(), TASK, INSTRUCTION, 1))


# The train settings of the tiny dpo and archer runs (tests/ml/test_methods_run.py in the embedded
# mode, tests/e2e/test_services_methods.py over the services): a few optimizer steps each.
DPO_RUN_TRAIN = {
    "method": "dpo",
    "max_steps": 2,
    "batch_size": 2,
    "learning_rate": 1e-4,
    "warmup": 0,
    "beta": 0.1,
}
ARCHER_RUN_TRAIN = {
    "method": "archer",
    "iterations": 2,
    "warmup_iters": 1,
    "critic_epochs": 1,
    "actor_epochs": 1,
    "batch_size": 2,
    "grad_accumulation": 1,
    "head_hidden": 16,
    "max_state_tokens": 128,
    "max_length": 256,
    "transitions": {"invalid_action_penalty": 0.1},
}
