"""What a run imports when it has little to do. A cache hit and a file that no rule wants are
answered from the rule registry (gpulint/data/registry.json, generated from the rules): no rule
module, no parsing front-end, no libcst, tree-sitter, YAML or language-server code. Checked in a
fresh interpreter, by what is in `sys.modules` after the run (not by timing)."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpulint import registry
from gpulint.config import Config
from gpulint.engine import Linter
from gpulint.rule import all_rules

HEAVY = ("gpulint.rules.gpu", "gpulint.frontends.", "libcst", "tree_sitter", "yaml", "pygls")

RUN = textwrap.dedent(
    """
    import json, sys
    from gpulint.cli import main
    code = main(sys.argv[1:])
    sys.stdout.flush()
    print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
    """
)


def _check(cwd: Path, *args: str) -> tuple[int, str, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    out, _, last = done.stdout.rpartition("\n\n")
    info = json.loads(last)
    return info["code"], out, info["modules"], done.stderr


def _heavy(modules: list[str]) -> list[str]:
    # (The note on rules skipped for want of targets reads their triggers from the registry:
    # it imports none of them either.)
    return [m for m in modules if m.startswith(HEAVY)]


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    (tmp_path / "train.py").write_text(
        "import torch\n\n"
        "def train(model, loader, opt):\n"
        "    for x, y in loader:\n"
        "        loss = model(x).sum()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        "        print(loss.item())\n"
    )
    (tmp_path / "amp.py").write_text("import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (tmp_path / "plain.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("# A project\n\nIt trains a model.\n")
    return tmp_path


def test_a_cache_hit_run_imports_no_rule_and_no_front_end(project):
    cold = _check(project, "--format", "json", ".")
    warm = _check(project, "--format", "json", ".")
    assert cold[0] == warm[0] == 1  # findings, both times
    assert json.loads(cold[1])["findings"] and json.loads(cold[1]) == json.loads(warm[1])
    assert cold[3] == warm[3]
    heavy = _heavy(warm[2])
    assert heavy == [], heavy
    assert any(m.startswith("gpulint.rules.gpu") for m in cold[2])  # the cold run did lint


LINT = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from gpulint.config import Config
    from gpulint.engine import Linter
    result = Linter(Config(root=Path.cwd())).lint_path(Path(sys.argv[1]))
    print(json.dumps({"codes": [f.code for f in result.findings], "modules": sorted(sys.modules)}))
    """
)


def _lint_alone(cwd: Path, name: str) -> tuple[list[str], set[str]]:
    """One file linted as a worker lints it: the findings' codes, the rule modules imported."""
    done = subprocess.run(
        [sys.executable, "-c", LINT, name], cwd=cwd, capture_output=True, text=True, check=True
    )
    info = json.loads(done.stdout)
    return info["codes"], {m for m in info["modules"] if m.startswith("gpulint.rules.gpu")}


@pytest.mark.parametrize("name", ["plain.py", "amp.py", "train.py"])
def test_a_file_imports_only_the_rules_whose_gates_it_passes(project, name):
    codes, imported = _lint_alone(project, name)
    linter = Linter(Config(root=project))
    data = (project / name).read_bytes()
    passing = {r.__module__ for r in linter._rules_for("python", data, prefilter=True)}
    assert imported == passing
    assert ("GPU201" in codes) == (name == "amp.py")
    python_rules = [r for r in all_rules() if "python" in r.languages()]
    assert len(imported) < len(python_rules) / 2


def test_a_stale_registry_is_not_used(tmp_path, monkeypatch):
    """An index that does not match the rule sources (an edited rule, not regenerated) is
    ignored: the rules are read off their classes, as if there were no index."""
    data = json.loads(registry.render())
    data["rules"] = data["rules"][:1]  # a registry that lost rules
    stale = tmp_path / "registry.json"
    stale.write_text(json.dumps({**data, "source": "not the sources"}))
    monkeypatch.setattr(registry, "INDEX", str(stale))
    registry.registry.cache_clear()
    try:
        assert [r.code for r in registry.registry().rules] == [r.code for r in all_rules()]
    finally:
        registry.registry.cache_clear()


def test_rules_said_to_need_targets_need_them_whatever_the_options():
    """The registry's `needs_targets` (read off `applicable` with default settings) lets a run
    with no targets skip those rules without importing them: it must hold with any options."""
    from gpulint.hardware import table
    from gpulint.settings import Settings

    target = table().target("sm_90")
    options = [
        {},
        {"levers": [{"name": "x", "pattern": "torch.backends.cudnn.benchmark = True"}]},
        {"lever-presets": ["pytorch"], "cuda": {"check-macros": ["CHECK"]}},
        {"local_gpu": {"target": None, "why": ""}},
        {"config": {"root": "/tmp", "source": ""}, "claims": {"docstrings": True}},
    ]
    refs = {ref.code: ref for ref in registry.registry().rules}
    for rule in all_rules():
        ref = refs[rule.code]
        for opts in options:
            untargeted = Settings(options=opts)
            if ref.needs_targets:
                assert not rule.applicable(untargeted), (rule.code, opts)
                assert rule.applicable(Settings(targets=(target,), options=opts)), rule.code
            if ref.static_applicable:
                assert rule.applicable(untargeted)


def test_gates_known_from_the_registry_are_the_rules_own():
    """Where the registry answers a rule's gates without importing it (none of the option
    tables they read is set), the answer is what the rule itself gives."""
    from gpulint.hardware import table
    from gpulint.settings import Settings

    options = [
        {},
        {"config": {"root": "/tmp", "source": ""}},
        {"claims": {"docstrings": True}},
        {"claims": {"docstrings": False, "include": ["*.md"]}},
        {"cuda": {"check-macros": ["CHECK"]}, "levers": []},
    ]
    refs = {ref.code: ref for ref in registry.registry().rules}
    answered = 0
    for rule in all_rules():
        for opts in options:
            for targets in ((), (table().target("sm_90"),)):
                settings = Settings(targets=targets, options=opts)
                for language in rule.languages():
                    known = refs[rule.code].gates_for(language, opts)
                    if known is not None:
                        answered += 1
                        assert known == rule.gates(language, settings), (rule.code, opts)
    assert answered > len(all_rules())  # most rules are answered from the index


def test_triggers_with_targets_known_from_the_registry_are_the_rules_own():
    """The note on rules skipped for want of targets looks for what they would look for with
    a target: from the registry while none of the tables those triggers read is set, else
    from the rule (a project's own levers add trigger words)."""
    from dataclasses import replace

    from gpulint.hardware import table
    from gpulint.settings import Settings

    lever = {"name": "My kernel", "fact": "Slower here.", "calls": ["my_fused_kernel"]}
    refs = {ref.code: ref for ref in registry.registry().rules}
    known = 0
    for rule in all_rules():
        ref = refs[rule.code]
        if not ref.needs_targets or ref.static_triggers:
            continue
        for options in ({}, {"cuda": {"check-macros": ["CHECK"]}}, {"levers": [lever]}):
            settings = replace(Settings(options=options), targets=(table().target("sm_90"),))
            answer = ref.triggers_with_targets(options)
            if answer is not None:
                known += 1
                assert answer == rule.trigger_bytes(settings), (rule.code, options)
        assert ref.triggers_with_targets({"levers": [lever]}) is None, rule.code
        if rule.code == "GPU901":  # (the case the fallback is for: the lever's own call)
            with_lever = Settings(targets=(table().target("sm_90"),), options={"levers": [lever]})
            assert b"my_fused_kernel" in rule.trigger_bytes(with_lever)
    assert known >= 2  # GPU901's, with and without an unrelated table set


def test_one_file_no_rule_wants_is_answered_without_a_worker(project):
    """pre-commit and editors check one file per call: when no rule passes its gates, nothing
    is parsed, and no worker process is started (nor its machinery imported) to not parse it."""
    (project / "bad.py").write_bytes(b"# -*- coding: ascii -*-\nx = '\xe9'\n")
    code, out, modules, _ = _check(project, "--no-cache", "plain.py")
    assert code == 0
    assert "multiprocessing.connection" not in modules
    assert _heavy(modules) == []
    # the same answers as a worker gives: an undecodable file is still reported
    code, out, modules, _ = _check(project, "--no-cache", "bad.py")
    assert code == 1 and "GPU000" in out and "multiprocessing.connection" not in modules
    code, out, modules, _ = _check(project, "--no-cache", "amp.py")
    assert code == 1 and "GPU201" in out and "multiprocessing.connection" in modules


def test_the_registry_picks_the_front_end_the_front_ends_claim():
    from gpulint.frontends import by_extension

    table = by_extension()
    names = ["a.py", "A.PY", "x.pyi", "levers.toml", "my-levers.toml", "pyproject.toml"]
    names += ["foo.toml", ".env", "x.env", ".env.local", "k.cu", "k.CUH", "README.md", "r.rst"]
    names += ["s.sh", "c.yaml", "d.yml", "noext", "x.", "x.tar.gz", "a.h", "levers.toml.bak"]
    for name in names:
        longest = next(
            (table[e] for e in sorted(table, key=len, reverse=True) if name.lower().endswith(e)),
            None,
        )
        ref = registry.registry().frontend_for(name)
        assert (ref.load() if ref else None) is longest, name


def test_a_warm_run_does_not_reread_callees_whose_stamp_is_unchanged(tmp_path, monkeypatch):
    """A cached result that used another file's function summary is served while that file is
    unchanged: decided from the callee's own cache stamp, as for the file itself, without
    reading it; an edited callee (a new stamp) is read, and its callers linted again."""
    import os

    from gpulint.cli import main
    from gpulint.engine import Linter

    monkeypatch.chdir(tmp_path)
    from tests.test_project_index import METRICS, TRAIN, UTILS

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "utils.py").write_text(textwrap.dedent(UTILS))
    (tmp_path / "pkg" / "metrics.py").write_text(textwrap.dedent(METRICS))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    old = 1_600_000_000  # stamped only when older than the run's start by a margin
    for path in tmp_path.rglob("*.py"):
        os.utime(path, (old, old))
    # (with targets: the note on rules skipped for want of them reads files of its own)
    args = ["check", "--format", "json", "--exit-zero", "--targets", "H100"]
    args += ["--cache-dir", str(tmp_path / "c"), "."]
    reads: list[str] = []
    real_read = Linter.read

    def counting(self, path):
        reads.append(Path(path).name)
        return real_read(self, path)

    monkeypatch.setattr(Linter, "read", counting)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(args)
    cold = json.loads(out.getvalue())["findings"]
    assert any(f["path"] == "train.py" and f["code"] == "GPU101" for f in cold)
    reads.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(args)
    assert json.loads(out.getvalue())["findings"] == cold
    assert reads == []  # not train.py, nor the modules its findings depend on
    summarize = "def summarize(metrics):\n    return {k: v.item() for k, v in metrics.items()}"
    edited = textwrap.dedent(METRICS).replace(
        summarize, "def summarize(metrics):\n    return metrics"
    )
    assert edited != textwrap.dedent(METRICS)
    (tmp_path / "pkg" / "metrics.py").write_text(edited)
    os.utime(tmp_path / "pkg" / "metrics.py", (old + 5, old + 5))
    reads.clear()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(args)
    warm = json.loads(out.getvalue())["findings"]
    assert "metrics.py" in reads
    assert not any(f["path"] == "train.py" and f["code"] == "GPU101" for f in warm)
