"""The relational schema of the tracking store: one SQLAlchemy Core `MetaData`, every index named.

Contract: `metadata` describes the tables at the newest Alembic revision; the migrations in
``migrations/versions`` build exactly this schema (a test compares them), and the store's
code only ever touches these `Table` objects.

Design decisions:
- Metadata only. An artifact row holds the blob's URI, sha256, size, kind, tier and pin
  flag, never its bytes: checkpoints live in object storage, the database stays small and
  its pages stay in memory (the chapter measures blobs inline against blobs by reference).
- Metric history (`metrics`, append-only, one row per point) is separate from the latest
  value per run and key (`latest_metrics`, upserted per batch): search reads the small,
  indexed latest table and never scans the history.
- Each searchable table has an index that starts with the key and then the value
  (``(key, value, run_id)``), so `metrics.val_acc > 0.9` is an index range scan.
- Hot params are promoted to typed, indexed columns of `runs` (`HOT_PARAMS`); the `params`
  table stays the source of truth and keeps both a string and a numeric value.
- Times are float seconds since the epoch (UTC): comparable and indexable on every backend.
- Lineage is an edge list (`src` -> `dst`, with a relation) over typed node ids
  (``dataset:3``, ``run:12``, ``artifact:40``, ``code:<commit>``), indexed both ways so a
  walk forward and a walk backward are both index lookups.
- Ids are never reused. A lineage edge or a tombstone names an artifact by id after its row
  is gone, so a new row must never get an old id: the tables whose rows are deleted
  (`artifacts`, `pending_uploads`) are AUTOINCREMENT on SQLite, whose plain integer key
  takes the largest id + 1 and so hands out a deleted largest id again. PostgreSQL's
  sequences never go back. The other tables with ids never delete rows.

References: MLflow's SQLAlchemy store (schema shape, latest_metrics); the course text, ch. 4.
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
)

__all__ = ["HOT_PARAMS", "metadata"] + [
    "projects",
    "principals",
    "team_members",
    "grants",
    "runs",
    "params",
    "metrics",
    "latest_metrics",
    "tags",
    "datasets",
    "artifacts",
    "lineage_edges",
    "audit_log",
    "pending_uploads",
    "tombstones",
    "api_tokens",
]

# Params searched often enough to deserve a typed, indexed column on `runs`.
HOT_PARAMS: dict[str, str] = {"lr": "hot_lr", "batch_size": "hot_batch_size"}

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

projects = Table(
    "projects",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("created_at", Float, nullable=False),
)

# A principal is a user or a team; teams hold users through `team_members`.
principals = Table(
    "principals",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False, unique=True),
    Column("kind", String(10), nullable=False),  # "user" | "team"
    # may run store-wide operations (gc, counts, teams); the first user always may (migration 0003)
    Column("store_admin", Boolean, nullable=False, server_default=false()),
)

team_members = Table(
    "team_members",
    metadata,
    Column("team_id", Integer, ForeignKey("principals.id", ondelete="CASCADE"), primary_key=True),
    Column("user_id", Integer, ForeignKey("principals.id", ondelete="CASCADE"), primary_key=True),
)

grants = Table(
    "grants",
    metadata,
    Column("project_id", Integer, ForeignKey("projects.id", ondelete="CASCADE"), primary_key=True),
    Column(
        "principal_id", Integer, ForeignKey("principals.id", ondelete="CASCADE"), primary_key=True
    ),
    Column("level", Integer, nullable=False),  # access.Level: 1 VIEW .. 4 ADMIN
)

runs = Table(
    "runs",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("project_id", Integer, ForeignKey("projects.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("status", String(20), nullable=False),  # RUNNING | FINISHED | FAILED | KILLED
    Column("user", String(200), nullable=False),
    Column("code_commit", String(64)),
    Column("created_at", Float, nullable=False),
    Column("ended_at", Float),
    Column("hot_lr", Float),
    Column("hot_batch_size", Float),
    Index(None, "project_id", "created_at"),
    Index(None, "project_id", "status"),
    Index(None, "hot_lr"),
    Index(None, "hot_batch_size"),
)

params = Table(
    "params",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(250), primary_key=True),
    Column("value_str", Text, nullable=False),
    Column("value_num", Float),  # NULL when the value is not a number
    Index(None, "key", "value_num", "run_id"),
    Index(None, "key", "value_str", "run_id"),
)

# Full history: append-only, one row per (run, key, step) point. No primary key on purpose:
# the store never updates a point, and SQLite's rowid keeps inserts append-fast.
metrics = Table(
    "metrics",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("key", String(250), nullable=False),
    Column("step", Integer, nullable=False),
    Column("value", Float, nullable=False),
    Column("timestamp", Float, nullable=False),
    Index(None, "run_id", "key", "step"),
)

latest_metrics = Table(
    "latest_metrics",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(250), primary_key=True),
    Column("step", Integer, nullable=False),
    Column("value", Float, nullable=False),
    Index(None, "key", "value", "run_id"),
)

tags = Table(
    "tags",
    metadata,
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(250), primary_key=True),
    Column("value", Text, nullable=False),
    Index(None, "key", "value", "run_id"),
)

datasets = Table(
    "datasets",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("project_id", Integer, ForeignKey("projects.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(200), nullable=False),
    Column("version", String(100), nullable=False),
    Column("uri", Text, nullable=False),
    Column("sha256", String(64)),
    Column("created_at", Float, nullable=False),
    UniqueConstraint("project_id", "name", "version"),
)

artifacts = Table(
    "artifacts",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("run_id", Integer, ForeignKey("runs.id", ondelete="CASCADE"), nullable=False),
    Column("name", String(500), nullable=False),
    Column("kind", String(50), nullable=False),  # checkpoint | model | dataset | plot | other
    Column("step", Integer),
    Column("uri", Text, nullable=False),  # where the blob lives (hot or cold root)
    Column("sha256", String(64), nullable=False),
    Column("size", Integer, nullable=False),
    Column("tier", String(10), nullable=False),  # "hot" | "cold"
    Column("pinned", Boolean, nullable=False),  # pinned/promoted: retention never touches it
    Column("created_at", Float, nullable=False),
    Index(None, "run_id", "kind"),
    Index(None, "uri"),
    Index(None, "sha256"),  # the collector's re-check: which rows name this blob's digest
    sqlite_autoincrement=True,  # ids never reused (see the module docstring)
)

# A blob an upload is about to publish, recorded (and committed) before the blob is moved into
# place and deleted in the transaction that inserts its artifact row: the collector never
# deletes a blob with a fresh record (see `uploads`).
pending_uploads = Table(
    "pending_uploads",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("uri", Text, nullable=False),
    Column("started_at", Float, nullable=False),
    Index(None, "uri"),
    sqlite_autoincrement=True,  # ids never reused (see the module docstring)
)

# What a deleted artifact was: its lineage edges stay, and lineage shows this in its place.
tombstones = Table(
    "tombstones",
    metadata,
    Column("artifact_id", Integer, primary_key=True),
    Column("project_id", Integer, ForeignKey("projects.id", ondelete="CASCADE"), nullable=False),
    Column("run_id", Integer, nullable=False),
    Column("name", String(500), nullable=False),
    Column("kind", String(50), nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("size", Integer, nullable=False),
    Column("deleted_at", Float, nullable=False),
    Column("reason", String(50), nullable=False),  # "retention"
)

# Bearer tokens of the tracking server (`server.tokens`): only the sha256 of a token is kept.
api_tokens = Table(
    "api_tokens",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "principal_id", Integer, ForeignKey("principals.id", ondelete="CASCADE"), nullable=False
    ),
    Column("digest", String(64), nullable=False, unique=True),  # sha256 hex of the secret
    Column("note", String(200)),
    Column("created_at", Float, nullable=False),
    Column("created_by", String(200), nullable=False),
    Column("revoked_at", Float),  # NULL while the token is valid
    Index(None, "principal_id"),
)

lineage_edges = Table(
    "lineage_edges",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("src", String(120), nullable=False),  # "dataset:3", "code:ab12", "run:7", ...
    Column("dst", String(120), nullable=False),
    Column("relation", String(20), nullable=False),  # consumed | produced | ran_code
    Index(None, "src"),
    Index(None, "dst"),
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("at", Float, nullable=False),
    Column("principal", String(200), nullable=False),
    Column("action", String(50), nullable=False),
    Column("project", String(200)),
    Column("target", String(200)),
    Column("allowed", Boolean, nullable=False),
    Index(None, "principal", "at"),
)
