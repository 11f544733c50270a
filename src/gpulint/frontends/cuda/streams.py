"""Launches on the legacy default stream that cannot overlap anything: a build variant
that names a stream, and work between two device-wide synchronisations."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.frontends.cuda.launchconfig import kernel_base_name
from gpulint.frontends.cuda.syntax import PREPROC_BRANCHES, preproc_chain_top

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# -- launches on the default stream that cannot overlap anything ---------------------------------
# How a launch or an API call names the legacy default stream.
DEFAULT_STREAMS = frozenset(
    {"0", "nullptr", "NULL", "cudaStreamLegacy", "cudaStreamDefault", "(cudaStream_t)0"}
)
_DEVICE_SYNCS = re.compile(rb"\bcuda(?:DeviceSynchronize|ThreadSynchronize)\s*\(")


def variant_on_stream(file: CudaFile, node) -> bool:
    """`node` sits in one branch of an `#if`/`#ifdef` chain whose sibling branch launches the
    same kernel on a stream: the two are build variants of one launch."""
    callee = node.child_by_field_name("function")
    kernel = kernel_base_name(file.node_text(callee)) if callee is not None else ""
    if not kernel:
        return False
    for branch in file.ancestors(node):
        if branch.type not in PREPROC_BRANCHES:
            continue
        top = preproc_chain_top(branch)
        own = branch.child_by_field_name("alternative")
        mine = (branch.start_byte, own.start_byte if own is not None else branch.end_byte)
        for other in file.launches:
            if not (top.start_byte <= other.start_byte < top.end_byte):
                continue
            if mine[0] <= other.start_byte < mine[1]:
                continue  # this branch's own launches
            config = [c for c in file.launch_config(other) or () if c.type != "comment"]
            fn = other.child_by_field_name("function")
            if (
                len(config) >= 4
                and " ".join(file.node_text(config[3]).split()) not in DEFAULT_STREAMS
                and fn is not None
                and kernel_base_name(file.node_text(fn)) == kernel
            ):
                return True
    return False


def between_device_syncs(file: CudaFile, node) -> bool:
    """A `cudaDeviceSynchronize()` statement runs before `node` and another after it, each in
    a block around it (not inside a branch of their own)."""
    before = after = False
    child = node
    for a in file.ancestors(node):
        if a.type in ("function_definition", "lambda_expression"):
            break
        if a.type == "compound_statement":
            for statement in a.named_children:
                if statement.type != "expression_statement":
                    continue
                if not _DEVICE_SYNCS.search(file.data[statement.start_byte : statement.end_byte]):
                    continue
                if statement.end_byte <= child.start_byte:
                    before = True
                elif statement.start_byte >= child.end_byte:
                    after = True
            if before and after:
                return True
        child = a
    return False
