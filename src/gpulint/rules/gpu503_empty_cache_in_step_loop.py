import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule

_EMPTY_CACHE = {"torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"}


class EmptyCacheInStepLoop(Rule):
    """
    ## What it does
    Finds `torch.cuda.empty_cache()` that runs on every iteration of a training or evaluation
    step loop (a loop whose body calls `.backward()`, `optimizer.step()`, or iterates a data
    loader and calls a model). Calls before or after the loop are not judged.

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

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test frees the cache between a few steps to measure or bound memory, not to "
            "train.",
            "import torch\nfor x in train_loader:\n    loss = model(x.cuda())\n"
            "    loss.backward()\n    optimizer.step()\n    torch.cuda.empty_cache()\n",
            filename="tests/test_memory.py",
        ),
        Exemption(
            "periodic-guard",
            "A call under a periodic guard (`if step % 1000 == 0:`, `if should_log:`): a drain "
            "every so many steps, not on every one, costs little beside them.",
            "import torch\nfor step, x in enumerate(train_loader):\n    loss = model(x.cuda())\n"
            "    loss.backward()\n    optimizer.step()\n    if step % 1000 == 0:\n"
            "        torch.cuda.empty_cache()\n",
        ),
    )

    VALID = [
        "import torch\nfor x in train_loader:\n    loss = model(x.cuda())\n    loss.backward()\n"
        "    optimizer.step()\ntorch.cuda.empty_cache()\n",
        "import torch\nfor epoch in range(10):\n    train(model)\n    torch.cuda.empty_cache()\n",
    ]
    INVALID = [
        "import torch\nfor x in train_loader:\n    loss = model(x.cuda())\n    loss.backward()\n"
        "    optimizer.step()\n    torch.cuda.empty_cache()\n",
        "from torch.cuda import empty_cache\nfor batch in val_loader:\n    out = model(batch.cuda())\n"
        "    empty_cache()\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if file.qualname(node) not in _EMPTY_CACHE or self.exempt("test-code", file.is_test):
            return
        loop = file.loops.enclosing_step_loop(node)
        if loop is None:
            return
        if self.exempt("periodic-guard", file.loops.periodic_guard(node, loop) is not None):
            return
        yield self.report(file, node, loop=loop.lineno)
