import ast

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.names import keyword
from gpulint.rule import Exemption, Rule

_WRAPPERS = (".FullyShardedDataParallel", ".fully_shard")
_PARAM_METHODS = {"parameters", "named_parameters"}


def _is_fsdp(qualified: str | None) -> bool:
    return bool(
        qualified and qualified.startswith("torch.distributed.") and qualified.endswith(_WRAPPERS)
    )


def _is_optimizer(qualified: str | None) -> bool:
    """`torch.optim.AdamW`, `torch.optim.adamw.AdamW`, `bitsandbytes.optim.AdamW8bit`..."""
    if not qualified or "." not in qualified:
        return False
    module, _, cls = qualified.rpartition(".")
    return "optim" in module.split(".") and cls[:1].isupper() and "lr_scheduler" not in module


def _model_of_params(expr: ast.AST) -> ast.AST | None:
    """`model` in `model.parameters()`, `filter(f, model.parameters())`, `list(m.parameters())`."""
    for node in ast.walk(expr):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PARAM_METHODS
            and isinstance(node.func.value, (ast.Name, ast.Attribute))
        ):
            return node.func.value
    return None


class OptimizerBeforeFsdp(Rule):
    """
    ## What it does
    Finds an optimizer built from a model's parameters (`torch.optim.AdamW(model.parameters())`)
    before that same model is wrapped by `FullyShardedDataParallel(model)` or `fully_shard(model)`
    later in the same function.

    ## Why is this bad?
    FSDP replaces the module's parameters when it wraps it: FSDP1 flattens them into sharded
    `FlatParameter`s, FSDP2 (`fully_shard`) swaps each one for a sharded `DTensor`. An optimizer
    created before the wrap holds the old, unsharded tensors: it keeps a full copy of every
    parameter alive on every rank and steps tensors that no longer receive gradients, so the model
    does not train. PyTorch's FSDP documentation says to wrap first and build the optimizer after.

    ## Example
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model = FSDP(model, device_id=local_rank)
    ```

    ## Use instead
    ```python
    model = FSDP(model, device_id=local_rank)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ```

    ## References
    - [FullyShardedDataParallel](https://docs.pytorch.org/docs/stable/fsdp.html)
    - [Getting started with FSDP](https://docs.pytorch.org/tutorials/intermediate/FSDP_tutorial.html)
    """

    code = "GPU405"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "optimizer-before-fsdp"
    severity = Severity.ERROR
    triggers = ("FullyShardedDataParallel", "fully_shard")
    message = (
        "optimizer built from `{model}.parameters()` before `{model}` is wrapped by `{wrapper}` at "
        "line {line}: it holds the unsharded parameters; build the optimizer after wrapping"
    )
    tags = ("distributed", "memory")

    EXEMPTIONS = (
        Exemption(
            "optimizer-rebuilt-after-wrap",
            "An optimizer built before the wrap and built again after it (a default replaced "
            "once the model is sharded): the one that steps holds the sharded parameters.",
            "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
            "def setup(model):\n    opt = torch.optim.AdamW(model.parameters())\n"
            "    model = FSDP(model)\n    opt = torch.optim.AdamW(model.parameters())\n"
            "    return model, opt\n",
        ),
    )

    VALID = [
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "def setup(model):\n    model = FSDP(model)\n"
        "    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n    return model, opt\n",
        "import torch\nfrom torch.distributed.fsdp import fully_shard\n"
        "def setup(model):\n    for block in model.layers:\n        fully_shard(block)\n"
        "    fully_shard(model)\n    opt = torch.optim.AdamW(model.parameters())\n",
        # Different models.
        "import torch\nfrom torch.distributed.fsdp import fully_shard\n"
        "def setup(model, critic):\n    opt = torch.optim.Adam(critic.parameters())\n    fully_shard(model)\n",
    ]
    INVALID = [
        "import torch\nfrom torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
        "def setup(model):\n    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
        "    model = FSDP(model)\n    return model, opt\n",
        "from torch import optim\nfrom torch.distributed._composable.fsdp import fully_shard\n"
        "def setup(self):\n    self.opt = optim.SGD(self.model.parameters(), lr=0.1)\n"
        "    fully_shard(self.model)\n",
    ]

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if not _is_optimizer(file.qualname(node)):
            return
        params = node.args[0] if node.args else getattr(keyword(node, "params"), "value", None)
        model = _model_of_params(params) if params is not None else None
        if model is None:
            return
        name = file.segment(model)
        scope = file.enclosing_function(node) or file.tree
        wraps, rebuilt = [], []
        for other in ast.walk(scope):
            if (
                not isinstance(other, ast.Call)
                or other is node
                or (other.lineno, other.col_offset)
                <= (
                    node.lineno,
                    node.col_offset,
                )
            ):
                continue
            if file.enclosing_function(other) is not file.enclosing_function(node):
                continue
            if _is_fsdp(file.qualname(other)):
                target = (
                    other.args[0]
                    if other.args
                    else getattr(keyword(other, "module"), "value", None)
                )
                if target is not None and file.segment(target) == name:
                    wraps.append(other)
            elif _is_optimizer(file.qualname(other)):
                rebuilt.append(other)
        if not wraps:
            return
        wrap = min(wraps, key=lambda c: (c.lineno, c.col_offset))
        if self.exempt(
            "optimizer-rebuilt-after-wrap",
            any((c.lineno, c.col_offset) > (wrap.lineno, wrap.col_offset) for c in rebuilt),
        ):
            return
        wrapper = (file.qualname(wrap) or "").rsplit(".", 1)[-1]
        yield self.report(file, node, model=name, wrapper=wrapper, line=wrap.lineno)
