"""The serving worker (webhook/server/worker.py) overrides and calls internals of gunicorn's
gthread worker, which gunicorn does not promise to keep. pyproject.toml pins the releases the
worker is tested on; these tests fail loudly when the installed gunicorn differs from the code the
worker was written against, naming what to review."""

from __future__ import annotations

import hashlib
import inspect
import tomllib
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from gunicorn import http, sock
from gunicorn.workers import gthread
from packaging.requirements import Requirement

from webhook.server.worker import AdmissionWorker

ROOT = Path(__file__).resolve().parents[2]

# What worker.py overrides (first five) or relies on, with the SHA-256 of its source (first 16
# hex digits) in the gunicorn release the worker was written against.
INTERNALS: dict[str, tuple[Callable[..., Any], str]] = {
    "ThreadWorker.accept": (gthread.ThreadWorker.accept, "f8dcead3dce5c851"),
    "ThreadWorker.on_client_socket_readable": (
        gthread.ThreadWorker.on_client_socket_readable,
        "aead1a3ea7b7daff",
    ),
    "ThreadWorker.finish_request": (gthread.ThreadWorker.finish_request, "616e7bb15a009ff7"),
    "ThreadWorker.murder_keepalived": (gthread.ThreadWorker.murder_keepalived, "4459960c4ccc36d4"),
    "Worker.handle_error": (gthread.ThreadWorker.handle_error, "75426448389bbac9"),
    "ThreadWorker.__init__": (gthread.ThreadWorker.__init__, "5681b8b542ea91bf"),
    "ThreadWorker.init_process": (gthread.ThreadWorker.init_process, "e4fc63a1a68e4f48"),
    "ThreadWorker.run": (gthread.ThreadWorker.run, "f92c7394d85715a4"),
    "ThreadWorker.enqueue_req": (gthread.ThreadWorker.enqueue_req, "c9f428953d24acef"),
    "ThreadWorker.handle": (gthread.ThreadWorker.handle, "ca85c9be3df75da4"),
    "TConn.__init__": (gthread.TConn.__init__, "c8763d7c65974e1b"),
    "TConn.init": (gthread.TConn.init, "5ff3d4ba451cfdf3"),
    "http.get_parser": (http.get_parser, "b7d8dcde91e20db4"),
    "sock.ssl_context": (sock.ssl_context, "069b9e2751d0b762"),
}


def digest(function: Callable[..., Any]) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def test_the_installed_gunicorn_is_a_release_the_project_pins() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [pinned] = [
        Requirement(line)
        for line in project["dependencies"]
        if Requirement(line).name == "gunicorn"
    ]

    assert pinned.specifier, "gunicorn must be pinned to the releases worker.py is tested on"
    assert version("gunicorn") in pinned.specifier


@pytest.mark.parametrize("name", INTERNALS)
def test_each_gunicorn_internal_the_worker_builds_on_is_the_code_it_was_written_against(
    name: str,
) -> None:
    function, expected = INTERNALS[name]

    assert digest(function) == expected, (
        f"gunicorn {version('gunicorn')} changed {name}, which webhook/server/worker.py "
        "overrides or relies on: review the worker against the new code, then update its digest "
        "here and the gunicorn pin in pyproject.toml"
    )


def test_the_worker_overrides_only_the_internals_checked_here() -> None:
    overridden = {
        name
        for name, value in vars(AdmissionWorker).items()
        if callable(value) and hasattr(gthread.ThreadWorker, name)
    }

    assert overridden <= {name.split(".")[1] for name in INTERNALS}
