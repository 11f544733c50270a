"""What one CUDA file needs to know about the others: which host functions (and macros) launch
kernels without checking, who calls them and whether the caller checks after the call, and the
project's own error-checking macros. Facts are gathered per file (plain, JSON-able data:
factstore.py), merged once per run into a `CudaProject`, and handed to every file's parse, so a
launcher in `ops.cu` is judged by its callers in `bindings.cpp`. A file linted alone (editor,
flake8) gets a project of itself: the same rules over the facts of one translation unit.

The facts come from one module each: callgraph.py (callers across translation units),
conventions.py (checks and their counts), harness.py (programs' and scripts' code),
factstore.py (one file's facts, kept between runs).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import Any

from gpulint.frontends.cuda.buildmacros import tree_macros
from gpulint.frontends.cuda.callgraph import (
    DEPTH,
    CallSite,
    called_names,
    class_bases,
    uncalled_device_printers,
)
from gpulint.frontends.cuda.checknames import last_error_checks, reads_last_error
from gpulint.frontends.cuda.conventions import (
    add_folder_counts,
    count_convention,
    file_macro_checks,
    text_api_counts,
)
from gpulint.frontends.cuda.debugbuilds import debug_only_checks
from gpulint.frontends.cuda.harness import (
    MAIN_BYTES,
    _shared_prefix,
    harness_built,
    harness_headers,
    include_name,
    script_built,
)
from gpulint.source import is_driver_path

__all__ = ["CallSite", "CudaProject", "build", "merge"]


@dataclass
class CudaProject:
    checks: frozenset[str] = frozenset()  # the project's own checking macros/functions
    # functions that launch and then check (lasterror.checking_launchers): part of `checks`
    checking: frozenset[str] = frozenset()
    # functions whose own launch is checked in some way, also by its status (a constant-config
    # launch before a call to one is left alone: see GPU802)
    checked_launching: frozenset[str] = frozenset()
    defined: frozenset[str] = frozenset()  # cuda-prefixed names the project defines itself
    # The project's launch-checking convention: its library launches (tests and standalone
    # programs left out) checked on their path or by every caller, and all of them
    launches_checked: int = 0
    launches_total: int = 0
    # Some file of the tree reads the runtime's last error (`cudaGetLastError()`, a
    # C10_CUDA_KERNEL_LAUNCH_CHECK): without one, no launch is checked, whatever statuses are
    # checked after it (a later status check does not return a bad launch configuration)
    reads_last_error: bool = True
    # library launches checked only by checks compiled into debug builds (not counted above)
    launches_debug_checked: int = 0
    # the project's checks that read the last error only in a debug build, or when an
    # environment variable is set (debugbuilds.debug_only_checks): not its release convention
    debug_checks: frozenset[str] = frozenset()
    # library launches outside the files that check one, where only one file does (else 0)
    launches_beside_one_checking_file: int = 0
    # per kind of corrupting runtime call (discarded.api_kind): [status used, discarded]
    api: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the same per folder of the tree: "folder:kind" -> [status used, discarded] (each file's
    # calls counted in every folder above it; GPU803 asks the nearest with enough calls)
    api_folders: dict[str, tuple[int, int]] = field(default_factory=dict)
    # its checks that read the last error (checknames.last_error_checks): they also report a
    # runtime call's failure before them (GPU803)
    last_error_checks: frozenset[str] = frozenset()
    calls: dict[str, tuple[CallSite, ...]] = field(default_factory=dict)  # callee -> sites
    launchers: dict[str, str] = field(default_factory=dict)  # launcher -> path defining it
    # host functions defined once in the tree that hold a bare `cudaGetLastError();` (a
    # launcher resetting the error state) -> their call sites, callers in other files too
    clear_calls: dict[str, tuple[CallSite, ...]] = field(default_factory=dict)
    # host functions (not methods) every definition of which launches a kernel, checked or
    # not (`launch_scale<T>(...)`): a loop calling one does GPU work each iteration (GPU805)
    launching: frozenset[str] = frozenset()
    # names several host functions share (methods, overloads, CPU twins): not followed by name
    ambiguous: frozenset[str] = frozenset()
    methods: frozenset[str] = frozenset()  # names of member functions
    # "Derived:Base" for each class the checked tree derives from another (read from the text)
    bases: frozenset[str] = frozenset()
    # "name:class" ("name:" for a function defined once) of host functions that read the last
    # error (call one of `last_error_checks`): a later call of one checks an earlier launch
    readers: frozenset[str] = frozenset()
    # file names of headers `#include`d only from a standalone program's code (a benchmark's
    # timing and checking helpers), never from library code
    harness_headers: frozenset[str] = frozenset()
    # CUDA sources built only by a script beside them (`cpp_extension.load(sources=[...])`)
    # whose Python never changes streams: the default stream is the only one their ops see
    script_built: frozenset[str] = frozenset()
    # CUDA sources of an extension whose every Python user in the checked tree is a script (a
    # benchmark or experiment run as a program), never a package's module: see `harness_built`
    harness: frozenset[str] = frozenset()
    # those of them whose scripts never mention a stream or a CUDA graph
    harness_streamless: frozenset[str] = frozenset()
    # "path:name" of `__device__` functions that call `printf` and that nothing in the checked
    # tree mentions besides their definitions (debugging helpers no kernel calls): see
    # `uncalled_device_printers`. Empty for a file linted alone: its callers are not in sight.
    uncalled_printers: frozenset[str] = frozenset()
    # names `#define`d in any source of the checked tree (buildmacros.tree_macros): a macro none of
    # them nor a build file defines leaves its `#if` branch out of every build (GPU807)
    macros: frozenset[str] = frozenset()
    # files that include no torch/ATen/c10 header themselves but a header of the checked tree
    # that does, at any depth (`#include "common.h"` holding `<torch/extension.h>`): PyTorch
    # extensions too (see `torch_by_header`)
    torch_by_header: frozenset[str] = frozenset()
    # how each file with launches spells its launch check (checkspelling.launch_check_spelling):
    # path -> `STD_CUDA_KERNEL_LAUNCH_CHECK();`; a fix suggestion in a file that writes none
    # uses its nearest sibling's
    launch_spellings: dict[str, str] = field(default_factory=dict)
    # the check macro each such file wraps runtime calls in (checknames.house_check_macro), for
    # GPU803's suggestion in a file of the folder that wraps none
    check_macros: dict[str, str] = field(default_factory=dict)

    def callers(self, name: str) -> tuple[CallSite, ...]:
        return self.calls.get(name, ())

    def unchecked_caller(
        self,
        name: str,
        depth: int = 0,
        seen: set[tuple[str, str]] | None = None,
        path: str | None = None,
        owner: str = "",
    ) -> CallSite | None:
        """The first call site of `unchecked_chain`, or None."""
        chain = self.unchecked_chain(name, depth, seen, path, owner)
        return chain[0] if chain else None

    def unchecked_chain(
        self,
        name: str,
        depth: int = 0,
        seen: set[tuple[str, str]] | None = None,
        path: str | None = None,
        owner: str = "",
    ) -> list[CallSite] | None:
        """The call sites from launcher `name` up to a caller after which no check runs (each
        a call of the one before: [call of `name`, call of its caller, ...]; the last is the
        caller to name), following callers that are launchers themselves (their callers may
        check). None when every caller found checks, and when no caller is found (the launcher
        is called through a table, from Python...).
        `path`: only the call sites in that file (a macro of a source file is seen only there;
        other sources may define their own of the same name). `owner`: `name` is a method of
        that class: only the calls known to reach that class's method."""
        seen = set() if seen is None else seen
        seen.add((name, owner))
        # A test's, benchmark's or demo's call (a driver path, or `main`) is not the library's
        # use: the launcher is judged by its library callers.
        sites = [
            s
            for s in self.callers(name)
            if s.caller != "main"
            and not is_driver_path(s.path)
            and (path is None or s.path == path)
            and (not owner or self._related(s.target, owner))
        ]
        for site in sites:
            if site.checked or (site.caller, site.owner) in seen or self._read_later(site):
                continue
            caller = site.caller
            # A name several free functions share (overloads) is followed too: when every call
            # of the name checks, so does every call of this one of them. A method only through
            # the calls known to reach its class (`layer_->forward(...)` where the file makes
            # `layer_` one); calls through other objects may be unseen.
            if depth < DEPTH and caller and self._followed(caller, site.owner):
                deeper = self.unchecked_chain(caller, depth + 1, seen, owner=site.owner)
                if deeper is None:
                    continue  # every caller of the caller checks
                return [site, *deeper]
            return [site]
        return None

    def _read_later(self, site: CallSite) -> bool:
        """A call after `site` in its caller reaches a function that reads the last error
        (`ffn_->forward(...)` whose body ends in the project's `sync_check()`)."""
        if not site.later or not self.readers:
            return False
        for entry in site.later.split(","):
            name, _, target = entry.partition(":")
            if f"{name}:" in self.readers and name not in self.methods:
                return True
            if target and any(
                f"{name}:{c}" in self.readers for c in (target, *self._ancestors(target))
            ):
                return True
        return False

    def _related(self, target: str, owner: str) -> bool:
        """A call of a method of class `target` may run class `owner`'s: the same class, one
        deriving from it (an inherited method), or a base (a virtual call)."""
        if not target:
            return False
        if target == owner:
            return True
        return owner in self._ancestors(target) or target in self._ancestors(owner)

    def _ancestors(self, cls: str) -> set[str]:
        known = getattr(self, "_parents", None)
        if known is None or known[0] is not self.bases:
            parents: dict[str, set[str]] = {}
            for pair in self.bases:
                derived, _, base = pair.partition(":")
                parents.setdefault(derived, set()).add(base)
            known = self._parents = (self.bases, parents)
        parents = known[1]
        out: set[str] = set()
        todo = [cls]
        while todo and len(out) < 64:
            for base in parents.get(todo.pop(), ()):
                if base not in out:
                    out.add(base)
                    todo.append(base)
        return out

    def _followed(self, caller: str, owner: str) -> bool:
        """Whether the callers of `caller` can be judged: a function with call sites, a method
        with a library call known to reach its class (a method whose library calls go through
        objects of unknown class is not taken for one only examples call)."""
        if caller not in self.methods:
            return bool(self.callers(caller))
        return bool(owner) and any(
            self._related(s.target, owner) and s.caller != "main" and not is_driver_path(s.path)
            for s in self.callers(caller)
        )

    def launch_check_near(self, path: str, spellings: dict[str, str] | None = None) -> str:
        """The launch check spelling most other files of `path`'s folder write; "" when none
        does. (Not the folder above: sibling folders are often separate extensions, each
        with its own headers, whose macros do not compile elsewhere.) `spellings`: another
        per-file spelling (`check_macros`)."""
        folder = path.replace("\\", "/").rpartition("/")[0]
        counts: dict[str, int] = {}
        known = self.launch_spellings if spellings is None else spellings
        for other, spelling in sorted(known.items()):
            if other != path and other.replace("\\", "/").rpartition("/")[0] == folder:
                counts[spelling] = counts.get(spelling, 0) + 1
        return max(counts, key=counts.__getitem__) if counts else ""

    def digest_for(self, path: str) -> str:
        """What `path`'s findings depend on beyond its own bytes: the call sites of the launchers
        it defines, and the project's check names. Folded into its cache key."""
        own = sorted(n for n, p in self.launchers.items() if p == path)
        state = {
            "checks": sorted(self.checks),
            "checking": sorted(self.checking),
            "checked_launching": sorted(self.checked_launching),
            "defined": sorted(self.defined),
            "last_error": sorted(self.last_error_checks),
            "debug_checks": sorted(self.debug_checks),
            "bases": sorted(self.bases),
            "readers": sorted(self.readers),
            "convention": [
                self.launches_checked,
                self.launches_total,
                self.launches_debug_checked,
                self.launches_beside_one_checking_file,
            ],
            "api": sorted(self.api.items()),
            "api_folders": sorted(self.api_folders.items()),
            "sites": {n: sorted(map(_site_key, self._closure(n))) for n in own},
            "launching": sorted(self.launching),
            "harness": path in self.harness_headers,
            "torch_by_header": path.replace("\\", "/") in self.torch_by_header,
            "script_built": path in self.script_built,
            "harness_built": [path in self.harness, path in self.harness_streamless],
            "uncalled": sorted(e for e in self.uncalled_printers if e.startswith(path + ":")),
            "macros": sorted(self.macros),
            "launch_check_near": self.launch_check_near(path),
            "check_macro_near": self.launch_check_near(path, self.check_macros),
        }
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """The project as plain JSON data (`from_json` gives it back equal): kept between runs
        by gpulint.projectcache. A field of a kind not handled here raises TypeError."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset) and all(isinstance(v, str) for v in value):
                out[f.name] = sorted(value)
            elif type(value) in (int, bool):
                out[f.name] = value
            elif isinstance(value, dict) and all(isinstance(k, str) for k in value):
                if all(isinstance(v, str | int | bool) for v in value.values()):
                    out[f.name] = dict(value)
                elif all(
                    isinstance(v, tuple) and all(type(x) is int for x in v) for v in value.values()
                ):
                    out[f.name] = {k: list(v) for k, v in value.items()}
                elif all(
                    isinstance(v, tuple) and all(isinstance(s, CallSite) for s in v)
                    for v in value.values()
                ):
                    out[f.name] = {
                        k: [[getattr(s, g.name) for g in fields(CallSite)] for s in v]
                        for k, v in value.items()
                    }
                else:
                    raise TypeError(f"CudaProject.{f.name}: no JSON form")
            else:
                raise TypeError(f"CudaProject.{f.name}: no JSON form")
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CudaProject:
        """The project `to_json` gave; ValueError where `data` is not one."""
        values: dict[str, Any] = {}
        sites = [
            (g.name, {"str": str, "int": int, "bool": bool}[str(g.type)]) for g in fields(CallSite)
        ]
        for f in fields(cls):
            value = data.get(f.name)
            if f.type.startswith("frozenset[str]"):
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    raise ValueError(f.name)
                values[f.name] = frozenset(value)
            elif "CallSite" in f.type:
                if not isinstance(value, dict):
                    raise ValueError(f.name)
                out = {}
                for k, v in value.items():
                    if not isinstance(v, list) or not all(
                        isinstance(s, list)
                        and len(s) == len(sites)
                        and all(type(x) is t for x, (_, t) in zip(s, sites, strict=True))
                        for s in v
                    ):
                        raise ValueError(f.name)
                    out[k] = tuple(CallSite(*s) for s in v)
                values[f.name] = out
            elif f.type in ("int", "bool"):
                if type(value) is not {"int": int, "bool": bool}[f.type]:
                    raise ValueError(f.name)
                values[f.name] = value
            elif f.type.startswith("dict[str, tuple[int"):
                if not isinstance(value, dict) or not all(
                    isinstance(v, list) and all(type(x) is int for x in v) for v in value.values()
                ):
                    raise ValueError(f.name)
                values[f.name] = {k: tuple(v) for k, v in value.items()}
            elif f.type.startswith("dict["):
                if not isinstance(value, dict):
                    raise ValueError(f.name)
                values[f.name] = dict(value)
            else:
                raise ValueError(f.name)
        return cls(**values)

    def _closure(self, name: str) -> list[CallSite]:
        """The call sites of `name` and of its callers, `DEPTH` levels up (each name once)."""
        out: list[CallSite] = []
        seen = {name}
        level = [name]
        for _ in range(DEPTH + 1):
            up = []
            for callee in level:
                for site in self.callers(callee):
                    out.append(site)
                    if site.caller and site.caller not in seen:
                        seen.add(site.caller)
                        up.append(site.caller)
            level = up
        return out


def _site_key(site: CallSite) -> tuple[str, str, int, bool, str, str, str, str]:
    return (
        site.caller,
        site.path,
        site.line,
        site.checked,
        site.owner,
        site.target,
        site.later,
        site.via,
    )


def merge(
    facts_by_path: dict[str, dict[str, Any]],
    count: bool = True,
    bases: frozenset[str] = frozenset(),
) -> CudaProject:
    launchers: dict[str, str] = {}
    launching: dict[str, int] = {}
    checks: set[str] = set()
    last_error: set[str] = set()
    debug: set[str] = set()
    defined: set[str] = set()
    checking: dict[str, int] = {}
    checked_launching: dict[str, int] = {}
    launches_any: dict[str, int] = {}  # name -> its definitions that launch, checked or not
    for path, facts in facts_by_path.items():
        for name, count in facts["launchers"].items():
            launchers.setdefault(name, path)
            launching[name] = launching.get(name, 0) + count
        for name, count in facts.get("launching", {}).items():
            launches_any[name] = launches_any.get(name, 0) + count
        checks.update(facts["checks"])
        last_error.update(facts.get("last_error_checks", ()))
        debug.update(facts.get("debug_checks", ()))
        defined.update(facts["defined"])
        for name in facts.get("checking", ()):
            checking[name] = checking.get(name, 0) + 1
        for name in facts.get("checked_launching", ()):
            checked_launching[name] = checked_launching.get(name, 0) + 1
    defs: dict[str, int] = {}
    methods: set[str] = set()
    for facts in facts_by_path.values():
        for name, count in facts.get("defs", {}).items():
            defs[name] = defs.get(name, 0) + count
        methods.update(facts.get("methods", ()))
    # A checking launcher is a check only where every definition of its name checks.
    checked_by = frozenset(
        n for n, c in checking.items() if defs.get(n, 0) <= c and n not in methods
    )
    checks |= checked_by
    # A name other functions share is not matched by name (overloads that all launch are).
    launchers = {n: p for n, p in launchers.items() if defs.get(n, 0) <= launching[n]}
    # Functions that return before launching when a pointer parameter is null (a size
    # query), at positions every definition of the name agrees on.
    exits: dict[str, set[int]] = {}
    exit_defs: dict[str, int] = {}
    for facts in facts_by_path.values():
        for name, found in facts.get("null_exits", {}).items():
            exits[name] = exits[name] & set(found) if name in exits else set(found)
            exit_defs[name] = exit_defs.get(name, 0) + 1
    queries = {n: v for n, v in exits.items() if v and exit_defs[n] >= defs.get(n, 0)}
    # A function that hands its parameter on to such a query position (`invokeX(workspace,
    # ...)` -> `invokeBatchX(workspace, ...)`) is a query too when it launches nothing itself
    # and each of its calls of a launcher or query passes it on there.
    for _ in range(DEPTH):
        handed: dict[str, set[int] | None] = {}
        for facts in facts_by_path.values():
            for name, caller, _, _, *rest in facts["calls"]:
                if not caller or caller in launching or defs.get(caller, 0) != 1:
                    continue
                if name not in queries and name not in launchers:
                    continue
                passed = {k for j, k in (rest[0][1] if rest else ()) if j in queries.get(name, ())}
                have = handed.get(caller, passed)
                handed[caller] = None if have is None else have & passed
        grown = False
        for caller, positions in handed.items():
            if positions and not positions <= queries.get(caller, set()):
                queries[caller] = queries.get(caller, set()) | positions
                grown = True
        if not grown:
            break
    calls: dict[str, list[CallSite]] = {}
    wanted = set(launchers)
    # callers of launchers, and callers of those callers (a launcher may be called by a helper)
    for _ in range(DEPTH):
        grown = False
        for path, facts in facts_by_path.items():
            for name, caller, line, checked, *rest in facts["calls"]:
                if name in wanted:
                    if rest and not queries.get(name, set()).isdisjoint(rest[0][0]):
                        continue  # a size query (`workspace == nullptr`): launches nothing
                    owner, target, later = (
                        rest[0][2:5] if rest and len(rest[0]) >= 5 else ("", "", "")
                    )
                    via = rest[0][5] if rest and len(rest[0]) >= 6 else ""
                    site = CallSite(caller, path, line, checked, owner, target, later, via)
                    sites = calls.setdefault(name, [])
                    if site not in sites:
                        sites.append(site)
                    if caller and caller not in wanted:
                        wanted.add(caller)
                        grown = True
        if not grown:
            break
    clearing = {n for f in facts_by_path.values() for n in f.get("clears", ())}
    clearing = {n for n in clearing if defs.get(n, 0) == 1 and n not in methods}
    clear_calls: dict[str, list[CallSite]] = {}
    for path, facts in facts_by_path.items():
        for name, caller, line, checked, *rest in facts["calls"]:
            if name in clearing:
                via = rest[0][5] if rest and len(rest[0]) >= 6 else ""
                site = CallSite(caller, path, line, checked, via=via)
                sites = clear_calls.setdefault(name, [])
                if site not in sites:
                    sites.append(site)
    project = CudaProject(
        clear_calls={k: tuple(v) for k, v in clear_calls.items()},
        checks=frozenset(checks),
        checking=checked_by,
        # (weaker: only a fixed-configuration launch before a call to one is left alone, so
        # one checked definition of the name is enough)
        checked_launching=frozenset(n for n in checked_launching if n not in methods),
        defined=frozenset(defined),
        last_error_checks=frozenset(last_error),
        debug_checks=frozenset(debug),
        calls={k: tuple(v) for k, v in calls.items()},
        launchers=launchers,
        launching=frozenset(
            n for n, c in launches_any.items() if defs.get(n, 0) <= c and n not in methods
        ),
        # (a name every definition of which launches is followed, like the launchers above)
        ambiguous=frozenset(methods | {n for n, c in defs.items() if c > 1 and n not in launchers}),
        methods=frozenset(methods),
        bases=bases,
        readers=_readers(facts_by_path, defs, last_error),
    )
    if count:  # (`build` counts once it knows the programs' files)
        count_convention(project, facts_by_path)
    return project


def _readers(
    facts_by_path: dict[str, dict[str, Any]], defs: dict[str, int], last_error: Iterable[str]
) -> frozenset[str]:
    from gpulint.frontends.cuda.checknames import LAST_ERROR_CHECKS

    reading = set(last_error) | LAST_ERROR_CHECKS
    out = set()
    for facts in facts_by_path.values():
        for entry in facts.get("readers", ()):
            name, owner, check = (entry.split(":") + ["", ""])[:3]
            if check in reading and (owner or defs.get(name, 0) == 1):
                out.add(f"{name}:{owner}")
    return frozenset(out)


def build(
    files: Iterable[tuple[str, bytes]], facts_of: Callable[[str, bytes], dict[str, Any]]
) -> CudaProject:
    """The project of a checked tree. Files that launch kernels (`<<<`) are read first; then
    only the files that mention one of their launchers. `facts_of(path, data)` gives a file's
    facts (parsed, or from the facts store)."""
    files = files if isinstance(files, list) else list(files)  # (read twice)
    facts: dict[str, dict[str, Any]] = {}
    rest: list[tuple[str, bytes]] = []
    drivers: set[str] = set()  # sources defining `main`, which other files may `#include`
    extension_sources: list[str] = []  # launching sources that mention torch (GPU804's files)
    for path, data in files:
        if MAIN_BYTES.search(data) and not path.endswith((".h", ".cuh", ".hpp")):
            drivers.add(path.replace("\\", "/"))
        if b"<<<" in data or b"cudaLaunchKernel" in data:
            facts[path] = facts_of(path, data)
            if b"<<<" in data and b"torch" in data:
                extension_sources.append(path)
        else:
            rest.append((path, data))
    # Then the files that call a launcher, and those that call an unchecked caller of one
    # (whose own caller may check), a few levels up.
    paths = [p for p in facts] + [p for p, _ in rest]
    wanted = {n for f in facts.values() for n in f["launchers"]}
    # (and the direct callers of a launcher that resets the error state, not followed further
    # up: a check after the call sees the success it reset to)
    clearing = {n for f in facts.values() for n in f.get("clears", ())}
    done: set[str] = set()
    called: dict[int, set[str]] = {}
    for _ in range(DEPTH + 1):
        names = (wanted | clearing) - done
        if not names:
            break
        done |= names
        # (a functor's call operator is called through an object: a file naming its class)
        classes = [n[: -len("::operator()")].encode() for n in names if n.endswith("::operator()")]
        for path, data in rest:
            if path in facts:
                continue
            if not names.isdisjoint(called_names(data, called)) or any(c in data for c in classes):
                facts[path] = facts_of(path, data)
        for f in facts.values():
            for name, caller, _, checked, *_ in f["calls"]:
                if name in done and name in wanted and caller and not checked:
                    wanted.add(caller)
    for path, data in rest:
        if path not in facts and b"#define" in data and b"cuda" in data:
            facts[path] = {
                "launchers": {},
                "calls": [],
                "defined": [],
                "checks": sorted(set(file_macro_checks(data)) | last_error_checks(data)),
                "last_error_checks": sorted(last_error_checks(data)),
                "debug_checks": sorted(debug_only_checks(data)),
            }
    project = merge(facts, count=False, bases=class_bases(files))
    project.harness_headers = harness_headers(facts, paths, drivers)
    project.torch_by_header = torch_by_header(files)
    # (a launching source that has torch through a header of the tree is an extension's too)
    extension_sources += [
        p for p, data in files if b"<<<" in data and p.replace("\\", "/") in project.torch_by_header
    ]
    project.script_built = script_built(extension_sources)
    project.harness, project.harness_streamless = harness_built(extension_sources)
    project.uncalled_printers = uncalled_device_printers(files)
    project.macros = tree_macros(files)
    project.launch_spellings = {
        p: spelling
        for p, f in facts.items()
        if isinstance(spelling := f.get("launch_check"), str) and spelling
    }
    project.check_macros = {
        p: macro
        for p, f in facts.items()
        if isinstance(macro := f.get("check_macro"), str) and macro
    }
    project.reads_last_error = any(reads_last_error(data) for _, data in files)
    # (an extension only scripts use is still the authors' own library style: counted)
    count_convention(project, facts, project.harness_headers)
    for path, data in rest:
        if (
            path not in facts
            and b"cuda" in data
            and not is_driver_path(path)
            and path.replace("\\", "/") not in project.harness_headers
        ):
            counts = text_api_counts(data)
            for kind, (used, dropped) in counts.items():
                have = project.api.get(kind, (0, 0))
                project.api[kind] = (have[0] + used, have[1] + dropped)
            add_folder_counts(project.api_folders, path, counts)
    return project


_TORCH_INCLUDE_BYTES = re.compile(rb'(?m)^[ \t]*#[ \t]*include[ \t]*[<"](?:torch|ATen|c10)/')
_QUOTED_INCLUDE = re.compile(rb'(?m)^[ \t]*#[ \t]*include[ \t]*"([^"\n]+)"')


def torch_by_header(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """The files (paths with `/`) that include no torch, ATen or c10 header themselves but a
    header of the checked tree that does, directly or through other headers of the tree
    (`#include "common.h"` where `common.h` includes `<torch/extension.h>`): their code is a
    PyTorch extension's as much as a file writing the include. Each `#include "x/y.h"` is
    resolved as `harness_headers` resolves it (the checked file ending in `x/y.h` nearest the
    including file); a header outside the tree is not followed. Read from the text."""
    direct: set[str] = set()
    quoted: dict[str, list[str]] = {}  # file -> the names it includes in quotes
    by_name: dict[str, list[str]] = {}
    for path, data in files:
        path = path.replace("\\", "/")
        by_name.setdefault(path.rsplit("/", 1)[-1], []).append(path)
        if b"#" not in data or b"include" not in data:
            continue
        if _TORCH_INCLUDE_BYTES.search(data):
            direct.add(path)
        found = [include_name(m.decode("utf-8", "replace")) for m in _QUOTED_INCLUDE.findall(data)]
        if found:
            quoted[path] = found
    if not direct:
        return frozenset()

    def resolve(includer: str, name: str) -> str | None:
        here = includer.split("/")[:-1]
        found = [
            p for p in by_name.get(name.rsplit("/", 1)[-1], ()) if ("/" + p).endswith("/" + name)
        ]
        if not found:
            return None
        return max(found, key=lambda p: _shared_prefix(here, p.split("/")[:-1]))

    edges = {
        f: [r for n in names if (r := resolve(f, n)) is not None] for f, names in quoted.items()
    }
    reaches = set(direct)
    grown = True
    while grown:  # (a fixed point: each pass adds the files including one found before)
        grown = False
        for f, targets in edges.items():
            if f not in reaches and any(t in reaches for t in targets):
                reaches.add(f)
                grown = True
    return frozenset(reaches - direct)
