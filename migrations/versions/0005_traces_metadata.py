"""traces: the producer's metadata (shown in the trace view and listing, filtered by ``?metadata.KEY=``)

The metadata travels in the TraceIngested event (its trajectory's ``provenance.metadata``); this
column is its copy in the read model. Traces stored before this revision are filled from their
events (metadata was dropped on ingest before, so most hold none: ``{}``).

Revision ID: 0005_traces_metadata
Revises: 0004_pairs_review
Create Date: 2027-01-12 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005_traces_metadata"
down_revision: str | None = "0004_pairs_review"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    json_type = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
    with op.batch_alter_table("traces") as batch:
        batch.add_column(sa.Column("metadata", json_type, nullable=True))
    _backfill()


def _backfill() -> None:
    from core.store.tables import events, traces

    bind = op.get_bind()
    rows = bind.execute(
        sa.select(events.c.data).where(events.c.event_type == "TraceIngested").order_by(events.c.position)
    )
    for (data,) in rows:
        provenance = (data.get("trajectory") or {}).get("provenance") or {}
        metadata = provenance.get("metadata") or {}
        bind.execute(
            sa.update(traces).where(traces.c.trace_id == data.get("trace_id")).values(metadata=metadata)
        )


def downgrade() -> None:
    with op.batch_alter_table("traces") as batch:
        batch.drop_column("metadata")
