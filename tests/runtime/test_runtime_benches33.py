"""The four benches of issue 33 (graph-capture, launch-blocking, device-per-rank, int32-offset)
on a machine with no GPU: how each builds its record from what it measured, how it refuses,
and how its parts talk to their child processes. The GPU runs are in test_runtime_gpu."""

from __future__ import annotations

import json
import sys
import textwrap
import types

import pytest

from gpulint.runtime import evidence, harness
from gpulint.runtime.__main__ import main
from gpulint.runtime.benches import NAMES, _child, load
from gpulint.runtime.benches import device_per_rank as dpr
from gpulint.runtime.benches import graph_capture as gc
from gpulint.runtime.benches import int32_offset as i32
from gpulint.runtime.benches import launch_blocking as lb

NEW = ("graph-capture", "launch-blocking", "device-per-rank", "int32-offset")


def _record(name: str, result: harness.BenchResult) -> dict:
    return harness.make_record(
        name, result, device={"name": "NVIDIA H100 80GB HBM3"}, vers={"gpulint": "0"},
        command=f"gpulint bench {name}", argv=["gpulint", "bench", name],
    )  # fmt: skip


def _cpu_ctx(options: dict | None = None) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        cuda=False, runs=3, options=options or {}, say=lambda m: None, device=None
    )


def _no_torch() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    pytest.skip("torch is installed here: the child would not fail for want of it")


# ---------------------------------------------------------------------------------- wiring


def test_the_four_are_benches_rules_cite_and_bench_all_runs():
    from gpulint.rule import rule_by_code

    for name in NEW:
        assert name in NAMES and name in evidence.BENCHES
        assert load(name).run  # the module imports without torch
    cited = {rule_by_code(c).bench for c in ("GPU406", "GPU506", "GPU705", "GPU903")}
    assert cited == set(NEW)


@pytest.mark.parametrize("name", NEW)
def test_one_run_is_refused_as_a_usage_error(name, capsys):
    assert main(["bench", name, "--runs", "2"]) == 2
    assert "at least 3" in capsys.readouterr().err


@pytest.mark.parametrize("name", NEW)
def test_without_torch_each_is_refused(name, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", name, "--no-record"]) == 1
    assert "refused" in capsys.readouterr().err


@pytest.mark.parametrize("name", NEW)
def test_without_a_gpu_each_is_refused(name, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["bench", name, "--no-record"]) == 1
    assert "no CUDA device" in capsys.readouterr().err


@pytest.mark.parametrize("module", [gc, dpr])
def test_run_without_cuda_fails_its_variants_with_the_reason(module):
    rec = _record("x", module.run(_cpu_ctx()))
    assert not rec["ok"]
    assert all(v["status"] == "failed" and "refused" in v["reason"] for v in rec["variants"])


def test_last_json_takes_the_last_object_line():
    out = 'noise\n{"a": 1}\n[1, 2]\n{"b": 2}\n{broken\nmore noise\n'
    assert _child.last_json(out) == {"b": 2}
    assert _child.last_json("no json here") is None


def test_child_env_puts_src_first_and_unsets(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = _child.child_env({"X_SET": "y"}, unset=("CUDA_LAUNCH_BLOCKING",))
    assert env["PYTHONPATH"].split(":")[0] == _child.SRC and "/elsewhere" in env["PYTHONPATH"]
    assert "CUDA_LAUNCH_BLOCKING" not in env and env["X_SET"] == "y"


# ------------------------------------------------------------------------ launch-blocking


def _ok_child(us: float, env: str | None) -> _child.ChildResult:
    return _child.ChildResult({"us_per_step": us, "env": env, "loss_finite": True}, 0, "")


def test_launch_blocking_env_sets_or_removes_the_variable(monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")  # left set in the parent, as the rule says
    assert lb.env_for("blocking")["CUDA_LAUNCH_BLOCKING"] == "1"
    assert "CUDA_LAUNCH_BLOCKING" not in lb.env_for("default")


def test_launch_blocking_record_from_child_results():
    outcomes = {
        "blocking": [_ok_child(u, "1") for u in (2100.0, 2150.0, 2080.0)],
        "default": [_ok_child(u, None) for u in (1400.0, 1420.0, 1390.0)],
    }
    result = lb.to_result(dict(lb.CONFIG), outcomes)
    rec = _record("launch-blocking", result)
    assert evidence.validate_record(rec) == [] and rec["ok"], rec.get("problems")
    blocking = evidence.variant(rec, "blocking")
    assert blocking["median"] == 2100.0 and blocking["extra"]["env_seen"] == ["1"]
    note = evidence.evidence_note([rec], "launch-blocking")
    assert "CUDA_LAUNCH_BLOCKING=1" in note and "alternating" in note


def test_launch_blocking_check_fails_when_a_child_saw_the_wrong_value():
    outcomes = {
        "blocking": [_ok_child(1400.0, None)] * 3,  # the variable never reached the child
        "default": [_ok_child(1400.0, None)] * 3,
    }
    rec = _record("launch-blocking", lb.to_result(dict(lb.CONFIG), outcomes))
    assert not rec["ok"]
    assert rec["checks"]["blocking_saw_CUDA_LAUNCH_BLOCKING=1"]["seen"] == ["None"]


def test_launch_blocking_a_failed_child_fails_its_variant():
    outcomes = {
        "blocking": [_child.ChildResult(None, 1, "child exited 1: boom")],
        "default": [_ok_child(1400.0, None)] * 3,
    }
    rec = _record("launch-blocking", lb.to_result(dict(lb.CONFIG), outcomes))
    assert not rec["ok"] and "boom" in evidence.variant(rec, "blocking")["reason"]


def test_launch_blocking_child_args_round_trip():
    args = lb.child_args(dict(lb.CONFIG), 1)
    assert args[0] == "--child" and json.loads(args[args.index("--config") + 1]) == lb.CONFIG
    assert args[args.index("--device-index") + 1] == "1"


def test_launch_blocking_real_child_reports_why_it_cannot_run():
    _no_torch()
    child = _child.run_child("launch_blocking", lb.child_args(dict(lb.CONFIG), 0), timeout=60)
    assert child.result is not None and "torch" in child.result["error"]


# -------------------------------------------------------------------------- graph-capture


def _gc_raw(**over) -> dict:
    raw = {
        "captured_scale": 1.2,
        "frozen_replays_identical": True,
        "eager_draws_differ": True,
        "static_rel_errs": [0.0, 1e-7, 0.0],
        "static_replays_differ": True,
    }
    raw.update(over)
    return raw


GC_SAMPLES = {
    "eager": [300.0, 310.0, 305.0],
    "graph_static": [120.0, 121.0, 119.0],
    "graph_frozen": [118.0, 119.0, 117.0],
}


def test_graph_capture_record_from_measurements():
    probe = {"pageable": {"captured": False, "error": "RuntimeError: operation not permitted"}}
    rec = _record("graph-capture", gc.to_result(dict(gc.CONFIG), GC_SAMPLES, _gc_raw(), probe))
    assert evidence.validate_record(rec) == [] and rec["ok"], rec.get("problems")
    assert rec["config"]["host_copy_in_capture"] == probe
    assert rec["headline"]["context"] == "graph_frozen"
    note = evidence.evidence_note([rec], "graph-capture")
    assert "slower per step" in note and "replay with the host value frozen at capture" in note


@pytest.mark.parametrize(
    "over, check",
    [
        ({"frozen_replays_identical": False}, "frozen_replays_identical"),
        ({"static_rel_errs": [0.0, 0.5, 0.0]}, "static_graph_matches_eager"),
        ({"static_rel_errs": []}, "static_graph_matches_eager"),
        ({"static_replays_differ": False}, "static_replays_follow_inputs"),
    ],
)
def test_graph_capture_wrong_semantics_fail_the_record(over, check):
    rec = _record("graph-capture", gc.to_result(dict(gc.CONFIG), GC_SAMPLES, _gc_raw(**over), {}))
    assert not rec["ok"] and f"check failed: {check}" in rec["problems"]


def test_graph_capture_probe_child_reports_why_it_cannot_run():
    _no_torch()
    child = _child.run_child("graph_capture", ["--host-copy-probe"], timeout=60)
    assert child.result is not None and "torch" in child.result["error"]


# ----------------------------------------------------------------------- device-per-rank


def _rank(device: int, ms: list[float], used_mib: int, reserved_mib: int = 600) -> dict:
    return {"device": device, "ms": ms, "used_bytes": used_mib * 2**20,
            "total_bytes": 80 * 2**30, "max_reserved": reserved_mib * 2**20}  # fmt: skip


def _one_gpu_raw() -> dict:
    return {
        "alone_gpu0": {
            "ranks": [_rank(0, [4.0, 4.1, 4.0], 1500)],
            "used_before": {"0": 500 * 2**20},
        },
        "shared_gpu0": {
            "ranks": [_rank(0, [7.9, 8.2, 8.0], 2500), _rank(0, [8.1, 8.0, 8.3], 2510)],
            "used_before": {"0": 500 * 2**20},
        },
    }


def test_device_per_rank_one_gpu_measures_the_sharing_cost_only():
    rec = _record("device-per-rank", dpr.to_result(dict(dpr.CONFIG), _one_gpu_raw(), 1))
    assert evidence.validate_record(rec) == [] and rec["ok"], rec.get("problems")
    assert rec["config"]["gpu_count"] == 1
    assert "only the sharing cost is measured" in rec["config"]["note"]
    own = evidence.variant(rec, "own_gpu")
    assert own["status"] == "unavailable" and "needs 2 GPUs" in own["reason"]
    shared = evidence.variant(rec, "shared_gpu0")
    assert shared["samples"] == [8.1, 8.2, 8.3]  # the slower rank of each run
    assert shared["extra"]["per_rank_ms"] == [[7.9, 8.2, 8.0], [8.1, 8.0, 8.3]]
    assert shared["extra"]["mib_taken_per_gpu"] == {"cuda:0": 2010.0}
    assert rec["config"]["memory"]["alone_gpu0"]["mib_taken_per_gpu"] == {"cuda:0": 1000.0}
    assert rec["headline"]["improved"] == "alone_gpu0"
    assert "a second rank on the same GPU" in evidence.evidence_note([rec], "device-per-rank")


def test_device_per_rank_two_gpus_compares_with_the_right_placement():
    raw = _one_gpu_raw()
    raw["own_gpu"] = {
        "ranks": [_rank(0, [4.0, 4.0, 4.1], 1500), _rank(1, [4.1, 4.0, 4.0], 1000)],
        "used_before": {"0": 500 * 2**20, "1": 0},
    }
    rec = _record("device-per-rank", dpr.to_result(dict(dpr.CONFIG), raw, 2))
    assert rec["ok"] and rec["headline"]["improved"] == "own_gpu"
    own = evidence.variant(rec, "own_gpu")
    assert own["extra"]["mib_taken_per_gpu"] == {"cuda:0": 1000.0, "cuda:1": 1000.0}
    assert "2 GPUs visible" in rec["config"]["note"]


def test_device_per_rank_a_failed_launch_fails_the_record():
    raw = _one_gpu_raw()
    raw["shared_gpu0"] = {"error": "rank 1: CUDA out of memory"}
    rec = _record("device-per-rank", dpr.to_result(dict(dpr.CONFIG), raw, 1))
    assert not rec["ok"] and "variant failed: shared_gpu0" in rec["problems"]


FAKE_RANK = """
import json, sys
rank = int(sys.argv[sys.argv.index("--rank") + 1])
runs = int(sys.argv[sys.argv.index("--runs") + 1])
if rank == int({fail}):
    print(json.dumps({{"error": "rank says no"}}), flush=True)
    sys.exit(1)
got = []
for n in range(runs + 1):
    print(f"READY {{n}}", flush=True)
    got.append(sys.stdin.readline().strip())
print(json.dumps({{"device": 0, "ms": [1.0 + rank] * runs, "used_bytes": 1, "total_bytes": 2,
                  "max_reserved": 1, "got": got}}), flush=True)
"""


@pytest.mark.parametrize("fail", [-1, 1])
def test_device_per_rank_barrier_releases_every_rank_each_run(tmp_path, monkeypatch, fail):
    script = tmp_path / "rank.py"
    script.write_text(textwrap.dedent(FAKE_RANK.format(fail=fail)))
    monkeypatch.setattr(
        dpr._child, "command", lambda module, args: [sys.executable, str(script), *args]
    )
    out = dpr.launch_ranks([0, 0], dict(dpr.CONFIG), 3, timeout=60)
    if fail == 1:
        assert out == {"error": "rank 1: rank says no"}
        return
    ranks = out["ranks"]
    assert [r["ms"] for r in ranks] == [[1.0] * 3, [2.0] * 3]
    assert all(r["got"] == ["go"] * 4 for r in ranks)  # warm-up barrier + one per run


def test_device_per_rank_real_rank_reports_why_it_cannot_run():
    _no_torch()
    out = dpr.launch_ranks([0], dict(dpr.CONFIG), 3, timeout=60)
    assert "torch" in out["error"]


# -------------------------------------------------------------------------- int32-offset


I32_SAMPLES = {"int64": [0.301, 0.305, 0.302], "int32": [0.300, 0.304, 0.301]}


def test_int32_offset_without_triton_refuses_and_says_why(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "triton" else real(n, *a)
    )
    rec = _record("int32-offset", i32.run(_cpu_ctx()))
    assert evidence.validate_record(rec) == [] and not rec["ok"]
    assert all("triton is not installed" in v["reason"] for v in rec["variants"])
    assert rec["checks"]["prerequisites"]["ok"] is False


def test_int32_offset_record_with_the_large_outcomes():
    large = {
        "int64": {"outcome": "correct", "bad_rows": 0, "returncode": 0},
        "int32": {"outcome": "fault", "error": "RuntimeError: an illegal memory access",
                  "returncode": 0},
    }  # fmt: skip
    result = i32.to_result(dict(i32.CONFIG), I32_SAMPLES, True, large, free_bytes=9, total_bytes=10)
    rec = _record("int32-offset", result)
    assert evidence.validate_record(rec) == [] and rec["ok"], rec.get("problems")
    assert rec["config"]["int32_past_2_31"]["outcome"] == "fault"
    assert rec["checks"]["int64_correct_past_2_31"]["ok"]
    assert evidence.variant(rec, "int64")["extra"]["gbps"] > 0
    assert "widening the Triton row offset to int64" in evidence.evidence_note(
        [rec], "int32-offset"
    )


def test_int32_offset_wrong_int64_fails_and_skipped_large_part_is_said():
    bad = {"int64": {"outcome": "wrong", "bad_rows": 32}, "int32": {"outcome": "wrong"}}
    rec = _record("int32-offset", i32.to_result(dict(i32.CONFIG), I32_SAMPLES, True, bad))
    assert "check failed: int64_correct_past_2_31" in rec["problems"]
    skipped = {v: {"outcome": "not run", "reason": "needs 3.0 GiB free"} for v in i32.LABELS}
    rec = _record("int32-offset", i32.to_result(dict(i32.CONFIG), I32_SAMPLES, True, skipped))
    assert rec["ok"] and "int64_correct_past_2_31" not in rec["checks"]
    assert rec["config"]["int32_past_2_31"]["reason"] == "needs 3.0 GiB free"


def test_int32_offset_a_child_with_no_report_crashed():
    out = i32.outcome(_child.ChildResult(None, -6, "child exited -6: Aborted"))
    assert out == {"outcome": "crashed", "returncode": -6, "error": "child exited -6: Aborted"}


def test_int32_offset_sizes_cross_2_31_only_in_the_large_part():
    cfg = i32.CONFIG
    assert i32.large_bytes(cfg) > 2**31 > cfg["small_rows"] * cfg["cols"]
    assert (cfg["large_rows"] - 1) * cfg["cols"] >= 2**31  # the last rows' offsets wrap
    args = i32.child_args(dict(cfg), "int32", 0)
    assert args[:2] == ["--large", "int32"] and json.loads(args[3]) == cfg
