"""runs.cpu_name: the host CPU, part of the fingerprint

Revision ID: 0003
Revises: 0002
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.views import VIEWS

revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch copy: copying the table on SQLite would drop its append-only triggers.
    op.add_column('runs', sa.Column('cpu_name', sa.String(length=255), nullable=True))


def downgrade() -> None:
    for view in reversed(VIEWS):  # they read runs.*; the next upgrade recreates them
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_column('runs', 'cpu_name')
