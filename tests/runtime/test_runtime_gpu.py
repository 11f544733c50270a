"""Runs only where torch sees a CUDA GPU (never on CI); skipped cleanly elsewhere."""

import json

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

from gpulint.runtime import evidence, probe  # noqa: E402
from gpulint.runtime.__main__ import main  # noqa: E402


def _bench(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    if rc == 1 and "refused" in out.err and "shared GPU" in out.err:
        pytest.skip("the GPU is shared; the guard refused, as it should")
    return rc, out


def _one_record(bench, capsys, tmp_path):
    """Run one bench for 3 runs with --json; its single record, checked against the schema."""
    argv = ["bench", bench, "--runs", "3", "--evidence-dir", str(tmp_path), "--json"]
    rc, out = _bench(argv, capsys)
    assert rc == 0, out.err
    (rec,) = json.loads(out.out)
    assert evidence.validate_record(rec) == [] and rec["ok"]
    return rec


def test_probe_reads_the_device():
    info = probe.collect()
    dev = info["torch"]["devices"][0]
    assert dev["sm_count"] > 0 and dev["memory_bytes"] > 0
    assert dev["shared_memory_per_block_optin"] >= dev["shared_memory_per_block"]


def test_copy_bench_writes_a_valid_record(tmp_path, capsys):
    rec = _one_record("copy", capsys, tmp_path)
    assert rec["variants"][0]["runs"] == 3 and rec["variants"][0]["median"] > 0
    assert len(evidence.load_records([tmp_path])) == 1


def test_nccl_ddp_fsdp_pass_on_one_gpu(tmp_path, capsys):
    argv = ["bench", "nccl", "ddp", "fsdp", "--nproc", "1", "--runs", "3",
            "--evidence-dir", str(tmp_path), "--json"]  # fmt: skip
    rc, out = _bench(argv, capsys)
    assert rc == 0, out.err
    recs = json.loads(out.out)
    assert [r["bench"] for r in recs] == ["nccl", "ddp", "fsdp"]
    for r in recs:
        assert r["ok"] and all(c["ok"] for c in r["checks"].values())


def test_sync_bench_records_host_and_gpu_step_context(tmp_path, capsys):
    rec = _one_record("sync", capsys, tmp_path)
    by_name = {v["name"]: v for v in rec["variants"]}
    assert rec["headline"]["context"] == ["host_issue", "gpu_step"]
    assert by_name["gpu_step"]["status"] == "ok", by_name["gpu_step"].get("reason")
    # The graph replays the step with no host in between: never slower than the timed loop.
    assert 0 < by_name["gpu_step"]["median"] < by_name["every_step"]["median"]
    assert "GPU time for one step:" in evidence.evidence_note([rec], "sync")


def test_eval_mode_bench_records_both_modes_and_what_training_mode_does(tmp_path, capsys):
    rec = _one_record("eval-mode", capsys, tmp_path)
    names = {v["name"] for v in rec["variants"]}
    assert names == {"train_mode", "eval_mode"}
    assert all(v["extra"]["forward_peak_mib"] > 0 for v in rec["variants"])
    assert rec["checks"]["train_mode_updates_running_stats"]["ok"]


def test_ddp_no_sync_bench_on_one_gpu_says_floor_only(tmp_path, capsys):
    argv = ["bench", "ddp-no-sync", "--nproc", "1", "--runs", "3", "--evidence-dir",
            str(tmp_path), "--json"]  # fmt: skip
    rc, out = _bench(argv, capsys)
    assert rc == 0, out.err
    (rec,) = json.loads(out.out)
    assert evidence.validate_record(rec) == [] and rec["ok"]
    assert "floor" in rec["config"]["note"]


def _small(bench, options):
    """Run one bench in this process for 3 runs with small sizes; its record, schema-checked."""
    from gpulint.runtime import harness
    from gpulint.runtime.benches import load

    ctx = harness.Context(3, options={bench: options}, say=lambda m: None)
    rec = harness.make_record(bench, load(bench).run(ctx), device=ctx.device_info,
                              vers={"gpulint": "0"}, command=f"gpulint bench {bench}",
                              argv=["gpulint", "bench", bench])  # fmt: skip
    assert evidence.validate_record(rec) == [], evidence.validate_record(rec)
    return rec


def test_graph_capture_bench_freezes_the_host_value_and_static_inputs_follow():
    rec = _small("graph-capture", {"width": 256, "steps_per_run": 20})
    assert rec["ok"], rec.get("problems")
    assert {v["name"] for v in rec["variants"] if v["status"] == "ok"} == {
        "eager", "graph_static", "graph_frozen"}  # fmt: skip
    probe = rec["config"]["host_copy_in_capture"]
    assert "pageable" in probe, probe  # the child ran and said what the capture did


def test_launch_blocking_bench_children_see_the_variable():
    rec = _small("launch-blocking", {"steps_per_run": 10, "warmup_steps": 3})
    assert rec["ok"], rec.get("problems")
    assert evidence.variant(rec, "blocking")["extra"]["env_seen"] == ["1"]
    assert evidence.variant(rec, "default")["extra"]["env_seen"] == ["None"]


def test_device_per_rank_bench_two_ranks_share_gpu0():
    rec = _small("device-per-rank", {"width": 1024, "batch": 256, "steps_per_run": 5,
                                     "warmup_steps": 2})  # fmt: skip
    assert rec["ok"], rec.get("problems")
    assert rec["config"]["gpu_count"] == torch.cuda.device_count()
    shared = evidence.variant(rec, "shared_gpu0")
    alone = evidence.variant(rec, "alone_gpu0")
    assert shared["extra"]["ranks"] == 2 and len(shared["extra"]["per_rank_ms"]) == 2
    # two processes hold two CUDA contexts and two models on GPU 0: more memory than one
    assert (
        shared["extra"]["mib_taken_per_gpu"]["cuda:0"]
        > alone["extra"]["mib_taken_per_gpu"]["cuda:0"]
    )
    own = evidence.variant(rec, "own_gpu")
    assert own["status"] == ("ok" if torch.cuda.device_count() >= 2 else "unavailable")


def test_int32_offset_bench_int64_is_right_past_2_31_and_int32_is_not():
    pytest.importorskip("triton")
    free, _ = torch.cuda.mem_get_info()
    if free < 4 * 2**30:
        pytest.skip("needs about 3 GiB of free GPU memory")
    rec = _small("int32-offset", {"small_rows": 256, "launches_per_run": 2})
    assert rec["ok"], rec.get("problems")
    assert rec["checks"]["int64_correct_past_2_31"]["ok"]
    assert rec["config"]["int32_past_2_31"]["outcome"] in ("fault", "wrong", "crashed")
