import pytest
from sqlalchemy import delete, select, text, update
from sqlalchemy.exc import DBAPIError

from jobs.store import record_run
from jobs.store.append_only import AppendOnlyError
from jobs.store.models import Metric, Run
from tests.store_support import metrics, nightly


@pytest.fixture
def run_id(store):
    return record_run(store, nightly(0), metrics(output_tok_s=100.0))


def test_orm_update_is_refused(store, run_id):
    with store.session() as session, pytest.raises(AppendOnlyError, match="UPDATE of runs"):
        session.get(Run, run_id).status = "failed"
        session.commit()


def test_orm_delete_is_refused(store, run_id):
    with store.session() as session, pytest.raises(AppendOnlyError, match="DELETE of metrics"):
        session.delete(session.scalars(select(Metric)).first())
        session.commit()


@pytest.mark.parametrize("statement", [update(Run).values(status="failed"), delete(Metric)])
def test_orm_bulk_statements_are_refused(store, run_id, statement):
    with store.session() as session, pytest.raises(AppendOnlyError):
        session.execute(statement)


@pytest.mark.parametrize("sql", [
    "UPDATE runs SET status = 'failed'",
    "DELETE FROM metrics",
    "UPDATE metrics SET value = 0",
    "DELETE FROM runs",
])
def test_raw_sql_is_refused_by_the_database(store, run_id, sql):
    with pytest.raises(DBAPIError, match="append-only"):
        with store.engine.begin() as conn:
            conn.execute(text(sql))
    with store.engine.connect() as conn:
        assert conn.execute(text("SELECT status FROM runs")).scalar() == "ok"
        assert conn.execute(text("SELECT value FROM metrics")).scalar() == 100.0
