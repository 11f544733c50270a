import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword
from gpulint.rule import Exemption, Rule

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
    backend, in a module that trains on CUDA (it calls `backward()` or wraps a model in DDP or
    FSDP). The backend is judged where it is written as a string literal: one chosen at run
    time (a variable, an option, `"nccl" if torch.cuda.is_available() else "gloo"`) is the
    author's choice. Only the default group is judged: extra gloo groups made with `new_group`
    for object collectives are not.

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

    ## Known problems
    A backend per device is not read further: `"cuda:gloo"` goes unreported.

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

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: unit tests run collectives on the CPU with gloo on purpose (CI runners have "
            "no GPU).",
            'import torch\nimport torch.distributed as dist\ndist.init_process_group("gloo")\n'
            "loss = model(x.cuda()).sum()\nloss.backward()\n",
            filename="tests/test_distributed.py",
        ),
        Exemption(
            "no-training",
            "A CUDA module that neither calls `backward()` nor wraps a model in DDP or FSDP (an "
            "inference or evaluation script): its collectives carry no gradients.",
            'import torch\nimport torch.distributed as dist\ndist.init_process_group("gloo")\n'
            "with torch.no_grad():\n    out = model(x.cuda())\n",
        ),
        Exemption(
            "device-or-platform-branch",
            "A call in an `if` chosen by the device or the platform (`if "
            'torch.cuda.is_available(): ... else: init_process_group("gloo")`, `if '
            'sys.platform == "win32":`): an explicit fallback where NCCL is missing.',
            fixture="python/gpu401_silent_platform_guard.py",
        ),
        Exemption(
            "kwargs-may-set-it",
            "No backend, but `**kwargs` that may hold one.",
            "import torch\nimport torch.distributed as dist\n"
            "dist.init_process_group(**cfg.dist_kwargs)\nloss = model(x.cuda()).sum()\n"
            "loss.backward()\n",
        ),
        Exemption(
            "device-mapped-backend",
            'A backend per device (`"cpu:gloo,cuda:nccl"`): gloo for the CPU tensors, NCCL '
            "for the CUDA ones.",
            "import torch\nimport torch.distributed as dist\n"
            'dist.init_process_group(backend="cpu:gloo,cuda:nccl")\n'
            "loss = model(x.cuda()).sum()\nloss.backward()\n",
        ),
    )

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
        if file.qualname(node) not in _INIT or self.exempt("test-code", file.is_test):
            return
        if not file.uses_cuda or self.exempt("no-training", not _TRAINS.search(file.text)):
            return
        if self.exempt("device-or-platform-branch", _in_device_branch(node, file)):
            return
        backend = keyword(node, "backend")
        value = backend.value if backend else (node.args[0] if node.args else None)
        if value is None:
            if self.exempt("kwargs-may-set-it", has_star_kwargs(node)):
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
            # "gloo", or "cpu:gloo,cuda:nccl": a backend for each device
            backends = {part.rpartition(":")[2] for part in name.split(",")}
            if not backends & {"gloo", "mpi", "ucc"}:
                return
            if self.exempt("device-mapped-backend", ":" in name or "," in name):
                return
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
