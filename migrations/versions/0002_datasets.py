"""datasets read model: named, versioned datasets built from a query over the event log

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 07:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("dataset_id", sa.String(length=36), nullable=False),
        sa.Column("project_id", sa.String(length=36), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("log_position", sa.BigInteger(), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("revisions", sa.Integer(), nullable=False),
        sa.Column("goods", sa.Integer(), nullable=False),
        sa.Column("query", _JSON, nullable=False),
        sa.Column("entries_sha256", sa.String(length=64), nullable=False),
        sa.Column("template_ids", _JSON, nullable=False),
        sa.Column("code_version", sa.String(length=100), nullable=False),
        sa.Column("export_version", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("dataset_id", name=op.f("pk_datasets")),
        sa.UniqueConstraint(
            "project_id", "name", "version", name=op.f("uq_datasets_project_id_name_version")
        ),
    )
    op.create_index(op.f("ix_datasets_project_id"), "datasets", ["project_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_datasets_project_id"), table_name="datasets")
    op.drop_table("datasets")
