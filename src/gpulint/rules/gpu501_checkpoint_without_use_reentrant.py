import ast

from gpulint.diagnostics import Fix
from gpulint.frontends.python import edits
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import has_star_kwargs, keyword
from gpulint.rule import Invalid, Rule

_CHECKPOINT = {"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"}


class CheckpointWithoutUseReentrant(Rule):
    """
    ## What it does
    Finds `torch.utils.checkpoint.checkpoint` and `checkpoint_sequential` called without an
    explicit `use_reentrant` argument. Calls that pass it, or pass `**kwargs` that may hold it,
    are left alone.

    ## Why is this bad?
    Without `use_reentrant`, PyTorch warns on every call and falls back to the reentrant
    implementation, which recomputes through `torch.autograd.backward`, does not support
    keyword arguments or `torch.autograd.grad`, and breaks when no input requires grad. PyTorch
    recommends `use_reentrant=False`, and the default is set to change: say which one you mean.

    ## Example
    ```python
    out = checkpoint(block, hidden_states)
    ```

    ## Use instead
    ```python
    out = checkpoint(block, hidden_states, use_reentrant=False)
    ```

    Before reaching for checkpointing to save memory, consider BF16 and FSDP sharding: when the
    memory is replicated parameters, gradients and optimizer state, sharding saves more and
    costs no recomputation.

    ## References
    - [torch.utils.checkpoint](https://docs.pytorch.org/docs/stable/checkpoint.html)
    """

    code = "GPU501"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "checkpoint-without-use-reentrant"
    triggers = ("utils.checkpoint", "import checkpoint")
    fixable = True
    message = (
        "`{func}` without `use_reentrant`: pass `use_reentrant=False` (PyTorch's recommendation)"
    )
    tags = ("memory",)

    VALID = [
        "from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x, use_reentrant=False)\n",
        "from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x, **ckpt_kwargs)\n",
        "import deepspeed\ny = deepspeed.checkpointing.checkpoint(f, x)\n",
    ]
    INVALID = [
        Invalid(
            "from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x)\n",
            fixed="from torch.utils.checkpoint import checkpoint\ny = checkpoint(f, x, use_reentrant=False)\n",
        ),
        Invalid(
            "import torch.utils.checkpoint as cp\ny = cp.checkpoint_sequential(fns, 2, x,)\n",
            fixed="import torch.utils.checkpoint as cp\ny = cp.checkpoint_sequential(fns, 2, x, use_reentrant=False,)\n",
        ),
        Invalid(
            "import torch\ny = torch.utils.checkpoint.checkpoint(\n    block,\n    h,  # hidden states\n)\n",
            fixed="import torch\ny = torch.utils.checkpoint.checkpoint(\n    block,\n    h, use_reentrant=False,  # hidden states\n)\n",
        ),
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        qualified = file.qualname(node)
        if qualified not in _CHECKPOINT:
            return
        if keyword(node, "use_reentrant") is not None or has_star_kwargs(node):
            return
        edit = edits.append_arg(file, node, "use_reentrant=False")
        # no edit where the call's text cannot be rewritten safely: reported, not fixed
        fix = Fix("add use_reentrant=False", (edit,)) if edit is not None else None
        yield self.report(file, node, func=qualified.rsplit(".", 1)[1], fix=fix)
