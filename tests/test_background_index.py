"""A project index built in a process of its own while the workers lint the other files
(`Linter.index_projects(background=True)`, what `gpulint check` does with more than one
worker): the same findings as one built in place, its failures reported, and the workers that
lint its files forked once it is in (`Supervisor.renew`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpulint import supervisor
from gpulint.cache import ResultCache
from gpulint.diagnostics import INTERNAL_ERROR
from gpulint.engine import Linter
from gpulint.frontends.cuda import CudaFrontend
from gpulint.parallel import lint_many
from gpulint.testing import example_config

pytestmark = pytest.mark.skipif(not supervisor.CAN_FORK, reason="needs fork")

from test_warm_project import CUDA_CODES, LAYERS_PY, OLD_NS, OP_CU, RUN_PY, SETUP_PY  # noqa: E402

HARNESS = {"csrc/relu.cu": OP_CU, "setup.py": SETUP_PY, "run_relu.py": RUN_PY}
LIBRARY_MODULES = {
    "toyrelu/__init__.py": "from toyrelu.layers import ReLU\n",
    "toyrelu/layers.py": LAYERS_PY,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
        os.utime(root / name, ns=(OLD_NS, OLD_NS))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """An extension used by a package module (a library: its launch findings are reported)
    and by a script."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, {**HARNESS, **LIBRARY_MODULES})
    return tmp_path


def _check(
    root: Path, background: bool, cached: bool = True
) -> tuple[list[str], Linter, frozenset[str]]:
    """What `gpulint check .` does with two workers, the project built in place or not: the
    findings and internal errors, the linter, and the languages it built in the background."""
    linter = Linter(example_config(root=root))
    cache = ResultCache(root / ".gpulint_cache", linter.fingerprint()) if cached else None
    files, _ = linter.find_files([Path(".")])
    linter.index_projects(files, cache.directory if cache else None, background=background)
    started = linter.building
    if started:
        assert started == {"cuda"} and "cuda" not in linter.settings.projects
    linter.prepare_project([Path(".")], files)
    results = lint_many(linter, files, jobs=2, cache=cache)
    found = sorted(f"{f.path}:{f.code}" for r in results for f in r.findings)
    return found + sorted(f"{f.path}:{f.code}" for f in linter.errors), linter, started


LIBRARY = [f"csrc/relu.cu:{c}" for c in CUDA_CODES]


@pytest.mark.parametrize("cached", [True, False], ids=["cache", "no-cache"])
@pytest.mark.parametrize("shape", ["library", "harness"])
def test_a_project_built_beside_the_workers_gives_the_same_findings(
    tmp_path, monkeypatch, shape, cached
):
    """Only the project says the harness's extension is one (without it, its launches would
    be reported): its files must be linted by workers that hold it."""
    monkeypatch.chdir(tmp_path)
    tree = tmp_path
    _write(tree, {**HARNESS, **(LIBRARY_MODULES if shape == "library" else {})})
    in_place, _, _ = _check(tree, background=False, cached=False)
    cuda = [f for f in in_place if f.startswith("csrc/") and f[-6:] in CUDA_CODES]
    assert cuda == (LIBRARY if shape == "library" else [])
    found, linter, started = _check(tree, background=True, cached=cached)
    assert found == in_place
    assert started == {"cuda"} and not linter.building  # taken in, not left running
    if cached:  # stored by the builder: the next run is served without building
        again, _, started = _check(tree, background=True)
        assert again == in_place and not started


def test_an_edit_after_a_background_build_is_seen(tree):
    """Stored by the builder, the project is still stamped before it was read: an edit that
    makes the extension a harness (only the script uses it) rebuilds it."""
    assert _check(tree, background=True)[0][:3] == LIBRARY
    layers = tree / "toyrelu" / "layers.py"
    layers.write_text(LAYERS_PY.replace("import toy_relu", "import toy_relux"))
    os.utime(layers, ns=(OLD_NS + 10**9, OLD_NS + 10**9))
    found, _, _ = _check(tree, background=True)
    assert not [f for f in found if f.startswith("csrc/")]
    assert found == _check(tree, background=False, cached=False)[0]


def test_a_builder_that_dies_is_an_internal_error_and_the_run_goes_on(tree, monkeypatch):
    monkeypatch.setattr(CudaFrontend, "index", lambda *a, **k: os._exit(3))
    found, linter, _ = _check(tree, background=True)
    [error] = linter.errors
    assert error.code == INTERNAL_ERROR and error.path == "csrc/relu.cu"
    assert "project index" in error.message and "the process building it died" in error.message
    # judged alone, as in an editor: the file is still linted
    assert any(f.startswith("csrc/relu.cu:GPU") and INTERNAL_ERROR not in f for f in found)


def test_a_builder_that_raises_reports_the_front_ends_error(tree, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(CudaFrontend, "index", broken)
    _, linter, _ = _check(tree, background=True)
    [error] = linter.errors
    assert error.code == INTERNAL_ERROR and "KeyError" in error.message


# -- the supervisor's side ---------------------------------------------------------------------
STATE = {"value": "old"}


def _read_state(_: int) -> str:
    return STATE["value"]


def test_tasks_after_a_renew_run_in_workers_forked_with_the_new_state(monkeypatch):
    monkeypatch.setitem(STATE, "value", "old")
    with supervisor.Supervisor(2) as sup:

        def tasks():
            yield from [(0,), (1,), (2,)]
            STATE["value"] = "new"  # what the caller learned while those ran
            sup.renew()
            yield from [(3,), (4,), (5,)]

        seen = dict(sup.map(_read_state, tasks()))
    assert [seen[i].value for i in range(6)] == ["old"] * 3 + ["new"] * 3


def test_a_background_call_answers_later_and_is_killed_past_its_budget():
    started = supervisor.Background(os.getpid)
    assert started.result().status == "ok"
    assert started.result().value != os.getpid()  # it ran in a child of its own
    slow = supervisor.Background(time.sleep, 30, budget=0.2)
    t0 = time.monotonic()
    assert slow.result().status == "timeout"
    assert time.monotonic() - t0 < 5


def test_a_run_cut_short_stops_the_builder(tree, monkeypatch):
    """Ctrl-C (or any error) before the project is taken in must not leave it running."""
    monkeypatch.setattr(CudaFrontend, "index", lambda *a, **k: time.sleep(60))
    linter = Linter(example_config(root=tree))
    files, _ = linter.find_files([Path(".")])
    linter.index_projects(files, None, background=True)
    [(build, *_)] = linter._building.values()
    pid = build._child.pid
    linter.abandon_projects()
    assert not linter.building
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # killed and reaped


def test_gpulint_check_stops_its_builder_when_linting_fails(tree, monkeypatch, capsys):
    from gpulint.cli import main

    monkeypatch.setattr(CudaFrontend, "index", lambda *a, **k: time.sleep(60))
    started: list[supervisor.Background] = []
    real = supervisor.Background.__init__

    def recorded(self, *args, **kwargs):
        real(self, *args, **kwargs)
        started.append(self)

    def broken(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(supervisor.Background, "__init__", recorded)
    monkeypatch.setattr("gpulint.parallel.lint_many", broken)
    t0 = time.monotonic()
    assert main(["check", "--no-cache", "--jobs", "2", "."]) != 0  # interrupted
    assert time.monotonic() - t0 < 30
    [build] = started
    with pytest.raises(ChildProcessError):
        os.waitpid(build._child.pid, os.WNOHANG)
