"""Reading the YAML of a run configuration: PyYAML's safe loader, minus what it lets pass silently.

A plain ``yaml.safe_load`` accepts three things a run configuration must not hold; each is refused
here with the dotted config path of the place:

* a key written twice in one mapping (a section or a key given twice): YAML keeps only the last, so
  the first would be lost without a word;
* a document that expands past :data:`MAX_CONFIG_NODES` values: an alias (``*name``) repeats what its
  anchor (``&name``) names, so a few hundred bytes of nested aliases (a "billion laughs") stand for
  billions of values, which validating the config or writing ``config.yaml`` would build one by one;
* an alias inside the value it names (a recursive structure), which has no finite expansion.

Anchors, aliases and merge keys (``<<: *defaults``) below the limit work as YAML defines them; keys a
merge brings in may be overridden by the mapping's own keys, as usual.
"""

from __future__ import annotations

import importlib
from typing import Any

from trinity_core.config.errors import ConfigError, ConfigProblem

__all__ = ["MAX_CONFIG_NODES", "describe_yaml_error", "load_yaml_text"]

MAX_CONFIG_NODES = 100_000
"""Most values (mappings, lists and scalars, every alias counted as the values it repeats, keys
included) one configuration document or ``--set`` value may expand to. The largest documented
configuration holds a few hundred."""

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Refused(Exception):
    """Stops the walk at the first value that cannot be expanded within the limit."""

    def __init__(self, problem: ConfigProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Walk:
    """One pass over the composed node graph: each distinct node is visited once (aliases share their
    node), so the pass is linear in the text even when the expansion is astronomically large."""

    def __init__(self, yaml: Any, loader: Any) -> None:
        self.yaml = yaml
        self.loader = loader
        self.sizes: dict[int, int] = {}
        self.open: set[int] = set()
        self.problems: list[ConfigProblem] = []

    def size(self, node: Any, path: str) -> int:
        """Values ``node`` expands to (itself included); refuses a recursive alias or too many values."""
        key = id(node)
        if key in self.sizes:
            return self.sizes[key]
        if key in self.open:
            raise _Refused(
                ConfigProblem(
                    path,
                    f"the alias here repeats the value anchored on line {node.start_mark.line + 1}, which "
                    "contains it (a recursive structure)",
                    hint="write the value out instead of the alias",
                )
            )
        self.open.add(key)
        if isinstance(node, self.yaml.MappingNode):
            total = 1 + self.mapping(node, path)
        elif isinstance(node, self.yaml.SequenceNode):
            total = 1 + sum(self.size(item, f"{path}[{i}]") for i, item in enumerate(node.value))
        else:
            total = 1
        self.open.discard(key)
        if total > MAX_CONFIG_NODES:
            raise _Refused(
                ConfigProblem(
                    path,
                    f"expands to {total:,} values through its aliases (*name repeats what &name names); "
                    f"a configuration may hold at most {MAX_CONFIG_NODES:,}",
                    hint="write the values out, or use fewer nested aliases",
                )
            )
        self.sizes[key] = total
        return total

    def mapping(self, node: Any, path: str) -> int:
        total = 0
        seen: dict[Any, int] = {}  # each key as YAML constructs it (`yes` and `true` are one key)
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                total += self.size(value_node, _join(path, "<<"))
                continue
            total += self.size(key_node, path)
            scalar = isinstance(key_node, self.yaml.ScalarNode)
            # A collection as a key is refused by the constructor itself.
            name = self.loader.construct_object(key_node) if scalar else None
            here = _join(path, str(name) if scalar else "?")
            line = key_node.start_mark.line + 1
            if scalar and name in seen:
                first = seen[name]
                where = f"lines {first} and {line}" if first != line else f"both on line {line}"
                self.problems.append(
                    ConfigProblem(
                        here,
                        f"given twice in one mapping ({where}); YAML would keep only the last and drop "
                        "the first without a word",
                        hint="write it once",
                    )
                )
            elif scalar:
                seen[name] = line
            total += self.size(value_node, here)
        return total


def load_yaml_text(text: str, prefix: str = "") -> Any:
    """Parse one YAML document as PyYAML's ``safe_load`` does, refusing what the module docstring lists.

    Args:
        text: the YAML text.
        prefix: the dotted config path the document sits at (``--set trainer={...}``: ``"trainer"``).

    Raises:
        ConfigError: a duplicate key (every one found), too large an expansion, a recursive alias, or
            nesting deeper than the parser can follow; each problem names its dotted path.
        yaml.YAMLError: the text is not valid YAML.
    """
    yaml: Any = importlib.import_module("yaml")  # untyped without types-PyYAML
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        walk = _Walk(yaml, loader)
        walk.size(node, prefix)
        if walk.problems:
            raise ConfigError(walk.problems)
        return loader.construct_document(node)
    except _Refused as exc:
        raise ConfigError([exc.problem]) from None
    except RecursionError:
        problem = ConfigProblem(
            prefix,
            "nested deeper than the YAML reader can follow",
            hint="a run configuration needs a few levels; look for unclosed brackets",
        )
        raise ConfigError([problem]) from None
    finally:
        loader.dispose()


def describe_yaml_error(exc: Exception) -> str:
    """A PyYAML error on one line: where (line, column), what, and in which construct, e.g.
    ``line 3, column 1: expected ',' or ']', but got '<stream end>' (while parsing a flow sequence at
    line 2, column 7)``; PyYAML's own text spans several lines with a copy of the source."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if problem is None:
        return " ".join(str(exc).split())
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark is not None else problem
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and context_mark is not None:
        text += f" ({context} at line {context_mark.line + 1}, column {context_mark.column + 1})"
    elif context:
        text += f" ({context})"
    return text
