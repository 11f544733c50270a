"""Training facts: does this module train, and does a model it builds only run forward?

- `module_trains`: a backward pass or an optimizer step is in the module's code, or in a function
  it calls that the model (or the project index) resolves and whose summary steps.
- `forward_only`: the module handed to a wrapper (`DataParallel(net)`) runs forward passes only:
  the wrapper is built under `torch.no_grad()`/`inference_mode()`, or from a module put in eval
  mode where it is built (`FAN(...).eval()`, `WrapInception(net.eval()).cuda()`) and never put
  back in training mode, or, in a module that does not train, it is put in eval mode or only
  ever called (never handed to another function, returned or stepped).
- `optimizes_inputs`: every optimizer the module builds updates tensors the module made
  (a latent, an embedding, an image being optimised), not a model's `.parameters()`.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from gpulint.frontends.python.loops import is_step_marker
from gpulint.frontends.python.model import MemoKey
from gpulint.frontends.python.names import terminal_name
from gpulint.frontends.python.precision import under_no_grad

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_TRAINS: MemoKey[bool] = MemoKey("module trains")
_FROZEN = ("eval", "requires_grad_")


def module_trains(file: PythonFile) -> bool:
    """A backward pass or an optimizer step runs in this module, or in a function it calls
    whose summary (this file's, or the project's) says it steps."""
    return file.memo.get(_TRAINS, lambda: _trains(file))


def _trains(file: PythonFile) -> bool:
    from gpulint.frontends.python.summaries import summaries

    calls = list(file.nodes(ast.Call))
    if any(is_step_marker(c) for c in calls):
        return True
    table = summaries(file)
    for call in calls:
        summary = table.of_call(call)
        if summary is not None and summary.steps:
            return True
    return False


def _freezes(file: PythonFile, expr: ast.AST) -> bool:
    """`expr` puts a module in eval mode as it builds it: `net.eval()`, `net.requires_grad_(False)`,
    `Wrap(net.eval()).cuda()`."""
    for node in ast.walk(expr):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _FROZEN
        ):
            if node.func.attr == "eval" and not node.args:
                return True
            if (
                node.func.attr == "requires_grad_"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and node.args[0].value is False
            ):
                return True
    return False


def _built_frozen(file: PythonFile, expr: ast.AST, at: ast.AST) -> bool:
    """`expr` (a wrapper's argument) is a module put in eval mode where it was built: in the
    expression itself, or in every assignment of the name that reaches `at`."""
    if _freezes(file, expr):
        return True
    if isinstance(expr, ast.Name):
        bound = file.model.reaching(expr.id, at)
        return bool(bound) and all(b.value is not None and _freezes(file, b.value) for b in bound)
    return False


def _trained_again(file: PythonFile, names: set[str]) -> bool:
    """`x.train()` (or `x.train(True)`) on one of `names` anywhere in the module."""
    for call in file.nodes(ast.Call):
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "train"
            and terminal_name(func.value) in names
            and not (
                call.args and isinstance(call.args[0], ast.Constant) and not call.args[0].value
            )
        ):
            return True
    return False


def forward_only(file: PythonFile, wrapper: ast.Call, *, runs_now: bool = False) -> bool:
    """The module `wrapper` wraps (its first argument) runs forward passes only (see the module
    docstring). `runs_now`: the call runs the module itself (the functional
    `data_parallel(net, inputs)`), so autograd being off around it is enough."""
    if under_no_grad(file, wrapper) and (runs_now or not module_trains(file)):
        return True
    if not wrapper.args:
        return False
    wrapped = wrapper.args[0]
    targets = file.model.targets_of(_outermost(file, wrapper))
    names = {n for t in targets if (n := terminal_name(t)) is not None}
    inner = terminal_name(wrapped)
    if inner is not None:
        names.add(inner)
    if _built_frozen(file, wrapped, wrapper) and not _trained_again(file, names):
        return True
    if module_trains(file) or not targets:
        return False
    if _trained_again(file, names):
        return False
    return _put_in_eval(file, names) or _only_called(file, targets)


def _outermost(file: PythonFile, call: ast.Call) -> ast.expr:
    """`nn.DataParallel(net).cuda()`: the whole chain, whose value the statement assigns."""
    node: ast.expr = call
    while True:
        parent = file.parent(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            grand = file.parent(parent)
            if isinstance(grand, ast.Call) and grand.func is parent:
                node = grand
                continue
        return node


def _put_in_eval(file: PythonFile, names: set[str]) -> bool:
    return any(
        isinstance(call.func, ast.Attribute)
        and call.func.attr == "eval"
        and not call.args
        and terminal_name(call.func.value) in names
        for call in file.nodes(ast.Call)
    )


def _only_called(file: PythonFile, targets: list[ast.expr]) -> bool:
    """Every later read of the wrapper's name is a call of it (`net(x)`) or of one of its
    methods: never handed to another function, returned, or stored elsewhere."""
    if len(targets) != 1 or not isinstance(targets[0], ast.Name):
        return False
    name = targets[0].id
    scope = file.enclosing_function(targets[0]) or file.tree
    reads = [
        n
        for n in ast.walk(scope)
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
    ]
    if not reads:
        return False
    for read in reads:
        parent = file.parent(read)
        if isinstance(parent, ast.Call) and parent.func is read:
            continue
        if isinstance(parent, ast.Attribute) and parent.value is read:
            continue  # `net.module`, `net.load_state_dict(...)`
        return False
    return True


_PARAMETERS = ("parameters", "named_parameters", "param_groups")


def optimizes_inputs(file: PythonFile) -> bool:
    """Every optimizer the module builds (`torch.optim.*(...)`) is given a list of tensors the
    module made (`[w_opt]`, `[latents]`), none of a model's parameters: the loop optimises
    inputs (a projection, an inversion), not weights. False when the module builds none."""
    optimizers = [
        c
        for c in file.nodes(ast.Call)
        if (file.qualname(c) or "").startswith("torch.optim.")
        and "lr_scheduler" not in (file.qualname(c) or "")
    ]
    return bool(optimizers) and all(_tensors_only(file, c) for c in optimizers)


def _tensors_only(file: PythonFile, optimizer: ast.Call) -> bool:
    if not optimizer.args:
        return False
    params = optimizer.args[0]
    return _has_list(params) and _inputs(file, params, optimizer)


def _has_list(expr: ast.AST) -> bool:
    if isinstance(expr, (ast.List, ast.Tuple)):
        return bool(expr.elts)
    return isinstance(expr, ast.BinOp) and (_has_list(expr.left) or _has_list(expr.right))


def _inputs(file: PythonFile, expr: ast.AST, at: ast.AST) -> bool:
    """`[w]`, `[w] + list(noise.values())`: tensors the module made, and nothing that reads a
    model's parameters (buffers, such as a generator's noise inputs, are not weights)."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        return all(
            _made_tensor(file, e, at) if isinstance(e, ast.Name) else _no_weights(file, e, at)
            for e in (x.value if isinstance(x, ast.Starred) else x for x in expr.elts)
        )
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        return _inputs(file, expr.left, at) and _inputs(file, expr.right, at)
    if (
        isinstance(expr, ast.Call)
        and isinstance(expr.func, ast.Name)
        and expr.func.id in ("list", "tuple")
        and len(expr.args) == 1
    ):
        return _no_weights(file, expr.args[0], at)
    return False


def _no_weights(file: PythonFile, expr: ast.AST, at: ast.AST) -> bool:
    """Neither `expr` nor what the names it reads are bound to reads parameters."""
    exprs: list[ast.AST] = [expr]
    for node in ast.walk(expr):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            bound = file.model.reaching(node.id, at)
            if not bound or any(b.value is None for b in bound) or _filled(file, node.id):
                return False
            exprs += [b.value for b in bound if b.value is not None]
    return not any(_reads_parameters(e) for e in exprs)


def _filled(file: PythonFile, name: str) -> bool:
    """`name.append(p)`, `name.extend(...)`, `name += ...` somewhere in the module: a container
    filled later (`trunk = []` and a loop over `named_parameters()` appending to it)."""
    for call in file.nodes(ast.Call):
        func = call.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in ("append", "extend", "insert", "update", "setdefault")
            and isinstance(func.value, ast.Name)
            and func.value.id == name
        ):
            return True
    return any(
        isinstance(a.target, ast.Name) and a.target.id == name for a in file.nodes(ast.AugAssign)
    )


def _reads_parameters(expr: ast.AST) -> bool:
    for node in ast.walk(expr):
        if isinstance(node, ast.Attribute) and node.attr in _PARAMETERS:
            return True
        if isinstance(node, ast.Call) and terminal_name(node.func) == "Parameter":
            return True  # `nn.Parameter(...)`: the module's own weights
    return False


def _made_tensor(file: PythonFile, name: ast.Name, at: ast.AST) -> bool:
    """Every binding of `name` reaching `at` makes a tensor here (`torch.zeros(...)`,
    `w.detach().clone()`, `x.requires_grad_()`), none from a model's parameters."""
    bound = file.model.reaching(name.id, at)
    if not bound:
        return False
    for b in bound:
        value = b.value
        if value is None or not isinstance(value, ast.Call) or _reads_parameters(value):
            return False
        if not any(
            (file.qualname(n) or "").startswith("torch.")
            or (isinstance(n.func, ast.Attribute) and n.func.attr in _TENSOR_MAKERS)
            for n in ast.walk(value)
            if isinstance(n, ast.Call)
        ):
            return False
    return True


_TENSOR_MAKERS = {"clone", "detach", "requires_grad_", "to", "cuda", "float", "double"}
