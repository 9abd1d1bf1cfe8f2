"""`trainhook migrate` as a command: files, folders and stdin in, one YAML stream out, notes and
refusals on standard error naming the file and the document."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from tests.support.builders import paddle_operator, pytorchjob


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
    )


def test_the_command_reads_stdin_and_passes_other_documents_through() -> None:
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}
    done = run_cli("migrate", "-", stdin=yaml.safe_dump_all([configmap, pytorchjob()]))
    assert done.returncode == 0, done.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(done.stdout)]
    assert kinds == ["ConfigMap", "StatefulSet", "StatefulSet"]
    assert done.stderr.splitlines()[0] == (
        "note: - document 1 (ConfigMap c): not an operator's job; written unchanged"
    )


def test_the_command_refuses_in_one_line_naming_the_file_and_document(tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    folder.mkdir()
    (folder / "bad.yaml").write_text(yaml.safe_dump(paddle_operator(intranet="Host")))
    done = run_cli("migrate", str(folder))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"trainhook migrate: {folder / 'bad.yaml'} document 1 (PaddleJob pd): spec.intranet: "
        "'Host' cannot be migrated"
    )
    assert done.stderr.count("\n") == 1


def test_kubectl_trainhook_migrate_is_the_same_command() -> None:
    from webhook.cli import PLUGIN_COMMANDS

    assert "migrate" in PLUGIN_COMMANDS
