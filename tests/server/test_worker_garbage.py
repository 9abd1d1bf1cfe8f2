"""A worker's cyclic garbage collector walks what its requests made, not what it loaded."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from webhook.server import gunicorn_conf, launch


def test_gunicorn_runs_the_worker_init_that_freezes_what_the_worker_loaded() -> None:
    settings = launch.ServeSettings(
        bind="127.0.0.1:8443",
        cert_file="tls.crt",
        key_file="tls.key",
        workers=2,
        cluster_domain="",
        coscheduling_scheduler="",
        log_level="info",
        lookup=False,
        cert_mode="files",
        cert_secret="",
        webhook_config="",
        service="",
        namespace="",
    )

    application = launch._Server(settings).run.__self__  # type: ignore[attr-defined]

    assert application.cfg.post_worker_init is gunicorn_conf.post_worker_init


def test_after_the_worker_init_only_objects_made_later_are_collected() -> None:
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
        made_later = [{"n": n} for n in range(10)]
        print(gc.get_freeze_count() >= loaded // 2, len(gc.get_objects()) < 1000, loaded)
        """
    )

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )

    frozen, only_later, loaded = done.stdout.split()
    assert (frozen, only_later) == ("True", "True"), done.stdout
    assert int(loaded) > 10_000  # the app, flask and the core
