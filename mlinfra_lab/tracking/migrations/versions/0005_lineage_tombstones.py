"""Lineage tombstones: what an artifact was, after retention deleted it.

Retention used to delete an artifact's row together with its lineage edges, so a run that
had consumed that checkpoint lost its whole backward lineage. Now the edges stay and a
tombstone keeps the artifact's name, kind, digest, size and project, and when and why it
was deleted, so provenance still shows what a run consumed and that it is gone.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 13:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tombstones",
        sa.Column("artifact_id", sa.Integer(), nullable=False),
        sa.Column("project_id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("kind", sa.String(length=50), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("deleted_at", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=50), nullable=False),
        sa.ForeignKeyConstraint(
            ["project_id"],
            ["projects.id"],
            name=op.f("fk_tombstones_project_id_projects"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("artifact_id", name=op.f("pk_tombstones")),
    )


def downgrade() -> None:
    op.drop_table("tombstones")
