"""Read a YAML config with bounded cost and without silent surprises.

``yaml.safe_load`` on a user's file can run for minutes and exhaust memory (an alias bomb expands only
when the data is walked; a huge file is slow to parse), stops with a traceback on bytes that are not
UTF-8, and silently keeps the last of two equal keys. :func:`load_yaml` bounds the bytes read and,
before any python object is built, the values after alias expansion and the nesting depth; every
problem becomes a :class:`ConfigError`.
"""
from __future__ import annotations

import codecs
import os
import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any, NoReturn

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent, CollectionStartEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.reader import ReaderError

from spica_core.errors import ConfigError, Issue

MAX_CONFIG_BYTES = 1 << 20        # a config is a few KB; bigger is not a config
MAX_YAML_NODES = 100_000          # values after alias expansion
MAX_YAML_DEPTH = 64

_EXCERPT = 80                     # the most characters of a user's text that a message repeats
_MERGE_TAG = "tag:yaml.org,2002:merge"
_QUOTED = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_DEPTH_MESSAGE = f"nested deeper than {MAX_YAML_DEPTH} levels"


def load_yaml(path: Path) -> Any:
    """Read and parse a config file with bounded size, expansion and depth; raises ConfigError(str(path), [...])."""
    source = str(path)
    text = _decode(source, _read_bounded(source, Path(path)))
    loader: _BoundedLoader | None = None
    try:
        loader = _BoundedLoader(text, source)
        node = loader.get_single_node()
        if loader.issues:
            raise ConfigError(source, loader.issues)
        return None if node is None else loader.construct_document(node)
    except RecursionError:
        raise ConfigError(source, _found(loader) + [Issue("", _DEPTH_MESSAGE)]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, _found(loader) + [Issue("", _yaml_message(exc, text))]) from None
    finally:
        if loader is not None:
            loader.dispose()


def _found(loader: _BoundedLoader | None) -> list[Issue]:
    """Duplicate keys met before a fatal error: the user fixes them in the same edit."""
    return loader.issues if loader is not None else []


# ------------------------------------------------------------------ bytes and text

def _fail(source: str, message: str) -> NoReturn:
    raise ConfigError(source, [Issue("", message)])


def _read_bounded(source: str, path: Path) -> bytes:
    """The file's bytes. The size is checked before reading and the read stops past the limit, so a
    device, pipe or growing file (whose stat size is 0 or stale) cannot make us read without end."""
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_CONFIG_BYTES:
                _fail(source, f"is {_size(size)}; a config file may be at most {_size(MAX_CONFIG_BYTES)}")
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        _fail(source, "config file not found")
    except OSError as exc:
        _fail(source, f"cannot read config file: {exc.strerror or exc}")
    if len(data) > MAX_CONFIG_BYTES:
        _fail(source, f"is more than {_size(MAX_CONFIG_BYTES)} (reading stopped there); "
                      f"a config file may be at most {_size(MAX_CONFIG_BYTES)}")
    return data


def _size(n: int) -> str:
    """``n`` bytes for a reader: '300 bytes', '1 MiB', '45.3 MiB (47,500,000 bytes)'."""
    if n < 1024:
        return f"{n} bytes"
    scale, unit = 1024, "KiB"
    for bigger in ("MiB", "GiB", "TiB"):
        if n < scale * 1024:
            break
        scale, unit = scale * 1024, bigger
    shown = f"{n / scale:.1f}".removesuffix(".0")
    return f"{shown} {unit}" if n % scale == 0 else f"{shown} {unit} ({n:,} bytes)"


def _decode(source: str, data: bytes) -> str:
    """Strict UTF-8 (a leading BOM is fine); a wrong encoding or a binary file is reported with its position."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        _fail(source, "is UTF-16 or UTF-32 text, not UTF-8; save the file as UTF-8")
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    body = data[bom:]
    nul = body.find(b"\0")
    if nul >= 0:
        _fail(source, f"is a binary file, not YAML: NUL byte at offset {nul + bom} ({_where(body, nul)})")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        _fail(source, f"not UTF-8 text: byte 0x{body[exc.start]:02x} at offset {exc.start + bom} "
                      f"({_where(body, exc.start)}); save the file as UTF-8")


def _where(body: bytes, offset: int) -> str:
    """'line L, column C' of a byte offset, the column counted in characters as an editor shows it."""
    line_start = body.rfind(b"\n", 0, offset) + 1
    line = body.count(b"\n", 0, offset) + 1
    column = len(body[line_start:offset].decode("utf-8", "replace")) + 1
    return f"line {line}, column {column}"


def _excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT - 3] + "..."


def _yaml_message(exc: yaml.YAMLError, text: str) -> str:
    """PyYAML's error as one line with a position; quoted user text (tags, anchors) shortened."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"at line {mark.line + 1}, column {mark.column + 1}" if mark else "at unknown position"
        message = exc.problem or exc.context or type(exc).__name__
        if exc.problem and exc.context:
            context_line = f" at line {exc.context_mark.line + 1}" if exc.context_mark else ""
            message += f" ({exc.context}{context_line})"
    elif isinstance(exc, ReaderError):  # a control character; PyYAML gives only a character index
        before = text[:exc.position]
        line, column = before.count("\n") + 1, exc.position - before.rfind("\n")
        where = f"at line {line}, column {column}"
        message = f"unacceptable character #x{exc.character:04x} ({exc.reason})"
    else:
        where, message = "", " ".join(str(exc).split())
    message = _QUOTED.sub(lambda m: _excerpt(m.group()), message)
    return f"malformed YAML {where}: {message}" if where else f"malformed YAML: {message}"


# ------------------------------------------------------------------ parsing

class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that checks the node graph while composing it, before any python object exists.

    Each node is measured once (values after alias expansion, height); an alias reuses its target's
    measure, so the cost is linear in the text however far aliases would expand. Parsing stops as soon
    as the values so far pass MAX_YAML_NODES or the nesting passes MAX_YAML_DEPTH; recursive aliases
    are refused; duplicate keys are collected with their dotted paths."""

    def __init__(self, text: str, source: str):
        super().__init__(text)
        self.source = source
        self.issues: list[Issue] = []
        self._measured: dict[Node, tuple[int, int]] = {}   # node -> (values after expansion, height)
        self._keys: dict[MappingNode, dict[Any, int]] = {}  # open mapping -> key -> first line
        self._path: list[str] = []
        self._level = 0                                     # collections open around the current node
        self._total = 0                                     # values so far, aliases counted expanded
        self._first_alias: int | None = None                # line of the first alias, for the bomb message

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        event = self.peek_event()
        segment = _segment(parent, index)
        if segment:
            self._path.append(segment)
        try:
            if isinstance(event, AliasEvent):
                node = super().compose_node(parent, index)
                self._check_alias(node, event.start_mark.line + 1)
            else:
                self._count(1)
                opens = isinstance(event, CollectionStartEvent)
                if opens:
                    self._level += 1
                    if self._level > MAX_YAML_DEPTH:
                        self._refuse(f"{_DEPTH_MESSAGE} (at line {event.start_mark.line + 1})")
                node = super().compose_node(parent, index)
                if opens:
                    self._level -= 1
                self._measure(node)
            if isinstance(parent, MappingNode) and index is None:
                self._check_duplicate(parent, node)
        finally:
            if segment:
                self._path.pop()
        return node

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """PyYAML lets ValueError/KeyError/AttributeError escape for e.g. ``!!int abc``: make them YAML errors."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, AttributeError) as exc:
            if not isinstance(node, ScalarNode):
                raise
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise ConstructorError(
                None, None, f"{_excerpt(repr(node.value))} is not a valid {tag}", node.start_mark) from exc

    def _refuse(self, message: str) -> NoReturn:
        """Stop at once, before more work or any construction (with the duplicates found so far)."""
        raise ConfigError(self.source, [*self.issues, Issue(self._dotted(), message)])

    def _dotted(self) -> str:
        joined = "".join(self._path)
        return joined[1:] if joined.startswith(".") else joined

    def _check_alias(self, node: Node, line: int) -> None:
        if node not in self._measured:  # its anchor is still open: the alias is inside what it names
            self._refuse(f"the alias at line {line} refers to a value that contains it (a recursive alias)")
        if self._first_alias is None:
            self._first_alias = line
        self._count(self._measured[node][0])
        if self._level + self._measured[node][1] > MAX_YAML_DEPTH:
            self._refuse(f"{_DEPTH_MESSAGE} once the alias at line {line} is expanded")

    def _measure(self, node: Node) -> None:
        if isinstance(node, ScalarNode):
            self._measured[node] = (1, 0)
            return
        if isinstance(node, SequenceNode):
            children = node.value
        else:
            children = [child for pair in node.value for child in pair]
            self._keys.pop(node, None)
        sizes = [self._measured[child] for child in children]
        self._measured[node] = (1 + sum(s for s, _ in sizes), 1 + max((h for _, h in sizes), default=0))

    def _count(self, values: int) -> None:
        """Refuse as soon as the document so far passes the bound: the rest is never parsed."""
        self._total += values
        if self._total <= MAX_YAML_NODES:
            return
        if self._first_alias is None:
            self._refuse(f"holds more than {MAX_YAML_NODES:,} values; a config holds a few hundred")
        self._refuse(f"aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb? first "
                     f"alias at line {self._first_alias}); anchors and aliases are allowed but must stay small")

    def _check_duplicate(self, mapping: MappingNode, key: Node) -> None:
        """Compare keys as python will (``1`` and ``1.0`` collide); merged keys (``<<``) may be overridden."""
        if not isinstance(key, ScalarNode) or key.tag == _MERGE_TAG:
            return
        value = self.construct_object(key)
        if not isinstance(value, Hashable):  # e.g. ``!!seq abc``: construction reports the unhashable key
            return
        seen = self._keys.setdefault(mapping, {})
        line = key.start_mark.line + 1
        if value not in seen:
            seen[value] = line
            return
        path = self._dotted()
        self.issues.append(Issue(f"{path}.{_excerpt(key.value)}" if path else _excerpt(key.value),
                                 f"duplicate key: first at line {seen[value]}, again at line {line}; "
                                 "YAML would silently keep the last value"))


def _segment(parent: Node | None, index: Any) -> str:
    """The dotted-path part a child adds ('.key', '[3]'); a mapping's keys add none."""
    if isinstance(parent, SequenceNode):
        return f"[{index}]"
    if isinstance(parent, MappingNode) and index is not None:
        return "." + _excerpt(index.value if isinstance(index, ScalarNode) else "?")
    return ""
