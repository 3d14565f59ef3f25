"""Tiered retention: a declarative policy turned into an explicit plan of deletes and moves.

Contract: `plan_retention(policy, artifacts, now)` is a pure function from a policy and
the artifact records to a `RetentionPlan` (which artifact to delete, which to move to the
cold root, and why); the store's `apply_retention(policy, dry_run=True)` shows that plan
and, with ``dry_run=False``, carries out exactly that plan and nothing else.

Policy semantics, per rule (a rule matches artifacts of one `kind`, in one project or in
all; a project-specific rule wins over a general one; artifacts no rule matches are kept):

1. Pinned (promoted) artifacts are never touched.
2. Every artifact of a *recent* run is kept: a run younger than `keep_all_days`, or one of
   the `keep_last_runs` newest runs of the project that have artifacts of this kind.
3. An older run keeps only its final artifact of the kind (highest step, then newest) when
   `keep_final` is set; its other artifacts are deleted.
4. A kept final artifact older than `delete_after_days` is deleted; else, older than
   `cold_after_days`, it moves to the policy's `cold_root` (a cheaper fsspec URL).

Design decisions:
- Planning is separated from doing, so the dry run is the same code path as the real one
  and a test can check that applying deletes exactly what the plan listed.
- Deleting an artifact deletes its *row*. Its blob may be shared with other rows (content
  addressing de-duplicates), so bytes are only freed by the garbage collector, which
  deletes blobs that no row references.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field

__all__ = [
    "ArtifactRecord",
    "PlannedAction",
    "RetentionPlan",
    "RetentionPolicy",
    "RetentionRule",
    "plan_retention",
]

DAY = 86400.0


@dataclass(frozen=True)
class RetentionRule:
    kind: str = "checkpoint"  # artifact kind the rule governs
    project: str | None = None  # None: every project (a project's own rule wins)
    keep_all_days: float = 30.0  # keep every artifact of runs younger than this
    keep_last_runs: int = 10  # ... and of the project's N newest runs
    keep_final: bool = True  # older runs keep their final artifact of this kind
    cold_after_days: float | None = None  # final artifacts older than this go to cold
    delete_after_days: float | None = None  # ... or, older than this, are deleted

    def __post_init__(self) -> None:
        if self.keep_all_days < 0 or self.keep_last_runs < 0:
            raise ValueError("keep_all_days and keep_last_runs must be >= 0")
        if (
            self.cold_after_days is not None
            and self.delete_after_days is not None
            and self.delete_after_days <= self.cold_after_days
        ):
            raise ValueError("delete_after_days must be larger than cold_after_days")


@dataclass(frozen=True)
class RetentionPolicy:
    rules: tuple[RetentionRule, ...] = (RetentionRule(),)
    cold_root: str | None = None  # fsspec URL of the cold tier, needed by cold_after_days

    def __post_init__(self) -> None:
        if any(r.cold_after_days is not None for r in self.rules) and not self.cold_root:
            raise ValueError("a rule moves artifacts to cold storage: set cold_root as well")
        object.__setattr__(self, "rules", tuple(self.rules))

    def rule_for(self, project: str, kind: str) -> RetentionRule | None:
        specific = [r for r in self.rules if r.kind == kind and r.project == project]
        general = [r for r in self.rules if r.kind == kind and r.project is None]
        rules = specific or general
        return rules[0] if rules else None

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class ArtifactRecord:
    id: int
    project: str
    run_id: int
    run_created: float  # epoch seconds
    kind: str
    step: int | None
    created: float
    size: int
    tier: str  # "hot" | "cold"
    pinned: bool
    uri: str = ""


@dataclass(frozen=True)
class PlannedAction:
    artifact_id: int
    action: str  # "delete" | "move_cold"
    reason: str
    size: int
    project: str
    run_id: int


@dataclass(frozen=True)
class RetentionPlan:
    actions: tuple[PlannedAction, ...]
    kept: int  # artifacts the plan leaves alone
    now: float
    policy: RetentionPolicy
    applied: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def deletes(self) -> list[int]:
        return [a.artifact_id for a in self.actions if a.action == "delete"]

    @property
    def moves(self) -> list[int]:
        return [a.artifact_id for a in self.actions if a.action == "move_cold"]

    def summary(self) -> dict:
        return {
            "delete": len(self.deletes),
            "move_cold": len(self.moves),
            "keep": self.kept,
            "bytes_deleted": sum(a.size for a in self.actions if a.action == "delete"),
            "bytes_to_cold": sum(a.size for a in self.actions if a.action == "move_cold"),
            "applied": self.applied,
        }


def plan_retention(
    policy: RetentionPolicy, artifacts: list[ArtifactRecord], now: float
) -> RetentionPlan:
    """The actions `policy` implies for `artifacts` at time `now` (pure: touches nothing)."""
    groups: dict[tuple[str, str], list[ArtifactRecord]] = defaultdict(list)
    for a in artifacts:
        groups[(a.project, a.kind)].append(a)
    actions: list[PlannedAction] = []
    kept = 0
    for (project, kind), items in sorted(groups.items()):
        rule = policy.rule_for(project, kind)
        if rule is None:
            kept += len(items)
            continue
        runs_newest_first = sorted({(a.run_created, a.run_id) for a in items}, reverse=True)
        recent = {rid for _, rid in runs_newest_first[: rule.keep_last_runs]}
        final: dict[int, ArtifactRecord] = {}
        for a in items:
            best = final.get(a.run_id)
            if best is None or ((a.step or -1), a.created, a.id) > (
                (best.step or -1),
                best.created,
                best.id,
            ):
                final[a.run_id] = a
        for a in sorted(items, key=lambda a: a.id):
            age = (now - a.run_created) / DAY
            act = None
            if a.pinned:
                pass
            elif age <= rule.keep_all_days or a.run_id in recent:
                pass
            elif not rule.keep_final or final[a.run_id].id != a.id:
                why = "not the run's final artifact" if rule.keep_final else "keep_final is off"
                act = (
                    "delete",
                    f"run older than {rule.keep_all_days:g} days and not among the "
                    f"{rule.keep_last_runs} newest; {why}",
                )
            elif rule.delete_after_days is not None and age > rule.delete_after_days:
                act = ("delete", f"final artifact older than {rule.delete_after_days:g} days")
            elif (
                rule.cold_after_days is not None and age > rule.cold_after_days and a.tier == "hot"
            ):
                act = ("move_cold", f"final artifact older than {rule.cold_after_days:g} days")
            if act is None:
                kept += 1
            else:
                actions.append(PlannedAction(a.id, act[0], act[1], a.size, project, a.run_id))
    return RetentionPlan(tuple(actions), kept, now, policy)
