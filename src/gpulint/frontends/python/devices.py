"""Device facts: does this module put tensors or models on an accelerator?

A module is GPU code when its text says `cuda`, or when it moves tensors or models to a device
that is not provably the CPU, whatever the device's spelling: `x.to(args.device)`,
`device=cfg.device`, `torch.device(device_type)`, an `Accelerator()`/`Fabric()` object or its
`.device`, `torch.accelerator.current_accelerator()`, a trainer built with
`accelerator="gpu"`, a parameter or attribute annotated as an accelerator object
(`accelerator: Accelerator`), DeepSpeed's `get_accelerator()`, a device read from a mapping
(`x.to(cfg["device"])`), and a trainer framework that runs on the GPU unless told otherwise (a
`LightningModule`, a Lightning or Hugging Face `Trainer` and their subclasses), where nothing in
the file chooses the CPU (`accelerator="cpu"`, `use_cpu=True`, `no_cuda=True`). A device is
provably the CPU when every
value that reaches it is the constant "cpu" (or "meta"): `def run(x, device="cpu"): x.to(device)`
with no other device stays CPU code, as do `device = "cpu"` scripts. A TPU (`xm.xla_device()`),
MPS or XPU device is not a CUDA GPU either: such a module is CUDA code only if its text says so.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from gpulint.frontends.python.names import keyword, terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_CUDA_TEXT = re.compile(r"\bcuda\b")
# Cheap gate before any tree is looked at: each device spelling below contains one of these
# (any case; found in the lower-cased text: an IGNORECASE alternation scans 7x slower).
_DEVICE_WORDS = ("device", "rank", "gpu", "accelerat", "fabric", "lightning", "trainer")
_DEVICE_NAME = re.compile(r"device|^dev$|gpu|rank$|accelerator", re.IGNORECASE)
# Devices that are not CUDA GPUs: the host, and other accelerators whose code the CUDA rules do
# not describe (a TPU through torch_xla, Apple's MPS, Intel's XPU, Habana's HPU, Ascend's NPU).
_HOST_DEVICES = {"cpu", "meta", "xla", "mps", "xpu", "hpu", "npu"}
_OTHER_ACCELERATORS = {
    "torch_xla.core.xla_model.xla_device",
    "torch_xla.device",
    "torch_xla.torch_xla.device",
}
_ACCELERATOR_OBJECTS = {
    "accelerate.Accelerator",
    "lightning.Fabric",
    "lightning.fabric.Fabric",
    "lightning_fabric.Fabric",
    "torch.accelerator.current_accelerator",
}


# Trainer frameworks that put the model on the GPU when there is one (Lightning's
# `accelerator="auto"`, the Hugging Face Trainer's default device): their modules, trainers
# and subclasses are GPU code unless the file chooses the CPU.
_FRAMEWORK_ROOTS = ("pytorch_lightning", "lightning", "transformers", "trl")
_FRAMEWORK_CLASSES = re.compile(r"(^|\.)(LightningModule|\w*Trainer)$")
_CPU_CHOICES = {"use_cpu", "no_cuda"}  # `TrainingArguments(use_cpu=True)`


def uses_gpu(file: PythonFile) -> bool:
    if _CUDA_TEXT.search(file.text):
        return True
    lowered = file.text.lower()
    if not any(word in lowered for word in _DEVICE_WORDS):
        return False
    if any(q.startswith("torch_xla") for q in file.bindings.values()):
        return False  # XLA code (a TPU): its devices are XLA's whatever their spelling
    if _annotated_accelerator(file):
        return True
    qualname = file.qualname
    framework = False  # a trainer framework's class used or subclassed
    cpu = False
    for cls in file.nodes(ast.ClassDef):
        framework = framework or any(_framework_class(qualname(b)) for b in cls.bases)
    for call in file.nodes_by_type.get(ast.Call, ()):
        assert isinstance(call, ast.Call)
        func = call.func
        q = qualname(func)
        if q in _ACCELERATOR_OBJECTS or (q is not None and _deepspeed_accelerator(q)):
            return True
        # `Trainer(accelerator="cpu")`, `TrainingArguments(use_cpu=True)`: the framework's
        # default device is not the one used
        cpu = cpu or _chooses_cpu(call)
        framework = framework or _framework_class(q)
        if q == "torch.device":
            arg = call.args[0] if call.args else getattr(keyword(call, "type"), "value", None)
            if arg is not None and not provably_host(file, arg):
                return True
            continue
        chosen = keyword(
            call, "accelerator"
        )  # `Trainer(accelerator="gpu")`, `Fabric(accelerator="cuda")`
        if (
            chosen is not None
            and isinstance(chosen.value, ast.Constant)
            and chosen.value.value in ("gpu", "cuda")
        ):
            return True
        device = keyword(call, "device")
        if device is not None and not provably_host(file, device.value):
            return True
        if isinstance(func, ast.Attribute) and func.attr == "to" and call.args:
            target = call.args[0]
            name = terminal_name(target) or _mapping_key(target)
            if name and _DEVICE_NAME.search(name) and not provably_host(file, target):
                return True
    return framework and not cpu


def _framework_class(q: str | None) -> bool:
    return (
        q is not None
        and q.split(".", 1)[0] in _FRAMEWORK_ROOTS
        and bool(_FRAMEWORK_CLASSES.search(q))
    )


def _deepspeed_accelerator(q: str) -> bool:
    """`deepspeed.accelerator.get_accelerator()`: the accelerator DeepSpeed runs on."""
    return q.endswith("accelerator.get_accelerator")


def _chooses_cpu(call: ast.Call) -> bool:
    for kw in call.keywords:
        value = kw.value
        if not isinstance(value, ast.Constant):
            continue
        if kw.arg in _CPU_CHOICES and value.value is True:
            return True
        if kw.arg == "accelerator" and value.value == "cpu":
            return True
    return False


def _mapping_key(target: ast.AST) -> str | None:
    """`"device"` in `cfg["device"]`, `config.get("device")`: a device read from a mapping."""
    if isinstance(target, ast.Subscript):
        key = target.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            return key.value
    if (
        isinstance(target, ast.Call)
        and isinstance(target.func, ast.Attribute)
        and target.func.attr == "get"
        and target.args
        and isinstance(target.args[0], ast.Constant)
        and isinstance(target.args[0].value, str)
    ):
        return target.args[0].value
    return None


def _annotated_accelerator(file: PythonFile) -> bool:
    """`def train(model, accelerator: Accelerator)`, `self.fabric: Fabric`: an accelerator object
    the file is handed rather than builds."""
    annotations: list[ast.expr] = [
        a.annotation for a in file.nodes(ast.arg) if a.annotation is not None
    ]
    annotations += [a.annotation for a in file.nodes(ast.AnnAssign)]
    for annotation in annotations:
        if isinstance(annotation, (ast.Name, ast.Attribute)):
            if file.qualname(annotation) in _ACCELERATOR_OBJECTS:
                return True
    return False


def provably_host(file: PythonFile, expr: ast.AST, depth: int = 0) -> bool:
    """Every value that can reach `expr` is a device that is not a CUDA GPU: the host ("cpu",
    "meta", None) or another accelerator ("xla" / `xm.xla_device()`, "mps", "xpu"...)."""
    if depth > 4:
        return False
    if isinstance(expr, ast.Constant):
        value = expr.value
        return value is None or (
            isinstance(value, str) and value.split(":")[0].lower() in _HOST_DEVICES
        )
    if isinstance(expr, ast.IfExp):
        return provably_host(file, expr.body, depth + 1) and provably_host(
            file, expr.orelse, depth + 1
        )
    if isinstance(expr, ast.Call) and file.qualname(expr) == "torch.device" and expr.args:
        return provably_host(file, expr.args[0], depth + 1)
    if isinstance(expr, ast.Call) and file.qualname(expr) in _OTHER_ACCELERATORS:
        return True
    if isinstance(expr, ast.Name):
        bindings = file.model.bindings_of(expr.id, before=expr)
        return bool(bindings) and all(
            b.value is not None and provably_host(file, b.value, depth + 1) for b in bindings
        )
    return False


# -- where tensors and models are placed, per rank ----------------------------------------------

BARE, INDEXED, UNKNOWN = "bare", "indexed", "unknown"
_RANK_NAME = re.compile(r"rank|gpu_id|device_id|gpu$|local_device", re.IGNORECASE)


def placements(file: PythonFile) -> list[tuple[ast.AST, str]]:
    """Every placement on a CUDA device and whether it names the device per process:
    INDEXED (`.cuda(local_rank)`, `f"cuda:{rank}"`, `torch.device("cuda", rank)`, `.to(rank)`),
    BARE (`.cuda()`, `"cuda"`, `"cuda:0"`: the current device, GPU 0 unless set), or UNKNOWN
    (`.to(args.device)`: a value this file does not spell). Host placements are left out."""
    out: list[tuple[ast.AST, str]] = []
    for call in file.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "cuda" and file.qualname(call) is None:
            index = call.args[0] if call.args else getattr(keyword(call, "device"), "value", None)
            out.append((call, INDEXED if index is not None else BARE))
            continue
        q = file.qualname(call)
        if q == "torch.device":
            if len(call.args) >= 2:
                out.append((call, INDEXED))
            elif call.args:
                kind = _device_value(file, call.args[0], call, 0)
                if kind is not None:
                    out.append((call, kind))
            continue
        target: ast.AST | None = None
        if isinstance(func, ast.Attribute) and func.attr == "to" and call.args:
            target = call.args[0]
        else:
            found = keyword(call, "device")
            target = found.value if found is not None else None
        if target is not None:
            kind = _device_value(file, target, call, 0)
            if kind is not None:
                out.append((call, kind))
    return out


def _device_value(file: PythonFile, value: ast.AST, at: ast.AST, depth: int) -> str | None:
    """The kind of a device value; None for the host or for what is not a device at all."""
    if depth > 3:
        return UNKNOWN
    if isinstance(value, ast.Constant):
        if isinstance(value.value, str):
            text = value.value.lower()
            if text.startswith("cuda"):
                return BARE  # "cuda", "cuda:0": the same GPU for every process
            return None
        if isinstance(value.value, int) and not isinstance(value.value, bool):
            return BARE
        return None
    if isinstance(value, ast.JoinedStr):
        head = "".join(str(v.value) for v in value.values if isinstance(v, ast.Constant))
        if "cuda" in head.lower():
            return INDEXED if any(isinstance(v, ast.FormattedValue) for v in value.values) else BARE
        return None
    if isinstance(value, ast.Call):
        q = file.qualname(value)
        if q == "torch.device":
            if len(value.args) >= 2:
                return INDEXED
            if value.args:
                return _device_value(file, value.args[0], value, depth + 1)
            return UNKNOWN
        if isinstance(value.func, ast.Attribute) and value.func.attr == "format":
            return INDEXED if "cuda" in file.segment(value.func.value).lower() else UNKNOWN
        return UNKNOWN
    if isinstance(value, ast.BinOp):
        return INDEXED if "cuda" in file.segment(value).lower() else UNKNOWN
    if isinstance(value, ast.Name):
        if _RANK_NAME.search(value.id):
            return INDEXED  # `.to(local_rank)`
        bound = file.model.bindings_of(value.id, before=at)
        kinds = {
            _device_value(file, b.value, b.node, depth + 1) if b.value is not None else UNKNOWN
            for b in bound
        }
        if not kinds:
            return UNKNOWN
        if kinds == {None}:
            return None
        kinds.discard(None)
        return kinds.pop() if len(kinds) == 1 else UNKNOWN
    if isinstance(value, ast.Attribute):
        return INDEXED if _RANK_NAME.search(value.attr) else UNKNOWN
    return UNKNOWN
