"""What can be checked of the image without a container engine: the build context holds every
path the Dockerfile copies, the entry point is the package's console script, the user is not root,
and nothing is built or installed in the final stage."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shlex
import sys
import tomllib
from dataclasses import dataclass, field

import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.chart.rendering import CHART, REPO

DOCKERFILE = (REPO / "Dockerfile").read_text()
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [arguments for word, arguments in self.instructions if word == keyword]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with continuation lines joined and comments dropped."""
    logical = re.sub(
        r"\\\n",
        " ",
        "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")),
    )
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in filter(None, (line.strip() for line in logical.splitlines())):
        keyword, _, arguments = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = arguments.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], words[0])
            stages.append(
                Stage(base, words[2] if len(words) == 3 and words[1].upper() == "AS" else None)
            )
        elif not stages and keyword == "ARG":
            name, _, default = arguments.partition("=")
            args[name] = default
        elif stages:
            stages[-1].instructions.append((keyword, arguments.strip()))
    return args, stages


ARGS, STAGES = parse(DOCKERFILE)
FINAL = STAGES[-1]


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        glob = line.removeprefix("!").strip("/")
        regex = (
            re.escape(glob)
            .replace(r"\*\*/", "(.*/)?")
            .replace(r"\*\*", ".*")
            .replace(r"\*", "[^/]*")
        )
        patterns.append((negated, re.compile(regex.replace(r"\?", "[^/]") + "$")))
    return patterns


def in_build_context(path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for negated, pattern in dockerignore_patterns():
        if any(pattern.match(candidate) for candidate in candidates):
            included = negated
    return included


def copied_sources(stage: Stage) -> list[str]:
    sources = []
    for arguments in stage.all("COPY"):
        words = shlex.split(arguments)
        if any(word.startswith("--from=") for word in words):
            continue
        sources += [w for w in words if not w.startswith("--")][:-1]
    return sources


def test_the_image_runs_on_slim_python_built_by_the_same_python_with_a_compiler() -> None:
    assert len(STAGES) >= 2
    assert STAGES[0].name == "build"
    assert STAGES[0].base == "python:3.11-bookworm"  # gcc, for the compiled admission path
    assert {stage.base for stage in STAGES[1:]} == {"python:3.11-slim-bookworm"}


def test_every_path_the_dockerfile_copies_exists_and_is_in_the_build_context() -> None:
    sources = [source for stage in STAGES for source in copied_sources(stage)]
    assert sources == ["pyproject.toml", "setup.py", "README.md", "LICENSE", "webhook"]
    for source in sources:
        assert (REPO / source).exists(), source
        assert in_build_context(source), f"{source} is excluded by .dockerignore"
    for module in (REPO / "webhook").rglob("*.py"):
        assert in_build_context(str(module.relative_to(REPO))), module


def test_the_build_context_leaves_out_what_the_image_does_not_need() -> None:
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/chart/test_dockerfile.py",
        "charts/trainhook/Chart.yaml",
        "webhook/__pycache__/cli.cpython-311.pyc",
        "webhook/core/mutation/admit.cpython-311-x86_64-linux-gnu.so",
        ".cache/helm/3.17.2/helm",
        "certs/tls.key",
    ):
        assert not in_build_context(path), path


def test_the_build_stage_has_everything_pip_install_of_the_project_reads() -> None:
    sources = copied_sources(STAGES[0])
    assert PYPROJECT["project"]["readme"] in sources
    assert "setup.py" in sources  # which modules are compiled
    packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
    assert packages == ["webhook*"] and "webhook" in sources
    installs = [
        step.strip()
        for run in STAGES[0].all("RUN")
        for step in run.split("&&")
        if "/opt/trainhook/bin/pip install" in step and step.rstrip().endswith(" .")
    ]
    # The image's build compiles the admission path, with mypy from the build stage's venv.
    assert installs == [
        "TRAINHOOK_COMPILE=1 /opt/trainhook/bin/pip install --no-build-isolation "
        "--only-binary=:all: ."
    ]


def test_the_entry_point_is_the_installed_trainhook_console_script() -> None:
    assert json.loads(FINAL.all("ENTRYPOINT")[-1]) == ["trainhook"]
    assert PYPROJECT["project"]["scripts"]["trainhook"] == "webhook.cli:main"
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert [s.value for s in scripts if s.name == "trainhook"] == ["webhook.cli:main"]
    # The console script and the `python` the chart's hooks run come from the copied virtualenv.
    assert STAGES[0].all("RUN")[0] == "python -m venv /opt/trainhook"
    assert FINAL.all("COPY") == ["--from=build /opt/trainhook /opt/trainhook"]
    assert any(env.startswith("PATH=/opt/trainhook/bin:$PATH") for env in FINAL.all("ENV"))


def test_the_image_runs_as_the_non_root_user_the_chart_expects() -> None:
    user, _, group = FINAL.all("USER")[-1].partition(":")
    assert user.isdigit() and int(user) != 0, "USER must be numeric for runAsNonRoot to verify it"
    values = yaml.safe_load((CHART / "values.yaml").read_text())["securityContext"]
    assert (int(user), int(group)) == (values["runAsUser"], values["runAsGroup"])
    assert f"--uid {user}" in FINAL.all("RUN")[0]


def test_the_final_stage_installs_and_compiles_nothing() -> None:
    runs = " ".join(FINAL.all("RUN"))
    for tool in ("apt-get", "apt ", "pip ", "gcc", "build-essential", "make ", "apk "):
        assert tool not in runs, tool
    assert "pip setuptools" in " ".join(STAGES[0].all("RUN")).partition("pip uninstall --yes")[2]
    assert "--only-binary=:all:" in " ".join(STAGES[0].all("RUN"))


def test_the_chart_serves_on_the_port_the_image_exposes() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert FINAL.all("EXPOSE") == [str(values["webhook"]["port"])]


def test_the_chart_runs_the_image_of_this_version_of_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == PYPROJECT["project"]["version"]


def _requirement_name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def _with_their_requirements(names: set[str]) -> set[str]:
    """The distributions `pip install` brings for these: their requirements, transitively,
    with environment markers evaluated for this interpreter and no extras."""
    closure: set[str] = set()
    pending = list(names)
    while pending:
        name = pending.pop()
        if name in closure:
            continue
        closure.add(name)
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(canonicalize_name(requirement.name))
    return closure


def test_pip_install_of_the_project_brings_every_module_the_package_imports() -> None:
    """The image has nothing but `pip install .`: a module missing from the dependencies
    would make `trainhook serve` or `sweep` fail at start in the cluster."""
    imported: set[str] = set()
    for module in (REPO / "webhook").rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {name for name in imported if name not in sys.stdlib_module_names} - {"webhook"}
    installed = _with_their_requirements(
        {_requirement_name(r) for r in PYPROJECT["project"]["dependencies"]}
    )
    providers = importlib.metadata.packages_distributions()
    missing = {
        name
        for name in third_party
        if not {_requirement_name(d) for d in providers.get(name, [name])} & installed
    }
    assert missing == set()
