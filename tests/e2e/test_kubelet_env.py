"""The harness resolves a container's env the way the kubelet does (pure; runs in make test)."""

from __future__ import annotations

from typing import Any

from .kubelet import (
    PodStatus,
    Service,
    ServicePort,
    command_line,
    container_env,
    expand,
    mapping_for,
)

POD: dict[str, Any] = {
    "metadata": {
        "name": "ms-worker-0",
        "namespace": "train",
        "labels": {"app": "ms"},
        "annotations": {"trainhook.io/hostfile": "a slots=1\n"},
    },
    "spec": {"hostname": "ms-worker-0"},
}
STATUS = PodStatus(pod_ip="127.0.0.12")
SCHEDULER = Service("ms-ms-scheduler", "127.0.0.200", (ServicePort(2222),))


def test_references_expand_to_defined_variables_and_escapes_and_unknowns_stay_as_written() -> None:
    lookup = mapping_for({"A": "1", "B": "x"})
    assert expand("$(A)-$(B)", lookup) == "1-x"
    assert expand("$$(A)", lookup) == "$(A)"
    assert expand("$(C) and $(A", lookup) == "$(C) and $(A"
    assert expand("cost $5 $", lookup) == "cost $5 $"


def test_a_value_sees_variables_defined_before_it_and_service_links_but_not_later_ones() -> None:
    container = {
        "env": [
            {"name": "FIRST", "value": "$(SECOND)"},
            {"name": "SECOND", "value": "2"},
            {"name": "HOST", "value": "$(MS_MS_SCHEDULER_SERVICE_HOST)"},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
        ]
    }
    env = container_env(POD, container, STATUS, [SCHEDULER])
    assert {k: env[k] for k in ("FIRST", "SECOND", "HOST", "IP", "NAME", "APP")} == {
        "FIRST": "$(SECOND)",
        "SECOND": "2",
        "HOST": "127.0.0.200",
        "IP": "127.0.0.12",
        "NAME": "ms-worker-0",
        "APP": "ms",
    }


def test_a_service_gives_its_docker_link_variables_unless_the_pod_turns_links_off() -> None:
    container = {"env": [{"name": "HOST", "value": "$(MS_MS_SCHEDULER_SERVICE_HOST)"}]}
    env = container_env(POD, container, STATUS, [SCHEDULER])
    assert env == {
        "HOST": "127.0.0.200",
        "MS_MS_SCHEDULER_SERVICE_HOST": "127.0.0.200",
        "MS_MS_SCHEDULER_SERVICE_PORT": "2222",
        "MS_MS_SCHEDULER_PORT": "tcp://127.0.0.200:2222",
        "MS_MS_SCHEDULER_PORT_2222_TCP": "tcp://127.0.0.200:2222",
        "MS_MS_SCHEDULER_PORT_2222_TCP_PROTO": "tcp",
        "MS_MS_SCHEDULER_PORT_2222_TCP_PORT": "2222",
        "MS_MS_SCHEDULER_PORT_2222_TCP_ADDR": "127.0.0.200",
    }
    off = {**POD, "spec": {**POD["spec"], "enableServiceLinks": False}}
    assert container_env(off, container, STATUS, [SCHEDULER]) == {
        "HOST": "$(MS_MS_SCHEDULER_SERVICE_HOST)"
    }


def test_a_headless_service_gives_no_link_variables() -> None:
    headless = Service("ms", "None", (ServicePort(2222),))
    assert container_env(POD, {"env": []}, STATUS, [headless]) == {}


def test_the_command_and_args_expand_against_the_final_env() -> None:
    container = {"command": ["msrun", "--node_rank=$(RANK)"], "args": ["$(MISSING)", "$$(RANK)"]}
    assert command_line(container, {"RANK": "3"}) == [
        "msrun",
        "--node_rank=3",
        "$(MISSING)",
        "$(RANK)",
    ]
