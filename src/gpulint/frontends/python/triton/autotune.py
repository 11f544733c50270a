"""`@triton.autotune` configs read from the source: each `triton.Config(...)` (one per
combination of a config comprehension), its meta-parameters, `num_warps` and `num_stages`, and
whether the autotuner prunes them."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulint.frontends.python.triton.literals import Unknown, evaluate, is_triton, module_constants

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile

_MAX_COMBINATIONS = 4096  # a config comprehension larger than this is not expanded


@dataclass
class Config:
    """One `triton.Config(...)`; a comprehension yields one per combination, same node."""

    node: ast.Call
    kwargs: dict[str, object]  # the meta-parameters that could be evaluated
    num_stages: int | None  # None: not evaluable
    num_warps: int | None
    stages_given: bool  # False: Triton's default (3) applies

    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.kwargs.items()]
        parts.append(f"num_stages={self.num_stages}" + ("" if self.stages_given else " (default)"))
        return "Config(" + ", ".join(parts) + ")"


TRITON_DEFAULT_STAGES = 3  # triton.Config(num_stages=3) by default


def is_config_call(file: PythonFile, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if is_triton(file, node, "Config", "runtime.Config", "runtime.autotuner.Config"):
        return True
    return (
        isinstance(node.func, ast.Name) and node.func.id == "Config" and file.qualname(node) is None
    )


def autotune_configs(file: PythonFile, autotune: ast.Call) -> list[Config] | None:
    """The configs of an autotune decorator, or None when the list cannot be read."""
    arg = next((k.value for k in autotune.keywords if k.arg == "configs"), None)
    if arg is None and autotune.args:
        arg = autotune.args[0]
    if arg is None:
        return None
    try:
        return _configs(file, arg, {}, 0)
    except Unknown:
        return None


def _configs(file: PythonFile, node: ast.AST, env: dict[str, object], depth: int) -> list[Config]:
    if depth > 8:
        raise Unknown
    if isinstance(node, ast.Name) and node.id not in env:
        value = module_constants(file).get(node.id)
        if value is None:
            raise Unknown
        return _configs(file, value, env, depth + 1)
    if isinstance(node, (ast.List, ast.Tuple)):
        out: list[Config] = []
        for e in node.elts:
            if isinstance(e, ast.Starred):
                out.extend(_configs(file, e.value, env, depth + 1))
            else:
                out.extend(_configs(file, e, env, depth + 1))
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _configs(file, node.left, env, depth + 1) + _configs(
            file, node.right, env, depth + 1
        )
    if isinstance(node, ast.Call) and is_config_call(file, node):
        return [one_config(file, node, env)]
    if (
        isinstance(node, ast.ListComp)
        and isinstance(node.elt, ast.Call)
        and is_config_call(file, node.elt)
    ):
        out = []
        for binding in comprehension_bindings(file, node.generators, env):
            out.append(one_config(file, node.elt, binding))
        return out
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        # A project helper wrapping a literal list (`autotune_configs([...])`): its configs.
        if isinstance(node.args[0], (ast.List, ast.ListComp)):
            return _configs(file, node.args[0], env, depth + 1)
    raise Unknown


def comprehension_bindings(
    file: PythonFile, generators: list[ast.comprehension], env: dict[str, object]
) -> Iterator[dict[str, object]]:
    combos = [dict(env)]
    for gen in generators:
        if gen.is_async:
            raise Unknown
        new = []
        for binding in combos:
            values = evaluate(gen.iter, binding, file)
            if not isinstance(values, list):
                raise Unknown
            for v in values:
                b = dict(binding)
                _bind(gen.target, v, b)
                if all(evaluate(cond, b, file) for cond in gen.ifs):
                    new.append(b)
            if len(new) > _MAX_COMBINATIONS:
                raise Unknown
        combos = new
    yield from combos


def _bind(target: ast.AST, value: object, env: dict[str, object]) -> None:
    if isinstance(target, ast.Name):
        env[target.id] = value
    elif isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (list, tuple)):
        if len(target.elts) != len(value):
            raise Unknown
        for t, v in zip(target.elts, value, strict=False):
            _bind(t, v, env)
    else:
        raise Unknown


def one_config(file: PythonFile, call: ast.Call, env: dict[str, object]) -> Config:
    kwargs: dict[str, object] = {}
    meta = (
        call.args[0]
        if call.args
        else next((k.value for k in call.keywords if k.arg == "kwargs"), None)
    )
    if isinstance(meta, ast.Dict):
        for k, v in zip(meta.keys, meta.values, strict=False):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                try:
                    kwargs[k.value] = evaluate(v, env, file)
                except Unknown:
                    pass
    elif isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "dict":
        for kw in meta.keywords:
            if kw.arg:
                try:
                    kwargs[kw.arg] = evaluate(kw.value, env, file)
                except Unknown:
                    pass

    def number(name: str, position: int) -> tuple[int | None, bool]:
        node = next((k.value for k in call.keywords if k.arg == name), None)
        if node is None and len(call.args) > position:
            node = call.args[position]
        if node is None:
            return None, False
        try:
            v = evaluate(node, env, file)
        except Unknown:
            return None, True
        return (v if isinstance(v, int) and not isinstance(v, bool) else None), True

    warps, _ = number("num_warps", 1)
    stages, given = number("num_stages", 2)
    if not given:
        stages = TRITON_DEFAULT_STAGES
    return Config(call, kwargs, stages, warps, given)


def prunes_configs(autotune: ast.Call) -> bool:
    """`prune_configs_by=...` (or a `**` splat whose name says it prunes)."""
    for k in autotune.keywords:
        if k.arg == "prune_configs_by":
            return not (isinstance(k.value, ast.Constant) and k.value.value is None)
        if k.arg is None:
            if isinstance(k.value, ast.Dict):
                if any(
                    isinstance(key, ast.Constant) and key.value == "prune_configs_by"
                    for key in k.value.keys
                ):
                    return True
            elif "prune" in ast.unparse(k.value).lower():
                return True
    return False
