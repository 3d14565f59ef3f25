"""The search language: grammar, errors that point at the character, injection, results."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from mlinfra_lab.tracking import QueryError, compile_filter, reading
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
DAY = 86400.0


@pytest.mark.parametrize(
    "text, position",
    [
        ("metrics.acc >", 13),  # missing value: points at the end
        ("metrics.acc > 0.9 and", 21),
        ("metrics.acc ~ 0.9", 12),
        ("foo = 1", 0),  # unknown field
        ("metrics.acc > 'high'", 14),  # metric compared with a string
        ("tags.team = 3", 12),
        ("(metrics.acc > 1", 16),
        ("params.lr <= 1e-3 params.x = 1", 18),
        ("status = 'FINISHED", 9),
        ("params.lr > -30d", 12),  # relative times only for created/ended
        ("metrics.acc like 'x%'", 17),
        ("and", 0),
    ],
)
def test_parse_errors_point_at_the_offending_character(text, position):
    with pytest.raises(QueryError) as err:
        compile_filter(text, now=0.0)
    assert err.value.position == position, str(err.value)
    assert "^" in str(err.value)


def test_an_empty_filter_means_no_filter():
    assert compile_filter("", now=0.0) is None and compile_filter("   ", now=0.0) is None


@pytest.mark.parametrize(
    "text",
    [
        "tags.team = 'nlp' or 1=1",
        "tags.team = 'nlp'; DROP TABLE runs; --",
        "tags.team = 'x' union select * from principals",
        "status = 'a' -- comment",
        "params.`lr` = 1 /* x */",
        "metrics.acc > 0 or exists(select 1)",
        'tags.team = "nlp"\x00',
    ],
)
def test_injection_attempts_are_parse_errors(text):
    with pytest.raises(QueryError):
        compile_filter(text, now=0.0)


def test_values_are_bound_parameters_never_sql_text():
    hostile = "x' OR '1'='1"
    expr = compile_filter(f'tags.team = "{hostile}"', now=0.0)
    sql = str(expr.compile())
    assert hostile not in sql and "OR '1'" not in sql
    assert hostile in expr.compile().params.values()


@pytest.fixture(params=BACKENDS, scope="module")
def populated(request, tmp_path_factory):
    now = time.time()
    with fresh_store(request.param, tmp_path_factory.mktemp("q")) as store:
        specs = [  # name, lr, opt, team, acc, age in days, status
            ("a", 1e-3, "adam", "nlp", 0.90, 1, "FINISHED"),
            ("b", 1e-2, "sgd", "nlp", 0.80, 10, "FINISHED"),
            ("c", 1e-4, "adam", "vision", 0.95, 40, "FAILED"),
            ("d", 3e-4, "adamw", "vision", 0.70, 2, "FINISHED"),
            ("e", 1e-3, "sgd", "speech", None, 3, "KILLED"),
        ]
        for name, lr, opt, team, acc, age, status in specs:
            run = store.start_run(
                "p",
                name=name,
                params={"lr": lr, "optimizer": opt},
                tags={"team": team},
                start_time=now - age * DAY,
            )
            if acc is not None:
                run.log_metrics({"val_acc": acc, "loss": 1 - acc})
            run.end(status)
        store.start_run("other", name="z", tags={"team": "nlp"}).end()
        yield store


@pytest.mark.parametrize(
    "text, expected",
    [
        ("metrics.val_acc > 0.85", {"a", "c"}),
        (
            'metrics.val_acc > 0.85 and params.lr <= 1e-3 and tags.team = "nlp" and created > -30d',
            {"a"},
        ),
        ("params.optimizer = 'adam' or params.optimizer = 'adamw'", {"a", "c", "d"}),
        ("(tags.team = 'nlp' or tags.team = 'vision') and metrics.val_acc < 0.9", {"b", "d"}),
        ("params.optimizer in ('sgd', 'adamw')", {"b", "d", "e"}),
        ("params.optimizer not in ('sgd', 'adamw')", {"a", "c"}),
        ("params.optimizer like 'adam%'", {"a", "c", "d"}),
        ("params.lr in (0.001, 0.01)", {"a", "b", "e"}),
        # a run without the metric matches the negation
        ("not metrics.val_acc > 0.85", {"b", "d", "e"}),
        ("status != 'FINISHED'", {"c", "e"}),
        ("created < -7d", {"b", "c"}),
        ("attributes.status = 'KILLED' OR name = 'a'", {"a", "e"}),
        ("metrics.`val_acc` >= 0.95", {"c"}),
        ("params.batch_size > 1", set()),
    ],
)
def test_search_finds_exactly_the_matching_runs(populated, text, expected):
    assert {r.name for r in populated.search_runs("p", text)} == expected


def test_order_by_and_limit(populated):
    runs = populated.search_runs("p", None, order_by="metrics.val_acc desc", limit=3)
    assert [r.name for r in runs] == ["c", "a", "b"]
    runs = populated.search_runs("p", "params.lr > 0", order_by="params.lr", limit=2)
    assert [r.name for r in runs] == ["c", "d"]
    assert [r.name for r in populated.search_runs("p", limit=2)] == ["a", "d"], (
        "newest first by default"
    )


def test_explain_a_filter_with_an_in_list(populated):
    # an `in (...)` list is an expanding parameter: explain used to fail on it (DatabaseError)
    for flt in ("params.lr in (0.001, 0.01)", "id in (1, 2)", "tags.team in ('nlp', 'cv')"):
        plan = populated.explain_search("p", flt)
        assert plan and all(isinstance(line, str) for line in plan), flt


def test_search_across_projects_and_plans_use_indexes(populated):
    assert {r.project for r in populated.search_runs(None, "tags.team = 'nlp'")} == {"p", "other"}
    plan = " ".join(
        populated.explain_search("p", "metrics.val_acc > 0.85 and tags.team = 'nlp'")
    ).lower()
    assert plan
    if populated.engine.dialect.name != "sqlite":
        return  # PostgreSQL picks sequential scans on tiny tables; its plans depend on statistics
    assert "ix_latest_metrics_key_value_run_id" in plan and "ix_tags_key_value_run_id" in plan, plan


@pytest.mark.parametrize("plan", ["in", "exists"])
def test_both_plans_return_the_same_runs(populated, plan, monkeypatch):
    """Materialized IN-subqueries and per-run EXISTS probes are two plans of one query."""
    cases = [
        "metrics.val_acc > 0.85 and params.optimizer = 'adam'",
        "params.optimizer like 'adam%' and tags.team = 'vision'",
        "params.lr in (0.001, 0.01) and tags.team != 'speech'",
        "params.optimizer not in ('sgd') and metrics.loss < 0.2",
    ]
    want = [{r.name for r in populated.search_runs("p", c)} for c in cases]
    monkeypatch.setattr(reading, "plan_choice", lambda conn, pred, limit: plan)
    got = [{r.name for r in populated.search_runs("p", c)} for c in cases]
    assert got == want
    if plan == "exists" and populated.engine.dialect.name == "sqlite":
        assert any("CORRELATED" in line for line in populated.explain_search("p", cases[0]))


def _icu_like_key(text):
    """A stand-in for ICU's order: punctuation before digits before letters, case second."""
    return [(0 if not c.isalnum() else 1 if c.isdigit() else 2, c.lower(), c) for c in text]


@pytest.mark.parametrize("collation", ["ICU_LIKE", "NOCASE", "BINARY"])
def test_like_is_right_under_any_collation(collation):
    """A prefix LIKE must not be rewritten into a code-point range: a collation may sort otherwise.

    The filter's expression is run on a `runs` table whose `name` column has `collation`
    (SQLite lets a test define one): under an ICU-like order ``'xyz1'`` sorts after
    ``'xy{'``, so the old range ``name >= 'xyz' and name < 'xy{'`` missed it.
    """
    from sqlalchemy import create_engine, event, select, text

    from mlinfra_lab.tracking import schema as S

    engine = create_engine("sqlite://")

    @event.listens_for(engine, "connect")
    def _setup(dbapi_conn, _record):
        dbapi_conn.create_collation(
            "ICU_LIKE",
            lambda a, b: (
                (_icu_like_key(a) > _icu_like_key(b)) - (_icu_like_key(a) < _icu_like_key(b))
            ),
        )
        dbapi_conn.execute("PRAGMA case_sensitive_like=ON")  # as the store's engines

    names = ["xyz1", "xyz", "xy{", "XYZ2", "xy-z", "xyZ_", "zz", "xz", "xyz_%"]
    with engine.begin() as conn:
        conn.execute(
            text(f"CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT COLLATE {collation})")
        )
        conn.execute(text("CREATE INDEX ix_name ON runs (name)"))
        conn.execute(text("INSERT INTO runs (name) VALUES (:n)"), [{"n": n} for n in names])

    def like(pattern):
        cond = compile_filter(f"name like '{pattern}'", now=0.0)
        with engine.connect() as conn:
            return sorted(conn.execute(select(S.runs.c.name).where(cond)).scalars())

    assert like("xyz%") == ["xyz", "xyz1", "xyz_%"], f"a prefix match missed under {collation}"
    assert like("xy%") == sorted(n for n in names if n.startswith("xy"))
    assert like("xyz\\\\_%") == ["xyz_%"], "an escaped '_' is literal"
    assert like("xyz\\\\_\\\\%") == ["xyz_%"]
    assert like("XYZ%") == ["XYZ2"], "case-sensitive whatever the collation"
    engine.dispose()


@pytest.mark.postgres
@pytest.mark.skipif(not os.environ.get("MLINFRA_PG_URL"), reason="set MLINFRA_PG_URL")
def test_like_finds_prefix_matches_in_an_icu_collated_postgres_database(tmp_path):
    """The issue's case: a PostgreSQL database with an ICU collation missed prefix matches."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from mlinfra_lab.tracking import TrackingStore

    base = make_url(os.environ["MLINFRA_PG_URL"])
    name = f"t_icu_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(
                text(
                    f'CREATE DATABASE "{name}" TEMPLATE template0 LOCALE_PROVIDER icu '
                    "ICU_LOCALE 'en-US' LOCALE 'C'"
                )
            )
    except Exception as err:  # noqa: BLE001 (no ICU in this build, or no CREATEDB right)
        admin.dispose()
        pytest.skip(f"cannot create an ICU-collated database here: {str(err)[:200]}")
    try:
        url = base.set(database=name).render_as_string(hide_password=False)
        with TrackingStore(url, str(tmp_path / "art"), default_user="owner") as store:
            for tag in ["xyz1", "xyz", "xy{", "XYZ2", "xy-z"]:
                store.start_run("p", tags={"t": tag}, params={"model": tag}).end()
            for field in ("tags.t", "params.model"):
                got = sorted(r.tags["t"] for r in store.search_runs("p", f"{field} like 'xyz%'"))
                assert got == ["xyz", "xyz1"], f"{field}: {got}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
