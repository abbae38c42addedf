"""Owns the shapes of the tree, pair and sample routes (``/v1/trees``, ``/v1/pairs``,
``/v1/samples``)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
)


class NodeOut(BaseModel):
    node_id: str
    parent_id: str | None
    depth: int
    action: str
    thought: str
    observation: str
    reward: float
    done: bool
    valid: bool
    visits: int = Field(description="N(s): leaf outcomes recorded at or below this node.")
    value_sum: float = Field(description="Sum of the terminal rewards of those outcomes.")
    q: float | None = Field(description="Mean value Q(s)/N(s); null when unvisited.")


class TreeSummaryOut(BaseModel):
    tree_id: str
    run_id: str | None
    iteration: int
    env_uri: str
    task_id: str
    status: str
    node_count: int = Field(description="Nodes expanded so far.")
    rollouts: int
    best_reward: float | None
    reason: str | None = None


class TreeOut(TreeSummaryOut):
    root_id: str | None = None
    nodes: list[NodeOut] = Field(default_factory=list, description="Every node, parents before children.")
    position: int = Field(
        0,
        ge=0,
        description="The event-log position of the tree stream's last event included in `nodes`: follow "
        "`GET /v1/events?after=position` for the nodes and visits that came later.",
    )


class TreePage(BaseModel):
    items: list[TreeSummaryOut]
    next_cursor: str | None = None


class PairOut(BaseModel):
    pair_id: str
    run_id: str | None
    iteration: int
    tree_id: str | None
    source: str
    task_key: str
    status: str
    shared_steps: int
    transition_index: int | None = None
    strategy: str | None = None
    reason: str | None = None


class PairPage(BaseModel):
    items: list[PairOut]
    next_cursor: str | None = None


class SampleOut(BaseModel):
    sample_id: str
    run_id: str | None
    iteration: int
    kind: str
    pair_id: str | None = None
    tree_id: str | None = None
    verified: bool | None = None
    template_id: str | None = None
    revision_length: int | None = None
    sample: dict[str, Any] = Field(
        description=(
            "The TrainingSample: messages with loss weights, each with `why`, the reason for its weight "
            '(set by the code that built the sample; "" for samples stored before reasons existed), '
            "and provenance."
        )
    )


class SampleDetailOut(SampleOut):
    weight_reasons: dict[str, str] = Field(
        description=(
            "The closed vocabulary of `why` (core.domain.weight_reasons): reason -> what it means. "
            "A message has weight 1 exactly when its reason is one of `trained_reasons`."
        )
    )
    trained_reasons: list[str] = Field(description="The reasons that come with weight 1.")


class SamplePage(BaseModel):
    items: list[SampleOut]
    next_cursor: str | None = None
