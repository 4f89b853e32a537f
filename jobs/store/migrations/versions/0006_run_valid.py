"""runs.valid: the bench job's verdict (runs.validity's "valid") as a column the views can read

JSON is read differently by SQLite and PostgreSQL, and the views are portable SQL:
a run found noisy during measurement or measured after a lenient preflight must show
as not valid on the dashboard, not only in the gates. NULL for older runs and runs
without a verdict (v_run_validity judges those by their preflight as before).

Revision ID: 0006
Revises: 0005
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.views import VIEWS

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A plain ADD COLUMN, not a batch copy: copying the table on SQLite would drop its triggers.
    op.add_column('runs', sa.Column('valid', sa.Boolean(), nullable=True))


def downgrade() -> None:
    for view in reversed(VIEWS):  # they read runs.*; the next upgrade recreates them
        op.execute(f"DROP VIEW IF EXISTS {view}")
    op.drop_column('runs', 'valid')
