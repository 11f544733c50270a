"""The parsed file is typed and owns its caches: every `file` parameter in the package and the
rules is annotated (so the type checker sees what a rule asks of its front-end), and no rule or
helper stashes facts on the file object or keeps its own per-file table: a fact computed once per
file goes in the file's typed memo (`file.memo.get(KEY, build)`)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "gpulint"
RULES = ROOT / "rules"


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
