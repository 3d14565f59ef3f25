"""Pending uploads: a record of every blob an upload is about to publish, until its row exists.

The garbage collector deletes blobs that no artifact row references; an upload publishes
its blob before its row, so without this record a de-duplicated upload could lose its blob
to a collector that looked between the two (see `uploads`).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 12:30:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pending_uploads",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pending_uploads")),
    )
    op.create_index(op.f("ix_pending_uploads_uri"), "pending_uploads", ["uri"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_pending_uploads_uri"), table_name="pending_uploads")
    op.drop_table("pending_uploads")
