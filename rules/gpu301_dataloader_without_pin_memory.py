import ast

from gpulint.rules._datasets import dataset_on_device, tiny_samples, token_batches

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword
from gpulint.rule import Rule


class DataLoaderWithoutPinMemory(Rule):
    """
    ## What it does
    Finds `torch.utils.data.DataLoader(...)` without `pin_memory=True` in a module that uses
    CUDA. Loaders whose `pin_memory` comes from a variable or `**kwargs`, CPU-only modules,
    tests, text pipelines (a tokenizer and no images, audio or video) and torchvision's small-image
    datasets (MNIST, CIFAR, SVHN) are left alone: a batch of token ids or of 32x32 images is a few
    hundred KiB, and pinning it saves microseconds.

    ## Why is this bad?
    Host-to-device copies from pageable memory go through a staging buffer and cannot overlap
    with compute. From pinned (page-locked) memory the copy engine reads directly, at full PCIe
    or NVLink-C2C speed, and `non_blocking=True` copies overlap with kernels. On an NVIDIA H200
    a 256 MiB host-to-device copy ran at 55 GB/s pinned against 6–10 GB/s pageable, the
    pageable figure bound by the host's own memcpy speed.

    ## Example
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8)
    ```

    ## Use instead
    ```python
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)
    for x, y in loader:
        x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
    ```

    ## References
    - [torch.utils.data: memory pinning](https://docs.pytorch.org/docs/stable/data.html#memory-pinning)
    - [CUDA semantics: use pinned memory buffers](https://docs.pytorch.org/docs/stable/notes/cuda.html#use-pinned-memory-buffers)
    """

    code = "GPU301"
    name = "dataloader-without-pin-memory"
    bench = "dataloader"
    bench_claim = "pin_memory"
    triggers = ("DataLoader",)
    message = (
        "DataLoader without `pin_memory=True` in CUDA code: batches are copied from pageable "
        "memory; pass `pin_memory=True` and move batches with `.to(device, non_blocking=True)`"
    )
    tags = ("input-pipeline",)

    VALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, pin_memory=True)\nx.cuda()\n",
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, **loader_kwargs)\nx.cuda()\n",
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, pin_memory=args.pin)\nx.cuda()\n",
        "from torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=4)  # CPU-only module\n",
    ]
    INVALID = [
        "import torch\nfrom torch.utils.data import DataLoader\nl = DataLoader(ds, batch_size=4)\nmodel.cuda()\n",
        "import torch\nfrom torch.utils import data\nl = data.DataLoader(ds, pin_memory=False)\ndevice = torch.device('cuda')\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if file.is_test or not file.uses_cuda:
            return
        qualified = file.qualname(node)
        if (
            not qualified
            or not qualified.startswith("torch.utils.data")
            or not qualified.endswith(".DataLoader")
        ):
            return
        if dataset_on_device(file, node):
            return  # the dataset returns CUDA tensors: there is nothing to pin
        if token_batches(file) or tiny_samples(file, node):
            return  # token ids or MNIST/CIFAR images: kilobytes per batch, pinning saves microseconds
        pin = keyword(node, "pin_memory")
        if pin is None:
            if has_star_kwargs(node) or len(node.args) > 7:
                return  # pin_memory may be passed positionally or through **kwargs
            yield self.report(file, node)
        elif isinstance(pin.value, ast.Constant) and pin.value.value is False:
            yield self.report(
                file,
                pin,
                "`pin_memory=False` in CUDA code: batches are copied from "
                "pageable memory; use `pin_memory=True` with `non_blocking=True` copies",
            )
