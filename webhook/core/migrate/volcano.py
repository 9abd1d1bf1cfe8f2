"""Volcano's batch.volcano.sh/v1alpha1 Job: tasks become roles, plugins the framework."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.job.failure_rules import (
    FAIL,
    PARTIAL,
    RESTART_JOB,
    RESTART_POD,
    RESTART_ROLE,
    partial_restart_allowed,
)
from webhook.core.migrate.base import (
    JOB,
    STATEFULSET,
    Fields,
    Job,
    MigrationError,
    Notes,
    Role,
    carry_metadata,
    check_roles,
    metadata,
    template_of,
)
from webhook.core.migrate.kubeflow import gang_minimum

# Plugins that name a framework: plugin -> (framework, {flag: role}, default port)
FRAMEWORK_PLUGINS: dict[str, tuple[str, dict[str, str], int]] = {
    "pytorch": ("pytorch", {"master": "master", "worker": "worker"}, 23456),
    "tensorflow": (
        "tensorflow",
        {"chief": "chief", "ps": "ps", "worker": "worker", "evaluator": "evaluator"},
        2222,
    ),
    "mpi": ("mpi", {"master": "launcher", "worker": "worker"}, 22),
}
# Task name endings that say the role when no plugin names it: ending -> role, per framework.
ROLE_ALIASES: dict[str, dict[str, str]] = {"mpi": {"master": "launcher"}}
# What a plugin without a framework becomes: a note (None: nothing to say).
PLUGIN_NOTES: dict[str, str | None] = {
    "svc": None,
    "env": None,
    "ssh": None,  # the job's SSH keys (trainhook.io/ssh-keys on a job that is not mpi)
}
# Plugins whose variables and files trainhook.io/compat: volcano gives the pods.
COMPAT_PLUGINS = ("svc", "env", "mpi")
# Plugins Volcano's admission adds to a job that names a framework plugin (patchDefaultPlugins).
IMPLIED_PLUGINS = {"pytorch": ("svc",), "tensorflow": ("svc",), "mpi": ("svc", "ssh")}
# Task name endings of an MPI job's two tasks (Volcano's MPI examples: mpimaster and mpiworker).
MPI_TASKS = {"launcher": ("master", "launcher"), "worker": ("worker",)}
# Volcano policies Trainhook has an annotation for: (event, action) -> restart policy
RESTART_ACTIONS = {
    ("PodFailed", "RestartJob"): "RestartJob",
    ("PodFailed", "AbortJob"): "Never",
    ("PodFailed", "TerminateJob"): "Never",
}
# Events and actions that are failure rules (trainhook.io/failure-policy): an eviction is a pod
# stopped from outside, as a drain, preemption, a lost node or the kubelet stop it.
_RULE_MATCHES = {"PodEvicted": "disrupted=any"}
RULE_ACTIONS = {
    "RestartJob": RESTART_JOB,
    "AbortJob": FAIL,
    "TerminateJob": FAIL,
    "RestartTask": RESTART_ROLE,
    "RestartPod": RESTART_POD,
}
# The maxRetry Volcano's admission webhook gives a Job without one (or with 0).
DEFAULT_MAX_RETRY = 3
# Roles that run to completion while the others serve: Indexed Jobs.
RUN_TO_COMPLETION = {"mpi": ("launcher",)}


def migrate_volcano(
    source: Mapping[str, Any], key: tuple[str, str], notes: Notes, framework: str | None = None
) -> Job:
    name, namespace, meta, spec = metadata(source, key[1], notes)
    plugins = spec.child("plugins")
    tasks = spec.get("tasks") or []
    if not isinstance(tasks, list):
        raise MigrationError("spec.tasks: expected a list of tasks")
    chosen, role_flags, port, plugin_notes = _framework(plugins, framework, tasks)
    job = Job(name=name, namespace=namespace, framework=chosen, roles=[])
    carry_metadata(meta, job, notes)
    for path, what in plugin_notes:
        notes.add(path, what)
    allowed = FRAMEWORKS[chosen].roles
    policies: list[tuple[str, Fields, str | None]] = []
    for position, raw in enumerate(tasks):
        task = notes.track(Fields(raw, f"spec.tasks[{position}]"))
        task_name = task.text("name") or f"default{position}"
        role = _role(task_name, chosen, role_flags, allowed, task.path)
        replicas = task.integer("replicas")
        job.roles.append(
            Role(
                role=role,
                replicas=1 if replicas is None else replicas,
                template=template_of(task),
                path=task.path,
                name=f"{name}-{task_name}",
                kind=JOB if role in RUN_TO_COMPLETION.get(chosen, ()) else STATEFULSET,
            )
        )
        for field_name, why in (
            ("minAvailable", "the gang is always every pod of the job"),
            ("maxRetry", f"{contract.BACKOFF_LIMIT} counts the whole job's failed runs"),
            ("dependsOn", "every role starts at once; frameworks retry until their peers are up"),
            ("topologyPolicy", "no equivalent in Trainhook; the kubelet's own policy applies"),
            ("partitionPolicy", "the gang is always every pod of the job"),
        ):
            if task.has(field_name):
                notes.add(
                    task.at(field_name),
                    f"{task.get(field_name)!r} has no equivalent, because {why}",
                )
        for index, policy in enumerate(task.get("policies") or []):
            where = f"{task.at('policies')}[{index}]"
            policies.append((where, notes.track(Fields(policy, where)), role))
    if len(set(r.role for r in job.roles)) != len(job.roles):
        raise MigrationError(
            "spec.tasks: two tasks map to one role of "
            f"{chosen} ({', '.join(r.role for r in job.roles)}); name each task after its role"
        )
    order = allowed or tuple(sorted(r.role for r in job.roles))
    job.roles.sort(key=lambda r: order.index(r.role))
    check_roles(job, allowed, "spec.tasks")
    if port is not None:
        job.annotations[contract.PORT] = str(port)
    for index, policy in enumerate(spec.get("policies") or []):
        where = f"spec.policies[{index}]"
        policies.append((where, notes.track(Fields(policy, where)), None))
    _policies(policies, job, notes)
    _scheduling(spec, job, notes)
    given = _given_plugins(plugins.data)
    if any(plugin in COMPAT_PLUGINS for plugin in given):
        # Its workloads are <job>-<task>, so the variables and files are named after the tasks.
        job.annotations[contract.COMPAT] = "volcano"
    if "svc" in given:
        _svc(plugins, job, notes)
    if "ssh" in given:
        if chosen != "mpi":
            job.annotations[contract.SSH_KEYS] = "true"
        _ssh(plugins, job, notes)
    _max_retry(spec, job, notes)
    ttl = spec.integer("ttlSecondsAfterFinished")
    if ttl is not None:
        job.annotations[contract.TTL_SECONDS_AFTER_FINISHED] = str(ttl)
    for field_name, why in (
        ("minSuccess", "the success policy decides (trainhook.io/success-policy)"),
        ("volumes", "Trainhook creates no volume claims: put them in the templates"),
        ("runningEstimate", "Trainhook's gang has no running estimate"),
    ):
        if spec.has(field_name):
            notes.add(
                spec.at(field_name), f"{spec.get(field_name)!r} has no equivalent, because {why}"
            )
    if spec.has("networkTopology"):
        # A tier cannot name the node label Trainhook's placement reads: the user adds it.
        notes.add(
            spec.at("networkTopology"),
            f"{spec.get('networkTopology')!r} is not carried over: set "
            f"{contract.PLACEMENT_TOPOLOGY} (the node label that tier's HyperNodes group nodes "
            f"by), {contract.PLACEMENT_TIER} (the tier) and {contract.PLACEMENT} (hard: "
            "required, soft: preferred) on every workload",
        )
    return job


def _given_plugins(plugins: Mapping[str, Any]) -> dict[str, list[str]]:
    """The job's plugins with those Volcano's admission adds for a framework plugin."""
    given = {str(name): list(flags or []) for name, flags in plugins.items()}
    for plugin in list(given):
        for implied in IMPLIED_PLUGINS.get(plugin, ()):
            given.setdefault(implied, [])
    return given


def _svc(plugins: Fields, job: Job, notes: Notes) -> None:
    """The svc plugin's NetworkPolicy: the job's pods take connections from each other only.
    Its headless Service is Trainhook's, which always publishes pods not yet ready."""
    flags = _flags(plugins.get("svc") or [], plugins.at("svc"))
    flags.pop("publish-not-ready-addresses", None)
    disabled = flags.pop("disable-network-policy", "false")
    for flag, value in flags.items():
        notes.add(plugins.at("svc"), f"--{flag}={value} has no equivalent")
    if disabled.lower() in ("true", "1", "t"):
        return
    pods = {"matchLabels": {contract.JOB: job.name}}
    meta: dict[str, Any] = {"name": job.name}
    if job.namespace:
        meta["namespace"] = job.namespace
    job.others.append(
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": meta,
            "spec": {
                "podSelector": pods,
                "ingress": [{"from": [{"podSelector": pods}]}],
                "policyTypes": ["Ingress"],
            },
        }
    )


def _ssh(plugins: Fields, job: Job, notes: Notes) -> None:
    """The ssh plugin's flags; the job's pods get the job's keys as Volcano's did."""
    flags = _flags(plugins.get("ssh") or [], plugins.at("ssh"))
    path = flags.pop("ssh-key-file-path", contract.MPI_SSH_PATH)
    if flags.pop("no-root", "false").lower() in ("true", "1", "t"):
        notes.add(
            plugins.at("ssh"),
            "--no-root has no equivalent: the keys go to /root/.ssh unless --ssh-key-file-path "
            f"says where ({contract.SSH_AUTH_MOUNT_PATH}), readable by the pods' fsGroup",
        )
    for flag, value in flags.items():
        notes.add(plugins.at("ssh"), f"--{flag}={value} has no equivalent")
    if path != contract.MPI_SSH_PATH:
        job.annotations[contract.SSH_AUTH_MOUNT_PATH] = path


def _mpi_tasks(tasks: Sequence[Any]) -> bool:
    """Whether the tasks are an MPI launcher of one pod and its workers, by their names."""
    if len(tasks) != 2 or not all(isinstance(t, Mapping) for t in tasks):
        return False
    found = {}
    for task in tasks:
        name = str(task.get("name") or "").lower()
        for role, endings in MPI_TASKS.items():
            if name.endswith(endings):
                found[role] = task
    launcher = found.get("launcher")
    return len(found) == 2 and launcher is not None and launcher.get("replicas", 1) == 1


def _framework(
    plugins: Fields, hint: str | None, tasks: Sequence[Any] = ()
) -> tuple[str, dict[str, str], int | None, list[tuple[str, str]]]:
    """The framework a plugin names (its flags name the tasks), else the hint, else mpi for the
    ssh plugin on a launcher task and a worker task, else generic; with the notes the plugins
    give."""
    found = [p for p in FRAMEWORK_PLUGINS if p in plugins.data]
    if len(found) > 1:
        raise MigrationError(f"spec.plugins: {', '.join(found)} name two frameworks; keep one")
    role_flags: dict[str, str] = {}
    port: int | None = None
    plugin_notes: list[tuple[str, str]] = []
    if found:
        plugin = found[0]
        chosen, roles, default_port = FRAMEWORK_PLUGINS[plugin]
        if hint is not None and hint != chosen:
            raise MigrationError(f"spec.plugins.{plugin}: the job is {chosen}, not {hint}")
        flags = _flags(plugins.get(plugin) or [], plugins.at(plugin))
        for flag, role in roles.items():
            role_flags[flags.pop(flag, flag)] = role
        value = flags.pop("port", str(default_port))
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            raise MigrationError(f"{plugins.at(plugin)}: --port={value}: 1 to 65535")
        port = int(value) if int(value) != FRAMEWORKS[chosen].port else None
        for flag, flag_value in flags.items():
            what = FLAG_NOTES.get(flag, f"--{flag}={flag_value} has no equivalent")
            plugin_notes.append((plugins.at(plugin), what))
    elif hint is None and "ssh" in plugins.data and _mpi_tasks(tasks):
        chosen = "mpi"
        plugin_notes.append(
            (
                plugins.at("ssh"),
                "the job is an mpi job (a launcher task that reaches its worker task over SSH): "
                "its pods get the job's SSH keys at /root/.ssh as Volcano gave them, the launcher "
                "runs to completion as an Indexed Job; --framework generic keeps it generic, "
                "with the keys",
            )
        )
    else:
        chosen = hint or "generic"
    if chosen not in FRAMEWORKS:
        raise MigrationError(f"--framework {chosen}: one of {', '.join(FRAMEWORKS)}")
    for plugin in map(str, plugins.data):
        plugins.get(plugin)
        if plugin in FRAMEWORK_PLUGINS or plugin == "ssh":
            continue
        note = PLUGIN_NOTES.get(plugin, "no equivalent plugin")
        if note is not None:
            plugin_notes.append((plugins.at(plugin), note))
    return chosen, role_flags, port, plugin_notes


FLAG_NOTES = {
    "wait-master-enabled": "no init container waits for the master: torchrun and the "
    "framework's rendezvous retry until their timeout",
    "wait-master-timeout": "no init container waits for the master",
    "wait-master-image": "no init container waits for the master",
}


def _flags(arguments: Sequence[Any], path: str) -> dict[str, str]:
    flags: dict[str, str] = {}
    for argument in arguments:
        match = re.fullmatch(r"--?([a-z-]+)(?:=(.*))?", str(argument))
        if match is None:
            raise MigrationError(f"{path}: {argument!r} is not a --flag=value")
        flags[match.group(1)] = match.group(2) if match.group(2) is not None else "true"
    return flags


def _role(
    task: str, framework: str, flags: Mapping[str, str], allowed: Sequence[str], path: str
) -> str:
    if task in flags:
        return flags[task]
    if not allowed:
        return task
    lowered = task.lower()
    if lowered in allowed:
        return lowered
    aliases = {**{r: r for r in allowed}, **ROLE_ALIASES.get(framework, {})}
    for ending, role in aliases.items():
        if lowered.endswith(ending):
            return role
    raise MigrationError(
        f"{path}.name: task {task!r} is not a role of {framework} ({', '.join(allowed)}); "
        "name the task after its role or name it in the plugin's flags"
    )


def _policies(policies: list[tuple[str, Fields, str | None]], job: Job, notes: Notes) -> None:
    """Task policies, then the job's, as Volcano tries them: a failed run decides the restart
    policy, an eviction or an exit code becomes a failure rule (first match wins, so a task's
    rules come first), a task's completion the success policy; the rest are notes."""
    rules: list[str] = []
    for path, policy, role in policies:
        events = [policy.text("event")] if policy.has("event") else policy.get("events") or []
        action = policy.text("action") or ""
        if policy.has("timeout"):
            notes.add(policy.at("timeout"), f"{policy.get('timeout')!r} has no equivalent")
        if policy.has("exitCode"):
            events = [f"exitCode {policy.get('exitCode')}"]
        for event in map(str, events):
            why = _policy(event, action, role, job, rules)
            if why is not None:
                notes.add(path, f"{event} → {action} has no equivalent: {why}")
    if rules:
        job.annotations[contract.FAILURE_POLICY] = "\n".join(rules)


def _policy(event: str, action: str, role: str | None, job: Job, rules: list[str]) -> str | None:
    """Map one event's policy onto the job; None when mapped, else why it cannot be."""
    restart = RESTART_ACTIONS.get((event, action))
    if restart is not None and role is None:
        job.annotations[contract.RESTART_POLICY] = restart
        return None
    if (event, action) == ("TaskCompleted", "CompleteJob") and role is not None:
        return _task_completes_job(role, job)
    if action == "CompleteJob":
        return (
            "the success policy decides when the job is done (trainhook.io/success-policy); "
            "a task's own TaskCompleted policy is role=<role>"
        )
    match = _RULE_MATCHES.get(event) or (
        f"exit={event.split()[1]}" if re.fullmatch(r"exitCode [1-9]\d*", event) else None
    )
    if match is None:
        return f"{contract.RESTART_POLICY} and {contract.FAILURE_POLICY} decide what a failure does"
    rule_action = RULE_ACTIONS.get(action)
    if rule_action is None:
        return f"{contract.FAILURE_POLICY} has no such action"
    if rule_action in PARTIAL and not partial_restart_allowed(job.framework, elastic=False):
        return f"{job.framework} does not take a restarted pod back; restart the job instead"
    rules.append(f"{match}{f' role={role}' if role else ''} -> {rule_action}")
    return None


def _max_retry(spec: Fields, job: Job, notes: Notes) -> None:
    """maxRetry is trainhook.io/backoff-limit. Volcano's admission webhook makes an absent or 0
    maxRetry 3 (DEFAULT_MAX_RETRY), which budgets the restarts its policies make: a job that
    restarts as a whole gets that 3; without such a policy Volcano's default limits nothing."""
    maximum = spec.integer("maxRetry")
    if maximum == 0:
        notes.add(
            spec.at("maxRetry"),
            f"0 → {DEFAULT_MAX_RETRY}: Volcano's admission takes 0 as unset and makes it "
            f"{DEFAULT_MAX_RETRY}",
        )
        maximum = None
    restarts_job = job.annotations.get(contract.RESTART_POLICY) == "RestartJob" or any(
        line.endswith(f"-> {RESTART_JOB}")
        for line in job.annotations.get(contract.FAILURE_POLICY, "").splitlines()
    )
    if maximum is None and restarts_job:
        maximum = DEFAULT_MAX_RETRY
    if maximum is not None:
        job.annotations[contract.BACKOFF_LIMIT] = str(maximum)


def _task_completes_job(role: str, job: Job) -> str | None:
    """TaskCompleted → CompleteJob on a task: Volcano ends the job once every pod of the task has
    succeeded. The framework's own rule where it is that, else the success policy; None when
    mapped, else why it cannot be."""
    if _default_success(job) == role:
        return None
    wanted = "rank0" if _is_rank0(job, role) else f"role={role}"
    given = job.annotations.get(contract.SUCCESS_POLICY)
    if given is not None and given != wanted:
        return (
            f"{contract.SUCCESS_POLICY} is {given!r} already: Trainhook ends a job on one "
            "success rule, Volcano on whichever task completes first"
        )
    job.annotations[contract.SUCCESS_POLICY] = wanted
    return None


def _default_success(job: Job) -> str | None:
    """The role whose every pod succeeding is the framework's own success rule, if one is."""
    success = FRAMEWORKS[job.framework].success
    replicas = {r.role: r.replicas for r in job.roles}
    first = next((role for role in success.first_of if role in replicas), None)
    if first is not None:
        return first if replicas[first] == 1 else None
    return success.every if success.every in replicas else None


def _is_rank0(job: Job, role: str | None) -> bool:
    """Whether `role` is one pod, the job's first: its completion is rank 0's."""
    first = job.roles[0]
    return first.role == role and first.replicas == 1


def _scheduling(spec: Fields, job: Job, notes: Notes) -> None:
    scheduler = spec.text("schedulerName") or "volcano"
    if scheduler == "volcano":
        job.annotations[contract.SCHEDULER] = "volcano"
    else:
        notes.add(spec.at("schedulerName"), f"{scheduler!r} → the pods' own schedulerName")
        for role in job.roles:
            role.template["spec"].setdefault("schedulerName", scheduler)
    queue = spec.text("queue")
    if queue not in (None, "default") and scheduler == "volcano":
        job.annotations[contract.QUEUE] = str(queue)
    gang_minimum(spec.integer("minAvailable"), job, notes, spec.at("minAvailable"))
    priority = spec.text("priorityClassName")
    if priority is not None:
        for role in job.roles:
            role.template["spec"].setdefault("priorityClassName", priority)
