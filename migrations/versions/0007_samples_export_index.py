"""samples: an index for reading an iteration's samples in (position, sample id) order

A dataset download (api.datasets.iter_dataset) reads an iteration's rows in keyset pages ordered by
(position, sample id). With only the (run_id, iteration, kind) index every page scanned and sorted
the whole iteration, so a download cost pages x rows; this index makes each page a range scan.

Revision ID: 0007_samples_export_index
Revises: 0006_events_project
Create Date: 2027-01-20 09:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0007_samples_export_index"
down_revision: str | None = "0006_events_project"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NAME = "ix_samples_run_id_iteration_position_sample_id"


def upgrade() -> None:
    op.create_index(_NAME, "samples", ["run_id", "iteration", "position", "sample_id"])


def downgrade() -> None:
    op.drop_index(_NAME, table_name="samples")
