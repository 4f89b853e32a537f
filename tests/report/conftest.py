from tests.store_support import db_url, pg_database, pg_url, store  # noqa: F401
