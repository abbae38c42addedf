"""pairs: the review queue's signals (critic and oracle t', fallback, uncertain verdicts, margin, corrections)

The columns are filled from the event log for pairs critiqued or corrected before this revision
(the same ``core.domain.review.review_signals`` the projector applies), so the review queue lists
them without a ``agentr db rebuild``.

Revision ID: 0004_pairs_review
Revises: 0003_traces
Create Date: 2026-12-03 09:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_pairs_review"
down_revision: str | None = "0003_traces"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("critic_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("oracle_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("fallback", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("uncertain", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("margin", sa.Float(), nullable=True))
        batch.add_column(sa.Column("corrections", sa.Integer(), nullable=False, server_default="0"))
    _backfill()


def _backfill() -> None:
    from core.domain.events import FirstErrorMarked
    from core.domain.review import review_signals
    from core.store.rows import row_to_event
    from core.store.tables import events, pairs

    bind = op.get_bind()
    rows = bind.execute(
        sa.select(events)
        .where(events.c.event_type.in_(["FirstErrorMarked", "FirstErrorCorrected"]))
        .order_by(events.c.position)
    )
    for row in rows:
        recorded = row_to_event(row)
        event = recorded.event
        if isinstance(event, FirstErrorMarked):
            signals = review_signals(event)
            values: dict[str, object] = {
                "critic_index": signals.critic_index,
                "oracle_index": signals.oracle_index,
                "fallback": signals.fallback,
                "uncertain": signals.uncertain,
                "margin": signals.margin,
            }
            bind.execute(sa.update(pairs).where(pairs.c.pair_id == event.pair_id).values(**values))
        else:
            pair_id = recorded.data.get("pair_id")
            bind.execute(
                sa.update(pairs).where(pairs.c.pair_id == pair_id).values(corrections=pairs.c.corrections + 1)
            )


def downgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        for name in ("corrections", "margin", "uncertain", "fallback", "oracle_index", "critic_index"):
            batch.drop_column(name)
