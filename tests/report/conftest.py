import pytest

from jobs.store import open_store, upgrade
from tests.report.history import build_history
from tests.store_support import db_url, new_schema_url, pg_database, pg_url, store  # noqa: F401


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def built(request, tmp_path_factory):
    """(store, History): the constructed history, built once per module and dialect; tests only read it."""
    tmp = tmp_path_factory.mktemp("report")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp / 'roadgate.db'}"
    else:
        url = new_schema_url(request.getfixturevalue("pg_database"))
    built_store = open_store(url, str(tmp / "requests"))
    upgrade(built_store.engine)
    yield built_store, build_history(built_store)
    built_store.engine.dispose()
