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
