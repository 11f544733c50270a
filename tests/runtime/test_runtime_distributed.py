"""The torchrun launcher and the records it yields; the launch itself runs where torch is."""

import pytest

from gpulint.runtime import evidence, harness
from gpulint.runtime.benches import distributed


def test_launch_command_is_torchrun_standalone():
    cmd = distributed.launch_command(["nccl", "ddp"], 2, 5, "/tmp/out.json")
    assert cmd[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc_per_node=2" in cmd
    assert cmd[cmd.index("--modes") + 1] == "nccl,ddp"


def test_launch_environment_keeps_nvlink_multicast_off():
    env = distributed.launch_env({"NCCL_NVLS_ENABLE": "1", "PYTHONPATH": "/x"})
    assert env["NCCL_NVLS_ENABLE"] == "0"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert env["PYTHONPATH"].endswith("/x")


def _record(mode, raw):
    result = distributed.to_results(mode, raw, 1)
    return harness.make_record(mode, result, device={"name": "NVIDIA H200"},
                               vers={"gpulint": "0.1.0"}, command="gpulint bench nccl",
                               argv=["gpulint", "bench", "nccl"])  # fmt: skip


def test_one_rank_nccl_result_becomes_a_valid_record():
    raw = {
        "world_size": 1,
        "backend": "nccl",
        "variants": {
            "allreduce_256MiB": {
                "us": [15.0, 16.0, 15.5],
                "iters": 100,
                "bytes": 256 << 20,
                "algbw_GBps": [17000.0] * 3,
                "busbw_GBps": [0.0] * 3,
            },
        },  # fmt: skip
        "checks": {"allreduce_256MiB_sum": {"ok": True}},
    }
    rec = _record("nccl", raw)
    assert evidence.validate_record(rec) == [] and rec["ok"]
    extra = rec["variants"][0]["extra"]
    assert extra["busbw_GBps"] == 0.0 and "one rank" in extra["busbw_note"]


def test_a_failed_check_fails_the_record():
    raw = {
        "world_size": 2,
        "backend": "nccl",
        "variants": {"train_step": {"us": [1.0, 1.1, 1.2], "iters": 5, "grad_bytes": 4}},
        "checks": {"params_match_single_process": {"ok": False, "max_abs_diff": 0.3}},
    }
    rec = _record("ddp", raw)
    assert evidence.validate_record(rec) == []
    assert not rec["ok"] and "params_match_single_process" in rec["problems"][0]


def test_a_worker_error_is_a_failed_variant():
    rec = _record("fsdp", {"error": "RuntimeError: no GPU"})
    assert evidence.validate_record(rec) == []
    assert not rec["ok"] and rec["variants"][0]["status"] == "failed"


def test_world_size_one_on_cpu_with_gloo():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("covered by the GPU test")
    raw = distributed.launch(["nccl", "ddp"], 1, 3, timeout=240)
    assert "error" not in raw, raw.get("error")
    for mode in ("nccl", "ddp"):
        part = raw["modes"][mode]
        assert "error" not in part, part
        assert all(c["ok"] for c in part["checks"].values())
        assert part["backend"] == "gloo"


def _no_sync_raw(world, ok=True):
    return {
        "world_size": world,
        "backend": "nccl",
        "variants": {
            "every_micro_step": {
                "ms": [9.0, 9.2, 9.1],
                "iters": 5,
                "allreduces_per_step": 8,
                "grad_bytes": 4,
            },
            "no_sync": {
                "ms": [5.0, 5.1, 5.2],
                "iters": 5,
                "allreduces_per_step": 1,
                "grad_bytes": 4,
            },
        },  # fmt: skip
        "checks": {"same_parameters_both_ways": {"ok": ok, "max_abs_diff": 0.0 if ok else 1.0}},
    }


def test_ddp_no_sync_one_rank_says_it_measures_the_floor_only():
    rec = _record("ddp-no-sync", _no_sync_raw(1))
    assert evidence.validate_record(rec) == [] and rec["ok"]
    assert rec["headline"]["baseline"] == "every_micro_step"
    assert rec["headline"]["improved"] == "no_sync"
    assert "floor" in rec["config"]["note"]
    assert all("floor" in v["extra"]["note"] for v in rec["variants"])
    counts = {v["name"]: v["extra"]["allreduces_per_step"] for v in rec["variants"]}
    assert counts == {"every_micro_step": 8, "no_sync": 1}


def test_ddp_no_sync_on_several_ranks_has_no_floor_note_and_checks_parameters():
    result = distributed.to_results("ddp-no-sync", _no_sync_raw(2), 2)
    assert "note" not in result.config and result.config["world_size"] == 2
    rec = _record("ddp-no-sync", _no_sync_raw(2, ok=False))
    assert not rec["ok"] and "same_parameters_both_ways" in rec["problems"][0]


def test_ddp_no_sync_is_launched_with_the_torchrun_benches():
    from gpulint.runtime.benches import DISTRIBUTED

    assert "ddp-no-sync" in DISTRIBUTED
    cmd = distributed.launch_command(["ddp-no-sync"], 4, 5, "/tmp/out.json")
    assert "--nproc_per_node=4" in cmd and cmd[cmd.index("--modes") + 1] == "ddp-no-sync"


def test_ddp_no_sync_world_size_one_on_cpu_with_gloo():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("run on a GPU with `gpulint bench ddp-no-sync --nproc 1`")
    raw = distributed.launch(["ddp-no-sync"], 1, 3, timeout=400)
    assert "error" not in raw, raw.get("error")
    part = raw["modes"]["ddp-no-sync"]
    assert "error" not in part, part
    assert part["checks"]["same_parameters_both_ways"]["ok"], part["checks"]
