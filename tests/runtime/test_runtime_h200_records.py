"""The records `gpulint bench all --nproc 1` wrote on an NVIDIA H200 (2026-12-02, torch 2.11),
kept as real-shaped fixtures: they must stay valid under the schema, carry the anchors'
configurations, and give the notes the lint messages quote."""

import pathlib

from gpulint.runtime import evidence

DATA = pathlib.Path(__file__).parent / "data" / "h200"


def _records():
    errors: list[str] = []
    recs = evidence.load_records([DATA], errors)
    assert errors == []
    return {r["bench"]: r for r in recs}


def test_every_bench_left_a_valid_passing_record():
    recs = _records()
    assert set(recs) == set(evidence.BENCHES)
    for r in recs.values():
        assert r["ok"], r["bench"]
        assert r["device"]["name"] == "NVIDIA H200"
        assert r["versions"]["torch"].startswith("2.11")
        assert r["command"].endswith("bench all --nproc 1 --evidence-dir /tmp/ev")
        assert r["config"]["guard"]["ok"]
        for v in r["variants"]:
            assert v["status"] != "ok" or (v["runs"] == 5 and len(v["samples"]) == 5)


def test_configurations_are_the_anchors():
    recs = _records()
    assert recs["matmul"]["config"]["m"] == recs["matmul"]["config"]["k"] == 8192
    assert recs["copy"]["config"]["bytes"] == 1 << 30
    assert recs["h2d"]["config"]["bytes"] == 256 << 20
    att = recs["attention"]["config"]
    assert (att["batch"], att["heads"], att["seq"], att["head_dim"]) == (4, 16, 4096, 128)
    assert att["dtype"] == "bfloat16" and att["causal"]
    ts = recs["train-step"]["config"]
    assert (ts["layers"], ts["d_model"], ts["batch"], ts["seq"]) == (6, 1024, 8, 1024)
    assert recs["sync"]["config"]["every_n"] == 50


def test_notes_quote_the_measurement():
    recs = list(_records().values())
    assert evidence.evidence_note(recs, "matmul") == (
        "on NVIDIA H200 an fp32 matmul with TF32 off was 8.0× slower than with TF32 on "
        "(51.1 → 411 TFLOP/s, 5 runs)"
    )
    assert "math SDPA backend was 49× slower than SDPA cuDNN" in evidence.evidence_note(
        recs, "attention"
    )
    assert evidence.evidence_note(recs, "copy") is None  # a ceiling, no A/B
