import ast

from gpulint.diagnostics import Edit, Fix
from gpulint.frontends.python import compat, edits
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Invalid, Rule
from gpulint.torchversion import torch_range

# Deprecated name -> (device, replacement attribute under torch.amp, how the device is passed)
DEPRECATED = {
    "torch.cuda.amp.autocast": ("cuda", "autocast", "first"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler", "first"),
    "torch.cuda.amp.custom_fwd": ("cuda", "custom_fwd", "keyword"),
    "torch.cuda.amp.custom_bwd": ("cuda", "custom_bwd", "keyword"),
    "torch.cpu.amp.autocast": ("cpu", "autocast", "first"),
    "torch.cpu.amp.GradScaler": ("cpu", "GradScaler", "first"),
    # The same objects through the modules that define them.
    "torch.cuda.amp.autocast_mode.autocast": ("cuda", "autocast", "first"),
    "torch.cuda.amp.grad_scaler.GradScaler": ("cuda", "GradScaler", "first"),
    "torch.cuda.amp.autocast_mode.custom_fwd": ("cuda", "custom_fwd", "keyword"),
    "torch.cuda.amp.autocast_mode.custom_bwd": ("cuda", "custom_bwd", "keyword"),
    "torch.cpu.amp.autocast_mode.autocast": ("cpu", "autocast", "first"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("cpu", "GradScaler", "first"),
}
# Deprecated with a replacement of another shape: found and named, not rewritten by the fix.
REPLACED_BY = {
    "torch.cuda.amp.autocast_mode._cast": 'torch.amp.autocast_mode._cast(value, "cuda", dtype)',
    "torch.get_autocast_gpu_dtype": 'torch.get_autocast_dtype("cuda")',
    "torch.get_autocast_cpu_dtype": 'torch.get_autocast_dtype("cpu")',
}
REPLACED_SINCE = (2, 4)  # torch.get_autocast_dtype, torch.amp.autocast_mode._cast(.., device)
# The first torch release with each replacement: a project whose declared range admits an
# older one still supports a torch without it, so the old call is not reported there.
REPLACEMENT_SINCE = {
    "autocast": (1, 10),
    "GradScaler": (2, 3),
    "custom_fwd": (2, 4),
    "custom_bwd": (2, 4),
}
# The current API: a branch that uses it beside a deprecated one makes the two a version shim.
CURRENT = ("torch.amp", "torch.autocast")


class DeprecatedAmpApi(Rule):
    """
    ## What it does
    Finds the deprecated automatic-mixed-precision entry points `torch.cuda.amp.autocast`,
    `torch.cuda.amp.GradScaler`, `torch.cuda.amp.custom_fwd`/`custom_bwd` and
    `torch.cpu.amp.autocast`, through any import form or alias, in code (strings and comments
    are not read). It runs where the torch releases the project declares (`torch==2.3.0` in its
    requirements, `pytorch=1.11.0` in its conda environment, or `torch-version` in
    `[tool.gpulint]`) reach 2.4, the release that deprecated them.

    ## Why is this bad?
    PyTorch deprecated these in favour of the device-generic `torch.amp` API; every call emits a
    `FutureWarning`, and they will be removed. The new API takes the device type explicitly,
    which also makes the precision policy of the code obvious.

    ## Example
    ```python
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast(dtype=torch.bfloat16):
        loss = model(x)
    ```

    ## Use instead
    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x)
    ```

    The autofix never introduces a name: `torch.cuda.amp.X(...)` becomes `torch.amp.X("cuda",
    ...)` through the same `torch` binding, and an alias made by an import (`from
    torch.cuda.amp import autocast, GradScaler`, `import torch.cuda.amp as amp`) is fixed by
    rewriting the import to `torch.amp` together with every use of the alias, so no deprecated
    import is left behind. `autocast`'s positional arguments become keywords (its positional
    order changed). An alias used other than as a call or decorator is reported, not fixed.

    ## References
    - [Automatic Mixed Precision package - torch.amp](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "GPU201"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    torch_since = (2, 4)  # deprecated in torch 2.4
    name = "deprecated-amp-api"
    triggers = ("cuda.amp", "cpu.amp", "import amp", "get_autocast_")
    fixable = True
    message = "`{old}` is deprecated; use `{new}`"
    tags = ("precision", "deprecated")

    EXEMPTIONS = (
        Exemption(
            "version-gate",
            "A branch behind a version check or feature probe (`A if TORCH_2_4 else B`, `if "
            'hasattr(torch, "amp"): ... else: ...`, the code after `if '
            "version.parse(torch.__version__) >= ...: return ...`), or an `except` fallback: it "
            "is there for an older PyTorch, and rewriting it would break the release it serves.",
            fixture="python/gpu201_silent_version_early_return.py",
        ),
        Exemption(
            "beside-current-api",
            "A branch whose other arm spells the same thing with `torch.amp` (`torch.amp.X(...) "
            "if flag else torch.cuda.amp.X()`): a version shim, whatever its test is named.",
            'import torch\nscaler = (\n    torch.amp.GradScaler("cuda") if new_api '
            "else torch.cuda.amp.GradScaler()\n)\n",
        ),
        Exemption(
            "patches-old-name",
            "An assignment to the old name (`torch.cuda.amp.GradScaler = torch.amp.GradScaler`): "
            "a backend's compatibility layer patches it; it does not call it.",
            "import torch\ndef apply_hijacks(get_dtype):\n"
            "    torch.get_autocast_gpu_dtype = get_dtype\n"
            "    torch.cuda.amp.GradScaler = torch.amp.GradScaler\n",
        ),
        Exemption(
            "replacement-newer-than-supported",
            "A use whose replacement is newer than the oldest torch the project declares "
            "(`torch>=1.10` and `torch.cuda.amp.GradScaler`: `torch.amp.GradScaler` is new in "
            "2.3, `torch.amp.custom_fwd(device_type=)` and `torch.get_autocast_dtype` in 2.4): "
            "moving to it would drop releases the project supports.",
            files=(
                ("requirements.txt", "torch>=2.0\n"),
                ("train.py", "import torch\nscaler = torch.cuda.amp.GradScaler()\n"),
            ),
        ),
    )

    VALID = [
        "import torch\nwith torch.amp.autocast('cuda'):\n    pass\n",
        "# torch.cuda.amp.autocast is deprecated\nx = 'torch.cuda.amp.autocast'\n",
        """
import torch
try:
    from torch.amp import autocast
except ImportError:
    from torch.cuda.amp import autocast
with autocast("cuda"):
    pass
""",
        """
import torch
if hasattr(torch, "amp"):
    autocast = torch.amp.autocast
else:
    autocast = torch.cuda.amp.autocast
""",
        """
import torch
from project.utils import TORCH_2_4
scaler = torch.amp.GradScaler("cuda") if TORCH_2_4 else torch.cuda.amp.GradScaler()
""",
    ]
    INVALID = [
        Invalid(
            "import torch\nscaler = torch.cuda.amp.GradScaler()\n",
            fixed='import torch\nscaler = torch.amp.GradScaler("cuda")\n',
        ),
        Invalid(
            "import torch\nwith torch.cuda.amp.autocast(dtype=torch.bfloat16):\n    pass\n",
            fixed='import torch\nwith torch.amp.autocast("cuda", dtype=torch.bfloat16):\n    pass\n',
        ),
        Invalid(
            "import torch\nfrom torch.cuda.amp import autocast as ac\nwith ac():\n    pass\n",
            fixed='import torch\nfrom torch.amp import autocast as ac\nwith ac("cuda"):\n    pass\n',
        ),
        Invalid(
            "from torch.cuda.amp import autocast, GradScaler\n"
            "scaler = GradScaler()\nwith autocast(True):\n    pass\n",
            fixed="from torch.amp import autocast, GradScaler\n"
            'scaler = GradScaler("cuda")\nwith autocast("cuda", enabled=True):\n    pass\n',
        ),
        Invalid(
            "import torch\nscaler = torch.cuda.amp.GradScaler((2.0**16))\n",
            fixed='import torch\nscaler = torch.amp.GradScaler("cuda", (2.0**16))\n',
        ),
        Invalid(
            "import torch\nimport torch.cuda.amp as amp\n\n@amp.custom_fwd\ndef f(ctx, x):\n    return x\n",
            fixed='import torch\nimport torch.amp as amp\n\n@amp.custom_fwd(device_type="cuda")\ndef f(ctx, x):\n    return x\n',
        ),
    ]

    def visit_Name(self, node: ast.Name, file: PythonFile):
        yield from self._check(node, file)

    def visit_Attribute(self, node: ast.Attribute, file: PythonFile):
        yield from self._check(node, file)

    def _check(self, node, file: PythonFile):
        qualified = file.qualname(node)
        if qualified not in DEPRECATED and qualified not in REPLACED_BY:
            return
        parent = file.parent(node)
        if isinstance(parent, ast.Attribute):
            return  # part of a longer chain; the chain itself is checked
        if self.exempt("patches-old-name", isinstance(node.ctx, (ast.Store, ast.Del))):
            return  # `torch.cuda.amp.X = ...` patches the old name (a compatibility layer)
        if self.exempt("version-gate", compat.version_gate(file, node) is not None):
            return
        if self.exempt("beside-current-api", _beside_current_api(node, file)):
            return
        declared = torch_range(self.settings)
        if qualified in REPLACED_BY:
            if not self.exempt(
                "replacement-newer-than-supported",
                declared is not None and not declared.all_at_least(REPLACED_SINCE),
            ):
                yield self.report(file, node, old=qualified, new=REPLACED_BY[qualified])
            return
        device, attr, style = DEPRECATED[qualified]
        new = (
            f'torch.amp.{attr}("{device}")'
            if style == "first"
            else f'torch.amp.{attr}(device_type="{device}")'
        )
        if self.exempt(
            "replacement-newer-than-supported",
            declared is not None and not declared.all_at_least(REPLACEMENT_SINCE[attr]),
        ):
            return  # the project still supports a torch without the replacement
        fix = self._fix(node, file, device, attr, style)
        yield self.report(file, node, old=qualified, new=new, fix=fix)

    def _fix(self, node, file: PythonFile, device, attr, style) -> Fix | None:
        root = node
        while isinstance(root, ast.Attribute):
            root = root.value
        if not isinstance(root, ast.Name):
            return None
        bound_to = file.bindings.get(root.id)
        if bound_to == "torch":
            # `torch.cuda.amp.X(...)` -> `torch.amp.X("cuda", ...)`: the same name, so it is
            # visible wherever the original was, whatever scope the call sits in.
            call_edits = _use_edits(file, node, device, attr, style)
            if call_edits is None:
                return None
            new_func = f"{root.id}.amp.{attr}"
            return Fix(f"use {new_func}", (edits.replace(file, node, new_func), *call_edits))
        if bound_to is not None:
            # An alias made by an import (`from torch.cuda.amp import autocast`, `import
            # torch.cuda.amp as amp`): rewrite the import and every use of the alias together,
            # so no new name is introduced and no deprecated import is left behind.
            return _rewrite_alias(file, root.id)
        return None


def _beside_current_api(node: ast.AST, file: PythonFile) -> bool:
    """`node` is the old-PyTorch side of a shim whatever its test: in a branch whose alternative
    uses the current API (`torch.amp.X(...) if FLAG else torch.cuda.amp.X()`)."""
    for branch in compat.alternatives(file, node):
        for inner in ast.walk(branch):
            if isinstance(inner, (ast.Name, ast.Attribute)):
                qualified = file.qualname(inner) or ""
                if qualified in CURRENT or qualified.startswith("torch.amp."):
                    return True
    return False


# What the deprecated API's positional parameters were: torch.amp.autocast takes the device
# first, so `autocast(True)` must become `autocast("cuda", enabled=True)`.
_AUTOCAST_POSITIONAL = ("enabled", "dtype", "cache_enabled")


def _use_edits(
    file: PythonFile, use: ast.AST, device: str, attr: str, style: str
) -> list[Edit] | None:
    """Edits that make one use of a deprecated callable call the torch.amp one; None when the
    use is not a call or a decorator the fix understands."""
    parent = file.parent(use)
    if isinstance(parent, ast.Call) and parent.func is use:
        if style == "keyword":
            edit = edits.append_arg(file, parent, f'device_type="{device}"')
            return None if edit is None else [edit]
        if attr == "autocast" and parent.args:
            return _positional_autocast(file, parent, device)
        edit = edits.insert_first_arg(file, parent, f'"{device}"')
        return None if edit is None else [edit]
    if style == "keyword" and isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if use in parent.decorator_list:  # `@custom_fwd` -> `@custom_fwd(device_type="cuda")`
            _, end = file.offsets(use)
            return [Edit(end, end, f'(device_type="{device}")')]
    return None


def _positional_autocast(file: PythonFile, call: ast.Call, device: str) -> list[Edit] | None:
    if len(call.args) > len(_AUTOCAST_POSITIONAL) or any(
        isinstance(a, ast.Starred) for a in call.args
    ):
        return None
    starts = edits.argument_starts(file, call)
    if starts is None:
        return None
    out = []
    for i, arg in enumerate(call.args):
        prefix = f'"{device}", ' if i == 0 else ""
        out.append(Edit(starts[id(arg)], starts[id(arg)], f"{prefix}{_AUTOCAST_POSITIONAL[i]}="))
    return out


_AMP_MODULES = {"torch.cuda.amp": "cuda", "torch.cpu.amp": "cpu"}


def _rewrite_alias(file: PythonFile, name: str) -> Fix | None:
    """Rewrite every import statement that binds `name` (and every name they bind) to the
    torch.amp API, with every use of those names; None unless every use can be rewritten."""
    statements = edits.imports_binding(file, name)
    if not statements:
        return None
    pending, seen_names, changes = list(statements), set(), []
    seen_statements: set[int] = set()
    uses_by_name: dict[str, list[ast.Name]] = {}
    for node in file.nodes(ast.Name):
        if isinstance(node.ctx, ast.Load):
            uses_by_name.setdefault(node.id, []).append(node)
    while pending:
        statement = pending.pop()
        if id(statement) in seen_statements:
            continue
        seen_statements.add(id(statement))
        plan = _import_plan(statement)
        if plan is None:
            return None
        old_module, new_module, bound = plan
        edit = edits.rewrite_import(file, statement, old_module, new_module)
        if edit is None:
            return None
        changes.append(edit)
        for bound_name, target in bound:
            if bound_name in seen_names:
                continue
            seen_names.add(bound_name)
            others = edits.imports_binding(file, bound_name)
            if others is None:
                return None
            pending.extend(others)
            for use in uses_by_name.get(bound_name, ()):
                use_edits = _alias_use_edits(file, use, target)
                if use_edits is None:
                    return None
                changes.extend(use_edits)
    return Fix("use torch.amp", tuple(sorted(set(changes))))


def _import_plan(statement) -> tuple[str, str, list[tuple[str, str]]] | None:
    """(old module, new module, [(bound name, what it named)]) for an import the fix can point
    at torch.amp; None for any other import (mixed with unrelated names, relative, star)."""
    if isinstance(statement, ast.ImportFrom):
        module = statement.module or ""
        if statement.level:
            return None
        names = [(a.asname or a.name, f"{module}.{a.name}") for a in statement.names]
        if module in _AMP_MODULES and all(target in DEPRECATED for _, target in names):
            return module, "torch.amp", names
        if module in ("torch.cuda", "torch.cpu") and all(a.name == "amp" for a in statement.names):
            return module, "torch", names
        return None
    bound = [(a.asname, a.name) for a in statement.names if a.asname and a.name in _AMP_MODULES]
    if len(bound) != 1:
        return None
    return bound[0][1], "torch.amp", bound


def _alias_use_edits(file: PythonFile, use: ast.Name, target: str) -> list[Edit] | None:
    if target in DEPRECATED:  # the name is the deprecated callable itself
        device, attr, style = DEPRECATED[target]
        return _use_edits(file, use, device, attr, style)
    if target in _AMP_MODULES:  # the name is the deprecated module: `amp.autocast(...)`
        parent = file.parent(use)
        if not isinstance(parent, ast.Attribute) or f"{target}.{parent.attr}" not in DEPRECATED:
            return None
        device, attr, style = DEPRECATED[f"{target}.{parent.attr}"]
        return _use_edits(file, parent, device, attr, style)
    return None
