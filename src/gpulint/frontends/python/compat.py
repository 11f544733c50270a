"""Version shims: code that exists so an older (or newer) library keeps working.

A library that supports several PyTorch releases keeps both spellings of an API and picks one
at run time: `A if NEW_TORCH else B`, `if hasattr(torch, "amp"): ... else: ...`, `if
version.parse(torch.__version__) >= ...: return ...` followed by the old path, `try: from
torch.amp import X` / `except ImportError: from torch.cuda.amp import X`. The branch for the old
release is no slip: rewriting it breaks the release it exists for. These are facts of the file;
a rule decides what they mean for it (GPU201 leaves the old branch alone).

- `is_version_check(file, test)`: a test that asks which release is installed: a comparison
  involving `__version__`, `packaging.version`/`distutils.version`/`importlib.metadata.version`,
  `sys.version_info`, a name that says it (`TORCH_VERSION`, `torch_version`, `TORCH_2_4`,
  `IS_TORCH_LT_2_3`, `is_torch_greater_or_equal_than_2_3`, `NEW_TORCH`), a feature probe on
  torch (`hasattr(torch, "amp")`, `getattr(torch.amp, "GradScaler", None)`), or a name this
  file binds to one of those.
- `version_gate(file, node)`: the construct that makes `node` code for one release: an `if`
  or conditional expression with such a test (either branch, or the test itself), a handler
  of a `try` (the fallback when the first spelling failed), or a statement that follows
  `if <version check>: ... return` in its block.
- `alternatives(file, node)`: the other branches of the choices `node` sits in (the other arm
  of an `if` or conditional expression, the `try` body for a handler and the handlers for the
  body, the terminating `if` before it): where a rule looks for the other spelling.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

# Modules whose functions parse or read a release's version.
_VERSION_MODULES = ("packaging.version", "distutils.version", "pkg_resources", "importlib.metadata")
# A name that says "the installed torch is (not) release X": torch with a release number or a
# comparison word: TORCH_2_4, IS_TORCH_LT_2_3, _TORCH_GREATER_EQUAL_2_0, NEW_TORCH, torch2,
# is_torch_greater_or_equal_than_1_13, OLD_PYTORCH. Not torch_dtype, use_torch_compile.
_TORCH_WORD = re.compile(r"torch", re.IGNORECASE)
_RELEASE_WORD = re.compile(
    r"\d|greater|less|newer|older|at_?least|(?:^|_)(?:ge|gt|le|lt|eq|new|old|pre|post)(?:_|$)",
    re.IGNORECASE,
)
_NESTING = 3  # how many name-to-value steps a test is followed through (`A = B; B = ver...`)


def _identifier(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _says_release(name: str) -> bool:
    if "version" in name.lower():
        return True
    return bool(_TORCH_WORD.search(name)) and bool(_RELEASE_WORD.search(_TORCH_WORD.sub("_", name)))


def is_version_check(file: PythonFile, test: ast.AST, _depth: int = 0) -> bool:
    """Whether `test` asks which release of a library (or of Python) is installed."""
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and node.attr in ("__version__", "version_info"):
            return True
        if isinstance(node, ast.Call):
            qualified = file.qualname(node) or ""
            if qualified.startswith(_VERSION_MODULES):
                return True
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("hasattr", "getattr") and node.args:
                probed = file.qualname(node.args[0]) or ""
                if probed == "torch" or probed.startswith("torch."):
                    return True
        name = _identifier(node)
        if name is None:
            continue
        if _says_release(name):
            return True
        if isinstance(node, ast.Name) and _depth < _NESTING and _bound_to_check(file, node, _depth):
            return True
    return False


def _bound_to_check(file: PythonFile, name: ast.Name, depth: int) -> bool:
    """`name` is bound in this file to a version check (`_NEW_AMP = hasattr(torch, "amp")`)."""
    for binding in file.model.bindings_of(name.id, name):
        if binding.value is not None and is_version_check(file, binding.value, depth + 1):
            return True
    return False


def _terminates(block: list[ast.stmt]) -> bool:
    """Every path through `block` leaves it (return or raise): the code after it is the other
    case. A `try` whose body and handlers all terminate does; an `if` whose arms both do."""
    if not block:
        return False
    last = block[-1]
    if isinstance(last, (ast.Return, ast.Raise)):
        return True
    if isinstance(last, ast.If):
        return _terminates(last.body) and _terminates(last.orelse)
    if isinstance(last, ast.Try):
        return (_terminates(last.body) or _terminates(last.orelse)) and all(
            _terminates(h.body) for h in last.handlers
        )
    return False


def _earlier_exits(file: PythonFile, statement: ast.stmt) -> Iterator[ast.If]:
    """The `if` statements before `statement` in its block whose body always leaves it."""
    block = file.statement_block(statement)
    if not block:
        return
    for earlier in block[: block.index(statement)]:
        if isinstance(earlier, ast.If) and _terminates(earlier.body):
            yield earlier


def version_gate(file: PythonFile, node: ast.AST) -> ast.AST | None:
    """The `if`, conditional expression, `try` handler or earlier exiting `if` that makes `node`
    code for one release; None when `node` runs whatever release is installed."""
    for ancestor in file.ancestors(node):
        if isinstance(ancestor, (ast.If, ast.IfExp)) and is_version_check(file, ancestor.test):
            return ancestor
        if isinstance(ancestor, ast.ExceptHandler):
            return ancestor
        if isinstance(ancestor, ast.stmt):
            for earlier in _earlier_exits(file, ancestor):
                if is_version_check(file, earlier.test):
                    return earlier
    return None


def alternatives(file: PythonFile, node: ast.AST) -> Iterator[ast.AST]:
    """The other branches of each choice `node` is inside of (see the module's docstring)."""
    child = node
    for ancestor in file.ancestors(node):
        if isinstance(ancestor, ast.IfExp):
            if child is ancestor.body:
                yield ancestor.orelse
            elif child is ancestor.orelse:
                yield ancestor.body
        elif isinstance(ancestor, ast.If):
            if child in ancestor.body:
                yield from ancestor.orelse
            elif child in ancestor.orelse:
                yield from ancestor.body
        elif isinstance(ancestor, ast.Try):
            if child in ancestor.body:
                for handler in ancestor.handlers:
                    yield from handler.body
        elif isinstance(ancestor, ast.ExceptHandler):
            parent = file.parent(ancestor)
            if isinstance(parent, ast.Try):
                yield from parent.body
        if isinstance(ancestor, ast.stmt):
            for earlier in _earlier_exits(file, ancestor):
                yield from earlier.body
        child = ancestor
