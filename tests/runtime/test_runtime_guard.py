import sys

from gpulint.runtime.guard import check_gpus


def test_free_gpu_passes(fake_nvml, proc):
    r = check_gpus(fake_nvml([[]]), own_pids={1})
    assert r.ok and r.checked
    assert "no other process" in r.message


def test_another_process_refuses(fake_nvml, proc):
    r = check_gpus(fake_nvml([[proc(4242)]]), own_pids={1})
    assert not r.ok and r.checked
    assert "4242" in r.message and "--force" in r.message


def test_own_processes_do_not_count(fake_nvml, proc):
    r = check_gpus(fake_nvml([[proc(77)]]), own_pids={77})
    assert r.ok


def test_busy_gpu_with_no_visible_process_refuses(fake_nvml, proc):
    r = check_gpus(fake_nvml([[]], util_per_gpu=[93]), own_pids={1})
    assert not r.ok and "93% busy" in r.message


def test_only_visible_gpus_are_checked(monkeypatch, fake_nvml, proc):
    nvml = fake_nvml([[proc(5)], []])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert check_gpus(nvml, own_pids={1}).ok
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-00000000")
    assert not check_gpus(nvml, own_pids={1}).ok
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert not check_gpus(nvml, own_pids={1}).ok


def test_nvml_failure_cannot_vouch_for_the_gpu(fake_nvml, proc):
    r = check_gpus(fake_nvml([[]], fail_init=True))
    assert not r.ok and not r.checked and "--force" in r.message


def test_missing_nvidia_ml_py_refuses(monkeypatch, fake_nvml, proc):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    r = check_gpus()
    assert not r.ok and not r.checked and "nvidia-ml-py" in r.message
