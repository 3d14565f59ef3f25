"""Alembic environment of the tracking store: runs migrations on the connection it is handed.

`mlinfra_lab.tracking.db.migrate` passes an open connection in ``config.attributes``; there
is no alembic.ini and no offline (SQL script) mode, because the store migrates itself.
"""

from alembic import context

from mlinfra_lab.tracking.schema import metadata

connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=metadata,
    render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies the table
)
with context.begin_transaction():
    context.run_migrations()
