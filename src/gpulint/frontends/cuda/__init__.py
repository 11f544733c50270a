"""The CUDA/C++ front-end: `.cu`, `.cuh` and C++ (`.cpp`, `.cc`, `.cxx`, `.h`, `.hpp`) that launches
kernels or calls the CUDA runtime, parsed with tree-sitter and the `tree-sitter-cuda` grammar.

Cost: a C++ file is parsed only when some enabled CUDA rule's trigger (`<<<`, `__global__`,
`__syncthreads`, `cudaMalloc`...) occurs in its bytes, so plain headers cost one byte search.
tree-sitter parses in C (a 1 MB file in about 0.2 s); rule dispatch does not walk the tree in
Python: one tree-sitter query, run in C, collects the nodes of every type some rule visits.

Rule style (mirrors the Python front-end):

- `language = "cuda"`; examples are linted as `example.cu` unless `example_filename` says otherwise.
- `visit_<node_type>(self, node, file)` generator methods, keyed by tree-sitter node type names
  of the grammar (`visit_call_expression`, `visit_declaration`, `visit_if_statement`...), called
  once per node of that type in source order; and/or `finish(self, file)` for whole-file
  judgments. They `yield self.report(file, node, ...)`.
- Nodes inside or containing a parse error (tree-sitter ERROR/MISSING nodes, common in
  macro- and template-heavy code) are never handed to a `visit_` method: the broken region is
  skipped and the rest of the file is still judged. Rules that look beyond the visited node
  use `file.broken(node)` to stay silent where the text is not understood.
- `file` is a `CudaFile` (frontends/cuda/file.py): `nodes(type)`, `parent`, `ancestors`,
  `enclosing_function`, `function_qualifiers`, `is_device_function`, `call_name(call)`,
  `launch_config(call)` (the `<<<...>>>` expressions, None when not a launch),
  `is_torch_extension`, `node_text(node)`, `span(node)` (code-point columns), and `consts`
  (frontends/cuda/consts.py: evaluation of launch configurations and array sizes from literals,
  `#define`, `constexpr`/`const` and `dim3`; None when unknown, never guessed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from gpulint.diagnostics import Finding
from gpulint.frontends import ParseError, decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.frontends.cuda.conventions import LAST_CHECK_END
from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.grammar import node_types, parser
from gpulint.frontends.cuda.syntax import blank_strings_and_comments
from gpulint.settings import Settings
from gpulint.suppression import NoqaComment

# Alignment attributes the grammar does not know (`struct __align__(16) S`, `__shared__
# __align__(128) char smem[]`): the commonest cause of ERROR nodes in real CUDA code. They are
# blanked with spaces of the same length before parsing, so every byte offset stays true.
_ATTRIBUTES = re.compile(
    rb"\b(?:__align__|__builtin_align__|__CUDA_ALIGN__|__attribute__|__launch_bounds__|__cluster_dims__|__maxnreg__)\s*\((?:[^()\n]|\((?:[^()\n]|\([^()\n]*\))*\))*\)"
)


# Execution-space macros of CUTLASS, CuTe, CK, c10 (`CUTLASS_DEVICE bool operator<(...)`) that
# the grammar cannot place before a member function: at the start of a line they are rewritten to
# the qualifier they stand for, padded to the same length (`__device__    `).
_SPACE_MACRO = re.compile(
    rb"(?m)^([ \t]*(?:template\s*<[^>\n]*>\s*)?)([A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*?_(HOST_DEVICE|DEVICE|HOST|GLOBAL)(?:_INLINE)?)(?=\s+[A-Za-z_])"
)
_QUALIFIER = {
    b"HOST_DEVICE": b"__device__",
    b"DEVICE": b"__device__",
    b"HOST": b"__host__",
    b"GLOBAL": b"__global__",
}


def _qualifier(m: re.Match) -> bytes:
    name = m.group(2)
    qualifier = _QUALIFIER[m.group(3)]
    if len(qualifier) > len(name):
        return m.group(0)
    return m.group(1) + qualifier + b" " * (len(name) - len(qualifier))


# An extended lambda, `[=] __device__ (int i) { ... }` (`__host__ __device__` too): the grammar
# has no execution space on a lambda, and the ERROR takes the statement holding it (the call
# of a launcher template that receives it). The qualifiers are blanked: the lambda parses as a
# plain one, and its call is judged as the host code it is.
_LAMBDA_SPACE = re.compile(
    rb"(\[[^\[\]\n]*\][ \t]*)((?:__(?:host|device)__[ \t]*)+)(?=\(|\{|mutable\b|->)"
)


# A macro invoked at file scope with no `;` (`TORCH_BINDING_ELU(f16, torch::kHalf, half, 1)`,
# `INSTANTIATE(float)`), which expands to definitions: the grammar cannot end it, and the ERROR
# it opens swallows the rest of the file. Blanked: what it expands to is in its #define body.
_FILE_SCOPE_MACRO = re.compile(
    rb"(?m)^[A-Z_][A-Z0-9_]*[ \t]*\((?:[^;{}()\n]|\([^;{}()\n]*\))*\)[ \t]*(?=\r?\n(?![ \t]*\{))"
)


def _blank_invocation(m: re.Match) -> bytes:
    text = m.group(0)
    if b"cuda" in text or b"CHECK" in text.upper():
        return text  # a check written without `;`: GPU802/803 read it
    return b" " * len(text)


def mask_attributes(data: bytes) -> bytes:
    """Same-length rewrites of CUDA spellings the grammar does not know; offsets stay true."""
    if (
        b"__align" in data
        or b"__attribute__" in data
        or b"__CUDA_ALIGN__" in data
        or (b"__launch_bounds__" in data or b"__cluster_dims__" in data or b"__maxnreg__" in data)
    ):
        data = _ATTRIBUTES.sub(lambda m: b" " * len(m.group(0)), data)
    if b"__grid_constant__" in data:
        data = data.replace(b"__grid_constant__", b" " * len(b"__grid_constant__"))
    if b"_DEVICE" in data or b"_HOST" in data or b"_GLOBAL" in data:
        data = _SPACE_MACRO.sub(_qualifier, data)
    if b"__device__" in data or b"__host__" in data:
        data = _LAMBDA_SPACE.sub(lambda m: m.group(1) + b" " * len(m.group(2)), data)
    data = _FILE_SCOPE_MACRO.sub(_blank_invocation, data)
    if b"<<<" in data:
        data = _LAUNCH_CONFIG.sub(_unbrace, data)
    return data


# `<<<grid, {bx, by, 1}, 0, stream>>>`: a braced dim3 the grammar does not take in a launch
# config. It becomes one identifier of the same length (`______________`): the launch parses,
# its stream stays the fourth argument, and the block is not evaluated (unknown, not guessed).
_LAUNCH_CONFIG = re.compile(rb"<<<[^;<>]*\{[^;<>]*>>>")
_BRACED = re.compile(rb"\{[^{}]*\}")


def _unbrace(m: re.Match) -> bytes:
    return _BRACED.sub(lambda b: b"_" * len(b.group(0)), m.group(0))


_DEAD_IF = re.compile(rb"^[ \t]*#[ \t]*if[ \t]+\(?[ \t]*(?:0|false)[ \t]*\)?[ \t]*(?:/[/*].*)?$")
_LIVE_IF = re.compile(rb"^[ \t]*#[ \t]*if[ \t]+\(?[ \t]*(?:1|true)[ \t]*\)?[ \t]*(?:/[/*].*)?$")
_OPEN = re.compile(rb"^[ \t]*#[ \t]*if(?:n?def)?\b")
_ELSE = re.compile(rb"^[ \t]*#[ \t]*(?:else|elif)\b")
_ENDIF = re.compile(rb"^[ \t]*#[ \t]*endif\b")


def mask_dead_code(data: bytes) -> bytes:
    """Blank what the preprocessor never compiles: the body of `#if 0` (up to its `#else`,
    `#elif` or `#endif`) and the `#else` part of `#if 1`. Same length, newlines and non-ASCII
    bytes kept, so byte offsets and code-point columns stay true; the directives stay."""
    if b"#" not in data or not re.search(rb"#[ \t]*if[ \t]+\(?[ \t]*(?:0|1|false|true)\b", data):
        return data
    lines = data.split(b"\n")
    # One frame per open #if: "dead" while blanking, "live" for an #if 1 (its #else is dead),
    # "other" for conditions the linter cannot judge.
    stack: list[str] = []
    dead_depth = 0  # frames on the stack that are blanking
    for i, line in enumerate(lines):
        if _OPEN.match(line):
            if dead_depth:
                stack.append("nested")
                dead_depth += 1
                lines[i] = _blank(line)
                continue
            kind = "dead" if _DEAD_IF.match(line) else "live" if _LIVE_IF.match(line) else "other"
            stack.append(kind)
            if kind == "dead":
                dead_depth = 1
            continue
        if not stack:
            continue
        if _ENDIF.match(line):
            stack.pop()
            if dead_depth:
                dead_depth -= 1
                if dead_depth:
                    lines[i] = _blank(line)
            continue
        if _ELSE.match(line) and dead_depth <= 1:
            if stack[-1] == "dead":  # `#if 0 ... #else`: the rest is live (an #elif is not judged)
                stack[-1], dead_depth = "other", 0
            elif stack[-1] == "live":  # `#if 1 ... #else`: the rest is dead
                stack[-1], dead_depth = "dead", 1
            continue
        if dead_depth:
            lines[i] = _blank(line)
    return b"\n".join(lines)


def mask_unbalanced_branches(data: bytes) -> bytes:
    """Pick one configuration where a conditional's branches open or close braces (or
    parentheses) of the code around them (`#ifdef SPARSE` / `if (sparse) {...} else {` / `#endif`, closed later by
    `#ifdef SPARSE` / `}` / `#endif`), which tree-sitter cannot parse: a branch-less group whose
    braces do not balance is blanked (the macro undefined); of a group whose every branch
    leaves the same imbalance, only the first branch is kept. Same length, newlines kept;
    the directives stay. Only tried on a file that does not parse as it is."""
    code = blank_strings_and_comments(data)
    lines = code.split(b"\n")
    starts = []
    at = 0
    for line in lines:
        starts.append(at)
        at += len(line) + 1
    # groups: [open line, [branch start lines], end line], innermost first
    groups: list[tuple[int, list[int], int]] = []
    stack: list[tuple[int, list[int]]] = []
    for i, line in enumerate(lines):
        if _OPEN.match(line):
            stack.append((i, []))
        elif stack and _ELSE.match(line):
            stack[-1][1].append(i)
        elif stack and _ENDIF.match(line):
            opened, branches = stack.pop()
            groups.append((opened, branches, i))
    if not groups:
        return data
    out = bytearray(data)
    blanked = bytearray(len(lines))

    def net(a: int, b: int) -> tuple[int, int]:
        text = b"\n".join(
            line
            for j, line in enumerate(lines[a:b], a)
            if not blanked[j] and not line.lstrip().startswith(b"#")
        )
        return (text.count(b"{") - text.count(b"}"), text.count(b"(") - text.count(b")"))

    def blank(a: int, b: int, directives: bool = False) -> None:
        for j in range(a, b):
            if not blanked[j] and (directives or not lines[j].lstrip().startswith(b"#")):
                blanked[j] = 1
                end = starts[j] + len(lines[j])
                out[starts[j] : end] = _blank(bytes(out[starts[j] : end]))

    for opened, branches, end in groups:
        bounds = [opened, *branches, end]
        nets = [net(bounds[k] + 1, bounds[k + 1]) for k in range(len(bounds) - 1)]
        if not branches:
            if nets[0] != (0, 0):
                blank(opened + 1, end)
            else:
                continue
        elif nets[0] != (0, 0) and all(n == nets[0] for n in nets):
            blank(branches[0] + 1, end)
        else:
            continue
        # the configuration is chosen: its directives go too (a `#else` inside an expression
        # does not parse either)
        for j in bounds:
            blank(j, j + 1, directives=True)
    return bytes(out)


def _error_bytes(root) -> int:
    """How many bytes ERROR nodes cover (a MISSING token covers none)."""
    total = 0
    todo = [root]
    while todo:
        node = todo.pop()
        if node.type == "ERROR":
            total += node.end_byte - node.start_byte
        else:
            todo.extend(c for c in node.children if c.has_error)
    return total


# ASCII becomes a space; \r and non-ASCII bytes stay, so code-point columns do not move.
_BLANK = bytes(b if b >= 0x80 or b == 0x0D else 0x20 for b in range(256))


def _blank(line: bytes) -> bytes:
    return line.translate(_BLANK)


class CudaFrontend:
    language = "cuda"
    extensions = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp")

    # Files the project index parsed, kept (up to this much source) for the lint that follows,
    # so a file is parsed once per run. Forked workers inherit them, and the main process holds
    # them to the end: a parse weighs ~18x its source (transformers: 230 KB of kernels held
    # 4 MB), and reparsing costs ~0.15 s per MB, so a small budget keeps memory flat as the
    # tree grows (24 MB held ~430 MB) at the price of a few tens of milliseconds.
    REUSE_BYTES = 256 * 1024

    def __init__(self):
        self._parsed: dict[tuple[str, int, int], CudaFile] = {}

    def parse(self, display_path: str, data: bytes, settings: Settings) -> CudaFile:
        if self._parsed:
            kept = self._parsed.pop((display_path, len(data), hash(data)), None)
            if kept is not None:
                kept._project = settings.projects.get("cuda")
                kept.memo.pop(LAST_CHECK_END)  # now with the project's checks
                return kept
        try:
            text = decode(data)
        except ParseError as e:
            if not str(e).startswith("cannot decode"):
                raise
            # C++ has no encoding cookie; a stray Latin-1 byte in a comment must not lose the file.
            text = data.decode("utf-8", errors="replace")
        utf8 = mask_dead_code(mask_attributes(text.encode("utf-8")))
        try:
            tree = parser().parse(utf8)
            if tree.root_node.has_error and b"#if" in utf8:
                # `#ifdef X` branches that open or close braces: one configuration instead,
                # kept only when it parses (else the file's lost lines are reported, GPU800)
                picked = mask_unbalanced_branches(utf8)
                if picked != utf8:
                    other = parser().parse(picked)
                    if _error_bytes(other.root_node) < _error_bytes(tree.root_node):
                        tree, utf8 = other, picked
        except (ValueError, MemoryError) as e:
            raise ParseError(f"tree-sitter could not parse the file: {e}") from None
        return CudaFile(display_path, text, utf8, tree, settings.projects.get("cuda"))

    def index(self, files: list[tuple[str, bytes]], settings: Settings, store_dir=None):
        """The CudaProject of the checked tree (frontends/cuda/project.py), built once per run
        before any file is linted: a file's findings may depend on its callers elsewhere.
        Per-file facts are kept in `store_dir` (the result cache's folder) between runs."""
        from gpulint.frontends.cuda.conventions import macro_checks as project_macros
        from gpulint.frontends.cuda.factstore import FactStore, file_facts
        from gpulint.frontends.cuda.project import CudaProject, build

        configured = tuple(settings.option("cuda", "check-macros", []))
        # The project's checking macros (`#define CHECKLAUNCH() C10_CUDA_CHECK(cudaGetLastError())`
        # in one header, called after launches in others), read from the text of every file
        # first: whether a call site is checked depends on them.
        macros = project_macros(files)
        bare = Settings(
            settings.targets,
            settings.options,
            settings.evidence,
            {"cuda": CudaProject(checks=macros)},
        )
        store = FactStore(store_dir, configured + tuple(sorted(macros)))
        self._parsed = {}
        budget = self.REUSE_BYTES

        def facts_of(path: str, data: bytes) -> dict:
            nonlocal budget
            key = store.key(data)
            found = store.get(key)
            if found is not None:
                return found
            parsed = self.parse(path, data, bare)
            if len(data) <= budget:
                budget -= len(data)
                self._parsed[(path, len(data), hash(data))] = parsed
            found = file_facts(parsed, configured)
            store.put(key, found)
            return found

        project = build(files, facts_of)
        store.save()
        return project

    @staticmethod
    def index_reads(paths: list[str]) -> list[str]:
        """The folders `index` may read in beyond the files it is given (gpulint.projectcache)."""
        from gpulint.frontends.cuda.harness import python_reads

        return python_reads(paths)

    @staticmethod
    def project_json(project) -> dict:
        return project.to_json()

    @staticmethod
    def project_from_json(data: dict):
        from gpulint.frontends.cuda.project import CudaProject

        return CudaProject.from_json(data)

    @staticmethod
    def cache_salt(settings: Settings, display_path: str) -> str:
        """What a file's findings depend on besides its bytes (its cache key adds it)."""
        project = settings.projects.get("cuda")
        return project.digest_for(display_path) if project is not None else ""

    def run(self, parsed: CudaFile, rules: Sequence) -> Iterable[Finding]:
        visits: dict[str, list] = {}
        for rule in rules:
            for name in dir(type(rule)):
                if name.startswith("visit_"):
                    node_type = name[6:]
                    if node_type not in node_types():
                        raise ValueError(
                            f"{rule.code}: {name}: no node type {node_type!r} in tree-sitter-cuda"
                        )
                    visits.setdefault(node_type, []).append(rule)
        found = parsed.captures(*visits) if visits else {}
        if "call_expression" in found and parsed.macro_calls:
            # Launches written in `#define` bodies, parsed as statements (CudaFile._macro_tree).
            macro_launches = [c for c in parsed.launches if parsed._in_macro(c)]
            found["call_expression"] = sorted(
                found["call_expression"] + macro_launches, key=lambda n: n.start_byte
            )
        # Nodes inside a region tree-sitter could not parse are skipped, not guessed at.
        return run_rules(
            parsed,
            rules,
            lambda kind: [node for node in found.get(kind, ()) if not parsed.broken(node)],
        )

    def noqa_lines(self, parsed: CudaFile) -> dict[int, frozenset[str]]:
        found = noqa_by_line(parsed.source)
        if found and b"<<<" in parsed.data:
            # a multi-line launch is reported at its `<<<` (CudaFile.launch_span); a noqa on
            # the kernel's name above it covers it as well
            for first, reported in parsed.launch_lines().items():
                if first in found:
                    codes, here = found[first], found.get(reported)
                    if here is None:
                        found[reported] = codes
                    elif not here or not codes:  # (an empty set is a bare `noqa`: every code)
                        found[reported] = frozenset()
                    else:
                        found[reported] = here | codes
        return found

    def noqa_comments(self, parsed: CudaFile) -> list[NoqaComment]:
        return noqa_comments_by_line(parsed.source, "//")


FRONTEND = CudaFrontend()
