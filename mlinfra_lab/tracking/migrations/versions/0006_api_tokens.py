"""API tokens: the bearer tokens of the tracking server, stored as sha256 digests.

The server (``mlinfra-lab track serve``) acts as the user a token belongs to, never as a
name the caller gives; a store ADMIN creates tokens and revokes them. Only the digest of a
token is stored, so a copy of the database gives no one a usable token.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04 09:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("principal_id", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("note", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("created_by", sa.String(length=200), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["principal_id"],
            ["principals.id"],
            name=op.f("fk_api_tokens_principal_id_principals"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("digest", name=op.f("uq_api_tokens_digest")),
    )
    op.create_index(
        op.f("ix_api_tokens_principal_id"), "api_tokens", ["principal_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_api_tokens_principal_id"), table_name="api_tokens")
    op.drop_table("api_tokens")
