"""The command lines the chart gives its containers are accepted by `trainhook serve` and
`trainhook sweep` themselves, and mean what the values say."""

from __future__ import annotations

import argparse
import importlib
import os
import re
from typing import Any

import pytest

from tests.chart.rendering import COMBINATIONS, Rendered, render
from webhook.cli import COMMANDS


@pytest.fixture(autouse=True)
def no_settings_from_this_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flag defaults read TRAINHOOK_* and POD_NAME; in a pod only the chart sets them."""
    for name in list(os.environ):
        if name.startswith("TRAINHOOK_") or name == "POD_NAME":
            monkeypatch.delenv(name)


def parse(
    container: dict[str, Any], pod_name: str = "trainhook-sweeper-5d9f-x2k"
) -> argparse.Namespace:
    """The container's args, with Kubernetes' $(VAR) expansion from its downward-API env."""
    downward = {"metadata.namespace": "trainhook", "metadata.name": pod_name}
    env = {
        e["name"]: downward[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container["env"]
        if "valueFrom" in e
    }
    args = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["args"]]
    command, *flags = args
    module = importlib.import_module(COMMANDS[command][0])
    parser = argparse.ArgumentParser(prog=f"trainhook {command}", exit_on_error=False)
    module.add_arguments(parser)
    return parser.parse_args(flags)


@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_trainhook_serve_accepts_the_webhook_command_line(combination: str) -> None:
    values = COMBINATIONS[combination]
    rendered = render(values)
    args = parse(rendered.container("Deployment", _webhook(rendered)))
    assert args.bind == "0.0.0.0:8443"
    assert args.namespace == "trainhook"
    sweepers = [n for n in rendered.names("Deployment") if n.endswith("-sweeper")]
    accounts = [
        rendered.named("Deployment", name)["spec"]["template"]["spec"]["serviceAccountName"]
        for name in sweepers
    ]
    # Only the sweeper may change the outcome it records; without one, nobody is named.
    assert args.sweeper_username == "".join(
        f"system:serviceaccount:trainhook:{account}" for account in accounts
    )
    assert args.lookup is values.get("webhook", {}).get("lookup", True)
    assert (args.cert_file, args.key_file) == (
        "/var/run/trainhook/certs/tls.crt",
        "/var/run/trainhook/certs/tls.key",
    )
    mode = values.get("certificates", {}).get("mode", "self")
    assert args.cert_mode == ("self" if mode == "self" else "files")


def _webhook(rendered: Rendered) -> str:
    (name,) = [n for n in rendered.names("Deployment") if n.endswith("-webhook")]
    return name


def test_self_mode_tells_the_webhook_its_secret_configuration_and_service() -> None:
    rendered = render()
    args = parse(rendered.container("Deployment", "trainhook-webhook"))
    assert (args.cert_secret, args.webhook_config, args.service) == (
        "trainhook-webhook-tls",
        rendered.one("MutatingWebhookConfiguration")["metadata"]["name"],
        rendered.one("Service")["metadata"]["name"],
    )


needs_sweep = pytest.mark.skipif(
    "sweep" not in COMMANDS, reason="this build has no `trainhook sweep` command yet"
)


@needs_sweep
def test_trainhook_sweep_accepts_the_sweeper_command_line() -> None:
    rendered = render(
        {"namespaces": ["ml", "vision"], "sweeper": {"resyncSeconds": 30, "logLevel": "debug"}}
    )
    args = parse(rendered.container("Deployment", "trainhook-sweeper"))
    assert args.namespaces == ["ml", "vision"]
    assert args.resync_seconds == 30
    assert (args.lease_name, args.lease_namespace) == ("trainhook-sweeper", "trainhook")
    assert args.identity == "trainhook-sweeper-5d9f-x2k"
    assert args.log_level == "debug"


@needs_sweep
def test_a_sweeper_watching_everything_passes_no_namespace() -> None:
    assert parse(render().container("Deployment", "trainhook-sweeper")).namespaces is None
