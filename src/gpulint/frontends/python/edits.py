"""Text edits for autofixes, computed from node positions and the tokens around them, so nothing
else in the file moves.

`ast` positions stop at the expression: the first argument of `f((a + b))` starts at `a`, inside
its parentheses. An insertion there would turn the argument into a tuple (`f(("cuda", a + b))`),
code that parses and is wrong. So argument boundaries are read from the call's own tokens: the
opening parenthesis of the call, the first token after it, and the last token before the
trailing comma or closing parenthesis.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.diagnostics import Edit

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_SKIPPED = (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT)


def replace(file: PythonFile, node: ast.AST, text: str) -> Edit:
    start, end = file.offsets(node)
    return Edit(start, end, text)


@dataclass(frozen=True)
class CallArguments:
    """Character offsets of a call's argument list: `open` is its `(`, `close` its `)`;
    `starts` where each argument's text begins (its own parentheses included), `last_end` where
    the last one ends (before any trailing comma), None when there are no arguments."""

    open: int
    close: int
    starts: tuple[int, ...]
    last_end: int | None
    trailing_comma: bool

    @property
    def first(self) -> int | None:
        return self.starts[0] if self.starts else None


def call_arguments(file: PythonFile, call: ast.Call) -> CallArguments | None:
    """Token-level boundaries of `call`'s arguments; None when they cannot be read."""
    _, func_end = file.offsets(call.func)
    _, call_end = file.offsets(call)
    segment = file.text[func_end:call_end]
    lead = len(segment) - len(segment.lstrip(" \t\\\r\n"))
    if not segment[lead:].startswith("("):
        return None
    base = func_end + lead
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(segment[lead:]).readline))
    except (tokenize.TokenError, SyntaxError):
        return None
    line_starts = tokenizer_line_starts(segment[lead:])
    depth = 0
    starts: list[int] = []
    after_separator = True  # the next significant token at depth 1 starts an argument
    last: tuple[int, int, str] | None = None  # the last significant token inside the call
    close = None
    for tok in tokens:
        if tok.type in _SKIPPED or tok.type == tokenize.ENDMARKER:
            continue
        start = base + line_starts[tok.start[0] - 1] + tok.start[1]
        end = base + line_starts[tok.end[0] - 1] + tok.end[1]
        opens = tok.type == tokenize.OP and tok.string in "([{"
        closes = tok.type == tokenize.OP and tok.string in ")]}"
        if closes and depth == 1:
            close = start
            break
        if depth == 0:
            if opens:
                depth = 1  # the call's own opening parenthesis
            continue
        if depth == 1 and tok.string == ",":
            after_separator = True
        elif after_separator:
            starts.append(start)
            after_separator = False
        depth += 1 if opens else -1 if closes else 0
        last = (start, end, tok.string)
    if close is None:
        return None
    trailing = last is not None and last[2] == "," and after_separator
    last_end = _end_before_comma(tokens, base, line_starts, close) if starts else None
    return CallArguments(base, close, tuple(starts), last_end, trailing)


def _end_before_comma(tokens, base: int, line_starts: list[int], close: int) -> int | None:
    """End of the last significant token before `close` that is not a trailing comma."""
    best = None
    for tok in tokens:
        if tok.type in _SKIPPED or tok.type == tokenize.ENDMARKER:
            continue
        start = base + line_starts[tok.start[0] - 1] + tok.start[1]
        if start >= close:
            break
        if start == base:
            continue  # the opening parenthesis
        best = (base + line_starts[tok.end[0] - 1] + tok.end[1], tok.string)
    if best is None:
        return None
    if best[1] == ",":
        # A trailing comma: the argument ends at the token before it.
        previous = None
        for tok in tokens:
            if tok.type in _SKIPPED or tok.type == tokenize.ENDMARKER:
                continue
            end = base + line_starts[tok.end[0] - 1] + tok.end[1]
            if end >= best[0]:
                break
            previous = end
        return previous
    return best[0]


def tokenizer_line_starts(text: str) -> list[int]:
    """Offsets where the rows of `tokenize.generate_tokens(io.StringIO(text).readline)` begin.
    StringIO splits at \\n only, so this is not `SourceText.line_starts` (which also ends lines
    at a lone \\r): token rows must be mapped with the tokenizer's own line split."""
    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    return starts


def _bare_generator(call: ast.Call) -> bool:
    """`f(x for x in y)`: the generator borrows the call's parentheses, so no argument can be
    added beside it without changing what it means."""
    return len(call.args) == 1 and not call.keywords and isinstance(call.args[0], ast.GeneratorExp)


def insert_first_arg(file: PythonFile, call: ast.Call, text: str) -> Edit | None:
    """`f(a=1)` -> `f(TEXT, a=1)`; `f((a))` -> `f(TEXT, (a))`; `f()` -> `f(TEXT)`."""
    args = call_arguments(file, call)
    if args is None or _bare_generator(call):
        return None
    if args.first is None:
        return Edit(args.close, args.close, text)
    return Edit(args.first, args.first, f"{text}, ")


def append_arg(file: PythonFile, call: ast.Call, text: str) -> Edit | None:
    """`f(a)` -> `f(a, TEXT)`; `f(a,)` -> `f(a, TEXT,)`; `f((a))` -> `f((a), TEXT)`;
    `f()` -> `f(TEXT)`. Comments after the last argument stay where they are."""
    args = call_arguments(file, call)
    if args is None or _bare_generator(call):
        return None
    if args.last_end is None:
        return Edit(args.close, args.close, text)
    return Edit(args.last_end, args.last_end, f", {text}")


def argument_starts(file: PythonFile, call: ast.Call) -> dict[int, int] | None:
    """id(argument node) -> where its text begins, its own parentheses included."""
    args = call_arguments(file, call)
    if args is None:
        return None
    parts: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    ordered = sorted(parts, key=lambda n: (n.lineno, n.col_offset))
    if len(ordered) != len(args.starts):
        return None
    return {id(node): start for node, start in zip(ordered, args.starts, strict=True)}


# -- imports -----------------------------------------------------------------------------------
def imports_binding(file: PythonFile, name: str) -> list[ast.Import | ast.ImportFrom] | None:
    """The import statements that bind `name`, when imports are its only bindings in the file
    (no assignment, parameter, definition, loop target, `global`, or other import shadows it);
    else None. A fix may then change what the name means by rewriting those statements."""
    statements: list[ast.Import | ast.ImportFrom] = []
    for statement in file.nodes(ast.Import, ast.ImportFrom):
        for alias in statement.names:
            bound = alias.asname or alias.name.split(".")[0]
            if bound == name:
                statements.append(statement)
    for use in file.nodes(ast.Name):
        if use.id == name and not isinstance(use.ctx, ast.Load):
            return None
    for node in file.nodes(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda):
        if getattr(node, "name", None) == name:
            return None
        arguments = getattr(node, "args", None)
        if isinstance(arguments, ast.arguments):
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            if any(a.arg == name for a in every):
                return None
    for declaration in file.nodes(ast.Global, ast.Nonlocal):
        if name in declaration.names:
            return None
    for handler in file.nodes(ast.ExceptHandler):
        if handler.name == name:
            return None
    return statements or None


def rewrite_import(
    file: PythonFile, statement: ast.Import | ast.ImportFrom, old_module: str, new_module: str
) -> Edit | None:
    """Point `statement` at `new_module` instead of `old_module` (`from torch.cuda.amp import x`
    -> `from torch.amp import x`; `import torch.cuda.amp as amp` -> `import torch.amp as amp`),
    keeping its other names, comments and layout. libcst renders the statement, so parentheses
    and comments inside it survive; None when the statement cannot be rewritten that way."""
    start, end = file.offsets(statement)
    source = file.text[start:end]
    plain = _plain_from_import(statement, source, old_module)
    if plain is not None:
        # `from torch.cuda.amp import x, y` on one line, with nothing libcst would have to
        # keep: libcst renders the same text, and is not imported (0.14 s of a check's CPU)
        return Edit(start, end, source[:plain] + new_module + source[plain + len(old_module) :])
    import libcst as cst

    try:
        module = cst.parse_module(source)
    except Exception:  # libcst's ParserSyntaxError: leave the statement alone
        return None
    target = cst.parse_expression(new_module)
    changed = False

    class Rewrite(cst.CSTTransformer):
        def leave_ImportFrom(self, original, updated):
            nonlocal changed
            if updated.module is not None and _cst_dotted(updated.module) == old_module:
                changed = True
                return updated.with_changes(module=target)
            return updated

        def leave_ImportAlias(self, original, updated):
            nonlocal changed
            if _cst_dotted(updated.name) == old_module and updated.asname is not None:
                changed = True
                return updated.with_changes(name=target)
            return updated

    new = module.visit(Rewrite()).code
    if not changed or new == source:
        return None
    return Edit(start, end, new)


def _plain_from_import(statement: ast.AST, source: str, module: str) -> int | None:
    """Where `module` starts in `from module import names` written on one line, with spaces or
    tabs around it and no parentheses, comments or continuations; else None."""
    if not (
        isinstance(statement, ast.ImportFrom)
        and not statement.level
        and statement.module == module
        and not any(c in source for c in "\n\r\\#(;")
    ):
        return None
    rest = source[4:].lstrip(" \t") if source.startswith(("from ", "from\t")) else ""
    at = len(source) - len(rest)
    after = rest[len(module) :]
    if not rest.startswith(module) or after[:1] not in (" ", "\t"):
        return None
    if not after.lstrip(" \t").startswith(("import ", "import\t")):
        return None
    return at


def _cst_dotted(node) -> str:
    import libcst as cst

    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_cst_dotted(node.value)}.{node.attr.value}"
    return ""
