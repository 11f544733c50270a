"""`gpulint trace` on any command line (`python -c`, `python -m`, console scripts, `torchrun` on
one host), the honest overhead of a trimmed recording, the report of a run without a GPU, and the
step-level verdict on synthetic summaries. The end-to-end runs need torch (CPU is enough: the
ranks of a torchrun job talk through gloo); without it they skip."""

from __future__ import annotations

import json
import os
import pathlib
import stat
import subprocess
import sys

import pytest

from gpulint.runtime.trace_cli import parse_program, read_recording
from gpulint.runtime.trace_join import (
    CONFIRMED,
    NO_GPU,
    NOT_EXERCISED,
    NOT_MEASURED,
    NOT_OBSERVED,
    RUNTIME_ONLY,
    Row,
    join,
)
from gpulint.runtime.trace_map import Analysis, Observation, merge
from gpulint.runtime.trace_report import overhead, render_table, step_ms
from gpulint.runtime.trace_verdict import (
    COMM_BOUND,
    GPU_BOUND,
    HOST_BOUND,
    INPUT_BOUND,
    LAUNCH_BOUND,
    SYNC_BOUND,
    verdict,
)
from gpulint.runtime.trace_verdict import (
    NOT_MEASURED as VERDICT_NOT_MEASURED,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "trace"


# ---- the command line ----------------------------------------------------------------------------


def test_python_c_and_interpreter_options():
    target, _ = parse_program(["--", "python", "-u", "-W", "error", "-c", "print(1)", "a"], None)
    assert target == {
        "kind": "code",
        "name": "-c",
        "code": "print(1)",
        "args": ["a"],
        "python_opts": ["-u", "-W", "error"],
    }
    assert "needs the program" in parse_program(["python", "-c"], None)


def test_console_script_runs_its_file_with_its_interpreter(tmp_path, monkeypatch):
    script = tmp_path / "mytrain"
    script.write_text(f"#!{sys.executable}\nimport sys\nprint(sys.argv)\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    shell = tmp_path / "tool"
    shell.write_text("#!/bin/sh\necho hi\n")
    shell.chmod(shell.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path) + os.pathsep + os.environ.get("PATH", ""))
    target, interp = parse_program(["mytrain", "--lr", "1"], None)
    assert target["kind"] == "path" and target["name"] == str(script)
    assert target["args"] == ["--lr", "1"] and interp == sys.executable
    assert "no Python script" in parse_program(["tool"], None)
    assert "no such command" in parse_program(["surely-not-a-command-xyz"], None)


def test_torchrun_forms(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    target, _ = parse_program(
        ["torchrun", "--standalone", "--nproc-per-node", "2", str(script), "--lr", "3"], None
    )
    assert target["launcher"] == ["--standalone", "--nproc-per-node", "2"]
    assert (
        target["nproc"] == 2 and target["name"] == str(script) and target["args"] == ["--lr", "3"]
    )
    target, _ = parse_program(
        ["python", "-m", "torch.distributed.run", "--nproc_per_node=4", "-m", "pkg.train", "x"],
        None,
    )
    assert target["kind"] == "module" and target["name"] == "pkg.train"
    assert target["launcher"] == ["--nproc_per_node=4"] and target["nproc"] == 4
    assert "no Python program" in parse_program(["torchrun", "--no-python", "ls"], None)
    assert "name the program" in parse_program(["torchrun", "--standalone"], None)


# ---- end to end, on the CPU ------------------------------------------------------------------------

PROGRAM = """\
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(16, 16).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(40):
    loss = model(torch.randn(8, 16, device=device)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(step, loss.item())
"""

DDP = """\
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
model = DDP(torch.nn.Linear(16, 16))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(40):
    loss = model(torch.randn(8, 16)).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
dist.destroy_process_group()
"""


def _trace(cwd, *words, timeout=240, opts=()):
    pytest.importorskip("torch")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU path, also on a machine with a GPU
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulint",
            "trace",
            "--force",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--json",
            *opts,
            "--",
            *words,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def test_trace_python_c_checks_and_joins_the_code(tmp_path):
    record = _trace(tmp_path, "python", "-c", PROGRAM)
    assert record["summary"]["steps"] == 3
    assert record["config"]["program"][0] == "-c"
    # the -c text is checked as the file "-c": its `.item()` in the loop is a GPU101 finding,
    # which a run without a GPU cannot confirm or refute
    (row,) = [r for r in record["lines"] if r["code"] == "GPU101"]
    assert row["path"] == "-c" and row["line"] == 10
    assert row["status"] == NOT_MEASURED and row["evidence"] == NO_GPU
    assert record["verdict"]["bound"] == VERDICT_NOT_MEASURED
    assert not any("gpu-idle" in r["kinds"] for r in record["lines"])


def test_trace_python_m_runs_the_package(tmp_path):
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(PROGRAM)
    record = _trace(tmp_path, "python", "-m", "mypkg.train")
    assert record["summary"]["steps"] == 3
    assert record["config"]["program"] == ["-m", "mypkg.train"]
    (row,) = [r for r in record["lines"] if r["code"] == "GPU101"]
    assert row["path"] == "mypkg/train.py" and row["status"] == NOT_MEASURED


@pytest.mark.parametrize("nproc", [1, 2])
def test_torchrun_ranks_are_recorded_and_joined(tmp_path, nproc):
    (tmp_path / "ddp.py").write_text(DDP)
    record = _trace(
        tmp_path, "torchrun", "--standalone", "--nproc-per-node", str(nproc), "ddp.py", timeout=400
    )
    (run,) = (tmp_path / ".gpulint" / "trace").iterdir()
    assert sorted(p.name for p in run.glob("rank*")) == [f"rank{i}" for i in range(nproc)]
    assert all((run / f"rank{i}" / "trace.json.gz").exists() for i in range(nproc))
    s = record["summary"]
    assert s["steps"] == 3
    if nproc > 1:
        assert s["ranks"] == nproc and len(s["per_rank"]) == nproc
    # DDP all-reduces its gradients through gloo on every step of every rank
    assert s["comm_host_us_per_step"] > 0
    assert record["verdict"]["bound"] == VERDICT_NOT_MEASURED  # no GPU: no GPU verdict
    assert record["verdict"]["fractions"]["communication"] > 0


# ---- honest numbers ---------------------------------------------------------------------------------


def test_overhead_comes_from_the_recorded_window_not_the_configured_steps():
    rec = read_recording(FIXTURES / "train_gpt")
    # the fixture was trimmed to 2 profiler steps; its step clock still holds the 5 recorded
    assert rec["config"]["steps"] == 2 and rec["window"]["steps"] == 5
    untraced = read_recording(FIXTURES / "train_gpt" / "untraced")["window"]
    ov = overhead(rec["window"], untraced)
    assert ov["traced_ms"]["steps"] == 5 and ov["untraced_ms"]["steps"] == 5
    # window_s / configured steps would say +1486%; the window's own steps say about +70%
    assert 30 < ov["pct"] < 120 and 30 < ov["pct_median"] < 120
    assert step_ms(None) is None and overhead(rec["window"], None) is None


def _obs(path, line, kind, **kw):
    o = Observation(path, line, kind)
    for k, v in kw.items():
        setattr(o, k, v)
    return o


def test_a_run_without_a_gpu_says_so_and_judges_nothing_it_cannot_see():
    source = "for x in loader:\n    loss = model(x)\n    loss.backward()\n    print(loss.item())\n"
    a = Analysis(
        3,
        [_obs("t.py", 4, "gpu-idle", count=3, gpu_us=900.0)],
        {("t.py", 2): 3, ("t.py", 4): 3},
        {"steps": 3, "step_us": 1000.0, "gpu_measured": False, "gpu_busy_us_per_step": 0.0},
    )
    findings = [
        {"code": "GPU101", "path": "t.py", "line": 4, "message": "sync"},
        {"code": "GPU202", "path": "t.py", "line": 1, "message": "fp32"},
        {"code": "GPU303", "path": "t.py", "line": 1, "message": "workers"},
    ]
    rows = join(a, findings, lambda p: source, "CPU", untraced_step_us=3000.0)
    status = {r.code: r.status for r in rows}
    assert status["GPU101"] == NOT_MEASURED and status["GPU202"] == NOT_MEASURED
    assert status["GPU303"] == NOT_EXERCISED  # host-side: measurable, and it did not happen
    assert not [r for r in rows if r.status == RUNTIME_ONLY]  # no GPU-idle rows
    record = {
        "summary": a.summary,
        "config": {"program": ["t.py"], "warmup": 1},
        "device": {"name": "CPU"},
        "verdict": verdict(a.summary, rows).as_dict(),
    }
    text = render_table(rows, record)
    assert "verdict: not measured" in text and "no CUDA device" in text
    assert "GPU idle" not in text and "GPU busy" not in text


def test_gpu202_ran_when_its_loop_ran():
    source = "for x in loader:\n    loss = model(x)\n    loss.backward()\n"
    finding = {"code": "GPU202", "path": "t.py", "line": 1, "message": "fp32"}
    # the loop's lines issued torch calls, none of its kernels mapped to a line
    a = Analysis(3, [], {("t.py", 3): 3}, {"steps": 3, "step_us": 1000.0})
    (row,) = join(a, [finding], lambda p: source)
    assert row.status == NOT_OBSERVED
    a = Analysis(3, [], {("other.py", 3): 3}, {"steps": 3, "step_us": 1000.0})
    (row,) = join(a, [finding], lambda p: source)
    assert row.status == NOT_EXERCISED


def test_merged_ranks_average_costs_and_keep_the_slowest_step():
    a = Analysis(2, [_obs("t.py", 4, "sync", count=2, host_us=20.0)], {("t.py", 4): 2}, {})
    a.summary = {"steps": 2, "step_us": 100.0, "gpu_busy_us_per_step": 50.0}
    b = Analysis(2, [_obs("t.py", 4, "sync", count=4, host_us=60.0)], {("t.py", 5): 2}, {})
    b.summary = {"steps": 2, "step_us": 140.0, "gpu_busy_us_per_step": 70.0}
    m = merge([a, b])
    (o,) = m.observations
    assert o.count == 3 and o.host_us == 40.0 and o.detail["ranks"] == 2
    assert m.summary["step_us"] == 140.0 and m.summary["gpu_busy_us_per_step"] == 60.0
    assert m.summary["ranks"] == 2 and set(m.executed) == {("t.py", 4), ("t.py", 5)}


# ---- the step-level verdict ------------------------------------------------------------------------


def _summary(**kw):
    s = {
        "steps": 5,
        "step_us": 10_000.0,
        "gpu_busy_us_per_step": 2_000.0,
        "kernels_per_step": 50,
        "mean_kernel_us": 40.0,
        "gpu_measured": True,
    }
    s.update(kw)
    return s


def _row(code, kinds, cost, status="confirmed"):
    return Row(status, "t.py", 7, code, "m", kinds=kinds, cost_us_per_step=cost)


@pytest.mark.parametrize(
    "summary, untraced, bound, share",
    [
        (_summary(gpu_busy_us_per_step=9_000.0), None, GPU_BOUND, "gpu"),
        (_summary(kernels_per_step=300, mean_kernel_us=4.0), None, LAUNCH_BOUND, "host"),
        (_summary(mean_kernel_us=400.0), None, HOST_BOUND, "host"),
        (_summary(input_idle_us_per_step=6_000.0), None, INPUT_BOUND, "input"),
        (_summary(sync_idle_us_per_step=5_000.0, syncs_per_step=40), None, SYNC_BOUND, "sync"),
        (_summary(comm_host_us_per_step=7_000.0), None, COMM_BOUND, "communication"),
        (
            _summary(gpu_busy_us_per_step=8_000.0, comm_gpu_us_per_step=6_000.0),
            None,
            COMM_BOUND,
            "communication",
        ),
        # traced 10 ms with 2 ms busy looks host-bound; the untraced step (2.2 ms) is GPU-bound
        (_summary(), 2_200.0, GPU_BOUND, "gpu"),
    ],
)
def test_verdict_classes(summary, untraced, bound, share):
    v = verdict(summary, untraced_step_us=untraced)
    assert v.bound == bound
    assert max(v.fractions, key=v.fractions.get) == share
    assert sum(v.fractions.values()) <= 1.0 + 1e-9
    assert v.lever
    assert v.basis == ("untraced step" if untraced else "traced step")


def test_verdict_names_the_findings_that_explain_it():
    rows = [
        _row("GPU101", ["sync"], 300.0),
        _row("GPU101", ["sync"], 0.0, status="not observed"),
        _row(None, ["sync"], 120.0, status="runtime-only"),
        _row("GPU301", ["pageable-h2d"], 50.0),
    ]
    v = verdict(_summary(sync_idle_us_per_step=5_000.0), rows)
    assert v.bound == SYNC_BOUND
    assert v.explained_by == [
        "t.py:7 GPU101 (300 µs per step)",
        "t.py:7 runtime-only sync (120 µs per step)",
    ]
    assert verdict(_summary(gpu_measured=False)).bound == VERDICT_NOT_MEASURED


def test_table_puts_the_verdict_first_and_caps_the_rows():
    rows = [
        Row(
            RUNTIME_ONLY,
            "t.py",
            i,
            None,
            "host-device sync",
            kinds=["sync"],
            cost_us_per_step=100 - i,
        )
        for i in range(1, 13)
    ]
    s = _summary(sync_idle_us_per_step=5_000.0)
    record = {
        "summary": s,
        "config": {"program": ["t.py"], "warmup": 1},
        "device": {"name": "GPU"},
        "verdict": verdict(s, rows).as_dict(),
    }
    lines = render_table(rows, record).splitlines()
    assert lines[1].startswith("verdict: host-sync-bound: sync 50%")
    assert lines[2].startswith("lever: take the syncs out of the step")
    assert sum(1 for ln in lines if ln.startswith("runtime-only")) == 8
    assert any(ln.startswith("... 4 more row(s)") for ln in lines)
    assert (
        sum(
            1
            for ln in render_table(rows, record, limit=0).splitlines()
            if ln.startswith("runtime-only")
        )
        == 12
    )


# ---- sampling, torch.compile, and `check --trace` ---------------------------------------------------


def test_every_k_profiles_one_step_in_k(tmp_path):
    (tmp_path / "train.py").write_text(PROGRAM)
    record = _trace(tmp_path, "python", "train.py", opts=("--every", "4"))
    (run,) = (tmp_path / ".gpulint" / "trace").iterdir()
    assert sorted(p.name for p in run.glob("trace-*.json.gz")) == [
        f"trace-{i}.json.gz" for i in range(3)
    ]
    window = json.loads((run / "window.json").read_text())
    # warm-up 1, then 3 cycles of 4 steps (2-5, 6-9, 10-13), each recorded on its last step
    assert window["steps"] == 12 and window["profiled"] == [5, 9, 13]
    s = record["summary"]
    assert s["steps"] == 3 and s["sampled_steps"] == 3
    assert record["config"]["traced_step_ms"]["steps"] == 12  # the whole window's steps
    (row,) = [r for r in record["lines"] if r["code"] == "GPU101"]
    assert row["status"] == NOT_MEASURED  # seen, and judged as in a full run (no GPU here)


COMPILED = """\
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(8, 8).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.compile(backend="eager")
def loss_of(x):
    y = model(x)
    print("inside the compiled function")
    return y.square().mean()


for i in range(12):
    loss = loss_of(torch.randn(4 + (i > 2), 8, device=device))
    loss.backward()
    opt.step()
    opt.zero_grad()
"""


def test_graph_breaks_and_recompiles_are_tied_to_their_lines(tmp_path):
    (tmp_path / "comp.py").write_text(COMPILED)
    (tmp_path / "pyproject.toml").write_text('[tool.gpulint]\nextend-select = ["GPU510"]\n')
    record = _trace(tmp_path, "python", "comp.py", timeout=400)
    # GPU510 (preview) finds the print() in the compiled function; dynamo's own log confirms it
    # at that statement, also without a GPU (a graph break is the host's doing)
    (gpu510,) = [r for r in record["lines"] if r["code"] == "GPU510"]
    assert gpu510["line"] == 11 and gpu510["status"] == CONFIRMED
    assert "graph break" in gpu510["evidence"] and "print" in gpu510["evidence"]
    rows = {
        (r["kinds"][0], r["line"]): r
        for r in record["lines"]
        if r["path"] == "comp.py" and r["kinds"]
    }
    assert ("graph-break", 11) not in rows or rows[("graph-break", 11)]["code"] == "GPU510"
    # the batch grows at step 4: dynamo recompiles loss_of, at its line, with the failed guard
    recompiles = [r for (kind, _), r in rows.items() if kind == "recompile"]
    assert recompiles and any("size mismatch" in r["message"] for r in recompiles)
    assert all(e["in_tree"] or e["path"] != "comp.py" for e in record["compile"])
    # the tracer's own line mode stays out of a compiled program: no recompile is its doing
    assert not any("torch_function_mode" in e.get("reason", "") for e in record["compile"])


def test_compile_rows_keep_the_tree_and_count_per_place():
    from gpulint.runtime.trace_join import compile_rows

    events = [
        {
            "kind": "graph-break",
            "path": "m.py",
            "line": 9,
            "in_tree": True,
            "reason": "print",
            "step": 1,
        },
        {
            "kind": "graph-break",
            "path": "m.py",
            "line": 9,
            "in_tree": True,
            "reason": "print",
            "step": 4,
        },
        {"kind": "graph-break", "path": "torch/x.py", "line": 3, "in_tree": False, "reason": "r"},
        {
            "kind": "recompile",
            "path": "m.py",
            "line": 5,
            "in_tree": True,
            "reason": "size",
            "function": "f",
        },
        {"kind": "other"},
        "junk",
    ]
    rows = compile_rows(events, "H100")
    assert [(r.kinds, r.path, r.line, r.detail["count"]) for r in rows] == [
        (["graph-break"], "m.py", 9, 2),
        (["recompile"], "m.py", 5, 1),
    ]
    assert rows[0].status == RUNTIME_ONLY and "2 graph break(s)" in rows[0].evidence
    assert rows[1].detail["function"] == "f"


def _check(root, *argv):
    return subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", *argv, "train_gpt.py"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_trace_marks_findings_in_every_format_and_gates_on_confirmed(tmp_path):
    import shutil

    shutil.copy(FIXTURES / "train_gpt" / "train_gpt.py.txt", tmp_path / "train_gpt.py")
    rec = str(FIXTURES / "train_gpt")  # a recording folder: analysed and joined by the check
    out = _check(tmp_path, "--trace", rec, "--format", "json")
    findings = json.loads(out.stdout)["findings"]
    status = {(f["code"], f["line"]): f.get("trace") for f in findings}
    assert status[("GPU101", 74)] == "confirmed" and status[("GPU401", 53)] == "confirmed"
    assert status[("GPU201", 62)] is None  # not measurable: no mark
    sarif = json.loads(_check(tmp_path, "--trace", rec, "--format", "sarif").stdout)
    marks = {
        r["ruleId"]: r.get("properties", {}).get("traceStatus") for r in sarif["runs"][0]["results"]
    }
    assert marks["GPU101"] == "confirmed" and marks["GPU201"] is None
    text = _check(tmp_path, "--trace", rec).stdout
    assert "[measured: traced on NVIDIA H200 over 2 steps: 1 sync(s) per step" in text
    # CI gates on confirmed costs only: with the trace, confirmed findings fail the run
    assert _check(tmp_path, "--trace", rec, "--fail-on", "confirmed").returncode == 1
    assert _check(tmp_path, "--fail-on", "confirmed").returncode == 0  # no trace: none confirmed
    assert _check(tmp_path).returncode == 1  # the default still fails on any finding
    # the record `gpulint trace --json` wrote serves as well as the folder
    record = _check(tmp_path, "--trace", rec, "--format", "json")
    assert record.returncode == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train_gpt.py"]  # nothing written


def test_gpu510_is_judged_by_the_compile_log_of_its_file():
    source = "import torch\n\n@torch.compile\ndef f(x):\n    print(x)\n    return x * 2\n"
    finding = {"code": "GPU510", "path": "m.py", "line": 5, "message": "print"}
    a = Analysis(3, [], {}, {"steps": 3, "step_us": 100.0, "gpu_measured": False})
    brk = {"kind": "graph-break", "path": "m.py", "line": 5, "in_tree": True, "reason": "print"}
    elsewhere = dict(brk, line=6)
    for events, status in (
        ([brk], CONFIRMED),
        ([elsewhere], NOT_OBSERVED),  # dynamo compiled f and broke elsewhere, not at print
        ([dict(brk, path="other.py")], NOT_EXERCISED),
        ([], NOT_EXERCISED),
    ):
        (row,) = join(
            a, [finding], lambda p: source, "CPU", compile_events=[dict(e) for e in events]
        )
        assert row.status == status, events
