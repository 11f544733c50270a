"""No input breaks a run, no fix breaks a file, nothing runs that should not.

Fuzzing is bounded for CI: hypothesmith programs and mutated copies (truncations, byte flips,
inserted NULs) of every fixture in every language. Every input yields findings or a GPU000
diagnostic, never a traceback and never an internal error (GPU001: a rule or a front-end that
raised, which the run survives but the suite must not).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpulint.cli import main
from gpulint.diagnostics import Finding
from gpulint.engine import Linter
from gpulint.fixes import apply_edits, fix_file, still_parses
from gpulint.parallel import _work as _REAL_WORK
from gpulint.parallel import lint_one
from gpulint.registry import frontend_for
from gpulint.testing import assert_no_internal_error, example_config, fixture_targets

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted(p for p in (ROOT / "fixtures").rglob("*") if p.is_file() and frontend_for(p.name))


def lint_bytes(data: bytes, name: str, targets=("sm_121", "sm_90")) -> list[Finding]:
    linter = Linter(example_config(targets, root=ROOT))
    findings, _ = linter.lint_bytes(name, data)
    for f in findings:
        assert isinstance(f, Finding)
        assert f.line >= 1 and f.col >= 1
    return assert_no_internal_error(findings, name)


# -- fuzzing ---------------------------------------------------------------------------------
def _mutations(data: bytes, rng: random.Random) -> list[bytes]:
    out = []
    for _ in range(3):
        out.append(data[: rng.randrange(len(data) + 1)])  # truncation
    flipped = bytearray(data)
    for _ in range(max(1, len(data) // 200)):
        if flipped:
            i = rng.randrange(len(flipped))
            flipped[i] ^= 1 << rng.randrange(8)
    out.append(bytes(flipped))
    i = rng.randrange(len(data) + 1)
    out.append(data[:i] + b"\x00" + data[i:])  # an inserted NUL
    i = rng.randrange(len(data) + 1)
    out.append(data[:i] + bytes([0xFF, 0xFE]) + data[i:])  # invalid UTF-8
    lines = data.splitlines(keepends=True)
    rng.shuffle(lines)
    out.append(b"".join(lines))  # lines out of order
    return out


MUTATION_CASES = [(p, i) for p in FIXTURES for i in range(7)]


@pytest.mark.parametrize(
    "path", FIXTURES, ids=lambda p: p.relative_to(ROOT / "fixtures").as_posix()
)
def test_mutated_fixtures_never_crash(path: Path):
    rng = random.Random(path.name)
    data = path.read_bytes()
    for mutated in _mutations(data, rng):
        lint_bytes(mutated, path.name)


# hypothesmith compiles what it generates; CPython warns about some valid programs ("'str'
# object is not callable"), which is noise here.
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_generated_python_programs_never_crash(data):
    import hypothesmith

    source = data.draw(hypothesmith.from_grammar())
    header = "import torch\nfrom torch.utils.data import DataLoader\n"
    lint_bytes((header + source).encode("utf-8", "surrogatepass"), "gen.py")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.binary(max_size=2000),
    st.sampled_from(["x.py", "k.cu", "a.cpp", "README.md", "run.sh", "c.yaml", ".env"]),
)
def test_random_bytes_never_crash(blob, name):
    # Seed the blob with the triggers so that the parsers, not only the prefilter, see it.
    lint_bytes(b"torch cuda triton <<< __global__ DataLoader NCCL_DEBUG 2x faster\n" + blob, name)


# -- hostile files ---------------------------------------------------------------------------
HOSTILE = {
    "syntax_error.py": b"import torch\ndef f(:\n    loss.backward()\n",
    "invalid_utf8.py": b"import torch\nx = '\xff\xfe\xfd'\n",
    "utf16_bom.py": "import torch\nscaler = torch.cuda.amp.GradScaler()\n".encode("utf-16"),
    "crlf.py": b"import torch\r\n\r\nscaler = torch.cuda.amp.GradScaler()\r\n",
    "lone_cr.py": b"import torch\r\rscaler = torch.cuda.amp.GradScaler()\r",
    "tabs_formfeed.py": b"import torch\n\x0c\nif True:\n\tscaler = torch.cuda.amp.GradScaler()\n",
    "empty.py": b"",
    "only_bom.py": b"\xef\xbb\xbf",
    "binary.py": bytes(range(256)) * 40,
    "one_mb_line.py": b"import torch\nx = [" + b"1," * 500_000 + b"]\n",
    "deep_parens.py": b"import torch\nx = " + b"(" * 1000 + b"1" + b")" * 1000 + b"\n",
    "deep_binop.py": b"import torch\nloss = x" + b" + x" * 50_000 + b"\nfloat(loss)\n",
    "deep_attr.py": b"import torch\ny = torch" + b".a" * 20_000 + b".cuda()\n",
    "deep_calls.cu": b"__global__ void k() {}\nint f() { return "
    + b"g(" * 1000
    + b"1"
    + b")" * 1000
    + b"; }\n",
    "nested.md": b"# claims\n" + b"> " * 2000 + b"3x faster\n",
    "ten_mb.py": b"import torch\n"
    + b"x = torch.zeros(1).cuda()  # padding padding padding\n" * 200_000,
}


@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "ten_mb.py" else n for n in sorted(HOSTILE)],
)
def test_hostile_file_gives_findings_or_gpu000(name):
    start = time.perf_counter()
    findings = lint_bytes(HOSTILE[name], name)
    assert time.perf_counter() - start < 120
    if name in ("syntax_error.py", "invalid_utf8.py", "binary.py"):
        assert [f.code for f in findings] == ["GPU000"], findings


def test_line_endings_keep_positions():
    for name in ("crlf.py", "lone_cr.py", "utf16_bom.py"):
        findings = [f for f in lint_bytes(HOSTILE[name], name) if f.code == "GPU201"]
        assert [(f.line, f.col) for f in findings] == [
            (3, 10) if name != "utf16_bom.py" else (2, 10)
        ], name


def test_columns_count_code_points():
    text = "import torch\nnote = 'é✓🚀'; scaler = torch.cuda.amp.GradScaler()\n"
    (finding,) = [f for f in lint_bytes(text.encode(), "u.py") if f.code == "GPU201"]
    assert finding.col == text.splitlines()[1].index("torch") + 1


@pytest.mark.slow
def test_hostile_tree_run_goes_on(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name, data in HOSTILE.items():
        (tmp_path / name).write_bytes(data)
    (tmp_path / "name with spaces é.py").write_text(
        "import torch\ns = torch.cuda.amp.GradScaler()\n"
    )
    (tmp_path / "loop").mkdir()
    (tmp_path / "loop" / "self").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling.py").symlink_to(tmp_path / "missing.py")
    unreadable = tmp_path / "unreadable.py"
    unreadable.write_text("import torch\n")
    real_open = os.open

    def os_open(path, flags, *args, **kwargs):
        name = os.path.basename(path)
        if name == "unreadable.py":  # the tests may run as root, where chmod 000 still reads
            raise PermissionError(13, "Permission denied")
        if name == "vanishing.py":
            os.unlink(path)
            raise FileNotFoundError(2, "No such file or directory")
        return real_open(path, flags, *args, **kwargs)

    (tmp_path / "vanishing.py").write_text("import torch\n")
    monkeypatch.setattr(os, "open", os_open)
    code = main(["check", "--no-cache", "--jobs", "1", "--format", "json", "."])
    captured = capsys.readouterr()
    assert captured.out, captured.err
    out = json.loads(captured.out)
    by_path: dict[str, list] = {}
    for f in out["findings"]:
        by_path.setdefault(f["path"], []).append((f["code"], f["message"]))
    assert code == 1
    assert by_path["name with spaces é.py"][0][0] == "GPU201"
    assert "Permission denied" in by_path["unreadable.py"][0][1]
    assert by_path["vanishing.py"][0][0] == "GPU000"
    assert by_path["dangling.py"][0][0] == "GPU000"
    assert by_path["binary.py"] == [("GPU000", by_path["binary.py"][0][1])]


def test_per_file_time_budget(tmp_path, monkeypatch):
    slow = tmp_path / "slow.py"
    slow.write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
    linter = Linter(example_config(root=tmp_path))

    def hang(*args, **kwargs):
        time.sleep(30)

    monkeypatch.setattr(linter, "lint_bytes", hang)
    start = time.perf_counter()
    result = lint_one(linter, slow, budget=1)
    assert time.perf_counter() - start < 10
    assert [f.code for f in result.findings] == ["GPU000"]
    assert "over 1 s" in result.findings[0].message


def _crash_on_m3(path):
    if path.name == "m3.py":
        os._exit(1)  # a segfault in a parser looks like this to the pool
    return _REAL_WORK(path)


def test_a_worker_crash_loses_nothing(tmp_path, monkeypatch):
    from gpulint import parallel

    files = []
    for i in range(12):
        p = tmp_path / f"m{i}.py"
        p.write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
        files.append(p)
    linter = Linter(example_config(root=tmp_path))
    monkeypatch.setattr(parallel, "_work", _crash_on_m3)
    results = parallel.lint_many(linter, files, jobs=2)
    assert len(results) == 12
    codes = {Path(r.path).name: [f.code for f in r.findings] for r in results}
    assert codes["m3.py"] == ["GPU000"]
    assert all(codes[f"m{i}.py"] == ["GPU201"] for i in range(12) if i != 3)


# -- autofix safety --------------------------------------------------------------------------
def _fixable_cases():
    for path in FIXTURES:
        if path.suffix == ".py":
            yield path
    yield from (ROOT / "examples").rglob("*.py")


@pytest.mark.parametrize("path", list(_fixable_cases()), ids=lambda p: p.name)
def test_fixes_parse_are_idempotent_and_touch_only_their_spans(path: Path):
    text = path.read_text(encoding="utf-8")
    linter = Linter(example_config(fixture_targets(text), root=ROOT))
    findings, _ = linter.lint_bytes(path.name, text.encode())
    edits = [e for f in findings if f.fix for e in f.fix.edits]
    if not edits:
        return
    fixed, _ = apply_edits(text, edits)
    assert still_parses(fixed, path.name) is None
    # Fixing twice equals fixing once.
    again, _ = linter.lint_bytes(path.name, fixed.encode())
    more = [e for f in again if f.fix for e in f.fix.edits]
    refixed, _ = apply_edits(fixed, more)
    assert refixed == fixed, f"second fix changed {path.name}"
    # Outside the edited spans, every byte is kept.
    spans = sorted((e.start, e.end) for e in edits)
    cursor, kept = 0, []
    for start, end in spans:
        kept.append(text[cursor:start])
        cursor = max(cursor, end)
    kept.append(text[cursor:])
    position = 0
    for piece in kept:
        found = fixed.find(piece, position)
        assert found >= 0, "text outside the fix changed"
        position = found + len(piece)


def test_fix_refuses_a_file_changed_since_it_was_checked(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("import torch\ns = torch.cuda.amp.GradScaler()\n")
    linter = Linter(example_config(root=tmp_path))
    result = linter.lint_path(path)
    path.write_text("import torch\ns = torch.cuda.amp.GradScaler()  # edited meanwhile\n")
    outcome = fix_file(path, result.findings, result.digest, write=True)
    assert outcome.error and "changed on disk" in outcome.error
    assert "edited meanwhile" in path.read_text()


def test_fix_that_would_not_parse_is_not_written(tmp_path):
    from gpulint.diagnostics import Edit, Fix, Severity

    path = tmp_path / "m.py"
    path.write_text("x = 1\n")
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    broken = Finding(
        "m.py", 1, 1, "GPU201", "x", Severity.WARNING, fix=Fix("break", (Edit(0, 1, "def ("),))
    )
    outcome = fix_file(path, [broken], digest, write=True)
    assert outcome.error and "not applied" in outcome.error
    assert path.read_text() == "x = 1\n"


# -- never executes analysed code -------------------------------------------------------------
def test_never_imports_or_executes_analysed_code(tmp_path):
    marker = tmp_path / "EXECUTED"
    payload = f"open({str(marker)!r}, 'w').write('x')\n"
    (tmp_path / "proj").mkdir()
    proj = tmp_path / "proj"
    (proj / "evil.py").write_text("import torch\n" + payload + "x = torch.cuda.amp.GradScaler()\n")
    (proj / "conftest.py").write_text(payload)
    (proj / "setup.py").write_text(payload)
    (proj / "__init__.py").write_text(payload)
    (proj / "sitecustomize.py").write_text(payload)
    (proj / "kernel.cu").write_text(
        f'// {payload}\n__global__ void k() {{ system("touch {marker}"); }}\n'
    )
    (proj / "run.sh").write_text(f"#!/bin/sh\ntouch {marker}\nexport CUDA_LAUNCH_BLOCKING=1\n")
    (proj / "cfg.yaml").write_text(
        f"cmd: !!python/object/apply:os.system ['touch {marker}']\nenv:\n  NCCL_DEBUG: INFO\n"
    )
    (proj / "README.md").write_text(f"<script>touch {marker}</script>\n\nIt is 3x faster.\n")
    (proj / "pyproject.toml").write_text('[tool.gpulint]\ntargets = ["sm_121"]\n')
    for fmt in ("text", "json", "sarif", "github"):
        for extra in ([], ["--fix"], ["--diff"]):
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gpulint",
                    "check",
                    "--no-cache",
                    "--format",
                    fmt,
                    *extra,
                    str(proj),
                ],
                cwd=proj,
                capture_output=True,
                env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            )
    assert not marker.exists()
