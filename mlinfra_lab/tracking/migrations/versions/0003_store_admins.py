"""Store ADMINs: a flag on principals for who may run store-wide operations.

Garbage collection, row counts, the store-wide audit log and teams (creating one, adding
members) act across projects, so they need a role above project ADMIN (see `access` on name
squatting). The first user of a store always holds it; this migration also gives it to
every principal that already held ADMIN on every project, the old rule for gc.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 12:00:00
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("store_admin", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.execute(
        sa.text(
            "UPDATE principals SET store_admin = :yes WHERE (SELECT count(*) FROM projects) > 0 AND id IN "
            "(SELECT principal_id FROM grants WHERE level >= 4 GROUP BY principal_id "
            "HAVING count(*) = (SELECT count(*) FROM projects))"
        ).bindparams(yes=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("principals", schema=None) as batch_op:
        batch_op.drop_column("store_admin")
