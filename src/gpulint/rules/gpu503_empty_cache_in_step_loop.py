import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Rule

_EMPTY_CACHE = {"torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"}


class EmptyCacheInStepLoop(Rule):
    """
    ## What it does
    Finds `torch.cuda.empty_cache()` that runs on every iteration of a training or evaluation
    step loop (a loop whose body calls `.backward()`, `optimizer.step()`, or iterates a data
    loader and calls a model). Calls under a periodic guard (`if step % 1000 == 0:`), before or
    after the loop, and in tests are left alone.

    ## Why is this bad?
    `empty_cache()` synchronises the device and hands every cached, unused block back to the
    driver. The next step then has to `cudaMalloc` its activations again, which is slow and
    synchronising, so each step pays a device drain plus fresh allocations. It does not make
    more memory available to PyTorch itself: the caching allocator already reuses freed blocks.
    If the job fragments, tune the allocator (`PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`)
    instead.

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
        torch.cuda.empty_cache()
    ```

    ## Use instead
    ```python
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    torch.cuda.empty_cache()  # once, if another process needs the memory
    ```

    ## References
    - [CUDA semantics: memory management](https://docs.pytorch.org/docs/stable/notes/cuda.html#memory-management)
    - [torch.cuda.empty_cache](https://docs.pytorch.org/docs/stable/generated/torch.cuda.empty_cache.html)
    - [CUDA environment variables (PYTORCH_CUDA_ALLOC_CONF)](https://docs.pytorch.org/docs/stable/cuda_environment_variables.html)
    """

    code = "GPU503"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "empty-cache-in-step-loop"
    triggers = ("empty_cache",)
    message = (
        "`torch.cuda.empty_cache()` on every iteration of the step loop at line {loop}: it syncs "
        "and forces fresh allocations each step; remove it (or run it once after the loop)"
    )
    tags = ("memory", "sync")

    VALID = [
        "import torch\nfor x in train_loader:\n    loss = model(x.cuda())\n    loss.backward()\n"
        "    optimizer.step()\ntorch.cuda.empty_cache()\n",
        "import torch\nfor step, x in enumerate(train_loader):\n    loss = model(x.cuda())\n"
        "    loss.backward()\n    optimizer.step()\n    if step % 1000 == 0:\n        torch.cuda.empty_cache()\n",
        "import torch\nfor epoch in range(10):\n    train(model)\n    torch.cuda.empty_cache()\n",
    ]
    INVALID = [
        "import torch\nfor x in train_loader:\n    loss = model(x.cuda())\n    loss.backward()\n"
        "    optimizer.step()\n    torch.cuda.empty_cache()\n",
        "from torch.cuda import empty_cache\nfor batch in val_loader:\n    out = model(batch.cuda())\n"
        "    empty_cache()\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if file.is_test or file.qualname(node) not in _EMPTY_CACHE:
            return
        loop = file.loops.runs_every_step(node)
        if loop is not None:
            yield self.report(file, node, loop=loop.lineno)
