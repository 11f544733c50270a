import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword
from gpulint.rule import Exemption, Rule

_DDP = {
    "torch.nn.parallel.DistributedDataParallel",
    "torch.nn.parallel.distributed.DistributedDataParallel",
    "torch.nn.DistributedDataParallel",
}
# A branch that is chosen by the device: the other side is CPU DDP, where device_ids must be None.
_DEVICE_TEST = re.compile(r"cuda|gpu|cpu|device|is_available|backend|nccl|gloo", re.IGNORECASE)
_CPU = re.compile(r"""\.cpu\(\)|["']cpu["']""")


class DdpWithoutDeviceIds(Rule):
    """
    ## What it does
    Finds `DistributedDataParallel(model)` built without `device_ids` in a module that runs on
    CUDA (modules that never use CUDA are not checked).

    ## Why is this bad?
    In the one-GPU-per-process pattern, `device_ids=[local_rank]` tells DDP which single device
    the replica lives on: DDP then moves each step's inputs to that device on its own stream and
    places outputs there. Without it, DDP treats the module as multi-device or CPU and leaves
    input placement to chance; a process whose inputs land on the wrong device pays an extra
    copy every step, or fails. PyTorch's DDP documentation and tutorials always pass
    `device_ids=[local_rank]` with `output_device=local_rank`.

    ## Example
    ```python
    model = DistributedDataParallel(model.cuda(local_rank))
    ```

    ## Use instead
    ```python
    model = DistributedDataParallel(
        model.cuda(local_rank), device_ids=[local_rank], output_device=local_rank
    )
    ```

    ## References
    - [DistributedDataParallel](https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    - [Getting started with distributed data parallel](https://docs.pytorch.org/tutorials/intermediate/ddp_tutorial.html)
    """

    code = "GPU404"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "ddp-without-device-ids"
    severity = Severity.INFO
    triggers = ("DistributedDataParallel",)
    message = (
        "`DistributedDataParallel` without `device_ids` in CUDA code: pass "
        "`device_ids=[local_rank], output_device=local_rank` (one GPU per process)"
    )
    tags = ("distributed",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test wraps a model to check DDP's behaviour, not to train on a GPU per "
            "process.",
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model.cuda(local_rank))\n",
            filename="tests/test_ddp.py",
        ),
        Exemption(
            "kwargs-may-set-it",
            "A call that passes `**kwargs`, which may hold `device_ids`.",
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "model = DDP(model.cuda(), **ddp_kwargs)\n",
        ),
        Exemption(
            "model-on-cpu",
            'A model placed on the CPU (`DDP(model.cpu())`, `model = model.to("cpu")` earlier '
            "in the function): CPU replicas take no `device_ids`.",
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "x = x.cuda()\nmodel = DDP(model.cpu())\n",
        ),
        Exemption(
            "device-branch",
            "A call in a branch chosen by the device (`if torch.cuda.is_available(): ... else: "
            "DDP(model)`): the other side is CPU DDP, where `device_ids` must be None.",
            "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
            "if torch.cuda.is_available():\n    model = DDP(model.cuda(r), device_ids=[r])\n"
            "else:\n    model = DDP(model)\n",
        ),
    )

    VALID = [
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(model.cuda(rank), device_ids=[rank])\n",
        # CPU-only module.
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n",
    ]
    INVALID = [
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(model.cuda(local_rank))\n",
        "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(\n"
        "    model.to(device), find_unused_parameters=True\n)\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if file.qualname(node) not in _DDP or self.exempt("test-code", file.is_test):
            return
        if (
            not file.uses_cuda
            or len(node.args) >= 2
            or not node.args
            and keyword(node, "module") is None
        ):
            return
        if keyword(node, "device_ids") is not None:
            return
        if self.exempt("kwargs-may-set-it", has_star_kwargs(node)):
            return
        given = keyword(node, "module")
        if node.args:
            module = node.args[0]
        elif given is not None:
            module = given.value
        else:
            return  # neither (ruled out above)
        if self.exempt(
            "model-on-cpu",
            _CPU.search(file.segment(module)) or self._model_on_cpu(module, node, file),
        ):
            return
        if self.exempt(
            "device-branch",
            any(
                isinstance(parent, (ast.If, ast.IfExp))
                and _DEVICE_TEST.search(file.segment(parent.test))
                for parent in file.ancestors(node)
            ),
        ):
            return
        yield self.report(file, node)

    @staticmethod
    def _model_on_cpu(module: ast.AST, call: ast.Call, file: PythonFile) -> bool:
        """`model = model.cpu()` / `model.to("cpu")` earlier in the same function."""
        if not isinstance(module, ast.Name):
            return False
        scope = file.enclosing_function(call) or file.tree
        return any(
            isinstance(b.node, ast.Assign)
            and b.node.lineno < call.lineno
            and b.value is not None
            and _CPU.search(file.segment(b.value)) is not None
            for b in file.model.bindings_in(scope, module.id)
        )
