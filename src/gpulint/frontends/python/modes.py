"""Train and eval mode: is a module put in eval mode before some code, and does its mode matter?

Every `nn.Module` starts in training mode; `module.eval()` (or `module.train(False)`) switches
dropout off and makes batch norm use, and stop updating, its running statistics.

- `eval_before(file, model, at)`: True where the code puts the module `model` (`model`,
  `self.net`) in eval mode before `at`: `model.eval()` / `model.train(False)` (also on a
  part or a whole of it: `model.module.eval()`, `self.eval()`), earlier in the function or in a
  loop around `at` (a `model.train()` before `at` with no switch after it: training mode,
  however it was built); for `self.model`, anywhere in the class (or a base class of it: not
  seen, so unknown); in a helper of this file called with it before (`set_eval(model)`); where it
  was built (`Net().eval()`, `from_pretrained(...)`, which returns a module in eval mode); or,
  for a parameter, in every caller of this file before the call (the function summaries'
  callees, walked the other way). False where none of that happens and the module's mode is
  known to be the default (built here, or handed down from a caller that builds it). None
  where it cannot be told (a module unpacked from a call that passes it on, `model, opt =
  accelerator.prepare(model, opt)`, is followed to the argument): a function nothing in this file calls, a module handed to a call
  whose body is elsewhere before `at`, one loaded with its mode (`torch.load`, `torch.jit.load`),
  an average or teacher copy (`ModelEma(model)`), `model.apply(...)`.
- `mode_dependent(file, model, at)`: False where the module is known to behave the same in
  both modes: built here from `nn.Sequential(...)` or a class of this file whose layers are all
  `torch.nn` layers with no dropout, batch norm or instance norm (and no read of
  `self.training`); True where it has one; None otherwise (a class from another module).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import FUNCTIONS, LOOPS, position
from gpulint.frontends.python.names import terminal_name

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

Answer = bool | None

# Builds that return a module in eval mode, or in whatever mode it was saved with.
_LOADED = re.compile(r"from_pretrained|^load|_load$|^restore|jit|script|trace|export|deepcopy")
# Copies kept for evaluation: an exponential moving average, a teacher, a frozen copy.
_AVERAGED = re.compile(r"ema|average|swa|teacher|frozen|infer", re.IGNORECASE)
# Methods that pass the module through unchanged (`model.to(device)`).
_PASS_THROUGH = {
    "to", "cuda", "half", "float", "bfloat16", "double", "cpu", "train", "requires_grad_",
}  # fmt: skip
_TORCH_WRAPPERS = re.compile(
    r"^torch\.(compile|nn\.(parallel\.)?(DistributedDataParallel|DataParallel))"
)
# Module methods that cannot switch the mode (anything else called on it may).
_HARMLESS_METHODS = {
    "to", "cuda", "cpu", "half", "float", "bfloat16", "double", "parameters", "named_parameters",
    "buffers", "named_buffers", "modules", "named_modules", "children", "state_dict",
    "load_state_dict", "zero_grad", "requires_grad_", "forward", "register_forward_hook",
    "register_buffer", "get_submodule",
}  # fmt: skip
_HARMLESS_CALLS = {"print", "len", "isinstance", "getattr", "hasattr", "str", "repr", "type", "id"}
_MODE_LAYERS = re.compile(r"Dropout|BatchNorm|InstanceNorm|Transformer(Encoder|Decoder)?(Layer)?$")
_MODE_FUNCTIONS = re.compile(r"dropout|batch_norm|instance_norm")
_DROP_KEYWORDS = re.compile(r"drop", re.IGNORECASE)
_NOT_LAYERS = {"math", "numpy", "einops", "functools", "itertools", "operator", "typing", "copy"}


def _chain(expr: ast.AST) -> tuple[str, ...] | None:
    """`("self", "model")` for `self.model`; `.module` and `.forward` are the same module."""
    parts: list[str] = []
    node = expr
    while isinstance(node, ast.Attribute):
        if node.attr not in ("module", "forward", "_orig_mod"):
            parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return tuple(reversed(parts))


def _related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """One names a part of the other (`model` and `model.backbone`; `self` and `self.net`),
    or both end in the same attribute (`self.model` and `model`)."""
    n = min(len(a), len(b))
    return a[:n] == b[:n] or a[-1] == b[-1]


def _switches(call: ast.Call) -> bool:
    """`x.eval()`, `x.train(False)`, `x.train(mode=flag)`: anything but `train()`/`train(True)`."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr == "eval":
        return not call.args and not call.keywords
    if func.attr == "train":
        given = [*call.args, *(k.value for k in call.keywords)]
        return bool(given) and not (isinstance(given[0], ast.Constant) and given[0].value is True)
    return False


def _body_switches(file: PythonFile, function: ast.AST, depth: int) -> bool:
    """The function (or one it calls, two levels down) calls `.eval()`/`.train(False)`."""
    for node in file.model.members(function):
        if isinstance(node, ast.Call):
            if _switches(node):
                return True
            if depth < 2:
                callee = file.model.resolve_callee(node)
                if callee is not None and callee is not function:
                    if _body_switches(file, callee, depth + 1):
                        return True
    return False


def eval_before(file: PythonFile, model: ast.AST, at: ast.AST, depth: int = 0) -> Answer:
    """See the module docstring."""
    chain = _chain(model)
    if chain is None or depth > 4 or any(_AVERAGED.search(part) for part in chain):
        return None
    scope = file.model.scope_of(at)
    if not isinstance(scope, (ast.Module, *FUNCTIONS)):
        return None
    found = _scan(file, scope, chain, at)
    if found is not False:
        return found
    root = chain[0]
    if root in ("self", "cls"):
        return _in_class(file, scope, chain)
    if _trained_before(file, scope, chain, at):
        return False  # `model.train()` before, no switch since: training mode, however built
    bound = file.model.reaching(root, at) if root in file.model.table(scope) else None
    if bound is None:
        return _global(file, chain)
    if not bound:
        return None
    answers = [_binding(file, b, scope, chain, depth) for b in bound]
    if True in answers:
        return True
    return None if None in answers else False


def _trained_before(file: PythonFile, scope: ast.AST, chain: tuple[str, ...], at: ast.AST) -> bool:
    """`model.train()` (or `train(True)`) on the module or a part of it before `at` in `scope`."""
    for node in file.model.members(scope):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "train"
            and not _switches(node)
            and (receiver := _chain(node.func.value)) is not None
            and _related(receiver, chain)
            and _before(file, node, at)
        ):
            return True
    return False


def _before(file: PythonFile, node: ast.AST, at: ast.AST) -> bool:
    """`node` runs before `at`: earlier in the text, or in a loop around `at` (the next pass)."""
    if position(node) < position(at):
        return True
    for loop in file.ancestors(at):
        if isinstance(loop, LOOPS) and any(a is loop for a in file.ancestors(node)):
            return True
    return False


def _scan(file: PythonFile, scope: ast.AST, chain: tuple[str, ...], at: ast.AST) -> Answer:
    """What the calls of `scope` before `at` do to the module."""
    unknown: list[ast.AST] = []  # calls that may switch the mode, in ways not seen
    for node in file.model.members(scope):
        if not isinstance(node, ast.Call) or not _before(file, node, at):
            continue
        func = node.func
        receiver = _chain(func.value) if isinstance(func, ast.Attribute) else None
        if receiver is not None and len(receiver) == 1 and receiver[0] in ("self", "cls"):
            # `self.log(...)`, `self.evaluate_step(batch)`: what a method of the class does
            if chain[0] == receiver[0]:
                if _switches(node):
                    return True
                callee = file.model.resolve_callee(node)
                if callee is not None and _body_switches(file, callee, 0):
                    return True  # `self.set_eval_mode()`
        elif receiver is not None and _related(receiver, chain):
            if _switches(node):
                return True
            method = func.attr  # type: ignore[attr-defined]
            if method not in _HARMLESS_METHODS and method != "train":
                callee = file.model.resolve_callee(node)
                if callee is None or _body_switches(file, callee, 0):
                    unknown.append(node)  # `model.apply(set_bn_eval)`, `model.freeze()`
        handed = any(
            (c := _chain(a)) is not None and _related(c, chain)
            for a in [*node.args, *(k.value for k in node.keywords)]
        )
        if not handed:
            continue
        q = file.qualname(node) or ""
        if q.startswith("torch.") or (isinstance(func, ast.Name) and func.id in _HARMLESS_CALLS):
            continue
        callee = file.model.resolve_callee(node)
        if callee is None:
            unknown.append(node)
        elif _body_switches(file, callee, 0):
            return True
    if not unknown:
        return False
    # a `model.train()` after them (and before `at`) sets the mode whatever they did
    trains = [
        position(n)
        for n in file.model.members(scope)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "train"
        and not _switches(n)
        and (r := _chain(n.func.value)) is not None
        and _related(r, chain)
        and position(n) < position(at)
    ]
    last = max(trains, default=None)
    if last is not None and all(position(u) < last for u in unknown):
        return False
    return None


def _in_class(file: PythonFile, scope: ast.AST, chain: tuple[str, ...]) -> Answer:
    """`self.model`: anything in the class that may put it in eval mode, at any time, makes
    the mode unknown; none at all: it stays in training mode."""
    cls = file.model.enclosing_class(scope)
    if cls is None:
        return None
    for base in cls.bases:
        # a base class of another module (a trainer's) may switch the mode in its own loop
        if not (isinstance(base, ast.Name) and base.id == "object"):
            return None
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and _switches(node):
            receiver = _chain(node.func.value)  # type: ignore[attr-defined]
            if receiver is None or _related(receiver, chain):
                return None
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.expr):
            for target in node.targets:
                if _chain(target) == chain[:2] and _built_answer(file, node.value) is not False:
                    return None
    return False


def _global(file: PythonFile, chain: tuple[str, ...]) -> Answer:
    """A module-level name read in a function: an eval switch anywhere may run first."""
    for node in file.nodes(ast.Call):
        if _switches(node):
            receiver = _chain(node.func.value)  # type: ignore[attr-defined]
            if receiver is None or _related(receiver, chain):
                return None
    bound = file.model.bindings_in(file.tree, chain[0])
    if not bound:
        return None
    answers = [_binding(file, b, file.tree, chain, 1) for b in bound]
    if True in answers:
        return True
    return None if None in answers else False


def _binding(file: PythonFile, b, scope: ast.AST, chain: tuple[str, ...], depth: int) -> Answer:
    if b.kind == "param":
        return _callers(file, scope, b.name, depth)
    if b.value is None:
        passed = _passed_through(b)
        # `model, optimizer, loader = accelerator.prepare(model, optimizer, loader)`
        return eval_before(file, passed, b.node, depth + 1) if passed is not None else None
    return _built_answer(file, b.value, scope=scope, at=b.node, depth=depth)


def _passed_through(b) -> ast.expr | None:
    """For `a, b = f(a, b)` (accelerate's `prepare`, apex's `amp.initialize`), the argument of
    the same name at the position the binding unpacks: the module passed on, wrapped."""
    from gpulint.frontends.python.model import unpacked_index

    index = unpacked_index(b)
    value = getattr(b.node, "value", None)
    if index is None or not isinstance(value, ast.Call) or index >= len(value.args):
        return None
    arg = value.args[index]
    if isinstance(arg, ast.Name) and arg.id == b.name:
        return arg
    return None


def _built_answer(
    file: PythonFile,
    value: ast.expr,
    scope: ast.AST | None = None,
    at: ast.AST | None = None,
    depth: int = 0,
) -> Answer:
    """What the build of a module says of its mode: True in eval mode (`.eval()` on it,
    `from_pretrained`), None for a mode of its own (loaded, an average's copy, unknown
    expressions), False for a module built in training mode (a constructor or a factory)."""
    node: ast.AST = value
    while True:
        if isinstance(node, ast.Call) and _switches(node):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _PASS_THROUGH
        ):
            node = node.func.value
            continue
        if (
            isinstance(node, ast.Call)
            and _TORCH_WRAPPERS.match(file.qualname(node) or "")
            and node.args
        ):
            node = node.args[0]
            continue
        break
    if isinstance(node, (ast.Name, ast.Attribute)) and scope is not None and at is not None:
        # `model = model.to(device)`, `net = DDP(net)`: what the earlier binding says
        return eval_before(file, node, at, depth + 1)
    if not isinstance(node, ast.Call):
        return None
    name = terminal_name(node.func) or ""
    if name == "from_pretrained":
        return True
    if _LOADED.search(name) or _AVERAGED.search(name):
        return None
    callee = file.model.resolve_callee(node)
    if callee is not None and _body_switches(file, callee, 0):
        return None  # `def get_model(): ...; model.eval(); return model`
    return False


def _callers(file: PythonFile, function: ast.AST, param: str, depth: int) -> Answer:
    """The parameter `param` of `function`: what every caller of this file did to the
    module it passes, before the call. None when nothing here calls the function."""
    passed = _passed(file, function, param)
    if passed is None:
        return None
    answers = [eval_before(file, given, call, depth + 1) for given, call in passed]
    if True in answers:
        return True
    return None if None in answers else False


def _passed(
    file: PythonFile, function: ast.AST, param: str
) -> list[tuple[ast.expr, ast.Call]] | None:
    """What each call of this file to `function` passes as `param`, with the call; None when
    nothing here calls it or a call passes it in a way not told (`*args`, a default)."""
    if not isinstance(function, FUNCTIONS):
        return None
    calls = [
        c
        for c in file.nodes(ast.Call)
        if terminal_name(c.func) == function.name and file.model.resolve_callee(c) is function
    ]
    if not calls:
        return None
    positional = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if positional and positional[0] in ("self", "cls"):
        positional = positional[1:]
    out = []
    for call in calls:
        given: ast.expr | None = next((k.value for k in call.keywords if k.arg == param), None)
        if given is None and param in positional:
            index = positional.index(param)
            if index < len(call.args) and not any(
                isinstance(a, ast.Starred) for a in call.args[: index + 1]
            ):
                given = call.args[index]
        if given is None:
            return None
        out.append((given, call))
    return out


def mode_dependent(file: PythonFile, model: ast.AST, at: ast.AST, depth: int = 0) -> Answer:
    """See the module docstring."""
    chain = _chain(model)
    if chain is None or len(chain) != 1 or depth > 3:
        return None
    bound = file.model.reaching(chain[0], at)
    if not bound:
        return None
    answers: set[Answer] = set()
    for b in bound:
        if b.kind == "param":
            passed = _passed(file, file.model.scope_of(b.node), b.name)
            if passed is None:
                return None
            answers |= {mode_dependent(file, given, call, depth + 1) for given, call in passed}
        elif b.value is None:
            return None
        else:
            answers.add(_built_dependent(file, b.value, 0))
    if True in answers:
        return True
    return None if None in answers else False


def _built_dependent(file: PythonFile, value: ast.AST, depth: int) -> Answer:
    node = value
    while (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _PASS_THROUGH
    ):
        node = node.func.value
    if not isinstance(node, ast.Call) or depth > 4:
        return None
    q = file.qualname(node) or ""
    if q in ("torch.nn.Sequential", "torch.nn.ModuleList"):
        return _layers_dependent(file, [*node.args], depth)
    if q.startswith("torch.nn."):
        return _layer(file, node, depth)  # one layer: `nn.Linear(32, 4)`
    if isinstance(node.func, ast.Name):
        cls = _local_class(file, node.func)
        if cls is not None:
            return _class_dependent(file, cls, depth)
    return None


def _local_class(file: PythonFile, name: ast.Name) -> ast.ClassDef | None:
    for stmt in file.tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == name.id:
            return stmt
    return None


def _layers_dependent(file: PythonFile, exprs: list[ast.AST], depth: int) -> Answer:
    unknown = False
    for expr in exprs:
        for node in ast.walk(expr):
            if not isinstance(node, ast.Call):
                continue
            answer = _layer(file, node, depth)
            if answer is True:
                return True
            if answer is None:
                unknown = True
    return None if unknown else False


def _layer(file: PythonFile, call: ast.Call, depth: int) -> Answer:
    """One call in a module's definition: True a layer whose mode matters, None a layer this
    file cannot see into, False one that behaves the same in both modes (or not a layer)."""
    q = file.qualname(call) or ""
    last = q.rsplit(".", 1)[-1]
    if any(
        k.arg
        and _DROP_KEYWORDS.search(k.arg)
        and not (isinstance(k.value, ast.Constant) and not k.value.value)
        for k in call.keywords
    ):
        return True
    if q.startswith("torch."):
        return bool(_MODE_FUNCTIONS.search(last) or _MODE_LAYERS.search(last))
    if q:
        # imported from elsewhere: a layer this file cannot see into, unless plain maths
        return False if q.split(".", 1)[0] in _NOT_LAYERS else None
    if isinstance(call.func, ast.Name):
        cls = _local_class(file, call.func)
        if cls is not None:
            return _class_dependent(file, cls, depth + 1)
        if call.func.id[:1].isupper():
            return None  # a class whose definition is not in this file
        return False
    return bool(_MODE_FUNCTIONS.search(terminal_name(call.func) or ""))


def _class_dependent(file: PythonFile, cls: ast.ClassDef, depth: int) -> Answer:
    if depth > 4:
        return None
    if any(terminal_name(b) != "Module" for b in cls.bases):
        return None  # a subclass of another model: its layers are elsewhere
    for node in ast.walk(cls):
        if isinstance(node, ast.Attribute) and node.attr == "training":
            return True
    calls = [n for n in ast.walk(cls) if isinstance(n, ast.Call)]
    unknown = False
    for call in calls:
        answer = _layer(file, call, depth)
        if answer is True:
            return True
        if answer is None:
            unknown = True
    return None if unknown else False


# Words of a name that say evaluation: `val_loader`, `evalloader`, `test_dl`, `def validate`.
_EVAL_WORD = re.compile(
    r"^(val|valid|validate|validation|eval|evaluate|evaluation|test|testing|dev|holdout)"
    r"(loader|dataloader|set|data|dl|ds|iter|batches)?s?$",
    re.IGNORECASE,
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z])(?=[A-Z])")


def says_evaluation(name: str) -> bool:
    """A word of `name` names evaluation (`val_loader`, `evalLoader`, `run_validation`,
    `dataloaders["val"]`'s `val`), not a word that merely contains one (`interval`,
    `latest`, `device`)."""
    return any(_EVAL_WORD.match(word) for word in _WORD_SPLIT.split(name) if word)


def evaluation_loop(file: PythonFile, loop: ast.AST) -> bool:
    """A loop over a data loader that the code names as evaluation: the iterated expression
    (`val_loader`, `tqdm(dataloaders["val"])`) or the function around it (`def evaluate`)."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or not file.loops.iterates_loader(loop):
        return False
    if says_evaluation(file.segment(loop.iter)):
        return True
    function = file.enclosing_function(loop)
    return function is not None and says_evaluation(getattr(function, "name", ""))
