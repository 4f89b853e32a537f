"""runs.validity: the bench job's verdict on its own measurement

Revision ID: 0002
Revises: 0001
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.views import VIEWS

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch copy: copying the table on SQLite would drop its append-only triggers.
    op.add_column('runs', sa.Column('validity', sa.JSON(), nullable=True))


def downgrade() -> None:
    for view in reversed(VIEWS):  # they read runs.*; the next upgrade recreates them
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_column('runs', 'validity')  # native on PostgreSQL and SQLite >= 3.35
