"""initial schema: event log, tracking, checkpoints, idempotency keys and every read model

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 20:25:51.080287
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = '0001'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('api_keys',
    sa.Column('key_id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=36), nullable=False),
    sa.Column('prefix', sa.String(length=64), nullable=False),
    sa.Column('salt', sa.String(length=128), nullable=False),
    sa.Column('key_hash', sa.String(length=256), nullable=False),
    sa.Column('scopes', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('label', sa.String(length=200), nullable=False),
    sa.Column('revoked', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('key_id', name=op.f('pk_api_keys'))
    )
    op.create_index(op.f('ix_api_keys_prefix'), 'api_keys', ['prefix'], unique=False)
    op.create_index(op.f('ix_api_keys_project_id'), 'api_keys', ['project_id'], unique=False)
    op.create_table('checkpoints',
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_checkpoints'))
    )
    op.create_table('dead_letters',
    sa.Column('event_position', sa.BigInteger(), nullable=False),
    sa.Column('consumer', sa.String(length=100), nullable=False),
    sa.Column('topic', sa.String(length=200), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.Column('deliveries', sa.Integer(), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('project_id', sa.String(length=36), nullable=True),
    sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('event_position', name=op.f('pk_dead_letters'))
    )
    op.create_table('events',
    sa.Column('position', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), sa.Identity(always=False), nullable=False),
    sa.Column('event_id', sa.String(length=36), nullable=False),
    sa.Column('stream_id', sa.String(length=200), nullable=False),
    sa.Column('stream_version', sa.Integer(), nullable=False),
    sa.Column('event_type', sa.String(length=100), nullable=False),
    sa.Column('event_version', sa.Integer(), nullable=False),
    sa.Column('data', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('metadata', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('recorded_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('position', name=op.f('pk_events')),
    sa.UniqueConstraint('event_id', name=op.f('uq_events_event_id')),
    sa.UniqueConstraint('stream_id', 'stream_version', name=op.f('uq_events_stream_id_stream_version'))
    )
    op.create_index(op.f('ix_events_event_type_position'), 'events', ['event_type', 'position'], unique=False)
    op.create_table('idempotency_keys',
    sa.Column('scope', sa.String(length=100), nullable=False),
    sa.Column('key', sa.String(length=200), nullable=False),
    sa.Column('method', sa.String(length=10), nullable=False),
    sa.Column('path', sa.String(length=500), nullable=False),
    sa.Column('request_hash', sa.String(length=64), nullable=False),
    sa.Column('status_code', sa.Integer(), nullable=False),
    sa.Column('response', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('scope', 'key', name=op.f('pk_idempotency_keys'))
    )
    op.create_table('iterations',
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.Column('iteration', sa.Integer(), nullable=False),
    sa.Column('project_id', sa.String(length=36), nullable=True),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('model_ref', sa.Text(), nullable=False),
    sa.Column('alpha', sa.Float(), nullable=False),
    sa.Column('trees_expected', sa.Integer(), nullable=False),
    sa.Column('trees_done', sa.Integer(), nullable=False),
    sa.Column('trees_failed', sa.Integer(), nullable=False),
    sa.Column('pairs', sa.Integer(), nullable=False),
    sa.Column('revisions', sa.Integer(), nullable=False),
    sa.Column('goods', sa.Integer(), nullable=False),
    sa.Column('dataset_id', sa.String(length=64), nullable=True),
    sa.Column('checkpoint', sa.Text(), nullable=True),
    sa.Column('metrics', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('revision_length_mean', sa.Float(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('run_id', 'iteration', name=op.f('pk_iterations'))
    )
    op.create_index(op.f('ix_iterations_project_id'), 'iterations', ['project_id'], unique=False)
    op.create_table('nodes',
    sa.Column('tree_id', sa.String(length=36), nullable=False),
    sa.Column('node_id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=36), nullable=True),
    sa.Column('parent_id', sa.String(length=36), nullable=True),
    sa.Column('depth', sa.Integer(), nullable=False),
    sa.Column('action', sa.Text(), nullable=False),
    sa.Column('thought', sa.Text(), nullable=False),
    sa.Column('observation', sa.Text(), nullable=False),
    sa.Column('reward', sa.Float(), nullable=False),
    sa.Column('done', sa.Boolean(), nullable=False),
    sa.Column('valid', sa.Boolean(), nullable=False),
    sa.Column('visits', sa.Integer(), nullable=False),
    sa.Column('value_sum', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('tree_id', 'node_id', name=op.f('pk_nodes'))
    )
    op.create_table('pairs',
    sa.Column('pair_id', sa.String(length=36), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=True),
    sa.Column('project_id', sa.String(length=36), nullable=True),
    sa.Column('iteration', sa.Integer(), nullable=False),
    sa.Column('tree_id', sa.String(length=36), nullable=True),
    sa.Column('source', sa.String(length=16), nullable=False),
    sa.Column('task_key', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('shared_steps', sa.Integer(), nullable=False),
    sa.Column('transition_index', sa.Integer(), nullable=True),
    sa.Column('strategy', sa.String(length=16), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('pair_id', name=op.f('pk_pairs'))
    )
    op.create_index(op.f('ix_pairs_project_id'), 'pairs', ['project_id'], unique=False)
    op.create_index(op.f('ix_pairs_run_id'), 'pairs', ['run_id'], unique=False)
    op.create_index(op.f('ix_pairs_tree_id'), 'pairs', ['tree_id'], unique=False)
    op.create_table('projects',
    sa.Column('project_id', sa.String(length=36), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('project_id', name=op.f('pk_projects'))
    )
    op.create_table('runs',
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=36), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('config', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('current_iteration', sa.Integer(), nullable=False),
    sa.Column('final_model_ref', sa.Text(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('summary', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('run_id', name=op.f('pk_runs'))
    )
    op.create_index(op.f('ix_runs_project_id'), 'runs', ['project_id'], unique=False)
    op.create_table('samples',
    sa.Column('sample_id', sa.String(length=36), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=True),
    sa.Column('project_id', sa.String(length=36), nullable=True),
    sa.Column('iteration', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('pair_id', sa.String(length=36), nullable=True),
    sa.Column('tree_id', sa.String(length=36), nullable=True),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.Column('data', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('verified', sa.Boolean(), nullable=True),
    sa.Column('template_id', sa.String(length=64), nullable=True),
    sa.Column('revision_length', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('sample_id', name=op.f('pk_samples'))
    )
    op.create_index(op.f('ix_samples_pair_id'), 'samples', ['pair_id'], unique=False)
    op.create_index(op.f('ix_samples_project_id'), 'samples', ['project_id'], unique=False)
    op.create_index(op.f('ix_samples_run_id_iteration_kind'), 'samples', ['run_id', 'iteration', 'kind'], unique=False)
    op.create_table('traces',
    sa.Column('trace_id', sa.String(length=36), nullable=False),
    sa.Column('project_id', sa.String(length=36), nullable=False),
    sa.Column('task_key', sa.Text(), nullable=False),
    sa.Column('outcome', sa.String(length=16), nullable=False),
    sa.Column('source_format', sa.String(length=32), nullable=False),
    sa.Column('external_id', sa.String(length=200), nullable=True),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('transition_index', sa.Integer(), nullable=True),
    sa.Column('strategy', sa.String(length=16), nullable=True),
    sa.Column('sample_id', sa.String(length=36), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('trace_id', name=op.f('pk_traces'))
    )
    op.create_index(op.f('ix_traces_project_id'), 'traces', ['project_id'], unique=False)
    op.create_table('tracking',
    sa.Column('consumer', sa.String(length=100), nullable=False),
    sa.Column('position', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('consumer', 'position', name=op.f('pk_tracking'))
    )
    op.create_table('trees',
    sa.Column('tree_id', sa.String(length=36), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=True),
    sa.Column('project_id', sa.String(length=36), nullable=True),
    sa.Column('iteration', sa.Integer(), nullable=False),
    sa.Column('env_uri', sa.String(length=300), nullable=False),
    sa.Column('task_id', sa.String(length=200), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('root_id', sa.String(length=36), nullable=True),
    sa.Column('nodes', sa.Integer(), nullable=False),
    sa.Column('rollouts', sa.Integer(), nullable=False),
    sa.Column('best_reward', sa.Float(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('tree_id', name=op.f('pk_trees'))
    )
    op.create_index(op.f('ix_trees_project_id'), 'trees', ['project_id'], unique=False)
    op.create_index(op.f('ix_trees_run_id'), 'trees', ['run_id'], unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_trees_run_id'), table_name='trees')
    op.drop_index(op.f('ix_trees_project_id'), table_name='trees')
    op.drop_table('trees')
    op.drop_table('tracking')
    op.drop_index(op.f('ix_traces_project_id'), table_name='traces')
    op.drop_table('traces')
    op.drop_index(op.f('ix_samples_run_id_iteration_kind'), table_name='samples')
    op.drop_index(op.f('ix_samples_project_id'), table_name='samples')
    op.drop_index(op.f('ix_samples_pair_id'), table_name='samples')
    op.drop_table('samples')
    op.drop_index(op.f('ix_runs_project_id'), table_name='runs')
    op.drop_table('runs')
    op.drop_table('projects')
    op.drop_index(op.f('ix_pairs_tree_id'), table_name='pairs')
    op.drop_index(op.f('ix_pairs_run_id'), table_name='pairs')
    op.drop_index(op.f('ix_pairs_project_id'), table_name='pairs')
    op.drop_table('pairs')
    op.drop_table('nodes')
    op.drop_index(op.f('ix_iterations_project_id'), table_name='iterations')
    op.drop_table('iterations')
    op.drop_table('idempotency_keys')
    op.drop_index(op.f('ix_events_event_type_position'), table_name='events')
    op.drop_table('events')
    op.drop_table('dead_letters')
    op.drop_table('checkpoints')
    op.drop_index(op.f('ix_api_keys_project_id'), table_name='api_keys')
    op.drop_index(op.f('ix_api_keys_prefix'), table_name='api_keys')
    op.drop_table('api_keys')
