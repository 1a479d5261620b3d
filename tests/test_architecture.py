"""The shape of the core: no import cycles, modules and functions of readable size, and the direction of
the imports between the packages of ``trinity_core.train`` (docs/architecture.md).

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

MAX_LINES = 400

MAX_FUNCTION_LINES = 60
"""Longest function (or method), definition to last line, in ``trinity_core/train`` and
``trinity_core/lm``."""

LONG_FUNCTIONS: dict[str, str] = {}
"""``"path::qualname"`` allowed past :data:`MAX_FUNCTION_LINES`, each with the reason. Keep this empty."""

TRAIN_PACKAGES: dict[str, set[str]] = {
    "models": set(),
    "report": set(),
    "data": {"models"},
    "checkpoints": {"data"},
    "explorer": {"data", "models", "report"},
    "learner": {"data", "models", "report", "checkpoints"},
    "modes": {"data", "models", "report", "checkpoints", "explorer", "learner"},
}
"""The packages of ``trinity_core.train`` and the sibling packages each may import: data flows data ->
explorer -> buffer -> learner, weights go back only through ``modes``; the entry points at the top of
``train`` (``run``, ``build``, ``export``, ``eval_run``) may import any package, no package imports them
but ``modes`` (which runs the build and the export)."""

ENTRY_MODULES = {"run", "build", "export", "eval_run", "_moved"}
"""The modules at the top of ``trinity_core.train``."""


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


def _train_part(module: str) -> str | None:
    """The package (or entry module) of ``trinity_core.train`` that ``module`` belongs to."""
    parts = module.split(".")
    if parts[:2] != ["trinity_core", "train"] or len(parts) < 3:
        return None
    return parts[2]


def _against_direction(graph: dict[str, set[str]]) -> list[str]:
    """The imports between the packages of ``trinity_core.train`` that :data:`TRAIN_PACKAGES` forbids."""
    wrong = []
    for module, deps in sorted(graph.items()):
        part = _train_part(module)
        if part not in TRAIN_PACKAGES:
            continue
        allowed = TRAIN_PACKAGES[part] | {part}
        if part == "modes":
            allowed |= ENTRY_MODULES - {"run", "_moved"}
        for dep in sorted(deps):
            target = _train_part(dep)
            if dep == "trinity_core.train" or (target is not None and target not in allowed):
                wrong.append(f"{module} imports {dep}")
    return wrong


def test_direction_check_finds_a_wrong_arrow() -> None:
    graph = {
        "trinity_core.train.learner.step": {
            "trinity_core.train.explorer.rollout",
            "trinity_core.train.data.tasks",
        },
        "trinity_core.train.data.tasks": {"trinity_core.train.run"},
        "trinity_core.train.modes.runner": {"trinity_core.train.build", "trinity_core.train.learner.step"},
    }
    assert _against_direction(graph) == [
        "trinity_core.train.data.tasks imports trinity_core.train.run",
        "trinity_core.train.learner.step imports trinity_core.train.explorer.rollout",
    ]


def test_train_packages_import_only_in_the_allowed_direction() -> None:
    wrong = _against_direction(_without_package_edges(_graph()))
    assert not wrong, "imports against the direction of docs/architecture.md:\n" + "\n".join(wrong)


def test_every_train_module_is_in_a_package_or_an_entry_point() -> None:
    top = {p.stem for p in (CORE / "train").glob("*.py")} - {"__init__"}
    packages = {p.name for p in (CORE / "train").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert top == ENTRY_MODULES
    assert packages == set(TRAIN_PACKAGES)


def test_the_lower_layers_never_import_train() -> None:
    """``trinity_core.lm`` imports nothing of the core; the data model, components, ops, buffer and
    workflows never import ``trinity_core.train``."""
    graph = _graph()
    lower = ("trinity_core.lm", "trinity_core.workflows", "trinity_core.components", "trinity_core.ops")
    lower += ("trinity_core.buffer", "trinity_core.batch", "trinity_core.experience", "trinity_core.codec")
    wrong = [
        f"{module} imports {dep}"
        for module, deps in sorted(graph.items())
        if module.startswith(lower)
        for dep in sorted(deps)
        if dep.startswith("trinity_core.train")
        or (module.startswith("trinity_core.lm") and not dep.startswith("trinity_core.lm"))
    ]
    assert not wrong, "\n".join(wrong)


def _functions(path: Path) -> list[tuple[str, int]]:
    """``(qualname, lines)`` of every function and method in ``path``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append((name, (child.end_lineno or child.lineno) - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


@pytest.mark.parametrize(
    "path",
    sorted([*(CORE / "train").rglob("*.py"), *(CORE / "lm").rglob("*.py")]),
    ids=lambda p: str(p.relative_to(CORE)),
)
def test_train_functions_stay_readable_in_size(path: Path) -> None:
    name = str(path.relative_to(CORE))
    long = [
        f"{qualname} ({lines} lines)"
        for qualname, lines in _functions(path)
        if lines > MAX_FUNCTION_LINES and f"{name}::{qualname}" not in LONG_FUNCTIONS
    ]
    assert not long, f"trinity_core/{name}: split {', '.join(long)} into named steps"


def test_the_function_size_check_measures_functions() -> None:
    source = "def f():\n" + "    x = 1\n" * 70 + "class C:\n    def m(self):\n        return 1\n"
    path = Path(__file__).with_name("_function_size_probe.py")
    path.write_text(source, encoding="utf-8")
    try:
        assert _functions(path) == [("f", 71), ("C.m", 2)]
    finally:
        path.unlink()
