"""store_state (the views' digest, the writer role), and SQLite triggers that refuse overwrites

store_state lets an upgrade with nothing to do skip all DDL (jobs.store.migrate). On
SQLite, INSERT OR REPLACE / REPLACE INTO / ON CONFLICT DO UPDATE of a history row are
refused by BEFORE INSERT triggers on every key (PostgreSQL has no REPLACE, and its
upserts fire the UPDATE triggers).

Revision ID: 0005
Revises: 0004
"""
from alembic import op
import sqlalchemy as sa

from jobs.store.append_only import no_overwrite_ddl, no_overwrite_trigger

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None

# Spelled out, not read from the models: this migration must not change when the models do.
HISTORY_KEYS = {
    "annotations": [("id",)],
    "change_points": [("id",), ("fingerprint", "engine", "metric", "first_run_after_id")],
    "gate_evaluations": [("id",)],
    "metrics": [("id",)],
    "runs": [("id",)],
    "series": [("key",)],
}


def upgrade() -> None:
    op.create_table('store_state',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('key')
    )
    if op.get_bind().dialect.name == "sqlite":
        for statement in no_overwrite_ddl(HISTORY_KEYS):
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for table, keys in HISTORY_KEYS.items():
            for key in keys:
                op.execute(f"DROP TRIGGER {no_overwrite_trigger(table, key)}")
    op.drop_table('store_state')
