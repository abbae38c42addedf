"""Owns what a searched tree yields: ``GoodTrajectoryFound`` per good leaf (reward >= alpha), a
``PairFound`` per chosen (bad, good) leaf pair (``core.domain.pairs.select_pairs``; each in its own
pair stream) and the closing ``TreeCompleted`` with the tree's counts.
"""

from __future__ import annotations

from typing import Any

from core.domain.events import GoodTrajectoryFound, Metadata, NewEvent, PairFound, TreeCompleted
from core.domain.ids import derived_id, pair_stream
from core.domain.mcts import SearchTree
from core.domain.pairs import good_leaves, path_trajectory, select_pairs
from search_service.tree_request import TreeRequest, tree_event


def tree_results(
    tree: SearchTree,
    req: TreeRequest,
    *,
    task: str,
    instruction: str,
    model_version: str,
    metadata: Metadata,
) -> list[NewEvent]:
    """GoodTrajectoryFound per good leaf, PairFound per chosen pair, then TreeCompleted."""
    config = req.config
    provenance: dict[str, Any] = {
        "model_version": model_version,
        "env_uri": req.env_uri,
        "task_id": req.task_id,
        "iteration": req.iteration,
    }
    out: list[NewEvent] = []
    goods = good_leaves(tree, config.alpha)
    for leaf in goods:
        sample_id = derived_id(req.tree_id, "good", leaf)
        trajectory = path_trajectory(tree, leaf, task=task, instruction=instruction, provenance=provenance)
        event = GoodTrajectoryFound(sample_id, req.tree_id, req.run_id, req.iteration, leaf, trajectory)
        out.append(tree_event(req.tree_id, metadata, event, leaf))
    pairs = select_pairs(tree, config.alpha, config.beta, config.max_pairs_per_tree, config.pair_selection)
    for spec in pairs:
        pair_id = derived_id(req.tree_id, "pair", spec.bad_leaf_id, spec.good_leaf_id)
        found = PairFound(
            pair_id=pair_id,
            source="search",
            task_key=f"{req.env_uri}#{req.task_id}",
            bad=path_trajectory(
                tree, spec.bad_leaf_id, task=task, instruction=instruction, provenance=provenance
            ),
            good=path_trajectory(
                tree, spec.good_leaf_id, task=task, instruction=instruction, provenance=provenance
            ),
            shared_steps=spec.shared_depth,
            run_id=req.run_id,
            iteration=req.iteration,
            tree_id=req.tree_id,
            bad_leaf_id=spec.bad_leaf_id,
            good_leaf_id=spec.good_leaf_id,
            divergence_node_id=spec.divergence_node_id,
            env_uri=req.env_uri,
            task_id=req.task_id,
        )
        out.append(tree_event(req.tree_id, metadata, found, pair_id, stream=pair_stream(pair_id)))
    bad_count = len([leaf for leaf in tree.leaf_rewards if leaf not in set(goods)])
    completed = TreeCompleted(
        tree_id=req.tree_id,
        run_id=req.run_id,
        iteration=req.iteration,
        nodes=len(tree.nodes),
        rollouts=tree.rollouts,
        best_reward=tree.best_reward,
        good_leaves=len(goods),
        bad_leaves=bad_count,
        pairs=len(pairs),
        exhausted=tree.exhausted and tree.rollouts < config.iterations,
    )
    out.append(tree_event(req.tree_id, metadata, completed))
    return out
