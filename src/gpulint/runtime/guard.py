"""The shared-GPU guard: never start a load on a GPU someone else is using.

A stray load on a shared box silently kills a co-tenant's in-flight job. Before a bench touches
a GPU, ``check_gpus`` asks NVML (nvidia-ml-py) for the processes on every GPU the run may use
(those named by CUDA_VISIBLE_DEVICES, or all) and for their utilization. Another process, or a
busy GPU with no process we can see (a co-tenant in another container), refuses the run unless
the user passes --force. If NVML cannot answer, the guard cannot vouch for the GPU and refuses
too: --force is the user's word that the GPU is theirs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

BUSY_UTILIZATION_PCT = 10  # above this with no visible process, someone else is computing


@dataclass
class GuardReport:
    ok: bool
    checked: bool
    message: str
    gpus: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "checked": self.checked, "message": self.message, "gpus": self.gpus}


def _visible_selectors() -> list[str] | None:
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None or raw.strip() == "":
        return None if raw is None else []
    return [s.strip() for s in raw.split(",") if s.strip()]


def _text(x: object) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def check_gpus(nvml=None, own_pids: set[int] | None = None) -> GuardReport:
    """Look for other processes and load on the GPUs this run may use.

    ``nvml`` is the ``pynvml`` module (injectable for tests); ``own_pids`` are processes that
    belong to this run (this process and its parent by default).
    """
    mine = own_pids if own_pids is not None else {os.getpid(), os.getppid()}
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]  # nvidia-ml-py
        except ImportError:
            return GuardReport(
                False,
                False,
                "cannot check whether the GPU is shared: nvidia-ml-py is not installed "
                "(pip install gpulint[bench]); pass --force if the GPU is yours alone",
            )
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError and friends: no driver, no device
        return GuardReport(
            False,
            False,
            f"cannot check whether the GPU is shared: NVML failed ({exc}); "
            "pass --force if the GPU is yours alone",
        )
    try:
        count = nvml.nvmlDeviceGetCount()
        selectors = _visible_selectors()
        gpus: list[dict] = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            if selectors is not None and not any(
                s == str(index) or (s.startswith("GPU-") and uuid.startswith(s)) for s in selectors
            ):
                continue
            procs = []
            for getter in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                fn = getattr(nvml, getter, None)
                if fn is None:
                    continue
                try:
                    procs.extend(fn(handle))
                except Exception:
                    continue
            others = []
            for p in procs:
                pid = int(getattr(p, "pid", -1))
                if pid in mine:
                    continue
                used = getattr(p, "usedGpuMemory", None)
                others.append(
                    {"pid": pid, "used_memory_bytes": used if isinstance(used, int) else None}
                )
            try:
                util = int(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
            except Exception:
                util = None
            gpus.append(
                {
                    "index": index,
                    "name": _text(nvml.nvmlDeviceGetName(handle)),
                    "uuid": uuid,
                    "other_processes": others,
                    "utilization_pct": util,
                }
            )
    except Exception as exc:
        return GuardReport(
            False,
            False,
            f"cannot check whether the GPU is shared: {exc}; "
            "pass --force if the GPU is yours alone",
        )
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass

    if not gpus:
        return GuardReport(False, True, "no GPU visible to NVML (check CUDA_VISIBLE_DEVICES)", gpus)
    busy = []
    for g in gpus:
        if g["other_processes"]:
            pids = ", ".join(str(p["pid"]) for p in g["other_processes"])
            busy.append(f"GPU {g['index']} ({g['name']}) has other processes: {pids}")
        elif g["utilization_pct"] is not None and g["utilization_pct"] > BUSY_UTILIZATION_PCT:
            busy.append(
                f"GPU {g['index']} ({g['name']}) is {g['utilization_pct']}% busy with no process "
                "visible here (another container?)"
            )
    if busy:
        return GuardReport(
            False,
            True,
            "refusing to load a shared GPU: " + "; ".join(busy) + ". Pass --force only if "
            "you own these processes.",
            gpus,
        )
    names = ", ".join(f"{g['index']}:{g['name']}" for g in gpus)
    return GuardReport(True, True, f"GPU free: no other process on {names}", gpus)
