import ast
import re

from gpulint.frontends.python.devices import BARE, INDEXED, UNKNOWN, placements
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword
from gpulint.rule import Exemption, Rule

_INIT = {
    "torch.distributed.init_process_group",
    "torch.distributed.distributed_c10d.init_process_group",
}
_SET_DEVICE = {"torch.cuda.set_device", "torch.cuda.device", "torch.accelerator.set_device_index"}
# The launcher may bind one GPU to each process (srun --gpus-per-task, CUDA_VISIBLE_DEVICES per
# rank): then every process's GPU 0 is its own, and a bare `.cuda()` is right.
_BOUND_BY_LAUNCHER = re.compile(r"CUDA_VISIBLE_DEVICES|SLURM_|OMPI_COMM_WORLD_LOCAL|gpus.per.task")


class ProcessGroupWithoutDevice(Rule):
    """
    ## What it does
    Finds `torch.distributed.init_process_group` with the NCCL backend (named, or the default)
    in a module that never says which GPU each process owns: no `torch.cuda.set_device(...)`,
    no `device_id=` on the call, and every tensor and model placed with a bare `.cuda()`,
    `"cuda"`, `"cuda:0"` or `torch.device("cuda")`, none by rank (`.cuda(local_rank)`,
    `f"cuda:{local_rank}"`).

    ## Why is this bad?
    Under `torchrun` every process of a host sees all of its GPUs, and the current device of
    each is GPU 0 until it is set. A bare `.cuda()` then puts every rank's model and batches on
    GPU 0: the ranks share one GPU's memory and compute while the others idle, and NCCL, which
    needs one GPU per rank, fails or hangs on its first collective ("Duplicate GPU detected").
    Setting the device from `LOCAL_RANK` once, before the process group, fixes every later
    `.cuda()` and lets NCCL bind each communicator to the right GPU.

    ## Example
    ```python
    dist.init_process_group(backend="nccl")
    model = Net().cuda()
    model = DDP(model)
    ```

    ## Use instead
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl", device_id=torch.device("cuda", local_rank))
    model = DDP(Net().cuda(), device_ids=[local_rank])
    ```

    ## References
    - [torch.distributed.init_process_group (device_id)](https://docs.pytorch.org/docs/stable/distributed.html#torch.distributed.init_process_group)
    - [torchrun: environment variables (LOCAL_RANK)](https://docs.pytorch.org/docs/stable/elastic/run.html#environment-variables)
    - [Getting started with DDP](https://docs.pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    """

    code = "GPU406"
    name = "process-group-without-device"
    triggers = ("init_process_group",)
    message = (
        "NCCL process group with no device per process: nothing calls "
        "`torch.cuda.set_device`, and tensors are placed with a bare {spelling} (line {line}), "
        "so every rank of a host uses GPU 0; call `torch.cuda.set_device(local_rank)` first "
        "(or pass `device_id=`)"
    )
    tags = ("distributed", "device")
    tier = "preview"
    bench = "device-per-rank"

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's process group runs on whatever GPU the test machine has.",
            "import torch\nimport torch.distributed as dist\n"
            "dist.init_process_group(backend='nccl')\nmodel = Net().cuda()\n",
            filename="tests/test_distributed.py",
        ),
        Exemption(
            "launcher-binds-gpu",
            "A module that reads launcher bindings (`CUDA_VISIBLE_DEVICES`, `SLURM_*` variables, "
            "`--gpus-per-task`): each process may see only its own GPU, and its GPU 0 is right.",
            "import os, torch\nimport torch.distributed as dist\n"
            "os.environ['CUDA_VISIBLE_DEVICES'] = os.environ['LOCAL_RANK']\n"
            "dist.init_process_group('nccl')\nmodel = Net().cuda()\n",
        ),
        Exemption(
            "kwargs-may-set-it",
            "A process group built with `**kwargs`, which may hold `device_id=` or the backend.",
            "import torch\nimport torch.distributed as dist\n"
            "dist.init_process_group(**dist_kwargs)\nmodel = Net().cuda()\n",
        ),
        Exemption(
            "places-by-rank",
            'A module that places anything by rank (`.cuda(local_rank)`, `f"cuda:{rank}"`, '
            '`torch.device("cuda", rank)`): it knows which GPU each process owns.',
            "import torch\nimport torch.distributed as dist\ndef main(rank):\n"
            "    dist.init_process_group('nccl', rank=rank, world_size=2)\n"
            "    model = Net().to(f'cuda:{rank}')\n    buf = torch.zeros(8).cuda()\n",
        ),
        Exemption(
            "device-from-value",
            "A module that places tensors through a value it does not spell (`.to(args.device)`, "
            "a device handed in): that value may hold the rank.",
            "import torch\nimport torch.distributed as dist\n"
            "dist.init_process_group('nccl')\nmodel = Net().to(args.device)\n"
            "buf = torch.zeros(8).cuda()\n",
        ),
    )

    VALID = [
        "import os, torch\nimport torch.distributed as dist\n"
        "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))\n"
        "dist.init_process_group('nccl')\nmodel = Net().cuda()\n",
        "import torch\nimport torch.distributed as dist\ndef main(rank):\n"
        "    dist.init_process_group('nccl', rank=rank, world_size=2)\n"
        "    model = Net().to(f'cuda:{rank}')\n",
        "import torch\nimport torch.distributed as dist\n"
        "dist.init_process_group('gloo')\nmodel = Net().cuda()\n",
        "import torch\nimport torch.distributed as dist\n"
        "dist.init_process_group('nccl')\nmodel = Net().to(args.device)\n",
    ]
    INVALID = [
        "import torch\nimport torch.distributed as dist\n"
        "dist.init_process_group(backend='nccl')\nmodel = Net().cuda()\n",
        "import torch\nfrom torch.distributed import init_process_group\ndef setup():\n"
        "    init_process_group()\n    device = torch.device('cuda')\n"
        "    return Net().to(device)\n",
    ]

    def finish(self, file: PythonFile):
        if self.exempt("test-code", file.is_test) or self.exempt(
            "launcher-binds-gpu", _BOUND_BY_LAUNCHER.search(file.text)
        ):
            return
        inits = [
            c
            for c in file.model.calls_to(*_INIT)
            if _nccl(c) and not self.exempt("kwargs-may-set-it", has_star_kwargs(c))
        ]
        if not inits or file.model.calls_to(*_SET_DEVICE):
            return
        placed = placements(file)
        kinds = {kind for _, kind in placed}
        if BARE not in kinds:
            return
        if self.exempt("places-by-rank", INDEXED in kinds):
            return
        if self.exempt("device-from-value", UNKNOWN in kinds):
            return
        first = next(node for node, kind in placed if kind == BARE)
        for call in inits:
            yield self.report(
                file, call, spelling=_spelling(file, first), line=getattr(first, "lineno", 0)
            )


def _nccl(call: ast.Call) -> bool:
    """NCCL, named or by default, and no `device_id=` (which binds the group to a GPU); the
    caller sets aside a call with `**kwargs`, which may hold either."""
    if keyword(call, "device_id") is not None:
        return False
    backend = call.args[0] if call.args else getattr(keyword(call, "backend"), "value", None)
    if backend is None:
        return True  # the default: NCCL for CUDA tensors
    return (
        isinstance(backend, ast.Constant)
        and isinstance(backend.value, str)
        and "nccl" in backend.value.lower()
    )


def _spelling(file: PythonFile, node: ast.AST) -> str:
    text = file.segment(node)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "cuda":
            return "`.cuda()`"
        if node.func.attr == "to":
            return f"`.to({file.segment(node.args[0])})`"
    return f"`{text}`" if len(text) < 60 else "device"
