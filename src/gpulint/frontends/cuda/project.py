"""What one CUDA file needs to know about the others: which host functions (and macros) launch
kernels without checking, who calls them and whether the caller checks after the call, and the
project's own error-checking macros. Facts are gathered per file (plain, JSON-able data), merged
once per run into a `CudaProject`, and handed to every file's parse, so a launcher in `ops.cu`
is judged by its callers in `bindings.cpp`. A file linted alone (editor, flake8) gets a project
of itself: the same rules over the facts of one translation unit.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeGuard

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.idioms import (
    VALIDATES,
    api_counts,
    api_kind,
    debug_only_checks,
    file_checks,
    folders_of,
    function_name,
    is_check_name,
    is_runtime_call,
    last_error_checks,
    launch_check_spelling,
    launch_helpers,
    on_path_after,
    tree_macros,
)
from gpulint.safeio import read_side
from gpulint.source import is_driver_path

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# How many callers up a launch is followed (launcher <- helper <- op <- layer ...): bounded,
# so the project index stays a few passes over the call facts.
_DEPTH = 5


@dataclass(frozen=True)
class CallSite:
    caller: str  # the calling host function (or "" at file scope)
    path: str  # where, as displayed
    line: int
    checked: bool  # a launch check follows the call in the caller, or the result is used
    owner: str = ""  # the class of the caller, when it is a method (`Layer<T>::forward`)
    # the class whose method is called, when the call names it: `layer_->forward(...)` where
    # the file sets `layer_ = new AttentionLayer<T>(...)` or declares `AttentionLayer<T>* layer_`
    # (a call of the class's own method inside another of its methods too)
    target: str = ""
    # calls after this one in the caller, when it is not checked: "name:class" joined by ","
    # (a later call of a function that reads the last error reports this call's failure too)
    later: str = ""
    # the check names after the call in the caller, when a later check is what checks it (a
    # call checked only by the project's debug-only checks is not checked in a release build)
    via: str = ""


@dataclass
class CudaProject:
    checks: frozenset[str] = frozenset()  # the project's own checking macros/functions
    # functions that launch and then check (idioms.checking_launchers): part of `checks`
    checking: frozenset[str] = frozenset()
    # functions whose own launch is checked in some way, also by its status (a constant-config
    # launch before a call to one is left alone: see GPU802)
    checked_launching: frozenset[str] = frozenset()
    defined: frozenset[str] = frozenset()  # cuda-prefixed names the project defines itself
    # The project's launch-checking convention: its library launches (tests and standalone
    # programs left out) checked on their path or by every caller, and all of them
    launches_checked: int = 0
    launches_total: int = 0
    # library launches checked only by checks compiled into debug builds (not counted above)
    launches_debug_checked: int = 0
    # the project's checks that read the last error only in a debug build, or when an
    # environment variable is set (idioms.debug_only_checks): not its release convention
    debug_checks: frozenset[str] = frozenset()
    # library launches outside the files that check one, where only one file does (else 0)
    launches_beside_one_checking_file: int = 0
    # per kind of corrupting runtime call (idioms.api_kind): [status used, discarded]
    api: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the same per folder of the tree: "folder:kind" -> [status used, discarded] (each file's
    # calls counted in every folder above it; GPU803 asks the nearest with enough calls)
    api_folders: dict[str, tuple[int, int]] = field(default_factory=dict)
    # its checks that read the last error (idioms.last_error_checks): they also report a
    # runtime call's failure before them (GPU803)
    last_error_checks: frozenset[str] = frozenset()
    calls: dict[str, tuple[CallSite, ...]] = field(default_factory=dict)  # callee -> sites
    launchers: dict[str, str] = field(default_factory=dict)  # launcher -> path defining it
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
    # names `#define`d in any source of the checked tree (idioms.tree_macros): a macro none of
    # them nor a build file defines leaves its `#if` branch out of every build (GPU807)
    macros: frozenset[str] = frozenset()
    # how each file with launches spells its launch check (idioms.launch_check_spelling):
    # path -> `STD_CUDA_KERNEL_LAUNCH_CHECK();`; a fix suggestion in a file that writes none
    # uses its nearest sibling's
    launch_spellings: dict[str, str] = field(default_factory=dict)
    # the check macro each such file wraps runtime calls in (idioms.house_check_macro), for
    # GPU803's suggestion in a file of the folder that wraps none
    check_macros: dict[str, str] = field(default_factory=dict)

    def callers(self, name: str) -> tuple[CallSite, ...]:
        return self.calls.get(name, ())

    def unchecked_caller(
        self,
        name: str,
        depth: int = 0,
        seen=None,
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
        seen=None,
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
            if depth < _DEPTH and caller and self._followed(caller, site.owner):
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
            "harness": path in self.harness_headers,
            "script_built": path in self.script_built,
            "harness_built": [path in self.harness, path in self.harness_streamless],
            "uncalled": sorted(e for e in self.uncalled_printers if e.startswith(path + ":")),
            "macros": sorted(self.macros),
            "launch_check_near": self.launch_check_near(path),
            "check_macro_near": self.launch_check_near(path, self.check_macros),
        }
        return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()[:16]

    def to_json(self) -> dict:
        """The project as plain JSON data (`from_json` gives it back equal): kept between runs
        by gpulint.projectcache. A field of a kind not handled here raises TypeError."""
        out: dict = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, frozenset) and all(isinstance(v, str) for v in value):
                out[f.name] = sorted(value)
            elif type(value) is int:
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
    def from_json(cls, data: dict) -> CudaProject:
        """The project `to_json` gave; ValueError where `data` is not one."""
        values: dict = {}
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
            elif f.type == "int":
                if type(value) is not int:
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
        """The call sites of `name` and of its callers, `_DEPTH` levels up (each name once)."""
        out: list[CallSite] = []
        seen = {name}
        level = [name]
        for _ in range(_DEPTH + 1):
            up = []
            for callee in level:
                for site in self.callers(callee):
                    out.append(site)
                    if site.caller and site.caller not in seen:
                        seen.add(site.caller)
                        up.append(site.caller)
            level = up
        return out


def _basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _site_key(site: CallSite) -> tuple:
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


def file_facts(file: CudaFile, configured: tuple[str, ...] = ()) -> dict:
    """One file's contribution to the project (JSON-able; a function of the file's bytes and
    the configured check macros only, so it can be stored by content)."""
    launchers: dict[str, set[int]] = {}  # name -> start bytes of its definitions that launch
    # The project's launch-checking convention: per host function (name, "" at file scope),
    # its library launches checked on their path and not (tests and programs left out).
    counted: dict[str, list[int]] = {}
    checked_via: dict[str, dict[str, int]] = {}  # name -> check names after a launch -> count
    library = not file.is_test
    for launch in file.launches:
        function = file.enclosing_function(launch)
        if function is not None and file.is_device_function(function):
            continue
        if library and not file.in_program_code(launch):
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
        name = function_name(file, function)
        if not name or name == "main" or _is_method(file, function):
            continue  # methods share names across classes: not matched to callers by name
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
            if _is_method(file, fn):
                methods.add(name)
    calls: list[tuple[str, str, int, bool, list]] = []
    nodes = []  # the call of each entry of `calls`
    objects: dict[str, str] = {}  # (filled on the first call through an object)
    for call in file.all_calls:
        name = file.call_name(call) or _method_called(file, call)
        if not name or is_runtime_call(name) or is_check_name(name) or name in _NOT_CALLEES:
            continue
        function = file.enclosing_function(call)
        if function is None or file.is_device_function(function) or file.broken(call):
            continue
        caller = function_name(file, function) or ""
        classes = _classes_of(file, call, function, objects)
        if (name == caller and classes[1] == classes[0]) or _unreachable(file, call, function):
            continue  # (a method calling the same-named method of another class is no recursion)
        checked = (
            _status_checked(file, call)
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
                [*_null_args(file, call, function), *classes, function.start_byte, call.end_byte],
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
                    if _on_path_after(file, node, other):
                        later.append(key)
                        if len(later) >= 16:
                            break
        via = ""
        if checked and not _status_checked(file, call := node):
            via = ",".join(
                sorted(checks_after(file, file.enclosing_function(call), call, configured))
            )
        calls[i] = (name, caller, line, checked, [*extra[:4], ",".join(later), via])
    defined = {
        n
        for fn in file.nodes("function_definition")
        if (n := function_name(file, fn)) and n.startswith("cuda")
    }
    includes = sorted(
        {
            (_include_name(file.node_text(path)), file.in_program_code(inc))
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
        "launch_counts": {n: c for n, c in sorted(counted.items())},
        "launch_checks": {n: c for n, c in sorted(checked_via.items())},
        "api_counts": api_counts(file),
        "defs": defs,
        "null_exits": _null_exits(file),
        "readers": _last_error_readers(file),
        "methods": sorted(methods),
        "calls": calls,
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
    """The check the file wraps runtime calls in (idioms.house_check_macro) as other files
    may write it: "" when none, or one the file (a source) defines itself."""
    from gpulint.frontends.cuda.idioms import house_check_macro

    name = house_check_macro(file, default=None) or ""
    header = file.display_path.endswith((".h", ".cuh", ".hpp", ".hh", ".inl"))
    return "" if name and not header and name in file.own_checks else name


def _is_method(file: CudaFile, function) -> bool:
    """A member function: defined in a class body, or out of line as `Cls::name`."""
    if file.macro_name(function) is not None:
        return False
    declarator = file.function_name_node(function)
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    if inner is not None and inner.type in ("qualified_identifier", "field_identifier"):
        return True
    return any(a.type == "field_declaration_list" for a in file.ancestors(function))


# A statement after which the rest of its block never runs: `return`, `throw`, a call that
# does not return, an assertion of `false` (`FT_CHECK(false)`, `TORCH_CHECK(false, "...")`).
_NO_RETURN = re.compile(
    rb"^(?:return\b|throw\b|(?:std::)?(?:abort|exit|_Exit|quick_exit)\s*\(|__builtin_unreachable\b"
    rb"|\w*THROW\w*\s*\(|\w*(?i:check|assert)\w*\s*\(\s*(?:false|0)\s*[,)])"
)


_DEAD_STATEMENTS: MemoKey[dict[int, frozenset[int]]] = MemoKey("cuda.dead_statements")
_PARAMETERS: MemoKey[dict[int, list[str]]] = MemoKey("cuda.parameters")


def _unreachable(file: CudaFile, call, function) -> bool:
    """`call` follows, in its own block or one around it, a statement that never returns (a
    call placed after `FT_CHECK(false);` is dead code: no caller of anything)."""
    blocks = file.memo.get(_DEAD_STATEMENTS, dict)
    node = call
    for a in file.ancestors(call):
        if a == function or a.type == "lambda_expression":
            return False
        if a.type == "compound_statement":
            dead = blocks.get(a.start_byte)
            if dead is None:  # once per block: its statements after a no-return one
                found, after = set(), False
                for sibling in a.named_children:
                    if sibling.type in ("labeled_statement", "case_statement"):
                        after = False  # reachable by a jump
                    if after:
                        found.add(sibling.start_byte)
                    text = file.data[sibling.start_byte : sibling.end_byte]
                    if sibling.type in ("return_statement", "throw_statement") or (
                        sibling.type == "expression_statement" and _NO_RETURN.match(text)
                    ):
                        after = True
                dead = blocks[a.start_byte] = frozenset(found)
            if node.start_byte in dead:
                return True
        node = a
    return False


_NULL = frozenset({"nullptr", "NULL", "0"})


def _null_args(file: CudaFile, call, function) -> list[list]:
    """[positions of the arguments of `call` written as a null pointer, [position, parameter
    index] of those that pass a parameter of the caller on unchanged]."""
    args = call.child_by_field_name("arguments")
    if args is None:
        return [[], []]
    params = _parameters(file, function) if file.macro_name(function) is None else []
    nulls: list[int] = []
    passes: list[list[int]] = []
    for i, a in enumerate(x for x in args.named_children if x.type != "comment"):
        text = file.node_text(a).strip()
        if text in _NULL:
            nulls.append(i)
        elif a.type == "identifier" and text in params:
            passes.append([i, params.index(text)])
    return [nulls, passes]


_NULL_TEST = re.compile(
    rb"^\(\s*(?:!\s*(\w+)|(\w+)\s*==\s*(?:nullptr|NULL|0)|(?:nullptr|NULL|0)\s*==\s*(\w+))\s*\)$"
)


def _null_exits(file: CudaFile) -> dict[str, list[int]]:
    """Host functions that return before any launch when a pointer parameter is null (a
    workspace-size query: `if (workspace == nullptr) { size = ...; return; }`): name ->
    the positions of those parameters. A call passing null there launches nothing."""
    out: dict[str, set[int]] = {}
    if b"return" not in file.data:
        return {}
    for branch in file.nodes("if_statement"):
        condition = branch.child_by_field_name("condition")
        if condition is None:
            continue
        m = _NULL_TEST.match(file.data[condition.start_byte : condition.end_byte])
        if m is None:
            continue
        then = branch.child_by_field_name("consequence")
        text = file.data[then.start_byte : then.end_byte] if then is not None else b""
        if b"return" not in text or b"<<<" in text:
            continue
        function = file.enclosing_function(branch)
        if function is None or file.is_device_function(function):
            continue
        body = file.data[function.start_byte : branch.start_byte]
        if b"<<<" in body or any(
            a.type in ("for_statement", "while_statement", "do_statement", "for_range_loop")
            for a in _ancestors_to(file, branch, function)
        ):
            continue  # a launch before it, or a loop around it: not a query's early exit
        params = _parameters(file, function)
        name = function_name(file, function)
        tested = (m.group(1) or m.group(2) or m.group(3)).decode("ascii", "replace")
        if name and tested in params:
            out.setdefault(name, set()).add(params.index(tested))
    return {n: sorted(v) for n, v in sorted(out.items())}


def _method_called(file: CudaFile, call) -> str | None:
    """`forward` of `layer_->forward(...)` / `layer.forward(...)`."""
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        field = fn.child_by_field_name("field")
        if field is not None and field.type == "field_identifier":
            return file.node_text(field)
    return None


_BRANCHES = frozenset(
    {"if_statement", "switch_statement", "conditional_expression", "case_statement"}
    | {"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "lambda_expression"}
)


def _on_path_after(file: CudaFile, call, later) -> bool:
    """`later` runs whenever `call` has run, no branch (runtime or preprocessor) around it."""
    return on_path_after(file, call, later, _BRANCHES)


def _last_error_readers(file: CudaFile) -> list[str]:
    """ "name:class" of the host functions that call a check (the file's or project's, or a
    last-error read): which of those read the last error is known once the project is
    merged (its `last_error_checks`). [name:class:check, ...]"""
    from gpulint.frontends.cuda.idioms import LAST_ERROR_CHECKS

    names = file.check_names | LAST_ERROR_CHECKS
    out: set[str] = set()
    for fn in file.nodes("function_definition"):
        if file.is_device_function(fn):
            continue
        text = file.data[fn.start_byte : fn.end_byte]
        found = {
            n
            for m in _CALLED_BYTES.finditer(text)
            if (n := m.group(1).decode("ascii", "replace")) in names
        }
        if found:
            name = function_name(file, fn) or ""
            owner = _class_of(file, fn) if _is_method(file, fn) else ""
            out.update(f"{name}:{owner}:{n}" for n in found)
    return sorted(out)


def _class_of(file: CudaFile, function) -> str:
    """The class a method belongs to: `Cls` of `Cls<T>::run`, or the class around it."""
    declarator = file.function_name_node(function)
    inner = declarator.child_by_field_name("declarator") if declarator is not None else None
    if inner is not None and inner.type == "qualified_identifier":
        scope = inner.child_by_field_name("scope")
        return _type_name(file.node_text(scope))
    for a in file.ancestors(function):
        if a.type in ("class_specifier", "struct_specifier"):
            return _type_name(file.node_text(a.child_by_field_name("name")))
    return ""


def _type_name(text: str) -> str:
    """`ns::Layer<T>` -> `Layer`."""
    return text.split("<", 1)[0].strip().rsplit("::", 1)[-1].strip()


# `layer_ = new Layer<T>(...)`; `Layer<T>* layer_;`, `Layer layer(...)` (a class name is
# capitalised, as most C++ code bases write them): read from the text, which is much
# cheaper than the tree's declarations.
_NEW_OBJECT = re.compile(rb"=[ \t]*new[ \t]+(?:\w+::)*(\w+)")
_ASSIGNED = re.compile(rb"(\w+)[ \t]*$")
_DECLARED_OBJECT = re.compile(
    rb"\b([A-Z]\w*)(?:<[^;(){}\n<>]{0,80}(?:<[^;(){}\n<>]{0,40}>)?>)?[ \t]*[*&]*[ \t]*([a-z_]\w*)[ \t]*[;=({]"
)


def _object_classes(file: CudaFile) -> dict[str, str]:
    """Names of objects the file gives one class: `layer_ = new Layer<T>(...)`,
    `Layer<T>* layer_;`, `Layer<T> layer(...)` -> {"layer_": "Layer"}. A name given two
    classes maps to ""."""
    found: dict[bytes, set[bytes]] = {}
    for m in _NEW_OBJECT.finditer(file.data):
        lhs = _ASSIGNED.search(file.data, max(0, m.start() - 80), m.start())
        if lhs is not None:
            found.setdefault(lhs.group(1), set()).add(m.group(1))
    for m in _DECLARED_OBJECT.finditer(file.data):
        found.setdefault(m.group(2), set()).add(m.group(1))
    return {
        n.decode("ascii", "replace"): next(iter(c)).decode("ascii", "replace")
        if len(c) == 1
        else ""
        for n, c in found.items()
    }


def _classes_of(file: CudaFile, call, function, objects: dict[str, str]) -> list[str]:
    """[the class of the calling method or "", the class whose method the call reaches or ""]."""
    owner = _class_of(file, function) if _is_method(file, function) else ""
    fn = call.child_by_field_name("function")
    if fn is not None and fn.type == "field_expression":
        receiver = file.node_text(fn.child_by_field_name("argument")).strip()
        if receiver == "this":
            return [owner, owner]
        m = re.search(r"(\w+)$", receiver)
        if m is None:
            return [owner, ""]
        if not objects:
            objects.update(_object_classes(file) or {"": ""})
        return [owner, objects.get(m.group(1), "")]
    if fn is not None and fn.type == "identifier" and owner:
        return [owner, owner]  # a method calling one of its class (or, virtual, of one deriving)
    return [owner, ""]


def _ancestors_to(file: CudaFile, node, stop):
    for a in file.ancestors(node):
        if a == stop:
            return
        yield a


def _parameters(file: CudaFile, function) -> list[str]:
    """The parameter names of `function`, in order ("" for an unnamed one)."""
    memo = file.memo.get(_PARAMETERS, dict)
    found = memo.get(function.start_byte)
    if found is None:
        found = memo[function.start_byte] = _parameter_names(file, function)
    return found


def _parameter_names(file: CudaFile, function) -> list[str]:
    declarator = file.function_name_node(function)
    params = declarator.child_by_field_name("parameters") if declarator is not None else None
    out = []
    for p in params.named_children if params is not None else ():
        if p.type == "comment":
            continue
        found = ""
        d = p.child_by_field_name("declarator")
        while d is not None:
            if d.type == "identifier":
                found = file.node_text(d)
                break
            d = d.child_by_field_name("declarator")
        out.append(found)
    return out


# Calls that are never a launcher of the project (keeps the facts small).
_NOT_CALLEES = frozenset(
    "printf fprintf sizeof static_cast reinterpret_cast min max std size data_ptr "
    "TORCH_CHECK AT_ASSERTM assert malloc free memcpy memset".split()
)


_CALLED_BYTES = re.compile(rb"\b([A-Za-z_]\w*)\s*\(")
# Per scope (start, end, configured checks): where its last launch check ends. Depends on the
# project's checks: forgotten when a file parsed by the index is handed to the lint.
LAST_CHECK_END: MemoKey[dict[tuple[int, int, tuple[str, ...]], int]] = MemoKey(
    "cuda.last_check_end"
)


def last_check_end(file: CudaFile, scope, configured=()) -> int:
    """Byte offset just past the last launch check in `scope` (a function, or the file): -1
    when none. The text, not the tree: a check inside a region tree-sitter could not parse
    still counts. Computed once per scope."""
    cache = file.memo.get(LAST_CHECK_END, dict)
    key = (scope.start_byte, scope.end_byte, tuple(configured))
    found = cache.get(key)
    if found is None:
        found = -1
        names = file.check_names
        text = file.data[scope.start_byte : scope.end_byte]
        for m in _CALLED_BYTES.finditer(text):
            name = m.group(1).decode("ascii", "replace")
            if is_check_name(name, configured) or name in names:
                found = m.end()
        # A checking launcher called with template arguments (`launch<C, G, k<true>>(g)`).
        for name in file.checking_launchers() | (
            file._project.checking if file._project is not None else frozenset()
        ):
            for m in re.finditer(rb"\b" + re.escape(name.encode()) + rb"\s*[<(]", text):
                found = max(found, m.end())
        for name in configured:
            at = text.rfind(name.encode())
            if at >= 0:
                found = max(found, at + len(name))
        found = scope.start_byte + found if found >= 0 else -1
        cache[key] = found
    return found


def _status_checked(file: CudaFile, call) -> bool:
    """The call's result is checked where it is made: `CUDA_CHECK(launch(...))`,
    `if (launch(...) != cudaSuccess)`, `cudaError_t e = launch(...)` (a launcher that returns
    `cudaGetLastError()`). Returning or storing a tensor is not a check."""
    node = call
    for a in file.ancestors(call):
        if a.type in _STATEMENT_CONTAINERS_OR_FUNCTION:
            break
        if a.type == "call_expression" and is_check_name(file.call_name(a)):
            return True
        node = a
    return "cudaSuccess" in file.node_text(node) or "cudaError" in file.node_text(node)


_STATEMENT_CONTAINERS_OR_FUNCTION = {
    "compound_statement",
    "translation_unit",
    "function_definition",
    "lambda_expression",
}


def checks_after(file: CudaFile, scope, node, configured=()) -> set[str]:
    """The names of the launch checks after `node` in `scope` (as `last_check_end` finds
    them): which checks cover it, for the project's convention (a debug-only one is none)."""
    if scope is None:
        return set()
    names = file.check_names
    text = file.data[node.end_byte : scope.end_byte]
    found = {
        n
        for m in _CALLED_BYTES.finditer(text)
        if is_check_name(n := m.group(1).decode("ascii", "replace"), configured) or n in names
    }
    for name in file.checking_launchers() | (
        file._project.checking if file._project is not None else frozenset()
    ):
        if re.search(rb"\b" + re.escape(name.encode()) + rb"\s*[<(]", text):
            found.add(name)
    found.update(n for n in configured if n.encode() in text)
    return found


def _release_checked(via: str, debug: frozenset[str]) -> bool:
    """A launch or call checked by the checks named in `via` (comma-joined) is checked in a
    release build: one of them is not debug-only (no names: checked by its status)."""
    return not via or not debug or any(n not in debug for n in via.split(","))


def launch_checked_in(file: CudaFile, launch, function, configured=()) -> bool:
    """A launch check follows `launch` in `function`."""
    return last_check_end(file, function, configured) > launch.end_byte


def merge(
    facts_by_path: dict[str, dict], count: bool = True, bases: frozenset[str] = frozenset()
) -> CudaProject:
    launchers: dict[str, str] = {}
    launching: dict[str, int] = {}
    checks: set[str] = set()
    last_error: set[str] = set()
    debug: set[str] = set()
    defined: set[str] = set()
    checking: dict[str, int] = {}
    checked_launching: dict[str, int] = {}
    for path, facts in facts_by_path.items():
        for name, count in facts["launchers"].items():
            launchers.setdefault(name, path)
            launching[name] = launching.get(name, 0) + count
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
    for _ in range(_DEPTH):
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
    for _ in range(_DEPTH):
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
    project = CudaProject(
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
        # (a name every definition of which launches is followed, like the launchers above)
        ambiguous=frozenset(methods | {n for n, c in defs.items() if c > 1 and n not in launchers}),
        methods=frozenset(methods),
        bases=bases,
        readers=_readers(facts_by_path, defs, last_error),
    )
    if count:  # (`build` counts once it knows the programs' files)
        _count_convention(project, facts_by_path)
    return project


def _readers(facts_by_path: dict[str, dict], defs: dict[str, int], last_error) -> frozenset:
    from gpulint.frontends.cuda.idioms import LAST_ERROR_CHECKS

    reading = set(last_error) | LAST_ERROR_CHECKS
    out = set()
    for facts in facts_by_path.values():
        for entry in facts.get("readers", ()):
            name, owner, check = (entry.split(":") + ["", ""])[:3]
            if check in reading and (owner or defs.get(name, 0) == 1):
                out.add(f"{name}:{owner}")
    return frozenset(out)


def _count_convention(
    project: CudaProject, facts_by_path: dict[str, dict], skip: frozenset[str] = frozenset()
) -> None:
    """The project's launch-checking convention and its per-kind runtime-call counts. A
    launcher's unchecked launches count as checked when library callers are found and every
    one of them checks after the call, or is checked by its own callers. `skip`: files that are programs' code (a
    harness header, a file including its driver)."""
    checked = total = debug_checked = 0
    checking_files: list[int] = []  # the launches of each file with a checked one
    api: dict[str, list[int]] = {}
    folders: dict[str, tuple[int, int]] = {}
    by_callers: dict[str, bool] = {}  # launcher -> every (library) caller checks
    by_callers_debug: dict[str, bool] = {}  # ... counting debug-only checks too
    debug = project.debug_checks
    for path, facts in facts_by_path.items():
        if path.replace("\\", "/") in skip:
            continue
        before, before_total = checked, total
        counts = facts.get("launch_counts", {})
        vias = facts.get("launch_checks", {})
        for name, (here, unchecked) in counts.items():
            total += here + unchecked
            # launches checked in their function only by debug-only checks
            only_debug = sum(
                c for v, c in vias.get(name, {}).items() if not _release_checked(v, debug)
            )
            checked += here - only_debug
            debug_checked += only_debug
            if unchecked and name in project.launchers:
                if _checked_by_callers(project, name, by_callers):
                    checked += unchecked
                elif debug and _checked_by_callers(project, name, by_callers_debug, release=False):
                    debug_checked += unchecked
        if checked > before:
            checking_files.append(total - before_total)
        for kind, (used, dropped) in facts.get("api_counts", {}).items():
            pair = api.setdefault(kind, [0, 0])
            pair[0] += used
            pair[1] += dropped
        add_folder_counts(folders, path, facts.get("api_counts", {}))
    project.launches_checked, project.launches_total = checked, total
    project.launches_debug_checked = debug_checked
    project.launches_beside_one_checking_file = (
        total - checking_files[0] if len(checking_files) == 1 else 0
    )
    project.api = {k: (u, d) for k, (u, d) in api.items()}
    project.api_folders = folders


def add_folder_counts(
    folders: dict[str, tuple[int, int]], path: str, counts: dict[str, list[int]]
) -> None:
    """Add a file's per-kind [used, discarded] counts to every folder above it."""
    for kind, (used, dropped) in counts.items():
        if used or dropped:
            for folder in folders_of(path):
                have = folders.get(f"{folder}:{kind}", (0, 0))
                folders[f"{folder}:{kind}"] = (have[0] + used, have[1] + dropped)


def _checked_by_callers(
    project: CudaProject, name: str, memo: dict[str, bool], depth: int = 0, release: bool = True
) -> bool:
    """Library callers of `name` are found and each checks after the call, or is itself
    checked by its callers (three levels up). By name, once per name: a count, cheaper than
    `unchecked_caller`'s walk for a finding (seconds on a large tree). `release`: leave out
    the checks compiled only into debug builds (`project.debug_checks`)."""
    if name in memo:
        return memo[name]
    memo[name] = False  # (a cycle checks nothing)
    sites = [s for s in project.callers(name) if s.caller != "main" and not is_driver_path(s.path)]
    drop = project.debug_checks if release else frozenset()
    found = bool(sites) and all(
        (s.checked and _release_checked(s.via, drop))
        or (
            depth < 3
            and bool(s.caller)
            and _checked_by_callers(project, s.caller, memo, depth + 1, release)
        )
        for s in sites
    )
    memo[name] = found
    return found


def build(
    files: Iterable[tuple[str, bytes]], facts_of: Callable[[str, bytes], dict]
) -> CudaProject:
    """The project of a checked tree. Files that launch kernels (`<<<`) are read first; then
    only the files that mention one of their launchers. `facts_of(path, data)` gives a file's
    facts (parsed, or from the facts store)."""
    files = files if isinstance(files, list) else list(files)  # (read twice)
    facts: dict[str, dict] = {}
    rest: list[tuple[str, bytes]] = []
    drivers: set[str] = set()  # sources defining `main`, which other files may `#include`
    extension_sources: list[str] = []  # launching sources that mention torch (GPU804's files)
    for path, data in files:
        if _MAIN_BYTES.search(data) and not path.endswith((".h", ".cuh", ".hpp")):
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
    done: set[str] = set()
    called: dict[int, set[str]] = {}
    for _ in range(_DEPTH + 1):
        names = wanted - done
        if not names:
            break
        done |= names
        for path, data in rest:
            if path not in facts and not names.isdisjoint(_called_names(data, called)):
                facts[path] = facts_of(path, data)
        for f in facts.values():
            for name, caller, _, checked, *_ in f["calls"]:
                if name in done and caller and not checked:
                    wanted.add(caller)
    for path, data in rest:
        if path not in facts and b"#define" in data and b"cuda" in data:
            facts[path] = {
                "launchers": {},
                "calls": [],
                "defined": [],
                "checks": sorted(set(_macro_checks(data)) | last_error_checks(data)),
                "last_error_checks": sorted(last_error_checks(data)),
                "debug_checks": sorted(debug_only_checks(data)),
            }
    project = merge(facts, count=False, bases=class_bases(files))
    project.harness_headers = harness_headers(facts, paths, drivers)
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
    # (an extension only scripts use is still the authors' own library style: counted)
    _count_convention(project, facts, project.harness_headers)
    for path, data in rest:
        if (
            path not in facts
            and b"cuda" in data
            and not is_driver_path(path)
            and path.replace("\\", "/") not in project.harness_headers
        ):
            counts = _text_api_counts(data)
            for kind, (used, dropped) in counts.items():
                have = project.api.get(kind, (0, 0))
                project.api[kind] = (have[0] + used, have[1] + dropped)
            add_folder_counts(project.api_folders, path, counts)
    return project


_RUNTIME_TEXT = re.compile(
    rb"\bcuda(?:Memcpy|Memset|Malloc|HostAlloc|HostRegister|FuncSetAttribute|DeviceSetLimit"
    rb"|LaunchKernel|LaunchCooperativeKernel|GraphLaunch)\w*(?=\s*\()"
)
_USED_AFTER = re.compile(rb"(?:[(,=!<>|&?:]|\breturn)\s*$")


def _text_api_counts(data: bytes) -> dict[str, list[int]]:
    """`idioms.api_counts` of a file the index does not parse, read from its text: a call
    after `(`, `,`, `=`, an operator or `return` uses its status (`CHECK(cudaMemcpy(...))`),
    one starting a statement discards it, a `(void)` cast is neither. A file defining `main`
    (a standalone program) counts nothing."""
    out: dict[str, list[int]] = {}
    if _MAIN_BYTES.search(data):
        return out
    for m in _RUNTIME_TEXT.finditer(data):
        kind = api_kind(m.group(0).decode("ascii"))
        if kind is None:
            continue
        before = data[max(0, m.start() - 24) : m.start()]
        if before.rstrip().endswith(b"(void)"):
            continue
        out.setdefault(kind, [0, 0])[0 if _USED_AFTER.search(before) else 1] += 1
    return out


_CLASS_BASES = re.compile(
    rb"\b(?:class|struct)\s+(\w+)\s*(?:final\s*)?:(?!:)\s*([^{};()]{1,400})\{"
)
_BASE = re.compile(
    rb"(?:public|protected|private|virtual|\s)*([\w:]+)(?:<[^<>]*(?:<[^<>]*>[^<>]*)*>)?"
)


def class_bases(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """ "Derived:Base" pairs of the classes the files define deriving from others (`class
    GeluLayer: public FfnLayer<T>`), read from the text: a method's calls are matched
    through the class hierarchy (GPU802's callers)."""
    out = set()
    for _, data in files:
        if b"class" not in data and b"struct" not in data:
            continue
        for m in _CLASS_BASES.finditer(data):
            derived = m.group(1).decode("ascii", "replace")
            clause = m.group(2)
            depth = 0
            part = b""
            for ch in clause + b",":
                c = bytes([ch])
                if c == b"<":
                    depth += 1
                elif c == b">":
                    depth -= 1
                if c == b"," and depth == 0:
                    b = _BASE.match(part.strip())
                    if b is not None and b.group(1):
                        out.add(
                            f"{derived}:{b.group(1).decode('ascii', 'replace').rsplit('::', 1)[-1]}"
                        )
                    part = b""
                else:
                    part += c
    return frozenset(out)


# A stream, a CUDA graph, or a torch.compile mode that captures graphs.
_STREAMS = re.compile(
    rb"(?i)stream|(?<!no-)cudagraph|cuda\.graph\b|graphed_callables|reduce-overhead"
    rb"|max-autotune(?!-no-cudagraphs)"
)
_LOADS = re.compile(rb"\bload\s*\(")


def script_built(paths: Iterable[str]) -> frozenset[str]:
    """CUDA sources compiled only by a Python script in their own folder, with
    `torch.utils.cpp_extension.load(sources=["x.cu"])`, where no Python file of the folder
    mentions a stream or a CUDA graph and no `setup.py` there or one folder up packages the
    source: every caller of their ops is in sight and runs on the default stream. The scripts
    are read as text, never run."""
    import os

    by_folder: dict[str, list[str]] = {}
    for path in paths:
        if path.endswith((".cu", ".cpp", ".cc", ".cxx")):
            folder, _, base = path.replace("\\", "/").rpartition("/")
            by_folder.setdefault(folder, []).append(base)
    out = set()
    for folder, bases in by_folder.items():
        texts = []
        try:
            with os.scandir(folder or ".") as entries:
                for entry in entries:
                    if entry.name.endswith(".py") and entry.is_file(follow_symlinks=False):
                        text = read_side(entry.path, (1 << 20) - 1)
                        if text is not None:
                            texts.append((entry.name, text))
        except OSError:
            continue
        loaders = [t for n, t in texts if b"cpp_extension" in t and _LOADS.search(t)]
        if not loaders or any(_STREAMS.search(t) for _, t in texts):
            continue
        packaging = b"".join(t for n, t in texts if n == "setup.py")
        parent = folder.rpartition("/")[0] if "/" in folder else ""
        packaging += read_side(os.path.join(parent or ".", "setup.py"), 1 << 20) or b""
        for base in bases:
            quoted = (b'"' + base.encode() + b'"', b"'" + base.encode() + b"'")
            named = any(q in t or b"/" + q[1:] in t for t in loaders for q in quoted)
            if named and base.encode() not in packaging:
                out.add(f"{folder}/{base}" if folder else base)
    return frozenset(out)


# A function head: its name, parameters, `)` and `{` (qualifiers like `const` between).
_HEAD = re.compile(
    rb"\b([A-Za-z_]\w*)\s*\((?:[^;{}()]|\([^;{}()]*\))*\)\s*(?:const\s*)?(?:noexcept\s*)?\{"
)
_DEVICE_QUALIFIER = re.compile(rb"\b__device__\b|\b[A-Z][A-Z0-9_]*_DEVICE\b")
_NOT_HEADS = frozenset({b"if", b"for", b"while", b"switch", b"catch", b"return", b"sizeof"})


def uncalled_device_printers(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """ "path:name" of the `__device__` functions (`__host__ __device__`, `KITTENS_DEVICE`-style
    macros too) whose body calls `printf` and whose name no file of the checked tree mentions
    besides the heads of its definitions (a call, a declaration, a pointer, a comment naming it
    all count as a use):
    debugging helpers beside the printing utilities that no kernel calls. Read from the text.
    A tree of one file gives none: the callers of a header linted alone are not in sight."""
    files = files if isinstance(files, list) else list(files)
    if len(files) < 2:
        return frozenset()
    candidates: dict[bytes, list[str]] = {}  # name -> paths defining a printing one
    for path, data in files:
        if b"printf" not in data or not _DEVICE_QUALIFIER.search(data):
            continue
        for m in _HEAD.finditer(data):
            name = m.group(1)
            if name in _NOT_HEADS:
                continue
            start = max(data.rfind(b";", 0, m.start()), data.rfind(b"}", 0, m.start()))
            start = max(start, data.rfind(b"{", 0, m.start()), data.rfind(b"\n#", 0, m.start()))
            declaration = data[start + 1 : m.start()]
            body = _block(data, m.end() - 1)
            if (
                body is not None
                and _DEVICE_QUALIFIER.search(declaration)
                and b"printf" in body
                and b"__global__" not in declaration
            ):
                candidates.setdefault(name, []).append(path)
    if not candidates:
        return frozenset()
    # Uses beyond the definitions: the defining files and their folders first (where most
    # helpers are called), the rest of the tree only for names not yet seen used.
    folders = {p.replace("\\", "/").rpartition("/")[0] for ps in candidates.values() for p in ps}
    near = [f for f in files if f[0].replace("\\", "/").rpartition("/")[0] in folders]
    rest = [f for f in files if f[0].replace("\\", "/").rpartition("/")[0] not in folders]
    used: set[bytes] = set()  # a mention that is not a definition's head
    for _, data in near + rest:
        for name in [n for n in candidates if n not in used and n in data]:
            for m in re.finditer(rb"\b" + re.escape(name) + rb"\b", data):
                if not _HEAD.match(data, m.start()):
                    used.add(name)
                    break
        if len(used) == len(candidates):
            break
    return frozenset(
        f"{path}:{name.decode('ascii', 'replace')}"
        for name, paths in candidates.items()
        if name not in used
        for path in paths
    )


def _block(data: bytes, start: int, limit: int = 40000) -> bytes | None:
    """The `{...}` block opening at `start` (None past `limit` bytes)."""
    depth = 0
    for i in range(start, min(len(data), start + limit)):
        c = data[i]
        if c == 0x7B:
            depth += 1
        elif c == 0x7D:
            depth -= 1
            if depth == 0:
                return data[start : i + 1]
    return None


_MAIN_BYTES = re.compile(rb"(?m)^\s*(?:int|void|auto)\s+main\s*\(")


def harness_headers(
    facts_by_path: dict[str, dict], paths: list[str], drivers: Iterable[str] = ()
) -> frozenset[str]:
    """Headers `#include`d only from standalone programs' code: each `#include "x/y.h"` is
    resolved to the checked file ending in `x/y.h` nearest the including file (two
    `utils.h` in different folders are different headers)."""
    by_name: dict[str, list[str]] = {}
    for path in paths:
        by_name.setdefault(_basename(path), []).append(path.replace("\\", "/"))
    from_program: set[str] = set()
    from_library: set[str] = set()
    # a file that `#include`s a program's source (`#include "launch.cu"`, the driver holding
    # `main` that runs and checks it) is compiled into that program: its code is the program's
    driven: set[str] = set()
    for includer, facts in facts_by_path.items():
        here = includer.replace("\\", "/").split("/")[:-1]
        for entry in facts.get("includes", ()):
            if not (isinstance(entry, list | tuple) and len(entry) == 2):
                continue
            name = str(entry[0])
            found = [p for p in by_name.get(_basename(name), ()) if ("/" + p).endswith("/" + name)]
            if not found:
                continue
            nearest = max(found, key=lambda p: _shared_prefix(here, p.split("/")[:-1]))
            (from_program if entry[1] else from_library).add(nearest)
            if nearest in drivers:
                driven.add(includer.replace("\\", "/"))
    return frozenset(from_program - from_library) | frozenset(driven)


def _shared_prefix(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _include_name(written: str) -> str:
    """`"../utils/utils.h"` as the path tail it names: `utils/utils.h`."""
    parts = [p for p in written.strip().strip('"').replace("\\", "/").split("/")]
    return "/".join(p for p in parts if p not in ("", ".", ".."))


_CALL_BYTES = re.compile(rb"\b([A-Za-z_]\w*)\s*(?:<[^;(]*>\s*)?\(")


def _called_names(data: bytes, memo: dict[int, set[str]]) -> set[str]:
    """Names a file calls (read from its text once per run)."""
    found = memo.get(id(data))
    if found is None:
        found = memo[id(data)] = {m.decode("ascii", "replace") for m in _CALL_BYTES.findall(data)}
    return found


_DEFINE = re.compile(rb"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)((?:[^\n\\]|\\\n|\\)*)")
_CHECK_BYTES = re.compile(
    rb"\bcuda(GetLastError|PeekAtLastError|GetErrorString|GetErrorName)\b|\bcudaSuccess\b"
)


def macro_checks(files: Iterable[tuple[str, bytes]]) -> frozenset[str]:
    """The checking macros `#define`d anywhere in the checked tree, and the macros and helpers
    that read the last error (`idioms.last_error_checks`), read from the text."""
    return frozenset(
        name
        for _, data in files
        if b"#define" in data and b"cuda" in data
        for name in (*_macro_checks(data), *last_error_checks(data))
    )


def _macro_checks(data: bytes) -> list[str]:
    """Checking macros of a header, read from its text (headers are not parsed for this)."""
    return sorted(
        m.group(1).decode() for m in _DEFINE.finditer(data) if _CHECK_BYTES.search(m.group(2))
    )


class FactStore:
    """Per-file facts kept between runs, keyed by the file's content and the configured check
    macros, so a warm run reads them instead of parsing every launching file again. One JSON
    file per gpulint build in the result cache's folder; entries not used by a run are
    dropped when it saves. Unreadable or foreign content is ignored, never trusted."""

    MAX_BYTES = 64 * 1024 * 1024

    def __init__(self, directory, configured: tuple[str, ...]):
        from gpulint.engine import _code_stamp

        self.directory = directory
        stamp = hashlib.sha256(f"{_code_stamp()}".encode()).hexdigest()[:16]
        self.path = directory / f"cuda-facts-{stamp}.json" if directory is not None else None
        self.salt = json.dumps(sorted(configured))
        self.old: dict[str, dict] = {}
        self.new: dict[str, dict] = {}
        if self.path is not None:
            from gpulint.safeio import Unreadable, read_text

            try:
                data = json.loads(read_text(self.path, self.MAX_BYTES, [directory]))
                if isinstance(data, dict) and isinstance(data.get("files"), dict):
                    self.old = data["files"]
            except (Unreadable, ValueError, RecursionError):
                pass

    def key(self, data: bytes) -> str:
        return hashlib.sha256(data + self.salt.encode()).hexdigest()

    def get(self, key: str) -> dict | None:
        found = self.new.get(key) or self.old.get(key)
        if not _valid(found):
            return None
        self.new[key] = found
        return found

    def put(self, key: str, facts: dict) -> None:
        self.new[key] = facts

    def save(self) -> None:
        if self.path is None or self.new.keys() == self.old.keys():
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


def _valid(facts: object) -> TypeGuard[dict]:
    return (
        isinstance(facts, dict)
        and isinstance(facts.get("launchers"), dict)
        and isinstance(facts.get("calls"), list)
        and all(isinstance(c, list) and len(c) == 5 for c in facts["calls"])
        and isinstance(facts.get("checks"), list)
        and isinstance(facts.get("defined"), list)
    )


# --- extensions whose only Python users are scripts -----------------------------------------

_EXTENSION_NAME = re.compile(
    rb"(?:CUDAExtension|CppExtension)\s*\((?:\s*#[^\n]*)*\s*(?:name\s*=\s*)?[\"']([\w.]+)[\"']"
)
_SETUP_BUILDS = re.compile(rb"\b(?:CUDAExtension|CppExtension)\s*\(")
_MAIN_GUARD = re.compile(rb"(?m)^if\s+__name__\s*==\s*[\"']__main__[\"']")
# argparse, a loop or a print at module level (a script's work, not a definition)
_TOP_LEVEL_RUN = re.compile(
    rb"(?m)^(?:\w+\s*=\s*)?(?:argparse\.)?ArgumentParser\(|^(?:for|while)\s|^print\("
)
_MAX_PY_FILES = 4000


def _imports(name: str) -> re.Pattern[bytes]:
    """`import a.name`, `from a.name import x`, `from a import name` (and `... as`)."""
    n = re.escape(name.encode())
    return re.compile(
        rb"(?m)^[ \t]*(?:import[ \t]+[\w., \t]*\b" + n + rb"\b"
        rb"|from[ \t]+[\w.]*\b" + n + rb"\b[ \t]+import"
        rb"|from[ \t]+[\w.]+[ \t]+import[ \t]+[^\n]*\b" + n + rb"\b)"
    )


class _PyTree:
    """The Python files under a folder, read once as text (never run). Only what the harness
    questions need is kept: the loaders' whole text (files naming `cpp_extension`, the only
    possible users by `load(...)`) and every file's lines that say `import` (all an `_imports`
    pattern can match: it never crosses a line). Any other file's text is read again when a
    user's is needed; holding every file's bytes cost the main process the tree's size."""

    def __init__(self) -> None:
        self.scopes: dict[str, _PyScope] = {}

    def under(self, root: str) -> _PyScope:
        import os

        found = self.scopes.get(root)
        if found is not None:
            return found
        found = self.scopes[root] = _PyScope()
        for here, dirs, names in os.walk(root or "."):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d != "node_modules"]
            for name in names:
                if not name.endswith(".py") or len(found.imports) >= _MAX_PY_FILES:
                    continue
                path = os.path.join(here, name)
                text = read_side(path, (1 << 20) - 1)  # a FIFO named *.py must not block
                if text is None:
                    continue
                path = os.path.normpath(path).replace("\\", "/")
                found.imports[path] = _import_lines(text)
                if b"cpp_extension" in text:
                    found.loaders[path] = text
        return found


def python_reads(paths: Iterable[str]) -> list[str]:
    """The folders in which `harness_built` and `script_built` may read for these sources (their
    Python files, `setup.py` files, `__init__.py` presence, listings): each source's topmost
    folder that `harness_built` looks in; every folder either reads is at or below one. The
    stored project (gpulint.projectcache) is trusted only while the `.py` files and listings
    below them are unchanged: keep this a superset of what the two read."""
    import os

    tops = set()
    for path in paths:
        if not path.endswith((".cu", ".cpp", ".cc", ".cxx")):
            continue
        folder = path.replace("\\", "/").rpartition("/")[0]
        ancestors = [folder]
        while len(ancestors) < 4 and "/" in ancestors[-1]:
            ancestors.append(ancestors[-1].rpartition("/")[0])
        if len(ancestors) < 4 and ancestors[-1] and not os.path.isabs(ancestors[-1]):
            ancestors.append("")
        tops.add(ancestors[-1])
    return sorted(tops)


class _PyScope:
    def __init__(self) -> None:
        self.imports: dict[str, bytes] = {}  # path -> its lines holding `import`
        self.loaders: dict[str, bytes] = {}  # path -> text, for the files naming cpp_extension

    def text(self, path: str) -> bytes:
        found = self.loaders.get(path)
        if found is not None:
            return found
        return read_side(path, 1 << 20) or b""

    def importing(self, name: str) -> set[str]:
        """The files, other than a `setup.py`, with an import of `name` (see `_imports`)."""
        needle = name.encode()
        pattern = _imports(name)
        return {
            p
            for p, lines in self.imports.items()
            if needle in lines and not p.endswith("setup.py") and pattern.search(lines)
        }


def _import_lines(text: bytes) -> bytes:
    """The lines of `text` that contain `import`, whole, joined by newlines: a line start
    there is one in `text`, so a pattern that stays on one line and needs `import` matches
    one exactly when it matches the other."""
    find = text.find
    at = find(b"import")
    if at < 0:
        return b""
    lines = []
    while at >= 0:
        end = find(b"\n", at)
        if end < 0:
            end = len(text)
        lines.append(text[text.rfind(b"\n", 0, at) + 1 : end])
        at = find(b"import", end)
    return b"\n".join(lines)


def _is_script(path: str, text: bytes) -> bool:
    """A file run as a program: a `__main__` guard, or argparse or a loop at module level in a
    file that is no package's module; or a test, benchmark or example by its name or folder."""
    if is_driver_path(path) or _MAIN_GUARD.search(text):
        return True
    return not _in_package(path) and bool(_TOP_LEVEL_RUN.search(text))


def _in_package(path: str) -> bool:
    import os

    return os.path.exists(os.path.join(os.path.dirname(path) or ".", "__init__.py"))


def harness_built(paths: Iterable[str]) -> tuple[frozenset[str], frozenset[str]]:
    """CUDA sources of a PyTorch extension whose every Python user in the checked tree is a
    script (see `_is_script`): their ops are called only by a benchmark or experiment that
    checks their outputs itself. A source's builders are the `setup.py` (with a
    `CUDAExtension`) of its folder or one above (up to three levels), and the Python files
    there that `load(...)` it by name; its users are the loading files and the files importing
    a module the `setup.py` names (a packaged module nothing in the tree imports is for users
    out of sight: not a harness). A user that is a plain module outside any package (a
    `tools/utils.py` helper) stands for the files importing it. No builder or no user found:
    not a harness. Returns (harness sources, those whose users never mention a stream)."""
    import os

    tree = _PyTree()
    out: set[str] = set()
    streamless: set[str] = set()
    for path in paths:
        if not path.endswith((".cu", ".cpp", ".cc", ".cxx")):
            continue
        path = path.replace("\\", "/")
        folder, _, base = path.rpartition("/")
        ancestors = [folder]
        while len(ancestors) < 4 and "/" in ancestors[-1]:
            ancestors.append(ancestors[-1].rpartition("/")[0])
        if len(ancestors) < 4 and ancestors[-1] and not os.path.isabs(ancestors[-1]):
            ancestors.append("")
        names: list[str] = []
        root = None
        for up in ancestors:
            setup = read_side(os.path.join(up or ".", "setup.py"), 1 << 20)
            if setup is None:
                continue
            if _SETUP_BUILDS.search(setup):
                names = [m.decode().rpartition(".")[2] for m in _EXTENSION_NAME.findall(setup)]
                root = up
                if not names:
                    root = None  # a name the text does not show: its users cannot be found
                    names = ["\0"]
                break
        if names == ["\0"]:
            continue
        # the loading scripts are beside the source or up to two folders above it
        scope = root if root is not None else ancestors[min(2, len(ancestors) - 1)]
        py = tree.under(scope)
        quoted = [q + base.encode() + q for q in (b'"', b"'")] + [b"/" + base.encode()]
        users = {
            p for p, t in py.loaders.items() if _LOADS.search(t) and any(q in t for q in quoted)
        }
        importers: set[str] = set()
        for name in names:
            importers |= py.importing(name)
        users |= importers
        if not users or (root is not None and not importers):
            # (a packaged module nothing in the tree imports is for users out of sight)
            continue
        # a helper module outside any package stands for the files importing it
        shown: set[str] = set()
        for user in users:
            if _is_script(user, py.text(user)) or _in_package(user):
                shown.add(user)
                continue
            stem = user.rpartition("/")[2][: -len(".py")]
            shown |= (py.importing(stem) - {user}) or {user}
        if all(_is_script(u, py.text(u)) and not _library_module(u) for u in shown):
            out.add(path)
            if not any(_STREAMS.search(py.text(u)) for u in shown | users):
                streamless.add(path)
    return frozenset(out), frozenset(streamless)


def _library_module(path: str) -> bool:
    """A package's module that is no test or example (its `__main__` guard is a demo)."""
    return _in_package(path) and not is_driver_path(path)
