"""Launch sites of Triton kernels, `kernel[grid](...)` in the host code of the same file or of
another module of the checked tree that imports the kernel, and what they prove about a
kernel's tiles: the parameter each argument binds, divisibility flags
passed or set by heuristics, dimensions the launcher asserts are multiples of a tile, and
buffers it allocates rounded up to one."""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey
from gpulint.frontends.python.model import unpacked_value
from gpulint.frontends.python.triton.autotune import autotune_configs
from gpulint.frontends.python.triton.kernels import Kernel
from gpulint.frontends.python.triton.literals import Unknown, ceil_division, evaluate, label

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_LAUNCH_DIVIDED: MemoKey[dict[int, frozenset[str]]] = MemoKey("triton.launch_divided")
_LAUNCH_PADDED: MemoKey[dict[int, frozenset[str]]] = MemoKey("triton.launch_padded")
_REMOTE: MemoKey[dict[int, list[tuple[PythonFile, ast.Call]]]] = MemoKey("triton.remote_launches")


def divisibility_flags(file: PythonFile, kernel: Kernel) -> dict[str, bool]:
    """Constexpr flags that say whether a size is a multiple of its block, each with the value
    that means it is: set by a heuristic or a launch keyword that tests `%`
    (`EVEN_K=K % BLOCK_K == 0` -> True, `NEED_MASK = n % BLOCK != 0` -> False), or spelled as
    such (`EVEN_K`, `K_DIVISIBLE` -> True). A causal or feature flag is not one."""
    out = {n: True for n in kernel.constexprs if _EVEN.search(n)}
    for dec in kernel.heuristics:
        if dec.args and isinstance(dec.args[0], ast.Dict):
            for k, v in zip(dec.args[0].keys, dec.args[0].values, strict=False):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    body = v.body if isinstance(v, ast.Lambda) else v
                    polarity = mod_polarity(body)
                    if polarity is not None:
                        out[k.value] = polarity
    for host, call in host_launches(file, kernel):
        params = kernel.params
        passed = [(params[i], a) for i, a in enumerate(call.args) if i < len(params)]
        starred = [i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)]
        if starred:
            # `*q.stride()` hides how many parameters it fills: the arguments after the last
            # one fill the last parameters (unless an autotuner appends meta-parameters).
            tail = call.args[starred[-1] + 1 :]
            fits = kernel.autotune is None and len(tail) <= len(params)
            passed = (
                list(zip(params[len(params) - len(tail) :], tail, strict=False)) if fits else []
            )
        passed += [(k.arg, k.value) for k in call.keywords if k.arg]
        for arg, value in passed:
            if arg not in kernel.constexprs:
                continue
            if isinstance(value, ast.Name):  # NEED_MASK = n % BLOCK != 0; kernel[g](NEED_MASK=...)
                # the last plain assignment above the launch, from the model's bindings
                found = [
                    b
                    for b in host.model.bindings_of(value.id, before=call)
                    if b.kind in ("assign", "annassign")
                    and b.value is not None
                    and b.position[0] < call.lineno
                ]
                if found:
                    value = max(found, key=lambda b: b.position).value or value
            polarity = mod_polarity(value)
            if polarity is not None:
                out[arg] = polarity
    return out


def mod_polarity(node: ast.AST) -> bool | None:
    """For a test of divisibility, whether its being true means divisible: `n % B == 0` True,
    `n % B != 0` / `n % B` / `n % B > 0` False; None for anything else."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        inner = mod_polarity(node.operand)
        return None if inner is None else not inner
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return False
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        if any(_tests_mod(side) for side in (node.left, node.comparators[0])):
            if isinstance(node.ops[0], (ast.Eq, ast.Is)):
                return True
            if isinstance(node.ops[0], (ast.NotEq, ast.Gt, ast.IsNot)):
                return False
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.And):
        values = [mod_polarity(v) for v in node.values]
        if values and all(v is True for v in values):
            return True
    if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
        values = [mod_polarity(v) for v in node.values]
        if values and all(v is False for v in values):
            return False
    return None


_EVEN = re.compile(r"^(?:IS_)?EVEN(?:_|$)|_EVEN$|DIVISIBLE|DIVIDES", re.I)


def _tests_mod(node: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(node))


def launch_bindings(kernel: Kernel, call: ast.Call) -> dict[str, ast.expr]:
    """The kernel parameter each argument of `kernel[grid](...)` binds (keywords, positions; after
    a `*starred` argument the trailing ones fill the last parameters unless autotuned)."""
    params = kernel.params
    passed = [(params[i], a) for i, a in enumerate(call.args) if i < len(params)]
    starred = [i for i, a in enumerate(call.args) if isinstance(a, ast.Starred)]
    if starred:
        tail = call.args[starred[-1] + 1 :]
        fits = kernel.autotune is None and len(tail) <= len(params)
        passed = list(zip(params[len(params) - len(tail) :], tail, strict=False)) if fits else []
    passed += [(k.arg, k.value) for k in call.keywords if k.arg]
    return dict(passed)


def launches(file: PythonFile, kernel: Kernel) -> list[ast.Call]:
    """`kernel[grid](...)` calls in the file."""
    return [
        call
        for call in file.nodes(ast.Call)
        if isinstance(call.func, ast.Subscript) and label(call.func.value) == kernel.name
    ]


def remote_launches(file: PythonFile, kernel: Kernel) -> list[tuple[PythonFile, ast.Call]]:
    """`kernel[grid](...)` in other modules of the checked tree that import the kernel from
    this file (`from .kernels import add_kernel; add_kernel[grid](...)`, or `from . import
    kernels; kernels.add_kernel[grid](...)`), each with the module it sits in; none when the
    file is linted without its project."""
    cache = file.memo.get(_REMOTE, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    out: list[tuple[PythonFile, ast.Call]] = []
    project = file.project
    if project is not None:
        for host, session in project.modules_subscripting(kernel.name):
            for call in host.nodes(ast.Call):
                func = call.func
                if isinstance(func, ast.Subscript) and session.refers_to(
                    host, func.value, project.name, kernel.name
                ):
                    out.append((host, call))
    cache[key] = out
    return out


def host_launches(file: PythonFile, kernel: Kernel) -> list[tuple[PythonFile, ast.Call]]:
    """Every launch of the kernel: in its own file, then in other modules of the tree, each
    with the module whose host code makes it."""
    return [(file, c) for c in launches(file, kernel)] + remote_launches(file, kernel)


def _host_value(
    file: PythonFile, scope: ast.AST, node: ast.expr, line: int, depth: int = 0
) -> ast.expr:
    """A name in host code replaced by the value of its last assignment above `line` in the
    launcher's own body (unpacking of a literal tuple included); anything else as it is."""
    if depth > 4 or not isinstance(node, ast.Name):
        return node
    found = None
    for b in file.model.bindings_in(scope, node.id):  # in source order
        if isinstance(b.node, (ast.Assign, ast.AnnAssign)) and b.node.lineno < line:
            value = unpacked_value(b)
            if value is not None:
                found = value
    if found is None:
        return node
    return _host_value(file, scope, found, line, depth + 1)


def _host_int(file: PythonFile, scope: ast.AST, node: ast.AST, line: int) -> int | None:
    """An integer the host code fixes (literals, constants of the launcher or the module)."""
    env: dict[str, object] = {}
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and n.id not in env:
            v = _host_value(file, scope, n, line)
            if v is not n:
                try:
                    env[n.id] = evaluate(v, {}, file)
                except Unknown:
                    pass
    try:
        value = evaluate(node, env, file)
    except Unknown:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _checked_multiples(
    file: PythonFile, scope: ast.AST, call: ast.Call
) -> list[tuple[ast.AST, int]]:
    """`(dim, C)` for each `dim % C == 0` the launcher makes sure of before the launch:
    `assert dim % C == 0`, `torch._check(dim % C == 0)`, `if dim % C: raise ...`."""
    out: list[tuple[ast.AST, int]] = []

    def facts(test: ast.AST, holds: bool) -> None:
        # the divisibility tests that hold when `test` evaluates to `holds`. A stack, not
        # recursion: a closure that calls itself is a reference cycle holding the file's tree.
        stack = [test]
        while stack:
            part = stack.pop()
            if isinstance(part, ast.BoolOp):
                if isinstance(part.op, ast.And) == holds:  # all parts hold / all parts fail
                    stack.extend(reversed(part.values))
                continue
            polarity = mod_polarity(part)
            if polarity is None or polarity != holds:
                continue
            for n in ast.walk(part):
                if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
                    c = _host_int(file, scope, n.right, call.lineno)
                    if c:
                        out.append((n.left, c))
                    break

    for n in ast.walk(scope):
        if getattr(n, "lineno", call.lineno) >= call.lineno:
            continue
        if isinstance(n, ast.Assert):
            facts(n.test, True)
        elif isinstance(n, ast.If) and n.body and isinstance(n.body[-1], ast.Raise):
            facts(n.test, False)
        elif isinstance(n, ast.Call) and n.args:
            f = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if f in ("_check", "_check_with", "check"):
                facts(n.args[0], True)
    return out


def _divisor_function(file: PythonFile, name: str) -> bool:
    """A function of the file that returns only 1 or a `d` it has tested with
    `n % d == 0` on its first parameter `n` (a divisor of `n`, found by search)."""
    fn = next(
        (f for f in file.nodes(ast.FunctionDef) if f.name == name and f.args.args),
        None,
    )
    if fn is None:
        return False
    first = fn.args.args[0].arg
    returns = [r for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None]
    if not returns:
        return False
    for r in returns:
        v = r.value
        if isinstance(v, ast.Constant) and v.value == 1:
            continue
        if not isinstance(v, ast.Name):
            return False
        proven = False
        for anc in file.ancestors(r):
            if anc is fn:
                break
            if isinstance(anc, ast.If) and r in list(ast.walk(ast.Module(anc.body, []))):
                tests = anc.test.values if isinstance(anc.test, ast.BoolOp) else [anc.test]
                if isinstance(anc.test, ast.BoolOp) and not isinstance(anc.test.op, ast.And):
                    continue
                for t in tests:
                    if (
                        mod_polarity(t) is True
                        and isinstance(t, ast.Compare)
                        and isinstance(t.left, ast.BinOp)
                        and isinstance(t.left.op, ast.Mod)
                        and label(t.left.left) == first
                        and label(t.left.right) == v.id
                    ):
                        proven = True
        if not proven:
            return False
    return True


def _divides_dim(file: PythonFile, value: ast.AST) -> ast.expr | None:
    """The dimension a host value divides by construction: `math.gcd(n, X)`, or a divisor
    function of the file called on `n`."""
    if not isinstance(value, ast.Call) or not value.args:
        return None
    f = value.func.attr if isinstance(value.func, ast.Attribute) else getattr(value.func, "id", "")
    if f == "gcd" or (isinstance(value.func, ast.Name) and _divisor_function(file, f)):
        return value.args[0]
    return None


def _rounded_to(
    file: PythonFile, scope: ast.AST, node: ast.expr, line: int, depth: int = 0
) -> list[ast.expr]:
    """The multiples a host size is rounded up to: `cdiv(n, B) * B`, `((n + B - 1) // B) * B`,
    `math.ceil(n / B) * B`, `n + (B - n % B) % B`, `n + -n % B`, through local names."""
    if depth > 4:
        return []
    node = _host_value(file, scope, node, line)
    if not isinstance(node, ast.BinOp):
        return []
    if isinstance(node.op, ast.Mult):
        for ceil, other in ((node.left, node.right), (node.right, node.left)):
            ceil = _host_value(file, scope, ceil, line)
            if not ceil_division(ceil):
                continue
            if isinstance(ceil, ast.Call) and len(ceil.args) == 2:
                d = ceil.args[1]
            elif isinstance(ceil, ast.Call) and ceil.args and isinstance(ceil.args[0], ast.BinOp):
                d = ceil.args[0].right  # math.ceil(n / B)
            elif isinstance(ceil, ast.BinOp) and isinstance(ceil.op, ast.FloorDiv):
                d = ceil.right
            else:
                continue
            if label(d) == label(other) or (
                _host_int(file, scope, d, line) is not None
                and _host_int(file, scope, d, line) == _host_int(file, scope, other, line)
            ):
                return [other]
    if isinstance(node.op, ast.Add):
        for pad in (node.left, node.right):
            pad = _host_value(file, scope, pad, line)
            if isinstance(pad, ast.BinOp) and isinstance(pad.op, ast.Mod):
                inner = pad.left
                if any(
                    isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(inner)
                ) or (isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.USub)):
                    return [pad.right]
    return []


_ALLOCATORS = ("empty", "zeros", "ones", "full", "new_empty", "new_zeros", "new_ones", "new_full")


def _allocated_dims(file: PythonFile, scope: ast.AST, node: ast.expr, line: int) -> list[ast.expr]:
    """The sizes of a buffer allocated in the launcher (`torch.empty((a, b), ...)`)."""
    value = _host_value(file, scope, node, line)
    if not isinstance(value, ast.Call) or not isinstance(value.func, (ast.Attribute, ast.Name)):
        return []
    f = value.func.attr if isinstance(value.func, ast.Attribute) else value.func.id
    if f not in _ALLOCATORS:
        return []
    shape = next((k.value for k in value.keywords if k.arg == "size"), None)
    if shape is None and value.args:
        shape = value.args[0] if isinstance(value.args[0], (ast.Tuple, ast.List)) else None
        if shape is None:
            return list(value.args)
    return list(shape.elts) if isinstance(shape, (ast.Tuple, ast.List)) else []


def _same_size(file: PythonFile, scope: ast.AST, a: ast.expr, b: ast.expr, line: int) -> bool:
    """Whether block `b` divides `a`: the same expression, or integers with `a % b == 0`."""
    if label(_host_value(file, scope, a, line)) == label(_host_value(file, scope, b, line)):
        return True
    ia, ib = _host_int(file, scope, a, line), _host_int(file, scope, b, line)
    return ia is not None and ib is not None and ib > 0 and ia % ib == 0


def _tile_values(
    file: PythonFile, kernel: Kernel, bound: dict[str, ast.expr], param: str
) -> list[ast.expr]:
    """What a constexpr tile is at one launch: the argument bound to it, else the values every
    autotune config gives it."""
    if param in bound:
        return [bound[param]]
    if kernel.autotune is None:
        return []
    configs = autotune_configs(file, kernel.autotune)
    if not configs or any(not isinstance(c.kwargs.get(param), int) for c in configs):
        return []
    return [ast.Constant(v) for c in configs if isinstance(v := c.kwargs[param], int)]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def launch_divided_tiles(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Constexpr tiles every launch in the file keeps in bounds: the launcher makes sure a
    dimension it passes is a multiple of C (`assert n % C == 0`, `if n % C: raise`) and the tile
    is a constant dividing C; or the tile is computed from a dimension it passes so that it
    divides it (`math.gcd(n, 256)`, a divisor-search helper of the file)."""
    cache = file.memo.get(_LAUNCH_DIVIDED, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    out: set[str] | None = None
    for host, call in host_launches(file, kernel):
        scope = host.enclosing_function(call)
        if scope is None:
            out = set()
            break
        bound = launch_bindings(kernel, call)
        passed = set().union(*(_names(v) for v in bound.values())) if bound else set()
        checks = [
            (dim, c) for dim, c in _checked_multiples(host, scope, call) if _names(dim) & passed
        ]
        here = set()
        for param in kernel.constexprs:
            values = _tile_values(file, kernel, bound, param)
            if not values:
                continue
            ints = [_host_int(host, scope, v, call.lineno) for v in values]
            known = [b for b in ints if b]
            if len(known) == len(ints) and any(all(c % b == 0 for b in known) for _, c in checks):
                here.add(param)
                continue
            if len(values) == 1:
                dim = _divides_dim(host, _host_value(host, scope, values[0], call.lineno))
                if dim is not None and _names(dim) & passed:
                    here.add(param)
        out = here if out is None else out & here
    cache[key] = frozenset(out or ())
    return cache[key]


def launch_padded_buffers(file: PythonFile, kernel: Kernel) -> frozenset[str]:
    """Pointer parameters that every launch binds to a buffer the launcher allocated with a size
    rounded up to a multiple of a tile it passes (`torch.empty((cdiv(m, B) * B, n))`)."""
    cache = file.memo.get(_LAUNCH_PADDED, dict)
    key = id(kernel.node)
    if key in cache:
        return cache[key]
    out: set[str] | None = None
    for host, call in host_launches(file, kernel):
        scope = host.enclosing_function(call)
        if scope is None:
            out = set()
            break
        bound = launch_bindings(kernel, call)
        tiles = [
            v
            for p in kernel.constexprs
            for v in _tile_values(file, kernel, bound, p)
            if len(_tile_values(file, kernel, bound, p)) == 1
        ]
        here = set()
        for param, arg in bound.items():
            if param in kernel.constexprs:
                continue
            base = (
                arg.func.value
                if isinstance(arg, ast.Call)
                and isinstance(arg.func, ast.Attribute)
                and arg.func.attr == "contiguous"
                else arg
            )
            for dim in _allocated_dims(host, scope, base, call.lineno):
                multiples = _rounded_to(host, scope, dim, call.lineno)
                if any(
                    _same_size(host, scope, m, t, call.lineno) for m in multiples for t in tiles
                ):
                    here.add(param)
        out = here if out is None else out & here
    cache[key] = frozenset(out or ())
    return cache[key]
