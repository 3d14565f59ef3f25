"""Lineage: walk the graph of datasets, code, runs and artifacts forward or backward.

Contract: `walk(conn, start, direction, depth, visible)` returns a `LineageGraph` with every
node reachable from `start` along edges in `direction` ("forward": what was made from
this; "backward": what this was made from), at most `depth` hops away (None: no limit),
leaving out every node in a project the caller may not view, and every path through one.

Node ids are typed strings: ``dataset:3``, ``run:12``, ``artifact:40``, ``code:<commit>``.
Edges, recorded by the store as runs start and log: ``dataset -> run`` (consumed),
``artifact -> run`` (consumed, e.g. fine-tuning from a checkpoint), ``code -> run``
(ran_code), ``run -> artifact`` (produced).

Design decisions:
- Breadth-first, one indexed query per hop for the whole frontier (`lineage_edges` is
  indexed on both `src` and `dst`), so a walk costs depth round trips, not nodes.
- Visibility is decided per hop, in one query per node type: a hidden node is dropped and
  the walk does not continue through it, so lineage cannot be used to peek into a project.
  Code nodes belong to no project; they are reached only through a visible run.
- Lineage outlives retention: deleting an artifact (`bury`) keeps its edges and writes a
  tombstone (name, kind, digest, size, project, when and why), and the walk shows the
  tombstone in the artifact's place, listed in `LineageGraph.deleted`, so a run that
  consumed a deleted checkpoint still shows what it consumed and that retention deleted it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlalchemy import Connection, insert, literal, select

from mlinfra_lab.tracking import bounds
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.access import Level, effective_level
from mlinfra_lab.tracking.errors import NotFoundOrDenied, TrackingError

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["LineageGraph", "bury", "node_id", "require_visible", "walk"]

KINDS = ("dataset", "run", "artifact", "code")


def node_id(kind: str, key: int | str) -> str:
    if kind not in KINDS:
        raise TrackingError(f"unknown lineage node kind {kind!r}; use one of {', '.join(KINDS)}")
    return f"{kind}:{key}"


def parse_node(node: str) -> tuple[str, str]:
    kind, sep, key = str(node).partition(":")
    if not sep or kind not in KINDS or not key:
        raise TrackingError(
            f"bad lineage node {node!r}: write kind:id, e.g. dataset:3, run:12, artifact:40, code:ab12"
        )
    if kind != "code" and not (key.isascii() and key.isdigit()):
        raise TrackingError(f"bad lineage node {node!r}: {kind} ids are integers")
    bounds.text("a lineage node", node, bounds.column_chars("lineage_edges", "src"))
    if kind != "code":
        bounds.ident(kind, int(key))
    return kind, key


@dataclass
class LineageGraph:
    root: str
    direction: str
    nodes: dict[str, str] = field(default_factory=dict)  # node id -> human label
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (src, dst, relation)
    # tombstoned node -> "deleted by retention at ..."
    deleted: dict[str, str] = field(default_factory=dict)

    def of_kind(self, kind: str) -> list[str]:
        return [n for n in self.nodes if n.startswith(kind + ":")]

    def to_networkx(self) -> nx.DiGraph:
        """A networkx DiGraph (for drawing); needs networkx installed."""
        import networkx as nx

        g = nx.DiGraph()
        for n, label in self.nodes.items():
            g.add_node(n, label=label, kind=n.split(":", 1)[0], deleted=n in self.deleted)
        for s, d, rel in self.edges:
            g.add_edge(s, d, relation=rel)
        return g


def node_projects(
    conn: Connection, nodes: Iterable[str], with_tombstones: bool = True
) -> dict[str, tuple[int | None, str]]:
    """node -> (project id or None for code, label), for the nodes that exist (or, deleted, left a tombstone)."""
    by_kind: dict[str, list[int]] = {"dataset": [], "run": [], "artifact": []}
    out: dict[str, tuple[int | None, str]] = {}
    for n in nodes:
        kind, key = parse_node(n)
        if kind == "code":
            out[n] = (None, f"code {key[:10]}")
        else:
            by_kind[kind].append(int(key))
    if by_kind["dataset"]:
        d = S.datasets
        for r in conn.execute(
            select(d.c.id, d.c.project_id, d.c.name, d.c.version).where(
                d.c.id.in_(by_kind["dataset"])
            )
        ):
            out[f"dataset:{r.id}"] = (r.project_id, f"{r.name}@{r.version}")
    if by_kind["run"]:
        r_ = S.runs
        for run in conn.execute(
            select(r_.c.id, r_.c.project_id, r_.c.name).where(r_.c.id.in_(by_kind["run"]))
        ):
            out[f"run:{run.id}"] = (run.project_id, run.name)
    if by_kind["artifact"]:
        a, r_ = S.artifacts, S.runs
        q = select(a.c.id, r_.c.project_id, a.c.name).join(r_, r_.c.id == a.c.run_id)
        for art in conn.execute(q.where(a.c.id.in_(by_kind["artifact"]))):
            out[f"artifact:{art.id}"] = (art.project_id, art.name)
        gone = [i for i in by_kind["artifact"] if f"artifact:{i}" not in out]
        if gone and with_tombstones:
            t = S.tombstones
            for r in conn.execute(
                select(t.c.artifact_id, t.c.project_id, t.c.name, t.c.reason).where(
                    t.c.artifact_id.in_(gone)
                )
            ):
                out[f"artifact:{r.artifact_id}"] = (
                    r.project_id,
                    f"{r.name} (deleted by {r.reason})",
                )
    return out


def bury(conn: Connection, artifact_ids: list[int], reason: str) -> None:
    """Write tombstones for the unpinned artifacts among `artifact_ids`, before their rows are deleted."""
    a, r, t = S.artifacts, S.runs, S.tombstones
    rows = (
        select(
            a.c.id,
            r.c.project_id,
            a.c.run_id,
            a.c.name,
            a.c.kind,
            a.c.sha256,
            a.c.size,
            literal(time.time()),
            literal(reason),
        )
        .join(r, r.c.id == a.c.run_id)
        .where(a.c.id.in_(artifact_ids), a.c.pinned.is_(False))
    )
    conn.execute(
        insert(t).from_select(
            [
                "artifact_id",
                "project_id",
                "run_id",
                "name",
                "kind",
                "sha256",
                "size",
                "deleted_at",
                "reason",
            ],
            rows,
        )
    )


def _tombstones(conn: Connection, nodes: Iterable[str]) -> dict[str, str]:
    """node -> "deleted by REASON at DATE" for the tombstoned artifacts among `nodes`."""
    ids = [int(n.split(":", 1)[1]) for n in nodes if n.startswith("artifact:")]
    if not ids:
        return {}
    t = S.tombstones
    rows = conn.execute(
        select(t.c.artifact_id, t.c.reason, t.c.deleted_at).where(t.c.artifact_id.in_(ids))
    )
    return {
        f"artifact:{r.artifact_id}": f"deleted by {r.reason} at "
        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(r.deleted_at))} UTC"
        for r in rows
    }


def require_visible(
    conn: Connection, node: str, user: str, action: str, allow_deleted: bool = True
) -> None:
    """Raise `NotFoundOrDenied` unless `node` exists and `user` may VIEW its project.

    A missing node and an invisible one get the same answer; a code node is visible to
    anyone (it belongs to no project and only leads to runs the walk checks one by one).
    """
    found = node_projects(conn, [node], with_tombstones=allow_deleted).get(node)
    pid = None if found is None else found[0]
    if found is None or (pid is not None and effective_level(conn, pid, user) < Level.VIEW):
        project = (
            None
            if pid is None
            else conn.execute(select(S.projects.c.name).where(S.projects.c.id == pid)).scalar()
        )
        raise NotFoundOrDenied(user, node, action, audit_project=project)


def walk(
    conn: Connection,
    start: str,
    direction: str,
    depth: int | None,
    visible: Callable[[int], bool],
) -> LineageGraph:
    """Breadth-first walk from `start`; `visible(project_id)` decides what the caller may see."""
    if direction not in ("forward", "backward"):
        raise TrackingError(f"direction must be 'forward' or 'backward', got {direction!r}")
    e = S.lineage_edges
    near, far = (e.c.src, e.c.dst) if direction == "forward" else (e.c.dst, e.c.src)
    info = node_projects(conn, [start])
    graph = LineageGraph(start, direction)
    graph.nodes[start] = info[start][1] if start in info else start
    graph.deleted.update(_tombstones(conn, [start]))
    frontier, seen, hops = [start], {start}, 0
    while frontier and (depth is None or hops < depth):
        rows = conn.execute(select(near, far, e.c.relation).where(near.in_(frontier))).all()
        candidates = {r[1] for r in rows}
        info = node_projects(conn, candidates)
        ok = {n for n, (pid, _) in info.items() if pid is None or visible(pid)}
        frontier = []
        for a, b, rel in rows:
            if b not in ok:
                continue
            graph.edges.append((a, b, rel) if direction == "forward" else (b, a, rel))
            if b not in seen:
                seen.add(b)
                graph.nodes[b] = info[b][1]
                frontier.append(b)
        hops += 1
    graph.deleted.update(_tombstones(conn, graph.nodes))
    return graph
