"""Speed properties that are easy to lose without noticing: analysis state free of reference
cycles (so reference counting, not Python's cyclic collector, frees each file), and the parent
links of the Python front-end kept off the AST nodes."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

from gpulint.frontends.python import PythonFrontend
from gpulint.registry import frontend_for
from gpulint.settings import Settings
from gpulint.testing import fixture_options, fixture_targets, lint_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _fixtures():
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and frontend_for(path.name) is not None:
            yield path


@pytest.mark.slow  # a full collection after each of ~150 fixtures: 10-40 s on 2 cores
def test_linting_a_file_leaves_nothing_for_the_cyclic_collector():
    """Every fixture (all front-ends, every rule on): once a file's findings are out, nothing of
    its analysis is left in a reference cycle. A cycle anywhere in the state hung off a parsed
    file (a model that holds its file strongly, a parent link on a node) keeps the whole tree
    alive until a full collection, and the collector then walks every such tree again and again."""
    texts = [(p, p.read_text(encoding="utf-8")) for p in _fixtures()]
    assert len(texts) > 50
    gc.collect()
    gc.disable()
    try:
        leaks = {}
        for path, text in texts:
            shown = path.relative_to(FIXTURES).as_posix()
            findings = lint_text(text, shown, fixture_targets(text), fixture_options(text))
            found = gc.collect()
            # A fix rendered through libcst defines its transformer class per call (a class is
            # always cyclic): a cost paid only where a fix is offered, not by the analysis.
            if found and not any(f.fix for f in findings):
                leaks[shown] = found
    finally:
        gc.enable()
    assert not leaks, f"objects only the cyclic collector could free, per file: {leaks}"


def test_parent_links_are_a_side_table_not_node_attributes():
    source = "def f(x):\n    for i in range(3):\n        y = x[i] + 1\n    return y\n"
    parsed = PythonFrontend().parse("f.py", source.encode(), Settings())
    subscript = next(parsed.nodes(ast.Subscript))
    chain = [type(a).__name__ for a in parsed.ancestors(subscript)]
    assert chain == ["BinOp", "Assign", "For", "FunctionDef", "Module"]
    assert parsed.parent(parsed.tree) is None
    assert parsed.enclosing_function(subscript) is parsed.tree.body[0]
    # Nothing written onto the nodes: their __dict__ holds only what ast put there.
    for node in ast.walk(parsed.tree):
        assert not any(k.startswith("_gpulint") for k in vars(node)), node


def _walk_preorder(tree):
    """ast's own view of a tree: every node below `tree` with its parent, in pre-order."""
    out, stack = [], [(tree, None)]
    while stack:
        node, parent = stack.pop()
        out.append((node, parent))
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.expr_context)]
        stack.extend((c, node) for c in reversed(children))
    return out


def test_index_holds_every_node_with_its_parent_in_source_order():
    """The index reads only the fields that can hold nodes (from ast's signatures): it must
    still reach every node ast.iter_child_nodes reaches, with the same parent, in pre-order.
    Over gpulint's own sources and every Python fixture (every syntax they use, dict displays
    with `**` included)."""
    root = Path(__file__).resolve().parent.parent
    paths = sorted((root / "src").rglob("*.py")) + sorted(FIXTURES.rglob("*.py"))
    extra = "d = {**a, 'k': 1}\nmatch p:\n    case {'x': X(y=1), **rest} if y: pass\n"
    sources = [p.read_bytes() for p in paths] + [extra.encode()]
    assert len(sources) > 100
    for data in sources:
        try:
            parsed = PythonFrontend().parse("f.py", data, Settings())
        except Exception:  # noqa: BLE001 - fixtures that do not parse on purpose
            continue
        expected = _walk_preorder(parsed.tree)
        for node, parent in expected:
            # operators (`+`, `and`, `==`) are singletons shared by the whole tree: no parent
            if not isinstance(node, (ast.operator, ast.boolop, ast.unaryop, ast.cmpop)):
                assert parsed.parent(node) is parent
        by_type: dict[type, list] = {}
        for node, _ in expected:
            by_type.setdefault(type(node), []).append(node)
        assert by_type.keys() == parsed.nodes_by_type.keys()
        for kind, nodes in by_type.items():
            assert [id(n) for n in parsed.nodes_by_type[kind]] == [id(n) for n in nodes]


def test_every_ast_class_has_a_signature_the_index_reads():
    """A class whose fields could not be read from its ASDL signature is walked the slow, generic
    way: on this Python, none is (the aliases ast keeps for old versions aside)."""
    from gpulint.frontends.python.file import _node_fields

    deprecated = {"Num", "Str", "Bytes", "NameConstant", "Ellipsis"}
    generic = [
        name
        for name in dir(ast)
        if isinstance(cls := getattr(ast, name), type)
        and issubclass(cls, ast.AST)
        and cls._fields
        and name not in deprecated
        and any(many is None for _, many in _node_fields(cls))
    ]
    assert generic == []
    assert dict(_node_fields(ast.Dict)) == {"keys": True, "values": True}
    assert _node_fields(ast.Name) == () and _node_fields(ast.Constant) == ()


@pytest.mark.parametrize("attr", ["loops", "model"])
def test_models_cached_on_a_file_refer_back_weakly(attr):
    parsed = PythonFrontend().parse("f.py", b"import torch\nx = torch.ones(1)\n", Settings())
    model = getattr(parsed, attr)
    assert model.file is parsed
    assert parsed not in gc.get_referents(model)


def _check(tmp_path, *extra):
    from gpulint.cli import main

    return main(["check", "--cache-dir", str(tmp_path / "cache"), "--exit-zero", *extra])


def test_warm_run_serves_unchanged_files_from_their_stamp_without_reading(
    tmp_path, monkeypatch, capsys
):
    """An unchanged file (size, mtime, ctime, inode as recorded) is served from the cache
    without its bytes being hashed; an edit that keeps size and mtime still changes its ctime,
    and the file is linted again."""
    import os

    from gpulint.engine import Linter

    monkeypatch.chdir(tmp_path)
    src = tmp_path / "train.py"
    src.write_text("import torch\n\nscaler = torch.cuda.amp.GradScaler()\n")
    old = 1_600_000_000_000_000_000
    os.utime(src, ns=(old, old))  # older than the racy window
    _check(tmp_path, str(src))
    cold = capsys.readouterr().out
    assert "GPU201" in cold

    def no_hash(self, shown, data):
        raise AssertionError(f"hashed {shown}")

    with monkeypatch.context() as m:  # (the report still reads a file to quote its lines)
        m.setattr(Linter, "digest", no_hash)
        _check(tmp_path, str(src))
    assert capsys.readouterr().out == cold

    src.write_text("import torch\n\nscaler = torch.xxxx.amp.GradScaler()\n")  # same size
    os.utime(src, ns=(old, old))
    _check(tmp_path, str(src))
    assert "GPU201" not in capsys.readouterr().out


def test_cuda_parses_kept_for_the_lint_are_bounded(monkeypatch):
    """The CUDA project index keeps its parses for the lint that follows, but only up to
    REUSE_BYTES of source: the main process holds them for the whole run, and a parse weighs
    many times its source, so memory must not grow with the number of CUDA files."""
    from gpulint.frontends.cuda import CudaFrontend

    monkeypatch.setattr(CudaFrontend, "REUSE_BYTES", 4096)
    kernel = "__global__ void k%d(float* x) { x[threadIdx.x] *= 2.0f; }\n" * 20
    launch = "void run%d(float* x) { k0<<<1, 32>>>(x); }\n"
    files = [(f"k{i}.cu", (kernel % tuple(range(20)) + launch % i).encode()) for i in range(40)]
    assert sum(len(d) for _, d in files) > 10 * 4096
    frontend = CudaFrontend()
    frontend.index(files, Settings())
    kept = sum(size for _, size, _ in frontend._parsed)
    assert 0 < kept <= 4096
    assert CudaFrontend.REUSE_BYTES <= 1024 * 1024
