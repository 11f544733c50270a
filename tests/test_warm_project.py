"""The warm path: a run whose files and project inputs are unchanged answers from the caches
(no project built, no file parsed, no worker started), and any change to what a cached answer
was made from is seen (gpulint.projectcache, gpulint.parallel). Behaviour, never timing."""

from __future__ import annotations

import os
import textwrap
from dataclasses import fields
from pathlib import Path

import pytest

from gpulint.cache import ResultCache
from gpulint.engine import Linter
from gpulint.frontends.cuda import CudaFrontend
from gpulint.frontends.cuda.project import CallSite, CudaProject
from gpulint.testing import example_config

OLD_NS = 1_600_000_000_000_000_000  # far outside the racy window

OP_CU = """\
#include <torch/extension.h>
__global__ void relu_kernel(float* x, int n) {}
void relu(torch::Tensor x) {
  int n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
  cudaFuncSetAttribute(relu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
}
"""
SETUP_PY = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="toy-relu",
    ext_modules=[CUDAExtension(name="toy_relu", sources=["csrc/relu.cu"])],
    cmdclass={"build_ext": BuildExtension},
)
"""
RUN_PY = """\
import torch
import toy_relu

x = torch.randn(1 << 20, device="cuda")
toy_relu.relu(x)
torch.cuda.synchronize()
print(torch.allclose(x, x.clamp(min=0)))
"""
LAYERS_PY = """\
import torch
import toy_relu


class ReLU(torch.nn.Module):
    def forward(self, x):
        toy_relu.relu(x)
        return x
"""
CUDA_CODES = ("GPU802", "GPU803", "GPU804")


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """An extension whose only Python user is a script (its harness: no findings on it), and
    the calls counted: projects built, files parsed."""
    monkeypatch.chdir(tmp_path)
    files = {"csrc/relu.cu": OP_CU, "setup.py": SETUP_PY, "run_relu.py": RUN_PY}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
        os.utime(tmp_path / name, ns=(OLD_NS, OLD_NS))
    counts = {"index": 0, "parse": 0}
    real_index, real_lint = CudaFrontend.index, Linter.lint_bytes

    def index(self, *args, **kwargs):
        counts["index"] += 1
        return real_index(self, *args, **kwargs)

    def lint_bytes(self, *args, **kwargs):
        findings, parsed = real_lint(self, *args, **kwargs)
        counts["parse"] += parsed
        return findings, parsed

    monkeypatch.setattr(CudaFrontend, "index", index)
    monkeypatch.setattr(Linter, "lint_bytes", lint_bytes)
    return tmp_path, counts


def _run(root: Path) -> list[str]:
    linter = Linter(example_config(root=root))
    cache = ResultCache(root / ".gpulint_cache", linter.fingerprint())
    report = linter.run([Path(".")], jobs=1, cache=cache)
    return sorted(f"{f.path}:{f.code}" for f in report.findings if f.code in CUDA_CODES)


def _write(path: Path, text: str, mtime_ns: int | None = OLD_NS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mtime_ns is not None:
        os.utime(path, ns=(mtime_ns, mtime_ns))


def test_an_unchanged_tree_builds_no_project_and_parses_nothing(tree, monkeypatch):
    root, counts = tree
    assert _run(root) == []  # the script's harness
    assert counts["index"] == 1

    def refused(*args, **kwargs):
        raise AssertionError("a worker pool was started or a file linted")

    monkeypatch.setattr("gpulint.supervisor.Supervisor.__init__", refused)
    monkeypatch.setattr(Linter, "lint_path", refused)
    counts.update(index=0, parse=0)
    assert _run(root) == []
    assert counts == {"index": 0, "parse": 0}


def test_a_new_python_module_beside_the_extension_rebuilds_the_project(tree):
    """A package module importing the extension makes it a library: the cached project (built
    when only a script used it) must not be served, nor the findings cached with it."""
    root, counts = tree
    assert _run(root) == []
    _write(root / "toyrelu" / "__init__.py", "from toyrelu.layers import ReLU\n")
    _write(root / "toyrelu" / "layers.py", LAYERS_PY)
    assert _run(root) == [f"csrc/relu.cu:{c}" for c in CUDA_CODES]
    assert counts["index"] == 2


@pytest.mark.parametrize("racy", [False, True], ids=["stamped", "hashed"])
def test_an_edit_to_a_python_file_the_project_read_rebuilds_it(tree, racy):
    """The same edit seen by its stamp (an old file) and by its content hash (a file written
    within the racy window, whose stamp is not trusted)."""
    root, counts = tree
    mtime = None if racy else OLD_NS
    _write(root / "toyrelu" / "__init__.py", "from toyrelu.layers import ReLU\n", mtime)
    _write(root / "toyrelu" / "layers.py", LAYERS_PY, mtime)
    library = [f"csrc/relu.cu:{c}" for c in CUDA_CODES]
    assert _run(root) == library
    assert _run(root) == library and counts["index"] == 1  # served
    # the package no longer imports it: only the script does, again
    _write(
        root / "toyrelu" / "layers.py",
        LAYERS_PY.replace("import toy_relu", "import toy_relux"),
        None if racy else OLD_NS + 1_000_000_000,
    )
    assert _run(root) == []
    assert counts["index"] == 2


def test_an_edited_cuda_source_rebuilds_the_project(tree):
    root, counts = tree
    assert _run(root) == []
    _write(root / "csrc" / "relu.cu", OP_CU.replace("relu_kernel<<<", "relu_kernel <<<"))
    assert _run(root) == []
    assert counts["index"] == 2


def test_a_racy_file_is_served_once_its_hash_is_unchanged(tree):
    """Written just now, a file is recorded by its hash; the next run finds the same bytes and
    serves the project (and records the stamp)."""
    root, counts = tree
    _write(root / "bench.py", "print('bench')\n", None)
    assert _run(root) == []
    assert _run(root) == []
    assert counts["index"] == 1


def _every_field_set() -> CudaProject:
    values = {}
    for f in fields(CudaProject):
        if f.type.startswith("frozenset"):
            values[f.name] = frozenset({f"{f.name}_a", f"{f.name}_b"})
        elif "CallSite" in f.type:
            values[f.name] = {"launch_k": (CallSite("fwd", "a/ops.cu", 3, True),)}
        elif f.type == "int":
            values[f.name] = 7
        elif f.type == "bool":
            values[f.name] = False  # (not the default, so the round trip is seen)
        elif f.type.startswith("dict[str, tuple[int"):
            values[f.name] = {"copy": (2, 5)}
        elif f.type.startswith("dict"):
            values[f.name] = {"launch_k": "a/ops.cu"}
        else:  # a new kind of field: give it a JSON form in CudaProject.to_json/from_json
            raise AssertionError(f"CudaProject.{f.name}: {f.type}")
    return CudaProject(**values)


def test_a_cuda_project_comes_back_from_its_json_form_equal():
    import json

    project = _every_field_set()
    again = CudaProject.from_json(json.loads(json.dumps(project.to_json())))
    assert again == project
    assert again.digest_for("a/ops.cu") == project.digest_for("a/ops.cu")
    with pytest.raises(ValueError):
        CudaProject.from_json({**project.to_json(), "calls": {"k": [["fwd", "a", "3", True]]}})


def test_a_foreign_or_torn_project_store_is_not_trusted(tree):
    root, counts = tree
    assert _run(root) == []
    [stored] = (root / ".gpulint_cache").glob("project-cuda-*.json")
    stored.write_text(textwrap.dedent('{"format": 1, "project": "x"'))
    assert _run(root) == []
    assert counts["index"] == 2


def test_a_stored_project_that_does_not_read_back_is_built_again(tree):
    """The store's record matches but its project is not one this gpulint wrote: when a file
    has to be linted (its result is not cached), the project is built as on a miss, never
    left out (without it, the extension would be judged a library)."""
    import json

    root, counts = tree
    assert _run(root) == []
    [stored] = (root / ".gpulint_cache").glob("project-cuda-*.json")
    data = json.loads(stored.read_text())
    data["project"]["calls"] = {"relu": [["a"]]}
    stored.write_text(json.dumps(data))
    for results in (root / ".gpulint_cache").glob("results-*.json"):
        results.unlink()
    assert _run(root) == []
    assert counts["index"] == 2


def test_a_warm_run_over_cuda_sources_imports_no_front_end(tree):
    """Checked in a fresh interpreter: with the project and every result served, neither the
    CUDA front-end nor tree-sitter is imported."""
    import json
    import subprocess
    import sys

    root, _ = tree
    run = (
        "import json, sys\nfrom gpulint.cli import main\n"
        "code = main(['check', '--format', 'json', '--exit-zero', '.'])\n"
        "sys.stdout.flush()\nprint('\\n' + json.dumps(sorted(sys.modules)))\n"
    )

    def check() -> tuple[str, list[str]]:
        done = subprocess.run(
            [sys.executable, "-c", run], cwd=root, capture_output=True, text=True, check=True
        )
        out, _, modules = done.stdout.rpartition("\n\n")
        return out, json.loads(modules)

    cold, cold_modules = check()
    assert "gpulint.frontends.cuda" in cold_modules
    warm, modules = check()
    assert warm == cold
    assert [m for m in modules if m.startswith(("gpulint.frontends.cuda", "tree_sitter"))] == []


def test_new_stamps_alone_are_written_only_when_there_are_more_than_a_few(tmp_path, monkeypatch):
    """A touched file is hashed, found unchanged and served; its new stamp is written with the
    cache only when many files took one (a checkout), not for one or two (a file saved just
    before the last run): those are hashed again next time."""
    from gpulint.cache import RESTAMPS_WRITTEN

    monkeypatch.chdir(tmp_path)
    names = [f"m{i}.py" for i in range(RESTAMPS_WRITTEN + 4)]
    for name in names:
        _write(tmp_path / name, "import torch\nscaler = torch.cuda.amp.GradScaler()\n")

    def run() -> list[str]:
        linter = Linter(example_config(root=tmp_path))
        cache = ResultCache(tmp_path / ".gpulint_cache", linter.fingerprint())
        report = linter.run([Path(".")], jobs=1, cache=cache)
        return sorted(f"{f.path}:{f.code}" for f in report.findings)

    cold = run()
    assert len(cold) == len(names)
    [results] = (tmp_path / ".gpulint_cache").glob("results-*.json")
    written = results.read_bytes()
    for name in names[:2]:
        os.utime(tmp_path / name, ns=(OLD_NS + 5, OLD_NS + 5))
    assert run() == cold
    assert results.read_bytes() == written
    for name in names:
        os.utime(tmp_path / name, ns=(OLD_NS + 7, OLD_NS + 7))
    assert run() == cold
    assert results.read_bytes() != written
    # written: the next run serves every file by its stamp, hashing none
    monkeypatch.setattr(Linter, "digest", lambda *a: (_ for _ in ()).throw(AssertionError()))
    assert run() == cold


def test_a_linter_run_again_takes_none_of_the_last_runs_stored_salts(tree):
    """One linter, two runs over a cache (a watch): the second, after a package starts to
    import the extension, builds the project again and keys the source by the new one."""
    root, counts = tree
    assert _run(root) == []  # the project is stored
    linter = Linter(example_config(root=root))

    def run() -> list[str]:
        cache = ResultCache(root / ".gpulint_cache", linter.fingerprint())
        report = linter.run([Path(".")], jobs=1, cache=cache)
        return sorted(f"{f.path}:{f.code}" for f in report.findings if f.code in CUDA_CODES)

    assert run() == []  # served, with the stored salts
    _write(root / "toyrelu" / "__init__.py", "from toyrelu.layers import ReLU\n")
    _write(root / "toyrelu" / "layers.py", LAYERS_PY)
    assert run() == [f"csrc/relu.cu:{c}" for c in CUDA_CODES]
