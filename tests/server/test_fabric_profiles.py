"""`trainhook serve --fabric-profiles`: the served webhook admits with the cluster's profiles,
in every worker, and a file it cannot use stops it at start with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.builders import bare_pod
from tests.support.reviews import encoded, patched, review
from tests.support.serving import ROOT, serving

PROFILES = """
efa-p5:
  ncclNet: AWS Libfabric
  env: {FI_PROVIDER: efa}
  resources: {vpc.amazonaws.com/efa: 32}
"""


def test_every_worker_admits_with_the_profiles_of_the_file(certs: Path, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(PROFILES)
    pod = bare_pod("solo", "pytorch", annotations={"trainhook.io/fabric": "efa-p5"})
    with serving(
        certs, tmp_path / "serve.log", "--workers=2", f"--fabric-profiles={profiles}"
    ) as webhook:
        answers = [webhook.post(encoded(review(pod)))[1] for _ in range(6)]
    for answer in answers:
        container = patched(pod, answer)["spec"]["containers"][0]
        env = {item["name"]: item.get("value") for item in container["env"]}
        assert (env["NCCL_NET"], env["FI_PROVIDER"]) == ("AWS Libfabric", "efa")
        assert container["resources"]["limits"] == {"vpc.amazonaws.com/efa": "32"}


def test_a_profiles_file_it_cannot_use_stops_the_server_with_one_line(
    certs: Path, tmp_path: Path
) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(
        "efa-p5:\n  ncclNet: AWS Libfabric\n  resources: {vpc.amazonaws.com/efa: 0}\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--bind=127.0.0.1:0",
            f"--cert-file={certs / 'tls.crt'}",
            f"--key-file={certs / 'tls.key'}",
            "--no-lookup",
            f"--fabric-profiles={profiles}",
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        f"trainhook serve: --fabric-profiles {profiles}: profile efa-p5: resources: "
        "vpc.amazonaws.com/efa: 0 is not a whole number of devices >= 1"
    )
