"""What bounds the traced step: one verdict from measured fractions, the lever it points to, and
the findings that explain it. Pure functions over an analysis summary and the joined rows.

The step is split into the shares that can be measured:

- ``gpu``: the GPU's own work (kernels, copies), less what collectives put on it (NCCL kernels,
  gloo's copies of the tensors through host memory);
- ``input``: GPU idle inside ``DataLoader.__next__`` (the step waited for its batch);
- ``sync``: GPU idle right after the program's own syncs (a sync drains the GPU's queue, which the
  host then fills again from nothing);
- ``communication``: GPU idle while the host was inside collectives (gloo) and the GPU time the
  collectives put on the GPU;
- ``host``: the rest of the GPU's idle time: the host issuing work. With small kernels (mean
  kernel time under ``SMALL_KERNEL_US``) that is the launch path itself (**launch-bound**), else
  the host's own work between kernels (**host-bound**).

Kernel times barely change under tracing, host time does. With an untraced run (``--overhead``)
the step is the untraced one and the idle shares are the traced idle time's shares applied to the
untraced idle time (untraced step minus GPU busy); without one they are shares of the traced step,
where the tracer's own host time inflates ``host``, and the verdict says so.

The largest share names the bound. A run without a CUDA device measured no GPU time: its verdict
is ``not measured`` and it gives only the host's shares (loader waits, collectives).
"""

from __future__ import annotations

from dataclasses import dataclass, field

SMALL_KERNEL_US = 20.0  # kernels shorter than a launch plus PyTorch's dispatch (about 10-20 µs)

GPU_BOUND, LAUNCH_BOUND, HOST_BOUND = "GPU-bound", "launch-bound", "host-bound"
INPUT_BOUND, SYNC_BOUND, COMM_BOUND = "input-bound", "host-sync-bound", "communication-bound"
NOT_MEASURED = "not measured"

LEVERS = {
    GPU_BOUND: "make the GPU's work cheaper: BF16 autocast or TF32 for FP32 matrix products, "
    "fused attention (scaled_dot_product_attention), torch.compile to fuse elementwise kernels",
    LAUNCH_BOUND: "fewer, larger kernels: CUDA graphs (torch.compile(mode='reduce-overhead') or "
    "torch.cuda.graph), torch.compile's fusion, a larger batch per step",
    HOST_BOUND: "the host's own work between kernels: move it off the step (the idle lines "
    "below), or compile it",
    INPUT_BOUND: "feed the GPU faster: more DataLoader workers (num_workers), pin_memory=True with "
    "non_blocking copies, persistent_workers, prefetching",
    SYNC_BOUND: "take the syncs out of the step: keep values on the GPU (.item(), .cpu(), "
    "printing only every N steps), non_blocking copies",
    COMM_BOUND: "NCCL instead of gloo; overlap communication with the backward (DDP buckets, "
    "no_sync() under gradient accumulation)",
    NOT_MEASURED: "trace on a CUDA device to see what bounds the step",
}

# The static rules whose findings explain each bound, and the runtime kinds that do.
EXPLAINS: dict[str, tuple[frozenset, frozenset]] = {
    GPU_BOUND: (
        frozenset({"GPU202", "GPU204", "GPU205", "GPU502"}),
        frozenset({"fp32-gemm", "sdpa-math"}),
    ),
    LAUNCH_BOUND: (frozenset({"GPU502", "GPU510"}), frozenset({"gpu-idle"})),
    HOST_BOUND: (frozenset(), frozenset({"gpu-idle"})),
    INPUT_BOUND: (
        frozenset({"GPU301", "GPU302", "GPU303", "GPU102", "GPU104"}),
        frozenset({"input-wait", "pageable-h2d", "loader-restart"}),
    ),
    SYNC_BOUND: (frozenset({"GPU101", "GPU103", "GPU105", "GPU504"}), frozenset({"sync"})),
    COMM_BOUND: (frozenset({"GPU401", "GPU402", "GPU404"}), frozenset({"gloo", "collective"})),
    NOT_MEASURED: (frozenset(), frozenset()),
}


@dataclass
class Verdict:
    bound: str
    step_us: float | None
    basis: str  # "untraced step" / "traced step" / "traced step, host time only"
    fractions: dict[str, float] = field(default_factory=dict)
    facts: dict = field(default_factory=dict)
    lever: str = ""
    explained_by: list[str] = field(default_factory=list)
    note: str = ""

    def as_dict(self) -> dict:
        return {
            "bound": self.bound,
            "step_us": round(self.step_us, 1) if self.step_us else None,
            "basis": self.basis,
            "fractions": {k: round(v, 3) for k, v in self.fractions.items()},
            "facts": self.facts,
            "lever": self.lever,
            "explained_by": self.explained_by,
            "note": self.note,
        }


def _num(summary: dict, key: str) -> float:
    v = summary.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0


def verdict(summary: dict, rows=(), untraced_step_us: float | None = None) -> Verdict:
    """The step-level verdict from an analysis summary (``trace_map.analyse``) and the joined
    rows (``trace_join.join``, for the findings that explain it)."""
    traced = _num(summary, "step_us")
    kernels = _num(summary, "kernels_per_step")
    facts = {
        "kernels_per_step": summary.get("kernels_per_step"),
        "mean_kernel_us": summary.get("mean_kernel_us"),
        "launch_us_mean": summary.get("launch_us_mean"),
        "syncs_per_step": summary.get("syncs_per_step"),
    }
    if not summary.get("gpu_measured", True):
        step = traced
        fr = {}
        if step > 0:
            fr = {
                "input": min(_num(summary, "input_wait_us_per_step") / step, 1.0),
                "communication": min(_num(summary, "comm_host_us_per_step") / step, 1.0),
            }
        return Verdict(
            NOT_MEASURED,
            step or None,
            "traced step, host time only",
            fr,
            {},
            LEVERS[NOT_MEASURED],
            [],
            "no CUDA device in the traced run: GPU time cannot be measured, so no GPU-idle or "
            "GPU-bound figure is given",
        )
    if traced <= 0:
        return Verdict(NOT_MEASURED, None, "traced step", {}, facts, LEVERS[NOT_MEASURED])
    busy = _num(summary, "gpu_busy_us_per_step")
    nccl = _num(summary, "comm_gpu_us_per_step")
    step = untraced_step_us if untraced_step_us and untraced_step_us > 0 else traced
    basis = "untraced step" if step is untraced_step_us else "traced step"
    idle_traced = max(traced - busy, 0.0)
    idle = max(step - busy, 0.0)
    scale = idle / idle_traced if idle_traced > 0 else 0.0
    input_idle = min(_num(summary, "input_idle_us_per_step"), idle_traced) * scale
    sync_idle = min(_num(summary, "sync_idle_us_per_step"), idle_traced) * scale
    gloo = min(_num(summary, "comm_host_us_per_step"), idle_traced) * scale
    rest = max(idle - input_idle - sync_idle - gloo, 0.0)
    fr = {
        "gpu": max(busy - nccl, 0.0) / step,
        "input": input_idle / step,
        "sync": sync_idle / step,
        "communication": (gloo + min(nccl, busy)) / step,
        "host": rest / step,
    }
    total = sum(fr.values())
    if total > 1.0:  # idle shares measured on the traced step overlap a little: keep them a whole
        fr = {k: v / total for k, v in fr.items()}
    mean_kernel = _num(summary, "mean_kernel_us")
    launch = bool(kernels) and mean_kernel < SMALL_KERNEL_US
    names = {
        "gpu": GPU_BOUND,
        "input": INPUT_BOUND,
        "sync": SYNC_BOUND,
        "communication": COMM_BOUND,
        "host": LAUNCH_BOUND if launch else HOST_BOUND,
    }
    top = max(fr, key=lambda k: fr[k])
    bound = names[top]
    note = ""
    if basis == "traced step" and top == "host":
        note = (
            "shares of the traced step: the tracer's own host time is in 'host'; "
            "--overhead measures the untraced step"
        )
    codes, kinds = EXPLAINS[bound]
    explained = []
    for r in rows:
        status = getattr(r, "status", "")
        if status not in ("confirmed", "runtime-only"):
            continue
        if (r.code and r.code in codes) or (not r.code and set(r.kinds) & kinds):
            cost = f" ({_us(r.cost_us_per_step)} per step)" if r.cost_us_per_step > 0 else ""
            explained.append(
                f"{r.path}:{r.line} {r.code or 'runtime-only ' + '/'.join(r.kinds)}{cost}"
            )
    return Verdict(bound, step, basis, fr, facts, LEVERS[bound], explained[:5], note)


def _us(x: float) -> str:
    if x >= 1000:
        return f"{x / 1000:,.2f} ms"
    return f"{x:,.0f} µs" if x >= 10 else f"{x:.1f} µs"


def headline(v: Verdict) -> list[str]:
    """The verdict's lines, printed before the per-line table."""
    if v.bound == NOT_MEASURED:
        lines = [f"verdict: not measured: {v.note or 'no step in the window'}"]
        if v.fractions:
            lines.append(
                "measured on the host: "
                + ", ".join(f"{k} {x * 100:.0f}%" for k, x in v.fractions.items())
                + f" of the {_us(v.step_us or 0)} traced step"
            )
        return lines
    parts = ", ".join(
        f"{k} {x * 100:.0f}%" for k, x in sorted(v.fractions.items(), key=lambda kv: -kv[1])
    )
    f = v.facts
    kern = ""
    if f.get("kernels_per_step"):
        kern = f"; {f['kernels_per_step']:g} kernels per step, mean {f.get('mean_kernel_us') or 0:g} µs"
        if f.get("launch_us_mean"):
            kern += f" (launch call {f['launch_us_mean']:g} µs, traced)"
    lines = [
        f"verdict: {v.bound}: {parts} of the {_us(v.step_us or 0)} {v.basis}{kern}",
        f"lever: {v.lever}",
    ]
    if v.explained_by:
        lines.append("explained by: " + "; ".join(v.explained_by))
    else:
        lines.append("explained by: no static finding or runtime cost at a line")
    if v.note:
        lines.append(f"note: {v.note}")
    return lines
