"""The eval-mode bench on the CPU, small: where torch is installed (skipped elsewhere)."""

import pytest

from gpulint.runtime import evidence, harness


def test_eval_mode_bench_runs_on_the_cpu_and_its_checks_hold():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("covered by test_runtime_gpu")
    from gpulint.runtime.benches import eval_mode

    small = {"channels": [8, 16], "batch": 8, "image": 16, "classes": 10, "forwards_per_run": 2}
    ctx = harness.Context(3, options={"eval-mode": small}, say=lambda m: None)
    result = eval_mode.run(ctx)
    rec = harness.make_record("eval-mode", result, device=ctx.device_info,
                              vers={"gpulint": "0"}, command="gpulint bench eval-mode",
                              argv=["gpulint", "bench", "eval-mode"])  # fmt: skip
    assert evidence.validate_record(rec) == [], evidence.validate_record(rec)
    assert rec["ok"], rec.get("problems")
    assert {v["name"] for v in rec["variants"]} == {"train_mode", "eval_mode"}
    assert all(v["runs"] == 3 for v in rec["variants"])
    assert rec["headline"] == {
        "baseline": "train_mode",
        "improved": "eval_mode",
        "what": "an evaluation forward pass in training mode",
        "per": "per forward",
        "paired": True,
    }
    # the model is left in eval mode by the checks, and the running statistics moved
    assert result.checks["train_mode_updates_running_stats"]["max_abs_change"] > 0
