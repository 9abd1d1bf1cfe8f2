"""Run rendered pods as local process trees, each with its own network, name and files.

A `Cluster` is one job's network: a private network namespace holding a bridge, and one
network namespace per pod whose `eth0` (a veth on that bridge) carries the pod's IP,
127.0.0.(11 + i); the pod's `lo` keeps only 127.0.0.1, so the rest of 127.0.0.0/8 is routed
between pods (`route_localnet`) and nothing leaves the loopback range or the job's namespaces.
Every pod gets, in its own mount, UTS and PID namespaces: a hosts file bind-mounted over
/etc/hosts naming every pod (`<hostname>.<subdomain>.<namespace>.svc[.cluster.local]`) and
every Service, its hostname, writable private layers over /etc, /root and /home (so its volumes
mount where the pod spec says and the machine's files are never written), and its volumes; its
container runs as the user its securityContext names (setpriv), with the pod's fsGroup. A
Service with a cluster IP gets an address on the bridge and a relay to its selected pod, as
kube-proxy would. Env, command and args are resolved as the kubelet does (`kubelet.py`).

Needs root, util-linux (`unshare`, `nsenter`, `setpriv`) and iproute2 (CI runs as root).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kubelet import PodStatus, Service, ServicePort, command_line, container_env, field_value

FIRST_POD_HOST = 11  # pod i is 127.0.0.(11 + i)
FIRST_SERVICE_HOST = 200  # the k-th Service's cluster IP is 127.0.0.(200 + k)
CLUSTER_DOMAIN = "cluster.local"
FORWARD = str(Path(__file__).with_name("forward.py"))
# Every pod writes these through a layer of its own over the machine's, never the machine's.
PRIVATE_DIRECTORIES = ("/etc", "/root", "/home")
_clusters = itertools.count()


@dataclass(frozen=True)
class PodExit:
    name: str
    returncode: int | None  # None: still running when the job ended (killed)
    log: str


class PodsFailed(AssertionError):
    """A pod exited non-zero or the job outlived its deadline; carries every pod's log."""


@dataclass
class Pod:
    manifest: dict[str, Any]
    ip: str
    netns: str
    directory: Path
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    starts: int = 0

    @property
    def name(self) -> str:
        return str(self.manifest["metadata"]["name"])

    @property
    def hostname(self) -> str:
        return pod_hostname(self.manifest)


def pod_hostname(pod: Mapping[str, Any]) -> str:
    """The hostname Kubernetes gives the pod: spec.hostname, else the pod's name."""
    hostname: str = pod.get("spec", {}).get("hostname") or pod["metadata"]["name"]
    return hostname


def find_container(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The container or init container `name` (the harness runs one container of a pod)."""
    for container in [*pod["spec"]["containers"], *(pod["spec"].get("initContainers") or [])]:
        if container["name"] == name:
            found: dict[str, Any] = container
            return found
    raise AssertionError(f"pod {pod['metadata']['name']} has no container {name!r}")


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise AssertionError(f"{shlex.join(argv)} failed: {result.stderr.strip()}")


class Cluster:
    """One job's pods and Services; a context manager that removes every trace on exit."""

    def __init__(self, workdir: Path, namespace: str) -> None:
        for tool in ("ip", "nsenter", "unshare"):
            if shutil.which(tool) is None or os.geteuid() != 0:
                raise AssertionError("running pods needs root, iproute2 and util-linux")
        self.workdir = workdir
        self.namespace = namespace
        self.tag = f"{os.getpid() % 10000:04d}{next(_clusters) % 100:02d}"
        self.hub = f"th{self.tag}"
        self.pods: dict[str, Pod] = {}
        self.services: list[Service] = []
        self.relays: list[subprocess.Popen[bytes]] = []
        self.namespaces: list[str] = []

    def __enter__(self) -> Cluster:
        _run("ip", "netns", "add", self.hub)
        self.namespaces.append(self.hub)
        self._sysctl(self.hub, "net.ipv4.conf.all.route_localnet=1")
        _run("ip", "-n", self.hub, "link", "add", "br0", "type", "bridge")
        self._sysctl(self.hub, "net.ipv4.conf.br0.route_localnet=1")
        _run("ip", "-n", self.hub, "link", "set", "br0", "up")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    @staticmethod
    def _sysctl(netns: str, setting: str) -> None:
        _run("nsenter", f"--net=/run/netns/{netns}", "sysctl", "-qw", setting)

    def add_pods(self, manifests: Iterable[Mapping[str, Any]]) -> None:
        """Create pods (as the API server would): each gets its IP and network now."""
        for manifest in manifests:
            i = len(self.pods)
            pod = Pod(
                manifest=dict(manifest),
                ip=f"127.0.0.{FIRST_POD_HOST + i}",
                netns=f"{self.hub}-{i}",
                directory=self.workdir / "pods" / manifest["metadata"]["name"],
            )
            pod.directory.mkdir(parents=True)
            self._network(pod, i)
            self.pods[pod.name] = pod

    def _network(self, pod: Pod, i: int) -> None:
        ns, bridge_end = pod.netns, f"v{self.tag}{i:03d}"
        _run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        _run("ip", "link", "add", bridge_end, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _run("ip", "link", "set", bridge_end, "netns", self.hub)
        _run("ip", "-n", self.hub, "link", "set", bridge_end, "master", "br0", "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        # lo answers for 127.0.0.1 only, so the other 127.0.0.0/8 addresses are routed to eth0.
        _run("ip", "-n", ns, "addr", "del", "127.0.0.1/8", "dev", "lo")
        _run("ip", "-n", ns, "addr", "add", "127.0.0.1/32", "dev", "lo")
        self._sysctl(ns, "net.ipv4.conf.all.route_localnet=1")
        self._sysctl(ns, "net.ipv4.conf.eth0.route_localnet=1")
        _run("ip", "-n", ns, "addr", "add", f"{pod.ip}/8", "dev", "eth0")
        _run("ip", "-n", ns, "link", "set", "eth0", "up")

    def add_service(
        self,
        name: str,
        selector: Mapping[str, str],
        port: int,
        target_port: int | None = None,
    ) -> Service:
        """A ClusterIP Service: an address on the bridge relaying to the first selected pod."""
        ip = f"127.0.0.{FIRST_SERVICE_HOST + len(self.services)}"
        service = Service(name, ip, (ServicePort(port),), dict(selector))
        endpoints = [
            pod
            for pod in self.pods.values()
            if selector.items() <= (pod.manifest["metadata"].get("labels") or {}).items()
        ]
        if not endpoints:
            raise AssertionError(f"Service {name} selects no pod of {sorted(self.pods)}")
        _run("ip", "-n", self.hub, "addr", "add", f"{ip}/8", "dev", "br0")
        relay = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{self.hub}",
                sys.executable,
                FORWARD,
                ip,
                str(port),
                endpoints[0].ip,
                str(target_port or port),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        assert relay.stdout is not None
        ready = relay.stdout.readline()  # bound: the relay prints once listening or exits
        if not ready.startswith(b"forwarding"):
            relay.wait(timeout=10)
            raise AssertionError(f"Service {name}'s relay did not start: {ready!r}")
        self.relays.append(relay)
        self.services.append(service)
        return service

    def hosts_file(self, own: Pod) -> str:
        """What a pod resolves: itself as the kubelet writes it, the rest as cluster DNS does,
        also by the names its dnsConfig search domains complete."""
        lines = ["127.0.0.1\tlocalhost"]
        searches = (own.manifest["spec"].get("dnsConfig") or {}).get("searches") or []
        for pod in self.pods.values():
            spec = pod.manifest["spec"]
            names = []
            if spec.get("subdomain"):
                short = f"{pod.hostname}.{spec['subdomain']}.{self.namespace}.svc"
                names += [f"{short}.{CLUSTER_DOMAIN}", short]
                domain = f"{spec['subdomain']}.{self.namespace}.svc.{CLUSTER_DOMAIN}"
                if domain in searches and pod is not own:
                    names.append(pod.hostname)
            if pod is own:
                names.append(pod.hostname)
            if names:
                lines.append(f"{pod.ip}\t{' '.join(names)}")
        for service in self.services:
            short = f"{service.name}.{self.namespace}.svc"
            lines.append(f"{service.cluster_ip}\t{short}.{CLUSTER_DOMAIN} {short}")
        return "\n".join(lines) + "\n"

    def start(
        self,
        names: Iterable[str],
        container: str,
        *,
        image_env: Mapping[str, str] | None = None,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        configmaps: Mapping[str, Mapping[str, str]] | None = None,
        image_files: Mapping[str, str] | None = None,
        image_script: str = "",
    ) -> None:
        """Start each named pod's `container`: the kubelet's env over the image's, its volumes,
        and `image_files` (name -> content) in its working directory, as the image has them.
        `image_script` (shell, run as root in the pod before its volumes are mounted) makes what
        else the image would hold, such as its users. The container runs as the user its
        securityContext names (the pod's, the container's over it), with the pod's fsGroup.

        A pod whose container has exited is restarted, its env resolved afresh (as the kubelet
        does: Service links are those of the Services that exist now)."""
        for name in names:
            pod = self.pods[name]
            if pod.process is not None and pod.process.poll() is None:
                raise AssertionError(f"pod {name} is still running")
            spec = find_container(pod.manifest, container)
            # The node the scheduler bound the pod to, where its manifest names one.
            node = pod.manifest["spec"].get("nodeName")
            status = PodStatus(pod_ip=pod.ip, **({"node_name": node} if node else {}))
            env = container_env(pod.manifest, spec, status, self.services)
            argv = command_line(spec, env)
            if not argv:
                raise AssertionError(f"pod {name}: its container has no command")
            base = {"PATH": os.environ["PATH"], "HOME": "/root", "HOSTNAME": pod.hostname}
            full_env = {**base, **(image_env or {}), **env}
            hosts = pod.directory / "hosts"
            hosts.write_text(self.hosts_file(pod))
            script = self._pod_script(
                pod, spec, status, secrets or {}, configmaps or {}, image_script
            )
            pod.starts += 1
            pod.log = pod.directory / f"container-{pod.starts}.log"
            workdir = pod.directory / "workdir"  # the image's working directory
            workdir.mkdir(exist_ok=True)
            for file_name, content in (image_files or {}).items():
                (workdir / file_name).write_text(content)
                if content.startswith("#!"):
                    (workdir / file_name).chmod(0o755)
            with pod.log.open("wb") as out:
                pod.process = subprocess.Popen(
                    [
                        "nsenter",
                        f"--net=/run/netns/{pod.netns}",
                        "unshare",
                        "--mount",
                        "--uts",
                        "--pid",
                        "--fork",
                        "--kill-child",
                        "--mount-proc",
                        "sh",
                        str(script),
                        *argv,
                    ],
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    cwd=workdir,
                )

    def _pod_script(
        self,
        pod: Pod,
        spec: Mapping[str, Any],
        status: PodStatus,
        secrets: Mapping[str, Mapping[str, str]],
        configmaps: Mapping[str, Mapping[str, str]],
        image_script: str = "",
    ) -> Path:
        d = pod.directory
        lines = ["set -e"]
        for private in PRIVATE_DIRECTORIES:
            layer = private.strip("/")
            for part in ("up", "work"):
                (d / f"{layer}-{part}").mkdir(exist_ok=True)  # a restart keeps the pod's files
            lines.append(
                f"mount -t overlay overlay -o lowerdir={private},upperdir={d}/{layer}-up,"
                f"workdir={d}/{layer}-work {private}"
            )
        (d / "run").mkdir(exist_ok=True)
        lines += [f"mount --bind {d}/run /run", f"mount --bind {d}/hosts /etc/hosts"]
        if image_script:
            lines.append(image_script)
        security = _security(pod.manifest, spec)
        volumes = {volume["name"]: volume for volume in pod.manifest["spec"].get("volumes") or []}
        mountable = tuple(f"{directory}/" for directory in (*PRIVATE_DIRECTORIES, "/run"))
        for mount in spec.get("volumeMounts") or []:
            target = mount["mountPath"]
            if mount.get("subPath"):
                raise AssertionError(f"pod {pod.name}: subPath mounts are not modelled")
            if not (target.startswith(mountable) or Path(target).is_dir()):
                raise AssertionError(f"pod {pod.name}: cannot mount at {target} privately")
            source = d / "volumes" / mount["name"]
            volume = volumes[mount["name"]]
            self._fill_volume(pod, volume, source, status, secrets, configmaps, security.fs_group)
            lines += [
                f"mkdir -p {shlex.quote(target)}",
                f"mount --bind {source} {shlex.quote(target)}",
            ]
        lines += [f"hostname {shlex.quote(pod.hostname)}", f'exec {security.exec_prefix()}"$@"']
        script = d / "start.sh"
        script.write_text("\n".join(lines) + "\n")
        return script

    @staticmethod
    def _fill_volume(
        pod: Pod,
        volume: Mapping[str, Any],
        where: Path,
        status: PodStatus,
        secrets: Mapping[str, Mapping[str, str]],
        configmaps: Mapping[str, Mapping[str, str]],
        fs_group: int | None = None,
    ) -> None:
        if where.exists():
            return
        where.mkdir(parents=True)
        files: dict[str, str] = {}
        mode = 0o644
        if "secret" in volume:
            secret = volume["secret"]
            files = dict(secrets[secret["secretName"]])
            mode = secret.get("defaultMode", mode)
        elif "configMap" in volume:
            # Not optional: the kubelet holds the pod until the ConfigMap exists.
            config = volume["configMap"]
            if config["name"] not in configmaps:
                raise AssertionError(f"pod {pod.name}: ConfigMap {config['name']} does not exist")
            data = configmaps[config["name"]]
            items = config.get("items")
            files = {i["path"]: data[i["key"]] for i in items} if items else dict(data)
        elif "downwardAPI" in volume:
            for item in volume["downwardAPI"]["items"]:
                path = item["fieldRef"]["fieldPath"]
                files[item["path"]] = field_value(pod.manifest, status, path)
        elif "emptyDir" not in volume:
            raise AssertionError(f"pod {pod.name}: volume {volume['name']} is not modelled")
        for file_name, content in files.items():
            path = where / file_name
            path.write_text(content)
            if fs_group is not None and "emptyDir" not in volume:
                # The kubelet gives the pod's fsGroup the files of a read-only volume.
                os.chown(path, 0, fs_group)
                mode |= 0o440
            path.chmod(mode)

    def wait(self, names: Iterable[str], timeout: float) -> list[PodExit]:
        """Wait until the named pods exit 0; any started pod exiting non-zero fails the job.

        Raises PodsFailed with every pod's log when a pod fails or the deadline passes.
        """
        waiting = list(names)
        deadline = time.monotonic() + timeout
        failure = "pods still running after the deadline: "
        while time.monotonic() < deadline:
            codes = {
                name: pod.process.poll()
                for name, pod in self.pods.items()
                if pod.process is not None
            }
            failed = [name for name, code in codes.items() if code not in (None, 0)]
            if failed:
                failure = f"pod {failed[0]} exited {codes[failed[0]]}"
                break
            if all(codes.get(name) == 0 for name in waiting):
                failure = ""
                break
            time.sleep(0.1)
        else:
            failure += ", ".join(
                name
                for name in waiting
                if (process := self.pods[name].process) is None or process.poll() is None
            )
        exits = self.exits()
        if failure:
            raise PodsFailed(failure + "\n" + "\n".join(describe(e) for e in exits))
        return exits

    def exits(self) -> list[PodExit]:
        return [
            PodExit(pod.name, pod.process.poll(), pod.log.read_text(errors="replace"))
            for pod in self.pods.values()
            if pod.process is not None and pod.log is not None
        ]

    def kill(self, name: str) -> None:
        """Kill a pod's whole process tree, as when its container is stopped."""
        process = self.pods[name].process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def stop(self) -> None:
        """Kill every pod and relay, then delete every network namespace this cluster made."""
        for name in self.pods:
            self.kill(name)
        for relay in self.relays:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(relay.pid, signal.SIGKILL)
            relay.wait(timeout=10)
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)
        self.namespaces.clear()


@dataclass(frozen=True)
class Security:
    """Who a container runs as: its securityContext over the pod's (None: the image's, root)."""

    uid: int | None
    gid: int | None
    fs_group: int | None

    def exec_prefix(self) -> str:
        if self.uid is None or self.uid == 0:
            return ""
        gid = self.gid if self.gid is not None else self.uid
        groups = f"--groups={self.fs_group}" if self.fs_group is not None else "--clear-groups"
        return f"setpriv --reuid={self.uid} --regid={gid} {groups} --inh-caps=-all -- "


def _security(pod: Mapping[str, Any], container: Mapping[str, Any]) -> Security:
    pod_context = pod["spec"].get("securityContext") or {}
    own = container.get("securityContext") or {}

    def get(key: str) -> Any:
        return own.get(key, pod_context.get(key))

    return Security(get("runAsUser"), get("runAsGroup"), pod_context.get("fsGroup"))


def describe(pod_exit: PodExit) -> str:
    return f"--- {pod_exit.name} (exit {pod_exit.returncode}) ---\n{pod_exit.log[-4000:]}"


def run_job(
    workdir: Path,
    manifests: Sequence[Mapping[str, Any]],
    container: str,
    *,
    namespace: str,
    timeout: float,
    finishers: Sequence[str] | None = None,
    image_env: Mapping[str, str] | None = None,
    secrets: Mapping[str, Mapping[str, str]] | None = None,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
    image_files: Mapping[str, str] | None = None,
    image_script: str = "",
) -> list[PodExit]:
    """Create and start every pod at once; wait for `finishers` (default: all) to exit 0."""
    hosts_before = Path("/etc/hosts").read_bytes()
    with Cluster(workdir, namespace) as cluster:
        cluster.add_pods(manifests)
        cluster.start(
            cluster.pods,
            container,
            image_env=image_env,
            secrets=secrets,
            configmaps=configmaps,
            image_files=image_files,
            image_script=image_script,
        )
        exits = cluster.wait(finishers if finishers is not None else list(cluster.pods), timeout)
    assert Path("/etc/hosts").read_bytes() == hosts_before
    return exits
