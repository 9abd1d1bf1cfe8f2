"""What the image's build compiles with mypyc is the admission path setup.py names; under `make
image-check` every module of it is imported compiled, and a test run of the tree stops on a compiled
module left beside its source."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import os
import runpy
from pathlib import Path
from typing import Any

import pytest

from tests.support.compiled import compiled_modules_in_tree
from tests.support.serving import ROOT
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.frameworks.base import Placement
from webhook.core.job.authority import Membership
from webhook.core.job.settings import Settings
from webhook.core.job.workload import Workload
from webhook.core.mutation.admit import Found, Lookups, Outcome, Request
from webhook.core.mutation.pod_mutation import Place
from webhook.core.mutation.workload_mutation import WorkloadMutation
from webhook.core.shape.peers import PeerFiles, content_digest
from webhook.core.shape.pods import PodIdentity
from webhook.core.shape.topology import Role, Topology
from webhook.server.admission import Answer, Record, _Decoded

# Set by `make image-check`, which runs these tests on the image's build installed in .venv-image.
IMAGE_BUILD = os.environ.get("TRAINHOOK_EXPECT_COMPILED") == "1"


def admission_path() -> list[str]:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="trainhook_setup")
    modules: list[str] = setup["admission_path"]()
    return modules


def test_setup_compiles_the_core_and_the_review_handler_not_migration_rendering_errors() -> None:
    modules = admission_path()

    assert "webhook/core/mutation/pod_mutation.py" in modules
    assert "webhook/core/frameworks/tensorflow.py" in modules
    assert "webhook/core/compat/volcano.py" in modules
    assert [m for m in modules if not m.startswith("webhook/core/")] == [
        "webhook/server/admission.py"  # the handler of one review, around the core
    ]
    assert [m for m in modules if m.endswith("/__init__.py")] == []
    assert "webhook/core/errors.py" not in modules
    assert "webhook/core/render.py" not in modules
    assert [m for m in modules if m.startswith("webhook/core/migrate/")] == []


@pytest.mark.skipif(not IMAGE_BUILD, reason="run by `make image-check`, on the image's build")
def test_every_module_of_the_admission_path_is_imported_compiled_in_the_image_build() -> None:
    interpreted = []
    for module in admission_path():
        name = module.removesuffix(".py").replace("/", ".")
        if not str(importlib.import_module(name).__file__).endswith(".so"):
            interpreted.append(name)

    assert interpreted == []


def test_a_compiled_module_left_beside_its_source_in_the_tree_is_named(tmp_path: Path) -> None:
    core = tmp_path / "webhook" / "core"
    core.mkdir(parents=True)
    for name in ("patch", "draft"):
        (core / f"{name}.py").write_text("")
    (core / "patch.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")

    assert compiled_modules_in_tree(tmp_path) == ["webhook/core/patch.py"]


def test_the_tree_under_test_holds_no_compiled_module() -> None:
    assert compiled_modules_in_tree(ROOT) == []


@pytest.mark.skipif(not IMAGE_BUILD, reason="run by `make image-check`, on the image's build")
def test_the_image_build_is_imported_from_its_install_not_from_the_tree() -> None:
    import webhook

    assert not str(webhook.__file__).startswith(str(ROOT / "webhook"))


TOPOLOGY = Topology("llm", "ml", "pytorch", (Role("worker", 4, "llm-worker", 0, "llm"),))

# The classes made on every admission, each with an `__init__` written out for mypyc
# (docs/architecture.md), and a value of each of their fields, in order, unlike its default.
DISTINCT_VALUES: dict[type, list[Any]] = {
    Request: [
        "Pod", "CREATE", {"kind": "Pod"}, "ml", "llm-worker-2", {"kind": "Pod"}, "al", True, 9
    ],
    Found: [[{"kind": "StatefulSet"}], {"kind": "Job"}, frozenset({"Secret/llm-ssh"})],
    Outcome: [[{"op": "add", "path": "/spec/hostname", "value": "a"}], ["env RANK was set"]],
    Lookups: [
        "llm",
        ("StatefulSet", "llm-worker"),
        ("Job", "llm-launcher"),
        ("StatefulSet", "llm-worker", "uid-1"),
    ],
    PodIdentity: ["StatefulSet", "llm-worker", 2],
    Membership: ["llm", "old-job", True],
    Placement: [
        TOPOLOGY, "worker", 2, "llm-worker-2", 29500, 4, (1, 8), 8, False, "llm-peers", 3, "MPICH",
        "/home/user/.ssh", 1, 2,
    ],
    Workload: [
        "StatefulSet", "llm-worker", "ml", FRAMEWORKS["pytorch"], "llm", "worker", 4, Settings(),
        "llm-worker", 1, "llm", 8, "high",
    ],
    WorkloadMutation: [{"kind": "StatefulSet"}, ["a warning"], TOPOLOGY],
    Record: [
        "mutated", "uid-1", "Pod", "ml", "llm-worker-2", "CREATE", True, 120, 2, "why", "bad", True
    ],
}  # fmt: skip
DISTINCT_VALUES[Place] = [
    Placement(*DISTINCT_VALUES[Placement]),
    {"RANK": "2"},
    {"POD_IP": "status.podIP"},
    PeerFiles("llm-peers", {}),
]
DISTINCT_VALUES[Answer] = [
    200,
    {"apiVersion": "admission.k8s.io/v1"},
    Record(*DISTINCT_VALUES[Record]),
]
DISTINCT_VALUES[_Decoded] = [
    "admission.k8s.io/v1",
    "uid-1",
    "Pod",
    "CREATE",
    "ml",
    "p",
    True,
    Request(*DISTINCT_VALUES[Request]),
]
WRITTEN_OUT_INITS = list(DISTINCT_VALUES)


@pytest.mark.parametrize("cls", WRITTEN_OUT_INITS, ids=lambda cls: cls.__name__)
def test_a_written_out_init_sets_each_field_from_its_own_argument_by_position_or_name(
    cls: type,
) -> None:
    names = [field.name for field in dataclasses.fields(cls)]
    values = DISTINCT_VALUES[cls]

    by_position = cls(*values)
    by_name = cls(**dict(zip(names, values, strict=True)))

    assert [getattr(by_position, name) for name in names] == values
    assert by_name == by_position


@pytest.mark.parametrize(
    "cls",
    [c for c in WRITTEN_OUT_INITS if dataclasses.fields(c)[-1].default is not dataclasses.MISSING],
    ids=lambda cls: cls.__name__,
)
def test_a_written_out_init_gives_each_field_left_out_its_declared_default(cls: type) -> None:
    fields = dataclasses.fields(cls)
    required = [f for f in fields if f.default is dataclasses.MISSING]
    made = cls(*DISTINCT_VALUES[cls][: len(required)])

    assert {f.name: getattr(made, f.name) for f in fields[len(required) :]} == {
        f.name: f.default for f in fields[len(required) :]
    }


@pytest.mark.parametrize(
    "cls", [c for c in WRITTEN_OUT_INITS if c is not Record], ids=lambda cls: cls.__name__
)
def test_a_class_with_a_written_out_init_stays_frozen(cls: type) -> None:
    made = cls(*DISTINCT_VALUES[cls])
    name = dataclasses.fields(cls)[0].name

    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, name, "changed")


@pytest.mark.skipif(not IMAGE_BUILD, reason="run by `make image-check`, on the image's build")
@pytest.mark.parametrize("cls", WRITTEN_OUT_INITS, ids=lambda cls: cls.__name__)
def test_a_written_out_init_is_compiled_not_a_python_function(cls: type) -> None:
    assert not inspect.isfunction(vars(cls)["__init__"])


def test_equal_topologies_hash_alike_and_a_changed_role_hashes_apart() -> None:
    def topology(replicas: int, port: int | None = None) -> Topology:
        return Topology(
            "llm", "ml", "pytorch", (Role("worker", replicas, "llm-worker", 0, "llm", 1, port),)
        )

    assert hash(topology(4)) == hash(topology(4))
    assert {topology(4): "kept"}[topology(4)] == "kept"
    assert len({hash(topology(4)), hash(topology(5)), hash(topology(4, 23456))}) == 3


@pytest.mark.skipif(not IMAGE_BUILD, reason="run by `make image-check`, on the image's build")
def test_a_topology_is_hashed_by_compiled_code_not_a_python_function() -> None:
    assert not inspect.isfunction(vars(Topology)["__hash__"])


def test_the_bench_names_the_build_it_measures() -> None:
    from bench.run import admission_build

    expected = "compiled with mypyc, as the image runs it" if IMAGE_BUILD else "plain Python"
    assert admission_build().startswith(expected)


def test_no_module_of_the_admission_path_uses_cached_property() -> None:
    """mypyc compiles a functools.cached_property into a plain getter: in the image it would
    compute again on every read (a large job's peers digest, a topology's stamp)."""
    using = [
        module
        for module in admission_path()
        for node in ast.walk(ast.parse((ROOT / module).read_text()))
        if isinstance(node, ast.Name | ast.Attribute)
        and (node.id if isinstance(node, ast.Name) else node.attr) == "cached_property"
    ]

    assert using == []


def test_a_topologys_stamp_and_a_peers_digest_are_made_once_however_the_code_runs() -> None:
    topology = Topology("llm", "ml", "pytorch", (Role("worker", 1000, "llm-worker", 0, "llm"),))
    files = PeerFiles("llm-peers", {"TRAINHOOK_WORKER_HOSTS": "a,b"})

    assert topology.stamped is topology.stamped
    assert topology.total == 1000
    assert files.digest is files.digest
    assert files.digest == content_digest(files.data)
