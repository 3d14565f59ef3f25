"""Secrets stay out of logs and process lists; refused authentications leave a trace.

The attacks: a database password read off the server's startup line (logs are widely
readable), a token read off ``ps`` (every local user sees a command line), and a token
guesser whose failures went unrecorded.
"""

from __future__ import annotations

import logging

import httpx
import pytest

from mlinfra_lab.cli import main
from mlinfra_lab.tracking.server import create_token, running_server
from mlinfra_lab.tracking.server.cli import masked_url
from mlinfra_lab.tracking.testing import fresh_store

pytestmark = pytest.mark.tracking

PASSWORD = "hunter2-s3cret"


def test_the_startup_line_masks_the_database_password(monkeypatch, capsys, tmp_path):
    from mlinfra_lab.tracking.server import app, serving

    monkeypatch.setattr(app, "create_app", lambda *a, **kw: object())  # no database is opened
    monkeypatch.setattr(serving, "serve", lambda *a, **kw: None)
    db = f"postgresql+psycopg://tracker:{PASSWORD}@db.internal:5432/tracking"
    art = f"https://uploader:{PASSWORD}@blobs.internal/art"
    assert main(["track", "serve", "--db", db, "--artifacts", art, "--port", "0"]) == 0
    err = capsys.readouterr().err
    assert PASSWORD not in err, f"the startup line shows the password: {err!r}"
    assert "postgresql+psycopg://tracker:***@db.internal:5432/tracking" in err
    assert "https://uploader:***@blobs.internal/art" in err


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("sqlite:///t.db", "sqlite:///t.db"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://u:p%40ss@[::1]:5432/db", "postgresql://u:***@[::1]:5432/db"),
        ("./artifacts", "./artifacts"),
    ],
)
def test_masked_url_hides_only_the_password(url, shown):
    assert masked_url(url) == shown


@pytest.fixture
def served(tmp_path):
    with fresh_store("sqlite", tmp_path, default_user="alice") as store:
        secret = create_token(store.engine, "alice", by="alice").secret
        with running_server(store) as url:
            yield store, url, secret


def test_the_token_comes_from_a_file_or_the_environment_not_the_command_line(
    served, tmp_path, monkeypatch, capsys
):
    store, url, secret = served
    monkeypatch.delenv("MLINFRA_TRACKING_TOKEN", raising=False)
    store.start_run("proj", name="r").end()
    path = tmp_path / "token"
    path.write_text(secret + "\n")
    search = ["track", "runs", "search", "proj", "--json", "--server", url]
    assert main([*search, "--token-file", str(path)]) == 0
    out = capsys.readouterr()
    assert '"name": "r"' in out.out.replace('":"', '": "') and "deprecated" not in out.err
    monkeypatch.setenv("MLINFRA_TRACKING_TOKEN", secret)
    assert main(search) == 0
    assert "deprecated" not in capsys.readouterr().err
    monkeypatch.delenv("MLINFRA_TRACKING_TOKEN")
    assert main([*search, "--token", secret]) == 0, "--token keeps working, for now"
    err = capsys.readouterr().err
    assert "--token is deprecated" in err and "MLINFRA_TRACKING_TOKEN" in err
    assert "--token-file" in err and secret not in err
    assert main([*search, "--token-file", str(tmp_path / "missing")]) == 2
    assert "cannot read --token-file" in capsys.readouterr().err


def test_a_refused_authentication_is_logged_without_the_token(served, caplog):
    _, url, secret = served
    guess = "guess-" + "x" * 20
    server_log = "mlinfra_lab.tracking.server"  # the package's logger: every module's is under it
    with caplog.at_level(logging.WARNING, logger=server_log):
        for headers in (
            {},
            {"Authorization": f"Basic {guess}"},
            {"Authorization": f"Bearer {guess}"},
        ):
            r = httpx.get(f"{url}/api/whoami", headers=headers)
            assert r.status_code == 401
        ok = httpx.get(f"{url}/api/whoami", headers={"Authorization": f"Bearer {secret}"})
        assert ok.status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(server_log + ".")]
    assert len(lines) == 3, f"each refusal leaves one line, a success none: {lines}"
    assert "no Authorization header" in lines[0] and "not a bearer token" in lines[1]
    assert "unknown or revoked token" in lines[2]
    assert all("127.0.0.1" in line and "/api/whoami" in line for line in lines)
    assert not any(guess in line or secret in line for line in lines), "never the token"
