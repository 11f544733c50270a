"""A launch's dynamic shared memory that depends on runtime values, and so can exceed
the default limit by configuration."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.frontends.cuda.syntax import closing_paren

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# -- launches whose dynamic shared memory can fail by configuration -------------------------------
# What a block gets without `cudaFuncSetAttribute(..., MaxDynamicSharedMemorySize, ...)`.
SMEM_DEFAULT_LIMIT = 48 * 1024
_SIZEOF = re.compile(r"\bsizeof\s*\((?:[^()]|\([^()]*\))*\)")
_WORD = re.compile(r"(?<![\w.>:])(?:[A-Za-z_]\w*\s*::\s*)*([A-Za-z_]\w*)(\s*::)?")
_CONSTANT_WORD = re.compile(r"^(?:[A-Z][A-Z0-9_]*|k[A-Z]\w*)$")
_NOT_NAMES = frozenset(
    {"int", "size_t", "unsigned", "long", "uint32_t", "int32_t", "int64_t", "uint64_t"}
    | {"static_cast", "min", "max"}
)


def runtime_shared_memory(file: CudaFile, launch) -> str | None:
    """Why `launch`'s dynamic shared memory can fail by configuration: a compile-time value
    above the 48 KB a block gets by default ("96 KB"), or a size computed at run time (the
    expression, e.g. `smem_sz` from the sequence length). None without dynamic shared memory,
    for a known value within 48 KB, for a compile-time expression of unknown value (a
    template's constant, `sizeof(T) * BLOCK`), for a size handed in as a parameter (the
    caller's choice: a generic launch helper), and for a size bounded by the block's threads
    within 48 KB (`block.x * sizeof(float)`)."""
    config = file.launch_config(launch)
    if not config or len(config) < 3:
        return None
    expr = config[2]
    value = file.consts.value(expr, launch)
    if value is not None:
        return f"{value // 1024} KB" if value > SMEM_DEFAULT_LIMIT else None
    text = file.node_text(expr)
    function = file.enclosing_function(launch)
    scope = file.node_text(function) if function is not None else ""
    block = file.node_text(config[1]).strip()
    names = _runtime_names(text, _template_names(file, function), scope, 0)
    if function is not None and file.macro_name(function) is not None:
        # a macro's body: a name it does not declare comes from where it is expanded (unseen)
        names = {n for n in names if re.search(r"\b" + re.escape(n) + r"\s*[=({]", scope)}
    if not names:
        return None
    opening = scope.find("(")
    close = closing_paren(scope.encode(), opening) if opening >= 0 else None
    head = scope[: close + 1] if close is not None else ""  # the parameter list
    if re.fullmatch(r"[A-Za-z_]\w*", text.strip()) and re.search(
        r"\b" + re.escape(text.strip()) + r"\b", head
    ):
        return None  # a parameter: sized by the caller
    if re.fullmatch(r"[A-Za-z_]\w*", block) and names <= {block}:
        # threads a block times a per-thread size: at most 1024 threads
        bound = _SIZEOF.sub(
            "16", re.sub(r"\b" + re.escape(block) + r"(?:\.[xyz])?\b", "1024", text)
        )
        if re.fullmatch(r"[\d\s*+()]+", bound):
            try:
                if eval(bound, {"__builtins__": {}}) <= SMEM_DEFAULT_LIMIT:  # digits, * + ( ) only
                    return None
            except (SyntaxError, ValueError, TypeError):
                pass
    return f"`{' '.join(text.split())}`"


def _template_names(file: CudaFile, function) -> set[str]:
    out: set[str] = set()
    node = function.parent if function is not None else None
    if node is not None and node.type == "template_declaration":
        params = node.child_by_field_name("parameters")
        if params is not None:
            out.update(re.findall(r"(\w+)\s*(?:=[^,>]*)?(?=[,>])", file.node_text(params)))
    return out


def _runtime_names(text: str, template: set[str], scope: str, depth: int) -> set[str]:
    """The names in `text` not known at compile time: besides literals, `sizeof`, constants
    (ALL_CAPS, `kName`, `Cfg::name`) and template parameters, a local name declared once
    (`int smem = ...;`, assigned nowhere else) from those is compile-time too."""
    text = _SIZEOF.sub("4", text)
    out: set[str] = set()
    for m in _WORD.finditer(text):
        name = m.group(1)
        if "::" in m.group(0):
            continue  # a class's or namespace's static constant (`Ktraits::kSmemSize`)
        if _CONSTANT_WORD.match(name) or name in template or name in _NOT_NAMES:
            continue
        # (`int smem = ...;`, or `dim3 block(32, 8);`)
        decl = re.search(
            r"\b[\w:<>]+\s+" + re.escape(name) + r"\s*(?:=\s*([^;]*)|[({]([^;]*)[)}]\s*);",
            scope,
        )
        again = len(re.findall(r"\b" + re.escape(name) + r"\s*[-+*/|&]?=[^=]", scope))
        if (
            decl is None
            or again > 1
            or depth >= 3
            or _runtime_names(decl.group(1) or decl.group(2), template, scope, depth + 1)
        ):
            out.add(name)
    return out
