"""One CUDA file's facts for the project (plain JSON data: its launchers, calls, checks,
convention counts, includes), and the store that keeps them between runs by content, so a
warm run reads them instead of parsing every launching file again."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, TypeGuard

from gpulint.frontends.cuda.callgraph import (
    NOT_CALLEES,
    classes_of,
    functor_called,
    functor_key,
    is_method,
    last_error_readers,
    method_called,
    null_args,
    null_exits,
    runs_after,
    unreachable,
)
from gpulint.frontends.cuda.checknames import (
    file_checks,
    is_check_name,
    is_runtime_call,
    last_error_checks,
)
from gpulint.frontends.cuda.checkspelling import launch_check_spelling
from gpulint.frontends.cuda.conventions import (
    checks_after,
    last_check_end,
    launch_checked_in,
    status_checked,
)
from gpulint.frontends.cuda.debugbuilds import debug_only_checks
from gpulint.frontends.cuda.discarded import VALIDATES, api_counts
from gpulint.frontends.cuda.errorstate import is_bare_clear
from gpulint.frontends.cuda.harness import include_name
from gpulint.frontends.cuda.lasterror import launch_helpers
from gpulint.frontends.cuda.syntax import function_name

if TYPE_CHECKING:
    from pathlib import Path

    from gpulint.frontends.cuda.file import CudaFile


def file_facts(file: CudaFile, configured: tuple[str, ...] = ()) -> dict[str, Any]:
    """One file's contribution to the project (JSON-able; a function of the file's bytes and
    the configured check macros only, so it can be stored by content)."""
    launchers: dict[str, set[int]] = {}  # name -> start bytes of its definitions that launch
    # (unchecked); and of those that launch at all
    launching: dict[str, set[int]] = {}
    # The project's launch-checking convention: per host function (name, "" at file scope),
    # its library launches checked on their path and not (tests and programs left out).
    counted: dict[str, list[int]] = {}
    checked_via: dict[str, dict[str, int]] = {}  # name -> check names after a launch -> count
    library = not file.is_test
    for launch in file.launches:
        function = file.enclosing_function(launch)
        if function is not None and file.is_device_function(function):
            continue
        if library and not file.run_by_main(launch):
            name = function_name(file, function) if function is not None else ""
            here = launch_checked_in(file, launch, function or file.root, configured)
            counted.setdefault(name or "", [0, 0])[0 if here else 1] += 1
            if here:  # by which checks (the project may compile them only into debug builds)
                via = ",".join(
                    sorted(checks_after(file, function or file.root, launch, configured))
                )
                by = checked_via.setdefault(name or "", {})
                by[via] = by.get(via, 0) + 1
        if function is None:
            continue
        # (a functor's `operator()` is matched to its callers by its class: `Cls::operator()`)
        name = functor_key(file, function) or function_name(file, function)
        if not name or name == "main" or (is_method(file, function) and "::" not in name):
            continue  # methods share names across classes: not matched to callers by name
        launching.setdefault(name, set()).add(function.start_byte)
        if not launch_checked_in(file, launch, function, configured):
            launchers.setdefault(name, set()).add(function.start_byte)
    # How many host functions of each name the file defines: a launcher whose name other
    # functions share (`compute`, a CPU twin) cannot be matched to its callers by name.
    defs: dict[str, int] = {}
    methods: set[str] = set()
    for fn in file.nodes("function_definition") + file.macro_functions:
        name = function_name(file, fn)
        if name and not file.is_device_function(fn):
            defs[name] = defs.get(name, 0) + 1
            if is_method(file, fn):
                methods.add(name)
            key = functor_key(file, fn)
            if key is not None:
                defs[key] = defs.get(key, 0) + 1
    calls: list[tuple[str, str, int, bool, list[Any]]] = []
    nodes = []  # the call of each entry of `calls`
    objects: dict[str, str] = {}  # (filled on the first call through an object)
    for call in file.all_calls:
        name = functor_called(file, call) or file.call_name(call) or method_called(file, call)
        if not name or is_runtime_call(name) or is_check_name(name) or name in NOT_CALLEES:
            continue
        function = file.enclosing_function(call)
        if function is None or file.is_device_function(function) or file.broken(call):
            continue
        caller = function_name(file, function) or ""
        classes = classes_of(file, call, function, objects)
        if (name == caller and classes[1] == classes[0]) or unreachable(file, call, function):
            continue  # (a method calling the same-named method of another class is no recursion)
        checked = (
            status_checked(file, call)
            or last_check_end(file, function, configured) > call.end_byte
            # a test that validates the output after the call: a failed launch fails the test
            or (
                file.is_test
                and bool(VALIDATES.search(file.data[call.end_byte : function.end_byte]))
            )
        )
        calls.append(
            (
                name,
                caller,
                file.span(call)[0],
                checked,
                [*null_args(file, call, function), *classes, function.start_byte, call.end_byte],
            )
        )
        nodes.append(call)
    # The calls after each unchecked call on its path in its function (a later call of a
    # function that reads the last error checks it too), at most 16 names each.
    by_function: dict[int, list[tuple[Any, str]]] = {}
    for (name, _, _, _, extra), node in zip(calls, nodes, strict=True):
        by_function.setdefault(extra[4], []).append((node, f"{name}:{extra[3]}"))
    for i, ((name, caller, line, checked, extra), node) in enumerate(
        zip(calls, nodes, strict=True)
    ):
        later: list[str] = []
        if not checked:
            for other, key in by_function[extra[4]]:
                if other.start_byte > node.end_byte and key not in later:
                    if runs_after(file, node, other):
                        later.append(key)
                        if len(later) >= 16:
                            break
        via = ""
        if checked and not status_checked(file, call := node):
            via = ",".join(
                sorted(checks_after(file, file.enclosing_function(call), call, configured))
            )
        calls[i] = (name, caller, line, checked, [*extra[:4], ",".join(later), via])
    # host functions (not methods, nor `main`) with a bare `cudaGetLastError();`: a caller's
    # check after a call of one may see the success it resets to (errorstate.checked_callers)
    clears = set()
    for call in file.all_calls:
        if is_bare_clear(file, call):
            function = file.enclosing_function(call)
            if function is None or file.is_device_function(function):
                continue
            name = function_name(file, function)
            if name and name != "main" and not is_method(file, function):
                clears.add(name)
    defined = {
        n
        for fn in file.nodes("function_definition")
        if (n := function_name(file, fn)) and n.startswith("cuda")
    }
    includes = sorted(
        {
            (include_name(file.node_text(path)), file.in_program_code(inc))
            for inc in file.nodes("preproc_include")
            if (path := inc.child_by_field_name("path")) is not None
            and path.type == "string_literal"
        }
    )
    own = frozenset(file_checks(file))
    checking, checked_launching = launch_helpers(file, own)
    return {
        "includes": includes,
        "launchers": {n: len(v) for n, v in sorted(launchers.items())},
        "launching": {n: len(v) for n, v in sorted(launching.items())},
        "launch_counts": {n: c for n, c in sorted(counted.items())},
        "launch_checks": {n: c for n, c in sorted(checked_via.items())},
        "api_counts": api_counts(file),
        "defs": defs,
        "null_exits": null_exits(file),
        "readers": last_error_readers(file),
        "methods": sorted(methods),
        "calls": calls,
        "clears": sorted(clears),
        "checks": sorted(own),
        "checking": sorted(checking),
        "checked_launching": sorted(checked_launching),
        "defined": sorted(defined),
        "last_error_checks": sorted(last_error_checks(file.data)),
        "debug_checks": sorted(debug_only_checks(file.data)),
        "launch_check": _shared_spelling(file),
        "check_macro": _shared_check_macro(file),
    }


def _shared_spelling(file: CudaFile) -> str:
    """The file's launch check spelling as other files may write it: "" when its check is a
    macro or helper the file defines itself and the file is a source (`#define CHECK_LAST()`
    in `a.cu` does not compile in `b.cu`)."""
    spelling = launch_check_spelling(file)
    name = spelling.split("(", 1)[0]
    header = file.display_path.endswith((".h", ".cuh", ".hpp", ".hh", ".inl"))
    if spelling and not header and name in file.own_checks:
        return ""
    return spelling


def _shared_check_macro(file: CudaFile) -> str:
    """The check the file wraps runtime calls in (checknames.house_check_macro) as other files
    may write it: "" when none, or one the file (a source) defines itself."""
    from gpulint.frontends.cuda.checknames import house_check_macro

    name = house_check_macro(file, default=None) or ""
    header = file.display_path.endswith((".h", ".cuh", ".hpp", ".hh", ".inl"))
    return "" if name and not header and name in file.own_checks else name


class FactStore:
    """Per-file facts kept between runs, keyed by the file's content and the configured check
    macros, so a warm run reads them instead of parsing every launching file again. One JSON
    file per gpulint build in the result cache's folder; entries not used by a run are
    dropped when it saves. Unreadable or foreign content is ignored, never trusted."""

    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self, directory: Path | None, configured: tuple[str, ...]) -> None:
        from gpulint.engine import _code_stamp

        self.directory = directory
        stamp = hashlib.sha256(f"{_code_stamp()}".encode()).hexdigest()[:16]
        self.path = directory / f"cuda-facts-{stamp}.json" if directory is not None else None
        self.salt = json.dumps(sorted(configured))
        self.old: dict[str, dict[str, Any]] = {}
        self.new: dict[str, dict[str, Any]] = {}
        if self.path is not None and directory is not None:
            from gpulint.safeio import Unreadable, read_text

            try:
                data = json.loads(read_text(self.path, self.MAX_BYTES, [directory]))
                if isinstance(data, dict) and isinstance(data.get("files"), dict):
                    self.old = data["files"]
            except (Unreadable, ValueError, RecursionError):
                pass

    def key(self, data: bytes) -> str:
        return hashlib.sha256(data + self.salt.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        found = self.new.get(key) or self.old.get(key)
        if not _valid(found):
            return None
        self.new[key] = found
        return found

    def put(self, key: str, facts: dict[str, Any]) -> None:
        self.new[key] = facts

    def save(self) -> None:
        if self.path is None or self.directory is None or self.new.keys() == self.old.keys():
            return
        import os
        import tempfile

        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=".cuda-facts-", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump({"files": self.new}, out, separators=(",", ":"))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a store that cannot be written is only a slower next run


def _valid(facts: object) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(facts, dict)
        and isinstance(facts.get("launchers"), dict)
        and isinstance(facts.get("calls"), list)
        and all(isinstance(c, list) and len(c) == 5 for c in facts["calls"])
        and isinstance(facts.get("checks"), list)
        and isinstance(facts.get("defined"), list)
    )


# --- extensions whose only Python users are scripts -----------------------------------------
