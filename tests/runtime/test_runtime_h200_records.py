"""The records `gpulint bench all --nproc 1` wrote on an NVIDIA H200 (2026-12-03, torch 2.11),
two runs back to back on one machine, kept as real-shaped fixtures: they must stay valid under
the schema, carry the anchors' configurations, and give the notes the lint messages quote."""

import pathlib

import pytest

from gpulint.runtime import evidence

DATA = pathlib.Path(__file__).parent / "data"
RUNS = ["h200", "h200-rerun"]
# Benches added after that day's `bench all`: their records are in data/h200-20261206/ (none
# yet for eval-mode, ddp-no-sync and the four of issue 33).
LATER = {"graph-break", "recompile", "no-grad", "anomaly", "eval-mode", "ddp-no-sync",
         "graph-capture", "launch-blocking", "device-per-rank", "int32-offset"}  # fmt: skip


def _records(run: str) -> dict[str, dict]:
    errors: list[str] = []
    recs = evidence.load_records([DATA / run], errors)
    assert errors == []
    return {r["bench"]: r for r in recs}


@pytest.mark.parametrize("run", RUNS)
def test_every_bench_left_a_valid_passing_record(run):
    recs = _records(run)
    assert set(recs) == set(evidence.BENCHES) - LATER
    for r in recs.values():
        assert r["ok"], r["bench"]
        assert r["device"]["name"] == "NVIDIA H200"
        assert r["versions"]["torch"].startswith("2.11")
        assert r["command"].endswith("bench all --nproc 1 --evidence-dir /tmp/ev")
        assert r["config"]["guard"]["ok"]
        for v in r["variants"]:
            assert v["status"] != "ok" or (v["runs"] == 5 and len(v["samples"]) == 5)


@pytest.mark.parametrize("run", RUNS)
def test_configurations_are_the_anchors(run):
    recs = _records(run)
    assert recs["matmul"]["config"]["m"] == recs["matmul"]["config"]["k"] == 8192
    assert recs["copy"]["config"]["bytes"] == 1 << 30
    assert recs["h2d"]["config"]["bytes"] == 256 << 20
    att = recs["attention"]["config"]
    assert (att["batch"], att["heads"], att["seq"], att["head_dim"]) == (4, 16, 4096, 128)
    assert att["dtype"] == "bfloat16" and att["causal"]
    ts = recs["train-step"]["config"]
    assert (ts["layers"], ts["d_model"], ts["batch"], ts["seq"]) == (6, 1024, 8, 1024)
    sync = recs["sync"]["config"]
    assert (sync["every_n"], sync["hidden_layers"], sync["width"], sync["batch"]) == (
        50,
        3,
        2048,
        256,
    )


def test_notes_quote_the_measurement():
    recs = list(_records("h200").values())
    assert evidence.evidence_note(recs, "matmul") == (
        "on NVIDIA H200 an fp32 matmul with TF32 off was 8.0× slower than with TF32 on "
        "(51.1 → 410 TFLOP/s, 5 runs)"
    )
    assert "math SDPA backend was 49× slower than SDPA cuDNN" in evidence.evidence_note(
        recs, "attention"
    )
    assert evidence.evidence_note(recs, "h2d") == (
        "on NVIDIA H200 a host-to-device copy from pageable memory was 9.1× slower than from "
        "pinned memory (6.05 → 55.0 GB/s, 5 runs; host memcpy 256 MiB, one thread: 5.13 GB/s)"
    )
    assert evidence.evidence_note(recs, "copy") is None  # a ceiling, no A/B


def test_sync_note_follows_the_per_run_pairs():
    # Run 1: the host took longer to issue a step than the GPU to run it, and the per-run
    # ratios fall on both sides of 1: noise, said as noise.
    first = evidence.evidence_note(list(_records("h200").values()), "sync")
    assert first == (
        "on NVIDIA H200 an .item() every step made no difference beyond run-to-run spread "
        "(2,145 → 2,001 µs, 5 runs alternating; per run -4% to +28%; "
        "host time to issue one step: 1,940 µs)"
    )
    # Run 2, same machine, faster host: every pair shows the cost.
    second = evidence.evidence_note(list(_records("h200-rerun").values()), "sync")
    assert second == (
        "on NVIDIA H200 an .item() every step cost +15% per step "
        "(1,606 → 1,399 µs, 5 runs alternating; per run +1% to +19%; "
        "host time to issue one step: 1,464 µs)"
    )
