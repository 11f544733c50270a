"""The shape of gpulint's own code: no import cycles (tests/importgraph.py reads the graph
statically), and the test can fail: it finds the cycles of a small tree made to have them."""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import importgraph  # noqa: E402


def _message(graph: importgraph.Graph, edges) -> str:
    loops = graph.cycle_paths(edges)
    return "import cycles:\n" + "\n".join(
        " -> ".join(importgraph.short(m) for m in loop) for loop in loops
    )


def test_no_import_cycle_at_module_level():
    graph = importgraph.build()
    assert len(graph.modules) > 100  # src/gpulint and rules/ were read
    assert not graph.cycles(), _message(graph, graph.edges)


def test_no_import_cycle_hidden_in_a_function():
    """An import moved into a function still runs, later: a cycle through one is hidden, not
    broken. (Imports under TYPE_CHECKING never run and are not counted: a model annotated with
    the type of the file that builds it is fine.)"""
    graph = importgraph.build()
    runtime = graph.runtime()
    assert not graph.cycles(runtime), _message(graph, runtime)


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_cycle_finder_finds_each_kind_of_cycle(tmp_path):
    _tree(
        tmp_path,
        {
            "src/gpulint/__init__.py": "",
            "src/gpulint/a.py": "from gpulint.b import x\n",
            "src/gpulint/b.py": "import gpulint.a\nx = 1\n",  # a <-> b at module level
            "src/gpulint/c.py": "def f():\n    from gpulint import d\n",
            "src/gpulint/d.py": "try:\n    from . import c\nexcept ImportError:\n    pass\n",
            "src/gpulint/e.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpulint.f import F\n"
            ),
            "src/gpulint/f.py": "from gpulint import e\n",  # e -> f only under TYPE_CHECKING
            "src/gpulint/pkg/__init__.py": "from .g import G\n",
            "src/gpulint/pkg/g.py": "class G:\n    from gpulint.pkg import h\n",
            "src/gpulint/pkg/h.py": "from gpulint.pkg.g import G\n",  # g <-> h via a class body
            "src/gpulint/rules/__init__.py": "",
            "src/gpulint/rules/gpu999_x.py": "from gpulint.a import x\n",
        },
    )
    graph = importgraph.build(tmp_path)
    assert "gpulint.rules.gpu999_x" in graph.modules
    assert graph.edges["gpulint.rules.gpu999_x"] == {"gpulint.a"}
    assert graph.cycles() == [["gpulint.a", "gpulint.b"], ["gpulint.pkg.g", "gpulint.pkg.h"]]
    assert graph.deferred_edges["gpulint.c"] == {"gpulint.d"}
    assert ["gpulint.c", "gpulint.d"] in graph.cycles(graph.runtime())
    assert graph.typing_edges["gpulint.e"] == {"gpulint.f"}
    assert not any("gpulint.e" in c for c in graph.cycles(graph.runtime()))
    assert graph.cycle_paths()[0] == ["gpulint.a", "gpulint.b", "gpulint.a"]


def test_the_pictures_are_drawn_from_the_same_graph():
    graph = importgraph.build()
    chart = importgraph.mermaid(graph)
    assert chart.startswith("flowchart LR\n")
    assert "gpulint_engine --> gpulint_project" in chart  # at module level
    assert "gpulint_engine -.-> gpulint_parallel" in chart  # inside a function
    assert "classDef knot" not in chart  # no cycle to mark
    assert '"rules"' in chart  # rules/ drawn as one box
    assert "digraph gpulint" in importgraph.dot(graph)


# -- facts in front-ends, judgments in rules ---------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
_RULE_CODE = re.compile(r"GPU\d{3}")


def rule_codes_in_code(source: str) -> list[tuple[int, str]]:
    """(line, token) for each rule code written in code: a string that is not a docstring, or a
    name. Docstrings and comments may say which rule reads a fact (a cross-reference); code that
    spells a code is a rule's decision taken in the wrong place."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(first.lineno)
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT or (
            tok.type == tokenize.STRING and tok.start[0] in docstrings
        ):
            continue
        if _RULE_CODE.search(tok.string):
            out.append((tok.start[0], tok.string))
    return out


def _front_end_modules() -> list[Path]:
    found = sorted((ROOT / "src" / "gpulint" / "frontends").rglob("*.py"))
    return [*found, ROOT / "src" / "gpulint" / "claims.py"]


def test_no_rule_code_in_the_front_ends():
    """The front-ends (and the claims analysis) expose facts: counts, sizes, kinds of problem.
    Which code a fact becomes, and past which threshold, is the rule's (rules/, with shared
    judgments in rules/_*.py)."""
    found = {
        path.relative_to(ROOT).as_posix(): hits
        for path in _front_end_modules()
        if (hits := rule_codes_in_code(path.read_text(encoding="utf-8")))
    }
    assert len(_front_end_modules()) > 20
    assert not found, found


def test_the_rule_code_check_can_fail():
    source = (
        '"""Facts for GPU802 (a docstring may say so)."""\n'
        "# and a comment: GPU803\n"
        "def f(x):\n"
        '    """GPU804 reads this."""\n'
        '    return "GPU812" if x else f"GPU{802}"\n'
        "GPU910_KIND = 1\n"
        'PRIORITY = {"GPU911": 0}\n'
    )
    assert [line for line, _ in rule_codes_in_code(source)] == [5, 6, 7]


# A front-end module is read whole by whoever changes a rule that uses it: past this many lines it
# holds more than one fact and is split by fact (as frontends/python/triton/ and the CUDA
# project's callgraph/conventions/harness/factstore were).
MAX_FRONT_END_LINES = 800
# Over the limit and not yet split: the list only shrinks (a module listed here that fits is
# an error too, so the entry goes when the split lands).
NOT_YET_SPLIT: set[str] = set()


def oversized_modules(paths: list[Path], limit: int = MAX_FRONT_END_LINES) -> dict[str, int]:
    """Lines of each module over `limit`, by path relative to the repository."""
    out = {}
    for path in paths:
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > limit:
            out[path.relative_to(ROOT).as_posix()] = lines
    return out


def test_no_front_end_module_holds_many_facts():
    found = oversized_modules(_front_end_modules())
    assert set(found) - NOT_YET_SPLIT == set(), {p: n for p, n in found.items()}
    assert NOT_YET_SPLIT <= set(found), NOT_YET_SPLIT - set(found)  # split: take it off


def test_the_size_check_can_fail(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    big, small = tmp_path / "big.py", tmp_path / "small.py"
    big.write_text("x = 1\n" * 801)
    small.write_text("x = 1\n" * 800)
    assert oversized_modules([big, small]) == {"big.py": 801}


# -- the typed floor -----------------------------------------------------------------------------
FLOOR = {
    "gpulint.engine",
    "gpulint.rule",
    "gpulint.results",
    "gpulint.diagnostics",
    "gpulint.frontends",
    "gpulint.frontends.docs",
    "gpulint.frontends.docs.*",
    "gpulint.frontends.envfile",
    "gpulint.frontends.leverfile",
    "gpulint.frontends.shell",
    "gpulint.frontends.yamlconfig",
    "gpulint.frontends.python.triton",
    "gpulint.frontends.python.triton.*",
    "gpulint.frontends.cuda.callgraph",
    "gpulint.frontends.cuda.conventions",
    "gpulint.frontends.cuda.errorstate",
    "gpulint.frontends.cuda.factstore",
    "gpulint.frontends.cuda.harness",
    "gpulint.frontends.cuda.project",
}
STRICT_FLAGS = {
    "disallow_untyped_defs",
    "disallow_incomplete_defs",
    "disallow_untyped_calls",
    "disallow_any_generics",
    "warn_return_any",
}


def test_the_floor_is_held_to_mypy_strict():
    """CI runs `mypy` (pyproject's configuration): the engine, the rule base class and the
    front-ends listed keep mypy --strict's per-module checks; the list only grows."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    strict = [
        o
        for o in config["tool"]["mypy"]["overrides"]
        if all(o.get(flag) is True for flag in STRICT_FLAGS)
    ]
    assert strict, "no [[tool.mypy.overrides]] section with the strict checks"
    covered = {m for o in strict for m in o["module"]}
    assert FLOOR <= covered, FLOOR - covered


def test_report_takes_a_node_or_a_span():
    from gpulint.frontends.python import FRONTEND
    from gpulint.rule import Rule
    from gpulint.settings import Settings

    class Toy(Rule):
        code = "GPU999"
        name = "toy"
        message = "toy"

    parsed = FRONTEND.parse("t.py", b"x = 1\ny = 2\n", Settings())
    rule = Toy(Settings())
    node = parsed.tree.body[1]
    at_node = rule.report(parsed, node)
    at_span = rule.report(parsed, (2, 3, 2, 6))
    assert (at_node.line, at_node.col, at_node.end_line, at_node.end_col) == (2, 1, 2, 6)
    assert (at_span.line, at_span.col, at_span.end_line, at_span.end_col) == (2, 3, 2, 6)
    assert at_span.path == "t.py" and at_span.code == "GPU999"
