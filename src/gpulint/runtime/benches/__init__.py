"""One module per bench. ``NAMES`` is the order ``bench all`` runs them in: the two ceilings
(matmul, copy) first, so later benches can report % of the measured ceiling; the torchrun
benches (nccl, ddp, fsdp, ddp-no-sync) last, launched together in one torchrun job."""

from __future__ import annotations

import importlib

MODULES = {
    "matmul": "matmul",
    "copy": "copy",
    "h2d": "h2d",
    "sync": "sync",
    "attention": "attention",
    "train-step": "train_step",
    "graph-break": "graph_break",
    "recompile": "recompile",
    "no-grad": "no_grad",
    "eval-mode": "eval_mode",
    "anomaly": "anomaly",
    "graph-capture": "graph_capture",
    "launch-blocking": "launch_blocking",
    "device-per-rank": "device_per_rank",
    "int32-offset": "int32_offset",
    "dataloader": "dataloader",
}
DISTRIBUTED = ("nccl", "ddp", "fsdp", "ddp-no-sync")
NAMES = (*MODULES, *DISTRIBUTED)


def load(name: str):
    return importlib.import_module(f"{__name__}.{MODULES[name]}")
