"""One YAML reader for the project's input files (rewrite policies, replay scenarios).

Files are read as `yaml.compose` nodes, which keep their marks, and checked field by field, so
every error names the file, the line and the field: `scenario.yaml:12: rolling.order: ...`. Any
input gives either a value or a `YamlInputError`, never another exception: the reader bounds the
file size (`MAX_YAML_BYTES`) and the nesting depth (`MAX_DEPTH`, PyYAML's composer recurses), and
turns PyYAML's own errors (a truncated file, a bad tag, an undefined alias) into the same error.

`replay` imports this module (replay may import proxy, never the reverse).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import yaml
from yaml.constructor import SafeConstructor

from proxy.wire import supports
from proxy.wire.apis import ApiKey, api_name

MAX_YAML_BYTES = 1 << 20
"""A policy or scenario is a page of text; anything past 1 MiB is refused before parsing."""

MAX_DEPTH = 32
"""Deepest nesting of mappings and lists accepted (the schemas need 5)."""

MAX_STRING_CHARS = 4096
"""Longest string value accepted (names, globs, templates, descriptions)."""

# API names a file may use: Kafka's names (`JoinGroup`, `ApiVersions`, ...).
API_BY_NAME: dict[str, int] = {api_name(key): int(key) for key in ApiKey}

E = TypeVar("E", bound=StrEnum)


class YamlInputError(ValueError):
    """An input file that is not valid. `str()` is `file:line: field: message`."""

    def __init__(self, source: str, line: int | None, field: str, message: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.message = message
        where = source if line is None else f"{source}:{line}"
        super().__init__(f"{where}: {field}: {message}" if field else f"{where}: {message}")


class _TooDeep(Exception):
    def __init__(self, mark: Any) -> None:
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's pure-Python safe loader with the composer's recursion bounded, and the scanner's
    flow nesting too: its `stale_possible_simple_keys` walks every open flow level for every
    token it scans ahead, so a run of 6,000 `[` (a fuzz case, 12 KB) took 0.5-0.9 s before the
    composer refused level 33. A flow collection opened inside MAX_DEPTH others is refused where
    it starts (0.02 s; the composer would refuse it anyway)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def fetch_flow_collection_start(self, TokenClass: Any) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _TooDeep(self.get_mark())
        super().fetch_flow_collection_start(TokenClass)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def read_text(path: str | Path, error: type[YamlInputError] = YamlInputError) -> str:
    """The file's text (UTF-8, at most MAX_YAML_BYTES), or `error` saying why not."""
    source = str(path)
    try:
        with Path(path).open("rb") as handle:
            data = handle.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise error(source, None, "", f"cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_YAML_BYTES:
        raise error(source, None, "", f"larger than {MAX_YAML_BYTES} bytes: not a policy or scenario file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise error(source, line, "", f"not UTF-8 text (byte {exc.start})") from exc


def compose(text: str, source: str, error: type[YamlInputError] = YamlInputError) -> yaml.Node | None:
    """The document's root node (None for an empty document), or `error` naming the line."""
    if len(text) > MAX_YAML_BYTES:
        raise error(source, None, "", f"larger than {MAX_YAML_BYTES} characters")
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_node()
    except _TooDeep as exc:
        raise error(source, exc.mark.line + 1, "", f"nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(
            source, mark.line + 1 if mark is not None else None, "", f"not valid YAML: {problem}"
        ) from exc
    except RecursionError:  # cannot happen below MAX_DEPTH; kept so no input ever escapes as one
        raise error(source, None, "", "nested too deeply") from None
    finally:
        loader.dispose()


def field_path(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def kind(node: yaml.Node) -> str:
    match node:
        case yaml.MappingNode():
            return "a mapping"
        case yaml.SequenceNode():
            return "a list"
        case _:
            return repr(node.value)


class YamlReader:
    """Typed, checked access to composed nodes; every failure is `error(source, line, field, ...)`."""

    def __init__(self, source: str, error: type[YamlInputError] = YamlInputError) -> None:
        self.source = source
        self.error = error

    def fail(self, node: yaml.Node, path: str, message: str) -> YamlInputError:
        return self.error(self.source, node.start_mark.line + 1, path, message)

    def mapping(
        self, node: yaml.Node, path: str, allowed: Iterable[str], required: Iterable[str] = ()
    ) -> dict[str, yaml.Node]:
        """Key -> value node; unknown, duplicate and missing required keys are errors."""
        allowed = set(allowed)
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, f"expected a mapping, got {kind(node)}")
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or key not in allowed:
                shown = key if isinstance(key, str) else kind(key_node)
                raise self.fail(
                    key_node, field_path(path, shown), f"unknown key (allowed: {', '.join(sorted(allowed))})"
                )
            if key in out:
                raise self.fail(key_node, field_path(path, key), "duplicate key")
            out[key] = value_node
        for key in sorted(set(required) - set(out)):
            raise self.fail(node, field_path(path, key), "required key is missing")
        return out

    def sequence(self, node: yaml.Node, path: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, path, f"expected a list, got {kind(node)}")
        return list(node.value)

    def scalar(self, node: yaml.Node, path: str) -> Any:
        """The value of a scalar node with YAML's safe tags (int, bool, str, null, float, ...)."""
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, path, f"expected a value, got {kind(node)}")
        try:
            return SafeConstructor().construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise self.fail(node, path, f"not a valid value: {problem}") from None

    def string(self, node: yaml.Node, path: str, max_chars: int = MAX_STRING_CHARS) -> str:
        value = self.scalar(node, path)
        if not isinstance(value, str):
            raise self.fail(node, path, f"expected a string, got {value!r}")
        if len(value) > max_chars:
            raise self.fail(node, path, f"longer than {max_chars} characters")
        return value

    def integer(self, node: yaml.Node, path: str, minimum: int, maximum: int) -> int:
        """An integer in [minimum, maximum]: every number a file gives is bounded."""
        value = self.scalar(node, path)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(node, path, f"expected an integer, got {value!r}")
        if not minimum <= value <= maximum:
            raise self.fail(node, path, f"must be in {minimum}..{maximum}, got {value}")
        return value

    def boolean(self, node: yaml.Node, path: str) -> bool:
        value = self.scalar(node, path)
        if not isinstance(value, bool):
            raise self.fail(node, path, f"expected true or false, got {value!r}")
        return value

    def choice(self, node: yaml.Node, path: str, enum: type[E]) -> E:
        value = self.string(node, path)
        try:
            return enum(value)
        except ValueError:
            raise self.fail(
                node, path, f"{value!r} is not one of {', '.join(e.value for e in enum)}"
            ) from None

    def api(self, node: yaml.Node, path: str) -> int:
        """A Kafka API by its name (`JoinGroup`) -> its api_key."""
        name = self.string(node, path)
        if name not in API_BY_NAME:
            raise self.fail(node, path, f"unknown API {name!r} (known: {', '.join(sorted(API_BY_NAME))})")
        return API_BY_NAME[name]

    def api_version(self, node: yaml.Node, path: str, api_key: int) -> int:
        """A version of `api_key` the codec knows."""
        value = self.integer(node, path, 0, 32767)
        if not supports(api_key, value):
            known = [v for v in range(0, 64) if supports(api_key, v)]
            span = f" (known: {known[0]}..{known[-1]})" if known else ""
            raise self.fail(node, path, f"{api_name(api_key)} has no version {value}{span}")
        return value

    def api_versions(self, node: yaml.Node, path: str, allow_max: bool) -> list[tuple[int, int, bool]]:
        """`{Api: version}` (or, with `allow_max`, `{Api: {max: version}}`) -> (api_key,
        api_version, exact) in file order; `exact` is False for a `{max: v}` cap."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, f"expected a mapping of API name to version, got {kind(node)}")
        out: list[tuple[int, int, bool]] = []
        seen: set[int] = set()
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else kind(key_node)
            here = field_path(path, name)
            api_key = self.api(key_node, here)
            if api_key in seen:
                raise self.fail(key_node, here, "duplicate key")
            seen.add(api_key)
            if allow_max and isinstance(value_node, yaml.MappingNode):
                inner = self.mapping(value_node, here, {"max"}, {"max"})
                out.append((api_key, self.api_version(inner["max"], f"{here}.max", api_key), False))
            else:
                out.append((api_key, self.api_version(value_node, here, api_key), True))
        return out


__all__ = [
    "API_BY_NAME",
    "MAX_DEPTH",
    "MAX_STRING_CHARS",
    "MAX_YAML_BYTES",
    "YamlInputError",
    "YamlReader",
    "compose",
    "field_path",
    "kind",
    "read_text",
]
