"""The checked tree's own error-checking convention, as the CUDA rules judge it (not a rule:
modules starting with `_` are not discovered). The CUDA front-end counts (CudaProject's
`launches_checked` / `launches_total` / `launches_beside_one_checking_file`, `api` and
`api_folders`, `discarded.api_counts`); what share of checked calls makes a convention, and how many
calls it takes to show one, is decided here. GPU802 and GPU812 split unchecked launches on
`checks_launches`; GPU803 grades a discarded status by `unchecked_by_convention`.
"""

from __future__ import annotations

from gpulint.frontends.cuda.discarded import api_counts, api_kind
from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.project import CudaProject
from gpulint.frontends.cuda.syntax import folders_of

# At least this share of the calls of a kind checked is a checking convention. On 26 public
# code bases the ones that check none or a stray few (a vendored file, a debugging check) are at
# 0-13%, the ones that check at 19% and more.
CONVENTION_PERCENT = 15
# Fewer calls of a kind than this show no house style of not checking (a file, a folder, the
# project: the nearest with this many is asked).
KIND_EVIDENCE = 3
# The same for kernel launches, which are commoner.
LAUNCH_EVIDENCE = 5


def is_convention(checked: int, total: int, evidence: int = KIND_EVIDENCE) -> bool:
    """Checking is the convention: CONVENTION_PERCENT of `total` checked, or too few (under
    `evidence`) to show a house style of not checking."""
    return total < evidence or 100 * checked >= CONVENTION_PERCENT * total


def checks_launches(project: CudaProject) -> bool:
    """The project has a launch-checking convention: at least 15% of its library launches are
    checked, not all in one file beside files that check none and launch more (or it has
    fewer than 5 launches: too few to show a house style). An unchecked launch in a project
    without one is the house style, not a slip (GPU812, opt-in, reports those; GPU802 the
    others)."""
    beside = project.launches_beside_one_checking_file
    if beside >= LAUNCH_EVIDENCE and beside > project.launches_checked:
        # one file checking its launches among files that check none and launch more is that
        # file's style (often vendored from a project that checks), not the code base's
        return False
    return is_convention(project.launches_checked, project.launches_total, LAUNCH_EVIDENCE)


def unchecked_by_convention(file: CudaFile, name: str) -> tuple[str, int, int, str] | None:
    """Runtime call `name` is of a kind (`discarded.api_kind`) the code leaves unchecked by
    convention: fewer than 15% of such calls have their status used, counted where there is
    evidence (at least 3 calls): in the file, else in the nearest folder above it, else in the
    project, else over all of the project's corrupting calls, else over its kernel launches (5
    at least: `checks_launches`). Then (where: "file" or "project", calls checked, calls
    counted, what was counted); None where the kind is checked by convention, or nothing shows
    a convention either way."""
    kind = api_kind(name)
    if kind is None:
        return None
    project = file.project
    used, dropped = api_counts(file).get(kind, (0, 0))
    where, what = "file", _KIND_WORDS[kind]
    # then the nearest folder above it with enough calls of the kind (a models/ folder that
    # checks none of its copies beside a utils/ folder that checks its own), then the project
    if used + dropped < KIND_EVIDENCE:
        for folder in folders_of(file.display_path):
            used, dropped = project.api_folders.get(f"{folder}:{kind}", (0, 0))
            if used + dropped >= KIND_EVIDENCE:
                where = f"folder (`{folder}/`)"
                break
    if used + dropped < KIND_EVIDENCE:
        used, dropped = project.api.get(kind, (0, 0))
        where = "project"
    if used + dropped < KIND_EVIDENCE:
        used = sum(u for u, _ in project.api.values())
        dropped = sum(d for _, d in project.api.values())
        what = "allocations, copies, memsets and attribute calls"
    if used + dropped < KIND_EVIDENCE:
        if checks_launches(project):
            return None
        return ("project", project.launches_checked, project.launches_total, "kernel launches")
    return None if is_convention(used, used + dropped) else (where, used, used + dropped, what)


_KIND_WORDS = {
    "copy": "copies",
    "memset": "memsets",
    "alloc": "allocations",
    "attribute": "attribute and limit calls",
    "launch": "API launches",
    "graph": "graph launches",
}
