"""Promote hot params to indexed columns of `runs`, backfilled from the `params` table.

Searching `params.lr <= 1e-3` through the key-value `params` table costs an index range
scan plus a join; a typed column on `runs` answers it from one index. This migration is
the pattern for promoting any param that search traffic shows to be hot: add a nullable
column, index it, backfill it from `params` in one UPDATE, and let the store write both.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 14:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

HOT = {"lr": "hot_lr", "batch_size": "hot_batch_size"}  # frozen copy: never import app code


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in HOT.values():
            batch_op.add_column(sa.Column(column, sa.Float(), nullable=True))
            batch_op.create_index(batch_op.f(f"ix_runs_{column}"), [column], unique=False)
    for key, column in HOT.items():
        op.execute(
            sa.text(
                f"UPDATE runs SET {column} = (SELECT value_num FROM params "
                "WHERE params.run_id = runs.id AND params.key = :key)"
            ).bindparams(key=key)
        )


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        for column in HOT.values():
            batch_op.drop_index(batch_op.f(f"ix_runs_{column}"))
            batch_op.drop_column(column)
