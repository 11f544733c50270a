"""A loop whose synchronisation is the point: a timed loop (clock reads around it), a
sync a comment explains, and host communication (MPI, NVSHMEM) after it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# -- a loop whose sync is the point (GPU805) --------------------------------------------------
_CLOCK_READ = re.compile(
    rb"\bchrono\b|_clock\s*::\s*now|\bnow\s*\(\s*\)|gettimeofday|clock_gettime|omp_get_wtime|"
    rb"MPI_Wtime|cudaEventRecord|[Tt]imer\w*\s*[.(]|\bclock\s*\(\s*\)|\bsecond\s*\(\s*\)"
)


def timed_loop(file: CudaFile, loop) -> bool:
    """`loop` is what a clock measures: a clock read (`high_resolution_clock::now()`,
    `cudaEventRecord`, `gettimeofday`, a timer's start/stop) among the three statements just
    before it and among the three just after it, in its own block. A benchmark timing its
    repetitions: what each of them does, a sync included, is what is being measured."""
    block = loop.parent
    if block is None:
        return False
    siblings = [c for c in block.named_children if c.type != "comment"]
    at = next((i for i, c in enumerate(siblings) if c == loop), None)
    if at is None:
        return False

    def reads_clock(nodes) -> bool:
        return any(_CLOCK_READ.search(file.data[n.start_byte : n.end_byte]) for n in nodes)

    return reads_clock(siblings[max(0, at - 3) : at]) and reads_clock(siblings[at + 1 : at + 4])


# A comment that gives the sync a purpose: a barrier, an ordering, what must be done first.
_SYNC_REASON = re.compile(
    r"(?i)barrier|\bwait(s|ing)? (for|until|on)\b|\bensure|make sure|so that|before (the |we |"
    r"next|launch|read|writ|copy|swap|send|exchang|start)|\bmust\b|\bneed(s|ed)? to\b|required|"
    r"otherwise|\brace\b|overwrit|\breuse|\bhalo\b|neighbo|\bpeer\b|\bp2p\b|in order|complete[sd]? "
    r"before|serializ|serialis|on purpose|deliberate|intentional|measure"
)
# Communication the host starts after the sync on device buffers: MPI, SHMEM barriers.
_HOST_COMMUNICATION = re.compile(rb"\bMPI_\w+\s*\(|\b(?:nv)?shmem_\w*barrier\w*\s*\(")


def explained_sync(file: CudaFile, call) -> bool:
    """The comment on the sync's line or just above it says what the sync is for (`// wait
    for the peers before the next exchange`, `// barrier: every GPU done with iteration i`):
    a documented protocol, not an accident."""
    return bool(_SYNC_REASON.search(file.comment_before(call, lines=2)))


def communicates_after(file: CudaFile, call, loop) -> bool:
    """After the sync, the iteration hands device data to host-driven communication (an
    `MPI_Sendrecv` of a halo, an `MPI_Barrier`, a SHMEM barrier): the host must know the
    kernels finished before it does."""
    return bool(_HOST_COMMUNICATION.search(file.data[call.end_byte : loop.end_byte]))
