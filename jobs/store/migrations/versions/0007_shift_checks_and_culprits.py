"""shift_checks and culprits: regression triage's records, append-only like the rest of history

A shift check is a change point's shift measured again and tested (confirmed or noise);
a culprit is a bisect's first bad commit, or where it stopped. Both get the append-only
triggers of 0001 and, on SQLite, the no-overwrite triggers of 0005.

Revision ID: 0007
Revises: 0006
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.append_only import no_overwrite_ddl, trigger_ddl

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# Spelled out, not read from the models: this migration must not change when the models do.
HISTORY_KEYS = {"shift_checks": [("id",)], "culprits": [("id",)]}


def upgrade() -> None:
    op.create_table('shift_checks',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('change_point_id', sa.Integer(), nullable=True),
    sa.Column('series', sa.String(length=32), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('better', sa.String(length=8), nullable=False),
    sa.Column('before_sha', sa.String(length=40), nullable=False),
    sa.Column('after_sha', sa.String(length=40), nullable=False),
    sa.Column('before_run_ids', sa.JSON(), nullable=False),
    sa.Column('after_run_ids', sa.JSON(), nullable=False),
    sa.Column('median_before', sa.Float(), nullable=False),
    sa.Column('median_after', sa.Float(), nullable=False),
    sa.Column('change', sa.Float(), nullable=False),
    sa.Column('change_low', sa.Float(), nullable=False),
    sa.Column('change_high', sa.Float(), nullable=False),
    sa.Column('pvalue', sa.Float(), nullable=False),
    sa.Column('rank_biserial', sa.Float(), nullable=False),
    sa.Column('verdict', sa.String(length=16), nullable=False),
    sa.Column('checked_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['change_point_id'], ['change_points.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('culprits',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('shift_check_id', sa.Integer(), nullable=True),
    sa.Column('series', sa.String(length=32), nullable=False),
    sa.Column('metric', sa.String(length=64), nullable=False),
    sa.Column('last_good_sha', sa.String(length=40), nullable=False),
    sa.Column('first_bad_sha', sa.String(length=40), nullable=False),
    sa.Column('stopped', sa.String(length=16), nullable=False),
    sa.Column('candidates', sa.JSON(), nullable=False),
    sa.Column('median_good', sa.Float(), nullable=False),
    sa.Column('median_bad', sa.Float(), nullable=False),
    sa.Column('probes', sa.JSON(), nullable=False),
    sa.Column('runs', sa.Integer(), nullable=False),
    sa.Column('decided_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['shift_check_id'], ['shift_checks.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    dialect = op.get_bind().dialect.name
    # PostgreSQL's trigger function exists since 0001.
    for statement in trigger_ddl(dialect, list(HISTORY_KEYS), with_function=False):
        op.execute(statement)
    if dialect == "sqlite":
        for statement in no_overwrite_ddl(HISTORY_KEYS):
            op.execute(statement)


def downgrade() -> None:
    op.drop_table('culprits')     # its triggers go with it
    op.drop_table('shift_checks')
