"""Owns ``SearchConfig``: how one tree is searched and which pairs are taken from it (every field,
its default and its valid range; ``SearchConfigError`` names a bad field), and its dict form as
``SearchRequested.search_config`` and ``TreeStarted.search_config`` carry it. Pure (stdlib only).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any


class SearchConfigError(ValueError):
    """A search configuration value is out of range or unknown (the message names the field)."""


@dataclass(frozen=True)
class SearchConfig:
    """How one tree is searched and which pairs are taken from it.

    n_candidates: distinct next actions asked of the policy (in ONE call) when a node is expanded.
    iterations: descents per tree; each goes from the root down to a terminal node.
    max_depth: actions after which a path is cut (terminal reason "max_depth").
    c_uct: exploration weight in UCT ``Q/N + c_uct * sqrt(ln N(parent) / N)``.
    temperature: sampling temperature of the policy for expansions (> 0 so candidates differ).
    max_tokens: generation budget per candidate ("Thought: ...\\nAction: ...").
    alpha: good leaves have reward >= alpha (inclusive: alpha = 1.0 admits perfect runs).
    beta: a bad leaf's reward is below alpha and at most (its paired good leaf's reward - beta).
    max_pairs_per_tree: at most this many (bad, good) pairs per tree, chosen by ``pair_selection``.
    pair_selection: ``stratified`` (default: spread over bad-suffix lengths and divergence depths)
        or ``deepest`` (the deepest divergences first: the baseline); core.domain.pairs.
    seed: base seed; each expansion's sampling seed is derived from it and the node id.
    record_terminal_children: True (default) = every terminal child is a leaf when it is created and
        closed nodes are never selected (see the module docstring). False = the old leaf-only rule,
        kept only as the baseline that bench/search.py measures against; do not use it otherwise.
    constrain_actions: expansions sample the Action line from the node's valid actions (the env's
        ``valid_actions()``; free where it lists none) by constrained decoding
        (docs/constrained-decoding.md); False (default) = free decoding.
    constrain_tool_calls: in a tool-calling environment (one listing its tools' JSON schemas,
        ``env.tools``: tau2's domains), expansions decode the Action line as a well-formed call of
        one of the tools whose arguments validate against its schema, or a message to the user
        (core.llm.tool_grammar; docs/constrained-decoding.md), where the policy can (the hf backend;
        a served or scripted policy decodes freely). True (default); no effect elsewhere.
        A node whose state lists valid actions (``constrain_actions``) is constrained to those.
    """

    n_candidates: int = 4
    iterations: int = 8
    max_depth: int = 20
    c_uct: float = 0.25
    temperature: float = 1.0
    max_tokens: int = 64
    alpha: float = 0.5
    beta: float = 0.2
    max_pairs_per_tree: int = 8
    pair_selection: str = "stratified"
    seed: int = 0
    record_terminal_children: bool = True
    constrain_actions: bool = False
    constrain_tool_calls: bool = True

    def __post_init__(self) -> None:
        for name in ("constrain_actions", "constrain_tool_calls"):
            if not isinstance(getattr(self, name), bool):
                raise SearchConfigError(
                    f"search config: {name} must be true or false, got {getattr(self, name)!r}"
                )
        if not isinstance(self.record_terminal_children, bool):
            raise SearchConfigError(
                "search config: record_terminal_children must be true or false, "
                f"got {self.record_terminal_children!r}"
            )
        for name in ("n_candidates", "iterations", "max_depth", "max_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SearchConfigError(f"search config: {name} must be an integer >= 1, got {value!r}")
        if not isinstance(self.max_pairs_per_tree, int) or self.max_pairs_per_tree < 0:
            raise SearchConfigError(
                f"search config: max_pairs_per_tree must be an integer >= 0, got {self.max_pairs_per_tree!r}"
            )
        if self.pair_selection not in ("stratified", "deepest"):
            raise SearchConfigError(
                f"search config: pair_selection must be stratified or deepest, got {self.pair_selection!r}"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise SearchConfigError(f"search config: seed must be an integer, got {self.seed!r}")
        for name, low, high in (("c_uct", 0.0, math.inf), ("temperature", 0.0, math.inf)):
            value = getattr(self, name)
            if not _is_number(value) or not low <= value < high:
                raise SearchConfigError(f"search config: {name} must be a number >= {low}, got {value!r}")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if not _is_number(value) or not 0.0 <= value <= 1.0:
                raise SearchConfigError(f"search config: {name} must be a number in [0, 1], got {value!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchConfig:
        """Build from a serialised config; unknown keys are an error naming them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SearchConfigError(f"search config: unknown field(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
