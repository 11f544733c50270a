"""A parsed Python file and what rules ask of it, each part computed only when first asked."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, TypeVar, overload

from gpulint.frontends.python.devices import uses_gpu
from gpulint.frontends.python.loops import LoopModel
from gpulint.frontends.python.model import Memo, SemanticModel
from gpulint.frontends.python.names import collect_bindings, dotted
from gpulint.source import SourceText, is_test_path

if TYPE_CHECKING:
    from gpulint.frontends.python.summaries import External, Summaries
    from gpulint.project import ProjectSession

N = TypeVar("N", bound=ast.AST)
M = TypeVar("M", bound=ast.AST)
P = TypeVar("P", bound=ast.AST)


# The AST's primitive field types (ast's ASDL: `identifier name`, `constant value`, ...) and the
# expression-context singletons: fields of these types never hold a node to visit.
_LEAF_TYPES = frozenset({"identifier", "string", "constant", "int", "object", "expr_context"})
_NODE_FIELDS: dict[type, tuple[tuple[str, bool | None], ...]] = {}


def _node_fields(kind: type) -> tuple[tuple[str, bool | None], ...]:
    """(field, is a list) for each field of an AST class that can hold nodes, last field first
    (the walk pushes them on a stack). Read from the class's ASDL signature, which ast keeps as
    its docstring (`FunctionDef(identifier name, arguments args, stmt* body, ...)`); a class
    whose signature does not match its fields gets None for "unknown": every field is looked at
    the generic way."""
    fields: tuple[str, ...] = getattr(kind, "_fields", ())
    doc = (getattr(kind, "__doc__", None) or "").split("\n", 1)[0]
    inside = doc[doc.find("(") + 1 : doc.rfind(")")] if doc.startswith(f"{kind.__name__}(") else ""
    declared = [part.split() for part in inside.split(",")] if inside.strip() else []
    if [d[-1] for d in declared if len(d) == 2] != list(fields) or len(declared) != len(fields):
        return tuple((f, None) for f in reversed(fields))
    out: list[tuple[str, bool | None]] = []
    for asdl_type, name in reversed(declared):
        base = asdl_type.rstrip("*?")
        if base not in _LEAF_TYPES:
            out.append((name, asdl_type.endswith("*")))
    return tuple(out)


_UNASKED = object()


class PythonFile:
    language = "python"

    def __init__(self, display_path: str, text: str, tree: ast.Module):
        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        self.tree = tree
        self.nodes_by_type: dict[type, list[ast.AST]] = {}
        # Summaries of functions in other modules of the checked tree (gpulint.project), when
        # the engine has an index; None: calls out of this file are unknown.
        self.project_lookup: External | None = None
        # The same index as one object (`ProjectSession`), for questions other than summaries.
        self.project: ProjectSession | None = None
        # Parent links live here, not on the nodes: a child pointing back at its parent makes
        # every tree one big reference cycle that only the cyclic garbage collector can free; it
        # then walked every live tree again and again and took half of a cold run's CPU. Nodes
        # hash by identity, and the tree keeps every key alive exactly as long as this file.
        self._parents: dict[ast.AST, ast.AST] = {}
        # qualname's answers: every rule asks about the same calls (700,000 asks on transformers)
        self._qualnames: dict[ast.AST, str | None] = {}
        self._index()

    def _index(self) -> None:
        """One pre-order pass: parent links, and nodes grouped by type for rule dispatch.

        Written out by hand (no ast.iter_child_nodes generator) because it runs over every node
        of every parsed file. Each class's fields that can hold nodes are looked up once
        (`_node_fields`): a Name or a Constant, half of all nodes, has none to read, and the
        Load/Store/Del singletons are never reached.
        """
        by_type = self.nodes_by_type
        parents = self._parents
        fields_of = _NODE_FIELDS
        stack: list[ast.AST] = [self.tree]
        pop, push = stack.pop, stack.append
        while stack:
            node = pop()
            kind = type(node)
            bucket = by_type.get(kind)
            if bucket is None:
                bucket = by_type[kind] = []
            bucket.append(node)
            fields = fields_of.get(kind)
            if fields is None:
                fields = fields_of[kind] = _node_fields(kind)
            for field, many in fields:
                value = getattr(node, field, None)
                if value is None:
                    continue
                if many:
                    for item in reversed(value):
                        if item is not None:  # a `**spread` in a dict display: no key
                            parents[item] = node
                            push(item)
                elif many is False:
                    parents[value] = node
                    push(value)
                else:  # a field of unknown type (see _node_fields)
                    for item in reversed(value) if type(value) is list else (value,):
                        if isinstance(item, ast.AST) and not isinstance(item, ast.expr_context):
                            parents[item] = node
                            push(item)

    # -- structure ---------------------------------------------------------------------------
    @overload
    def nodes(self, t1: type[N], /) -> Iterator[N]: ...
    @overload
    def nodes(self, t1: type[N], t2: type[M], /) -> Iterator[N | M]: ...
    @overload
    def nodes(self, t1: type[N], t2: type[M], t3: type[P], /) -> Iterator[N | M | P]: ...
    @overload
    def nodes(self, *types: type[ast.AST]) -> Iterator[ast.AST]: ...
    def nodes(self, *types: type[ast.AST]) -> Iterator[ast.AST]:
        for t in types:
            yield from self.nodes_by_type.get(t, ())

    def parent(self, node: ast.AST) -> ast.AST | None:
        """The node holding `node` in this file's tree; None for the module itself (and for a
        node of another tree, or an expression-context singleton)."""
        return self._parents.get(node)

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        parents = self._parents
        parent = parents.get(node)
        while parent is not None:
            yield parent
            parent = parents.get(parent)

    def statement_block(self, statement: ast.AST) -> list[ast.stmt] | None:
        """The statement list (`body`, `orelse`, `finalbody`) of its parent that holds
        `statement`, so its neighbours can be read; None at the top of a tree or in a handler."""
        parent = self.parent(statement)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and statement in block:
                return block
        return None

    def enclosing_function(self, node: ast.AST) -> ast.AST | None:
        return next(
            (
                a
                for a in self.ancestors(node)
                if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))
            ),
            None,
        )

    # -- names -------------------------------------------------------------------------------
    @functools.cached_property
    def bindings(self) -> dict[str, str]:
        imports = [
            *self.nodes_by_type.get(ast.Import, ()),
            *self.nodes_by_type.get(ast.ImportFrom, ()),
        ]
        return collect_bindings(self.tree, imports)

    def qualname(self, node: ast.AST) -> str | None:
        """Fully qualified name of a Name/Attribute/Call target, through imports and aliases."""
        known = self._qualnames.get(node, _UNASKED)
        if known is not _UNASKED:
            return known  # type: ignore[return-value]
        name = dotted(node.func if isinstance(node, ast.Call) else node, self.bindings)
        self._qualnames[node] = name
        return name

    @functools.cached_property
    def model(self) -> SemanticModel:
        """Scopes, bindings, calls and the per-file memo (built as far as rules ask)."""
        return SemanticModel(self)

    @property
    def memo(self) -> Memo:
        return self.model.memo

    # -- context -----------------------------------------------------------------------------
    @functools.cached_property
    def loops(self) -> LoopModel:
        return LoopModel(self)

    @property
    def summaries(self) -> Summaries:
        """What each function reachable from the file does (syncs, steps, transfers;
        frontends/python/summaries.py), built on first use and kept in the memo. The file
        builds it, as it builds its loop model: the loop model asks it whether a callee steps,
        and summaries are made of loop facts, so neither of the two imports the other."""
        from gpulint.frontends.python.summaries import summaries

        return summaries(self)

    @functools.cached_property
    def is_test(self) -> bool:
        return is_test_path(self.display_path)

    @functools.cached_property
    def uses_cuda(self) -> bool:
        """GPU code: the text says `cuda`, or tensors go to a device not provably the CPU."""
        return uses_gpu(self)

    # -- positions ---------------------------------------------------------------------------
    def span(self, node: ast.AST) -> tuple[int, int, int | None, int | None]:
        line: int = node.lineno  # type: ignore[attr-defined]
        col = self.source.col_from_utf8(line, node.col_offset)  # type: ignore[attr-defined]
        end_line: int | None = getattr(node, "end_lineno", None)
        end_col = None
        end_offset: int | None = getattr(node, "end_col_offset", None)
        if end_line is not None and end_offset is not None:
            end_col = self.source.col_from_utf8(end_line, end_offset)
        return line, col, end_line, end_col

    def offsets(self, node: ast.AST) -> tuple[int, int]:
        """Character offsets [start, end) of a node in the text."""
        line, col, end_line, end_col = self.span(node)
        if end_line is None or end_col is None:
            end_line, end_col = line, col
        return self.source.offset(line, col), self.source.offset(end_line, end_col)

    def segment(self, node: ast.AST) -> str:
        start, end = self.offsets(node)
        return self.text[start:end]
