"""pairs: the review queue's priority, the distance between strategies and reviewers' acceptances

``priority`` (``core.domain.review.review_priority``) orders the review queue, ``spread`` is the
largest t' gap between the critic and its baseline critics, ``accepts`` counts FirstErrorAccepted
(a reviewer confirmed the t'). Filled from the event log for pairs judged before this revision, so
the queue is ordered without an ``agentr db rebuild``.

Revision ID: 0008_pairs_review_priority
Revises: 0007_samples_export_index
Create Date: 2027-01-25 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_pairs_review_priority"
down_revision: str | None = "0007_samples_export_index"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_pairs_priority"


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("accepts", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("spread", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("priority", sa.Float(), nullable=True))
    op.create_index(_INDEX, "pairs", ["priority"])
    _backfill()


def _backfill() -> None:
    from core.domain.events import FirstErrorMarked
    from core.domain.review import review_priority, review_signals
    from core.store.rows import row_to_event
    from core.store.tables import events, pairs

    bind = op.get_bind()
    rows = bind.execute(
        sa.select(events)
        .where(events.c.event_type.in_(["FirstErrorMarked", "FirstErrorAccepted"]))
        .order_by(events.c.position)
    )
    for row in rows:
        recorded = row_to_event(row)
        event = recorded.event
        pair_id = recorded.data.get("pair_id")
        if isinstance(event, FirstErrorMarked):
            signals = review_signals(event)
            values: dict[str, object] = {"spread": signals.spread, "priority": review_priority(signals)}
        else:
            values = {"accepts": pairs.c.accepts + 1}
        bind.execute(sa.update(pairs).where(pairs.c.pair_id == pair_id).values(**values))


def downgrade() -> None:
    op.drop_index(_INDEX, table_name="pairs")
    with op.batch_alter_table("pairs") as batch:
        for name in ("priority", "spread", "accepts"):
            batch.drop_column(name)
