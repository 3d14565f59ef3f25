"""The tracking server: the trust boundary between users and the tracking store.

In process, `TrackingStore` believes the ``user=`` it is given: fine for a notebook on its
own database and for admins, who can open the database file anyway, and useless as a
boundary between people. The server is that boundary: it holds the database and the
artifact root, and acts for each request as the user of its bearer token, never as a
name the request gives. Read the modules in this order:

- ``tokens``      bearer tokens: created by a store ADMIN, stored as sha256, revocable
- ``wire``        records and errors as JSON, both ways (HTTP status from the error class)
- ``deps``        what every route depends on: the token's user, the store, JSON replies
- ``app``         the FastAPI app: errors -> JSON, the routes under /api
- ``routes_runs``, ``routes_artifacts``, ``routes_access``, ``routes_maintenance``
                  one route per store method, as the token's user
- ``slow_clients`` header and body timeouts, connection caps, the worker-thread pool
- ``serving``     uvicorn in the foreground (``mlinfra-lab track serve``) or in a thread
- ``client``      `TrackingClient(url, token)`: the store's API over HTTP
- ``remote_run``  `RemoteRun`: `Run`'s API, metrics buffered and sent one batch a request
- ``bench``       the served path of ``mlinfra-lab bench tracking``, and MLflow's server

The server needs FastAPI and uvicorn (``pip install "mlinfra-lab[server]"``); the client
needs only httpx. Names are imported on first use, so importing the client does not
import FastAPI.
"""

from importlib import import_module

__all__ = [
    "ClientLimits",
    "IssuedToken",
    "RemoteRun",
    "TrackingClient",
    "connect",
    "create_app",
    "create_token",
    "list_tokens",
    "revoke_token",
    "running_server",
    "serve",
]

_EXPORTS = {
    "ClientLimits": "slow_clients",
    "IssuedToken": "tokens",
    "create_token": "tokens",
    "list_tokens": "tokens",
    "revoke_token": "tokens",
    "create_app": "app",
    "running_server": "serving",
    "serve": "serving",
    "TrackingClient": "client",
    "connect": "client",
    "RemoteRun": "remote_run",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(import_module(f"mlinfra_lab.tracking.server.{_EXPORTS[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'mlinfra_lab.tracking.server' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
