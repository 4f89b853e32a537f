from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

from jobs.store import upgrade
from jobs.store.models import Base
from jobs.store.schema_dump import DIALECTS, schema_ddl, schema_path
from jobs.store.views import VIEWS


def test_upgrade_from_empty_creates_every_table_and_view(store):
    inspector = inspect(store.engine)
    assert set(Base.metadata.tables) <= set(inspector.get_table_names())
    assert set(VIEWS) <= set(inspector.get_view_names())
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0007"
        for view in VIEWS:
            conn.execute(text(f"SELECT * FROM {view}")).all()


def test_upgrade_twice_is_harmless(store):
    upgrade(store.engine)


def test_migrations_produce_exactly_the_models(store):
    with store.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []


def test_generated_schema_files_are_current():
    for name in DIALECTS:
        assert schema_path(name).read_text() == schema_ddl(name), (
            f"sql/schema.{name}.sql is stale: run python -m jobs.store.schema_dump")
