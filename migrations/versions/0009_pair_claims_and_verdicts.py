"""pairs: who holds a pair and how its reviewers agree; pair_verdicts: each reviewer's standing verdict

``claimed_key`` / ``claimed_by`` (PairClaimed until PairReleased), ``reviewers``, ``agree``,
``agreed_index`` and ``disputed`` (``core.domain.reviewers.agreement``); ``pair_verdicts`` holds each
reviewer's latest correction or acceptance not taken back. Filled from the event log for pairs
reviewed before this revision (the same refold the projector does), so no ``agentr db rebuild`` is
needed.

Revision ID: 0009_pair_claims_and_verdicts
Revises: 0008_pairs_review_priority
Create Date: 2027-02-01 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_pair_claims_and_verdicts"
down_revision: str | None = "0008_pairs_review_priority"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_REVIEW_EVENTS = ["FirstErrorCorrected", "FirstErrorAccepted"]


def upgrade() -> None:
    with op.batch_alter_table("pairs") as batch:
        batch.add_column(sa.Column("claimed_key", sa.String(64), nullable=True))
        batch.add_column(sa.Column("claimed_by", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reviewers", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("agree", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("agreed_index", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("disputed", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.create_index("ix_pairs_claimed_key", "pairs", ["claimed_key"])
    op.create_table(
        "pair_verdicts",
        sa.Column("pair_id", sa.String(36), primary_key=True),
        sa.Column("reviewer_key", sa.String(200), primary_key=True),
        sa.Column("project_id", sa.String(36), nullable=True),
        sa.Column("reviewer", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("transition_index", sa.Integer(), nullable=False),
        sa.Column("critic_index", sa.Integer(), nullable=True),
    )
    op.create_index("ix_pair_verdicts_project_id", "pair_verdicts", ["project_id"])
    op.create_index("ix_pair_verdicts_reviewer_key_pair_id", "pair_verdicts", ["reviewer_key", "pair_id"])
    _backfill()


def _backfill() -> None:
    from core.domain.review import fold_pair
    from core.store.projectors.samples import review_values
    from core.store.rows import row_to_event
    from core.store.tables import events, pair_verdicts, pairs

    bind = op.get_bind()
    streams = bind.execute(
        sa.select(events.c.stream_id).where(events.c.event_type.in_(_REVIEW_EVENTS)).distinct()
    ).scalars()
    for stream_id in list(streams):
        rows = bind.execute(
            sa.select(events).where(events.c.stream_id == stream_id).order_by(events.c.position)
        ).all()
        review = fold_pair(row_to_event(row).event for row in rows)
        if review.pair is None:
            continue
        pair_id = review.pair.pair_id
        project_id = bind.execute(sa.select(pairs.c.project_id).where(pairs.c.pair_id == pair_id)).scalar()
        values, verdicts = review_values(pair_id, project_id, review)
        bind.execute(sa.update(pairs).where(pairs.c.pair_id == pair_id).values(**values))
        if verdicts:
            bind.execute(pair_verdicts.insert(), verdicts)


def downgrade() -> None:
    op.drop_index("ix_pair_verdicts_reviewer_key_pair_id", table_name="pair_verdicts")
    op.drop_index("ix_pair_verdicts_project_id", table_name="pair_verdicts")
    op.drop_table("pair_verdicts")
    op.drop_index("ix_pairs_claimed_key", table_name="pairs")
    with op.batch_alter_table("pairs") as batch:
        for name in ("disputed", "agreed_index", "agree", "reviewers", "claimed_by", "claimed_key"):
            batch.drop_column(name)
