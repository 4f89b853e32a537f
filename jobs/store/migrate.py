"""`roadgate db upgrade`: Alembic migrations to head, then the views, in one transaction."""
from __future__ import annotations

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine

from jobs.store.views import recreate_views


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", "jobs.store:migrations")
    return config


def upgrade(engine: Engine) -> None:
    config = alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "head")
        recreate_views(conn)
