import ast

from gpulint.diagnostics import Fix
from gpulint.frontends.python import edits
from gpulint.rule import Invalid, Rule

# Deprecated name -> (device, replacement attribute under torch.amp, how the device is passed)
DEPRECATED = {
    "torch.cuda.amp.autocast": ("cuda", "autocast", "first"),
    "torch.cuda.amp.GradScaler": ("cuda", "GradScaler", "first"),
    "torch.cuda.amp.custom_fwd": ("cuda", "custom_fwd", "keyword"),
    "torch.cuda.amp.custom_bwd": ("cuda", "custom_bwd", "keyword"),
    "torch.cpu.amp.autocast": ("cpu", "autocast", "first"),
    "torch.cpu.amp.GradScaler": ("cpu", "GradScaler", "first"),
}
_VERSION_HINT = ("version", "hasattr", "TORCH_", "is_torch_greater", "torch_version")


class DeprecatedAmpApi(Rule):
    """
    ## What it does
    Finds the deprecated automatic-mixed-precision entry points `torch.cuda.amp.autocast`,
    `torch.cuda.amp.GradScaler`, `torch.cuda.amp.custom_fwd`/`custom_bwd` and
    `torch.cpu.amp.autocast`, through any import form or alias. Strings, comments and shims
    behind a version check or an `ImportError` fallback are left alone.

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

    The autofix rewrites calls when `torch` is imported in the file. `autocast` called with
    positional arguments is reported but not fixed: its positional order changed.

    ## References
    - [Automatic Mixed Precision package - torch.amp](https://docs.pytorch.org/docs/stable/amp.html)
    """

    code = "GPU201"
    name = "deprecated-amp-api"
    triggers = ("cuda.amp", "cpu.amp", "import amp")
    fixable = True
    message = "`{old}` is deprecated; use `{new}`"
    tags = ("precision", "deprecated")

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
            fixed='import torch\nfrom torch.cuda.amp import autocast as ac\nwith torch.amp.autocast("cuda"):\n    pass\n',
        ),
        Invalid(
            "import torch\nimport torch.cuda.amp as amp\n\n@amp.custom_fwd\ndef f(ctx, x):\n    return x\n",
            fixed='import torch\nimport torch.cuda.amp as amp\n\n@torch.amp.custom_fwd(device_type="cuda")\ndef f(ctx, x):\n    return x\n',
        ),
    ]

    def visit_Name(self, node: ast.Name, file):
        yield from self._check(node, file)

    def visit_Attribute(self, node: ast.Attribute, file):
        yield from self._check(node, file)

    def _check(self, node, file):
        qualified = file.qualname(node)
        if qualified not in DEPRECATED:
            return
        parent = file.parent(node)
        if isinstance(parent, ast.Attribute):
            return  # part of a longer chain; the chain itself is checked
        if self._behind_version_check(node, file):
            return
        device, attr, style = DEPRECATED[qualified]
        new = (
            f'torch.amp.{attr}("{device}")'
            if style == "first"
            else f'torch.amp.{attr}(device_type="{device}")'
        )
        fix = self._fix(node, file, device, attr, style)
        yield self.report(file, node, old=qualified, new=new, fix=fix)

    @staticmethod
    def _behind_version_check(node, file) -> bool:
        for ancestor in file.ancestors(node):
            if isinstance(ancestor, ast.If):
                test = ast.unparse(ancestor.test)
                if any(h in test for h in _VERSION_HINT):
                    return True
            if isinstance(ancestor, ast.ExceptHandler):
                return True
        return False

    def _fix(self, node, file, device, attr, style) -> Fix | None:
        torch_name = next((k for k, v in file.bindings.items() if v == "torch"), None)
        if torch_name is None:
            return None
        new_func = f"{torch_name}.amp.{attr}"
        parent = file.parent(node)
        if isinstance(parent, ast.Call) and parent.func is node:
            if style == "first":
                if attr == "autocast" and parent.args:
                    return None  # positional order changed: enabled/dtype are not device_type
                extra = edits.insert_first_arg(file, parent, f'"{device}"')
            else:
                extra = edits.append_arg(file, parent, f'device_type="{device}"')
            return Fix(f"use {new_func}", (edits.replace(file, node, new_func), extra))
        if style == "keyword" and isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # A bare decorator: `@custom_fwd` becomes `@torch.amp.custom_fwd(device_type=...)`.
            if node in parent.decorator_list:
                text = f'{new_func}(device_type="{device}")'
                return Fix(f"use {new_func}", (edits.replace(file, node, text),))
        return None
