"""A namespaced install's processes, held to the RBAC the chart renders for it.

The chart is rendered with `namespaces: [ml, vision]`; the emulator then answers every request of
the sweeper (or of the webhook's sibling lookup and certificate upkeep) as the API server's RBAC
would under the rendered Roles, ClusterRoles and bindings of that component's ServiceAccount:
403 Forbidden for anything they do not grant. Each runs with the settings the chart's command
lines give it (`--namespace`, `--lookup-namespace`, `--cert-secret`, ...), so a cluster-wide
list, or a write the Roles lack, would show as a refusal and as work left undone.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.chart.rendering import Rendered, render
from tests.chart.test_command_lines import parse
from tests.support.emulator import EmulatorThread, emulator, kubeconfig
from tests.support.rbac import Attributes, Authorizer, attributes
from tests.support.stored import statefulset
from tests.support.sweeping import Running, SweeperProcess
from tests.support.waiting import eventually
from tests.sweeper.test_progress import make_job, token_for
from tests.sweeper.test_sweeper_api import create_mpi_job, create_single_worker_job, succeed
from webhook.certs.material import generate
from webhook.certs.selfmanaged import SelfManagedCertificates, SelfManagedSettings
from webhook.cli.sweep import config_from
from webhook.core import contract
from webhook.core.job.progress import status_path
from webhook.kube.client import Kube, api_client_for
from webhook.kube.lookup import SiblingCache
from webhook.kube.resources import (
    EVENTS,
    JOBS,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
)
from webhook.sweeper.serving.progress import ProgressDesk

NAMESPACED = {"namespaces": ["ml", "vision"]}
RELEASE_NAMESPACE = "trainhook"
SWEEPER = "trainhook-sweeper-under-rbac"
WEBHOOK = "trainhook-webhook-under-rbac"
CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@pytest.fixture
def cluster() -> Iterator[EmulatorThread]:
    with emulator() as served:
        yield served


def client_as(url: str, agent: str) -> Kube:
    configuration = client.Configuration()
    configuration.host = url
    kube = Kube(api_client_for(configuration), timeout=5.0)
    kube.api.user_agent = agent
    return kube


def account_of(rendered: Rendered, deployment: str) -> tuple[str, str]:
    spec = rendered.named("Deployment", deployment)["spec"]["template"]["spec"]
    return RELEASE_NAMESPACE, spec["serviceAccountName"]


def hold_to_rbac(cluster: EmulatorThread, rendered: Rendered, accounts: dict[str, str]) -> None:
    """Answer each client named by its User-Agent as the rendered RBAC would answer the
    component's ServiceAccount; the test's own client (playing users and controllers) is
    unrestricted."""
    authorizer = Authorizer(rendered.documents)
    held = {agent: account_of(rendered, deployment) for agent, deployment in accounts.items()}

    def authorize(method: str, path: str, query: str, agent: str) -> str | None:
        account = held.get(agent)
        return None if account is None else authorizer.refusal(account, method, path, query)

    cluster.emulator.authorize = authorize


def requests_of(cluster: EmulatorThread, agent: str) -> list[tuple[str, str, str, int]]:
    """(method, path, query, status) of every request the client sent."""
    log, asked = list(cluster.emulator.log), list(cluster.emulator.asked)
    return [
        (method, path, query, entry[2])
        for entry, (method, path, query, who) in zip(log, asked, strict=True)
        if who == agent
    ]


def what_rbac_saw(requests: list[tuple[str, str, str, int]]) -> set[Attributes]:
    return {
        seen for method, path, query, _ in requests if (seen := attributes(method, path, query))
    }


def namespaced_sweeper(url: str, rendered: Rendered, **overrides: Any) -> Running:
    """`trainhook sweep` as the chart's command line configures it, quicker to act."""
    args = parse(rendered.container("Deployment", "trainhook-sweeper"))
    config = dataclasses.replace(
        config_from(args),
        identity="sweeper-a",
        resync_seconds=5.0,
        lease_duration_seconds=2,
        renew_deadline=1.5,
        retry_period=0.1,
        backoff_base=0.05,
        **overrides,
    )
    return Running(client_as(url, SWEEPER), config)


def test_a_namespaced_sweeper_held_to_the_charts_roles_runs_a_job_through_and_leaves_others_alone(
    cluster: EmulatorThread,
) -> None:
    rendered = render(NAMESPACED)
    hold_to_rbac(cluster, rendered, {SWEEPER: "trainhook-sweeper"})
    kube = client_as(cluster.url, "test-playing-the-cluster")
    create_single_worker_job(kube, "research")
    settings = {
        contract.SCHEDULER: "volcano",
        contract.CLEAN_POD_POLICY: "All",
        contract.TTL_SECONDS_AFTER_FINISHED: "1",
    }
    sweeper = namespaced_sweeper(cluster.url, rendered).start()
    try:
        _, _, pods = create_mpi_job(kube, settings)

        def in_ml(resource: Any) -> list[str]:
            return [o["metadata"]["name"] for o in cluster.objects(resource, "ml")]

        eventually(
            lambda: (
                in_ml(SERVICES) == ["hvd"]
                and in_ml(PODGROUPS) == ["hvd"]
                and in_ml(SECRETS) == ["hvd-ssh"]
            ),
            what="the job's Service, PodGroup and SSH Secret in ml",
        )
        succeed(kube, pods[0])
        eventually(lambda: not in_ml(PODS), what="the job's pods cleaned up")
        eventually(
            lambda: not any(in_ml(r) for r in (JOBS, STATEFULSETS, SERVICES, PODGROUPS, SECRETS)),
            what="the job deleted after its TTL",
        )
        sweeper.reconciled("ml", "hvd")
    finally:
        sweeper.stop()

    completed = [e for e in cluster.objects(EVENTS, "ml") if e["reason"] == "Completed"]
    assert sorted(e["involvedObject"]["name"] for e in completed) == ["hvd-launcher", "hvd-worker"]
    # The job outside the list: no Service, no Event, its objects untouched.
    assert cluster.objects(SERVICES, "research") == []
    assert cluster.objects(EVENTS, "research") == []
    assert [o["metadata"]["name"] for o in cluster.objects(STATEFULSETS, "research")] == ["solo"]

    requests = requests_of(cluster, SWEEPER)
    assert [r for r in requests if r[3] == 403] == []
    seen = what_rbac_saw(requests)
    assert {a.namespace for a in seen} <= {"ml", "vision", RELEASE_NAMESPACE, ""}
    assert {a.resource for a in seen if a.namespace == RELEASE_NAMESPACE} == {"leases"}
    # Cluster-wide, at most the Nodes its failure rules may read: no list of any namespaced kind.
    assert {(a.verb, a.resource) for a in seen if not a.namespace} <= {
        ("list", "nodes"),
        ("watch", "nodes"),
    }
    # Each kind listed in each namespace of the list (a watch is logged once it ends).
    lists = {(a.resource, a.namespace) for a in seen if a.verb == "list"}
    for resource in ("statefulsets", "jobs", "pods", "services", "configmaps", "podgroups"):
        assert {(resource, "ml"), (resource, "vision")} <= lists, resource


def test_the_namespaced_roles_refuse_a_sweeper_that_lists_every_namespace(
    cluster: EmulatorThread,
) -> None:
    rendered = render(NAMESPACED)
    hold_to_rbac(cluster, rendered, {SWEEPER: "trainhook-sweeper"})
    kube = client_as(cluster.url, "test-playing-the-cluster")
    create_single_worker_job(kube, "ml")
    sweeper = namespaced_sweeper(cluster.url, rendered, namespaces=()).start()
    try:
        eventually(
            lambda: (
                ("GET", "/apis/apps/v1/statefulsets", 403)
                in {(m, p, s) for m, p, _, s in requests_of(cluster, SWEEPER)}
            ),
            what="the cluster-wide list of StatefulSets refused",
        )
    finally:
        sweeper.stop()
    assert cluster.objects(SERVICES, "ml") == []


def labelled_statefulset(namespace: str, job: str, role: str) -> dict[str, Any]:
    obj = statefulset(f"{job}-{role}", role=role, job=job, replicas=1)
    obj["metadata"]["namespace"] = namespace
    return obj


def test_a_namespaced_webhooks_lookup_held_to_the_charts_roles_reads_only_its_namespaces(
    cluster: EmulatorThread,
) -> None:
    rendered = render(NAMESPACED)
    hold_to_rbac(cluster, rendered, {WEBHOOK: "trainhook-webhook"})
    kube = client_as(cluster.url, "test-playing-the-cluster")
    for namespace in ("ml", "vision", "research"):
        kube.create(STATEFULSETS, namespace, labelled_statefulset(namespace, "pt", "master"))
    args = parse(rendered.container("Deployment", "trainhook-webhook"))
    assert args.lookup_namespaces == ["ml", "vision"]
    cache = SiblingCache(
        client_as(cluster.url, WEBHOOK),
        namespaces=tuple(args.lookup_namespaces),
        backoff=(0.05, 0.2),
    ).start()
    try:
        assert cache.wait_synced(10)
        for namespace in ("ml", "vision"):
            found = cache.siblings(namespace, "pt")
            assert [o["metadata"]["name"] for o in found or []] == ["pt-master"]
        # A namespace outside the list never reaches this webhook (its namespaceSelector), and
        # if asked, the Roles refuse the read: no siblings, rather than another tenant's.
        assert cache.siblings("research", "pt") is None
    finally:
        cache.stop()

    requests = requests_of(cluster, WEBHOOK)
    refused = [(m, p) for m, p, _, status in requests if status == 403]
    assert refused == [("GET", "/apis/apps/v1/namespaces/research/statefulsets")]
    # Everything else it asked (a watch is logged once it ends): a list per kind and namespace.
    allowed = what_rbac_saw([r for r in requests if r[3] != 403])
    assert {(a.verb, a.resource, a.namespace) for a in allowed} == {
        ("list", resource, namespace)
        for resource in ("statefulsets", "jobs")
        for namespace in ("ml", "vision")
    }


def test_a_namespaced_webhook_held_to_the_charts_rbac_keeps_its_certificate_touching_only_its_own(
    cluster: EmulatorThread, tmp_path: Path
) -> None:
    rendered = render(NAMESPACED)
    hold_to_rbac(cluster, rendered, {WEBHOOK: "trainhook-webhook"})
    configuration = rendered.one("MutatingWebhookConfiguration")
    cluster.create(CONFIGURATIONS, configuration)
    args = parse(rendered.container("Deployment", "trainhook-webhook"))
    settings = SelfManagedSettings(
        namespace=args.namespace,
        secret=args.cert_secret,
        webhook_config=args.webhook_config,
        service=args.service,
        directory=tmp_path,
        retry_seconds=(0.05, 0.2),
        startup_seconds=10,
    )
    manager = SelfManagedCertificates(settings, client_as(cluster.url, WEBHOOK))
    manager.start()
    try:
        name = configuration["metadata"]["name"]
        eventually(
            lambda: all(
                hook["clientConfig"].get("caBundle")
                for hook in cluster.read(f"{CONFIGURATIONS}/{name}")["webhooks"]
            ),
            what="the CA bundle written into the webhook's own configuration",
        )
    finally:
        manager.stop()

    requests = requests_of(cluster, WEBHOOK)
    assert [r for r in requests if r[3] == 403] == []
    seen = what_rbac_saw(requests)
    # Cluster-wide, only its own configuration, by name (its watch selects it by name too); in
    # the release namespace, its Secret (created without a name, as RBAC sees a create).
    # A watch is logged once it ends, so only its list shows here.
    assert {(a.verb, a.resource, a.namespace, a.name) for a in seen} == {
        ("get", "mutatingwebhookconfigurations", "", name),
        ("list", "mutatingwebhookconfigurations", "", name),
        ("patch", "mutatingwebhookconfigurations", "", name),
        ("get", "secrets", RELEASE_NAMESPACE, args.cert_secret),
        ("create", "secrets", RELEASE_NAMESPACE, ""),
    }


def test_a_namespaced_sweeper_answers_progress_for_its_namespaces_only_and_asks_nothing_else(
    cluster: EmulatorThread,
) -> None:
    rendered = render(NAMESPACED | {"progress": {"enabled": True}})
    hold_to_rbac(cluster, rendered, {SWEEPER: "trainhook-sweeper"})
    args = parse(rendered.container("Deployment", "trainhook-sweeper"))
    desk = ProgressDesk(client_as(cluster.url, SWEEPER), namespaces=tuple(args.namespaces))
    headers = {"Content-Type": "application/json", "Authorization": "Bearer junk"}
    report = b'{"trainerStatus": {"progressPercentage": 40}}'

    outside = desk.handle(status_path("research", "pt"), headers, report)

    assert (outside.status, outside.body["message"]) == (
        404,
        "no job research/pt here: namespace research is not one this sweeper serves",
    )
    assert requests_of(cluster, SWEEPER) == []  # no TokenReview, no read
    junk = desk.handle(status_path("ml", "pt"), headers, report)
    assert junk.status == 403  # reviewed: a junk token, refused as such
    assert [(m, p, s) for m, p, _, s in requests_of(cluster, SWEEPER)] == [
        ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", 201)
    ]
    # A pod of a job in ml, with its own token: reviewed, its pod and workloads read, taken.
    token = token_for(cluster, "pt", make_job(cluster, "pt"))
    taken = desk.handle(
        status_path("ml", "pt"), headers | {"Authorization": f"Bearer {token}"}, report
    )
    assert taken.status == 200, taken.body
    assert [r for r in requests_of(cluster, SWEEPER) if r[3] == 403] == []


def test_trainhook_sweep_given_namespaces_answers_a_report_from_elsewhere_with_404(
    cluster: EmulatorThread, tmp_path: Path
) -> None:
    generate(tmp_path / "certs", "trainhook", "trainhook")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = SweeperProcess(
        kubeconfig(tmp_path / "kubeconfig", cluster.url),
        "sweeper-0",
        tmp_path / "sweeper.log",
        "--namespace=ml",
        f"--progress-bind=127.0.0.1:{port}",
        f"--progress-cert-file={tmp_path / 'certs' / 'tls.crt'}",
        f"--progress-key-file={tmp_path / 'certs' / 'tls.key'}",
    )
    context = ssl.create_default_context(cafile=str(tmp_path / "certs" / "ca.crt"))
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}{status_path('research', 'pt')}",
        data=b'{"trainerStatus": {"progressPercentage": 40}}',
        headers={"Authorization": "Bearer junk", "Content-Type": "application/json"},
    )

    def answer() -> tuple[int, str] | None:
        try:
            with urllib.request.urlopen(request, context=context, timeout=5) as got:
                return got.status, ""
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())["message"]
        except OSError:
            return None  # not listening yet

    try:
        got = eventually(answer, what="the progress endpoint's answer", timeout=20)
    finally:
        assert process.terminate() == 0
    assert got == (
        404,
        "no job research/pt here: namespace research is not one this sweeper serves",
    )
    assert not [path for _, path, _, _ in cluster.emulator.asked if "tokenreviews" in path]
