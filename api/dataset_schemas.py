"""Owns the HTTP shapes of trace datasets and of the project-wide trace and pair listings.

``DatasetQueryIn`` mirrors ``core.domain.trace_datasets.DatasetQuery`` field for field with bounds
and descriptions; ``to_domain()`` gives the dataclass the manifest stores.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from api.schemas import Timestamp, _Strict
from core.domain.trace_datasets import MAX_SAMPLES, DatasetQuery

DatasetFormat = Literal["openai", "sharegpt", "parquet", "samples", "dpo", "prm", "tokenized", "hf"]
Kind = Literal["revision", "good"]
Source = Literal["traces", "runs"]
_KINDS: tuple[Kind, ...] = ("revision", "good")
_SOURCES: tuple[Source, ...] = ("traces", "runs")
Key = Annotated[str, Field(min_length=1, max_length=200)]
Id = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]{1,64}$")]


class DatasetQueryIn(_Strict):
    kinds: list[Kind] = Field(
        default_factory=lambda: list(_KINDS),
        min_length=1,
        description="revision samples (from failed traces / bad paths) and/or good samples.",
    )
    sources: list[Source] = Field(
        default_factory=lambda: list(_SOURCES),
        min_length=1,
        description="traces: samples made from production traces; runs: samples made by a run's search.",
    )
    task_keys: list[Key] = Field(default_factory=list, max_length=1000, description="Only these task keys.")
    since: Timestamp | None = Field(
        default=None, description="Only samples whose event was recorded at or after this time."
    )
    until: Timestamp | None = Field(
        default=None, description="Only samples whose event was recorded before this time."
    )
    run_ids: list[Id] = Field(
        default_factory=list, max_length=1000, description="Only samples of these runs."
    )
    trace_ids: list[Id] = Field(
        default_factory=list, max_length=10_000, description="Only samples of these traces."
    )
    outcome: Literal["success", "failure"] | None = Field(
        default=None,
        description="Trace samples by the outcome of the trace they came from: failure -> revisions, "
        "success -> good samples.",
    )
    critic_strategies: list[Literal["model", "direct", "rules"]] = Field(
        default_factory=list, description="Only revisions whose first error this critic strategy found."
    )
    max_samples: int = Field(
        default=MAX_SAMPLES,
        ge=1,
        le=MAX_SAMPLES,
        description="Refuse (never truncate) a dataset with more samples.",
    )
    include_reasoning: bool = Field(
        default=False,
        description="Train on reasoning: every download renders an assistant message's reasoning "
        "as a '<think>\\n...\\n</think>\\n\\n' prefix of its content (weighted like the message).",
    )
    sample_ids: list[Id] = Field(
        default_factory=list,
        max_length=MAX_SAMPLES,
        description="A selection: only these samples. Each must be a sample the other filters take "
        "(else a 422 naming the first few).",
    )
    exclude_sample_ids: list[Id] = Field(
        default_factory=list,
        max_length=MAX_SAMPLES,
        description="Never these samples (e.g. unchecked in a preview). Each must be a sample the other "
        "filters take, and none may also be in sample_ids.",
    )

    def to_domain(self) -> DatasetQuery:
        def iso(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat()

        return DatasetQuery(
            kinds=tuple(self.kinds),
            sources=tuple(self.sources),
            task_keys=tuple(self.task_keys),
            since=iso(self.since),
            until=iso(self.until),
            run_ids=tuple(self.run_ids),
            trace_ids=tuple(self.trace_ids),
            outcome=self.outcome,
            critic_strategies=tuple(self.critic_strategies),
            max_samples=self.max_samples,
            include_reasoning=self.include_reasoning,
            sample_ids=tuple(self.sample_ids),
            exclude_sample_ids=tuple(self.exclude_sample_ids),
        )


class DatasetIn(_Strict):
    name: str = Field(
        min_length=1,
        max_length=100,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        description="The dataset's name; creating the same name again makes the next version.",
    )
    query: DatasetQueryIn = Field(default_factory=lambda: DatasetQueryIn())
    allow_empty: bool = Field(default=False, description="Create the dataset even when no sample matches.")


class DatasetSummaryOut(BaseModel):
    dataset_id: str
    name: str
    version: int
    samples: int
    revisions: int
    goods: int
    log_position: int = Field(description="The last event position when the dataset was built.")
    entries_sha256: str = Field(description="SHA-256 of the manifest entries (ids, kinds, positions).")
    template_ids: list[str]
    code_version: str
    export_version: int
    created_at: datetime
    query: dict[str, Any]


class DatasetEntryOut(BaseModel):
    sample_id: str
    kind: str
    position: int
    template_id: str | None = None


class DatasetOut(DatasetSummaryOut):
    entries: list[DatasetEntryOut] = Field(description="The samples in download order.")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the download lacks, naming the samples (e.g. tool calls without tool definitions).",
    )


class DatasetPage(BaseModel):
    items: list[DatasetSummaryOut]
    next_cursor: str | None = None


class RebuildOut(BaseModel):
    dataset_id: str
    identical: bool = Field(
        description="The stored query over the log (up to log_position) gives the same entries."
    )
    problems: list[str] = Field(default_factory=list)
    entries_sha256: str


class TraceSummaryOut(BaseModel):
    trace_id: str
    task_key: str
    outcome: str
    source_format: str
    external_id: str | None = None
    status: str
    transition_index: int | None = None
    strategy: str | None = None
    sample_id: str | None = None
    reason: str | None = None
    created_at: datetime
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="The producer's metadata kept with the trace (filter: ?metadata.KEY=).",
    )


class TracePage(BaseModel):
    items: list[TraceSummaryOut]
    next_cursor: str | None = None
