"""The shape of the core: no import cycles between its modules, and modules of readable size.

Imports are read from the source (``ast``), including imports inside functions, since a lazy import is
still a dependency; only imports under ``if TYPE_CHECKING:`` are left out (they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "trinity_core"

#: Files allowed past :data:`MAX_LINES`, each with the reason. Keep this list short.
LONG_FILES: dict[str, str] = {
    "jsonvalue.py": "one concept: the tagged JSON encoding of info values, both directions side by side",
}

MAX_LINES = 420


def _module_name(path: Path) -> str:
    parts = path.relative_to(CORE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path, modules: set[str]) -> set[str]:
    """Core modules that ``path`` imports (resolved to the module, or to the package for a name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    this = _module_name(path)
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                if candidate in modules:
                    found.add(candidate)
                elif target in modules:
                    found.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(this)
    return found


def _graph() -> dict[str, set[str]]:
    files = [p for p in CORE.rglob("*.py") if "_refstub" not in p.parts]
    modules = {_module_name(p) for p in files}
    return {_module_name(p): _imports(p, modules) for p in files}


def _without_package_edges(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Drop edges from a package's ``__init__`` to its own submodules: re-exports, not dependencies."""
    return {name: {dep for dep in deps if not dep.startswith(name + ".")} for name, deps in graph.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep) :], dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_between_core_modules() -> None:
    graph = _without_package_edges(_graph())
    # A package's __init__ importing a submodule that imports the package back is the usual re-export
    # shape; a cycle between two different modules is what we forbid.
    cycle = _find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_core_modules_stay_readable_in_size(path: Path) -> None:
    name = str(path.relative_to(CORE))
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if name in LONG_FILES:
        return
    assert lines <= MAX_LINES, f"trinity_core/{name} has {lines} lines; split it by concept"
