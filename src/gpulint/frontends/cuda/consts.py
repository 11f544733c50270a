"""Constant folding for launch configurations and array sizes.

A value is evaluated where the code lets it be: integer literals, `#define NAME expr`, `enum`
values, `constexpr`/`const` variables, a local variable initialised once and never assigned
again, `dim3 block(16, 16)` (256 threads), `dim3(...)` and simple arithmetic (`+ - * / % << >>`,
`min`/`max`, casts, `?:`). Anything else (parameters, template parameters, `sizeof`, member
access, calls, a name defined twice with different values) is unknown: `None`, never a guess.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, cast

from tree_sitter import Node

from gpulint.frontends import BackLink
from gpulint.frontends.cuda.grammar import declared_names, parser

if TYPE_CHECKING:  # the file builds its ConstEval (CudaFile.consts), not the other way round
    from gpulint.frontends.cuda.file import CudaFile

MAX_DEPTH = 24
VALUE_LIMIT = 1 << 64  # folded values stay within what a 64-bit C integer can hold
_INT = re.compile(r"^(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)([uUlLzZ]*)$")
_OPS = {
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
    "/": lambda a, b: None if b == 0 else abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1),
    "%": lambda a, b: (
        None if b == 0 else a - b * (abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1))
    ),
    "<<": lambda a, b: a << b if 0 <= b < 64 else None,
    ">>": lambda a, b: a >> b if 0 <= b < 64 else None,
    "&": lambda a, b: a & b,
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "<": lambda a, b: int(a < b),
    ">": lambda a, b: int(a > b),
    "<=": lambda a, b: int(a <= b),
    ">=": lambda a, b: int(a >= b),
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "&&": lambda a, b: int(bool(a) and bool(b)),
    "||": lambda a, b: int(bool(a) or bool(b)),
}
# Sizes in bytes of element types of `__shared__` arrays.
TYPE_SIZES = {
    "char": 1,
    "signed char": 1,
    "unsigned char": 1,
    "int8_t": 1,
    "uint8_t": 1,
    "bool": 1,
    "short": 2,
    "unsigned short": 2,
    "int16_t": 2,
    "uint16_t": 2,
    "half": 2,
    "__half": 2,
    "__nv_bfloat16": 2,
    "nv_bfloat16": 2,
    "at::Half": 2,
    "at::BFloat16": 2,
    "c10::Half": 2,
    "int": 4,
    "unsigned": 4,
    "unsigned int": 4,
    "int32_t": 4,
    "uint32_t": 4,
    "float": 4,
    "half2": 4,
    "__half2": 4,
    "__nv_bfloat162": 4,
    "long": 8,
    "unsigned long": 8,
    "long long": 8,
    "unsigned long long": 8,
    "int64_t": 8,
    "uint64_t": 8,
    "size_t": 8,
    "double": 8,
    "float2": 8,
    "int2": 8,
    "uint2": 8,
    "float4": 16,
    "int4": 16,
    "uint4": 16,
    "double2": 16,
}


class Unknown(Exception):
    pass


class ConstEval:
    file: BackLink[CudaFile] = BackLink()  # weak: the file caches this (CudaFile.consts)

    def __init__(self, file: CudaFile):
        self.file = file

    # -- what the file defines ---------------------------------------------------------------
    @functools.cached_property
    def defines(self) -> dict[str, list[str | None]]:
        """#define NAME text (None for function-like macros and empty defines)."""
        out: dict[str, list[str | None]] = {}
        f = self.file
        for node in f.nodes("preproc_def"):
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name is not None:
                out.setdefault(f.node_text(name), []).append(
                    f.node_text(value).strip() or None if value else None
                )
        for node in f.nodes("preproc_function_def"):
            name = node.child_by_field_name("name")
            if name is not None:
                out.setdefault(f.node_text(name), []).append(None)
        return out

    @functools.cached_property
    def declarations(self) -> dict[str, list[Node]]:
        """name -> declarations (declaration / field_declaration nodes) that declare it."""
        out: dict[str, list[Node]] = {}
        for kind in ("declaration", "field_declaration"):
            for node in self.file.nodes(kind):
                for name in declared_names(node):
                    out.setdefault(name, []).append(node)
        return out

    @functools.cached_property
    def enumerators(self) -> dict[str, list[Node]]:
        out: dict[str, list[Node]] = {}
        for node in self.file.nodes("enumerator"):
            name = node.child_by_field_name("name")
            if name is not None:
                out.setdefault(self.file.node_text(name), []).append(node)
        return out

    @functools.cached_property
    def mutations(self) -> dict[str, list[int]]:
        """name -> byte offsets where it is assigned, incremented, or has its address taken."""
        out: dict[str, list[int]] = {}
        f = self.file

        def target_name(n: Node | None) -> str | None:
            while n is not None and n.type in (
                "field_expression",
                "subscript_expression",
                "parenthesized_expression",
            ):
                n = n.child_by_field_name("argument") or (
                    n.named_children[0] if n.named_children else None
                )
            return f.node_text(n) if n is not None and n.type == "identifier" else None

        for node in f.nodes("assignment_expression"):
            if (name := target_name(node.child_by_field_name("left"))) is not None:
                out.setdefault(name, []).append(node.start_byte)
        for node in f.nodes("update_expression"):
            if (name := target_name(node.child_by_field_name("argument"))) is not None:
                out.setdefault(name, []).append(node.start_byte)
        for node in f.nodes("pointer_expression"):
            if node.children and node.children[0].type == "&":
                if (name := target_name(node.child_by_field_name("argument"))) is not None:
                    out.setdefault(name, []).append(node.start_byte)
        return out

    # -- evaluation --------------------------------------------------------------------------
    def value(self, node: Node | None, at: Node | None = None) -> int | None:
        """The integer value of expression `node` (names looked up from `at`), or None."""
        if node is None:
            return None
        try:
            v = self._value(node, at or node, 0)
        except (Unknown, RecursionError, OverflowError, ValueError):
            return None
        return v if isinstance(v, int) else None

    def threads(self, node: Node | None, at: Node | None = None) -> int | None:
        """Threads in a block given as an int or a dim3 (product of its dimensions), or None."""
        if node is None:
            return None
        try:
            dims = self._dims(node, at or node, 0)
        except (Unknown, RecursionError, OverflowError, ValueError):
            return None
        if dims is None:
            return None
        total = 1
        for d in dims:
            total *= d
        return total

    def dims(self, node: Node | None, at: Node | None = None) -> tuple[int, ...] | None:
        """The dimensions of a grid or block given as an int or a dim3, or None."""
        if node is None:
            return None
        try:
            return self._dims(node, at or node, 0)
        except (Unknown, RecursionError, OverflowError, ValueError):
            return None

    def _dims(self, node: Node | None, at: Node, depth: int) -> tuple[int, ...] | None:
        if node is None or depth > MAX_DEPTH:
            raise Unknown
        f = self.file
        if node.type == "parenthesized_expression" and node.named_children:
            return self._dims(node.named_children[0], at, depth + 1)
        if node.type == "call_expression" and f.call_name(node) == "dim3":
            return self._dim3_args(node.child_by_field_name("arguments"), at, depth)
        if (
            node.type == "compound_literal_expression"
            and f.node_text(node.child_by_field_name("type")) == "dim3"
        ):
            return self._dim3_args(node.child_by_field_name("value"), at, depth)
        if node.type == "identifier":
            decl = self._local_declaration(f.node_text(node), at)
            if decl is not None and f.node_text(decl.child_by_field_name("type")) == "dim3":
                return self._dim3_declarator(decl, f.node_text(node), at, depth)
        return (self._value(node, at, depth + 1),)

    def _dim3_args(self, args: Node | None, at: Node, depth: int) -> tuple[int, ...]:
        if args is None:
            raise Unknown
        values = [self._value(a, at, depth + 1) for a in args.named_children if a.type != "comment"]
        if not 1 <= len(values) <= 3:
            raise Unknown
        return tuple(values)

    def _dim3_declarator(
        self, decl: Node, name: str, at: Node, depth: int
    ) -> tuple[int, ...] | None:
        for d in decl.children_by_field_name("declarator"):
            if d.type == "identifier" and self.file.node_text(d) == name:
                raise Unknown  # `dim3 block;` then fields set: not followed
            if (
                d.type == "init_declarator"
                and self.file.node_text(d.child_by_field_name("declarator")) == name
            ):
                value = d.child_by_field_name("value")
                if value is None:  # `dim3 block(16, 16)`
                    args = next(
                        (
                            c
                            for c in d.named_children
                            if c.type in ("argument_list", "initializer_list")
                        ),
                        None,
                    )
                    return self._dim3_args(args, at, depth)
                if value.type in ("argument_list", "initializer_list"):
                    return self._dim3_args(value, at, depth)
                return self._dims(value, decl, depth + 1)
        raise Unknown

    def _value(self, node: Node | None, at: Node, depth: int) -> int:
        if node is None or depth > MAX_DEPTH or node.has_error:
            raise Unknown
        f = self.file
        t = node.type
        if t == "number_literal":
            text = f.node_text(node).replace("'", "")
            m = _INT.match(text)
            if not m:
                raise Unknown
            digits = m.group(1)
            if len(digits) > 24:
                raise Unknown  # wider than 64 bits in any base: not a size
            if digits.startswith(("0x", "0X", "0b", "0B")):
                return int(digits, 0)
            if len(digits) > 1 and digits.startswith("0"):
                return int(digits, 8)
            return int(digits)
        if t in ("parenthesized_expression",) and node.named_children:
            return self._value(node.named_children[-1], at, depth + 1)
        if t == "binary_expression":
            op = node.child_by_field_name("operator")
            fn = _OPS.get(op.type if op is not None else "")
            if fn is None:
                raise Unknown
            a = self._value(node.child_by_field_name("left"), at, depth + 1)
            b = self._value(node.child_by_field_name("right"), at, depth + 1)
            r = fn(a, b)
            if r is None or not -VALUE_LIMIT < r < VALUE_LIMIT:
                raise Unknown  # beyond any launch size: `x*x*x*...` must not grow without end
            return r
        if t == "unary_expression":
            op = node.child_by_field_name("operator")
            v = self._value(node.child_by_field_name("argument"), at, depth + 1)
            kind = op.type if op is not None else ""
            if kind == "-":
                return -v
            if kind == "+":
                return v
            if kind == "~":
                return ~v
            if kind == "!":
                return int(not v)
            raise Unknown
        if t == "conditional_expression":
            cond = self._value(node.child_by_field_name("condition"), at, depth + 1)
            branch = "consequence" if cond else "alternative"
            return self._value(node.child_by_field_name(branch), at, depth + 1)
        if t == "cast_expression":
            return self._value(node.child_by_field_name("value"), at, depth + 1)
        if t == "call_expression":
            name = f.call_name(node)
            args = node.child_by_field_name("arguments")
            values = [] if args is None else [a for a in args.named_children if a.type != "comment"]
            fn_node = node.child_by_field_name("function")
            fn_text = f.node_text(fn_node)
            if (
                name in ("static_cast", "int", "unsigned", "size_t", "int64_t", "int32_t")
                and len(values) == 1
            ):
                return self._value(values[0], at, depth + 1)
            if (
                fn_text
                in ("min", "max", "std::min", "std::max", "cuda::std::min", "cuda::std::max")
                and len(values) == 2
            ):
                a, b = (self._value(v, at, depth + 1) for v in values)
                return min(a, b) if name == "min" else max(a, b)
            raise Unknown
        if t == "identifier":
            return self._name(f.node_text(node), at, depth + 1)
        if t == "true":
            return 1
        if t == "false":
            return 0
        raise Unknown

    # -- names -------------------------------------------------------------------------------
    def _name(self, name: str, at: Node, depth: int) -> int:
        f = self.file
        function = f.enclosing_function(at)
        if function is not None:
            if name in f.parameter_names(function):
                raise Unknown
        if name in f.template_parameter_names(at):
            raise Unknown
        local = self._local_declaration(name, at)
        if local is not None:
            return self._declared_value(local, name, depth)
        candidates: list[int] = []
        for decl in self.declarations.get(name, ()):
            if f.enclosing_function(decl) is None and _is_const(f, decl):
                candidates.append(self._declared_value(decl, name, depth))
            elif f.enclosing_function(decl) is None:
                raise Unknown  # a mutable global
        for enum in self.enumerators.get(name, ()):
            value = enum.child_by_field_name("value")
            if value is None:
                raise Unknown
            candidates.append(self._value(value, enum, depth + 1))
        for text in self.defines.get(name, ()):
            if text is None:
                raise Unknown
            candidates.append(self._define_value(text, depth))
        if not candidates or len(set(candidates)) != 1:
            raise Unknown
        return candidates[0]

    def _local_declaration(self, name: str, at: Node) -> Node | None:
        """The one declaration of `name` in the function around `at`, when there is exactly one
        and the name is const or never assigned afterwards; raises Unknown when ambiguous."""
        f = self.file
        function = f.enclosing_function(at)
        if function is None:
            return None
        inside = [
            d
            for d in self.declarations.get(name, ())
            if function.start_byte <= d.start_byte < function.end_byte
        ]
        if not inside:
            return None
        if len(inside) > 1:
            raise Unknown
        decl = inside[0]
        if decl.start_byte > at.start_byte or f.broken(decl):
            raise Unknown
        if not _is_const(f, decl):
            changes = [
                b
                for b in self.mutations.get(name, ())
                if function.start_byte <= b < function.end_byte and b > decl.end_byte
            ]
            if changes:
                raise Unknown
        return decl

    def _declared_value(self, decl: Node, name: str, depth: int) -> int:
        f = self.file
        for d in decl.children_by_field_name("declarator"):
            if (
                d.type == "init_declarator"
                and f.node_text(d.child_by_field_name("declarator")) == name
            ):
                value = d.child_by_field_name("value")
                if value is not None and value.type in ("initializer_list", "argument_list"):
                    items = [c for c in value.named_children if c.type != "comment"]
                    if len(items) != 1:
                        raise Unknown
                    value = items[0]
                if f.node_text(decl.child_by_field_name("type")) == "dim3":
                    raise Unknown
                return self._value(value, decl, depth + 1)
        # `static constexpr int kThreads = 128;` inside a class: field_declaration with default_value
        value = decl.child_by_field_name("default_value")
        if value is not None:
            return self._value(value, decl, depth + 1)
        raise Unknown

    @functools.cache  # noqa: B019 - one evaluator per file
    def _define_value_cached(self, text: str) -> int | None:
        snippet = f"int __gpulint_value = ({text});".encode()
        tree = parser().parse(snippet)
        if tree.root_node.has_error:
            return None
        init = tree.root_node.named_children[0].child_by_field_name("declarator")
        value = init.child_by_field_name("value") if init is not None else None
        if value is None:
            return None
        snippet_eval = _SnippetEval(self, snippet)
        try:
            return snippet_eval._value(value, value, 0)
        except (Unknown, RecursionError, OverflowError, ValueError):
            return None

    def _define_value(self, text: str, depth: int) -> int:
        if depth > MAX_DEPTH:
            raise Unknown
        v = self._define_value_cached(text)
        if v is None:
            raise Unknown
        return v

    # -- array sizes -------------------------------------------------------------------------
    def array_bytes(self, decl: Node) -> int | None:
        """Bytes of a statically sized array declaration (`__shared__ float s[32][33];`), or None."""
        f = self.file
        type_text = " ".join(f.node_text(decl.child_by_field_name("type")).split())
        element = TYPE_SIZES.get(type_text)
        if element is None:
            return None
        total = 0
        for declarator in decl.children_by_field_name("declarator"):
            d: Node | None = declarator
            if declarator.type == "init_declarator":
                d = declarator.child_by_field_name("declarator")
            count = 1
            seen = False
            while d is not None and d.type == "array_declarator":
                size = d.child_by_field_name("size")
                v = self.value(size, decl)
                if v is None or v <= 0:
                    return None
                count *= v
                seen = True
                d = d.child_by_field_name("declarator")
            if not seen or d is None or d.type != "identifier":
                return None
            total += count * element
        return total


class _SnippetEval(ConstEval):
    """Evaluates a #define's text parsed alone; names in it resolve at file level."""

    def __init__(self, outer: ConstEval, data: bytes):
        self.outer = outer
        self.snippet = _SnippetFile(outer.file, data)  # held here: `file` is a weak link
        # A snippet answers the few questions evaluating a #define asks of its file.
        self.file = cast("CudaFile", self.snippet)

    def _name(self, name: str, at: Node, depth: int) -> int:
        outer = self.outer
        candidates = []
        for decl in outer.declarations.get(name, ()):
            if outer.file.enclosing_function(decl) is None and _is_const(outer.file, decl):
                candidates.append(outer._declared_value(decl, name, depth))
            else:
                raise Unknown
        for text in outer.defines.get(name, ()):
            if text is None:
                raise Unknown
            candidates.append(outer._define_value(text, depth + 1))
        if not candidates or len(set(candidates)) != 1:
            raise Unknown
        return candidates[0]


class _SnippetFile:
    def __init__(self, outer, data: bytes):
        self.outer = outer
        self.data = data

    def node_text(self, node):
        return (
            ""
            if node is None
            else self.data[node.start_byte : node.end_byte].decode("utf-8", "replace")
        )

    def call_name(self, call):
        fn = call.child_by_field_name("function")
        return self.node_text(fn).split("::")[-1] if fn is not None else None

    def enclosing_function(self, node):
        return None


def _is_const(f, decl: Node) -> bool:
    for child in decl.children:
        if child.type == "type_qualifier" and f.node_text(child) in ("const", "constexpr"):
            return True
        if child.type in ("init_declarator", "function_declarator"):
            break
    return False
