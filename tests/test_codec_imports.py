"""The codec depends on the experience module, never the other way round; pickling goes through it."""

from __future__ import annotations

import ast
import copy
import pickle
from pathlib import Path

import pytest
import torch

import trinity_core
from trinity_core.codec import serialize_many
from trinity_core.experience import EID, Experience

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

ROOT = Path(trinity_core.__file__).parent
#: The modules of the wire format and the data model it serializes.
OWNED = [
    "experience.py",
    "eid.py",
    "jsonvalue.py",
    *(f"codec/{p.name}" for p in sorted((ROOT / "codec").glob("*.py"))),
]


def module_name(relative: str) -> str:
    name = "trinity_core." + relative.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def imports_of(relative: str) -> set[str]:
    """The ``trinity_core`` modules a file imports anywhere in its body (functions included)."""
    tree = ast.parse((ROOT / relative).read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trinity_core"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("trinity_core"))
    return found


def test_no_import_cycle_among_the_wire_format_modules() -> None:
    graph = {module_name(relative): imports_of(relative) for relative in OWNED}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            assert state.get(target) != "open", "import cycle: " + " -> ".join([*path, module, target])
            if target not in state:
                visit(target, [*path, module])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


def test_the_experience_module_does_not_import_the_codec() -> None:
    assert not {name for name in imports_of("experience.py") if name.startswith("trinity_core.codec")}


def sample() -> Experience:
    return Experience(
        eid=EID(batch=1, task="t"), tokens=[1, 2, 3], prompt_length=1, logprobs=[-0.5, -0.25], info={"k": 1}
    )


def test_pickling_an_experience_writes_the_wire_format() -> None:
    exp = sample()
    data = pickle.dumps(exp)
    assert serialize_many([exp]) in data  # the payload, not the object's attributes
    back = pickle.loads(data)
    assert type(back) is Experience
    assert back.eid.to_dict() == exp.eid.to_dict()
    assert torch.equal(back.tokens, exp.tokens)
    assert torch.equal(back.logprobs, exp.logprobs)
    assert back.info == {"k": 1}


def test_copying_an_experience_stays_a_plain_attribute_copy() -> None:
    exp = sample()
    exp.logprobs = exp.logprobs.requires_grad_()
    shallow = copy.copy(exp)
    assert shallow is not exp
    assert shallow.tokens is exp.tokens
    assert shallow.info is exp.info
    deep = copy.deepcopy(exp)
    assert deep.info == exp.info
    assert deep.info is not exp.info
    assert deep.logprobs.requires_grad  # not a round trip through the wire format
    assert deep.tokens is not exp.tokens
    assert torch.equal(deep.tokens, exp.tokens)


def test_the_wire_format_uses_no_ctypes_and_never_pauses_the_garbage_collector() -> None:
    """Both are process-wide hazards once explorer and trainer run in threads."""
    for relative in OWNED:
        text = (ROOT / relative).read_text()
        assert "ctypes" not in text, relative
        assert "gc.disable" not in text, relative
