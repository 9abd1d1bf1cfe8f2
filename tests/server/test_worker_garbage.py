"""A worker's cyclic garbage collector walks what its requests made, not what it loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

from webhook import cli
from webhook.server import gunicorn_conf, launch


def test_the_gunicorn_trainhook_serve_starts_runs_the_worker_init_that_freezes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    configured: list[Any] = []

    def serve(settings: launch.ServeSettings) -> int:  # gunicorn as configured, not started
        configured.append(launch._Server(settings).run.__self__)  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(launch, "serve", serve)

    assert cli.main(["serve"]) == 0
    [application] = configured
    assert application.cfg.post_worker_init is gunicorn_conf.post_worker_init


def test_after_the_worker_init_only_objects_made_later_are_walked_by_the_collector() -> None:
    # In a process of its own: a frozen object stays frozen for the life of the process.
    script = textwrap.dedent(
        """
        import gc
        from webhook.server import gunicorn_conf
        from webhook.server.admission import Context
        from webhook.server.app import create_app

        app = create_app(Context())
        loaded = len(gc.get_objects())
        gunicorn_conf.post_worker_init(None)
        made_later = [app]  # a list is always tracked
        walked = gc.get_objects()
        print(
            any(o is app for o in walked),
            any(o is made_later for o in walked),
            gc.get_freeze_count() >= loaded // 2,
            loaded,
        )
        """
    )

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )

    app_walked, later_walked, most_frozen, loaded = done.stdout.split()
    assert (app_walked, later_walked, most_frozen) == ("False", "True", "True"), done.stdout
    assert int(loaded) > 10_000  # the app, Flask and the core
