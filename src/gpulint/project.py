"""The project index: function summaries across the modules of the checked tree.

A call whose callee is imported from another module of the tree (`from .utils import clip_grads`,
`from pkg.utils import clip_grads`, `import pkg.utils as u; u.clip_grads()`) is answered with that
function's summary (`gpulint.frontends.python.summaries`). Imports are resolved inside the tree
only: a name from outside it (torch, a pip package) is unknown, and nothing is assumed about it.

The index is lazy: a module is read, parsed and summarised the first time a rule asks about one
of its functions, which only happens for calls inside step loops, so a cold run pays for the
few modules a training loop calls into, not for the tree. Each summarised module is kept for the
rest of the run (per process). A module asked about while it is being summarised (an import
cycle) answers "unknown", so cycles terminate.

Every module consulted while linting a file is recorded with its content digest: the result
cache stores them beside the file's findings, and a cached result is used only while every one
of them is unchanged, so an edited callee invalidates its callers' results.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

    from gpulint.diagnostics import Related
    from gpulint.frontends.python.file import PythonFile
    from gpulint.frontends.python.summaries import Summary

MAX_MODULES_PER_FILE = 64  # a bound on how far one file's questions may reach
MAX_DEPTH = 3  # modules away from the linted file: a callee's callee's callee, no further


def module_name(relpath: str) -> str | None:
    """`pkg/sub/utils.py` -> `pkg.sub.utils`; `pkg/__init__.py` -> `pkg`."""
    if not relpath.endswith(".py"):
        return None
    parts = relpath[:-3].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    # Folders above the importable ones (`my-project/`, `ConvNeXt-V2/`) are not part of the
    # name: keep the longest tail of identifiers.
    tail: list[str] = []
    for part in reversed(parts):
        if not part.isidentifier():
            break
        tail.append(part)
    return ".".join(reversed(tail)) if tail else None


@dataclass(slots=True)
class _Module:
    relpath: str
    path: Path
    name: str
    is_package: bool


@dataclass
class ProjectIndex:
    """What the engine knows about the tree: its Python modules by dotted name. Picklable (it
    travels to worker processes); the parsed modules stay in the process that parsed them."""

    modules: dict[str, _Module] = field(default_factory=dict)
    # Module names by their last part ("utils" -> ["pkg.utils", "tests.utils"]): what suffix
    # lookups start from. One entry per module, not one per suffix: held by every process for
    # the whole run, so it grows with the tree as little as it can.
    by_last: dict[str, list[str]] = field(default_factory=dict)
    roots: tuple[Path, ...] = ()  # where links may lead (the engine's safe-read roots)

    @classmethod
    def build(cls, files: list[tuple[Path, str]], roots: tuple[Path, ...] = ()) -> ProjectIndex:
        """`files`: (path, path relative to the project root) of every file in the run."""
        index = cls(roots=roots)
        for path, relpath in files:
            name = module_name(relpath)
            if name is None:
                continue
            index.modules[name] = _Module(relpath, path, name, relpath.endswith("__init__.py"))
        for name in index.modules:
            index.by_last.setdefault(name.rpartition(".")[2], []).append(name)
        return index

    def resolve_module(self, dotted: str, near: str | None = None) -> str | None:
        """Imports name modules from a source root (`src/`, the repository, a sub-project), not
        from the project root: any unique dotted suffix of a module's path names it. Where two
        modules answer, `near` (the importing file's path) decides if one of them sits in its
        own folder: a script's folder comes first on `sys.path`, so `utils.dataset` imported by
        `examples/a/train.py` beside `examples/b/utils/dataset.py` is `examples/a/utils/
        dataset.py`. Otherwise ambiguous: unknown."""
        if dotted in self.modules:
            return dotted
        found = None
        tail = "." + dotted
        for name in self.by_last.get(dotted.rpartition(".")[2], ()):
            if name.endswith(tail):
                if found is not None:
                    return self._beside(dotted, near)
                found = name
        return found

    def _beside(self, dotted: str, near: str | None) -> str | None:
        if near is None:
            return None
        folder = near.rpartition("/")[0]
        base = (folder + "/" if folder else "") + dotted.replace(".", "/")
        for candidate in (base + ".py", base + "/__init__.py"):
            name = module_name(candidate)
            if (
                name is not None
                and name in self.modules
                and self.modules[name].relpath == candidate
            ):
                return name
        return None

    def session(self, relpath: str) -> ProjectSession:
        return ProjectSession(self, relpath)


@dataclass(frozen=True, slots=True)
class RemoteBreak:
    """A graph break in another module: what, the registry's id and name, line, function."""

    what: str
    gb_id: str
    gb_type: str
    line: int
    function: str
    relpath: str  # the module the break is in: the compiled one, or a submodule's


@dataclass(frozen=True, slots=True)
class RemoteBreaks:
    relpath: str
    digest: str  # sha256 of the module's bytes, recorded as a dependency of the asking file
    sites: tuple[RemoteBreak, ...]
    # (relpath, sha256) of the further modules read: those of submodules' classes
    deps: tuple[tuple[str, str], ...] = ()


# Per process: (module, top-level name) -> the breaks compiling it meets, or None.
_COMPILED_BREAKS: dict[tuple[str, str], RemoteBreaks | None] = {}

# Per process: (module, class) -> (its samples are read from memory, the module's digest), or
# None when it cannot be read or parsed.
_CHEAP_DATASETS: dict[tuple[str, str], tuple[bool, str] | None] = {}

# Per process: (module, function, used as a factory) -> (its clock reads if it is a timing
# decorator, the module's digest), or None when it cannot be read or parsed.
_TIMING_DECORATORS: dict[tuple[str, str, bool], tuple[tuple[Related, ...] | None, str] | None] = {}

# Per process: module name -> (function summaries by "f" / "Class.m", the modules they were
# computed from with their digests, itself included), or None when it cannot be read or parsed.
_SUMMARISED: dict[str, tuple[dict[str, Summary], dict[str, str]] | None] = {}
_IN_PROGRESS: set[str] = set()


class ProjectSession:
    """The index as seen from one file being linted: resolves its calls, records what it used."""

    def __init__(self, index: ProjectIndex, relpath: str, depth: int = 0):
        self.index = index
        self.relpath = relpath
        self.depth = depth
        self.name = module_name(relpath)
        self.deps: dict[str, str] = {}  # relpath -> sha256 of the module's bytes

    def lookup(self, file: PythonFile, call: ast.Call) -> Summary | None:
        if self.depth >= MAX_DEPTH:
            return None
        target = self._target(file, call)
        if target is None:
            return None
        module, function = target
        return self._summary(module, function)

    def breaks_if_compiled(self, file: PythonFile, name: ast.Name) -> RemoteBreaks | None:
        """The graph breaks `torch.compile` meets in the function or module class that `name`
        was imported as (`from .model import GPT`), read from its module in the tree; None
        where the import leads outside the tree or to no such definition."""
        imported = self._imported(file, name.id, name)
        if imported is None or imported[1] is None:
            return None
        module = self.index.resolve_module(imported[0], self.relpath)
        info = self.index.modules.get(module) if module else None
        if module is None or info is None:
            return None
        key = (module, imported[1])
        if key not in _COMPILED_BREAKS:
            _COMPILED_BREAKS[key] = self._compiled_breaks(info, imported[1])
        found = _COMPILED_BREAKS[key]
        if found is None:
            return None
        self.deps[info.relpath] = found.digest
        self.deps.update(found.deps)
        return found

    def dataset_items_cheap(self, file: PythonFile, name: ast.Name) -> bool:
        """The dataset class `name` was imported as (`from utils.dataset import PromptDataset`)
        reads its samples from memory (`datasets.class_items_cheap`), read from its module in
        the tree; False where the import leads outside it or to no such class."""
        imported = self._imported(file, name.id, name)
        if imported is None or imported[1] is None:
            return False
        module = self.index.resolve_module(imported[0], self.relpath)
        info = self.index.modules.get(module) if module else None
        if module is None or info is None:
            return False
        key = (module, imported[1])
        if key not in _CHEAP_DATASETS:
            _CHEAP_DATASETS[key] = self._dataset_items_cheap(info, imported[1])
        found = _CHEAP_DATASETS[key]
        if found is None:
            return False
        cheap, digest = found
        self.deps[info.relpath] = digest
        return cheap

    def timing_decorator(
        self, file: PythonFile, name: ast.Name | ast.Attribute, factory: bool
    ) -> tuple[Related, ...] | None:
        """The clock reads of the decorator `name` was imported as (`from utils import timed`,
        `import utils` then `@utils.timed`), where its module in the tree defines it at top
        level as a timing decorator (`timing.timing_decorator`; `factory`: `@timed("fwd")`);
        None where the import leads outside the tree or to something else."""
        if isinstance(name, ast.Name):
            imported = self._imported(file, name.id, name)
            if imported is None or imported[1] is None:
                return None
            dotted, function = imported[0], imported[1]
        elif isinstance(name.value, ast.Name):
            imported = self._imported(file, name.value.id, name)
            if imported is None:
                return None
            dotted = f"{imported[0]}.{imported[1]}" if imported[1] else imported[0]
            function = name.attr
        else:
            return None
        module = self.index.resolve_module(dotted, self.relpath)
        info = self.index.modules.get(module) if module else None
        if module is None or info is None:
            return None
        key = (module, function, factory)
        if key not in _TIMING_DECORATORS:
            _TIMING_DECORATORS[key] = self._timing_decorator(info, function, factory)
        found = _TIMING_DECORATORS[key]
        if found is None:
            return None
        clocks, digest = found
        self.deps[info.relpath] = digest
        return clocks

    def _timing_decorator(
        self, info: _Module, name: str, factory: bool
    ) -> tuple[tuple[Related, ...] | None, str] | None:
        from gpulint.frontends.python import FRONTEND
        from gpulint.frontends.python.timing import timing_decorator
        from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes
        from gpulint.settings import Settings

        try:
            data = read_bytes(info.path, MAX_SOURCE_BYTES, self.index.roots)
            parsed = FRONTEND.parse(info.relpath, data, Settings())
            defs = [
                d
                for d in parsed.tree.body
                if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef)) and d.name == name
            ]
            clocks = timing_decorator(parsed, defs[0], factory) if len(defs) == 1 else None
        except Exception:  # unreadable, unparsable: that file's own lint reports it
            return None
        return clocks, hashlib.sha256(data).hexdigest()

    def _dataset_items_cheap(self, info: _Module, name: str) -> tuple[bool, str] | None:
        from gpulint.frontends.python import FRONTEND
        from gpulint.frontends.python.datasets import class_items_cheap
        from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes
        from gpulint.settings import Settings

        try:
            data = read_bytes(info.path, MAX_SOURCE_BYTES, self.index.roots)
            parsed = FRONTEND.parse(info.relpath, data, Settings())
            classes = [c for c in parsed.tree.body if isinstance(c, ast.ClassDef)]
            found = [c for c in classes if c.name == name]
            cheap = len(found) == 1 and class_items_cheap(parsed, found[0], None)
        except Exception:  # unreadable, unparsable: that file's own lint reports it
            return None
        return cheap, hashlib.sha256(data).hexdigest()

    def _compiled_breaks(self, info: _Module, name: str) -> RemoteBreaks | None:
        from gpulint.frontends.python import FRONTEND
        from gpulint.frontends.python.compiled import (
            breaks_if_compiled,
            label,
            submodules_elsewhere,
        )
        from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes
        from gpulint.settings import Settings

        try:
            data = read_bytes(info.path, MAX_SOURCE_BYTES, self.index.roots)
            parsed = FRONTEND.parse(info.relpath, data, Settings())
            found = breaks_if_compiled(parsed, name)
            if found is None:
                return None
            sites = [
                RemoteBreak(
                    b.what,
                    b.gb_id,
                    b.gb_type,
                    getattr(b.node, "lineno", 0),
                    label(parsed, b.reached.function),
                    info.relpath,
                )
                for b in found
            ]
            deps: dict[str, str] = {}
            if self.depth + 1 < MAX_DEPTH:
                # Tracing goes on into the forward of submodules built from imported classes.
                inner = ProjectSession(self.index, info.relpath, self.depth + 1)
                for sub in submodules_elsewhere(parsed, name):
                    more = inner.breaks_if_compiled(parsed, sub)
                    if more is not None:
                        sites += [s for s in more.sites if s not in sites]
                deps = {k: v for k, v in inner.deps.items() if k != info.relpath}
        except Exception:  # unreadable, unparsable: that file's own lint reports it
            return None
        return RemoteBreaks(
            info.relpath, hashlib.sha256(data).hexdigest(), tuple(sites), tuple(deps.items())
        )

    # -- who uses a name defined here ----------------------------------------------------------
    def modules_subscripting(self, name: str) -> list[tuple[PythonFile, ProjectSession]]:
        """The other modules of the tree whose text subscripts `name` (`name[...]`, as a Triton
        launch `add_kernel[grid](...)` does), parsed, each with its own session. A cheap text
        index of the subscripted names of every module is built once per process; a module is
        parsed only when it subscripts the name, and recorded as consulted (an edited launcher
        invalidates this file's cached result)."""
        return self._modules_naming(_SUBSCRIPTED, name)

    def modules_calling(self, name: str) -> list[tuple[PythonFile, ProjectSession]]:
        """The other modules of the tree whose text calls `name` (`name(...)`, `m.name(...)`),
        parsed, each with its own session; as `modules_subscripting`, through a text index of
        called names built once per process."""
        return self._modules_naming(_CALLED, name)

    def _modules_naming(
        self, pattern: re.Pattern[bytes], name: str
    ) -> list[tuple[PythonFile, ProjectSession]]:
        out: list[tuple[PythonFile, ProjectSession]] = []
        if self.depth >= MAX_DEPTH:
            return out
        for module in _named(self.index, pattern, name):
            info = self.index.modules.get(module)
            if info is None or info.relpath == self.relpath:
                continue
            if len(self.deps) >= MAX_MODULES_PER_FILE and info.relpath not in self.deps:
                break
            found = _parsed(self.index, module, info)
            if found is None:
                continue
            parsed, digest = found
            self.deps[info.relpath] = digest
            out.append((parsed, ProjectSession(self.index, info.relpath, self.depth + 1)))
        return out

    def refers_to(self, file: PythonFile, node: ast.expr, module: str | None, name: str) -> bool:
        """Whether `node` in `file` (the module of this session) is the top-level `name` of the
        tree's `module`: imported from it (`from .kernels import add_kernel; add_kernel`), or
        an attribute of it imported as a module (`from . import kernels; kernels.add_kernel`),
        directly or through modules that import it and so re-export it (a package's
        `__init__.py` with `from .kernels import add_kernel`, then `pkg.add_kernel`)."""
        if module is None:
            return False
        if isinstance(node, ast.Name):
            imported = self._imported(file, node.id, node)
            if imported is None or imported[1] != name:
                return False
            found = self.index.resolve_module(imported[0], self.relpath)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.attr != name:
                return False
            imported = self._imported(file, node.value.id, node)
            if imported is None:
                return False
            dotted = f"{imported[0]}.{imported[1]}" if imported[1] else imported[0]
            found = self.index.resolve_module(dotted, self.relpath)
        else:
            return False
        return found is not None and self._leads_to(found, name, module)

    def _leads_to(self, found: str, name: str, module: str) -> bool:
        """`name` read from the tree's module `found` is `module`'s: `found` is `module`, or
        imports `name` from a module that leads to it (re-exports, `MAX_DEPTH` of them)."""
        for _ in range(MAX_DEPTH):
            if found == module:
                return True
            info = self.index.modules.get(found)
            parsed = _parsed(self.index, found, info) if info is not None else None
            if info is None or parsed is None:
                return False
            self.deps[info.relpath] = parsed[1]
            inner = ProjectSession(self.index, info.relpath, self.depth + 1)
            nxt = None
            for stmt in parsed[0].tree.body:
                if isinstance(stmt, ast.ImportFrom) and any(
                    a.name == name and (a.asname or a.name) == name for a in stmt.names
                ):
                    base = inner._from_module(stmt)
                    nxt = self.index.resolve_module(base, info.relpath) if base else None
            if nxt is None or nxt == found:
                return False
            found = nxt
        return False

    def callee_module(
        self, file: PythonFile, call: ast.Call, needles: tuple[bytes, ...]
    ) -> tuple[PythonFile, str] | None:
        """The parsed module of the tree that defines the function `call` calls (`from
        .utils import wrap_model; wrap_model(m)`), with the function's name, where its text
        holds one of `needles` (a cheap test before it is parsed); recorded as consulted."""
        if self.depth >= MAX_DEPTH:
            return None
        target = self._target(file, call)
        if target is None or "." in target[1]:
            return None
        module, function = target
        info = self.index.modules.get(module)
        if info is None or info.relpath == self.relpath:
            return None
        if len(self.deps) >= MAX_MODULES_PER_FILE and info.relpath not in self.deps:
            return None
        key = (module, needles)
        if key not in _MENTIONS:
            from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes

            try:
                data = read_bytes(info.path, MAX_SOURCE_BYTES, self.index.roots)
                _MENTIONS[key] = (
                    any(n in data for n in needles),
                    hashlib.sha256(data).hexdigest(),
                )
            except Exception:  # unreadable: that file's own lint reports it
                _MENTIONS[key] = None
        mentions = _MENTIONS[key]
        if mentions is None:
            return None
        if not mentions[0]:
            self.deps[info.relpath] = mentions[1]  # an edit that adds one must invalidate
            return None
        found = _parsed(self.index, module, info)
        if found is None:
            return None
        self.deps[info.relpath] = found[1]
        return found[0], function

    # -- resolving a call to (module, function) ------------------------------------------------
    def _target(self, file: PythonFile, call: ast.Call) -> tuple[str, str] | None:
        func = call.func
        if isinstance(func, ast.Name):
            imported = self._imported(file, func.id, call)
            if imported is None:
                return None
            module, attr = imported
            if attr is None:
                return None
            # `from pkg.utils import clip_grads`: module pkg.utils, function clip_grads; or
            # `from pkg import utils` then `utils(...)`: not a function call we know.
            resolved = self.index.resolve_module(module, self.relpath)
            return (resolved, attr) if resolved else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute):
            # `self.mp_trainer.optimize()` with `self.mp_trainer = MixedPrecisionTrainer(...)`
            built = file.model.constructed_class(func.value)
            found = self._imported(file, built.id, built) if built is not None else None
            if built is None or found is None or found[1] is None:
                return None
            resolved = self.index.resolve_module(found[0], self.relpath)
            return (resolved, f"{found[1]}.{func.attr}") if resolved else None
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            imported = self._imported(file, func.value.id, call)
            if imported is None:
                # `meter = Meter()` with `from .utils import Meter`: the method `Meter.add`
                built = file.model.constructed_class(func.value)
                found = self._imported(file, built.id, built) if built is not None else None
                if built is None or found is None or found[1] is None:
                    return None
                resolved = self.index.resolve_module(found[0], self.relpath)
                return (resolved, f"{found[1]}.{func.attr}") if resolved else None
            module, attr = imported
            dotted = f"{module}.{attr}" if attr else module
            resolved = self.index.resolve_module(
                dotted, self.relpath
            )  # `import pkg.utils as u; u.f()`
            return (resolved, func.attr) if resolved else None
        return None

    def _imported(self, file: PythonFile, name: str, at: ast.AST) -> tuple[str, str | None] | None:
        """(module, attribute or None) that `name` was imported as, where one import binds it,
        or, for a name nothing binds, the one module of the tree among the file's `from m
        import *` that defines it at its top level."""
        bound = file.model.bindings_of(name, before=at)
        if not bound and file.model.defining_scope(name, at) is None:
            return self._star_imported(file, name)
        if len(bound) != 1 or bound[0].kind != "import":
            return None
        node = bound[0].node
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname == name:
                    return alias.name, None
                if alias.asname is None and alias.name.split(".")[0] == name:
                    return name, None
            return None
        if isinstance(node, ast.ImportFrom):
            base = self._from_module(node)
            if base is None:
                return None
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return base, alias.name
        return None

    def _star_imported(self, file: PythonFile, name: str) -> tuple[str, str] | None:
        found: list[str] = []
        for stmt in file.tree.body:
            if not (isinstance(stmt, ast.ImportFrom) and stmt.names[0].name == "*"):
                continue
            base = self._from_module(stmt)
            resolved = self.index.resolve_module(base, self.relpath) if base else None
            if resolved is None:
                continue
            info = self.index.modules.get(resolved)
            if info is None:
                continue
            try:
                text = info.path.read_bytes()
            except OSError:
                continue
            # Consulted: a later `def name` there must invalidate this file's cached result.
            self.deps[info.relpath] = hashlib.sha256(text).hexdigest()
            if _defines(text, name):
                found.append(resolved)
        return (found[0], name) if len(found) == 1 else None

    def _from_module(self, node: ast.ImportFrom) -> str | None:
        if not node.level:
            return node.module
        if self.name is None:
            return None
        package = self.name.split(".")
        own = self.index.modules.get(self.name)
        if own is None or not own.is_package:
            package = package[:-1]  # a module's package is its parent
        if node.level - 1 > len(package):
            return None
        package = package[: len(package) - (node.level - 1)]
        parts = [*package, *([node.module] if node.module else [])]
        return ".".join(parts) if parts else None

    # -- compiled extension ops ------------------------------------------------------------------
    def imports_compiled_ops(self, file: PythonFile) -> bool:
        """A module of the tree that `file` imports, or one that module imports in turn (two
        levels), calls the project's own compiled extension (`extensions.runs_compiled_ops`):
        `from gaussian_renderer import render` where the renderer's rasterizer package does
        `from . import _C`."""
        frontier = _imported_modules(self, file.tree)
        seen: set[str] = set()
        for _ in range(MAX_DEPTH):
            following: list[str] = []
            for module in frontier:
                if module in seen or len(seen) >= MAX_MODULES_PER_FILE:
                    continue
                seen.add(module)
                info = self.index.modules.get(module)
                if info is None:
                    continue
                if module not in _COMPILED_OPS:
                    _COMPILED_OPS[module] = self._compiled_ops(info)
                found = _COMPILED_OPS[module]
                if found is None:
                    continue
                runs, digest, imports = found
                self.deps[info.relpath] = digest
                if runs:
                    return True
                following += imports
            frontier = following
        return False

    def _compiled_ops(self, info: _Module) -> tuple[bool, str, list[str]] | None:
        from gpulint.frontends.python import FRONTEND
        from gpulint.frontends.python.extensions import runs_compiled_ops
        from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes
        from gpulint.settings import Settings

        try:
            data = read_bytes(info.path, MAX_SOURCE_BYTES, self.index.roots)
            parsed = FRONTEND.parse(info.relpath, data, Settings())
            inner = ProjectSession(self.index, info.relpath, self.depth + 1)
            runs = runs_compiled_ops(parsed)
            imports = [] if runs else _imported_modules(inner, parsed.tree)
        except Exception:  # unreadable, unparsable: that file's own lint reports it
            return None
        return runs, hashlib.sha256(data).hexdigest(), imports

    # -- summarising a module ------------------------------------------------------------------
    def _summary(self, module: str, function: str) -> Summary | None:
        info = self.index.modules.get(module)
        if info is None:
            return None
        if len(self.deps) >= MAX_MODULES_PER_FILE and info.relpath not in self.deps:
            return None
        if module in _IN_PROGRESS:
            return None  # an import cycle: unknown, and the recursion ends here
        if module not in _SUMMARISED:
            _SUMMARISED[module] = self._summarise(info)
        done = _SUMMARISED[module]
        if done is None:
            return None
        table, deps = done
        self.deps.update(deps)
        return table.get(function)

    def _summarise(self, info: _Module) -> tuple[dict[str, Summary], dict[str, str]] | None:
        from gpulint.frontends.python import FRONTEND
        from gpulint.frontends.python.summaries import Summaries
        from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes
        from gpulint.settings import Settings

        _IN_PROGRESS.add(info.name)
        try:
            data = read_bytes(info.path, MAX_SOURCE_BYTES, self.index.roots)
            parsed = FRONTEND.parse(info.relpath, data, Settings())
            inner = ProjectSession(self.index, info.relpath, self.depth + 1)
            parsed.project_lookup = inner.lookup
            table = Summaries(parsed, inner.lookup).exported()
        except Exception:  # unreadable, unparsable, too deep: that file's own lint reports it
            return None
        finally:
            _IN_PROGRESS.discard(info.name)
        inner.deps[info.relpath] = hashlib.sha256(data).hexdigest()
        return table, inner.deps


# Per process: module name -> (the parsed module, its digest), or None when it cannot be read
# or parsed; and, per index, the names each module subscripts (`name[`) or calls (`name(`), by
# name.
_PARSED: dict[str, tuple[PythonFile, str] | None] = {}
# Per process: (module, needles) -> (its text holds one of them, its digest), or None.
_MENTIONS: dict[tuple[str, tuple[bytes, ...]], tuple[bool, str] | None] = {}
# Per process: (pattern, name) -> the modules naming it; the whole-text index of the pattern,
# once a process has asked about more names than a per-name search pays for.
_NAMED: dict[tuple[int, bytes], dict[str, list[str]]] = {}
_ASKED: dict[tuple[int, bytes, str], list[str]] = {}
# Names a process may look up one by one before it builds the pattern's whole index: a search
# for one name is a substring test per module (fast) and the pattern only where the name is;
# the index runs the pattern over every module's whole text (1.6 s on transformers' 2,214
# files, where a cold run asked about 2 names in all).
MAX_NAMES_SEARCHED = 8
# A name starts where no letter or underscore comes before it (a digit may: `2x[` is `x[`, as
# a plain scan would find it), and takes its whole run possessively: tried at every letter of
# every identifier, the plain pattern matched the rest of the word and backtracked through it,
# the slowest step of a cold run over transformers (8 s, now 1.6 s).
_SUBSCRIPTED = re.compile(rb"(?<![A-Za-z_])([A-Za-z_][A-Za-z0-9_]*+)\s*\[")
_CALLED = re.compile(rb"(?<![A-Za-z_])([A-Za-z_][A-Za-z0-9_]*+)\s*\(")


def _parsed(index: ProjectIndex, module: str, info: _Module) -> tuple[PythonFile, str] | None:
    if module not in _PARSED:
        _PARSED[module] = _parse_module(index, info)
    return _PARSED[module]


def _named(index: ProjectIndex, pattern: re.Pattern[bytes], name: str) -> list[str]:
    """The modules (in the index's order) whose text `pattern` finds `name` in, as
    `pattern.findall` takes names: `_name_index(...)[name]`, without building it for a few
    names."""
    table = _NAMED.get((id(index), pattern.pattern))
    if table is not None:
        return table.get(name, [])
    key = (id(index), pattern.pattern, name)
    if key in _ASKED:
        return _ASKED[key]
    if not name.isascii():
        return []  # the pattern finds ASCII names only
    for old in [k for k in _ASKED if k[0] != key[0]]:
        del _ASKED[old]  # one index per run
    if len(_ASKED) >= MAX_NAMES_SEARCHED:
        return _name_index(index, pattern).get(name, [])
    _ASKED[key] = _search_name(index, _one_name(pattern, name), name.encode("ascii"))
    return _ASKED[key]


def _one_name(pattern: re.Pattern[bytes], name: str) -> re.Pattern[bytes]:
    """The pattern's matches whose name is `name`. `findall` tries each run of identifier
    characters from its first letter or underscore not after another (a run may start with
    digits: `2x[` names `x`), takes the run whole, and fails for every later start in it if it
    fails there: so a match names `name` exactly where a run is digits, then `name`, then the
    pattern's tail."""
    tail = pattern.pattern.rpartition(rb"*+)")[2]
    return re.compile(
        rb"(?<![A-Za-z0-9_])[0-9]*" + re.escape(name.encode("ascii")) + rb"(?![A-Za-z0-9_])" + tail
    )


def _search_name(index: ProjectIndex, one: re.Pattern[bytes], needle: bytes) -> list[str]:
    return [m for m, data in _module_texts(index) if needle in data and one.search(data)]


def _module_texts(index: ProjectIndex) -> Iterator[tuple[str, bytes]]:
    """(module name, its bytes) in the index's order; an unreadable module is left out (that
    file's own lint reports it)."""
    from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes

    for name, info in index.modules.items():
        try:
            data = read_bytes(info.path, MAX_SOURCE_BYTES, index.roots)
        except Exception:
            continue
        yield name, data


def _name_index(index: ProjectIndex, pattern: re.Pattern[bytes]) -> dict[str, list[str]]:
    key = (id(index), pattern.pattern)
    if key not in _NAMED:
        for old in [k for k in _NAMED if k[0] != key[0]]:
            del _NAMED[old]  # one index per run
        table: dict[str, list[str]] = {}
        for name, data in _module_texts(index):
            for word in {w.decode("ascii") for w in pattern.findall(data)}:
                table.setdefault(word, []).append(name)
        _NAMED[key] = table
    return _NAMED[key]


def _parse_module(index: ProjectIndex, info: _Module) -> tuple[PythonFile, str] | None:
    from gpulint.frontends.python import FRONTEND
    from gpulint.safeio import MAX_SOURCE_BYTES, read_bytes
    from gpulint.settings import Settings

    try:
        data = read_bytes(info.path, MAX_SOURCE_BYTES, index.roots)
        parsed = FRONTEND.parse(info.relpath, data, Settings())
    except Exception:  # unreadable, unparsable: that file's own lint reports it
        return None
    return parsed, hashlib.sha256(data).hexdigest()


def _defines(text: bytes, name: str) -> bool:
    """The module's text has a top-level `def name(` or `class name` (a cheap test before a
    star import is taken to bring `name`: the summary is computed only if it does)."""
    needle = name.encode()
    return any(
        (b"\n" + head + needle + tail) in text or text.startswith(head + needle + tail)
        for head, tail in ((b"def ", b"("), (b"class ", b"("), (b"class ", b":"))
    )


def reset() -> None:
    """Forget what this process summarised (tests; a long-lived server between runs)."""
    _SUMMARISED.clear()
    _IN_PROGRESS.clear()
    _COMPILED_BREAKS.clear()
    _COMPILED_OPS.clear()
    _CHEAP_DATASETS.clear()
    _TIMING_DECORATORS.clear()
    _PARSED.clear()
    _NAMED.clear()
    _ASKED.clear()
    _MENTIONS.clear()


# Per process: module name -> (runs compiled extension ops, its digest, the tree modules it
# imports), or None when it cannot be read or parsed.
_COMPILED_OPS: dict[str, tuple[bool, str, list[str]] | None] = {}


def _imported_modules(session: ProjectSession, tree: ast.Module) -> list[str]:
    """The modules of the tree a module imports at its top level (`import pkg`, `from pkg
    import x` as the module `pkg` or the submodule `pkg.x`, relative imports included)."""
    index = session.index
    out: list[str] = []
    for stmt in tree.body:
        names: list[str] = []
        if isinstance(stmt, ast.Import):
            names = [alias.name for alias in stmt.names]
        elif isinstance(stmt, ast.ImportFrom):
            base = session._from_module(stmt)
            if base is not None:
                names = [base] + [f"{base}.{alias.name}" for alias in stmt.names]
        for name in names:
            resolved = index.resolve_module(name, session.relpath)
            if resolved is not None and resolved not in out:
                out.append(resolved)
    return out
