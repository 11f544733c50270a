"""Command-line options of a module: what `args.x` is when the user passes nothing.

A training script that reads a setting from its own argparse options (`num_workers=args.workers`)
runs, by default, with the option's default. This answers that default where the module says it
plainly: one `add_argument("--workers", ..., default=0)` (or `dest="workers"`) in the module, its
default a constant, and the module parses its arguments (`parse_args`/`parse_known_args`). Two
options with the same destination, a computed default or an option of another module: unknown.
"""

from __future__ import annotations

import ast
import operator
import os
import re
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import keyword

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_MISSING = object()
_UNKNOWN = object()  # declared more than once, or with a default that is not a constant


def _destination(call: ast.Call) -> str | None:
    dest = keyword(call, "dest")
    if dest is not None:
        value = dest.value
        return (
            value.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str)
            else None
        )
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not flags:
        return None
    long = [f for f in flags if f.startswith("--")]
    chosen = long[0][2:] if long else flags[0].lstrip("-")
    return chosen.replace("-", "_") or None


def _table(file: PythonFile) -> dict[str, object]:
    table: dict[str, object] = {}
    if "add_argument" not in file.text or "parse_" not in file.text:
        return table
    parses = any(
        isinstance(c.func, ast.Attribute) and c.func.attr in ("parse_args", "parse_known_args")
        for c in file.nodes(ast.Call)
    )
    if not parses:
        return table
    for call in file.nodes(ast.Call):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        name = _destination(call)
        if name is None:
            continue
        default = keyword(call, "default")
        value: object = _MISSING
        if default is not None:
            value = default.value.value if isinstance(default.value, ast.Constant) else _UNKNOWN
        table[name] = _UNKNOWN if name in table else value
    # `parser.set_defaults(workers=8)` overrides the declared default: unknown
    for call in file.nodes(ast.Call):
        if isinstance(call.func, ast.Attribute) and call.func.attr == "set_defaults":
            for kw in call.keywords:
                if kw.arg is not None:
                    table[kw.arg] = _UNKNOWN
    return table


_OPTIONS: MemoKey[dict[str, object]] = MemoKey("command-line option defaults")


def option_default(file: PythonFile, expr: ast.AST) -> tuple[str, object] | None:
    """(option name, default) when `expr` is `<args>.name` for an option this module declares
    once with a constant default; None otherwise."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
        return None
    table = file.memo.get(_OPTIONS, lambda: _table(file))
    value = table.get(expr.attr, _MISSING)
    if value is _MISSING or value is _UNKNOWN:
        return None
    return expr.attr, value


# -- which side of an `if` the defaults take (GPU101: a sync off the default path) ----------
_OPTIONS_OBJECT = re.compile(r"^(args|opts?|options|flags|hparams|hp|cfg|config|a)$", re.I)
_COMPARE = {
    ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not,
}  # fmt: skip
_FLAGS: MemoKey[dict[str, object]] = MemoKey("command-line flag defaults")


def _flag_table(file: PythonFile) -> dict[str, object]:
    """Options declared once without `default=`: `action="store_true"` is False by default,
    `"store_false"` True, a plain option None (argparse's value for an option not given)."""
    table: dict[str, object] = {}
    if "add_argument" not in file.text:
        return table
    for call in file.nodes(ast.Call):
        if not (isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument"):
            continue
        name = _destination(call)
        if name is None or keyword(call, "default") is not None:
            continue
        required = keyword(call, "required")
        action = keyword(call, "action")
        action_name = (
            action.value.value if action and isinstance(action.value, ast.Constant) else None
        )
        value: object = _UNKNOWN
        if required is not None:
            value = _UNKNOWN
        elif action_name == "store_true":
            value = False
        elif action_name == "store_false":
            value = True
        elif action is None:
            value = None
        table[name] = _UNKNOWN if name in table else value
    return table


def _option_value(file: PythonFile, expr: ast.AST) -> object:
    """The default of `args.name` (any `args`-like object), or `_UNKNOWN`. An option the
    script's own folder documents passing (`--use_lpl` in its README or a launch script) is
    not run at its default by the people who follow those instructions: unknown too."""
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name)):
        return _UNKNOWN
    if not _OPTIONS_OBJECT.match(expr.value.id):
        return _UNKNOWN
    if expr.attr in documented_flags(file):
        return _UNKNOWN
    found = option_default(file, expr)
    if found is not None:
        return found[1]
    flags = file.memo.get(_FLAGS, lambda: _flag_table(file))
    declared = file.memo.get(_OPTIONS, lambda: _table(file))
    if expr.attr in declared and declared[expr.attr] is not _MISSING:
        return _UNKNOWN  # declared with a computed default, or twice
    return flags.get(expr.attr, _UNKNOWN)


def default_truth(file: PythonFile, test: ast.AST) -> bool | None:
    """What `test` evaluates to with every option at its default; None where unknown."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        inner = default_truth(file, test.operand)
        return None if inner is None else not inner
    if isinstance(test, ast.BoolOp):
        values = [default_truth(file, v) for v in test.values]
        if isinstance(test.op, ast.And):
            if False in values:
                return False
            return True if all(v is True for v in values) else None
        if True in values:
            return True
        return False if all(v is False for v in values) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        op = _COMPARE.get(type(test.ops[0]))
        left, right = test.left, test.comparators[0]
        if op is None:
            return None
        lv, rv = _operand(file, left), _operand(file, right)
        if lv is _UNKNOWN or rv is _UNKNOWN:
            return None
        if not (isinstance(left, ast.Attribute) or isinstance(right, ast.Attribute)):
            return None  # two constants: not an option test
        try:
            return bool(op(lv, rv))  # type: ignore[arg-type]  # constants: a TypeError is caught
        except TypeError:
            return None
    value = _option_value(file, test)
    return None if value is _UNKNOWN else bool(value)


def _operand(file: PythonFile, node: ast.AST) -> object:
    if isinstance(node, ast.Constant):
        return node.value
    return _option_value(file, node)


def off_by_default(file: PythonFile, node: ast.AST, stop: ast.AST) -> bool:
    """`node` runs only on a side of an `if` (between it and `stop`) that the options' defaults
    do not take: `if args.caption_dropout > 0:` with `default=0.0`, the `else` of `if not
    args.use_ema:` with `action="store_true"`."""
    child = node
    for parent in file.ancestors(node):
        if parent is stop:
            return False
        if isinstance(parent, (ast.If, ast.IfExp)) and child is not parent.test:
            truth = default_truth(file, parent.test)
            if truth is not None:
                in_body = (
                    child in parent.body if isinstance(parent, ast.If) else child is parent.body
                )
                if truth != in_body:
                    return True
        child = parent
    return False


_DOCUMENTED: MemoKey[frozenset[str]] = MemoKey("flags documented beside the script")
_DOC_SUFFIXES = (".md", ".rst", ".txt", ".sh")
_FLAG = re.compile(r"--([A-Za-z][\w-]*)")


def documented_flags(file: PythonFile) -> frozenset[str]:
    """Option names (`use_lpl`) that the README, notes or shell scripts in the script's own
    folder pass (`--use_lpl`, `--use-lpl`). Each file read is recorded as evidence, so a cached
    result is dropped when it changes."""
    return file.memo.get(_DOCUMENTED, lambda: _read_documented(file))


def _read_documented(file: PythonFile) -> frozenset[str]:
    folder = os.path.dirname(file.display_path) or "."
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(_DOC_SUFFIXES))[:50]
    except OSError:
        return frozenset()  # linted from memory, or a folder we cannot list: nothing documented
    found: set[str] = set()
    for name in names:
        path = os.path.join(folder, name)
        if os.path.islink(path) or not os.path.isfile(path):
            continue
        try:
            if os.path.getsize(path) > 2_000_000:
                continue
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        _record_evidence(path)
        found.update(m.replace("-", "_") for m in _FLAG.findall(text))
    return frozenset(found)


def _record_evidence(path: str) -> None:
    """The engine keys a file's cached result on the evidence it read (`gpulint.claims`)."""
    from gpulint import claims

    claims.EVIDENCE_READS.add(path)


# -- what the script's own documentation passes (GPU302) -------------------------------------
# A script whose option defaults to 0 but whose documented command (a README or a `.sh` launch
# script in the script's folder) passes it a value: the run the maintainers tell users to make
# sets it. These files are read as bounded text, never executed; only once a rule has decided it
# would otherwise report, so most files never look beside themselves.
MAX_LAUNCH_DOCS = 16  # files of the folder read at most
MAX_LAUNCH_DOC_BYTES = 256 * 1024
_LAUNCH_DOC = re.compile(r"(?i)^(?:readme[\w.-]*\.(?:md|rst|txt)|[\w.-]+\.sh)$")
_DOCS: MemoKey[list[tuple[str, str]]] = MemoKey("launch documents beside the script")


def _launch_docs(file: PythonFile) -> list[tuple[str, str]]:
    """(file name, text) of the READMEs and shell scripts in the script's folder."""
    from gpulint.safeio import Unreadable, read_text

    path = file.display_path
    if not path.endswith(".py") or not os.path.isfile(path):
        return []  # standard input without a file name, or a file that is not on disk
    folder = os.path.dirname(path) or "."
    _record_evidence(os.path.abspath(folder))  # a README or launch script added: a cache miss
    try:
        names = sorted(n for n in os.listdir(folder) if _LAUNCH_DOC.match(n))[:MAX_LAUNCH_DOCS]
    except OSError:
        return []
    docs = []
    for name in names:
        doc = os.path.join(folder, name)
        _record_evidence(os.path.abspath(doc))  # an edited one: a cache miss
        try:
            # links only inside the folder: a README linked to a file elsewhere is not read
            docs.append((name, read_text(doc, MAX_LAUNCH_DOC_BYTES, (folder,), errors="replace")))
        except Unreadable:
            continue
    return docs


def _flags(file: PythonFile, dest: str) -> list[str]:
    """The long flags declaring the option `dest` (`--dataloader_num_workers`)."""
    flags = [f"--{dest}"]
    for call in file.nodes(ast.Call):
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "add_argument"
            and _destination(call) == dest
        ):
            flags += [
                a.value
                for a in call.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value[:2] == "--"
            ]
    return flags


def documented_elsewhere(file: PythonFile, dest: str) -> bool:
    """The script's folder documents a value for the option `dest`: a command in a README or a
    `.sh` file that runs this script passes it a positive number or a shell variable
    (`--dataloader_num_workers=4`, `--workers $NPROC`), or a README's prose names the option
    (advice to raise it)."""
    script = file.display_path.replace("\\", "/").rsplit("/", 1)[-1]
    spelled = "|".join(
        re.escape(f[2:]).replace("_", "[-_]").replace(r"\-", "[-_]") for f in _flags(file, dest)
    )
    flag = re.compile(rf"--(?:{spelled})(?![\w-])")
    valued = re.compile(rf"--(?:{spelled})(?:=|\s+)[\"']?(\d+|\$)")
    runs_script = re.compile(rf"(?<![\w.-]){re.escape(script)}\b")
    other_script = re.compile(r"[\w-]\.py\b")
    for name, text in file.memo.get(_DOCS, lambda: _launch_docs(file)):
        # a shell command continued over several lines (`\` at the end) is one command
        for line in re.sub(r"\\[ \t]*\r?\n", " ", text).splitlines():
            found = flag.search(line)
            if found is None:
                continue
            if runs_script.search(line):
                value = valued.search(line)
                if value and (value.group(1) == "$" or int(value.group(1)) > 0):
                    return True
            elif not name.endswith(".sh") and not other_script.search(line):
                return True  # prose: the README tells the user about the option
    return False


UNKNOWN = _UNKNOWN  # what `known_value` answers where the value is not plain


def known_value(file: PythonFile, expr: ast.AST, depth: int = 0) -> object:
    """The value `expr` has on the default path where the module says it plainly: a constant,
    an option's default (`args.gradient_accumulation_steps` with `default=1`), or a name every
    binding of which is one of those (`accum = args.accum`); `UNKNOWN` otherwise."""
    if depth > 3:
        return _UNKNOWN
    if isinstance(expr, ast.Constant):
        return expr.value
    if isinstance(expr, ast.Attribute):
        return _option_value(file, expr)
    if isinstance(expr, ast.Name):
        bound = file.model.bindings_of(expr.id, before=expr)
        values = [
            known_value(file, b.value, depth + 1) if b.value is not None else _UNKNOWN
            for b in bound
        ]
        if values and all(v is not _UNKNOWN and v == values[0] for v in values):
            return values[0]
    return _UNKNOWN
