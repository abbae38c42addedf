"""traces: the producer's id is unique per project; pair id and the reason a failed trace did not pair

Revision ID: 0003_traces
Revises: 0002
Create Date: 2026-12-02 03:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_traces"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # copies stored before the constraint keep their trace but lose the key: only the first holds it
    op.execute(
        "UPDATE traces SET external_id = NULL WHERE external_id IS NOT NULL AND EXISTS ("
        "SELECT 1 FROM traces o WHERE o.project_id = traces.project_id "
        "AND o.external_id = traces.external_id AND (o.created_at < traces.created_at "
        "OR (o.created_at = traces.created_at AND o.trace_id < traces.trace_id)))"
    )
    with op.batch_alter_table("traces") as batch:
        batch.add_column(sa.Column("pair_id", sa.String(length=36), nullable=True))
        batch.add_column(sa.Column("reason", sa.Text(), nullable=True))
        batch.create_unique_constraint(
            op.f("uq_traces_project_id_external_id"), ["project_id", "external_id"]
        )


def downgrade() -> None:
    with op.batch_alter_table("traces") as batch:
        batch.drop_constraint(op.f("uq_traces_project_id_external_id"), type_="unique")
        batch.drop_column("reason")
        batch.drop_column("pair_id")
