"""events: an index on (project, position) for one project's events in order (GET /v1/events)

The event stream filtered every later event of every project by its metadata's ``project_id``
(485 ms per poll at 1.04M events); this expression index serves the follow query as a range scan.
It matches ``core.store.tables.EVENT_PROJECT`` (the expression the route filters on). Building it
locks writes to ``events`` for the time it takes (seconds per million events).

Revision ID: 0006_events_project
Revises: 0005_traces_metadata
Create Date: 2027-01-10 10:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_events_project"
down_revision: str | None = "0005_traces_metadata"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PROJECT = {
    "postgresql": "(CAST(metadata ->> 'project_id' AS VARCHAR))",
    "sqlite": "CAST(JSON_EXTRACT(metadata, '$.\"project_id\"') AS VARCHAR)",
}


def upgrade() -> None:
    project = sa.text(_PROJECT[op.get_bind().dialect.name])
    op.create_index("ix_events_project_position", "events", [project, "position"])


def downgrade() -> None:
    op.drop_index("ix_events_project_position", table_name="events")
