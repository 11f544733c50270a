"""``gpulint probe``: what the machine is, in one screen. Works without torch and without a GPU.

torch, CUDA, driver, cuDNN and NCCL versions; each device with its compute capability, SMs,
memory, shared memory per block (default and opt-in) and L2; the flash-attention implementations
torch has registered and the one active; the environment variables that change GPU behaviour.
"""

from __future__ import annotations

import os
import platform
import sys

from gpulint import __version__

ENV_EXACT = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_MODULE_LOADING",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "OMP_NUM_THREADS",
)
ENV_PREFIXES = ("NCCL_", "TORCH_", "TORCHINDUCTOR_", "NVSHMEM_")


def cudnn_version(v: int | None) -> str | None:
    """91900 -> "9.19.0" (cuDNN 9 encodes major*10000); 8902 -> "8.9.2" (cuDNN 8: major*1000)."""
    if not v:
        return None
    if v >= 90000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def relevant_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {
        k: env[k]
        for k in sorted(env)
        if k in ENV_EXACT or any(k.startswith(p) for p in ENV_PREFIXES)
    }


def nvml_info() -> dict:
    """Driver and devices as NVML sees them (no torch needed)."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"NVML failed: {exc}"}
    try:

        def text(x):
            return x.decode() if isinstance(x, bytes) else str(x)

        info = {
            "available": True,
            "driver": text(pynvml.nvmlSystemGetDriverVersion()),
            "devices": [],
        }
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()
            info["driver_cuda"] = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:
            pass
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            info["devices"].append(
                {
                    "index": i,
                    "name": text(pynvml.nvmlDeviceGetName(h)),
                    "memory_bytes": int(mem.total),
                }
            )
        return info
    except Exception as exc:
        return {"available": False, "reason": f"NVML failed: {exc}"}
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def torch_info() -> dict:
    try:
        import torch
    except ImportError:
        return {"available": False, "reason": "torch is not installed (pip install gpulint[bench])"}
    except Exception as exc:  # a broken install says so, rather than crashing the probe
        return {"available": False, "reason": f"torch failed to import: {exc}"}
    info: dict = {
        "available": True,
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": bool(torch.cuda.is_available()),
    }
    try:
        info["cudnn"] = cudnn_version(
            torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
        )
    except Exception:
        info["cudnn"] = None
    try:
        nccl = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        info["nccl"] = None
    info["flash_attention_impls"] = flash_impls()
    devices = []
    if info["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            devices.append(device_properties(i))
    else:
        info["reason"] = "torch sees no CUDA device"
    info["devices"] = devices
    return info


def flash_impls() -> dict:
    try:
        import torch.nn.attention as attn
    except Exception as exc:
        return {"registered": [], "active": None, "reason": str(exc)}
    lister = getattr(attn, "list_flash_attention_impls", None)
    if lister is None:
        return {"registered": [], "active": None, "reason": "this torch has no flash-impl registry"}
    current = getattr(attn, "current_flash_attention_impl", None)
    try:
        registered = list(lister())
    except Exception as exc:
        return {"registered": [], "active": None, "reason": str(exc)}
    try:
        active = current() if current else None
    except Exception:
        active = None
    return {"registered": registered, "active": active}


def device_properties(index: int) -> dict:
    import torch

    p = torch.cuda.get_device_properties(index)

    def attr(*names):
        for n in names:
            if hasattr(p, n):
                return getattr(p, n)
        return None

    return {
        "index": index,
        "name": p.name,
        "compute_capability": f"{p.major}.{p.minor}",
        "sm_count": p.multi_processor_count,
        "memory_bytes": int(p.total_memory),
        "shared_memory_per_block": attr("shared_memory_per_block"),
        "shared_memory_per_block_optin": attr("shared_memory_per_block_optin"),
        "shared_memory_per_sm": attr("shared_memory_per_multiprocessor"),
        "l2_cache_bytes": attr("L2_cache_size", "l2_cache_size"),
        "uuid": str(attr("uuid")) if attr("uuid") is not None else None,
    }


def collect() -> dict:
    from .roofline import table_name_for

    t = torch_info()
    n = nvml_info()
    for d in t.get("devices", []):
        d["table_name"] = table_name_for(d["name"])
    return {
        "gpulint": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": t,
        "nvml": n,
        "env": relevant_env(),
    }


def _mib(n: int | None) -> str:
    return "?" if not n else f"{n / 2**20:.0f} MiB"


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**30:.1f} GiB"


def render(info: dict) -> str:
    t, n = info["torch"], info["nvml"]
    out = [f"gpulint {info['gpulint']}, Python {info['python']}, {info['platform']}"]
    if t["available"]:
        out.append(
            f"torch {t['version']}  CUDA {t['cuda'] or 'none (CPU build)'}  "
            f"cuDNN {t.get('cudnn') or 'n/a'}  NCCL {t.get('nccl') or 'n/a'}"
        )
    else:
        out.append(f"torch: not available: {t['reason']}")
    if n["available"]:
        cuda = f" (supports CUDA {n['driver_cuda']})" if n.get("driver_cuda") else ""
        out.append(f"driver {n['driver']}{cuda}")
    else:
        out.append(f"driver: unknown: {n['reason']}")
    devices = t.get("devices") or []
    if devices:
        out.append("devices:")
        for d in devices:
            smem = d.get("shared_memory_per_block_optin") or d.get("shared_memory_per_block")
            table = d.get("table_name") or "not in the hardware table (no roofline)"
            out.append(
                f"  [{d['index']}] {d['name']}  sm_{d['compute_capability'].replace('.', '')}  "
                f"{d['sm_count']} SMs  {_gib(d['memory_bytes'])}  "
                f"smem/block {smem if smem is not None else '?'} B (opt-in)  "
                f"L2 {_mib(d.get('l2_cache_bytes'))}  "
                f"table: {table}"
            )
    elif n.get("available") and n.get("devices"):
        out.append("devices (NVML only; torch cannot use them):")
        for d in n["devices"]:
            out.append(f"  [{d['index']}] {d['name']}  {_gib(d['memory_bytes'])}")
    else:
        out.append("no GPU: nothing to benchmark here (the linter works without one)")
    if t["available"]:
        fa = t.get("flash_attention_impls") or {}
        reg = ", ".join(fa.get("registered") or []) or "none"
        out.append(f"flash-attention impls registered: {reg}; active: {fa.get('active') or 'none'}")
    env = info["env"]
    if env:
        out.append("environment:")
        out.extend(f"  {k}={v}" for k, v in env.items())
    else:
        out.append(
            "environment: none of CUDA_VISIBLE_DEVICES, PYTORCH_ALLOC_CONF, NCCL_*, TORCH_* set"
        )
    return "\n".join(out)
