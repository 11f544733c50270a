"""A device function whose only output is what it prints (`printf`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# Calls a device function may make and still have no output but what it prints.
_NO_OUTPUT_CALLS = frozenset({"printf", "std::printf", "__syncthreads", "__syncwarp", "sync"})
_STORE_TARGETS = frozenset({"subscript_expression", "pointer_expression", "field_expression"})


def prints_only(file: CudaFile, function) -> bool:
    """The device function's only output is what it prints: it stores through no pointer,
    array or member (`y[i] = ...`, `*out = ...`, `s->n++`), calls nothing but `printf` and
    barriers (an atomic, a helper or a copy may write), and returns no value. A hello-world
    kernel, a kernel that shows its thread and block indices: printing is its purpose."""
    body = function.child_by_field_name("body")
    if body is None:
        return False
    stack = [body]
    while stack:
        node = stack.pop()
        kind = node.type
        if kind == "assignment_expression":
            left = node.child_by_field_name("left")
            if left is not None and left.type in _STORE_TARGETS:
                return False
        elif kind == "update_expression":
            argument = node.child_by_field_name("argument")
            if argument is not None and argument.type in _STORE_TARGETS:
                return False
        elif kind == "call_expression":
            name = file.call_name(node)
            if name is None or name.split(".")[-1] not in _NO_OUTPUT_CALLS:
                return False
        elif kind == "return_statement" and node.named_child_count:
            return False
        elif kind in ("asm_statement", "gnu_asm_expression"):
            return False
        stack.extend(node.named_children)
    return True
