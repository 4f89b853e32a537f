"""Alembic environment: always run programmatically by jobs.store.migrate on a given connection."""
from alembic import context

from jobs.store.models import Base

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
