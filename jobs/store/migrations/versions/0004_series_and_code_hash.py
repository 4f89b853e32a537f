"""series: what identifies a result (Conbench-style), and the content hash of the code that ran

metrics.series names the series a figure belongs to (workload + version, hardware,
engine, the engine's identifying config, measurement method); `series` describes
each key once. runs.code_hash is the `git write-tree` hash of engine/, jobs/,
cuda_src/ and dags/ as they were on disk. change_points.series: change points are
found per series. All nullable: older rows derive theirs in v_metric_history.

Revision ID: 0004
Revises: 0003
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.append_only import trigger_ddl
from jobs.store.views import VIEWS

revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs, not batch copies: copying a table on SQLite would drop its append-only triggers.
    op.add_column('runs', sa.Column('code_hash', sa.String(length=40), nullable=True))
    op.add_column('metrics', sa.Column('series', sa.String(length=32), nullable=True))
    op.add_column('change_points', sa.Column('series', sa.String(length=32), nullable=True))
    op.create_index('ix_metrics_series', 'metrics', ['series'], unique=False)
    op.create_table('series',
    sa.Column('key', sa.String(length=32), nullable=False),
    sa.Column('workload', sa.String(length=64), nullable=False),
    sa.Column('hardware', sa.String(length=255), nullable=False),
    sa.Column('engine', sa.String(length=64), nullable=False),
    sa.Column('identity', sa.JSON(), nullable=False),
    sa.Column('first_recorded_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    for statement in trigger_ddl(op.get_bind().dialect.name, ["series"], with_function=False):
        op.execute(statement)


def downgrade() -> None:
    for view in reversed(VIEWS):  # they read these columns; the next upgrade recreates them
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_table('series')
    op.drop_index('ix_metrics_series', table_name='metrics')
    op.drop_column('change_points', 'series')
    op.drop_column('metrics', 'series')
    op.drop_column('runs', 'code_hash')
