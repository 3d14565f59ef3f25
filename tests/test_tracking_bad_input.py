"""Input that can never be stored gets a 4xx that says so, on SQLite and PostgreSQL; replies stay strict JSON.

Each request below once got a 500 (SQLite: UnicodeEncodeError, OverflowError) or a 503
"retry" (PostgreSQL: SQLSTATE 22001/22003), or was stored and broke later replies
(``Infinity``), or a 70-key ``order_by`` that was a database error. Now: `InvalidInput`
(422) or `QueryError` (400), the same on both backends, and the server keeps answering.
"""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import insert

from mlinfra_lab.tracking import InvalidInput, QueryError
from mlinfra_lab.tracking import schema as S
from mlinfra_lab.tracking.query import MAX_ORDER_KEYS
from mlinfra_lab.tracking.server import TrackingClient, create_token, running_server
from mlinfra_lab.tracking.testing import available_backends, fresh_store, row_count

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]
BIG = 2**70
LONG = "x" * 300  # longer than every name column (at most 250)
SURROGATE = b'"a\\ud800b"'  # JSON may spell a lone surrogate; no UTF-8 encoder takes it


def _strict(text: str):
    """JSON as RFC 8259 has it: no Infinity, no NaN."""

    def refuse(name: str):
        raise AssertionError(f"the reply is not strict JSON: it holds {name}")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module", params=BACKENDS)
def server(request, tmp_path_factory):
    """A server with alice's project 'p' and run, and her token."""
    with fresh_store(request.param, tmp_path_factory.mktemp("bad")) as store:
        secret = create_token(store.engine, "alice", by="alice").secret
        with running_server(store) as url, TrackingClient(url, secret) as alice:
            with alice.start_run("p", name="honest") as run:
                run.log_metrics({"acc": 0.5}, step=1)
            yield store, url, secret, run.id


def _cases(rid: int) -> dict[str, tuple[str, str, bytes | dict | None]]:
    s = SURROGATE.decode()
    return {
        "surrogate project": ("POST", "/runs", f'{{"project": {s}}}'.encode()),
        "surrogate run name": ("POST", "/runs", f'{{"project": "p", "name": {s}}}'.encode()),
        "surrogate param name": ("POST", f"/runs/{rid}/params", f'{{"params": {{{s}: 1}}}}'),
        "surrogate param value": ("POST", f"/runs/{rid}/params", f'{{"params": {{"k": {s}}}}}'),
        "surrogate tag": ("POST", f"/runs/{rid}/tags", f'{{"tags": {{"k": {s}}}}}'),
        "surrogate metric": ("POST", f"/runs/{rid}/metrics", f'{{"points": [[0, {{{s}: 1}}]]}}'),
        "surrogate search": ("POST", "/runs/search", f'{{"project": {s}}}'),
        "surrogate dataset": (
            "POST",
            "/datasets",
            f'{{"project": "p", "name": {s}, "version": "1", "uri": "u"}}',
        ),
        "2^70 run": ("GET", f"/runs/{BIG}", None),
        "2^70 metric history": ("GET", f"/runs/{BIG}/metric-history?key=acc", None),
        "2^70 run's metrics": ("POST", f"/runs/{BIG}/metrics", {"points": [[0, {"a": 1}]]}),
        "2^70 step": ("POST", f"/runs/{rid}/metrics", {"points": [[BIG, {"a": 1}]]}),
        "2^31 step": ("POST", f"/runs/{rid}/metrics", {"points": [[2**31, {"a": 1}]]}),
        "2^70 lineage": ("GET", f"/lineage?node=run:{BIG}", None),
        "2^70 artifact": ("GET", f"/artifacts/{BIG}/content", None),
        "2^70 pin": ("POST", f"/artifacts/{BIG}/pin", {"pinned": True}),
        "2^70 run's artifacts": ("GET", f"/runs/{BIG}/artifacts", None),
        "2^70 input": ("POST", "/runs", {"project": "p", "inputs": [f"artifact:{BIG}"]}),
        "long project": ("POST", "/runs", {"project": LONG}),
        "long run name": ("POST", "/runs", {"project": "p", "name": LONG}),
        "long param name": ("POST", f"/runs/{rid}/params", {"params": {LONG: 1}}),
        "long tag name": ("POST", f"/runs/{rid}/tags", {"tags": {LONG: 1}}),
        "long metric name": ("POST", f"/runs/{rid}/metrics", {"points": [[0, {LONG: 1}]]}),
        "long dataset name": (
            "POST",
            "/datasets",
            {"project": "p", "name": LONG, "version": "1", "uri": "u"},
        ),
        "long dataset version": (
            "POST",
            "/datasets",
            {"project": "p", "name": "d", "version": LONG, "uri": "u"},
        ),
        "long code commit": ("POST", "/runs", {"project": "p", "code_commit": LONG}),
        "long lineage node": ("GET", f"/lineage?node=code:{LONG}", None),
        "Infinity metric": ("POST", f"/runs/{rid}/metrics", b'{"points": [[2, {"a": Infinity}]]}'),
        "NaN metric": ("POST", f"/runs/{rid}/metrics", b'{"points": [[2, {"a": NaN}]]}'),
        "Infinity at end": ("POST", f"/runs/{rid}/end", b'{"points": [[2, {"a": -Infinity}]]}'),
        "Infinity start time": ("POST", "/runs", b'{"project": "p", "start_time": Infinity}'),
    }


CASES = sorted(_cases(1))


@pytest.mark.parametrize("case", CASES)
def test_input_that_can_never_be_stored_is_a_422_that_says_why(server, case):
    store, url, secret, rid = server
    method, path, body = _cases(rid)[case]
    before = (row_count(store, "runs"), row_count(store, "metrics"), row_count(store, "params"))
    content = json.dumps(body).encode() if isinstance(body, dict) else body
    if isinstance(content, str):
        content = content.encode()
    r = httpx.request(
        method,
        url + "/api" + path,
        content=content,
        headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"},
    )
    assert r.status_code == 422, f"{case}: HTTP {r.status_code} {r.text[:300]}"
    reply = _strict(r.text)
    assert reply["error"] == "InvalidInput" and "retry" not in reply["message"].lower()
    assert (
        row_count(store, "runs"),
        row_count(store, "metrics"),
        row_count(store, "params"),
    ) == before, "a refused request writes nothing"
    ok = httpx.get(f"{url}/api/runs/{rid}", headers={"Authorization": f"Bearer {secret}"})
    assert ok.status_code == 200 and _strict(ok.text)["metrics"] == {"acc": 0.5}


def test_the_client_raises_invalid_input_with_the_servers_message(server):
    _, url, secret, rid = server
    with TrackingClient(url, secret) as alice:
        with pytest.raises(InvalidInput, match="out of range: ids are integers from 1 to"):
            alice.get_run(BIG)
        with pytest.raises(InvalidInput, match="300 characters long, more than the 200"):
            alice.start_run(LONG)


def test_a_remote_run_refuses_a_point_the_server_would_refuse_and_goes_on(server):
    """A point no store can take is refused at the line that logs it, never buffered: the
    batch around it is written, instead of being refused (and re-sent) on every flush."""
    store, url, secret, _ = server
    with TrackingClient(url, secret) as alice:
        run = alice.start_run("p", name="remote")
        run.log_metrics({"loss": 1.0}, step=1)
        for values, step in (
            ({"loss": float("inf")}, 2),
            ({"loss": float("nan")}, 2),
            ({"loss": 0.5}, 2**40),
            ({LONG: 0.5}, 2),
        ):
            with pytest.raises(InvalidInput):
                run.log_metrics(values, step=step)
        run.log_metrics({"loss": 0.25}, step=3)
        assert run.flush() == 2, "the good points are written in one batch"
        run.end()
    assert store.metric_history(run.id, "loss", user="alice") == [(1, 1.0), (3, 0.25)]


def test_order_by_with_too_many_keys_is_a_query_error(server):
    store, url, secret, _ = server
    seventy = ", ".join(f"metrics.m{i}" for i in range(70))
    with pytest.raises(QueryError, match=f"more than {MAX_ORDER_KEYS} sort keys"):
        store.search_runs("p", order_by=seventy, user="alice")
    r = httpx.post(
        f"{url}/api/runs/search",
        json={"project": "p", "order_by": seventy},
        headers={"Authorization": f"Bearer {secret}"},
    )
    assert r.status_code == 400 and r.json()["error"] == "QueryError", r.text[:300]
    most = ", ".join(f"metrics.m{i}" for i in range(MAX_ORDER_KEYS))
    assert store.search_runs("p", order_by=most, user="alice"), "the bound itself still works"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_non_finite_number_already_stored_is_sent_as_null(backend, tmp_path):
    """A database written before non-finite metrics were refused still gives strict JSON."""
    with fresh_store(backend, tmp_path, default_user="alice") as store:
        run = store.start_run("p", name="old")
        run.log_metrics({"loss": 1.0}, step=0)
        run.end()
        with store.engine.begin() as conn:
            conn.execute(
                insert(S.latest_metrics).values(
                    run_id=run.id, key="grad_norm", step=0, value=float("inf")
                )
            )
        secret = create_token(store.engine, "alice", by="alice").secret
        with running_server(store) as url:
            auth = {"Authorization": f"Bearer {secret}"}
            got = _strict(httpx.get(f"{url}/api/runs/{run.id}", headers=auth).text)
            assert got["metrics"] == {"loss": 1.0, "grad_norm": None}
            found = httpx.post(f"{url}/api/runs/search", json={"project": "p"}, headers=auth)
            assert _strict(found.text)[0]["metrics"]["grad_norm"] is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_store_applies_one_rule_on_both_backends(backend, tmp_path):
    """Direct access too: SQLite would store a 300-character name that PostgreSQL refuses."""
    with fresh_store(backend, tmp_path, default_user="alice") as store:
        with pytest.raises(InvalidInput, match="more than the 200 allowed"):
            store.start_run(LONG)
        run = store.start_run("p")
        with pytest.raises(InvalidInput, match="lone surrogate"):
            run.log_params({"k": "a\ud800"})
        with pytest.raises(InvalidInput, match="out of range"):
            run.log_metrics({"a": 1.0}, step=2**31)
        with pytest.raises(InvalidInput, match="NUL"):
            run.set_tags({"k": "a\x00b"})
        run.log_metrics({"a": 1.0}, step=2**31 - 1)  # the bound itself is stored
        run.log_params({"huge": 10**400})  # a number no float holds: kept as text
        run.end()
        assert store.get_run(run.id).params["huge"] == str(10**400)
        assert store.metric_history(run.id, "a") == [(2**31 - 1, 1.0)]
        assert store.count("runs") == 1


def test_a_remote_run_drops_a_point_the_server_refuses_and_writes_the_rest(server, monkeypatch):
    """A client whose checks let a bad point through (an older client, a newer server's
    rule): the refused batch is split, the bad points are dropped and reported, the rest
    written, and the run still ends; before, the batch was refused on every flush."""
    from types import SimpleNamespace

    from mlinfra_lab.tracking.server import remote_run

    # the client checks nothing: only the server does
    lax = SimpleNamespace(step=int, metric_value=lambda _k, v, _s: float(v))
    monkeypatch.setattr(remote_run, "bounds", lax, raising=False)
    monkeypatch.setattr(remote_run.RemoteRun, "_metric_key", lambda _self, k: k, raising=False)
    store, url, secret, _ = server
    with TrackingClient(url, secret) as alice:
        run = alice.start_run("p", name="lax client")
        run.log_metrics({"loss": 1.0, "acc": 0.1}, step=1)
        run.log_metrics({"loss": 0.9}, step=2**40)
        run.log_metrics({"loss": 0.8, LONG: 0.5}, step=3)
        with pytest.warns(UserWarning, match="refused metric") as caught:
            assert run.flush() == 3, "loss@1, acc@1 and loss@3 are written"
        assert len(caught) == 2 and [(s, k) for s, k, _, _ in run.refused] == [
            (2**40, "loss"),
            (3, LONG),
        ]
        assert "out of range" in run.refused[0][3] and "300 characters" in run.refused[1][3]
        assert run.flush() == 0, "nothing is left to re-send"
        run.log_metrics({"loss": 0.7}, step=2**33)
        with pytest.warns(UserWarning, match="refused metric 'loss' at step 8589934592"):
            run.end()
    assert store.get_run(run.id, user="alice").status == "FINISHED"
    assert store.metric_history(run.id, "loss", user="alice") == [(1, 1.0), (3, 0.8)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_project_name_outgrows_the_audit_column(backend, tmp_path):
    """Audit rows keep the first 200 characters of a project name: a 214-character project
    would have its rows read by whoever created the project named by its 200-character
    prefix. No name longer than the column can exist now, on either backend."""
    long = "team-" + "x" * 209
    with fresh_store(backend, tmp_path, default_user="alice") as store:
        with pytest.raises(InvalidInput, match="214 characters long, more than the 200"):
            store.start_run(long, name="alice's secret run", user="alice")
        store.start_run(long[:200], user="mallory").end()
        rows = store.audit_log(long[:200], user="mallory")
        assert rows and {r["principal"] for r in rows} == {"mallory"}
