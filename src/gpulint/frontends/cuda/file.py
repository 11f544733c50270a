"""A parsed CUDA/C++ file and what rules ask of it, each part computed only when first asked."""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator

from tree_sitter import Node, QueryCursor, Tree

from gpulint.frontends import Memo
from gpulint.frontends.cuda.grammar import COMMON_TYPES, LANGUAGE, declared_names, query
from gpulint.source import SourceText, is_driver_path, is_test_path

FUNCTION_TYPES = ("function_definition",)
LOOP_TYPES = ("for_statement", "for_range_loop", "while_statement", "do_statement")
_STATEMENT_CONTAINERS = {
    "compound_statement",
    "translation_unit",
    "field_declaration_list",
    "declaration_list",
    # a branch of `#if`/`#ifdef` (a header guard) holds statements as the file does: a broken
    # one does not take the whole branch with it
    "preproc_if",
    "preproc_ifdef",
    "preproc_else",
    "preproc_elif",
    "preproc_elifdef",
}
_PREPROC_BRANCHES = (
    "preproc_if",
    "preproc_ifdef",
    "preproc_else",
    "preproc_elif",
    "preproc_elifdef",
)
_MAIN = re.compile(r"(?m)^\s*(?:int|void|auto)\s+main\s*\(")
_TORCH_INCLUDE = re.compile(r"^[<\"](torch|ATen|c10)/")


class CudaFile:
    language = "cuda"

    def __init__(self, display_path: str, text: str, data: bytes, tree: Tree, project=None):
        self.display_path = display_path
        self._project = project  # the checked tree's CudaProject; None: this file alone
        self.text = text
        self.data = data  # the UTF-8 bytes tree-sitter parsed; node offsets index these
        self.source = SourceText(text)
        self.tree = tree
        self.root: Node = tree.root_node
        self.ascii = len(data) == len(text)
        self.memo = Memo()  # what rules and helpers compute once per file

    # -- nodes -------------------------------------------------------------------------------
    def captures(self, *types: str) -> dict[str, list[Node]]:
        """Nodes of the named types, in source order, found by a tree-sitter query run in C."""
        out: dict[str, list[Node]] = {}
        missing = [t for t in types if t not in COMMON_TYPES]
        if len(missing) < len(types):
            common = self._common
            for t in types:
                if t in common or t in COMMON_TYPES:
                    out[t] = common.get(t, [])
        if missing:
            out.update(self._run_query(missing))
        return out

    @functools.cached_property
    def _common(self) -> dict[str, list[Node]]:
        return self._run_query(COMMON_TYPES)

    def _run_query(self, types) -> dict[str, list[Node]]:
        cursor = QueryCursor(query(types))
        found = cursor.captures(self.root)
        out: dict[str, list[Node]] = {t: [] for t in types}
        for nodes in found.values():
            for node in nodes:
                out.setdefault(node.type, []).append(node)
        for nodes in out.values():
            nodes.sort(key=lambda n: n.start_byte)
        return out

    def nodes(self, node_type: str) -> list[Node]:
        return self.captures(node_type)[node_type]

    @functools.cached_property
    def error_ranges(self) -> list[tuple[int, int]]:
        """Byte ranges of ERROR nodes, merged, sorted: regions the grammar could not make sense of."""
        if not self.root.has_error:
            return []
        return _merge((n.start_byte, n.end_byte) for n in self.captures("ERROR")["ERROR"])

    @property
    def has_errors(self) -> bool:
        return self.root.has_error

    def in_error(self, node: Node) -> bool:
        """True when `node` lies inside (or overlaps) a region tree-sitter could not parse."""
        return _overlaps(self.error_ranges, node.start_byte, node.end_byte)

    @functools.cached_property
    def _bad_ranges(self) -> list[tuple[int, int]]:
        """ERROR regions and the places of missing tokens other than `;`, merged. A missing
        `;` (after a lambda in a dispatch macro, a macro call written without one) leaves the
        statement understood; a missing `)` or `}` does not."""
        return _bad_ranges(self.root, self.error_ranges)

    @functools.cached_property
    def _macro_bad_ranges(self) -> list[tuple[int, int]]:
        tree = self._macro_tree
        if tree is None or not tree.root_node.has_error:
            return []
        errors = QueryCursor(query(("ERROR",))).captures(tree.root_node).get("node", [])
        return _bad_ranges(tree.root_node, _merge((n.start_byte, n.end_byte) for n in errors))

    def broken(self, node: Node) -> bool:
        """A node rules must not judge: it contains a parse error, sits in one, or the statement
        around it does (a launch parsed fine inside a function body the grammar misread)."""
        if self.in_error(node):
            return True
        in_macro = self._in_macro(node)
        if not in_macro and not self.root.has_error:
            return False

        ranges = self._macro_bad_ranges if in_macro else self._bad_ranges

        def bad(n: Node) -> bool:
            return n.has_error and _overlaps(ranges, n.start_byte, n.end_byte)

        if bad(node):
            return True
        for a in self.ancestors(node):
            if a.type in _STATEMENT_CONTAINERS:
                return False
            if bad(a):
                return True
        return False

    @functools.cached_property
    def lines_not_analysed(self) -> list[int]:
        """1-based lines of the statements the rules skip because tree-sitter could not parse
        them (the statement around each ERROR node), sorted."""
        lines: set[int] = set()
        tree = self._macro_tree
        if tree is not None and self._macro_bad_ranges:
            for start, end in self._macro_ranges:  # a launching #define that does not parse
                if _overlaps(self._macro_bad_ranges, start, end):
                    first = self.source.position(self.char_offset(start))[0]
                    last = self.source.position(self.char_offset(end - 1))[0]
                    lines.update(range(first, last + 1))
        if not self.root.has_error:
            return sorted(lines)
        seen: set[int] = set()
        for start, end in self._bad_ranges:
            node = self.root.descendant_for_byte_range(start, max(start, end - 1))
            if node is None:  # a range inside the root always has a node
                continue
            region = node
            for a in self.ancestors(node):
                if a.type in _STATEMENT_CONTAINERS:
                    break
                region = a
            if region is not None and region.start_byte not in seen:
                seen.add(region.start_byte)
                lines |= self._skipped_lines(region)
        return sorted(lines)

    def _skipped_lines(self, statement: Node) -> set[int]:
        """Lines of a broken statement the rules skip: all of it but the clean statements of
        blocks nested in it (a lambda body, an `if` block), which `broken` still lets through."""
        lines = set(range(statement.start_point[0] + 1, statement.end_point[0] + 2))
        stack = list(statement.children)
        while stack:
            node = stack.pop()
            if node.type not in _STATEMENT_CONTAINERS:
                stack.extend(node.children)
                continue
            for child in node.named_children:
                lines -= set(range(child.start_point[0] + 1, child.end_point[0] + 2))
                if _overlaps(self._bad_ranges, child.start_byte, child.end_byte):
                    lines |= self._skipped_lines(child)
        return lines

    # -- macros ------------------------------------------------------------------------------
    @functools.cached_property
    def _macro_tree(self) -> Tree | None:
        """The bodies of `#define`s that launch kernels, parsed: each body becomes
        `void NAME(){ BODY }` at its own byte offsets (the `void NAME(){` written over the
        `#define NAME(...)` head), so positions, `node_text` and constant folding work as in
        the file itself, and a launch in a macro is judged like one in a function named after
        the macro. A body that does not parse as statements (it defines functions: an
        instantiation macro) is parsed as file-scope code instead."""
        self._macro_ranges: list[tuple[int, int]] = []
        self.macro_names: dict[int, str] = {}  # start byte of a statement macro -> its name
        if b"<<<" not in self.data:
            return None
        defs = []
        for d in self.nodes("preproc_function_def") + self.nodes("preproc_def"):
            value = d.child_by_field_name("value")
            name = d.child_by_field_name("name")
            if value is not None and name is not None:
                if b"<<<" in self.data[value.start_byte : value.end_byte]:
                    defs.append((d, value, name))
        if not defs:
            return None
        from gpulint.frontends.cuda.grammar import parser

        tree = parser().parse(self._macro_buffer(defs, set()))
        bad = _bad_ranges(tree.root_node, [])
        errors = QueryCursor(query(("ERROR",))).captures(tree.root_node).get("node", [])
        bad = _merge(bad + [(n.start_byte, n.end_byte) for n in errors])
        failed = {
            fn.start_byte
            for fn in tree.root_node.named_children
            if fn.type == "function_definition"
            and fn.has_error
            and _overlaps(bad, fn.start_byte, fn.end_byte)
        }
        if failed:
            tree = parser().parse(self._macro_buffer(defs, failed))
        self._macro_ranges.sort()
        return tree

    def _macro_buffer(self, defs, file_scope: set[int]) -> bytes:
        buf = bytearray(b" " * (len(self.data) + 2))
        self._macro_ranges.clear()
        self.macro_names.clear()
        starts = {d.start_byte for d, _, _ in defs}
        for d, value, name in defs:
            head = b"void " + self.data[name.start_byte : name.end_byte] + b"(){"
            statements = d.start_byte not in file_scope
            if statements and len(head) > value.start_byte - d.start_byte:
                continue
            body = self.data[value.start_byte : value.end_byte]
            # line continuations become spaces; `a##b` one identifier, `#x` a plain token
            body = body.replace(b"\\\r\n", b"  \n").replace(b"\\\n", b" \n")
            body = re.sub(rb"[ \t]*##[ \t]*", lambda m: b"_" * len(m.group(0)), body)
            body = re.sub(rb"(?<![\w\"'])#(?=[A-Za-z_])", b" ", body)
            buf[value.start_byte : value.end_byte] = body
            self._macro_ranges.append((d.start_byte, value.end_byte + 1))
            if not statements:
                continue
            buf[d.start_byte : d.start_byte + len(head)] = head
            end = value.end_byte
            if body.rstrip()[-1:] not in (b";", b"}") and end + 1 not in starts:
                buf[end : end + 2] = b";}"  # `k<<<g, b>>>(x)` written to be used as `M(x);`
            else:
                buf[end] = ord("}")
            self.macro_names[d.start_byte] = self.node_text(name)
        return bytes(buf)

    def macro_name(self, function: Node) -> str | None:
        """The macro a statement-macro wrapper `void NAME(){...}` stands for, else None."""
        if not self._in_macro(function):
            return None
        return self.macro_names.get(function.start_byte)

    def _in_macro(self, node: Node) -> bool:
        """`node` belongs to a parsed macro body (the file's own tree has only text there)."""
        if self._macro_tree is None:
            return False
        i = bisect.bisect_right(self._macro_ranges, (node.start_byte, float("inf"))) - 1
        return i >= 0 and node.start_byte < self._macro_ranges[i][1]

    @functools.cached_property
    def macro_functions(self) -> list[Node]:
        """The `void NAME(){...}` each launching macro body was parsed as."""
        tree = self._macro_tree
        if tree is None:
            return []
        return [n for n in tree.root_node.named_children if n.type == "function_definition"]

    @functools.cached_property
    def macro_calls(self) -> list[Node]:
        tree = self._macro_tree
        if tree is None:
            return []
        cursor = QueryCursor(query(("call_expression",)))
        nodes = cursor.captures(tree.root_node).get("node", [])
        return sorted(nodes, key=lambda n: n.start_byte)

    @functools.cached_property
    def all_calls(self) -> list[Node]:
        """Call expressions of the file and of its launching macro bodies, in source order."""
        calls = self.nodes("call_expression")
        if self.macro_calls:
            calls = sorted(calls + self.macro_calls, key=lambda n: n.start_byte)
        return calls

    @functools.cached_property
    def launches(self) -> list[Node]:
        """Kernel launches (`k<<<...>>>(...)`) the rules can judge, macro bodies included."""
        return [
            c for c in self.all_calls if self.launch_config(c) is not None and not self.broken(c)
        ]

    # -- the project -------------------------------------------------------------------------
    @functools.cached_property
    def own_checks(self) -> frozenset[str]:
        """The file's checking macros and helpers, and its functions that end a launch with a
        check (`lasterror.checking_launchers`)."""
        from gpulint.frontends.cuda.checknames import file_checks

        own = frozenset(file_checks(self))
        return own | self.checking_launchers(own)

    def checking_launchers(self, own: frozenset[str] = frozenset()) -> frozenset[str]:
        from gpulint.frontends.cuda.lasterror import launch_helpers

        return frozenset(launch_helpers(self, own)[0])

    @property
    def project(self):
        """The CudaProject this file is judged in (frontends/cuda/project.py): the checked tree's
        when the engine built one, else one made of this file's own facts."""
        if self._project is None:
            from gpulint.frontends.cuda.factstore import file_facts
            from gpulint.frontends.cuda.project import CudaProject, merge

            # (the facts' own questions meanwhile see an empty project, not this one again)
            self._project = CudaProject()
            self._project = merge({self.display_path: file_facts(self)})
        return self._project

    @property
    def check_names(self) -> frozenset[str]:
        """The file's and the project's own error-checking macros and helpers."""
        if self._project is None:
            return self.own_checks
        return self.own_checks | self._project.checks

    # -- structure ---------------------------------------------------------------------------
    @staticmethod
    def parent(node: Node) -> Node | None:
        return node.parent

    @staticmethod
    def ancestors(node: Node) -> Iterator[Node]:
        parent = node.parent
        while parent is not None:
            yield parent
            parent = parent.parent

    def enclosing_function(self, node: Node) -> Node | None:
        """The nearest enclosing function definition (lambdas are not functions here)."""
        return next((a for a in self.ancestors(node) if a.type == "function_definition"), None)

    def node_text(self, node: Node | None) -> str:
        if node is None:
            return ""
        return self.data[node.start_byte : node.end_byte].decode("utf-8", errors="replace")

    def function_qualifiers(self, function: Node) -> set[str]:
        """CUDA execution-space qualifiers written on a function: __global__, __device__, __host__."""
        found = set()
        for child in function.children:
            if child.type in ("__global__", "__device__", "__host__"):
                found.add(child.type)
            elif child.type in ("function_declarator", "compound_statement"):
                break
            elif child.type in (
                "type_qualifier",
                "storage_class_specifier",
                "attribute_declaration",
            ):
                text = self.node_text(child)
                for q in ("__global__", "__device__", "__host__"):
                    if q in text:
                        found.add(q)
        return found

    def is_device_function(self, function: Node | None) -> bool:
        """A kernel or a device function (including `__host__ __device__`)."""
        if function is None:
            return False
        return bool(self.function_qualifiers(function) & {"__global__", "__device__"})

    def is_host_function(self, function: Node | None) -> bool:
        """Host code: a function with no execution-space qualifier, or one marked __host__ only."""
        if function is None:
            return False
        quals = self.function_qualifiers(function)
        return not (quals & {"__global__", "__device__"})

    @staticmethod
    def function_name_node(function: Node) -> Node | None:
        declarator = function.child_by_field_name("declarator")
        while declarator is not None and declarator.type != "function_declarator":
            declarator = declarator.child_by_field_name("declarator")
        return declarator

    def parameter_names(self, function: Node) -> set[str]:
        declarator = self.function_name_node(function)
        names: set[str] = set()
        if declarator is None:
            return names
        params = declarator.child_by_field_name("parameters")
        if params is None:
            return names
        for param in params.named_children:
            names.update(declared_names(param))
        return names

    def template_parameter_names(self, node: Node) -> set[str]:
        names: set[str] = set()
        for a in self.ancestors(node):
            if a.type == "template_declaration":
                params = a.child_by_field_name("parameters")
                if params is not None:
                    for p in params.named_children:
                        for child in p.named_children:
                            if child.type in ("identifier", "type_identifier"):
                                names.add(self.node_text(child))
        return names

    # -- calls and launches ------------------------------------------------------------------
    def call_name(self, call: Node) -> str | None:
        """The called name, unqualified: `cudaMalloc`, `k` for `ns::k<T><<<...>>>`, None if not a name."""
        fn = call.child_by_field_name("function")
        while fn is not None:
            if fn.type in ("identifier", "field_identifier"):
                return self.node_text(fn)
            if fn.type == "template_function":
                fn = fn.child_by_field_name("name")
            elif fn.type == "qualified_identifier":
                fn = fn.child_by_field_name("name")
            else:
                return None
        return None

    @staticmethod
    def launch_config(call: Node) -> list[Node] | None:
        """The `<<<grid, block, smem, stream>>>` expressions of a kernel launch; None if not one."""
        for child in call.children:
            if child.type == "kernel_call_syntax":
                return list(child.named_children)
        return None

    @functools.cached_property
    def includes(self) -> list[str]:
        out = []
        for inc in self.nodes("preproc_include"):
            path = inc.child_by_field_name("path")
            if path is not None:
                out.append(self.node_text(path).strip())
        return out

    @functools.cached_property
    def is_torch_extension(self) -> bool:
        """The file includes torch, ATen or c10 headers (a PyTorch extension)."""
        return any(_TORCH_INCLUDE.match(i) for i in self.includes)

    @property
    def includes_torch(self) -> bool:
        """A PyTorch extension's file: it includes torch, ATen or c10 headers itself, or a
        header of the checked tree that does (`#include "common.h"`; the project's
        `torch_by_header`)."""
        if self.is_torch_extension:
            return True
        by_header = getattr(self._project, "torch_by_header", ())
        return bool(by_header) and self.display_path.replace("\\", "/") in by_header

    @functools.cached_property
    def torch_is_conditional(self) -> bool:
        """Every torch/ATen/c10 `#include` sits in an `#if` branch (a header guard aside): the
        file also builds without PyTorch (a benchmark binary beside the extension), so a
        suggested check must not need it."""
        found = False
        for inc in self.nodes("preproc_include"):
            path = inc.child_by_field_name("path")
            if path is None or not _TORCH_INCLUDE.match(self.node_text(path).strip()):
                continue
            found = True
            if not any(
                a.type in _PREPROC_BRANCHES and not self._is_guard(a) for a in self.ancestors(inc)
            ):
                return False
        return found

    def _is_guard(self, branch: Node) -> bool:
        """`#ifndef X` directly followed by `#define X`: a header guard, not a build option."""
        name = branch.child_by_field_name("name")
        if branch.type != "preproc_ifdef" or name is None:
            return False
        body = [c for c in branch.named_children if c.type != "comment" and c != name]
        first = body[0] if body else None
        defined = first.child_by_field_name("name") if first is not None else None
        return (
            first is not None
            and first.type == "preproc_def"
            and defined is not None
            and self.node_text(defined) == self.node_text(name)
        )

    @functools.cached_property
    def is_test(self) -> bool:
        return is_test_path(self.display_path)

    @functools.cached_property
    def is_driver(self) -> bool:
        """A test, benchmark, demo or example by its path (see `is_driver_path`)."""
        return is_driver_path(self.display_path)

    @functools.cached_property
    def is_program(self) -> bool:
        """The file defines `main`: a standalone program (a sample, a test or benchmark driver),
        not library code other programs call on their hot paths."""
        return bool(_MAIN.search(self.text))

    @functools.cached_property
    def main_ranges(self) -> list[tuple[int, int]]:
        """Byte ranges of `main` itself: each definition outside any `#if`, else the `#if`
        branch that holds one (as `program_ranges`, without the rest of the file)."""
        spans = []
        for fn in self.nodes("function_definition"):
            name = self.function_name_node(fn)
            name = name.child_by_field_name("declarator") if name is not None else None
            if name is None or self.node_text(name) != "main":
                continue
            branch = next((a for a in self.ancestors(fn) if a.type in _PREPROC_BRANCHES), None)
            if branch is None:
                spans.append((fn.start_byte, fn.end_byte))
                continue
            alternative = branch.child_by_field_name("alternative")
            end = alternative.start_byte if alternative is not None else branch.end_byte
            spans.append((branch.start_byte, end))
        return _merge(spans)

    def run_by_main(self, node: Node) -> bool:
        """`node` is what a standalone program runs: in `main` (see `main_ranges`), or in a
        function of this file called only from there, two levels down (a harness's loader,
        timer or checker). Not a function beside `main` that it never calls: library code
        other programs link (`in_program` takes the whole file)."""
        return bool(self.main_ranges) and self._in_program(node, 0, self.main_ranges)

    @functools.cached_property
    def program_ranges(self) -> list[tuple[int, int]]:
        """Byte ranges of standalone-program code: the whole file when it defines `main` outside
        any `#if`, else each `#if`/`#ifdef`/`#else` branch that holds a `main` definition (a
        `#ifdef RUN_MAIN` benchmark path beside the extension code)."""
        spans = []
        for fn in self.nodes("function_definition"):
            name = self.function_name_node(fn)
            name = name.child_by_field_name("declarator") if name is not None else None
            if name is None or self.node_text(name) != "main":
                continue
            branch = next((a for a in self.ancestors(fn) if a.type in _PREPROC_BRANCHES), None)
            if branch is None:
                return [(0, len(self.data))]
            alternative = branch.child_by_field_name("alternative")
            end = alternative.start_byte if alternative is not None else branch.end_byte
            spans.append((branch.start_byte, end))
        return _merge(spans)

    def in_program(self, node: Node) -> bool:
        """`node` is standalone-program code: in a program's `main` branch (see
        `program_ranges`), or in a function of this file called only from there (a harness's
        loader, timer or checker)."""
        return self.in_program_code(node) or self.is_harness_header

    def in_program_code(self, node: Node) -> bool:
        """`in_program` judged from this file alone (what the project's facts record)."""
        return bool(self.program_ranges) and self._in_program(node, 0, self.program_ranges)

    @functools.cached_property
    def is_harness_header(self) -> bool:
        """A header the project `#include`s only from standalone programs' code (see
        `program_ranges`): their timing and checking helpers."""
        path = self.display_path.replace("\\", "/")
        return path in getattr(self.project, "harness_headers", ())

    def _in_program(self, node: Node, depth: int, ranges: list[tuple[int, int]]) -> bool:
        if _overlaps(ranges, node.start_byte, node.end_byte):
            return True
        function = self.enclosing_function(node)
        declarator = self.function_name_node(function) if function is not None else None
        name = declarator.child_by_field_name("declarator") if declarator is not None else None
        if function is None or name is None or depth >= 2:
            return False
        text = self.node_text(name)
        calls = [c for c in self.all_calls if self.call_name(c) == text]
        return bool(calls) and all(
            not function.start_byte <= c.start_byte < function.end_byte
            and self._in_program(c, depth + 1, ranges)
            for c in calls
        )

    def comment_before(self, node: Node, lines: int = 3) -> str:
        """The comments on the node's line and on the few lines just above it, within its
        function (a reason given where the code is written)."""
        first = self.span(node)[0]
        function = self.enclosing_function(node)
        floor = self.span(function)[0] if function is not None else 1  # not the file's header
        out = []
        for number in range(max(floor, first - lines), first + 1):
            line = self.source.line_text(number)
            for marker in ("//", "/*"):
                if marker in line:
                    out.append(line[line.index(marker) :])
                    break
            else:
                if line.lstrip().startswith("*"):
                    out.append(line)
        return "\n".join(out)

    @functools.cached_property
    def consts(self):
        """Constant folding of launch configurations and array sizes (frontends/cuda/consts.py)."""
        from gpulint.frontends.cuda.consts import ConstEval

        return ConstEval(self)

    # -- positions ---------------------------------------------------------------------------
    def char_offset(self, byte_offset: int) -> int:
        if self.ascii:
            return byte_offset
        return len(self.data[:byte_offset].decode("utf-8", errors="ignore"))

    def span(self, node: Node) -> tuple[int, int, int | None, int | None]:
        """1-based lines and code-point columns (tree-sitter counts bytes), end exclusive."""
        line, col = self.source.position(self.char_offset(node.start_byte))
        end_line, end_col = self.source.position(self.char_offset(node.end_byte))
        return line, col, end_line, end_col

    def launch_span(self, call: Node) -> tuple[int, int, int | None, int | None]:
        """Where a finding about a kernel launch goes: `span(call)`, except that a launch whose
        `<<<` starts on a later line than its kernel's name (`k<T, BLOCK>` on one line,
        `<<<grid, block, 0, stream>>>(...)` below) starts at the `<<<`, so the reported line
        shows the launch; the end is the call's end (the whole launch expression)."""
        line, col, end_line, end_col = self.span(call)
        syntax = next((c for c in call.children if c.type == "kernel_call_syntax"), None)
        if syntax is not None and syntax.start_point[0] > call.start_point[0]:
            line, col = self.source.position(self.char_offset(syntax.start_byte))
        return line, col, end_line, end_col

    def launch_lines(self) -> dict[int, int]:
        """For each launch reported below its first line (`launch_span`), that first line ->
        the line reported: a `noqa` written on the kernel's name still suppresses it."""
        out: dict[int, int] = {}
        for call in self.all_calls:
            if self.launch_config(call) is None:
                continue
            first = self.span(call)[0]
            reported = self.launch_span(call)[0]
            if reported != first:
                out[first] = reported
        return out

    def offsets(self, node: Node) -> tuple[int, int]:
        return self.char_offset(node.start_byte), self.char_offset(node.end_byte)

    def segment(self, node: Node) -> str:
        return self.node_text(node)


def _merge(spans) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _bad_ranges(root: Node, error_ranges) -> list[tuple[int, int]]:
    spans = list(error_ranges)
    cursor = QueryCursor(_missing_query())
    for node in cursor.captures(root).get("m", []):
        if node.type != ";":
            spans.append((node.start_byte, node.end_byte + 1))
    return _merge(spans)


def _overlaps(ranges: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether [start, end) overlaps one of the sorted, merged `ranges`."""
    if not ranges:
        return False
    i = bisect.bisect_right(ranges, (start, float("inf"))) - 1
    if i >= 0 and ranges[i][1] > start:
        return True
    return i + 1 < len(ranges) and ranges[i + 1][0] < end


@functools.cache
def _missing_query():
    from tree_sitter import Query

    return Query(LANGUAGE, "(MISSING) @m")


__all__ = ["CudaFile", "LANGUAGE", "LOOP_TYPES", "declared_names"]
