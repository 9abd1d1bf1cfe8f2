"""YAML read from a file or standard input within bounds, for commands that take manifests from
anyone: a hostile input is refused in one line naming the file and what is over its bound,
never with a traceback, a hang or the memory of an expanded billion laughs.

Bounded: the input's size, its number of documents, how deeply a document nests, how many
nodes a document holds once its aliases are expanded (an anchor used a thousand times counts a
thousand times), and how many digits an integer has. The input must be UTF-8.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from webhook.cli.render import InputError

MAX_BYTES: Final = 8 * 1024 * 1024
MAX_DOCUMENTS: Final = 1000
MAX_DEPTH: Final = 64
MAX_NODES: Final = 1_000_000  # in one document, its aliases expanded
MAX_DIGITS: Final = 64  # of an integer (Python refuses over 4,300 and takes long before)


class _Over(Exception):
    """One of the bounds, passed, with the line it was passed at."""


class _Loader(yaml.SafeLoader):
    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _Over(f"line {mark.line + 1}: nested over {MAX_DEPTH} levels deep")
            return Composer.compose_node(self, parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: ScalarNode) -> int:
        digits = sum(c.isdigit() for c in str(node.value))
        if digits > MAX_DIGITS:
            raise _Over(
                f"line {node.start_mark.line + 1}: an integer of {digits} digits; "
                f"at most {MAX_DIGITS} are read"
            )
        value: int = super().construct_yaml_int(node)
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


def _expanded(node: Node) -> int:
    """How many nodes a document holds with its aliases expanded, counted without expanding
    them (each node once, with what it holds); _Over past MAX_NODES or for an alias that holds
    itself."""
    sizes: dict[int, int] = {}
    busy: set[int] = set()

    def size(current: Node) -> int:
        key = id(current)
        if key in sizes:
            return sizes[key]
        if key in busy:
            raise _Over(f"line {current.start_mark.line + 1}: an alias that contains itself")
        busy.add(key)
        total = 1
        if isinstance(current, SequenceNode):
            total += sum(size(item) for item in current.value)
        elif isinstance(current, MappingNode):
            total += sum(size(k) + size(v) for k, v in current.value)
        busy.discard(key)
        if total > MAX_NODES:
            raise _Over(
                f"line {current.start_mark.line + 1}: over {MAX_NODES} nodes once its aliases "
                "are expanded"
            )
        sizes[key] = total
        return total

    return size(node)


def read_text(file: str) -> str:
    """A file's text, or standard input's ("-"): at most MAX_BYTES, UTF-8."""
    if file != "-" and not Path(file).exists():
        raise InputError(f"{file}: no such file or folder")
    try:
        if file == "-":
            data = sys.stdin.buffer.read(MAX_BYTES + 1)
        else:
            with Path(file).open("rb") as stream:
                data = stream.read(MAX_BYTES + 1)
    except OSError as error:
        raise InputError(f"{file}: cannot read: {error.strerror or error}") from None
    if len(data) > MAX_BYTES:
        raise InputError(f"{file}: over {MAX_BYTES} bytes; at most {MAX_BYTES} are read")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(
            f"{file}: not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start})"
        ) from None


def load_file(file: str) -> list[tuple[str, Any]]:
    """The documents of one file ("-": standard input), each with where it came from; one
    InputError naming the file for any input that is not YAML or passes a bound."""
    text = read_text(file)
    loader = _Loader(text)
    found: list[tuple[str, Any]] = []
    try:
        count = 0
        while loader.check_node():
            count += 1
            if count > MAX_DOCUMENTS:
                raise _Over(f"over {MAX_DOCUMENTS} documents; split it into several files")
            node = loader.get_node()
            if node is None:
                continue
            _expanded(node)
            doc = loader.construct_document(node)
            if doc is not None:
                found.append((f"{file} document {count}", doc))
    except _Over as error:
        raise InputError(f"{file}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}:" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise InputError(f"{file}:{line} invalid YAML: {problem}") from None
    except (RecursionError, ValueError, OverflowError) as error:
        raise InputError(f"{file}: cannot be read: {error}") from None
    finally:
        loader.dispose()
    return found
