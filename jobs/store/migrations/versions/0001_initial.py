"""initial schema: runs, metrics, roadmap, evaluations, change points, annotations

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29 15:33:22.044205
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.append_only import trigger_ddl
from jobs.store.views import VIEWS

# Spelled out, not read from the models: this migration must not change when the models do.
APPEND_ONLY_TABLES = ["runs", "metrics", "gate_evaluations", "change_points", "annotations"]


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('roadmap_rows',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('title', sa.Text(), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('engine', sa.String(length=64), nullable=False),
    sa.Column('comparison', sa.String(length=2), nullable=False),
    sa.Column('threshold', sa.Float(), nullable=False),
    sa.Column('peer_engine', sa.String(length=64), nullable=True),
    sa.Column('workload', sa.String(length=64), nullable=False),
    sa.Column('hardware_class', sa.String(length=64), nullable=False),
    sa.Column('max_age_days', sa.Float(), nullable=False),
    sa.Column('validity', sa.JSON(), nullable=False),
    sa.Column('synced_at', sa.DateTime(), nullable=False),
    sa.Column('retired_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('runs',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('workload', sa.String(length=64), nullable=False),
    sa.Column('hardware_class', sa.String(length=64), nullable=False),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.Column('git_sha', sa.String(length=40), nullable=True),
    sa.Column('git_dirty', sa.Boolean(), nullable=True),
    sa.Column('host', sa.String(length=255), nullable=True),
    sa.Column('gpu_name', sa.String(length=255), nullable=True),
    sa.Column('driver_version', sa.String(length=64), nullable=True),
    sa.Column('cuda_version', sa.String(length=64), nullable=True),
    sa.Column('config', sa.JSON(), nullable=False),
    sa.Column('preflight_status', sa.String(length=16), nullable=False),
    sa.Column('preflight', sa.JSON(), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('parquet_uri', sa.Text(), nullable=True),
    sa.Column('airflow_dag_id', sa.String(length=250), nullable=True),
    sa.Column('airflow_run_id', sa.String(length=250), nullable=True),
    sa.Column('supersedes_id', sa.String(length=36), nullable=True),
    sa.Column('supersede_reason', sa.Text(), nullable=True),
    sa.Column('recorded_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['supersedes_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_runs_fingerprint_started', 'runs', ['fingerprint', 'started_at'], unique=False)
    op.create_index('ix_runs_supersedes_id', 'runs', ['supersedes_id'], unique=False)
    op.create_index('ix_runs_workload_hardware_started', 'runs', ['workload', 'hardware_class', 'started_at'], unique=False)
    op.create_table('annotations',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=True),
    sa.Column('roadmap_row_id', sa.String(length=128), nullable=True),
    sa.Column('author', sa.String(length=128), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['roadmap_row_id'], ['roadmap_rows.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('change_points',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('engine', sa.String(length=64), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('last_run_before_id', sa.String(length=36), nullable=False),
    sa.Column('first_run_after_id', sa.String(length=36), nullable=False),
    sa.Column('mean_before', sa.Float(), nullable=False),
    sa.Column('mean_after', sa.Float(), nullable=False),
    sa.Column('change_percent', sa.Float(), nullable=False),
    sa.Column('pvalue', sa.Float(), nullable=False),
    sa.Column('is_regression', sa.Boolean(), nullable=False),
    sa.Column('detected_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['first_run_after_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['last_run_before_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('fingerprint', 'engine', 'metric', 'first_run_after_id', name='uq_change_points_series_run')
    )
    op.create_table('metrics',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=False),
    sa.Column('engine', sa.String(length=64), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('unit', sa.String(length=32), nullable=False),
    sa.Column('better', sa.String(length=8), nullable=False),
    sa.Column('value', sa.Float(), nullable=False),
    sa.Column('count', sa.Integer(), nullable=True),
    sa.Column('p50', sa.Float(), nullable=True),
    sa.Column('p90', sa.Float(), nullable=True),
    sa.Column('p99', sa.Float(), nullable=True),
    sa.Column('mean', sa.Float(), nullable=True),
    sa.Column('std', sa.Float(), nullable=True),
    sa.Column('supersedes_id', sa.Integer(), nullable=True),
    sa.Column('supersede_reason', sa.Text(), nullable=True),
    sa.Column('recorded_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['supersedes_id'], ['metrics.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_metrics_run_engine_metric', 'metrics', ['run_id', 'engine', 'metric'], unique=False)
    op.create_index('ix_metrics_supersedes_id', 'metrics', ['supersedes_id'], unique=False)
    op.create_table('gate_evaluations',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('batch_id', sa.String(length=36), nullable=False),
    sa.Column('roadmap_row_id', sa.String(length=128), nullable=False),
    sa.Column('evaluated_at', sa.DateTime(), nullable=False),
    sa.Column('status', sa.String(length=8), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('run_id', sa.String(length=36), nullable=True),
    sa.Column('metric_id', sa.Integer(), nullable=True),
    sa.Column('value', sa.Float(), nullable=True),
    sa.Column('peer_value', sa.Float(), nullable=True),
    sa.Column('target', sa.Float(), nullable=True),
    sa.ForeignKeyConstraint(['metric_id'], ['metrics.id'], ),
    sa.ForeignKeyConstraint(['roadmap_row_id'], ['roadmap_rows.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_gate_evaluations_row', 'gate_evaluations', ['roadmap_row_id', 'id'], unique=False)
    for statement in trigger_ddl(op.get_bind().dialect.name, APPEND_ONLY_TABLES):
        op.execute(statement)


def downgrade() -> None:
    for view in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_index('ix_gate_evaluations_row', table_name='gate_evaluations')
    op.drop_table('gate_evaluations')
    op.drop_index('ix_metrics_supersedes_id', table_name='metrics')
    op.drop_index('ix_metrics_run_engine_metric', table_name='metrics')
    op.drop_table('metrics')
    op.drop_table('change_points')
    op.drop_table('annotations')
    op.drop_index('ix_runs_workload_hardware_started', table_name='runs')
    op.drop_index('ix_runs_supersedes_id', table_name='runs')
    op.drop_index('ix_runs_fingerprint_started', table_name='runs')
    op.drop_table('runs')
    op.drop_table('roadmap_rows')
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION roadgate_refuse_change()")
