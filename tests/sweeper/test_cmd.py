"""`trainhook sweep`: its flags, the environment the Helm chart sets, and clear refusals."""

from __future__ import annotations

import argparse

import pytest
from kubernetes.config import kube_config

from webhook.cli import main
from webhook.cli import sweep as cmd
from webhook.sweeper.runner import SweeperConfig


def parse(argv, monkeypatch, **env):
    for name in ("TRAINHOOK_WATCH_NAMESPACE", "TRAINHOOK_NAMESPACE", "POD_NAME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = argparse.ArgumentParser()
    cmd.add_arguments(parser)
    return cmd.config_from(parser.parse_args(argv))


def test_the_environment_of_the_chart_sets_identity_lease_namespace_and_watched_namespace(
    monkeypatch,
):
    config = parse(
        [],
        monkeypatch,
        POD_NAME="trainhook-sweeper-7d9f-x2",
        TRAINHOOK_NAMESPACE="trainhook",
        TRAINHOOK_WATCH_NAMESPACE="ml",
    )
    assert config == SweeperConfig(
        identity="trainhook-sweeper-7d9f-x2",
        namespaces=("ml",),
        resync_seconds=60.0,
        lease_name="trainhook-sweeper",
        lease_namespace="trainhook",
        lease_duration_seconds=15,
        renew_deadline=10.0,
        retry_period=2.0,
        heap_seconds=60.0,  # the collector's full pass at an idle moment, once a minute at most
    )


def test_flags_win_over_the_environment_and_an_empty_namespace_means_every_namespace(monkeypatch):
    config = parse(
        [
            "--namespace=",
            "--resync-seconds=30",
            "--lease-name=sweeper",
            "--lease-namespace=ops",
            "--identity=b",
        ],
        monkeypatch,
        TRAINHOOK_WATCH_NAMESPACE="ml",
        POD_NAME="a",
    )
    assert (config.namespaces, config.resync_seconds, config.lease_name) == ((), 30.0, "sweeper")
    assert (config.lease_namespace, config.identity) == ("ops", "b")


def test_namespace_repeats_for_several_namespaces_and_the_environment_takes_a_comma_list(
    monkeypatch,
):
    flags = parse(["--namespace=ml", "--namespace=vision"], monkeypatch, POD_NAME="a")
    assert flags.namespaces == ("ml", "vision")
    environment = parse([], monkeypatch, POD_NAME="a", TRAINHOOK_WATCH_NAMESPACE="ml, vision")
    assert environment.namespaces == ("ml", "vision")


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--resync-seconds=0", "invalid value '0': a number of seconds above 0"),
        ("--lease-duration-seconds=1.5", "invalid value '1.5': a whole number of seconds >= 1"),
        ("--log-level=loud", "invalid value 'loud': one of debug, info, warning, error"),
        ("--metrics-bind=9090", "invalid value '9090': HOST:PORT, e.g. 0.0.0.0:9090"),
        ("--batch-seconds=-1", "invalid value '-1': a number of seconds from 0 to 60"),
        ("--batch-seconds=soon", "invalid value 'soon': a number of seconds from 0 to 60"),
    ],
)
def test_a_bad_flag_is_refused_with_what_is_allowed(flag, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sweep", flag])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


def test_without_a_cluster_the_sweeper_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert main(["sweep"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trainhook sweep: cannot find a cluster to talk to: ")
    assert err.count("\n") == 1


def test_the_cluster_domain_flag_reaches_the_sweepers_config(monkeypatch):
    assert parse(["--cluster-domain=cluster.local"], monkeypatch).cluster_domain == "cluster.local"
    assert parse([], monkeypatch).cluster_domain == ""


def test_a_jobs_events_share_one_look_a_second_unless_the_batch_period_is_set(monkeypatch):
    assert parse([], monkeypatch).batch_seconds == 1.0
    assert parse(["--batch-seconds=0"], monkeypatch).batch_seconds == 0.0
    assert parse(["--batch-seconds=2.5"], monkeypatch).batch_seconds == 2.5
