import argparse
import json
import os
import pathlib
import subprocess
import sys

import pytest

import gpulint
from gpulint.runtime import evidence
from gpulint.runtime.__main__ import main
from gpulint.runtime.cli import register

SRC = str(pathlib.Path(gpulint.__file__).resolve().parents[1])


def test_register_adds_three_subcommands_with_handlers():
    parser = argparse.ArgumentParser(prog="gpulint")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    for argv in (["probe"], ["bench", "sync"], ["roofline", "--device", "H200", "--dtype", "bf16"]):
        args = parser.parse_args(argv)
        assert callable(args.func)
    args = parser.parse_args(["bench", "all", "--runs", "7", "--nproc", "2", "--json", "--force"])
    assert (args.names, args.runs, args.nproc, args.json, args.force) == (["all"], 7, 2, True, True)
    assert parser.parse_args(["bench", "sync"]).runs == 5


def test_importing_the_cli_and_evidence_does_not_import_torch():
    code = (
        "import sys, gpulint.runtime.cli, gpulint.runtime.evidence, gpulint.runtime.roofline, "
        "gpulint.runtime.probe, gpulint.runtime.harness, gpulint.runtime.benches; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    env = dict(os.environ, PYTHONPATH=SRC)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_probe_exits_zero_and_json_parses(capsys):
    assert main(["probe"]) == 0
    assert "gpulint" in capsys.readouterr().out
    assert main(["probe", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert {"torch", "nvml", "env", "python"} <= set(info)


def test_roofline_known(capsys):
    assert main(["roofline", "--device", "NVIDIA H200", "--dtype", "bf16"]) == 0
    assert "989" in capsys.readouterr().out
    assert main(["roofline", "--device", "H200", "--dtype", "tf32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["peak_tflops"] == 495


@pytest.mark.parametrize(
    "argv, code, fragment",
    [
        (["--device", "H300", "--dtype", "bf16"], 1, "unknown device"),
        (["--device", "H200", "--dtype", "fp4"], 1, "unknown dtype"),
        (["--device", "GB10", "--dtype", "bf16"], 1, "refusing to guess"),
        (["--device", "GB10", "--dtype", "bf16", "--peak", "125"], 2, "--source"),
        (["--device", "H200", "--dtype", "bf16", "--peak", "1979", "--source", "x"], 1, "sparse"),
    ],
)
def test_roofline_refusals(capsys, argv, code, fragment):
    assert main(["roofline", *argv]) == code
    assert fragment in capsys.readouterr().err


def test_roofline_user_peak(capsys):
    argv = ["roofline", "--device", "GB10", "--dtype", "bf16", "--peak", "212.9", "--source", "lab"]
    assert main(argv) == 0
    assert "user: lab" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["bench"], "name a bench"),
        (["bench", "warp"], "unknown bench warp"),
        (["bench", "sync", "--runs", "2"], "at least 3"),
        (["bench", "nccl", "--nproc", "0"], "--nproc"),
    ],
)
def test_bench_usage_errors_exit_2(capsys, argv, fragment):
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err


def test_bench_without_torch_is_refused(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "sync"]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "gpulint[bench]" in err


def test_bench_without_a_gpu_is_refused(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert main(["bench", "sync", "--no-record"]) == 1
    assert "no CUDA device" in capsys.readouterr().err


def test_compare_prints_absolute_pairs(tmp_path, capsys, sync_record):
    a = evidence.write_record(sync_record, tmp_path / "a")
    faster = json.loads(json.dumps(sync_record))
    for v in faster["variants"]:
        v.update(median=v["median"] / 2, min=v["min"] / 2, max=v["max"] / 2)
        v["samples"] = [s / 2 for s in v["samples"]]
    b = evidence.write_record(faster, tmp_path / "b")
    assert main(["bench", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "1,535" in out and "768" in out and "0.500" in out and "B better" in out


def test_compare_needs_records_on_both_sides(tmp_path, capsys, sync_record):
    a = evidence.write_record(sync_record, tmp_path / "a")
    (tmp_path / "b.json").write_text("{}")
    assert main(["bench", "--compare", str(a), str(tmp_path / "b.json")]) == 2
