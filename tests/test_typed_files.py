"""The parsed file is typed and owns its caches: every `file` parameter in the package and the
rules is annotated (so the type checker sees what a rule asks of its front-end), and no rule or
helper stashes facts on the file object or keeps its own per-file table: a fact computed once per
file goes in the file's typed memo (`file.memo.get(KEY, build)`). "What was assigned to this
name" is answered by the semantic model (`frontends/python/model.py`) alone."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "gpulint"
RULES = PACKAGE / "rules"


def _sources(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py"))


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def unannotated_file_parameters(paths: list[Path]) -> list[str]:
    out = []
    for path in paths:
        for fn in ast.walk(_parse(path)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            a = fn.args
            for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs):
                if arg.arg == "file" and arg.annotation is None:
                    out.append(f"{_rel(path)}:{fn.lineno} {fn.name}")
    return out


# Where a stash is the mechanism itself: BackLink keeps its weak reference in the instance dict.
_STASH_ALLOWED = {PACKAGE / "frontends" / "__init__.py"}


def file_stashes(paths: list[Path]) -> list[str]:
    """Facts hung on an object from outside its class, or per-file tables beside it:
    `x.__dict__` (a class's own `self.__dict__` aside, except in rules; BackLink aside),
    `setattr(file, ...)`, `getattr(file, "_private")`,
    `file._private = ...`, `id(file)` keys, and `WeakKeyDictionary` tables."""
    out = []
    for path in paths:
        if path in _STASH_ALLOWED:
            continue
        for node in ast.walk(_parse(path)):
            where = f"{_rel(path)}:{getattr(node, 'lineno', 0)}"
            if isinstance(node, ast.Attribute) and node.attr == "__dict__":
                # A class may manage its own instance dict (a lazy attribute); a rule may not
                # keep per-file state there, and nothing may reach into another object's.
                own = isinstance(node.value, ast.Name) and node.value.id == "self"
                if not own or path.is_relative_to(RULES):
                    out.append(f"{where} .__dict__")
            elif isinstance(node, ast.Attribute) and node.attr == "WeakKeyDictionary":
                out.append(f"{where} WeakKeyDictionary")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.args:
                first = node.args[0]
                on_file = isinstance(first, ast.Name) and first.id == "file"
                name = node.args[1] if len(node.args) > 1 else None
                attr = name.value if isinstance(name, ast.Constant) else None
                private = isinstance(attr, str) and attr.startswith("_")
                if on_file and node.func.id == "setattr":
                    out.append(f"{where} setattr(file, ...)")
                elif on_file and node.func.id in ("getattr", "hasattr") and private:
                    out.append(f"{where} {node.func.id}(file, {attr!r})")
                elif on_file and node.func.id == "id":
                    out.append(f"{where} id(file)")
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "file"
                        and t.attr.startswith("_")
                    ):
                        out.append(f"{where} file.{t.attr} = ...")
    return out


def test_every_file_parameter_is_annotated():
    assert unannotated_file_parameters(_sources(PACKAGE, RULES)) == []


def test_no_rule_or_helper_stashes_facts_on_the_file():
    assert file_stashes(_sources(PACKAGE / "frontends", RULES)) == []
    # The rest of the package (engine, claims, reporters) never sees a stash either; the
    # runtime's tracer is left out: it runs user code, not a parsed file.
    rest = [
        p
        for p in _sources(PACKAGE)
        if not p.is_relative_to(PACKAGE / "frontends") and not p.is_relative_to(PACKAGE / "runtime")
    ]
    assert file_stashes(rest) == []


def test_the_checks_catch_what_they_are_for(tmp_path):
    """Both checks fail on the shapes they forbid (and pass their look-alikes)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "def rule(file, node):\n"
        "    cache = file.__dict__.setdefault('_x', {})\n"
        "    file._seen = True\n"
        "    setattr(file, 'y', 1)\n"
        "    getattr(file, '_z', None)\n"
        "    TABLE[id(file)] = 1\n"
        "class R:\n"
        "    def f(self, other):\n"
        "        other.__dict__['x'] = 1\n"
        "import weakref\n"
        "T = weakref.WeakKeyDictionary()\n"
    )
    good = tmp_path / "good.py"
    good.write_text(
        "def rule(file: 'PythonFile', node):\n"
        "    getattr(file, 'text', '')\n"
        "    return file.memo.get(KEY, dict)\n"
        "class Lazy:\n"
        "    def __getattr__(self, name):\n"
        "        return self.__dict__.setdefault(name, 0)\n"
    )
    assert len(unannotated_file_parameters([bad])) == 1
    assert unannotated_file_parameters([good]) == []
    found = file_stashes([bad])
    assert len(found) == 7, found
    assert file_stashes([good]) == []


# Functions outside the model that do look at assignments by name, and why that is not a private
# "what was assigned to this name" table: each is an analysis of its own, not a lookup.
_ASSIGNMENT_WALKS_ALLOWED = {
    # Triton kernels' value-flow analysis (which bits a value carries along the kernel's
    # statements, branch by branch): a dataflow engine over kernel code, not a name lookup.
    "src/gpulint/frontends/python/triton/offsets.py:OffsetFlow._stmt",
    # GPU103: names derived from the batch by unpacking, followed forward in source order.
    "src/gpulint/rules/gpu103_pinned_batch_blocking_copy.py:_derive",
}
# Not yet moved to the model: listed so that any new one fails; remove as they move.
_ASSIGNMENT_WALKS_LEFT: set[str] = set()


def _ast_attribute(node: ast.AST, names: tuple[str, ...]) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "ast"
        and node.attr in names
    )


def _keys_by_name(node: ast.AST) -> bool:
    """`t.id == name` / `t.id in names`, `table.setdefault(t.id, ...)` / `names.add(t.id)`,
    `{t.id for ...}` / `{t.id: ...}`, `table[t.id] = ...`: something keyed by a Name's id."""

    def is_id(n: ast.AST | None) -> bool:
        # `t.id`, or a target's text (`file.segment(t)`, which keys `self.start` too)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
            return n.func.attr == "segment"
        return isinstance(n, ast.Attribute) and n.attr == "id"

    if isinstance(node, ast.Compare) and any(isinstance(op, (ast.Eq, ast.In)) for op in node.ops):
        sides = [node.left, *node.comparators]
        # `t.value.id == "self"` / `x.id in ("self", "cls")` ask which object, not which name
        # was assigned.
        constant = [
            n
            for n in sides
            if isinstance(n, ast.Constant)
            or (
                isinstance(n, (ast.Tuple, ast.List, ast.Set))
                and all(isinstance(e, ast.Constant) for e in n.elts)
            )
        ]
        return any(is_id(n) for n in sides) and not constant
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
        return node.func.attr in ("setdefault", "add", "append") and is_id(node.args[0])
    if isinstance(node, (ast.SetComp, ast.ListComp, ast.GeneratorExp)):
        return is_id(node.elt)
    if isinstance(node, ast.DictComp):
        return is_id(node.key)
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
        return is_id(node.slice)
    return False


def _assignment_walks(path: Path) -> list[str]:
    """Functions of `path` that match assignment statements (`ast.Assign`/`ast.AnnAssign`),
    read their targets, and key something by a name's `.id` (or a target's text)."""
    tree = _parse(path)
    owners: dict[int, str] = {}
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            for item in cls.body:
                owners[id(item)] = f"{cls.name}."
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = list(ast.walk(fn))
        matches_assignments = any(_ast_attribute(n, ("Assign", "AnnAssign")) for n in nodes)
        reads_targets = any(
            isinstance(n, ast.Attribute) and n.attr in ("targets", "target") for n in nodes
        )
        if matches_assignments and reads_targets and any(_keys_by_name(n) for n in nodes):
            out.append(f"{_rel(path)}:{owners.get(id(fn), '')}{fn.name}")
    return out


def assignment_lookups(paths: list[Path]) -> list[str]:
    """Private tables of what was assigned to a name, which the semantic model answers
    (`bindings_of`, `bindings_in`, `values_of`, `unpacked_value`, `attribute_stores`)."""
    known = _ASSIGNMENT_WALKS_ALLOWED | _ASSIGNMENT_WALKS_LEFT
    return [
        where
        for path in paths
        if path != PACKAGE / "frontends" / "python" / "model.py"
        for where in _assignment_walks(path)
        if where not in known
    ]


def test_no_rule_or_helper_keeps_its_own_assignment_table():
    assert assignment_lookups(_sources(PACKAGE, RULES)) == []
    # Every listed exception still exists and still matches: a stale entry would hide a new one.
    for entry in _ASSIGNMENT_WALKS_ALLOWED | _ASSIGNMENT_WALKS_LEFT:
        assert entry in _assignment_walks(ROOT / entry.split(":")[0]), entry


def test_the_assignment_check_catches_what_it_is_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import ast\n"
        "def assigned(file, call, name):\n"
        "    return [n.value for n in ast.walk(file.tree) if isinstance(n, ast.Assign)\n"
        "            and any(isinstance(t, ast.Name) and t.id == name.id for t in n.targets)]\n"
        "def table(scope):\n"
        "    out = {}\n"
        "    for n in ast.walk(scope):\n"
        "        if isinstance(n, ast.AnnAssign):\n"
        "            out.setdefault(n.target.id, []).append(n.value)\n"
        "    return out\n"
        "def clocks(file, scope):\n"
        "    out = {}\n"
        "    for n in ast.walk(scope):\n"
        "        if isinstance(n, ast.Assign):\n"
        "            for t in n.targets:\n"
        "                out.setdefault(file.segment(t), []).append(n.value)\n"
        "    return out\n"
    )
    good = tmp_path / "good.py"
    good.write_text(
        "import ast\n"
        "def assigned(file, call, name):\n"
        "    return [b.value for b in file.model.bindings_of(name.id, before=call)]\n"
        "def visit_Assign(self, node, file):\n"
        "    if isinstance(node.value, ast.Call):\n"
        "        yield node\n"
        "def on_self(assign):\n"
        "    return isinstance(assign, ast.Assign) and assign.targets[0].value.id == 'self'\n"
        "def reads(scope, name):\n"
        "    return [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name]\n"
    )
    assert assignment_lookups([bad]) == [f"{bad}:assigned", f"{bad}:table", f"{bad}:clocks"]
    assert assignment_lookups([good]) == []
