import json
import sys

import pytest

from gpulint.runtime import probe


@pytest.fixture
def no_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)


def test_probe_without_torch_or_gpu_says_so_plainly(no_torch):
    info = probe.collect()
    assert info["torch"]["available"] is False
    assert "pip install gpulint[bench]" in info["torch"]["reason"]
    assert info["nvml"]["available"] is False
    text = probe.render(info)
    assert "torch: not available" in text
    assert "no GPU" in text
    json.dumps(info)  # --json must serialize


def test_relevant_environment():
    env = {
        "CUDA_VISIBLE_DEVICES": "0",
        "PYTORCH_ALLOC_CONF": "expandable_segments:True",
        "NCCL_DEBUG": "INFO",
        "TORCH_LOGS": "+dynamo",
        "CUDA_LAUNCH_BLOCKING": "1",
        "HOME": "/root",
        "PATH": "/bin",
    }
    got = probe.relevant_env(env)
    assert set(got) == {"CUDA_VISIBLE_DEVICES", "PYTORCH_ALLOC_CONF", "NCCL_DEBUG", "TORCH_LOGS",
                        "CUDA_LAUNCH_BLOCKING"}  # fmt: skip


@pytest.mark.parametrize(
    "raw, text", [(91900, "9.19.0"), (90100, "9.1.0"), (8902, "8.9.2"), (None, None)]
)
def test_cudnn_version(raw, text):
    assert probe.cudnn_version(raw) == text


def test_render_with_devices():
    info = {
        "gpulint": "0.1.0",
        "python": "3.12.3",
        "platform": "Linux",
        "torch": {
            "available": True,
            "version": "2.11.0+cu130",
            "cuda": "13.0",
            "cudnn": "9.19.0",
            "nccl": "2.28.9",
            "cuda_available": True,
            "flash_attention_impls": {"registered": ["FA3", "FA4"], "active": None},
            "devices": [
                {
                    "index": 0,
                    "name": "NVIDIA H200",
                    "compute_capability": "9.0",
                    "sm_count": 132,
                    "memory_bytes": 150 * 2**30,
                    "shared_memory_per_block_optin": 232448,
                    "l2_cache_bytes": 60 * 2**20,
                    "table_name": "H200",
                }
            ],
        },  # fmt: skip
        "nvml": {"available": True, "driver": "580.159.04", "driver_cuda": "13.0"},
        "env": {"NCCL_NVLS_ENABLE": "0"},
    }
    text = probe.render(info)
    for part in ("sm_90", "132 SMs", "232448 B", "60 MiB", "FA3, FA4", "active: none",
                 "driver 580.159.04", "NCCL_NVLS_ENABLE=0", "table: H200"):  # fmt: skip
        assert part in text
