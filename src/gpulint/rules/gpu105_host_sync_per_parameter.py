import ast

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.syncs import host_sync
from gpulint.rule import Rule

_PARAM_METHODS = {"parameters", "named_parameters"}


class HostSyncPerParameter(Rule):
    """
    ## What it does
    Finds a host-device sync (`.item()`, `.cpu()`, `.tolist()`, `float()` of a tensor...) on a
    parameter's gradient inside a loop over the parameters: `for p in model.parameters():` (or
    `named_parameters()`, or a list whose name says it holds parameters, such as
    `self.master_params`), and the same in a comprehension. Reading `.grad` says the loop runs
    after a backward pass: typically every step, or every logging interval.

    ## Why is this bad?
    Each read-back waits for the GPU to drain and copies one scalar: one sync per parameter
    tensor, hundreds per step. `gpulint trace` measured 450 syncs per step from one such loop
    (a gradient-norm log in a diffusion training script) on an H200: 3.3 ms of host time blocked
    per step, the launch queue drained 450 times. Summing on the device and reading the total
    once costs one sync.

    ## Example
    ```python
    def log_grad_norm(params):
        sqsum = 0.0
        for p in params:
            sqsum += (p.grad ** 2).sum().item()
        return sqsum ** 0.5
    ```

    ## Use instead
    ```python
    def log_grad_norm(params):
        grads = [p.grad for p in params if p.grad is not None]
        return torch.nn.utils.get_total_norm(grads).item()  # one sync (PyTorch >= 2.6)
    ```
    or `torch.stack([g.pow(2).sum() for g in grads]).sum().sqrt()`, read once (and only when
    it is logged).

    ## References
    - [torch.nn.utils.get_total_norm](https://docs.pytorch.org/docs/stable/generated/torch.nn.utils.get_total_norm.html)
    - [CUDA semantics: asynchronous execution](https://docs.pytorch.org/docs/stable/notes/cuda.html#asynchronous-execution)
    - [torch.cuda.set_sync_debug_mode](https://docs.pytorch.org/docs/stable/generated/torch.cuda.set_sync_debug_mode.html)
    """

    code = "GPU105"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "host-sync-per-parameter"
    triggers = ("grad",)
    requires = ("item", "cpu", "tolist", "numpy", "float(", "int(")
    message = (
        "{what} on each parameter's gradient in the loop at line {loop}: one host-device sync "
        "per parameter tensor each time it runs; reduce on the device (`torch.nn.utils.get_total_norm`, "
        "`torch.stack(...).sum()`) and read the result once"
    )
    tags = ("sync",)

    VALID = [
        # one sync for all parameters
        "import torch\n"
        "def grad_norm(model):\n"
        "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
        "    return torch.nn.utils.get_total_norm(grads).item()\n",
        # reads the parameters, not their gradients: counting, once
        "def count(model):\n"
        "    n = 0\n"
        "    for p in model.parameters():\n"
        "        n += p.numel()\n"
        "    return n\n",
        # a loop over the batch, not over parameters
        "def log(losses, p):\n    for x in losses:\n        print(x.item(), p.grad)\n",
    ]
    INVALID = [
        "def log_grad_norm(self):\n"
        "    sqsum = 0.0\n"
        "    for p in self.master_params:\n"
        "        sqsum += (p.grad ** 2).sum().item()\n"
        "    return sqsum\n",
        "def norms(model):\n"
        "    return {n: p.grad.norm().item() for n, p in model.named_parameters()}\n",
        "def check(model):\n"
        "    for name, param in model.named_parameters():\n"
        "        if param.grad is not None:\n"
        "            print(name, float(param.grad.abs().max()))\n",
    ]

    def visit_For(self, node: ast.For, file: PythonFile):
        if file.is_test or not _over_parameters(node.iter):
            return
        names = _param_names(node.target, node.iter)
        for stmt in node.body:
            for sub in ast.walk(stmt):
                yield from self._check(sub, names, node, file)

    def _comprehension(self, node, file: PythonFile):
        if file.is_test:
            return
        for gen in node.generators:
            if not _over_parameters(gen.iter):
                continue
            names = _param_names(gen.target, gen.iter)
            parts = [node.key, node.value] if isinstance(node, ast.DictComp) else [node.elt]
            for part in parts:
                for sub in ast.walk(part):
                    yield from self._check(sub, names, node, file)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def _check(self, sub, names: set[str], loop, file: PythonFile):
        if not isinstance(sub, ast.Call):
            return
        what = host_sync(file, sub, with_events=False)
        if what is None or what == "`synchronize()`":
            return
        if _reads_grad(sub, names):
            yield self.report(file, sub, what=what, loop=loop.lineno)


def _over_parameters(it: ast.AST) -> bool:
    """`model.parameters()`, `named_parameters()`, or a collection named for parameters."""
    if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute):
        return it.func.attr in _PARAM_METHODS
    if isinstance(it, ast.Subscript):  # group["params"]
        key = it.slice
        return isinstance(key, ast.Constant) and key.value == "params"
    name = it.attr if isinstance(it, ast.Attribute) else it.id if isinstance(it, ast.Name) else ""
    return "param" in name.lower()


def _param_names(target: ast.AST, it: ast.AST) -> set[str]:
    """The loop variable(s) bound to a parameter: `p`, or the `p` of `for name, p in ...`."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[-1], ast.Name):
        return {target.elts[-1].id}
    return set()


def _reads_grad(call: ast.Call, names: set[str]) -> bool:
    """The call's receiver or argument is computed from `p.grad` of a loop parameter."""
    parts = [call.func.value] if isinstance(call.func, ast.Attribute) else list(call.args)
    for part in parts:
        for sub in ast.walk(part):
            if (
                isinstance(sub, ast.Attribute)
                and sub.attr == "grad"
                and isinstance(sub.value, ast.Name)
                and sub.value.id in names
            ):
                return True
    return False
