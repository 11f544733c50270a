import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.training import forward_only
from gpulint.rule import Exemption, Rule

_DATA_PARALLEL = {
    "torch.nn.DataParallel",
    "torch.nn.parallel.DataParallel",
    "torch.nn.parallel.data_parallel.DataParallel",
    "torch.nn.parallel.data_parallel",
    "torch.nn.parallel.data_parallel.data_parallel",
}


class DataParallel(Rule):
    """
    ## What it does
    Finds `torch.nn.DataParallel(model)` (and the functional `data_parallel`), through any import
    or alias, where the wrapped model is trained. Only calls are judged: `isinstance(model,
    nn.DataParallel)` checks are not.

    ## Why is this bad?
    `DataParallel` runs one Python process that drives every GPU from threads: each step it
    scatters the batch from GPU 0, replicates the model onto every device, gathers the outputs
    back to GPU 0 and reduces the gradients there. The GIL, the replication and the unbalanced
    GPU 0 make it much slower than `DistributedDataParallel`, which runs one process per GPU and
    overlaps the gradient all-reduce with the backward pass. PyTorch's documentation recommends
    DDP even on a single machine.

    ## Example
    ```python
    model = torch.nn.DataParallel(model).cuda()
    ```

    ## Use instead
    ```python
    # launched with: torchrun --nproc-per-node=NUM_GPUS train.py
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    model = DistributedDataParallel(model.cuda(local_rank), device_ids=[local_rank])
    ```

    ## Known problems
    Inference is told from training within the module (and the functions it calls that the
    analysis resolves): a builder that returns the wrapper for a caller to train keeps the
    finding. Vendored copies of metric packages are left to the file discovery's vendored-code
    rules.

    ## References
    - [DataParallel (PyTorch docs: use DistributedDataParallel instead)](https://docs.pytorch.org/docs/stable/generated/torch.nn.DataParallel.html)
    - [DistributedDataParallel](https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html)
    - [torchrun (Elastic Launch)](https://docs.pytorch.org/docs/stable/elastic/run.html)
    """

    code = "GPU402"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "data-parallel"
    triggers = ("DataParallel", "data_parallel")
    message = (
        "`{func}` drives every GPU from one process and gathers on GPU 0; use "
        "`DistributedDataParallel(model, device_ids=[local_rank])` launched with `torchrun`"
    )
    tags = ("distributed",)

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test wraps a model to check that it runs, not to train it.",
            "import torch\nmodel = torch.nn.DataParallel(model).cuda()\n",
            filename="tests/test_model.py",
        ),
        Exemption(
            "inference-only",
            "Inference across GPUs: the functional `data_parallel(net, inputs)` under "
            "`torch.no_grad()` or `torch.inference_mode()`, a model put in eval mode where it is "
            "built (`DataParallel(FAN(path).eval())`, a frozen Inception network for FID wrapped "
            "after `net.eval()`) and never put back with `.train()`, and, in a module that "
            "neither calls backward nor steps an optimizer (here or in a function it calls that "
            "the analysis resolves), a wrapper put in eval mode or only ever called. Without "
            "gradients there is nothing for DistributedDataParallel to reduce or overlap, and a "
            "one-process split of the batch is the simple way to use several GPUs for a one-off "
            "evaluation.",
            fixture="python/gpu402_silent_inference_only.py",
        ),
    )

    VALID = [
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "model = DDP(model.cuda(rank), device_ids=[rank])\n",
        "import torch.nn as nn\nif isinstance(model, nn.DataParallel):\n    model = model.module\n",
        "from mylib import DataParallel\nmodel = DataParallel(model)\n",
    ]
    INVALID = [
        "import torch\nmodel = torch.nn.DataParallel(model).cuda()\n",
        "from torch import nn\nnet = nn.DataParallel(net, device_ids=[0, 1])\n",
        "from torch.nn.parallel import DataParallel as DP\nmodel = DP(model)\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        qualified = file.qualname(node)
        if qualified not in _DATA_PARALLEL or self.exempt("test-code", file.is_test):
            return
        func = qualified.rsplit(".", 1)[1]
        if self.exempt(
            "inference-only", forward_only(file, node, runs_now=func == "data_parallel")
        ):
            return
        yield self.report(file, node, func=func)
