"""Owns the relational schema: the event log, tracking/checkpoint tables and every read model.

``events`` is the source of truth (and the outbox the relay publishes from). ``tracking`` records
which positions each consumer has processed (exactly-once effect); ``checkpoints`` holds named
positions (the relay's progress); ``idempotency_keys`` holds the API's recorded responses to
requests sent with an Idempotency-Key (not derived from events, so not rebuilt). Everything
else is a projection (read model) rebuilt from the events by ``core.store.projections``; rows the
API serves carry ``project_id``.

JSON columns are JSONB on PostgreSQL and JSON (text) on SQLite. Timestamps are timezone-aware.
The Alembic migrations in ``migrations/`` must match this module (a test checks for drift).
"""

from __future__ import annotations

from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    BindParameter,
    Boolean,
    Column,
    DateTime,
    Float,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.visitors import replacement_traverse

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

Json = JSON().with_variant(JSONB(), "postgresql")
Timestamp = DateTime(timezone=True)
# SQLite only auto-increments an "INTEGER PRIMARY KEY"; PostgreSQL gets a BIGINT identity.
Position = BigInteger().with_variant(Integer(), "sqlite")

events = Table(
    "events",
    metadata,
    Column("position", Position, Identity(always=False), primary_key=True),
    Column("event_id", String(36), nullable=False, unique=True),
    Column("stream_id", String(200), nullable=False),
    Column("stream_version", Integer, nullable=False),
    Column("event_type", String(100), nullable=False),
    Column("event_version", Integer, nullable=False),
    Column("data", Json, nullable=False),
    Column("metadata", Json, nullable=False),
    Column("recorded_at", Timestamp, nullable=False),
    UniqueConstraint("stream_id", "stream_version"),
    Index(None, "event_type", "position"),
)


def _inline_binds(expression: ColumnElement[str]) -> ColumnElement[str]:
    """``expression`` with its bound parameters written into the SQL text: the planner then sees the
    same expression as an index on it under every plan (a ``$1`` key in a cached generic plan does
    not match ``'project_id'``)."""

    def inline(element: Any, **_kw: Any) -> Any:
        if isinstance(element, BindParameter):
            clone = element._clone()
            clone.literal_execute = True
            return clone
        return None

    return cast("ColumnElement[str]", replacement_traverse(cast(Any, expression), {}, inline))


EVENT_PROJECT = _inline_binds(events.c.metadata["project_id"].as_string())
"""An event's project (its metadata's ``project_id``), as the SQL that ``ix_events_project_position``
indexes: filter on exactly this to read one project's events in position order (GET /v1/events)."""

Index("ix_events_project_position", EVENT_PROJECT, events.c.position)

tracking = Table(
    "tracking",
    metadata,
    Column("consumer", String(100), primary_key=True),
    Column("position", BigInteger, primary_key=True),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("name", String(100), primary_key=True),
    Column("position", BigInteger, nullable=False),
)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("scope", String(100), primary_key=True),  # the caller's namespace (project or admin)
    Column("key", String(200), primary_key=True),
    Column("method", String(10), nullable=False),
    Column("path", String(500), nullable=False),
    Column("request_hash", String(64), nullable=False),
    Column("status_code", Integer, nullable=False),
    Column("response", Json, nullable=True),
    Column("created_at", Timestamp, nullable=False),
)

# ------------------------------------------------------------------------------------------------
# Read models (projections). Everything below is derived from ``events`` and may be rebuilt.
# ------------------------------------------------------------------------------------------------

projects = Table(
    "projects",
    metadata,
    Column("project_id", String(36), primary_key=True),
    Column("name", String(200), nullable=False),
    Column("created_at", Timestamp, nullable=False),
)

api_keys = Table(
    "api_keys",
    metadata,
    Column("key_id", String(36), primary_key=True),
    Column("project_id", String(36), nullable=False, index=True),
    Column("prefix", String(64), nullable=False, index=True),
    Column("salt", String(128), nullable=False),
    Column("key_hash", String(256), nullable=False),
    Column("scopes", Json, nullable=False),
    Column("label", String(200), nullable=False, default=""),
    Column("revoked", Boolean, nullable=False, default=False),
    Column("created_at", Timestamp, nullable=False),
)

runs = Table(
    "runs",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("project_id", String(36), nullable=False, index=True),
    Column("status", String(32), nullable=False),
    Column("config", Json, nullable=False),
    Column("current_iteration", Integer, nullable=False, default=0),
    Column("final_model_ref", Text, nullable=True),
    Column("reason", Text, nullable=True),
    Column("summary", Json, nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("updated_at", Timestamp, nullable=False),
)

iterations = Table(
    "iterations",
    metadata,
    Column("run_id", String(36), primary_key=True),
    Column("iteration", Integer, primary_key=True),
    Column("project_id", String(36), nullable=True, index=True),
    Column("status", String(32), nullable=False),
    Column("model_ref", Text, nullable=False),
    Column("alpha", Float, nullable=False),
    Column("trees_expected", Integer, nullable=False, default=0),
    Column("trees_done", Integer, nullable=False, default=0),
    Column("trees_failed", Integer, nullable=False, default=0),
    Column("pairs", Integer, nullable=False, default=0),
    Column("revisions", Integer, nullable=False, default=0),
    Column("goods", Integer, nullable=False, default=0),
    Column("dataset_id", String(64), nullable=True),
    Column("checkpoint", Text, nullable=True),
    Column("metrics", Json, nullable=False),
    Column("revision_length_mean", Float, nullable=True),
    Column("reason", Text, nullable=True),
    Column("updated_at", Timestamp, nullable=False),
)

trees = Table(
    "trees",
    metadata,
    Column("tree_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=True, index=True),
    Column("project_id", String(36), nullable=True, index=True),
    Column("iteration", Integer, nullable=False, default=0),
    Column("env_uri", String(300), nullable=False),
    Column("task_id", String(200), nullable=False),
    Column("status", String(32), nullable=False),
    Column("root_id", String(36), nullable=True),
    Column("nodes", Integer, nullable=False, default=0),
    Column("rollouts", Integer, nullable=False, default=0),
    Column("best_reward", Float, nullable=True),
    Column("reason", Text, nullable=True),
    Column("updated_at", Timestamp, nullable=False),
)

nodes = Table(
    "nodes",
    metadata,
    Column("tree_id", String(36), primary_key=True),
    Column("node_id", String(36), primary_key=True),
    Column("project_id", String(36), nullable=True),  # event metadata, else the tree's
    Column("parent_id", String(36), nullable=True),
    Column("depth", Integer, nullable=False),
    Column("action", Text, nullable=False),
    Column("thought", Text, nullable=False),
    Column("observation", Text, nullable=False),
    Column("reward", Float, nullable=False),
    Column("done", Boolean, nullable=False),
    Column("valid", Boolean, nullable=False),
    Column("visits", Integer, nullable=False, default=0),
    Column("value_sum", Float, nullable=False, default=0.0),
)

pairs = Table(
    "pairs",
    metadata,
    Column("pair_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=True, index=True),
    Column("project_id", String(36), nullable=True, index=True),
    Column("iteration", Integer, nullable=False, default=0),
    Column("tree_id", String(36), nullable=True, index=True),
    Column("source", String(16), nullable=False),
    Column("task_key", Text, nullable=False),
    Column("status", String(32), nullable=False),
    Column("shared_steps", Integer, nullable=False),
    Column("transition_index", Integer, nullable=True),
    Column("strategy", String(16), nullable=True),
    Column("reason", Text, nullable=True),
    # the review queue's signals, from FirstErrorMarked (core.domain.review.review_signals)
    Column("critic_index", Integer, nullable=True),
    Column("oracle_index", Integer, nullable=True),
    Column("fallback", Boolean, nullable=True),
    Column("uncertain", Integer, nullable=True),
    Column("margin", Float, nullable=True),
    Column("corrections", Integer, nullable=False, default=0, server_default="0"),
    # reviewers who confirmed the t' as it is (FirstErrorAccepted); reviewed = corrections + accepts > 0
    Column("accepts", Integer, nullable=False, default=0, server_default="0"),
    Column("spread", Integer, nullable=True),  # the largest |t'| gap between critic and baseline critics
    Column("priority", Float, nullable=True, index=True),  # core.domain.review.review_priority
    # who holds the pair (PairClaimed, until PairReleased): the key id and its name
    Column("claimed_key", String(64), nullable=True, index=True),
    Column("claimed_by", Text, nullable=True),
    # the reviewers' standing verdicts (core.domain.reviewers.agreement): how many reviewers, how many
    # name the majority t' (agreed_index; null: none or a tie), and whether reviewers are tied
    Column("reviewers", Integer, nullable=False, default=0, server_default="0"),
    Column("agree", Integer, nullable=False, default=0, server_default="0"),
    Column("agreed_index", Integer, nullable=True),
    Column("disputed", Boolean, nullable=False, default=False, server_default=false()),
)

# each reviewer's standing verdict on a pair (core.domain.reviewers.verdicts): "my reviews" and the
# review page's agreement figures
pair_verdicts = Table(
    "pair_verdicts",
    metadata,
    Column("pair_id", String(36), primary_key=True),
    Column("reviewer_key", String(200), primary_key=True),
    Column("project_id", String(36), nullable=True, index=True),
    Column("reviewer", Text, nullable=False),
    Column("kind", String(16), nullable=False),  # correction | acceptance
    Column("transition_index", Integer, nullable=False),
    Column("critic_index", Integer, nullable=True),
    Index(None, "reviewer_key", "pair_id"),
)

samples = Table(
    "samples",
    metadata,
    Column("sample_id", String(36), primary_key=True),
    Column("run_id", String(36), nullable=True),
    Column("project_id", String(36), nullable=True, index=True),
    Column("iteration", Integer, nullable=False, default=0),
    Column("kind", String(16), nullable=False),
    Column("pair_id", String(36), nullable=True, index=True),
    Column("tree_id", String(36), nullable=True),
    Column("position", BigInteger, nullable=False),
    Column("data", Json, nullable=False),
    Column("verified", Boolean, nullable=True),
    Column("template_id", String(64), nullable=True),
    Column("revision_length", Integer, nullable=True),
    Index(None, "run_id", "iteration", "kind"),
    # an iteration's dataset download reads its rows in keyset pages of (position, sample_id)
    Index(None, "run_id", "iteration", "position", "sample_id"),
)

traces = Table(
    "traces",
    metadata,
    Column("trace_id", String(36), primary_key=True),
    Column("project_id", String(36), nullable=False, index=True),
    Column("task_key", Text, nullable=False),
    Column("outcome", String(16), nullable=False),
    Column("source_format", String(32), nullable=False),
    Column("external_id", String(200), nullable=True),
    Column("status", String(32), nullable=False),
    Column("transition_index", Integer, nullable=True),
    Column("strategy", String(16), nullable=True),
    Column("sample_id", String(36), nullable=True),
    Column("created_at", Timestamp, nullable=False),
    Column("pair_id", String(36), nullable=True),  # the pair made for this failed trace
    Column("reason", Text, nullable=True),  # why a failed trace did not pair or its pair was rejected
    # the producer's metadata (the envelope's `metadata`, Langfuse metadata/userId/tags, span attributes)
    Column("metadata", Json, nullable=True),
    # the producer's id is a key: one trace per (project, external id), across both doors
    UniqueConstraint("project_id", "external_id"),
)

datasets = Table(
    "datasets",
    metadata,
    Column("dataset_id", String(36), primary_key=True),
    Column("project_id", String(36), nullable=False, index=True),
    Column("name", String(100), nullable=False),
    Column("version", Integer, nullable=False),
    Column("position", BigInteger, nullable=False),  # the DatasetCreated event (holds the manifest)
    Column("log_position", BigInteger, nullable=False),
    Column("samples", Integer, nullable=False),
    Column("revisions", Integer, nullable=False),
    Column("goods", Integer, nullable=False),
    Column("query", Json, nullable=False),
    Column("entries_sha256", String(64), nullable=False),
    Column("template_ids", Json, nullable=False),
    Column("code_version", String(100), nullable=False),
    Column("export_version", Integer, nullable=False),
    Column("created_at", Timestamp, nullable=False),
    UniqueConstraint("project_id", "name", "version"),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("event_position", BigInteger, primary_key=True),  # the MessageDeadLettered event
    Column("consumer", String(100), nullable=False),
    Column("topic", String(200), nullable=False),
    Column("position", BigInteger, nullable=False),  # the message that failed
    Column("deliveries", Integer, nullable=False),
    Column("error", Text, nullable=False),
    Column("project_id", String(36), nullable=True),
    Column("recorded_at", Timestamp, nullable=False),
)

#: Tables derived from events: truncated and refilled by ``rebuild``.
PROJECTION_TABLES: tuple[Table, ...] = (
    projects,
    api_keys,
    runs,
    iterations,
    trees,
    nodes,
    pairs,
    pair_verdicts,
    samples,
    traces,
    datasets,
    dead_letters,
)
