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


# --- hostile input: its output or one line and a non-zero exit, never a traceback ---------


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused input gets, checked to be all there is."""
    assert done.returncode == 1, done.stdout[:200]
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr[-500:]
    return done.stderr.rstrip("\n")


def test_a_deeply_nested_file_is_refused_in_one_line(tmp_path: Path) -> None:
    nested = tmp_path / "nested.yaml"
    nested.write_text("a: " + "[" * 2000 + "]" * 2000 + "\n")  # 4 KB
    assert refusal(run_cli("migrate", str(nested))) == (
        f"trainhook migrate: {nested}: line 1: nested over 64 levels deep"
    )


def test_an_integer_of_5000_digits_is_refused_in_one_line(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("kind: PyTorchJob\nspec:\n  runPolicy:\n    backoffLimit: " + "9" * 5000 + "\n")
    assert refusal(run_cli("migrate", str(big))) == (
        f"trainhook migrate: {big}: line 4: an integer of 5000 digits; at most 64 are read"
    )


def test_billion_laughs_are_refused_before_they_expand() -> None:
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in "bcdefghi":
        previous = chr(ord(level) - 1)
        lines.append(f"{level}: &{level} [" + ",".join([f"*{previous}"] * 9) + "]")
    done = run_cli("migrate", "-", stdin="\n".join(lines) + "\n")
    assert refusal(done) == (
        "trainhook migrate: -: line 7: over 1000000 nodes once its aliases are expanded"
    )


def test_a_few_aliases_are_read_as_written() -> None:
    text = "kind: ConfigMap\nmetadata: {name: c}\ndata: &d {a: '1'}\nbinaryData: *d\n"
    done = run_cli("migrate", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    (written,) = yaml.safe_load_all(done.stdout)
    assert written["binaryData"] == {"a": "1"}


def test_non_utf8_on_stdin_is_named() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "migrate", "-"],
        input=b"kind: ConfigMap\nmetadata: {name: caf\xe9}\n",
        capture_output=True,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.decode() == (
        "trainhook migrate: -: not UTF-8 text (byte 0xe9 at offset 36)\n"
    )


def test_too_many_documents_or_bytes_are_refused_in_one_line(tmp_path: Path) -> None:
    many = tmp_path / "many.yaml"
    many.write_text("---\nkind: ConfigMap\nmetadata: {name: c}\n" * 1001)
    assert refusal(run_cli("migrate", str(many))) == (
        f"trainhook migrate: {many}: over 1000 documents; split it into several files"
    )
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * (8 * 1024 * 1024) + "\n")
    assert refusal(run_cli("migrate", str(huge))) == (
        f"trainhook migrate: {huge}: over 8388608 bytes; at most 8388608 are read"
    )
