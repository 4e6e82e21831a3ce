"""Parse YAML strictly: a key set twice, an alias bomb or a cycle is an error with its line.

PyYAML's safe loader keeps the last of two equal keys without a word, and expands nothing
itself, but a value that aliases ("billion laughs") make a billion items long hangs
whatever walks or prints it. Both are refused here, before any value is built, in time
bounded by the size of the file; every mapping keeps the line of each of its keys.
"""

from __future__ import annotations

from typing import Any, Iterator

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_NODES = 100_000
"""Values a document may hold once its aliases are expanded: a config holds a few hundred."""
MAX_DEPTH = 64
"""Levels of lists and mappings inside each other: a config has three."""

_MERGE = "tag:yaml.org,2002:merge"


class YamlProblem(Exception):
    """A document that parses but may not be used; `key` is the dotted path of the setting."""

    def __init__(self, message: str, line: int | None = None, key: str | None = None) -> None:
        self.line = line
        self.key = key
        super().__init__(message)


class Lined(dict[Any, Any]):
    """A YAML mapping that remembers the line (from 1) of each of its keys."""

    lines: dict[Any, int]

    def line_of(self, key: Any) -> int | None:
        """The line `key` is set on, or None."""
        return getattr(self, "lines", {}).get(key)


def _line(node: object) -> int:
    """The line (from 1) where a node or event starts; 0 when PyYAML does not say."""
    mark = getattr(node, "start_mark", None)
    return int(mark.line) + 1 if mark is not None else 0


class _Loader(yaml.SafeLoader):
    """The safe loader, with the checks of this module and mappings that keep lines."""

    depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """Refuse deep nesting as it is read: PyYAML composes by recursion."""
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep (lists or "
                                  "mappings inside each other); a config needs three. Fix: "
                                  "write the settings out flat, as the README shows",
                                  _line(self.peek_event()))  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _Walk(self).size(node, "")
        return self.construct_document(node)

    def construct_lined_map(self, node: MappingNode) -> Iterator[Lined]:
        data = Lined()
        yield data
        data.update(self.construct_mapping(node))  # merges `<<` keys into node.value first
        data.lines = {self.construct_object(key): _line(key)
                      for key, _ in node.value if isinstance(key, ScalarNode)}


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_lined_map)


class _Walk:
    """One pass over the composed nodes: expanded size, cycles and keys set twice."""

    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()

    def size(self, node: Node, path: str) -> int:
        """How many values `node` holds with its aliases expanded; each node is walked once."""
        if id(node) in self.sizes:
            return self.sizes[id(node)]
        if id(node) in self.open:
            raise YamlProblem("an alias (*name) refers to a value that contains it, which "
                              "makes the value endless. Fix: write the value out instead of "
                              "the alias", _line(node), path or None)
        self.open.add(id(node))
        total = 1 + sum(self.size(child, key) for child, key in self._children(node, path))
        self.open.discard(id(node))
        if total > MAX_NODES:
            raise YamlProblem(f"aliases (*name) expand this value to more than {MAX_NODES} "
                              "values; a config needs a few hundred (this looks like a 'billion "
                              "laughs' attack). Fix: write the values out, without aliases",
                              _line(node), path or None)
        self.sizes[id(node)] = total
        return total

    def _children(self, node: Node, path: str) -> list[tuple[Node, str]]:
        if isinstance(node, SequenceNode):
            return [(child, path) for child in node.value]
        if not isinstance(node, MappingNode):
            return []
        keys = self._refuse_keys_set_twice(node, path)
        children: list[tuple[Node, str]] = []
        for (key_node, value), key in zip(node.value, keys):
            children += [(key_node, path), (value, f"{path}.{key}" if path else str(key))]
        return children

    def _refuse_keys_set_twice(self, node: MappingNode, path: str) -> list[Any]:
        """The keys of `node`, in order; a key set twice is an error naming both lines."""
        keys: list[Any] = []
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self._key(key_node)
            keys.append(key)
            if key is _UNNAMED:
                continue
            if key in first:
                where = f"{path}.{key}" if path else str(key)
                raise YamlProblem(
                    f"set twice, on line {first[key]} and on line {_line(key_node)}; YAML "
                    "would silently keep the last. Fix: delete the one you do not mean",
                    _line(key_node), where)
            first[key] = _line(key_node)
        return keys

    def _key(self, key_node: Node) -> Any:
        if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE:
            return _UNNAMED  # a list or mapping as a key: the constructor refuses it
        key = self.loader.construct_object(key_node)
        try:
            hash(key)
        except TypeError:
            return _UNNAMED
        return key


_UNNAMED = object()


def parse(text: str) -> Any:
    """The value of the YAML document `text`; YamlProblem or yaml.YAMLError if unusable."""
    loader = _Loader(text)
    try:
        return loader.get_single_data()
    except RecursionError:  # MAX_DEPTH stops nesting first; this is the last guard
        raise YamlProblem(f"nested more than {MAX_DEPTH} levels deep. Fix: write the "
                          "settings out flat, as the README shows") from None
    finally:
        loader.dispose()
