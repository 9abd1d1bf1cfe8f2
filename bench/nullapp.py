"""`trainhook serve` with the admission app swapped for one that does nothing.

Everything else is the real command: the same gunicorn settings, worker class, TLS context,
logging and metrics setup. The app reads the body (so keep-alive works as for the real one) and
answers an AdmissionReview that allows the object, with the request's uid (the API server refuses
an answer without it). Run as
`python -m bench.nullapp <trainhook serve arguments>`.
"""

from __future__ import annotations

import sys

from flask import Flask, Response, request

from webhook import cli
from webhook.core import jsoncodec
from webhook.server import launch


def null_app(settings: launch.ServeSettings) -> Flask:
    app = Flask("trainhook-null")

    @app.post("/mutate")
    def mutate() -> Response:
        uid = jsoncodec.loads(request.get_data(cache=False))["request"]["uid"]
        allowed = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True},
        }
        return Response(jsoncodec.dumps(allowed), mimetype="application/json")

    @app.get("/readyz")
    def readyz() -> Response:
        return Response("ready\n", mimetype="text/plain")

    return app


if __name__ == "__main__":
    launch.build_app = null_app
    sys.exit(cli.main(["serve", *sys.argv[1:]]))
