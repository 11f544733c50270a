import ast

from gpulint.diagnostics import Severity
from gpulint.frontends.python import triton as tt
from gpulint.rule import Rule

_TRUTHY = {"1", "true", "yes", "on"}


class TritonDebugOps(Rule):
    """
    ## What it does
    Finds debugging left in Triton code: `tl.device_print` (and the builtin `print` inside a
    `@triton.jit` function), `tl.static_print` and `tl.device_assert`, and `TRITON_INTERPRET=1`
    set from Python (`os.environ["TRITON_INTERPRET"] = "1"`, `setdefault`, `update`, `putenv`).

    Left alone: debug ops under an `if` on a constexpr flag (`if DEBUG:`), which Triton compiles
    out when the flag is off; `TRITON_INTERPRET` set under a condition (a `--debug` switch) or in
    test code, where running kernels on the CPU interpreter is the point.

    ## Why is this bad?
    `tl.device_print` makes every thread of every program call `printf` on the device: kernels
    slow down by orders of magnitude and flood the output. `tl.static_print` prints at every
    compilation. `tl.device_assert` is compiled only in debug mode (`TRITON_DEBUG=1`), so in a
    normal run it checks nothing while suggesting that it does (reported as info).
    `TRITON_INTERPRET=1` runs every kernel in the process on the CPU interpreter, thousands of
    times slower than the GPU, for everyone who imports the module.

    ## Example
    ```python
    os.environ["TRITON_INTERPRET"] = "1"

    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.device_print("x", x)
    ```

    ## Use instead
    ```python
    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr, DEBUG: tl.constexpr = False):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        if DEBUG:
            tl.device_print("x", x)
    ```
    and set `TRITON_INTERPRET=1` in the shell when debugging on the CPU.

    ## References
    - [Triton: debugging (TRITON_INTERPRET, device_print, device_assert)](https://triton-lang.org/main/programming-guide/chapter-3/debugging.html)
    - [Triton language reference: debug ops](https://triton-lang.org/main/python-api/triton.language.html)
    """

    code = "GPU703"
    name = "triton-debug-ops"
    triggers = ("triton", "TRITON_INTERPRET")
    message = "`{what}` left in a Triton kernel: {why}; remove it (or guard it with a constexpr `DEBUG` flag)"
    tags = ("triton", "debug")

    VALID = [
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, DEBUG: tl.constexpr):
    x = tl.load(x_ptr)
    if DEBUG:
        tl.device_print("x", x)
""",
        """
import os
if args.debug:
    os.environ["TRITON_INTERPRET"] = "1"
""",
        'import os\nos.environ["TRITON_INTERPRET"] = "0"\n',
        # print() outside a kernel is ordinary Python.
        "import triton\nprint(triton.__version__)\n",
    ]
    INVALID = [
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr):
    x = tl.load(x_ptr)
    tl.device_print("x", x)
""",
        'import os\nimport triton\nos.environ["TRITON_INTERPRET"] = "1"\n',
        "import os\nos.environ.setdefault('TRITON_INTERPRET', '1')\n",
    ]

    _WHY = {
        "device_print": (
            Severity.WARNING,
            "every thread calls printf on the device, slowing the kernel by orders of magnitude",
        ),
        "print": (
            Severity.WARNING,
            "inside `@triton.jit` it is `tl.device_print`: every thread calls printf on the device",
        ),
        "static_print": (Severity.INFO, "it prints at every compilation"),
        "device_assert": (
            Severity.INFO,
            "it is compiled only with TRITON_DEBUG=1, so a normal run checks nothing",
        ),
    }

    def visit_Call(self, node: ast.Call, file):
        if file.is_test:
            return
        name = tt.tl_name(file, node)
        what = f"tl.{name}"
        if name not in ("device_print", "static_print", "device_assert"):
            if not (
                isinstance(node.func, ast.Name)
                and node.func.id == "print"
                and "print" not in file.bindings
            ):
                yield from self._interpret(node, file)
                return
            kernel = tt.kernel_of(file, node)
            if kernel is None:
                return
            name, what = "print", "print"
        else:
            kernel = tt.kernel_of(file, node)
        if kernel is not None and _under_constexpr_flag(file, node, kernel):
            return
        severity, why = self._WHY[name]
        yield self.report(file, node, what=what, why=why, severity=severity)

    def visit_Assign(self, node: ast.Assign, file):
        if file.is_test:
            return
        for target in node.targets:
            if (
                isinstance(target, ast.Subscript)
                and _is_environ(file, target.value)
                and _const(target.slice) == "TRITON_INTERPRET"
                and _truthy(node.value)
                and not _conditional(file, node)
            ):
                yield self._report_interpret(file, node)

    def _interpret(self, node: ast.Call, file):
        func = node.func
        if not isinstance(func, ast.Attribute) or _conditional(file, node):
            return
        hit = False
        if func.attr == "setdefault" and _is_environ(file, func.value) and len(node.args) == 2:
            hit = _const(node.args[0]) == "TRITON_INTERPRET" and _truthy(node.args[1])
        elif func.attr == "putenv" and file.qualname(func) == "os.putenv" and len(node.args) == 2:
            hit = _const(node.args[0]) == "TRITON_INTERPRET" and _truthy(node.args[1])
        elif func.attr == "update" and _is_environ(file, func.value):
            for k in node.keywords:
                hit |= k.arg == "TRITON_INTERPRET" and _truthy(k.value)
            for a in node.args:
                if isinstance(a, ast.Dict):
                    hit |= any(
                        _const(k) == "TRITON_INTERPRET" and _truthy(v)
                        for k, v in zip(a.keys, a.values, strict=False)
                    )
        if hit:
            yield self._report_interpret(file, node)

    def _report_interpret(self, file, node):
        return self.report(
            file,
            node,
            "`TRITON_INTERPRET=1` set in code: every Triton kernel in the process runs on the CPU "
            "interpreter, thousands of times slower; set it in the shell when debugging instead",
        )


def _const(node) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _truthy(node) -> bool:
    value = _const(node)
    if isinstance(value, bool) or isinstance(value, int):
        return bool(value)
    return isinstance(value, str) and value.strip().lower() in _TRUTHY


def _is_environ(file, node) -> bool:
    return file.qualname(node) == "os.environ"


def _conditional(file, node) -> bool:
    return any(isinstance(a, (ast.If, ast.IfExp, ast.Try)) for a in file.ancestors(node))


def _under_constexpr_flag(file, node, kernel) -> bool:
    for anc in file.ancestors(node):
        if anc is kernel.node:
            return False
        if isinstance(anc, ast.If):
            names = {n.id for n in ast.walk(anc.test) if isinstance(n, ast.Name)}
            if names & set(kernel.constexprs):
                return True
    return False
