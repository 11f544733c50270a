import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.loops import is_step_marker, own_nodes
from gpulint.frontends.python.model import position
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.wrappers import (
    DDP,
    remote_wraps,
    single_process,
    skips_grad_sync,
    wrapped_kinds,
    wraps,
)
from gpulint.rule import Exemption, Rule


class DdpAccumulationWithoutNoSync(Rule):
    """
    ## What it does
    Finds gradient accumulation on a model wrapped in `DistributedDataParallel`: a loop that
    runs the wrapped model's forward and a backward pass on every micro-step while the
    optimizer steps only every few, either under an accumulation test (`if (i + 1) % accum ==
    0: optimizer.step()`, or `if i % accum != 0: continue` before it) or after an inner loop
    over micro-batches, and that never turns DDP's gradient synchronisation off for the
    non-final micro-steps. Only models wrapped by DDP are judged, not by FSDP or DeepSpeed; an
    accumulation count written as the literal 1 is no accumulation. An accumulation count
    whose option defaults to 1 still fires: the code is written to accumulate, and does so
    slowly whenever asked to. The model may be
    wrapped in another module of the checked tree and passed in (`train_one_epoch(model=
    ddp_model)` in train.py, the loop in train_utils.py): the finding names that call.

    ## Why is this bad?
    DDP all-reduces every gradient bucket during each `backward()`: with `accum` micro-steps
    per optimizer step, the gradients cross the network `accum` times where once would give
    the same update (the sum of local gradients, all-reduced once). Each all-reduce moves
    about the model's gradient bytes and, on more than one node or over PCIe, often takes as
    long as the backward pass it overlaps. `no_sync()` makes DDP accumulate the gradients
    locally; the first backward outside it all-reduces the sum.

    ## Example
    ```python
    model = DDP(model.cuda(rank), device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x.cuda(rank)), y.cuda(rank)) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    model = DDP(model.cuda(rank), device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        last = (i + 1) % accum == 0
        with contextlib.nullcontext() if last else model.no_sync():
            loss = criterion(model(x.cuda(rank)), y.cuda(rank)) / accum
            loss.backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Known problems
    A loop whose accumulation-gated step comes before the backward of the same iteration (`if i
    % accum == 0: optimizer.step()` at the top of the body) is not reported.

    ## References
    - [DistributedDataParallel.no_sync](https://docs.pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync)
    - [PyTorch Distributed: Experiences on Accelerating Data Parallel Training (VLDB 2020), section 3.2.4 "Gradient Accumulation"](https://arxiv.org/abs/2006.15704)
    - [Hugging Face Accelerate: gradient accumulation](https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation)
    """

    code = "GPU407"
    name = "ddp-accumulation-without-no-sync"
    # A loop on a model wrapped in another module names no wrapper: its accumulation count
    # (`gradient_accumulation_steps`, `accum_iter`) or micro-batches are what it says.
    triggers = ("DistributedDataParallel", "accum", "micro")
    requires = ("backward",)
    message = (
        "`{backward}` runs on every micro-step of the loop at line {loop}, but `{step}` only "
        "every few (line {step_line}): DDP-wrapped `{model}` all-reduces its gradients on each "
        "backward; run the non-final micro-steps under `with {model}.no_sync():`"
    )
    tags = ("distributed",)
    tier = "preview"
    bench = "ddp-no-sync"

    _DDP_IMPORT = "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
    _ACCUMULATING = (
        "for i, x in enumerate(loader):\n    model(x.cuda()).sum().backward()\n"
        "    if (i + 1) % accum == 0:\n        optimizer.step()\n"
    )
    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a test's loop runs a few micro-steps to check the gradients, not to train.",
            _DDP_IMPORT + "model = DDP(model.cuda(), device_ids=[rank])\n" + _ACCUMULATING,
            filename="tests/test_accumulation.py",
        ),
        Exemption(
            "sync-turned-off",
            "A file that turns DDP's all-reduce off for some backward passes itself: "
            "`model.no_sync()` (also handed around as a context), `require_backward_grad_sync`, "
            "accelerate deciding (`accelerator.accumulate(model)`, `accelerator.no_sync(model)`), "
            "or a `*sync*` helper of another module used as a context (`with misc.ddp_sync(ddp, "
            "last):`).",
            fixture="python/gpu407_silent_require_grad_sync.py",
        ),
        Exemption(
            "single-process",
            "Every process group of the file built with `world_size=1` (a literal, or a name bound "
            "only to one): one process, nothing to all-reduce with.",
            _DDP_IMPORT + "import torch.distributed as dist\n"
            'dist.init_process_group("nccl", rank=0, world_size=1)\n'
            "model = DDP(model.cuda(), device_ids=[0])\n" + _ACCUMULATING,
        ),
        Exemption(
            "engine-backward",
            "Backward passes through an engine (`engine.backward(loss)`: DeepSpeed, accelerate), "
            "which decides itself when gradients are reduced.",
            _DDP_IMPORT + "model = DDP(model.cuda(), device_ids=[rank])\n"
            "for i, x in enumerate(loader):\n    engine.backward(model(x.cuda()).sum())\n"
            "    if (i + 1) % accum == 0:\n        optimizer.step()\n",
        ),
        Exemption(
            "not-micro-batches",
            "An inner loop that runs once (`range(1)`, a literal list of one) or goes over a "
            "mapping's items or the parameters: not micro-batches, so nothing accumulates.",
            _DDP_IMPORT + "model = DDP(model.cuda(), device_ids=[rank])\n"
            "for step in range(max_steps):\n    for name, batch in batches.items():\n"
            "        model(batch.cuda()).sum().backward()\n    optimizer.step()\n",
        ),
    )
    VALID = [
        # no_sync on the non-final micro-steps
        _DDP_IMPORT + "model = DDP(model.cuda(), device_ids=[rank])\n"
        "for i, x in enumerate(loader):\n"
        "    ctx = model.no_sync() if (i + 1) % accum else contextlib.nullcontext()\n"
        "    with ctx:\n        model(x.cuda()).sum().backward()\n"
        "    if (i + 1) % accum == 0:\n        optimizer.step()\n",
        # no accumulation: a step per backward
        _DDP_IMPORT + "model = DDP(model.cuda(), device_ids=[rank])\n"
        "for x in loader:\n    model(x.cuda()).sum().backward()\n    optimizer.step()\n",
        # FSDP, not DDP
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "model = FSDP(model.cuda())\nfor i, x in enumerate(loader):\n"
        "    model(x.cuda()).sum().backward()\n"
        "    if (i + 1) % accum == 0:\n        optimizer.step()\n",
        # an accelerate loop
        _DDP_IMPORT + "model = DDP(model.cuda(), device_ids=[rank])\n"
        "for x in loader:\n    with accelerator.accumulate(model):\n"
        "        accelerator.backward(model(x).sum())\n        optimizer.step()\n",
    ]
    INVALID = [
        _DDP_IMPORT + "model = DDP(model.cuda(rank), device_ids=[rank])\n"
        "for i, (x, y) in enumerate(loader):\n"
        "    loss = criterion(model(x.cuda(rank)), y.cuda(rank)) / accum\n"
        "    loss.backward()\n    if (i + 1) % accum == 0:\n"
        "        optimizer.step()\n        optimizer.zero_grad()\n",
        # an inner loop over micro-batches
        _DDP_IMPORT + "model = DDP(model.cuda(rank), device_ids=[rank])\n"
        "for step in range(max_steps):\n    for micro in range(accum):\n"
        "        x, y = next(train_iter)\n        loss = model(x.cuda(), y.cuda()) / accum\n"
        "        loss.backward()\n    optimizer.step()\n    optimizer.zero_grad()\n",
    ]

    def visit_For(self, node: ast.For, file: PythonFile):
        yield from self._check(node, file)

    def visit_While(self, node: ast.While, file: PythonFile):
        yield from self._check(node, file)

    def _check(self, loop: ast.For | ast.While, file: PythonFile):
        # A file that wraps no model itself may still train one wrapped in another module
        # and passed in (`train_one_epoch(model=ddp_model)`): only with its project.
        if self.exempt("test-code", file.is_test) or (
            file.project is None and not any(w.kind == DDP for w in wraps(file))
        ):
            return
        if self.exempt("sync-turned-off", skips_grad_sync(file)) or self.exempt(
            "single-process", single_process(file)
        ):
            return
        nodes = list(own_nodes(loop))
        backward = self._every_iteration_backward(file, loop, nodes)
        if backward is None:
            engine = self._every_iteration_backward(file, loop, nodes, engine=True)
            if self.exempt("engine-backward", engine is not None) or engine is None:
                return
            backward = engine
        steps = [n for n in nodes if _optimizer_step(n)]
        if steps:
            step = next((s for s in steps if _accumulation_gate(file, s, loop)), None)
            if step is None:
                return  # a step per backward: nothing accumulates
            if position(step) < position(backward):
                return  # the step before the backward of the same iteration
        else:
            outer = _enclosing_loop(file, loop)
            if outer is None or self.exempt("not-micro-batches", _known_single_trip(loop)):
                return
            after = [
                n for n in own_nodes(outer) if _optimizer_step(n) and position(n) > position(loop)
            ]
            if not after:
                return
            step = after[0]
        model = self._ddp_model(file, nodes)
        if model is None:
            return
        related = tuple(
            w.call
            for w in (remote_wraps(file, model) if isinstance(model, ast.Name) else ())
            if w.kind == DDP
        )
        yield self.report(
            file,
            backward,
            related=related,
            backward=file.segment(backward),
            loop=loop.lineno,
            step=file.segment(step),
            step_line=position(step)[0],
            model=file.segment(model),
        )

    @staticmethod
    def _every_iteration_backward(
        file: PythonFile, loop: ast.AST, nodes: list[ast.AST], *, engine: bool = False
    ) -> ast.Call | None:
        """A `loss.backward()` (a tensor's; `engine`: an engine's `backward(loss)` instead) of
        the loop's own body that no test between it and the loop makes occasional."""
        for node in nodes:
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "backward"
                and bool(node.args) == engine
                and not _under_if(file, node, loop)
            ):
                return node
        return None

    @staticmethod
    def _ddp_model(file: PythonFile, nodes: list[ast.AST]) -> ast.expr | None:
        """The DDP-wrapped model the loop's body runs: called (`model(x)`, `self.model(x)`)
        or handed to a call (`criterion(model, batch)`, `loss_fn(net=ddp, images=x)`)."""
        for node in nodes:
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "forward":
                func = func.value
            for candidate in (func, *node.args, *(k.value for k in node.keywords)):
                if isinstance(candidate, (ast.Name, ast.Attribute)) and DDP in wrapped_kinds(
                    file, candidate
                ):
                    return candidate
        return None


def _optimizer_step(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "step"
        and is_step_marker(node)
    )


def _under_if(file: PythonFile, node: ast.AST, loop: ast.AST) -> bool:
    child = node
    for parent in file.ancestors(node):
        if parent is loop:
            return False
        if isinstance(parent, (ast.If, ast.IfExp, ast.ExceptHandler)) and child is not getattr(
            parent, "test", None
        ):
            return True
        child = parent
    return False


def _accumulation_gate(file: PythonFile, step: ast.AST, loop: ast.AST) -> bool:
    """`step` runs under `if (i + 1) % accum == 0:` (an `if` whose test takes a remainder and
    whose `else:` does not step too: a GAN's alternating turns), or after `if i % accum != 0:
    continue` in a block around it."""
    child = step
    for parent in file.ancestors(step):
        if parent is loop:
            break
        if isinstance(parent, ast.If) and child in parent.body and _remainder(file, parent.test):
            if not any(is_step_marker(n) for s in parent.orelse for n in ast.walk(s)):
                return True
        if isinstance(child, ast.stmt):
            block = file.statement_block(child)
            if block is not None:
                for earlier in block[: block.index(child)]:
                    if (
                        isinstance(earlier, ast.If)
                        and _remainder(file, earlier.test)
                        and any(isinstance(s, ast.Continue) for s in earlier.body)
                    ):
                        return True
        child = parent
    return False


def _remainder(file: PythonFile, test: ast.AST) -> bool:
    """The test takes a remainder by something other than the literal 1, directly or through a
    name bound to such a test (`is_update = (i + 1) % accum == 0`)."""
    for node in ast.walk(test):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
            if not (isinstance(node.right, ast.Constant) and node.right.value == 1):
                return True
        if isinstance(node, ast.Name):
            bound = file.model.bindings_of(node.id, before=node)
            if bound and all(
                b.value is not None
                and any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod)
                    for n in ast.walk(b.value)
                )
                for b in bound
            ):
                return True
    return False


def _enclosing_loop(file: PythonFile, loop: ast.AST) -> ast.For | ast.AsyncFor | ast.While | None:
    for parent in file.ancestors(loop):
        if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)):
            return parent
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
    return None


def _known_single_trip(loop: ast.AST) -> bool:
    """`for _ in range(1):`, a literal list of one: no accumulation. (A count from an option
    whose default is 1 still accumulates when set.) Loops over a mapping's items or the
    parameters are not micro-batches."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return False
    it = loop.iter
    if isinstance(it, (ast.List, ast.Tuple)):
        return len(it.elts) <= 1
    if isinstance(it, ast.Call) and terminal_name(it.func) == "range":
        bound = it.args[-1] if len(it.args) <= 2 and it.args else None
        if len(it.args) == 1 and isinstance(bound, ast.Constant) and isinstance(bound.value, int):
            return bound.value <= 1
    name = terminal_name(it.func) if isinstance(it, ast.Call) else terminal_name(it)
    return name in ("items", "keys", "values", "parameters", "named_parameters")
