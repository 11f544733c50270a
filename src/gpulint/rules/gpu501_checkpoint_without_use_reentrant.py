import ast

from gpulint.diagnostics import Fix, Related
from gpulint.frontends.python import edits
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import keyword
from gpulint.rule import Exemption, Invalid, Rule

_CHECKPOINT = {"torch.utils.checkpoint.checkpoint", "torch.utils.checkpoint.checkpoint_sequential"}


class CheckpointWithoutUseReentrant(Rule):
    """
    ## What it does
    Finds `torch.utils.checkpoint.checkpoint` and `checkpoint_sequential` called without an
    explicit `use_reentrant` argument. A `**kwargs` built in the file from a dict literal (`kw =
    {"preserve_rng_state": True}`, `dict(...)`, either branch of `a if c else b`) and not
    changed afterwards is read, and reported when none of its keys is `use_reentrant`. `*args`
    cannot hold it for `checkpoint`, whose `use_reentrant` is keyword-only.

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
    spread_message = (
        "`{func}` without `use_reentrant`: {spread} does not hold it either; pass "
        "`use_reentrant=False` (PyTorch's recommendation)"
    )
    tags = ("memory",)

    EXEMPTIONS = (
        Exemption(
            "kwargs-may-set-it",
            "A `**kwargs` the file does not spell out (a parameter, a dict filled, updated or "
            "rebound after it is built, one handed to a helper that may fill it): it may hold "
            "`use_reentrant`.",
            fixture="python/gpu501_silent_spread_unknown.py",
        ),
        Exemption(
            "starred-args-may-hold-it",
            "`*args` into `checkpoint_sequential`, whose fourth positional argument is "
            "`use_reentrant`.",
            "import torch.utils.checkpoint as cp\ny = cp.checkpoint_sequential(fns, 2, x, *rest)\n",
        ),
    )

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
            "from torch.utils.checkpoint import checkpoint\nkw = {'preserve_rng_state': True}\n"
            "y = checkpoint(f, x, **kw)\n",
            fixed="from torch.utils.checkpoint import checkpoint\nkw = {'preserve_rng_state': True}\n"
            "y = checkpoint(f, x, **kw, use_reentrant=False)\n",
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
        if keyword(node, "use_reentrant") is not None:
            return
        func = qualified.rsplit(".", 1)[1]
        # `checkpoint(function, *args, use_reentrant=None, ...)`: its `use_reentrant` is keyword
        # only, so `*inputs` cannot hold it; `checkpoint_sequential` takes it fourth.
        if self.exempt(
            "starred-args-may-hold-it",
            func != "checkpoint" and any(isinstance(a, ast.Starred) for a in node.args),
        ):
            return
        spread = [k for k in node.keywords if k.arg is None]
        related: list[Related] = []
        for star in spread:
            keys = file.model.dict_keys(star.value)
            if self.exempt("kwargs-may-set-it", keys is None):
                return
            if keys is not None and "use_reentrant" in keys:
                return
            if isinstance(star.value, ast.Name):
                for b in file.model.reaching(star.value.id, star.value):
                    line, col, end_line, end_col = file.span(b.node)
                    what = f"`{b.name}` is built here, without `use_reentrant`"
                    related.append(Related(file.display_path, line, col, what, end_line, end_col))
        edit = edits.append_arg(file, node, "use_reentrant=False")
        # no edit where the call's text cannot be rewritten safely: reported, not fixed
        fix = Fix("add use_reentrant=False", (edit,)) if edit is not None else None
        if spread:
            names = ", ".join(f"`**{file.segment(k.value)}`" for k in spread)
            yield self.report(
                file,
                node,
                self.spread_message,
                func=func,
                spread=names,
                fix=fix,
                related=tuple(related),
            )
            return
        yield self.report(file, node, func=func, fix=fix)
