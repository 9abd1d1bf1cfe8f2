"""The pods the chart runs: security, writable memory volumes, availability and command lines."""

from __future__ import annotations

import pytest

from tests.chart.pod_security import read_only_root_violations, restricted_violations
from tests.chart.rendering import CHART, COMBINATIONS, Document, Rendered, render, render_error

METRICS_DIR = "/var/run/trainhook/metrics"


def pod(rendered: Rendered, kind: str, name: str) -> Document:
    spec: Document = rendered.named(kind, name)["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_every_pod_meets_the_restricted_pod_security_standard(combination: str) -> None:
    rendered = render(COMBINATIONS[combination])
    specs = dict(rendered.pod_specs())
    assert specs, "nothing runs"
    for where, spec in specs.items():
        assert restricted_violations(spec) == [], where
        assert read_only_root_violations(spec) == [], where


def test_the_default_release_runs_webhook_sweeper_test_and_uninstall_pods() -> None:
    assert sorted(dict(render().pod_specs())) == [
        "Deployment/trainhook-sweeper",
        "Deployment/trainhook-webhook",
        "Job/trainhook-uninstall",
        "Pod/trainhook-test",
    ]


def test_the_restricted_checker_names_each_broken_rule() -> None:
    spec = pod(render(), "Deployment", "trainhook-webhook")
    broken = {
        **spec,
        "hostNetwork": True,
        "volumes": [*spec["volumes"], {"name": "host", "hostPath": {"path": "/"}}],
        "containers": [
            {
                **spec["containers"][0],
                "securityContext": {
                    "allowPrivilegeEscalation": True,
                    "capabilities": {"add": ["SYS_ADMIN"]},
                },
            }
        ],
    }
    assert restricted_violations(broken) == [
        "hostNetwork must be unset or false",
        "volume host has type ['hostPath'], not an allowed one",
        "containers[webhook]: allowPrivilegeEscalation must be false",
        "containers[webhook]: capabilities must drop ALL",
        "containers[webhook]: capabilities may add only NET_BIND_SERVICE, not ['SYS_ADMIN']",
    ]
    assert read_only_root_violations(broken) == [
        "containers[webhook]: readOnlyRootFilesystem must be true"
    ]


def test_pods_run_as_the_image_user_and_never_as_root() -> None:
    for where, spec in render().pod_specs():
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "runAsGroup": 10001,
            "fsGroup": 10001,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, where


def test_ids_can_be_left_to_the_platform_while_staying_non_root() -> None:
    rendered = render(COMBINATIONS["platform-assigned-ids"])
    for where, spec in rendered.pod_specs():
        assert spec["securityContext"] == {
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        }, where


def test_a_root_user_id_is_refused_by_the_schema() -> None:
    error = render_error({"securityContext": {"runAsUser": 0}})
    assert "securityContext.runAsUser" in error


def test_webhook_writes_only_to_memory_volumes_for_gunicorn_metrics_and_certificates() -> None:
    spec = pod(render(), "Deployment", "trainhook-webhook")
    container = spec["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts == {"/tmp": "tmp", METRICS_DIR: "metrics", "/var/run/trainhook/certs": "certs"}
    for volume in spec["volumes"]:
        assert volume["emptyDir"]["medium"] == "Memory", volume["name"]
        assert volume["emptyDir"]["sizeLimit"], volume["name"]
    env = {e["name"]: e for e in container["env"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"] == {
        "name": "PROMETHEUS_MULTIPROC_DIR",
        "value": METRICS_DIR,
    }


def test_sweeper_has_a_memory_tmp_and_nothing_else_writable() -> None:
    spec = pod(render(), "Deployment", "trainhook-sweeper")
    assert spec["containers"][0]["volumeMounts"] == [{"name": "tmp", "mountPath": "/tmp"}]
    assert spec["volumes"] == [
        {"name": "tmp", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}
    ]


def test_long_running_containers_request_cpu_and_memory_and_limit_memory() -> None:
    rendered = render()
    for name in ("trainhook-webhook", "trainhook-sweeper"):
        resources = rendered.container("Deployment", name)["resources"]
        assert set(resources["requests"]) == {"cpu", "memory"}, name
        assert set(resources["limits"]) == {"memory"}, name


def test_priority_class_applies_to_the_webhook_sweeper_and_uninstall_hook() -> None:
    rendered = render({"priorityClassName": "system-cluster-critical"})
    for where, spec in rendered.pod_specs():
        if where == "Pod/trainhook-test":
            assert "priorityClassName" not in spec
        else:
            assert spec["priorityClassName"] == "system-cluster-critical", where
    assert not [s for _, s in render().pod_specs() if "priorityClassName" in s]


def test_webhook_runs_two_replicas_spread_over_nodes_with_a_disruption_budget() -> None:
    rendered = render()
    deployment = rendered.named("Deployment", "trainhook-webhook")["spec"]
    selector = deployment["selector"]["matchLabels"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"]["rollingUpdate"] == {"maxUnavailable": 0, "maxSurge": 1}
    assert deployment["template"]["spec"]["topologySpreadConstraints"] == [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector},
        }
    ]
    budget = rendered.named("PodDisruptionBudget", "trainhook-webhook")["spec"]
    assert budget == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    assert rendered.one("Service")["spec"]["selector"] == selector
    assert selector["app.kubernetes.io/component"] == "webhook"


def test_pod_labels_never_replace_the_selector_labels() -> None:
    rendered = render(
        {"webhook": {"podLabels": {"app.kubernetes.io/component": "x", "team": "ml"}}}
    )
    deployment = rendered.named("Deployment", "trainhook-webhook")["spec"]
    labels = deployment["template"]["metadata"]["labels"]
    assert labels["team"] == "ml"
    assert labels["app.kubernetes.io/component"] == "webhook"
    assert deployment["selector"]["matchLabels"].items() <= labels.items()


def test_webhook_serves_probes_and_the_service_on_its_https_port() -> None:
    rendered = render({"webhook": {"port": 9443, "servicePort": 8443}})
    container = rendered.container("Deployment", "trainhook-webhook")
    assert container["ports"] == [{"name": "https", "containerPort": 9443, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {
        "scheme": "HTTPS",
        "path": "/readyz",
        "port": "https",
    }
    assert container["livenessProbe"]["httpGet"] == {
        "scheme": "HTTPS",
        "path": "/healthz",
        "port": "https",
    }
    assert "--bind=0.0.0.0:9443" in container["args"]
    port = rendered.one("Service")["spec"]["ports"][0]
    assert (port["port"], port["targetPort"]) == (8443, "https")
    assert rendered.webhook_hook()["clientConfig"]["service"]["port"] == 8443


def test_webhook_command_line_follows_the_values() -> None:
    rendered = render(
        {
            "webhook": {
                "workers": 4,
                "logLevel": "debug",
                "lookup": False,
                "coschedulingSchedulerName": "coscheduler",
            },
            "clusterDomain": "cluster.local",
        }
    )
    assert rendered.container("Deployment", "trainhook-webhook")["args"][:8] == [
        "serve",
        "--bind=0.0.0.0:8443",
        "--workers=4",
        "--log-level=debug",
        "--no-lookup",
        "--cluster-domain=cluster.local",
        "--coscheduling-scheduler-name=coscheduler",
        "--namespace=$(TRAINHOOK_NAMESPACE)",
    ]


def test_webhook_and_sweeper_learn_their_namespace_and_name_from_the_downward_api() -> None:
    rendered = render()
    webhook_env = {
        e["name"]: e for e in rendered.container("Deployment", "trainhook-webhook")["env"]
    }
    assert webhook_env["TRAINHOOK_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    sweeper = rendered.container("Deployment", "trainhook-sweeper")
    sweeper_env = {e["name"]: e for e in sweeper["env"]}
    assert sweeper_env["TRAINHOOK_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert sweeper_env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert sweeper["args"] == [
        "sweep",
        "--resync-seconds=60",
        "--writes-per-minute=60",
        "--write-burst=100",
        "--lease-name=trainhook-sweeper",
        "--lease-namespace=$(TRAINHOOK_NAMESPACE)",
        "--identity=$(POD_NAME)",
        "--log-level=info",
        "--metrics-bind=0.0.0.0:9090",
    ]


def test_sweeper_runs_two_replicas_that_share_one_lease() -> None:
    rendered = render(
        {
            "sweeper": {
                "leaseName": "ml-sweeper",
                "resyncSeconds": 30,
                "writeBudget": {"perMinute": 30, "burst": 500},
            }
        }
    )
    deployment = rendered.named("Deployment", "trainhook-sweeper")
    assert deployment["spec"]["replicas"] == 2
    args = rendered.container("Deployment", "trainhook-sweeper")["args"]
    assert "--lease-name=ml-sweeper" in args
    assert "--resync-seconds=30" in args
    assert "--writes-per-minute=30" in args and "--write-burst=500" in args
    lease_rule = rendered.named("Role", "trainhook-sweeper-lease")["rules"][1]
    assert lease_rule["resourceNames"] == ["ml-sweeper"]


def test_sweeper_shards_give_each_replica_its_share_and_a_lease_per_shard() -> None:
    rendered = render({"sweeper": {"replicas": 3, "shards": 6, "leaseName": "ml-sweeper"}})
    args = rendered.container("Deployment", "trainhook-sweeper")["args"]
    assert "--shards=6" in args and "--replicas=3" in args
    lease_rule = rendered.named("Role", "trainhook-sweeper-lease")["rules"][1]
    assert lease_rule["resourceNames"] == ["ml-sweeper"] + [f"ml-sweeper-{i}" for i in range(1, 6)]
    one = render().container("Deployment", "trainhook-sweeper")["args"]
    assert not any(arg.startswith(("--shards", "--replicas")) for arg in one)


def test_the_sweeper_names_large_jobs_peers_with_the_webhooks_cluster_domain() -> None:
    rendered = render({"clusterDomain": "cluster.local"})
    args = rendered.container("Deployment", "trainhook-sweeper")["args"]
    assert "--cluster-domain=cluster.local" in args
    assert not any(
        arg.startswith("--cluster-domain")
        for arg in render().container("Deployment", "trainhook-sweeper")["args"]
    )


def test_image_defaults_to_the_chart_app_version_and_a_digest_pins_it() -> None:
    assert (
        render().container("Deployment", "trainhook-webhook")["image"]
        == "ghcr.io/trainhook/trainhook:0.1.0"
    )
    digest = "sha256:" + "ab" * 32
    for _, spec in render({"image": {"digest": digest}}).pod_specs():
        assert spec["containers"][0]["image"] == f"ghcr.io/trainhook/trainhook@{digest}"


def test_hook_scripts_reach_the_pods_unchanged_and_free_of_kubernetes_variable_expansion() -> None:
    rendered = render()
    for kind, name, script in (
        ("Job", "trainhook-uninstall", "remove-webhook-config.py"),
        ("Pod", "trainhook-test", "check-webhook.py"),
    ):
        document = rendered.named(kind, name)
        spec = document["spec"] if kind == "Pod" else document["spec"]["template"]["spec"]
        source = (CHART / "files" / script).read_text()
        assert spec["containers"][0]["command"] == ["python", "-c", source]
        assert "$(" not in source  # Kubernetes would expand $(VAR) in a command
