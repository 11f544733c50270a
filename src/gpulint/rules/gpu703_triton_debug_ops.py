import ast
from typing import ClassVar

from gpulint.diagnostics import Severity
from gpulint.frontends import MemoKey
from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule

_TRUTHY = {"1", "true", "yes", "on"}
_DEBUG_HELPERS: MemoKey[dict[str, str]] = MemoKey("gpu703.debug_helpers")


class TritonDebugOps(Rule):
    """
    ## What it does
    Finds debugging left in Triton code that costs at run time: `tl.device_print` (and the
    builtin `print` inside a `@triton.jit` function), and `TRITON_INTERPRET=1` set from Python
    (`os.environ["TRITON_INTERPRET"] = "1"`, `setdefault`, `update`, `putenv`).

    A `@triton.jit` helper that does nothing but debug output (`print_tensor_dim`) is reported
    where a kernel calls it, not where it is defined.

    ## Why is this bad?
    `tl.device_print` makes every thread of every program call `printf` on the device: kernels
    slow down by orders of magnitude and flood the output.
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
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "triton-debug-ops"
    triggers = ("triton", "TRITON_INTERPRET")
    message = (
        "{what} left in a Triton kernel: {why}; remove it (or guard it with a constexpr "
        "`DEBUG` flag)"
    )
    tags = ("triton", "debug")

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "static-print",
            "`tl.static_print`: it runs once, when the kernel is compiled, and costs nothing on "
            "the GPU.",
            """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, BLOCK: tl.constexpr):
    tl.static_print("BLOCK", BLOCK)
    tl.store(x_ptr, tl.load(x_ptr) * 2)
""",
        ),
        Exemption(
            "device-assert",
            "`tl.device_assert`: compiled only in debug mode (`TRITON_DEBUG=1`), so nothing runs "
            "in a normal build, and in a debug build the check is the point.",
            """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n):
    tl.device_assert(n > 0, "empty input")
    tl.store(x_ptr, tl.load(x_ptr) * 2)
""",
        ),
        Exemption(
            "constexpr-flag",
            "A debug op (or a call of a debug helper) under an `if` on a constexpr flag "
            "(`if DEBUG:`): Triton compiles it out when the flag is off.",
            """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, DEBUG: tl.constexpr):
    x = tl.load(x_ptr)
    if DEBUG:
        tl.device_print("x", x)
""",
        ),
        Exemption(
            "debug-helper-body",
            "The debug op inside a `@triton.jit` helper that does nothing but debug output: it "
            "costs nothing until a kernel calls it, and the call is reported instead (a helper "
            "no kernel in the file calls stays silent).",
            """
import triton
import triton.language as tl

@triton.jit
def print_tensor_dim(x, name):
    tl.device_print(name, x)
""",
        ),
        Exemption(
            "conditional-interpret",
            "`TRITON_INTERPRET` set under a condition (a `--debug` switch, a `try`): running "
            "kernels on the CPU interpreter is what that switch asks for.",
            """
import os
if args.debug:
    os.environ["TRITON_INTERPRET"] = "1"
    os.environ.setdefault("TRITON_INTERPRET", "1")
""",
        ),
        Exemption(
            "test-code",
            "Test code, where printing from kernels and running them on the CPU interpreter is "
            "the point.",
            """
import os
import triton
import triton.language as tl

os.environ["TRITON_INTERPRET"] = "1"

@triton.jit
def k(x_ptr):
    tl.device_print("x", tl.load(x_ptr))
""",
            filename="tests/test_kernels.py",
        ),
    )

    VALID = [
        # Compile-time printing and debug-build asserts cost nothing in a normal run.
        """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    tl.static_print("BLOCK", BLOCK)
    x = tl.load(x_ptr)
    tl.device_assert(n > 0, "empty input")
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
    }

    def visit_Call(self, node: ast.Call, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        name = _debug_op(file, node)
        if name is None:
            yield from self._interpret(node, file)
            called = node.func.id if isinstance(node.func, ast.Name) else None
            helper = _debug_helpers(file).get(called) if called is not None else None
            kernel = tt.kernel_of(file, node)
            if (
                helper in self._WHY
                and kernel is not None
                and not self.exempt("constexpr-flag", _under_constexpr_flag(file, node, kernel))
            ):
                severity, why = self._WHY[helper]
                yield self.report(
                    file,
                    node,
                    what=f"`{called}(...)` (a debug helper calling `{_label(helper)}`)",
                    why=why,
                    severity=severity,
                )
            return
        # static_print runs at compile time, device_assert only in debug builds
        if self.exempt("static-print", name == "static_print"):
            return
        if self.exempt("device-assert", name == "device_assert"):
            return
        if name not in self._WHY:
            return
        kernel = tt.kernel_of(file, node)
        if name == "print" and kernel is None:
            return
        if kernel is not None:
            # a debug helper is reported where a kernel calls it
            if self.exempt("debug-helper-body", kernel.name in _debug_helpers(file)):
                return
            if self.exempt("constexpr-flag", _under_constexpr_flag(file, node, kernel)):
                return
        severity, why = self._WHY[name]
        yield self.report(file, node, what=f"`{_label(name)}`", why=why, severity=severity)

    def visit_Assign(self, node: ast.Assign, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        for target in node.targets:
            if (
                isinstance(target, ast.Subscript)
                and _is_environ(file, target.value)
                and _const(target.slice) == "TRITON_INTERPRET"
                and _truthy(node.value)
                and not self.exempt("conditional-interpret", _conditional(file, node))
            ):
                yield self._report_interpret(file, node)

    def _interpret(self, node: ast.Call, file: PythonFile):
        func = node.func
        if not isinstance(func, ast.Attribute):
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
        if hit and not self.exempt("conditional-interpret", _conditional(file, node)):
            yield self._report_interpret(file, node)

    def _report_interpret(self, file: PythonFile, node):
        return self.report(
            file,
            node,
            "`TRITON_INTERPRET=1` set in code: every Triton kernel in the process runs on the CPU "
            "interpreter, thousands of times slower; set it in the shell when debugging instead",
        )


def _label(name: str) -> str:
    return "print" if name == "print" else f"tl.{name}"


def _debug_op(file: PythonFile, node: ast.Call) -> str | None:
    name = tt.tl_name(file, node)
    if name in ("device_print", "static_print", "device_assert"):
        return name
    if isinstance(node.func, ast.Name) and node.func.id == "print" and "print" not in file.bindings:
        return "print"
    return None


def _debug_helpers(file: PythonFile) -> dict[str, str]:
    """`@triton.jit` functions that do nothing but debug output (`print_tensor_dim`), mapped to
    the op they call. They cost nothing until a kernel calls them, so calls are reported."""
    return file.memo.get(_DEBUG_HELPERS, lambda: _find_debug_helpers(file))


def _find_debug_helpers(file: PythonFile) -> dict[str, str]:
    helpers = {}
    for kernel in tt.kernels(file):
        ops = []
        only_debug = True
        for stmt in ast.walk(kernel.node):
            if isinstance(stmt, ast.stmt) and stmt is not kernel.node:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                    op = _debug_op(file, stmt.value)
                    if op:
                        ops.append(op)
                    elif not isinstance(stmt.value, ast.Constant):
                        only_debug = False
                elif isinstance(stmt, (ast.If, ast.Pass)) or (
                    isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                ):
                    continue
                else:
                    only_debug = False
        if ops and only_debug:
            helpers[kernel.name] = ops[0]
    return helpers


def _const(node) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _truthy(node) -> bool:
    value = _const(node)
    if isinstance(value, bool) or isinstance(value, int):
        return bool(value)
    return isinstance(value, str) and value.strip().lower() in _TRUTHY


def _is_environ(file: PythonFile, node) -> bool:
    return file.qualname(node) == "os.environ"


def _conditional(file: PythonFile, node) -> bool:
    return any(isinstance(a, (ast.If, ast.IfExp, ast.Try)) for a in file.ancestors(node))


def _under_constexpr_flag(file: PythonFile, node, kernel) -> bool:
    for anc in file.ancestors(node):
        if anc is kernel.node:
            return False
        if isinstance(anc, ast.If):
            names = {n.id for n in ast.walk(anc.test) if isinstance(n, ast.Name)}
            if names & set(kernel.constexprs):
                return True
    return False
