import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword
from gpulint.rule import Rule

_TRAINS = re.compile(r"\.backward\(|DistributedDataParallel|FullyShardedDataParallel|fully_shard\(")
_DEVICE_TEST = ("is_available", "mps", "cpu", "device_type", "device.type", "backend")
# A platform guard: NCCL does not exist on Windows or macOS, so gloo is the only choice there.
_PLATFORM_TEST = ("platform", "os.name", "win32", "darwin", "Windows")
_INIT = {
    "torch.distributed.init_process_group",
    "torch.distributed.distributed_c10d.init_process_group",
}


class NonNcclBackend(Rule):
    """
    ## What it does
    Finds `torch.distributed.init_process_group` with the `gloo` or `mpi` backend, or with no
    backend, in a module that trains on CUDA. Explicit CPU fallbacks
    (`"nccl" if torch.cuda.is_available() else "gloo"`), backends from variables, device-mapped
    backends (`"cpu:gloo,cuda:nccl"`) and extra gloo groups made with `new_group` for object
    collectives are left alone.

    ## Why is this bad?
    NCCL is the collective library built for NVIDIA GPUs: it moves gradients GPU-to-GPU over
    NVLink and InfiniBand. Gloo all-reduces CUDA tensors through host memory and is many times
    slower; PyTorch's documentation says to use NCCL for distributed GPU training. With no
    backend (an info), PyTorch 2.x picks per device at run time: NCCL for CUDA tensors where it
    detects CUDA, gloo where it does not. Naming NCCL makes a job that lost its GPUs (a wrong
    `CUDA_VISIBLE_DEVICES`, a CPU node) fail at start instead of training on gloo.

    ## Example
    ```python
    dist.init_process_group(backend="gloo")
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    ```

    ## Use instead
    ```python
    dist.init_process_group(backend="nccl")
    model = DDP(model.cuda(local_rank), device_ids=[local_rank])
    ```

    ## References
    - [Distributed communication package: which backend to use?](https://docs.pytorch.org/docs/stable/distributed.html#which-backend-to-use)
    - [PyTorch distributed overview](https://docs.pytorch.org/tutorials/beginner/dist_overview.html)
    """

    code = "GPU401"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "non-nccl-backend"
    bench = "nccl"
    triggers = ("init_process_group",)
    message = '`{backend}` backend in CUDA training: collectives go through host memory; use `backend="nccl"`'
    tags = ("distributed",)

    VALID = [
        """
import torch
import torch.distributed as dist
if torch.cuda.is_available():
    dist.init_process_group("nccl")
elif torch.backends.mps.is_available():
    dist.init_process_group(backend="gloo")
else:
    dist.init_process_group(backend="gloo")
loss.backward()
""",
        'import torch\nimport torch.distributed as dist\ndist.init_process_group("nccl")\nloss.backward()\nx.cuda()\n',
        'import torch\nimport torch.distributed as dist\ndist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")\nloss.backward()\n',
        'import torch.distributed as dist\ndist.init_process_group("gloo")  # CPU-only trainer\nloss.backward()\n',
        "import torch\nimport torch.distributed as dist\ndist.init_process_group(backend=args.backend)\nloss.backward()\nx.cuda()\n",
    ]
    INVALID = [
        'import torch\nimport torch.distributed as dist\ndist.init_process_group(backend="gloo")\nloss.backward()\nx.cuda()\n',
        'import torch\nfrom torch.distributed import init_process_group\ninit_process_group("mpi")\nmodel = DistributedDataParallel(model.cuda())\n',
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        # Unit tests run collectives on the CPU with gloo on purpose (CI runners have no GPU).
        if file.qualname(node) not in _INIT or file.is_test:
            return
        if not file.uses_cuda or not _TRAINS.search(file.text):
            return
        if _in_device_branch(node, file):
            return  # `if torch.cuda.is_available(): ... else: init_process_group("gloo")`
        backend = keyword(node, "backend")
        value = backend.value if backend else (node.args[0] if node.args else None)
        if value is None:
            if has_star_kwargs(node):
                return
            yield self.report(
                file,
                node,
                "`init_process_group` with no backend in CUDA training: PyTorch picks one from "
                "the devices it detects at run time (NCCL where it sees CUDA, gloo where it "
                'does not); name `backend="nccl"` so a job that lost its GPUs fails at start',
                severity=Severity.INFO,
            )
            return
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            name = value.value.lower()
            if "nccl" not in name and name in {"gloo", "mpi", "ucc"}:
                yield self.report(file, value, backend=value.value)


def _in_device_branch(node, file: PythonFile) -> bool:
    """Inside an if/elif/else chain that chooses by device: an explicit fallback, not a mistake."""
    for ancestor in file.ancestors(node):
        if isinstance(ancestor, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        if isinstance(ancestor, ast.If) and any(
            t in ast.unparse(ancestor.test) for t in _DEVICE_TEST + _PLATFORM_TEST
        ):
            return True
    return False
