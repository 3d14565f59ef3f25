"""The tracking server as the trust boundary: each attack of issue 15 (item 1), through the server.

Every test runs a real server (uvicorn on a loopback port) over SQLite and PostgreSQL, and
attacks it the way a user would reach it: `TrackingClient`, the ``mlinfra-lab track``
command with ``--server``, or raw HTTP. Each refusal must lose nothing (a refused batch
stays buffered) and leave an honest user's run in the same database exactly as it was.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import httpx
import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.tracking import (
    AuthenticationError,
    IdentityError,
    Level,
    NotFoundOrDenied,
    PermissionDenied,
)
from mlinfra_lab.tracking.artifacts import BlobStore
from mlinfra_lab.tracking.server import TrackingClient, create_token, revoke_token, running_server
from mlinfra_lab.tracking.server.remote_run import RemoteRun
from mlinfra_lab.tracking.store import TrackingStore
from mlinfra_lab.tracking.testing import available_backends, fresh_store

pytestmark = pytest.mark.tracking

BACKENDS = [
    pytest.param(b, marks=[pytest.mark.postgres] if b == "postgres" else [])
    for b in available_backends()
]


@dataclass
class World:
    store: TrackingStore  # direct access: the test harness, trusted
    url: str
    tokens: dict[str, str]  # user -> secret
    token_ids: dict[str, int]
    honest: int  # alice's run in 'secret'
    art: int  # its checkpoint

    def client(self, user: str) -> TrackingClient:
        return TrackingClient(self.url, self.tokens[user])


@pytest.fixture(params=BACKENDS)
def world(request, tmp_path):
    """alice (store ADMIN) owns 'secret' with an honest run and checkpoint; mallory owns 'mine'; bob has a token."""
    with fresh_store(request.param, tmp_path, default_user="alice") as store:
        issued = {u: create_token(store.engine, u, by="alice") for u in ("alice", "mallory", "bob")}
        with (
            running_server(store) as url,
            TrackingClient(url, issued["alice"].secret) as alice,
            TrackingClient(url, issued["mallory"].secret) as mallory,
        ):
            with alice.start_run(
                "secret", name="honest", params={"lr": 0.1}, tags={"team": "nlp"}
            ) as run:
                run.log_metrics({"acc": 0.9}, step=5)
                art = run.log_artifact(b"honest weights", "ckpt.pt", kind="checkpoint")
            mallory.start_run("mine", name="mallorys").end()
            yield World(
                store,
                url,
                {u: t.secret for u, t in issued.items()},
                {u: t.id for u, t in issued.items()},
                run.id,
                art.id,
            )


def snapshot(w: World) -> tuple:
    """Everything about alice's honest run, read directly (the trusted path)."""
    s = w.store
    info = s.get_run(w.honest, user="alice")
    arts = [(a.name, a.sha256) for a in s.list_artifacts(w.honest, user="alice")]
    return (
        info,
        arts,
        s.metric_history(w.honest, "acc", user="alice"),
        s.level("secret", principal="mallory"),
    )


def raw(w: World, method: str, path: str, user: str | None = "mallory", **kw) -> httpx.Response:
    headers = kw.pop("headers", {})
    if user is not None:
        headers["Authorization"] = f"Bearer {w.tokens[user]}"
    return httpx.request(method, w.url + "/api" + path, headers=headers, **kw)


def test_the_identity_is_the_tokens_user_whatever_the_request_says(world, monkeypatch, capsys):
    w = world
    before = snapshot(w)
    # The command line: MLINFRA_USER=alice is direct access's identity, and plays no part here.
    monkeypatch.setenv("MLINFRA_USER", "alice")
    via = ["--server", w.url, "--token", w.tokens["mallory"]]
    assert main(["track", "grant", "secret", "mallory", "ADMIN", *via]) == 2
    assert "'mallory' may not grant access in project 'secret'" in capsys.readouterr().err
    assert main(["track", "grant", "secret", "mallory", "ADMIN", "--user", "alice", *via]) == 2
    assert "--user cannot be used with --server" in capsys.readouterr().err
    # The client: user= may only name the token's own user, and is refused before any request.
    with w.client("mallory") as mallory:
        assert mallory.user == "mallory"
        with pytest.raises(IdentityError, match="acts only as its token's user"):
            mallory.grant("secret", "mallory", "ADMIN", user="alice")
        with pytest.raises(PermissionDenied) as err:
            mallory.grant("secret", "mallory", "ADMIN")
        assert err.value.principal == "mallory" and err.value.needed == "ADMIN"
    # Raw HTTP: a user in the body or the query string is refused; other headers are never read.
    grant = {"project": "secret", "principal": "mallory", "level": "ADMIN"}
    for r in (
        raw(w, "POST", "/grants", json=grant | {"user": "alice"}),
        raw(w, "POST", "/grants?user=alice", json=grant),
    ):
        assert r.status_code == 400 and r.json()["error"] == "IdentityError", r.text
    for header in ("X-Mlinfra-User", "X-User", "Remote-User", "X-Forwarded-User"):
        r = raw(w, "POST", "/grants", json=grant, headers={header: "alice"})
        assert r.status_code == 403 and r.json()["attrs"]["principal"] == "mallory", r.text
    r = raw(w, "POST", "/grants", user=None, json=grant, headers={"Authorization": "Bearer alice"})
    assert r.status_code == 401, "a user name is not a token"
    assert snapshot(w) == before, "mallory gained something, or the honest run changed"
    assert w.store.level("secret", user="mallory") == Level.NONE


def test_writes_into_another_projects_run_are_refused(world):
    w = world
    before, blobs = snapshot(w), BlobStore(w.store.artifact_root).list_blobs()
    with w.client("mallory") as mallory:  # ADMIN of 'mine', nothing on 'secret'
        forged = RemoteRun(mallory, w.honest, "mine", "forged", "mallory")
        forged.log_metrics({"acc": 0.0}, step=99)
        for write in (
            forged.flush,
            lambda: forged.log_params({"lr": 9}),
            lambda: forged.set_tags({"team": "evil"}),
            lambda: forged.log_artifact(b"evil" * 10_000, "evil.pt"),
            lambda: forged.end("KILLED"),
        ):
            with pytest.raises(NotFoundOrDenied) as err:
                write()
            assert "secret" not in str(err.value), "the refusal must not name the run's project"
        assert forged._buffer == [(99, {"acc": 0.0})], (
            "a refused batch stays buffered: nothing is dropped"
        )
    r = raw(w, "POST", f"/runs/{w.honest}/metrics", json={"points": [[100, {"acc": 0.0}]]})
    assert r.status_code == 404 and r.json()["error"] == "NotFoundOrDenied"
    assert snapshot(w) == before, "the honest run changed"
    assert BlobStore(w.store.artifact_root).list_blobs() == blobs, (
        "a refused upload must store nothing"
    )
    denied = [
        a
        for a in w.store.audit_log("secret", limit=100)
        if a["principal"] == "mallory" and not a["allowed"]
    ]
    assert len(denied) == 6, "each refused write is audited under the run's real project"


def test_revoking_write_stops_an_open_runs_writes_and_loses_nothing(world):
    w = world
    before = snapshot(w)
    with w.client("alice") as alice, w.client("bob") as bob:
        alice.grant("secret", "bob", "WRITE")
        run = bob.start_run("secret", name="bobs")
        run.log_metrics({"loss": 1.0}, step=0)
        assert run.flush() == 1
        alice.grant("secret", "bob", "VIEW")  # revoked while the run is open
        run.log_metrics({"loss": 0.5}, step=1)
        for write in (
            run.flush,
            lambda: run.log_params({"lr": 1}),
            lambda: run.set_tags({"x": "y"}),
            lambda: run.log_artifact(b"late", "late.pt"),
            run.end,
        ):
            with pytest.raises(PermissionDenied) as err:
                write()
            assert err.value.needed == "WRITE" and err.value.scope == "project:secret"
        assert not run.ended and run._buffer == [(1, {"loss": 0.5})], (
            "the refused point is still buffered"
        )
        info = w.store.get_run(run.id, user="alice")
        assert info.status == "RUNNING" and info.params == {} and info.tags == {}
        assert w.store.metric_history(run.id, "loss", user="alice") == [(0, 1.0)], (
            "only the point before the revoke"
        )
        alice.grant("secret", "bob", "WRITE")  # given back: the buffered point was never lost
        run.end()
    assert w.store.metric_history(run.id, "loss", user="alice") == [(0, 1.0), (1, 0.5)]
    assert snapshot(w) == before


def test_absent_bad_and_revoked_tokens_get_one_401(world):
    w = world
    before = snapshot(w)
    answers = set()
    for headers in (
        {},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer not-a-token"},
        {"Authorization": "Bearer mlt_" + "x" * 43},
        {"Authorization": "Basic YWxpY2U6YWxpY2U="},
        {"Authorization": "Bearer " + w.tokens["mallory"] + "x"},
    ):
        r = raw(
            w,
            "POST",
            "/grants",
            user=None,
            headers=headers,
            json={"project": "secret", "principal": "mallory", "level": "ADMIN"},
        )
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", r.text
        answers.add(r.text)
    with pytest.raises(AuthenticationError):
        TrackingClient(w.url, "mlt_guessed")
    with w.client("alice") as alice, w.client("bob") as bob:
        alice.grant("secret", "bob", "WRITE")
        run = bob.start_run("secret", name="bobs")
        run.log_metrics({"loss": 1.0}, step=0)
        revoke_token(w.store.engine, w.token_ids["bob"], by="alice")  # the admin's direct path
        with pytest.raises(AuthenticationError):
            run.flush()  # the very next request
        assert run._buffer == [(0, {"loss": 1.0})], "nothing buffered is dropped"
        r = raw(w, "GET", "/whoami", user="bob")
        assert r.status_code == 401
        answers.add(r.text)
        with pytest.raises(AuthenticationError):
            TrackingClient(w.url, w.tokens["bob"])
        assert w.store.metric_history(run.id, "loss", user="alice") == []
    assert len(answers) == 1, f"absent, bad and revoked tokens must get one answer: {answers}"
    assert snapshot(w) == before


def test_ids_you_cannot_see_get_one_answer_through_the_server(world):
    w = world
    missing_run, missing_art = 10**6, 10**6 + 1

    def same(
        path_real: str,
        path_missing: str,
        method: str = "GET",
        real_id: int = 0,
        missing_id: int = 0,
        **kw,
    ) -> None:
        a, b = raw(w, method, path_real, **kw), raw(w, method, path_missing, **kw)
        assert a.status_code == b.status_code == 404, (a.text, b.text)
        assert a.text.replace(str(real_id), "ID") == b.text.replace(str(missing_id), "ID"), (
            a.text,
            b.text,
        )
        assert "secret" not in a.text, "the answer must not name the project"

    h, m = w.honest, missing_run
    same(f"/runs/{h}", f"/runs/{m}", real_id=h, missing_id=m)
    same(
        f"/runs/{h}/metric-history?key=acc",
        f"/runs/{m}/metric-history?key=acc",
        real_id=h,
        missing_id=m,
    )
    same(f"/runs/{h}/artifacts", f"/runs/{m}/artifacts", real_id=h, missing_id=m)
    same(f"/lineage?node=run:{h}", f"/lineage?node=run:{m}", real_id=h, missing_id=m)
    a, ma = w.art, missing_art
    same(f"/artifacts/{a}/content", f"/artifacts/{ma}/content", real_id=a, missing_id=ma)
    same(f"/artifacts/{a}/pin", f"/artifacts/{ma}/pin", "POST", a, ma, json={"pinned": True})
    r1 = raw(w, "POST", "/runs", json={"project": "mine", "inputs": [f"artifact:{a}"]})
    r2 = raw(w, "POST", "/runs", json={"project": "mine", "inputs": [f"artifact:{ma}"]})
    assert r1.status_code == r2.status_code == 404
    assert re.sub(r"artifact:\d+", "X", r1.text) == re.sub(r"artifact:\d+", "X", r2.text)
    with w.client("mallory") as mallory:  # and the client raises the store's class
        for call in (lambda: mallory.get_run(h), lambda: mallory.read_artifact(a)):
            with pytest.raises(NotFoundOrDenied) as err:
                call()
            assert err.value.project is None and not hasattr(err.value, "_audit_project")


def test_oversized_and_unmeasured_bodies_are_refused_before_they_are_read(world):
    """A hostile client cannot make the server hold a huge JSON body: over the cap (stated
    length) or of no stated length (chunked) is a 413 `RequestTooLarge`, nothing is written;
    an artifact upload, streamed to disk, is not capped; the honest run is unchanged."""
    from mlinfra_lab.tracking import RequestTooLarge
    from mlinfra_lab.tracking.server.limits import MAX_BODY_BYTES
    from mlinfra_lab.tracking.server.wire import error_from_payload

    w = world
    before = snapshot(w)
    run = w.client("mallory").start_run("mine", name="big")
    huge = b'{"points": [' + b"[1, {}]," * (MAX_BODY_BYTES // 8) + b"[2, {}]]}"
    reply = raw(
        w,
        "POST",
        f"/runs/{run.id}/metrics",
        content=huge,
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 413
    err = error_from_payload(reply.status_code, reply.json())
    assert isinstance(err, RequestTooLarge) and "smaller batches" in str(err)

    def chunks():
        yield b'{"points": []}'

    reply = raw(
        w,
        "POST",
        f"/runs/{run.id}/metrics",
        content=chunks(),
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 413 and "no stated length" in reply.json()["message"]
    assert w.store.metric_history(run.id, "acc", user="mallory") == []
    big = bytes(range(256)) * (MAX_BODY_BYTES // 256 + 1000)  # over the cap: an artifact may be
    info = run.log_artifact(big, "big.bin")
    assert info.size == len(big)
    run.log_metrics({"acc": 0.5}, step=1)
    run.end()  # the normal path still fits
    assert w.store.metric_history(run.id, "acc", user="mallory") == [(1, 0.5)]
    assert snapshot(w) == before
