"""GPU407 with the model wrapped in one module and trained in another (open_flamingo's shape:
train.py wraps `ddp_model = DDP(model, ...)` and calls `train_one_epoch(model=ddp_model, ...)`
imported from train_utils.py, whose loop accumulates gradients without `no_sync`)."""

from __future__ import annotations

import contextlib
import io
import json
import textwrap

import pytest

from gpulint.cli import main

TRAIN = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

from train_utils import train_one_epoch


def main(args, model, device_id, optimizer, loader):
    if args.fsdp:
        model.wrap_fsdp(device_id)
        ddp_model = model
    else:
        model = model.to(device_id)
        ddp_model = DDP(model, device_ids=[device_id])
    ddp_model.train()
    for epoch in range(args.num_epochs):
        train_one_epoch(args=args, model=ddp_model, loader=loader, optimizer=optimizer)
"""

TRAIN_UTILS = """
import torch


def train_one_epoch(args, model, loader, optimizer):
    model.train()
    for num_steps, (images, labels) in enumerate(loader):
        loss = model(images.cuda(), labels=labels.cuda())[0]
        (loss / args.gradient_accumulation_steps).backward()
        if ((num_steps + 1) % args.gradient_accumulation_steps) == 0:
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
"""


@pytest.fixture
def tree(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "train.py").write_text(textwrap.dedent(TRAIN))
    (tmp_path / "train" / "train_utils.py").write_text(textwrap.dedent(TRAIN_UTILS))
    return tmp_path


def check(*paths: str) -> list[dict]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(
            ["check", "--format", "json", "--select", "GPU407", "--no-cache", "--jobs", "1"]
            + list(paths or (".",))
        )
    return json.loads(out.getvalue())["findings"]


def test_a_model_wrapped_in_the_caller_s_module_is_ddp_in_the_loop(tree):
    found = check()
    assert [(f["path"], f["line"]) for f in found] == [("train/train_utils.py", 9)]
    related = found[0]["related"]
    assert [(r["path"], r["line"]) for r in related] == [("train/train.py", 17)]
    assert "ddp_model" in related[0]["message"]
    # Checked alone (an editor, pre-commit), the loop's module still sees its caller.
    assert [f["line"] for f in check("train/train_utils.py")] == [9]


def test_a_caller_passing_an_unwrapped_model_is_no_ddp(tree):
    (tree / "train" / "train.py").write_text(
        textwrap.dedent(TRAIN).replace("model=ddp_model", "model=model")
    )
    assert check() == []


def test_no_sync_in_the_loop_s_module_silences(tree):
    (tree / "train" / "train_utils.py").write_text(
        textwrap.dedent(TRAIN_UTILS).replace(
            "        loss = model(",
            "        ctx = model.no_sync if (num_steps + 1) % 4 else contextlib.nullcontext\n"
            "        loss = model(",
        )
    )
    assert check() == []


def test_a_same_named_function_of_another_module_is_not_this_one(tree):
    # train.py calls its own `train_one_epoch` (from elsewhere): not train_utils' loop.
    (tree / "train" / "other.py").write_text(textwrap.dedent(TRAIN_UTILS))
    (tree / "train" / "train.py").write_text(
        textwrap.dedent(TRAIN).replace("from train_utils import", "from other import")
    )
    assert [(f["path"], f["line"]) for f in check()] == [("train/other.py", 9)]


# The wrap in a helper of another module, its result trained here (`model =
# setup_model(model, rank)` with `from dist_utils import setup_model`).
DIST_UTILS = """
import torch
from torch.nn.parallel import DistributedDataParallel


def setup_model(model, rank):
    model = model.to(rank)
    return DistributedDataParallel(model, device_ids=[rank])


def setup_plain(model, rank):
    return model.to(rank)
"""
TRAIN_WITH_HELPER = """
import torch
from dist_utils import setup_model


def main(model, rank, loader, optimizer, accum):
    model = setup_model(model, rank)
    for step, (x, y) in enumerate(loader):
        loss = model(x.to(rank), y.to(rank)) / accum
        loss.backward()
        if (step + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
"""


def test_a_model_returned_wrapped_by_another_module_s_helper_is_ddp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dist_utils.py").write_text(textwrap.dedent(DIST_UTILS))
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN_WITH_HELPER))
    assert [(f["path"], f["line"]) for f in check()] == [("train.py", 10)]
    # the helper that returns the model unwrapped: no DDP, nothing to say
    (tmp_path / "train.py").write_text(
        textwrap.dedent(TRAIN_WITH_HELPER).replace("setup_model", "setup_plain")
    )
    assert check() == []
