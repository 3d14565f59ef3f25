"""Ids never reused: SQLite's ``artifacts`` and ``pending_uploads`` get AUTOINCREMENT; an index
on ``artifacts.sha256``.

An ``INTEGER PRIMARY KEY`` without AUTOINCREMENT is SQLite's rowid, and a new row takes the
largest rowid + 1: delete the newest artifact and the next one gets its id, and with it the
deleted artifact's lineage edges and tombstone (its producer, its consumers, and a primary
key clash when retention buries the newcomer). A pending-upload id handed out again lets a
slow writer, whose stale record the collector swept, delete a newer writer's record.
AUTOINCREMENT keeps a high-water mark in ``sqlite_sequence`` that deletes never lower.

SQLite cannot alter a key in place, so each table is rebuilt (Alembic's batch mode: copy,
drop, rename, indexes recreated); no other table's foreign key points at either, so the drop
cascades nowhere. The high-water mark starts above every id the database still mentions: the
rows, the tombstones, and the ``artifact:N`` nodes of the lineage edges. PostgreSQL's
sequences never go back, so there only the index is added.

The index serves the garbage collector, which re-checks a blob against the rows that hold
its digest (whatever spelling of the root they were written with) before deleting it.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07 17:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# table -> SQL for the largest id it ever held that the database still mentions
_HIGH_WATER = {
    "artifacts": """
        SELECT max(
            coalesce((SELECT max(id) FROM artifacts), 0),
            coalesce((SELECT max(artifact_id) FROM tombstones), 0),
            coalesce((SELECT max(CAST(substr(src, 10) AS INTEGER)) FROM lineage_edges
                      WHERE src LIKE 'artifact:%'), 0),
            coalesce((SELECT max(CAST(substr(dst, 10) AS INTEGER)) FROM lineage_edges
                      WHERE dst LIKE 'artifact:%'), 0)
        )""",
    "pending_uploads": "SELECT coalesce((SELECT max(id) FROM pending_uploads), 0)",
}


def _rebuild(autoincrement: bool) -> None:
    for table, high_water in _HIGH_WATER.items():
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass
        if autoincrement:
            seq = op.get_bind().execute(sa.text(high_water)).scalar()
            op.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = :t").bindparams(t=table))
            op.execute(
                sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES (:t, :s)").bindparams(
                    t=table, s=int(seq or 0)
                )
            )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _rebuild(autoincrement=True)
    op.create_index(op.f("ix_artifacts_sha256"), "artifacts", ["sha256"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_artifacts_sha256"), table_name="artifacts")
    if op.get_bind().dialect.name == "sqlite":
        _rebuild(autoincrement=False)
