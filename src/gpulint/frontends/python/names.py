"""Qualified names from a module's own imports and aliases, without libcst's scope analysis.

`import torch.cuda.amp as amp` binds amp -> torch.cuda.amp; `from torch.utils import data`
binds data -> torch.utils.data; `nn = torch.nn` at module level binds nn -> torch.nn. A name
bound to two different things (a try/except ImportError shim, a version switch) is ambiguous and
resolves to nothing: unknown, so rules stay silent rather than guess.
"""

from __future__ import annotations

import ast

_AMBIGUOUS = object()


def collect_bindings(tree: ast.Module, imports: list[ast.AST] | None = None) -> dict[str, str]:
    """`imports`: the file's Import/ImportFrom nodes when already indexed (saves a tree walk)."""
    bindings: dict[str, object] = {}

    def bind(name: str, qualified: str) -> None:
        old = bindings.get(name)
        bindings[name] = qualified if old is None or old == qualified else _AMBIGUOUS

    for node in imports if imports is not None else ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bind(alias.asname, alias.name)
                else:
                    root = alias.name.split(".")[0]
                    bind(root, root)
        elif isinstance(node, ast.ImportFrom):
            if node.level or not node.module:
                continue  # relative imports are the project's own modules
            for alias in node.names:
                if alias.name != "*":
                    bind(alias.asname or alias.name, f"{node.module}.{alias.name}")
    resolved = {k: v for k, v in bindings.items() if isinstance(v, str)}
    # Module-level aliases such as `nn = torch.nn` or `DL = torch.utils.data.DataLoader`.
    for stmt in tree.body:
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, (ast.Name, ast.Attribute))
        ):
            target = stmt.targets[0].id
            value = dotted(stmt.value, resolved)
            if value and target not in bindings:
                resolved[target] = value
    return resolved


def dotted(node: ast.AST, bindings: dict[str, str]) -> str | None:
    """The qualified name of a Name/Attribute chain, resolved through `bindings`, or None."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute):  # iterative: chains can be long
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    base = bindings.get(node.id)
    if base is None:
        return None
    return ".".join([base, *reversed(attrs)])


def terminal_name(node: ast.AST) -> str | None:
    """`optimizer` for `self.optimizer`, `loader` for `loader`, `step` for `opt.step`."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return None


def call_name(node: ast.Call) -> str | None:
    return terminal_name(node.func)


def keyword(node: ast.Call, name: str) -> ast.keyword | None:
    return next((k for k in node.keywords if k.arg == name), None)


def has_star_kwargs(node: ast.Call) -> bool:
    """`f(**kwargs)` or `f(*args)`: any argument may be hiding in there."""
    return any(k.arg is None for k in node.keywords) or any(
        isinstance(a, ast.Starred) for a in node.args
    )


def structure(node: ast.AST) -> tuple[object, ...]:
    """A hashable key equal for two expressions written the same way, load or store alike
    (`self.cache[k]` stored equals `self.cache[k]` read). Not `ast.dump`: its nested
    formatter is a closure over itself, a reference cycle per call that only the cyclic
    collector frees."""
    parts: list[object] = [type(node).__name__]
    for name, value in ast.iter_fields(node):
        if name == "ctx":
            continue
        if isinstance(value, ast.AST):
            parts.append(structure(value))
        elif isinstance(value, list):
            parts.append(tuple(structure(v) if isinstance(v, ast.AST) else v for v in value))
        else:
            parts.append(value)
    return tuple(parts)
