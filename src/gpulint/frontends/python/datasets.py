"""Dataset facts: what a `DataLoader`'s samples are, and what reading one costs the host.

A loader's dataset is the expression handed to `DataLoader(...)` (its first argument or
`dataset=`), followed through the assignments of its name that reach the call. What the rules of
the input pipeline ask of it:

- `items_on_device`: the samples (or the batches the loader's `collate_fn` builds) come out on
  the GPU already: a dataset class whose `__getitem__` moves them (`.cuda()`, `.to(device)`), a
  collate function of this module that does, `TensorDataset(x.cuda(), ...)`.
- `items_in_memory`: reading a sample only indexes data already in memory: `TensorDataset(x, y)`,
  a list or `range` of values, or a dataset class of this module whose `__getitem__` indexes
  attributes that hold data loaded whole (`torch.load(path)`, `np.load(path)`, tensors built in
  `__init__`, or arrays the construction passes from this file) and calls nothing that reads a
  file, decodes or transforms (a transform, `Image.open`, a tokenizer, `np.load` per item, a
  memory map or an HDF5 dataset indexed lazily). Unknown is not in memory: a parameter the file
  cannot trace, a method it cannot read, a call it does not know all count as real work.
- `token_batches`, `tokenizes_per_item`, `tiny_samples`: text and small-image pipelines.
- `iterating_loops`: the loops of the module that iterate the loader, when those are all its uses.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

from gpulint.frontends.python.model import FUNCTIONS
from gpulint.frontends.python.names import keyword, terminal_name
from gpulint.frontends.python.transfers import device_transfer

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_ITEM_METHODS = {"__getitem__", "__iter__", "__getitems__"}


def dataset_expr(call: ast.Call) -> ast.expr | None:
    """The dataset a `DataLoader(...)` call is given, as written."""
    if call.args:
        return call.args[0]
    found = keyword(call, "dataset")
    return found.value if found is not None else None


def dataset_exprs(file: PythonFile, call: ast.Call) -> list[ast.expr]:
    """The dataset expression and, for a name, the values assigned to it that may reach the
    loader (`ds = Cls(...)` above it, or in a loop around it), from the model's bindings."""
    dataset = dataset_expr(call)
    if dataset is None:
        return []
    exprs = [dataset]
    if isinstance(dataset, ast.Name):
        exprs += [
            b.value
            for b in file.model.bindings_of(dataset.id, before=call)
            if b.kind in ("assign", "annassign") and b.value is not None
        ]
    return exprs


def _dataset_classes(file: PythonFile, call: ast.Call) -> list[tuple[ast.ClassDef, ast.Call]]:
    """The classes of this module the loader's dataset is built from, each with the call that
    builds it."""
    classes = {c.name: c for c in file.nodes(ast.ClassDef)}
    out = []
    for expr in dataset_exprs(file, call):
        if isinstance(expr, ast.Call):
            cls = classes.get(terminal_name(expr.func) or "")
            if cls is not None:
                out.append((cls, expr))
    return out


def _item_methods(cls: ast.ClassDef) -> Iterator[ast.FunctionDef]:
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name in _ITEM_METHODS:
            yield item


# -- on the device ------------------------------------------------------------------------------
def items_on_device(file: PythonFile, call: ast.Call) -> bool:
    """The loader hands out CUDA tensors: its dataset class moves each sample to the GPU in
    `__getitem__` (or `__iter__`), its `collate_fn` (a function or method of this module) moves
    the batch, or it is a `TensorDataset` of tensors moved to the GPU. Pinning such tensors
    fails, and worker processes would each have to initialise CUDA."""
    for cls, _ in _dataset_classes(file, call):
        if any(_moves(file, method) for method in _item_methods(cls)):
            return True
    collate = _collate_function(file, call)
    if collate is not None and _moves(file, collate):
        return True
    for expr in dataset_exprs(file, call):
        # `TensorDataset(x.cuda(), y.cuda())`, a dataset built from tensors moved to the GPU
        if isinstance(expr, ast.Call) and any(_moves(file, arg) for arg in expr.args):
            return True
    return False


def _moves(file: PythonFile, node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and device_transfer(file, n)
        for n in ast.walk(node)
    )


def _collate_function(file: PythonFile, call: ast.Call) -> ast.AST | None:
    """The loader's `collate_fn` where this file defines it: a lambda, a function of the module
    or a method of the class around the loader (`collate_fn=self.collate`)."""
    collate = keyword(call, "collate_fn")
    if collate is None:
        return None
    value = collate.value
    if isinstance(value, ast.Lambda):
        return value
    if isinstance(value, ast.Name):
        defs = file.model.functions(value.id)
        return defs[0] if len(defs) == 1 else None
    if (
        isinstance(value, ast.Attribute)
        and isinstance(value.value, ast.Name)
        and value.value.id == "self"
    ):
        cls = file.model.enclosing_class(call)
        if cls is not None:
            for stmt in cls.body:
                if isinstance(stmt, FUNCTIONS) and stmt.name == value.attr:
                    return stmt
    return None


_TENSOR_DATASET = re.compile(r"TensorDataset|tensor_dataset", re.IGNORECASE)


def _tensor_dataset(file: PythonFile, call: ast.Call) -> bool:
    return bool(_TENSOR_DATASET.search(terminal_name(call.func) or ""))


# -- in memory ----------------------------------------------------------------------------------
def items_in_memory(file: PythonFile, call: ast.Call) -> bool:
    """Reading a sample of the loader only indexes data already in memory (see the module's
    docstring), and its `collate_fn`, if any, does no work of its own either."""
    collate = keyword(call, "collate_fn")
    if collate is not None:
        body = _collate_function(file, call)
        if body is None or not _cheap(file, body, None, 0):
            return False
    for expr in dataset_exprs(file, call):
        if isinstance(expr, ast.Call) and _tensor_dataset(file, expr):
            return True
        if _plain_values(file, expr):
            return True
    for cls, built in _dataset_classes(file, call):
        if class_items_cheap(file, cls, built):
            return True
    session = file.project
    if session is None:
        return False
    local = {c.name for c in file.nodes(ast.ClassDef)}
    for expr in dataset_exprs(file, call):
        # `PromptDataset(args.prompt, n)` imported from the tree's `utils/dataset.py`
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
            if expr.func.id not in local and session.dataset_items_cheap(file, expr.func):
                return True
    return False


def class_items_cheap(file: PythonFile, cls: ast.ClassDef, built: ast.Call | None) -> bool:
    """The class's one `__getitem__` only indexes, converts and reshapes data in memory.
    `built`: the call that builds the dataset in this file; None for a class read from
    another module, whose constructor arguments are then unknown (so not in memory)."""
    getitem = [m for m in _item_methods(cls) if m.name == "__getitem__"]
    if len(getitem) != 1:
        return False
    if built is None:
        built = ast.Call(func=ast.Name(id=cls.name, ctx=ast.Load()), args=[], keywords=[])
    return _cheap(file, getitem[0], (cls, built), 0)


def _plain_values(file: PythonFile, expr: ast.AST) -> bool:
    """A list, tuple or `range` of values: `list(range(n))`, `[0, 1, 2]`, `range(len(x))`."""
    if isinstance(expr, (ast.List, ast.Tuple)):
        return all(isinstance(e, ast.Constant) for e in expr.elts)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name):
        if expr.func.id == "range" and expr.func.id not in file.bindings:
            return True
        if expr.func.id in ("list", "tuple") and len(expr.args) == 1:
            return _plain_values(file, expr.args[0])
    return False


# Builtins that do no I/O; torch and numpy calls other than these readers; tensor and container
# methods that reshape, convert or look up.
_CHEAP_BUILTINS = {
    "len", "int", "float", "bool", "str", "list", "tuple", "dict", "set", "range", "min", "max",
    "abs", "round", "isinstance", "zip", "enumerate", "sorted", "sum", "slice", "divmod",
    "getattr", "hasattr", "super", "type", "any", "all", "reversed",
}  # fmt: skip
_READERS = {
    "torch.load", "torch.from_file", "numpy.load", "numpy.fromfile", "numpy.loadtxt",
    "numpy.genfromtxt", "numpy.memmap",
}  # fmt: skip
_CHEAP_ROOTS = ("torch", "numpy", "random", "math")
_CHEAP_METHODS = {
    "long", "float", "int", "double", "half", "bool", "byte", "clone", "copy", "view",
    "reshape", "unsqueeze", "squeeze", "permute", "transpose", "contiguous", "flatten", "type",
    "astype", "numpy", "tolist", "item", "get", "keys", "values", "items", "append", "extend",
    "index", "detach", "t", "expand", "repeat", "size", "dim", "to", "format", "__getitem__",
}  # fmt: skip


def _cheap(
    file: PythonFile,
    method: ast.AST,
    owner: tuple[ast.ClassDef, ast.Call] | None,
    depth: int,
) -> bool:
    """`method` (an item method, a helper it calls, a collate function) only indexes, converts
    and reshapes data in memory: every call it makes is cheap, and every attribute of `self` it
    reads holds data in memory."""
    if depth > 2:
        return False
    nodes = ast.walk(method.body if isinstance(method, ast.Lambda) else method)
    for node in nodes:
        if isinstance(node, ast.Call):
            if not _cheap_call(file, node, owner, depth):
                return False
        elif (
            owner is not None
            and isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and _read_into(file, node)
            and not _in_memory_attribute(file, owner, node.attr)
        ):
            return False
    return True


def _read_into(file: PythonFile, node: ast.Attribute) -> bool:
    """`self.data[i]`, `self.data.get(k)`, `for x in self.data`: the attribute's contents are
    read, not only its reference handed on (`{"prompt": self.prompt}` costs nothing whatever
    the object is)."""
    parent = file.parent(node)
    if isinstance(parent, ast.Subscript) and parent.value is node:
        return True
    if isinstance(parent, (ast.For, ast.comprehension)) and parent.iter is node:
        return True
    return (
        isinstance(parent, ast.Attribute)
        and isinstance(file.parent(parent), ast.Call)
        and file.parent(parent).func is parent  # type: ignore[union-attr]
    )


def _cheap_call(
    file: PythonFile, call: ast.Call, owner: tuple[ast.ClassDef, ast.Call] | None, depth: int
) -> bool:
    func = call.func
    if device_transfer(file, call):
        return True  # on the device: `items_on_device` answers for it
    q = file.qualname(call)
    if q is not None:
        if q in _READERS or q.startswith(("torch.nn", "torch.hub", "torch.utils")):
            return False  # a file read, or a module or transform run per sample
        return q.split(".")[0] in _CHEAP_ROOTS
    if isinstance(func, ast.Name):
        if func.id in _CHEAP_BUILTINS:
            return True
        defs = file.model.functions(func.id)
        return len(defs) == 1 and _cheap(file, defs[0], None, depth + 1)
    if not isinstance(func, ast.Attribute):
        return False
    receiver = func.value
    if isinstance(receiver, ast.Name) and receiver.id == "self":
        if owner is None:
            return False
        for stmt in owner[0].body:
            if isinstance(stmt, FUNCTIONS) and stmt.name == func.attr:
                return _cheap(file, stmt, owner, depth + 1)
        return False  # `self.transform(x)`, `self.tokenizer(text)`: an object's own work
    return func.attr in _CHEAP_METHODS


def _in_memory_attribute(file: PythonFile, owner: tuple[ast.ClassDef, ast.Call], attr: str) -> bool:
    """Every value the class assigns to `self.<attr>` is data in memory (or a plain value)."""
    cls, built = owner
    stores = [
        s
        for s in file.model.attribute_stores(attr)
        if isinstance(s.target.value, ast.Name)
        and s.target.value.id == "self"
        and file.model.enclosing_class(s.node) is cls
    ]
    if not stores:
        return False  # set elsewhere (a base class, a caller): unknown
    return all(
        s.value is not None and _in_memory_value(file, s.value, owner, s.node, 0) for s in stores
    )


def _in_memory_value(
    file: PythonFile,
    value: ast.AST,
    owner: tuple[ast.ClassDef, ast.Call],
    at: ast.AST,
    depth: int,
) -> bool:
    """`value`, computed when the dataset is built, is data held in memory: a literal, a tensor
    or array built or loaded whole, a name bound to one, or a constructor argument that is."""
    if depth > 3:
        return False
    if isinstance(value, ast.Constant):
        return True
    if isinstance(value, (ast.List, ast.Tuple, ast.Set)):
        return all(_in_memory_value(file, e, owner, at, depth + 1) for e in value.elts)
    if isinstance(value, ast.Dict):
        return all(
            v is not None and _in_memory_value(file, v, owner, at, depth + 1) for v in value.values
        )
    if isinstance(value, (ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.SetComp)):
        return False  # built per element from something else: which, the walk does not say
    if isinstance(value, (ast.Subscript, ast.Attribute)):
        inner = value.value
        return _in_memory_value(file, inner, owner, at, depth + 1)
    if isinstance(value, ast.BinOp):
        return _in_memory_value(file, value.left, owner, at, depth + 1) and _in_memory_value(
            file, value.right, owner, at, depth + 1
        )
    if isinstance(value, ast.Call):
        return _loaded_whole(file, value, owner, at, depth)
    if isinstance(value, ast.Name):
        if value.id == "self":
            return False
        function = file.enclosing_function(at)
        bound = file.model.bindings_of(value.id, before=at)
        if not bound:
            return False
        for b in bound:
            if b.kind == "param" and function is not None and b.node in _params(function):
                argument = _argument(owner[1], function, value.id)
                if argument is None:
                    if b.value is None:
                        return False
                    argument = b.value
                    if not _in_memory_value(file, argument, owner, at, depth + 1):
                        return False
                elif not _in_memory_value(file, argument, owner, owner[1], depth + 1):
                    return False
            elif b.value is None or not _in_memory_value(file, b.value, owner, b.node, depth + 1):
                return False
        return True
    return False


def _loaded_whole(
    file: PythonFile,
    call: ast.Call,
    owner: tuple[ast.ClassDef, ast.Call],
    at: ast.AST,
    depth: int,
) -> bool:
    q = file.qualname(call) or ""
    if q in ("numpy.load", "torch.load"):
        return keyword(call, "mmap_mode") is None and keyword(call, "mmap") is None
    if q in _READERS:
        return False  # a memory map: each index reads the file
    root = q.split(".")[0]
    if root in ("torch", "numpy") and not q.startswith(("torch.utils", "torch.nn")):
        # a tensor or array built or converted from data: in memory if that data is
        args = [*call.args, *(k.value for k in call.keywords if k.arg not in ("dtype", "device"))]
        return all(
            isinstance(a, ast.Constant) or _in_memory_value(file, a, owner, at, depth + 1)
            for a in args
        )
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _CHEAP_METHODS:
        return _in_memory_value(file, func.value, owner, at, depth + 1)
    return False


def _params(function: ast.AST) -> list[ast.arg]:
    args = function.args  # type: ignore[attr-defined]
    return [*args.posonlyargs, *args.args, *args.kwonlyargs]


def _argument(built: ast.Call, function: ast.AST, name: str) -> ast.expr | None:
    """What the call that builds the dataset passes for `__init__`'s parameter `name`."""
    if getattr(function, "name", None) != "__init__":
        return None
    for kw in built.keywords:
        if kw.arg == name:
            return kw.value
    params = [a.arg for a in _params(function)][1:]  # less `self`
    if name in params:
        index = params.index(name)
        if index < len(built.args) and not any(
            isinstance(a, ast.Starred) for a in built.args[: index + 1]
        ):
            return built.args[index]
    return None


# -- loops over a loader ------------------------------------------------------------------------
def iterating_loops(file: PythonFile, call: ast.Call) -> list[ast.For | ast.AsyncFor] | None:
    """The `for` loops that iterate the loader `call` builds (`for b in loader`, through
    `enumerate`/`tqdm`), when those are all the module does with it; None when the loader is
    not bound to one name, is never iterated here, or is used otherwise too (returned, handed to
    a trainer or another function)."""
    targets = file.model.targets_of(call)
    if len(targets) != 1:
        return None
    target = targets[0]
    if isinstance(target, ast.Name):
        scope: ast.AST = file.enclosing_function(call) or file.tree

        def same(n: ast.AST) -> bool:
            return isinstance(n, ast.Name) and n.id == target.id

    elif (
        isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == "self"
    ):
        scope = file.model.enclosing_class(call) or file.tree

        def same(n: ast.AST) -> bool:
            return (
                isinstance(n, ast.Attribute)
                and n.attr == target.attr
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
            )

    else:
        return None
    loops: list[ast.For | ast.AsyncFor] = []
    for node in ast.walk(scope):
        if not same(node) or not isinstance(getattr(node, "ctx", None), ast.Load):
            continue
        parent = file.parent(node)
        if isinstance(parent, ast.Attribute) or (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Name)
            and parent.func.id == "len"
        ):
            continue  # `loader.dataset`, `len(loader)`: read, not handed on
        loop = _iterated_by(file, node)
        if loop is None:
            return None
        loops.append(loop)
    return loops or None


def _iterated_by(file: PythonFile, node: ast.AST) -> ast.For | ast.AsyncFor | None:
    """The loop whose iterable is `node`, bare or wrapped (`enumerate(x)`, `tqdm(x)`)."""
    child = node
    for parent in file.ancestors(node):
        if isinstance(parent, (ast.For, ast.AsyncFor)):
            return parent if child is parent.iter else None
        if isinstance(parent, ast.Call) and parent.args and parent.args[0] is child:
            child = parent
            continue
        return None
    return None


def evaluates_per_item(file: PythonFile, loop: ast.AST) -> bool:
    """An evaluation pass: the loop neither steps an optimizer nor calls backward, and reads a
    value back to the host on every iteration (`.item()`, `.cpu()`, a metric of a tensor)."""
    from gpulint.frontends.python.loops import own_nodes
    from gpulint.frontends.python.syncs import host_sync

    if file.loops.trains(loop):  # type: ignore[arg-type]
        return False
    return any(
        host_sync(file, n, with_events=False) is not None
        and file.loops.periodic_guard(n, loop) is None
        for n in own_nodes(loop)  # type: ignore[arg-type]
    )


def per_item_evaluation(file: PythonFile, call: ast.Call) -> bool:
    """A `batch_size=1` loader that only evaluation passes iterate, each reading a value back
    to the host per sample (`evaluates_per_item`): the pass waits for the GPU at every sample
    anyway, and runs once, beside the training loop."""
    if not one_per_batch(call):
        return False
    loops = iterating_loops(file, call)
    return loops is not None and all(evaluates_per_item(file, loop) for loop in loops)


def one_per_batch(call: ast.Call) -> bool:
    """`batch_size=1` (written so): each batch is one sample."""
    size = keyword(call, "batch_size")
    node = size.value if size is not None else (call.args[1] if len(call.args) > 1 else None)
    return isinstance(node, ast.Constant) and node.value == 1


def has_workers(call: ast.Call) -> bool | None:
    """True for a positive `num_workers`, False for none (missing or 0), None when unknown."""
    found = keyword(call, "num_workers")
    if found is None:
        if len(call.args) > 5 or any(k.arg is None for k in call.keywords):
            return None
        return False
    if isinstance(found.value, ast.Constant) and isinstance(found.value.value, int):
        return found.value.value > 0
    return None


# -- text and small images ----------------------------------------------------------------------
# Token batches: a text pipeline (a tokenizer, `input_ids`, a padding collator) and nothing that
# reads images, audio or video. Text, because the module's words are the only evidence of what a
# dataset from elsewhere (`load_dataset(...).map(tokenize)`) yields; a word that is only in a
# comment errs on the side of the old behaviour (the finding).
_TOKENS = re.compile(r"tokeniz|input_ids|DataCollator", re.IGNORECASE)
_NOT_TEXT = re.compile(
    r"image|pixel|audio|video|wav|spectrogram|\bmel|torchvision|\bPIL\b|cv2|\btransforms?\b"
    r"|latent|\.npy|\bnp\.load|point_?cloud|voxel",
    re.IGNORECASE,
)


def token_batches(file: PythonFile) -> bool:
    """The module's loaders hand out token-ID batches: a batch of 8 sequences of 2,048 int64 ids
    is 128 KiB, so pinning it saves microseconds, and a pre-tokenised dataset's per-batch host
    work (indexing rows, padding them) is small beside a language-model step."""
    return bool(_TOKENS.search(file.text)) and not _NOT_TEXT.search(file.text)


def tokenizes_per_item(file: PythonFile, call: ast.Call) -> bool:
    """The loader's dataset is a class of this module that tokenises in `__getitem__` (or
    `__iter__`): real host work per sample, which workers would overlap with the step."""
    for cls, _ in _dataset_classes(file, call):
        for item in _item_methods(cls):
            for node in ast.walk(item):
                if isinstance(node, ast.Call) and _TOKENS.search(ast.unparse(node.func)):
                    return True
    return False


# torchvision's small-image datasets: 28x28 greyscale or 32x32 RGB samples.
_TINY_DATASETS = {
    "MNIST",
    "FashionMNIST",
    "KMNIST",
    "EMNIST",
    "QMNIST",
    "CIFAR10",
    "CIFAR100",
    "SVHN",
}


def tiny_samples(file: PythonFile, call: ast.Call) -> bool:
    """The loader's dataset is one of torchvision's small-image datasets (MNIST, CIFAR, SVHN):
    a batch of 64 CIFAR images is 768 KiB, copied in tens of microseconds pinned or not."""
    for expr in dataset_exprs(file, call):
        if isinstance(expr, ast.Call):
            q = file.qualname(expr) or ""
            if q.startswith("torchvision.datasets") and q.rsplit(".", 1)[-1] in _TINY_DATASETS:
                return True
    return False
