"""Function summaries across the modules of a checked tree (gpulint.project)."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap
from pathlib import Path

import pytest

from gpulint.cli import main
from gpulint.project import ProjectIndex, module_name

TRAIN = """
import torch
from pkg.utils import clip_grads, recurse_a
from pkg import metrics as M


def train(model, loader, optimizer):
    for x, y in loader:
        loss = model(x.cuda(), y.cuda())
        loss.backward()
        clip_grads(model)
        optimizer.step()
        M.log_metrics({"loss": loss})
        recurse_a(loss)
"""
UTILS = """
import torch
from .metrics import cyclic


def clip_grads(model):
    return torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)


def recurse_a(x):
    return cyclic(x)
"""
METRICS = """
from . import utils


def log_metrics(metrics):
    return summarize(metrics)


def summarize(metrics):
    return {k: v.item() for k, v in metrics.items()}


def cyclic(x):
    return utils.recurse_a(x)
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "utils.py").write_text(textwrap.dedent(UTILS))
    (tmp_path / "pkg" / "metrics.py").write_text(textwrap.dedent(METRICS))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    return tmp_path


def check(*args: str, paths: tuple[str, ...] = (".",)) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--format", "json", "--select", "GPU101", "--jobs", "1", *args, *paths])
    return json.loads(out.getvalue())["findings"]


def test_a_callee_in_another_module_is_reported_at_the_call_in_the_step_loop(tree):
    (finding,) = check("--no-cache")
    assert finding["path"] == "train.py" and finding["line"] == 13
    assert (
        "`M.log_metrics()` syncs on every step: `.item()` at pkg/metrics.py:10"
        in finding["message"]
    )
    assert "through summarize()" in finding["message"]
    # The chain down to the sync: the call in `log_metrics()`, then the readback, with spans.
    assert finding["related"] == [
        {
            "path": "pkg/metrics.py",
            "line": 6,
            "col": 12,
            "end_line": 6,
            "end_col": 30,
            "message": "`log_metrics()` calls `summarize()` here",
        },
        {
            "path": "pkg/metrics.py",
            "line": 10,
            "col": 16,
            "end_line": 10,
            "end_col": 24,
            "message": "`.item()` syncs here",
        },
    ]


def test_sarif_carries_the_callee_line_as_a_related_location(tree):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--format", "sarif", "--select", "GPU101", "--no-cache", "."])
    (result,) = json.loads(out.getvalue())["runs"][0]["results"]
    call, sync = result["relatedLocations"]
    assert sync["physicalLocation"]["artifactLocation"]["uri"] == "pkg/metrics.py"
    assert sync["physicalLocation"]["region"] == {
        "startLine": 10,
        "startColumn": 16,
        "endLine": 10,
        "endColumn": 24,
    }
    assert sync["message"]["text"] == "`.item()` syncs here"
    assert call["physicalLocation"]["region"]["startLine"] == 6
    # GitHub's convention: the message links each related location by its id.
    assert result["message"]["text"].endswith(
        f"(see [metrics.py:6]({call['id']}), [metrics.py:10]({sync['id']}))"
    )


def test_text_output_prints_the_chain_as_notes_under_the_finding(tree):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--select", "GPU101", "--no-cache", "--jobs", "1", "-q", "."])
    assert out.getvalue().splitlines()[1:] == [
        "pkg/metrics.py:6:12: note: `log_metrics()` calls `summarize()` here",
        "pkg/metrics.py:10:16: note: `.item()` syncs here",
    ]
    assert out.getvalue().startswith("train.py:13:")


def test_cached_findings_keep_their_chain(tree):
    first = check()
    assert check() == first  # the second run is served from the cache
    assert len(first[0]["related"]) == 2


def test_a_changed_callee_invalidates_its_callers_cached_results(tree):
    assert len(check()) == 1
    assert len(check()) == 1  # served from the cache
    metrics = tree / "pkg" / "metrics.py"
    metrics.write_text(metrics.read_text().replace("v.item()", "v.detach()"))
    assert check() == []  # train.py itself did not change
    metrics.write_text(metrics.read_text().replace("v.detach()", "v.item()"))
    assert len(check()) == 1


def test_one_file_checked_alone_still_sees_the_projects_modules(tree):
    # `gpulint check train.py`, pre-commit on changed files: the callees are the project's.
    assert check("--no-cache", paths=("train.py",))[0]["line"] == 13
    # Linted from memory (flake8 plugin, language server): no tree, no cross-module facts.
    from gpulint.engine import lint_source

    text = (tree / "train.py").read_text()
    assert [f for f in lint_source(text, "train.py") if f.code == "GPU101"] == []


def test_modules_resolve_by_unique_suffix_and_relative_imports():
    assert module_name("src/pkg/__init__.py") == "src.pkg"
    assert module_name("src/pkg/utils.py") == "src.pkg.utils"
    assert module_name("scripts/my-tool.py") is None
    assert module_name("my-project/pkg/utils.py") == "pkg.utils"  # the checkout's folder name
    index = ProjectIndex.build(
        [(Path(p), p) for p in ["src/pkg/utils.py", "a/utils.py", "src/pkg/__init__.py"]]
    )
    assert index.resolve_module("pkg.utils") == "src.pkg.utils"
    assert index.resolve_module("utils") is None  # two modules answer: unknown
    assert index.resolve_module("torch.nn") is None  # outside the tree: nothing assumed


def test_a_broken_callee_module_is_reported_and_the_run_goes_on(tree):
    # Broken where a rule looks (a step marker), so the file itself is parsed and reported.
    (tree / "pkg" / "metrics.py").write_text("def log_metrics(m:\n    m.backward()\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--format", "json", "--no-cache", "--jobs", "1", "."])
    findings = json.loads(out.getvalue())["findings"]
    assert [(f["path"], f["code"]) for f in findings if f["code"] == "GPU000"] == [
        ("pkg/metrics.py", "GPU000")
    ]
    assert not [f for f in findings if f["path"] == "train.py" and f["code"] == "GPU101"]


def test_mutual_recursion_across_modules_terminates_with_the_sync_found(tree):
    utils = tree / "pkg" / "utils.py"
    utils.write_text(
        utils.read_text() + "\n\ndef deep(x):\n    recurse_a(x)\n    return x.item()\n"
    )
    train = tree / "train.py"
    train.write_text(
        train.read_text()
        .replace("recurse_a(loss)", "recurse_a(loss)\n        deep(loss)")
        .replace("import clip_grads, recurse_a", "import clip_grads, deep, recurse_a")
    )
    (finding,) = check("--no-cache")
    # deep(loss): its own .item(), found past the recursion recurse_a <-> cyclic; it follows the
    # wait in log_metrics() at line 13, so that finding names it
    assert finding["line"] == 13 and "(line 15)" in finding["message"]


STAR_TRAIN = """
import torch
from helpers import *
from meters import Meter


def train(model, loader, optimizer):
    meter = Meter()
    for x, y in loader:
        loss = model(x.cuda(), y.cuda())
        loss.backward()
        optimizer.step()
        meter.add(loss)
        norm = grad_norm(model)
        gate(loss, active=False)
"""
HELPERS = """
def grad_norm(model):
    return sum(p.grad.norm() ** 2 for p in model.parameters()).sqrt().item()


def gate(loss, active):
    if not active:
        return
    print(loss.item())
"""
METERS = """
class Meter:
    def __init__(self):
        self.values = []

    def add(self, loss):
        self.values.append(loss.item())
"""


def test_methods_of_built_instances_and_star_imports_resolve_across_modules(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(textwrap.dedent(STAR_TRAIN))
    (tmp_path / "helpers.py").write_text(textwrap.dedent(HELPERS))
    (tmp_path / "meters.py").write_text(textwrap.dedent(METERS))
    (finding,) = check("--no-cache")
    # `meter.add()` (a method of an imported class), then `grad_norm()` (from a star import, its
    # `.item()` rooted in the gradients through `sum(...)`), which the first wait paid for and
    # is named in its finding; not `gate()`, which syncs only past a guard that may return early.
    assert (finding["line"], finding["message"].split(" syncs")[0]) == (13, "`meter.add()`")
    assert [(r["line"], r["message"]) for r in finding["related"]] == [
        (7, "`.item()` syncs here"),
        (14, "`grad_norm()`: the host already waited at line 13"),
    ]


def test_readbacks_after_the_first_in_an_iteration_are_named_as_related(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(
        textwrap.dedent(
            """\
            import torch
            for x, y in loader:
                loss = model(x.cuda())
                loss.backward()
                optimizer.step()
                total += loss.item()
                correct += (loss > 0).sum().item()
                lr = float(scale)
                print(f"{loss.item():.3f}")
            """
        )
    )
    (finding,) = check("--no-cache", paths=("train.py",))
    assert finding["line"] == 6
    assert "and 2 more readbacks in this iteration after it (lines 7, 9)" in finding["message"]
    assert [(r["line"], r["message"]) for r in finding["related"]] == [
        (7, "`.item()`: the host already waited at line 6"),
        (9, "`.item()`: the host already waited at line 6"),
    ]


SPLAT_TRAIN = """
import torch
from renderer import render


def train(scene, cameras, optimizer, iterations):
    for it in range(iterations):
        camera = cameras[it % len(cameras)]
        image = render(camera, scene)
        loss = (image - camera.image.cuda()).abs().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
"""
RENDERER = """
from rasterizer import rasterize


def render(camera, scene):
    return rasterize(scene.means, scene.colors, camera)
"""
RASTERIZER = """
import torch
from . import _C


class _Rasterize(torch.autograd.Function):
    @staticmethod
    def forward(ctx, means, colors, camera):
        return _C.rasterize_forward(means, colors, camera)


def rasterize(means, colors, camera):
    return _Rasterize.apply(means, colors, camera)
"""


@pytest.mark.parametrize("compiled", [True, False])
def test_fp32_steps_through_the_projects_compiled_rasterizer(tmp_path, monkeypatch, compiled):
    """GPU202 reads, two imports away, that the step's work is the project's own CUDA kernels
    (a rasterizer package that does `from . import _C`); a pure-PyTorch one keeps the finding."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(textwrap.dedent(SPLAT_TRAIN))
    (tmp_path / "renderer.py").write_text(textwrap.dedent(RENDERER))
    (tmp_path / "rasterizer").mkdir()
    source = RASTERIZER if compiled else RASTERIZER.replace("_C.", "torch.ops.aten.")
    (tmp_path / "rasterizer" / "__init__.py").write_text(textwrap.dedent(source))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--format", "json", "--select", "GPU202", "--jobs", "1", "--no-cache", "."])
    codes = [f["code"] for f in json.loads(out.getvalue())["findings"]]
    assert codes == ([] if compiled else ["GPU202"])


EVAL = """
import torch
from pkg.data import build_eval_split


def evaluate(model, cfg):
    holdout = build_eval_split(cfg)  # the held-out loader
    for x, y in holdout:
        out = model(x.cuda())
        print((out.argmax(-1) == y.cuda()).float().mean().item())
"""
DATA = """
from torch.utils.data import DataLoader


def build_eval_split(cfg):
    return _loader(cfg.dataset, cfg.batch_size)


def _loader(dataset, batch_size):
    split = DataLoader(dataset, batch_size=batch_size, num_workers=4, pin_memory=True)
    return split


def build_eval_list(cfg):
    return [cfg.example]
"""


def test_a_loader_returned_by_another_module_makes_its_loop_a_step_loop(tmp_path, monkeypatch):
    # `holdout` is named like nothing: the summary of `build_eval_split` (through `_loader`)
    # says it returns a DataLoader, so the loop over it is an evaluation loop. (The file must
    # pass GPU101's text gate: `loader` or a training call somewhere in it, here a comment.)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "data.py").write_text(textwrap.dedent(DATA))
    (tmp_path / "evaluate.py").write_text(textwrap.dedent(EVAL))
    assert [f["line"] for f in check("--no-cache")] == [10]
    # the same loop over what another helper returns (a list): no loader, no step loop
    (tmp_path / "evaluate.py").write_text(
        textwrap.dedent(EVAL).replace("build_eval_split", "build_eval_list")
    )
    assert check("--no-cache") == []


# -- dataset classes read from another module ---------------------------------------------------
PROMPTS = """
from torch.utils.data import Dataset


class PromptDataset(Dataset):
    def __init__(self, prompt, num_samples):
        self.prompt = prompt
        self.num_samples = num_samples

    def __len__(self):
        return self.num_samples

    def __getitem__(self, index):
        return {"prompt": self.prompt, "index": index}


class ImageDataset(Dataset):
    def __init__(self, paths, transform):
        self.paths = paths
        self.transform = transform

    def __getitem__(self, index):
        return self.transform(Image.open(self.paths[index]))
"""
GENERATE = """
import torch
from utils.dataset import {cls}


def generate(pipeline, args):
    loader = torch.utils.data.DataLoader({cls}(args.prompt, args.n), batch_size=4)
    for batch in loader:
        pipeline(batch["prompt"]).images[0].save("out.png")
        loss = pipeline.unet(batch["index"].cuda()).mean()
        loss.backward()
"""


def _examples(root: Path, cls: str) -> None:
    """Two example folders, each a script beside its own `utils/dataset.py` (the shape of a
    repository of examples): `utils.dataset` is ambiguous by suffix, and each script means its
    own folder's."""
    for name in ("dreambooth", "lora"):
        folder = root / "examples" / name
        (folder / "utils").mkdir(parents=True)
        (folder / "utils" / "__init__.py").write_text("")
        (folder / "utils" / "dataset.py").write_text(textwrap.dedent(PROMPTS))
        (folder / "train.py").write_text(textwrap.dedent(GENERATE.format(cls=cls)))


def test_a_dataset_class_from_another_module_is_known_by_what_it_reads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _examples(tmp_path, "PromptDataset")
    assert [f for f in check("--select", "GPU302", "--no-cache") if f["code"] == "GPU302"] == []
    _examples(tmp_path / "other", "ImageDataset")
    found = check("--select", "GPU302", "--no-cache", paths=("other",))
    assert sorted(f["path"] for f in found if f["code"] == "GPU302") == [
        "other/examples/dreambooth/train.py",
        "other/examples/lora/train.py",
    ]


def test_a_changed_dataset_module_invalidates_the_loader_s_cached_result(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _examples(tmp_path, "PromptDataset")
    assert check("--select", "GPU302") == []
    dataset = tmp_path / "examples" / "lora" / "utils" / "dataset.py"
    dataset.write_text(
        textwrap.dedent(PROMPTS).replace(
            'return {"prompt": self.prompt, "index": index}',
            'return {"prompt": self.tokenizer(self.prompt), "index": index}',
        )
    )
    assert [f["path"] for f in check("--select", "GPU302")] == ["examples/lora/train.py"]


def test_an_ambiguous_import_resolves_beside_the_importing_script():
    index = ProjectIndex.build(
        [
            (Path(p), p)
            for p in ("a/utils/dataset.py", "a/train.py", "b/utils/dataset.py", "b/train.py")
        ]
    )
    assert index.resolve_module("utils.dataset") is None  # two answer: unknown
    assert index.resolve_module("utils.dataset", "a/train.py") == "a.utils.dataset"
    assert index.resolve_module("utils.dataset", "b/train.py") == "b.utils.dataset"
    assert index.resolve_module("utils.dataset", "c/train.py") is None


TIMING_UTILS = """
import functools
import logging
import time

import torch

logger = logging.getLogger(__name__)


def timed(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        start = time.time()
        result = fn(*args, **kwargs)
        logger.info("%s took %.3f s", fn.__name__, time.time() - start)
        return result

    return wrapper


def timer(name):
    def decorator(fn):
        def wrapper(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            logger.info("%s: %.2f ms", name, (time.perf_counter() - t0) * 1e3)
            return out

        return wrapper

    return decorator


def synced(fn):
    def wrapper(*args, **kwargs):
        torch.cuda.synchronize()
        start = time.time()
        result = fn(*args, **kwargs)
        torch.cuda.synchronize()
        logger.info("%s took %.3f s", fn.__name__, time.time() - start)
        return result

    return wrapper


def logged(fn):
    def wrapper(*args, **kwargs):
        logger.info("calling %s", fn.__name__)
        return fn(*args, **kwargs)

    return wrapper
"""
TIMED_TRAIN = """
import torch

import utils
from utils import logged, synced, timed, timer


@timed
def forward(model, x):
    return model(x.cuda())


@timer("decode")
def decode(model, tokens):
    return model(tokens.to("cuda", non_blocking=True))


@utils.timed
def project(model, x):
    return model(x.cuda())


@synced
def forward_synced(model, x):
    return model(x.cuda())


@logged
def forward_logged(model, x):
    return model(x.cuda())


@timed
def accuracy(model, x, y):
    return (model(x.cuda()).argmax(-1) == y.cuda()).float().mean().item()


@timed
def load(path):
    return torch.load(path)
"""


def test_a_timing_decorator_from_another_module_is_reported_at_its_use(tmp_path, monkeypatch):
    """`@timed` imported from the tree's utils.py, whose wrapper reads the clock around the
    call with no sync, on a function that launches CUDA work: reported at the decorator, with
    the wrapper's two clock reads as related locations. A decorator that syncs, one that does
    not time, and functions that wait for the device or do no device work are left alone."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "utils.py").write_text(textwrap.dedent(TIMING_UTILS))
    (tmp_path / "train.py").write_text(textwrap.dedent(TIMED_TRAIN))
    found = [f for f in check("--select", "GPU601", "--no-cache") if f["code"] == "GPU601"]
    assert [(f["path"], f["line"]) for f in found] == [
        ("train.py", 8),
        ("train.py", 13),
        ("train.py", 18),
    ]
    assert "`@timed` reads the wall clock before and after `forward()`" in found[0]["message"]
    assert "`@timer`" in found[1]["message"] and "`@utils.timed`" in found[2]["message"]
    assert [(r["path"], r["line"]) for r in found[0]["related"]] == [
        ("utils.py", 14),
        ("utils.py", 16),
    ]
    assert "`time.time()` is read here, before `fn()` runs" in found[0]["related"][0]["message"]
    assert [(r["path"], r["line"]) for r in found[1]["related"]] == [
        ("utils.py", 25),
        ("utils.py", 27),
    ]
    # The decorator's module changed to sync: the cached result of train.py is not reused.
    utils = tmp_path / "utils.py"
    assert len([f for f in check("--select", "GPU601") if f["code"] == "GPU601"]) == 3
    utils.write_text(
        textwrap.dedent(TIMING_UTILS).replace(
            '        result = fn(*args, **kwargs)\n        logger.info("%s took',
            "        result = fn(*args, **kwargs)\n        torch.cuda.synchronize()\n"
            '        logger.info("%s took',
            1,
        )
    )
    assert [f["line"] for f in check("--select", "GPU601") if f["code"] == "GPU601"] == [13]


def test_subscripted_names_are_whole_words():
    """The text index of subscripted names (Triton launches `kernel[grid](...)`) takes each name
    whole, wherever it starts: after a digit, before spaces, never a word's tail."""
    from gpulint.project import _SUBSCRIPTED

    text = b"add_kernel[grid](x)\n2x[0]\nk2 [g]\nnot_subscripted(y)\na.b_c[1]\n_k[\nabc\n"
    assert _SUBSCRIPTED.findall(text) == [b"add_kernel", b"x", b"k2", b"b_c", b"_k"]


def test_one_name_search_answers_as_the_whole_index(tmp_path):
    """Looking a name up alone (a substring test, then the pattern for that name) finds the
    modules the whole-text index lists for it, in its order: a name after digits, before
    spaces, never a word's tail or head, nor a name run on into digits."""
    from gpulint import project
    from gpulint.project import _CALLED, _SUBSCRIPTED, ProjectIndex, _name_index, _named

    texts = [
        b"add_kernel[grid](x)\n2x[0]\nk2 [g]\n",
        b"a1x[0]\nnot_add_kernel[g]\nadd_kernel2[g]\n",
        b"y = 12add_kernel  [g](z)\nx(1)\n",
        b"\xc3\xa9x[0]\nk2(1)\n_k[\n",
        b"add_kernel\n[g]\nx.k2 (3)\n",
    ]
    files = []
    for i, text in enumerate(texts):
        path = tmp_path / f"m{i}.py"
        path.write_bytes(text)
        files.append((path, f"m{i}.py"))
    index = ProjectIndex.build(files, (tmp_path,))
    names = ["add_kernel", "x", "k2", "_k", "a1x", "kernel", "add_kernel2", "g", "y", "z", "é"]
    for pattern in (_SUBSCRIPTED, _CALLED):
        project.reset()
        alone = {n: _named(index, pattern, n) for n in names}
        whole = _name_index(index, pattern)
        assert alone == {n: whole.get(n, []) for n in names}
    project.reset()
    assert _named(index, _SUBSCRIPTED, "add_kernel") == ["m0", "m2", "m4"]
