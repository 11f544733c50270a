"""`gpulint trace` for real: runs only where torch sees a CUDA GPU (never on CI)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAM = """\
import torch

model = torch.nn.Linear(512, 512).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = torch.randn(64, 512)  # pageable host memory
for step in range(100):
    x = data.cuda()
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    print(step, loss.item())
"""


def _trace(tmp_path, *extra):
    (tmp_path / "train.py").write_text(PROGRAM)
    env = dict(os.environ)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulint",
            "trace",
            "--steps",
            "4",
            "--warmup",
            "2",
            *extra,
            "--json",
            "--",
            "python",
            "train.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    if out.returncode == 1 and "refused" in out.stderr:
        pytest.skip("the GPU is shared; the guard refused, as it should")
    return out


def test_trace_confirms_the_item_and_sees_the_pageable_copy(tmp_path):
    out = _trace(tmp_path)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    rows = {(r["line"], r["code"] or tuple(r["kinds"])): r for r in record["lines"]}
    item = rows[(12, "GPU101")]
    assert item["status"] == "confirmed" and item["count_per_step"] == 1
    copy = rows[(7, ("pageable-h2d",))]
    assert copy["status"] == "runtime-only" and copy["count_per_step"] == 1
    assert record["summary"]["steps"] == 4
    assert "0 " in out.stderr or "1 " in out.stderr  # the program's prints went to stderr (--json)


def test_timeout_stops_the_program_and_keeps_the_recording(tmp_path):
    (tmp_path / "hang.py").write_text("import time\ntime.sleep(600)\n")
    env = dict(os.environ)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulint",
            "trace",
            "--force",
            "--timeout",
            "5",
            "--",
            "python",
            "hang.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1 and "past --timeout 5 s (before its first step)" in out.stderr
    assert list((tmp_path / ".gpulint" / "trace").iterdir())


def test_explicit_step_marks_without_an_optimizer(tmp_path):
    (tmp_path / "infer.py").write_text(
        "import torch\nimport gpulint.trace\n"
        "w = torch.randn(256, 256, device='cuda')\n"
        "for i in range(50):\n"
        "    y = (w @ w).sum()\n"
        "    if y.item() > 1e30:\n"
        "        break\n"
        "    gpulint.trace.step()\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulint",
            "trace",
            "--steps",
            "3",
            "--warmup",
            "1",
            "--json",
            "--",
            "python",
            "infer.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=300,
    )
    if out.returncode == 1 and "refused" in out.stderr:
        pytest.skip("the GPU is shared; the guard refused, as it should")
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)
    assert record["summary"]["steps"] == 3
    sync = [r for r in record["lines"] if r["line"] == 6 and "sync" in r["kinds"]]
    assert sync and sync[0]["count_per_step"] == 1
