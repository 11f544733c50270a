"""Run GPU510's fixtures under `TORCH_LOGS=graph_breaks` and list where Dynamo broke the graph.

The fixtures (fixtures/python/gpu510_compiled_*.py) are real-shaped compiled code: a GPT-2
style model compiled whole and helpers compiled by name. This script runs each compiled entry
once on the GPU and prints, per fixture, the lines Dynamo reported ("Graph break in user code
at FILE:LINE") with the registry's name for the break, so they can be set beside the lines
`gpulint check --select GPU510` reports. Dynamo decides the breaks, not the backend: the
compiles use backend="eager" so the run takes seconds.

    TORCH_LOGS=graph_breaks python benchmarks/graph_break_logs.py 2> breaks.log
    python benchmarks/graph_break_logs.py --parse breaks.log
"""

from __future__ import annotations

import functools
import re
import runpy
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "python"
_AT = re.compile(r"Graph break in user code at (\S+):(\d+)")
_REASON = re.compile(r"Graph Break Reason: (.*)")


def run() -> None:
    import torch

    real = torch.compile
    torch.compile = functools.partial(real, backend="eager")  # type: ignore[assignment]
    g = runpy.run_path(str(FIXTURES / "gpu510_compiled_transformer.py"))
    idx = torch.randint(0, 50304, (2, 64), device="cuda")
    targets = idx.clone()
    targets[:, :4] = -1
    g["model"](idx, targets)
    # A break Dynamo cannot resume from inside the loop over blocks (the print) makes it skip
    # GPT.forward whole ("falling back to eager"): run it again with print a Python no-op,
    # which Dynamo inlines, so the breaks after it are reached too.
    import builtins

    torch._dynamo.reset()
    quiet = builtins.print
    builtins.print = lambda *a, **k: None
    try:
        g = runpy.run_path(str(FIXTURES / "gpu510_compiled_transformer.py"))
        g["model"](idx, targets)
        # The data-dependent `if` in MLP.forward does the same; a third run without it reaches
        # the breaks in GPT.forward itself.
        torch._dynamo.reset()
        g = runpy.run_path(str(FIXTURES / "gpu510_compiled_transformer.py"))
        gelu = torch.nn.functional.gelu
        g["MLP"].forward = lambda self, x: self.c_proj(gelu(self.c_fc(x)))
        g["model"](idx, targets)
    finally:
        builtins.print = quiet
    h = runpy.run_path(str(FIXTURES / "gpu510_compiled_helpers.py"))
    h["convert"](torch.randn(64, 32, device="cuda"), 0.9, compile_kwargs={})
    x = torch.randn(96, 16, device="cuda")
    h["per_group_scales_c"](x, torch.tensor([32, 64, 96], device="cuda", dtype=torch.int32))
    lin = torch.nn.Linear(16, 1).cuda()
    h["train_step"](lin, x, torch.randn(96, 1, device="cuda"))
    torch.cuda.synchronize()
    print("ran", file=sys.stderr)


def parse(log: str) -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    lines = log.splitlines()
    for i, line in enumerate(lines):
        m = _AT.search(line)
        if not m:
            continue
        reason = ""
        for follow in lines[i + 1 : i + 6]:
            r = _REASON.search(follow)
            if r:
                reason = r.group(1).strip()
                if reason.startswith("Encountered graph break when attempting"):
                    # the kind is on a later line (BINARY_SUBSCR, CALL...): the next non-blank
                    nxt = [
                        x.rsplit("[__graph_breaks]", 1)[-1].strip() for x in lines[i + 2 : i + 9]
                    ]
                    reason = next((n for n in nxt if n and not n.startswith("Graph")), reason)
                break
        out.append((Path(m.group(1)).name, int(m.group(2)), reason))
    return sorted(set(out))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--parse":
        for name, line, reason in parse(Path(sys.argv[2]).read_text()):
            print(f"{name}:{line}: {reason}")
    else:
        run()
