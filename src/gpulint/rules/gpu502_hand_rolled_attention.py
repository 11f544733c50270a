import ast
import re

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.model import MemoKey, end_position, position, scope_nodes
from gpulint.frontends.python.names import terminal_name
from gpulint.rule import Exemption, Rule

_SOFTMAX = {
    "torch.softmax",
    "torch.nn.functional.softmax",
    "torch.special.softmax",
    "torch.Tensor.softmax",
}
_SOFTMAX_MODULE = {"torch.nn.Softmax", "torch.nn.modules.activation.Softmax"}
_MATMUL = {"torch.matmul", "torch.bmm"}
# Fused attention calls: a function (or its caller) that has one is the SDPA path's fallback.
_FUSED = re.compile(
    r"^(scaled_dot_product_attention|flash_attn\w*|memory_efficient_attention\w*|flex_attention"
    r"|_flash_attention_forward|flash_attention\w*|sdpa\w*|fused_attention\w*)$"
)
# Reference implementations that fused kernels are checked against, and graph-rewrite patterns
# that a compiler replaces with a fused kernel: deliberate, and not a model's hot path.
_REFERENCE_NAME = re.compile(
    r"(^|_)(ref|reference|naive|baseline|golden|vanilla|pattern|replacement|expected)(_|$)"
    r"|^(run_)?torch_|_torch(_|$)",
    re.IGNORECASE,
)
_REFERENCE_FILE = re.compile(
    r"^(naive|ref|reference|bench)|_(ref|reference|naive)\.py$", re.IGNORECASE
)
_BENCH_DIRS = {"benchmark", "benchmarks", "bench"}
_FUSED_FLAG = re.compile(r"flash|sdpa|scaled_dot_product|fused|xformers|mem_eff", re.IGNORECASE)
# Shape and dtype changes that leave the scores (or probabilities) the same values.
_SAME_VALUES = {
    "float", "half", "bfloat16", "double", "to", "type", "type_as", "view", "reshape", "contiguous",
    "clone", "view_as", "reshape_as",
}  # fmt: skip
_SCALE_METHODS = {
    "mul",
    "mul_",
    "div",
    "div_",
    "add",
    "add_",
    "masked_fill",
    "masked_fill_",
    "sub",
    "sub_",
}
# A function computing a classification loss or its gradient: `softmax(h @ W.T) @ W` there is
# the cross-entropy backward through the output projection, not attention.
_LOSS_WORDS = re.compile(
    r"cross_?entropy|\bnll|one_hot|\btargets?\b|\blabels?\b|\bvocab|lm_head|ignore_index",
    re.IGNORECASE,
)
_TRANSPOSE_METHODS = {"transpose", "permute", "t", "swapaxes", "swapdims", "transpose_"}
_DEPTH = 16
_MAX_BINDINGS = 3  # candidate bindings followed per name, latest first


def _einsum_spec(file: PythonFile, node: ast.AST) -> tuple[list[str], str, list[ast.AST]] | None:
    """`torch.einsum("bhqd,bhkd->bhqk", q, k)` -> (["bhqd", "bhkd"], "bhqk", [q, k])."""
    if not isinstance(node, ast.Call) or file.qualname(node) not in {
        "torch.einsum",
        "opt_einsum.contract",
    }:
        return None
    if (
        len(node.args) != 3
        or not isinstance(node.args[0], ast.Constant)
        or not isinstance(node.args[0].value, str)
    ):
        return None
    spec = node.args[0].value.replace(" ", "").replace("...", "")
    if "->" not in spec:
        return None
    inputs, output = spec.split("->")
    parts = inputs.split(",")
    if len(parts) != 2 or not all(parts) or not output:
        return None
    return parts, output, list(node.args[1:])


def _same_map(value: ast.AST, names: set[str]) -> bool:
    """`attn`, `self.dropout(attn)`, `attn.to(q.dtype)`: still the attention map (not `attn @ v`,
    not `torch.matmul(attn, v)`)."""
    if isinstance(value, ast.Name):
        return value.id in names
    if not isinstance(value, ast.Call):
        return False
    func = value.func
    if isinstance(func, ast.Attribute) and func.attr in _SAME_VALUES:
        if isinstance(func.value, ast.Name) and func.value.id in names:
            return True
    return (
        len(value.args) == 1 and isinstance(value.args[0], ast.Name) and value.args[0].id in names
    )


class HandRolledAttention(Rule):
    """
    ## What it does
    Finds attention written out by hand, `softmax(q @ k.transpose(-2, -1) * scale [+ mask]) @ v`,
    in any spelling: `@`, `torch.matmul`, `torch.bmm`, `torch.baddbmm`, `torch.einsum`;
    `.transpose(-2, -1)`, `.mT`, `.permute(...)`; the scale before or after the product; masks
    added, `masked_fill`ed or chosen with `torch.where`; `F.softmax`, `torch.softmax`,
    `.softmax(dim=-1)` or an `nn.Softmax` module; dropout on the probabilities; all through
    intermediate variables within one function. Reported once, at the softmax.

    Variants SDPA cannot express do not match: talking heads (a projection that mixes heads
    between the product and the softmax or after it) and logit soft-capping (`tanh` on the
    scores). A project that declares only torch releases before 2.0, which have no
    `scaled_dot_product_attention`, is not checked.

    ## Why is this bad?
    The hand-written form materialises the full `L x L` score matrix in global memory, reads it
    back for the softmax, writes the probabilities, and reads them again for the second matmul:
    memory traffic and memory use grow with the square of the sequence length, and every step is
    a separate kernel. `torch.nn.functional.scaled_dot_product_attention` dispatches to fused
    FlashAttention, memory-efficient or cuDNN kernels that keep the tile in on-chip memory and
    never write the score matrix, which is several times faster on long sequences and supports
    masks, causal masking and dropout.

    ## Example
    ```python
    attn = (q @ k.transpose(-2, -1)) * self.scale
    attn = attn.masked_fill(mask == 0, float("-inf"))
    attn = self.attn_drop(attn.softmax(dim=-1))
    out = attn @ v
    ```

    ## Use instead
    ```python
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.bool(), dropout_p=self.attn_drop.p if self.training else 0.0,
        scale=self.scale,
    )
    ```

    ## References
    - [torch.nn.functional.scaled_dot_product_attention](https://docs.pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
    - [torch.nn.attention (backends, sdpa_kernel)](https://docs.pytorch.org/docs/stable/nn.attention.html)
    - [cuDNN attention (FlashAttention-2-based SDPA)](https://docs.nvidia.com/deeplearning/cudnn/frontend/latest/operations/Attention.html)
    """

    code = "GPU502"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    torch_since = (2, 0)  # scaled_dot_product_attention is new in torch 2.0
    name = "hand-rolled-attention"
    bench = "attention"
    triggers = ("softmax", "Softmax")
    message = (
        "hand-rolled attention (softmax of q·kᵀ, then ·v) materialises the full score matrix; "
        "use `F.scaled_dot_product_attention(q, k, v, attn_mask=..., dropout_p=..., scale=...)`"
    )
    tags = ("attention", "memory")

    EXEMPTIONS = (
        Exemption(
            "test-code",
            "Tests: a hand-written attention there is the reference a kernel is checked against.",
            "import torch\ndef test_kernel(q, k, v):\n    a = (q @ k.transpose(-2, -1)).softmax(-1)\n"
            "    assert torch.allclose(my_kernel(q, k, v), a @ v)\n",
            filename="tests/test_attention.py",
        ),
        Exemption(
            "reference-file",
            "A reference or benchmark file (`naive*.py`, `*_ref.py`, `bench*.py`, a file under "
            "`benchmarks/`): the manual form is the baseline, not a model's hot path.",
            fixture="python/naive_attention_gpu502_silent.py",
        ),
        Exemption(
            "fused-path-in-module",
            "A module that also calls `scaled_dot_product_attention` or a FlashAttention or "
            "xFormers kernel (an `eager` attention class next to a flash one, a fallback beside "
            "an SDPA method): the manual path is kept as the alternative.",
            fixture="python/gpu502_silent_sdpa_fallback.py",
        ),
        Exemption(
            "reference-function",
            "A reference implementation (a function or class named `naive`, `reference`, `ref`, "
            "`baseline`, `torch_...`) or a graph-rewrite `pattern`/`replacement` that a compiler "
            "swaps for a fused kernel.",
            fixture="python/gpu502_silent_attention_variants.py",
        ),
        Exemption(
            "classification-loss",
            "A function about a classification loss (cross-entropy, targets, labels, the "
            "vocabulary, `lm_head`): `softmax(h @ W.T) @ W` there is the loss's backward through "
            "the output projection, not attention.",
            fixture="python/gpu502_silent_chunked_cross_entropy.py",
        ),
        Exemption(
            "fused-flag-branch",
            "A manual path under an `if` on a `flash`/`sdpa`/`fused` flag (the `else:` of `if "
            "self.use_flash:`): the fallback where the fused kernel is off.",
            """
import torch
def attend(self, q, k, v):
    if self.use_flash:
        return self.flash_impl(q, k, v)
    else:
        att = (q @ k.transpose(-2, -1)) * self.scale
        return att.softmax(dim=-1) @ v
""",
        ),
        Exemption(
            "attention-map-returned",
            "The probabilities are returned, stored on an object or appended to a list: the "
            "caller needs the attention map itself (visualisation, distillation, "
            "`output_attentions`), which SDPA never materialises.",
            """
import torch
def softmax_attention(q, k, v):
    a = torch.einsum("bhmd,bhnd->bhmn", q, k) * (k.shape[-1] ** -0.5)
    a = torch.softmax(a, dim=-1)
    y = torch.einsum("bhmn,bhnd->bhmd", a, v)
    return y, a
""",
        ),
    )

    VALID = [
        # Fallback branch used only without SDPA.
        """
import math
import torch.nn.functional as F
def attend(self, q, k, v):
    if self.flash:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = F.softmax(att, dim=-1)
    return att @ v
""",
        # Logit soft-capping.
        """
import torch
def attend(q, k, v, cap):
    scores = torch.matmul(q, k.transpose(-1, -2))
    scores = cap * torch.tanh(scores / cap)
    return torch.matmul(scores.softmax(-1), v)
""",
        # Talking heads after the softmax.
        """
import torch
def attend(self, q, k, v):
    dots = torch.einsum("bhid,bhjd->bhij", q, k) * self.scale
    attn = dots.softmax(dim=-1)
    attn = torch.einsum("bhij,hk->bkij", attn, self.post_softmax_proj)
    return torch.einsum("bhij,bhjd->bhid", attn, v)
""",
        # A softmax that is not attention.
        """
import torch.nn.functional as F
def loss(logits, targets):
    probs = F.softmax(logits, dim=-1)
    return (probs @ targets).mean()
""",
    ]
    INVALID = [
        # The output is returned, the map is not.
        """
import torch
def attend(self, q, k, v):
    attn = torch.matmul(q, k.transpose(-2, -1)) * self.scale
    attn = self.dropout(attn.softmax(dim=-1))
    out = torch.matmul(attn, v)
    return out
""",
        """
import math
import torch.nn.functional as F
def forward(self, q, k, v, mask):
    scores = q @ k.transpose(-2, -1)
    scores = scores / math.sqrt(q.size(-1))
    scores = scores.masked_fill(mask == 0, float("-inf"))
    attn = scores.softmax(-1)
    attn = self.dropout(attn)
    return attn @ v
""",
        """
import torch
from torch import nn
class WindowAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q * self.scale
        attn = torch.bmm(q, k.permute(0, 2, 1))
        attn = self.softmax(attn + self.relative_position_bias)
        return torch.bmm(attn, v)
""",
        """
import torch
def forward(self, q, k, v):
    weight = torch.einsum("bct,bcs->bts", q * self.scale, k * self.scale)
    weight = torch.softmax(weight.float(), dim=-1).type(weight.dtype)
    return torch.einsum("bts,bcs->bct", weight, v)
""",
    ]

    def visit_Module(self, node: ast.Module, file: PythonFile):
        if self.exempt("test-code", file.is_test):
            return
        if self.exempt("reference-file", self._reference_file(file)):
            return
        # A module that also has a fused attention path (an `eager` class next to a flash one,
        # a fallback method next to an SDPA one) keeps the manual one as the alternative.
        if self.exempt(
            "fused-path-in-module",
            any(_FUSED.match(terminal_name(c.func) or "") for c in file.nodes(ast.Call)),
        ):
            return
        reported: set[int] = set()
        # Only functions that call a softmax can hold an attention computation.
        with_softmax = {
            id(function)
            for call in file.nodes(ast.Call)
            if self._is_softmax(file, call) and (function := file.enclosing_function(call))
        }
        for scope in file.nodes(ast.FunctionDef, ast.AsyncFunctionDef):
            if id(scope) not in with_softmax or self.exempt(
                "reference-function", self._reference_function(file, scope)
            ):
                continue
            if self.exempt("classification-loss", _LOSS_WORDS.search(file.segment(scope) or "")):
                continue  # a softmax over vocabulary logits (a chunked cross-entropy) is a loss

            nodes = [n for n in scope_nodes(scope) if hasattr(n, "lineno")]
            for candidate in nodes:
                for probs in self._av_operands(file, candidate):
                    softmax = self._trace_probs(file, scope, probs, candidate, _DEPTH)
                    if softmax is None or id(softmax) in reported:
                        continue
                    scores = self._softmax_input(file, softmax)
                    if scores is None or not self._trace_scores(
                        file, scope, scores, softmax, _DEPTH
                    ):
                        continue
                    if self.exempt(
                        "fused-flag-branch", self._in_fused_branch(file, softmax, scope)
                    ):
                        continue
                    if self.exempt(
                        "attention-map-returned", self._weights_leave(file, scope, softmax)
                    ):
                        continue
                    reported.add(id(softmax))
                    yield self.report(file, softmax)

    @staticmethod
    def _weights_leave(file: PythonFile, scope, softmax: ast.AST) -> bool:
        """The probabilities are returned, stored on an object or appended to a list: the caller
        needs the attention map itself (visualisation, distillation, `output_attentions`), which
        SDPA never materialises."""
        model = file.model
        stmt = next((p for p in file.ancestors(softmax) if isinstance(p, ast.stmt)), None)
        value = getattr(stmt, "value", None)
        names = {
            t.id
            for t in (model.targets_of(value) if isinstance(value, ast.expr) else [])
            if isinstance(t, ast.Name)
        }
        if not names:
            return False
        # Follow plain renames and same-value rebindings (`attn = self.dropout(attn)`) through
        # the scope's bindings, until no name is added.
        table = model.table(scope)
        grown = True
        while grown:
            grown = False
            for name, bound in table.items():
                if name not in names and any(
                    b.kind == "assign" and b.value is not None and _same_map(b.value, names)
                    for b in bound
                ):
                    names.add(name)
                    grown = True

        for node in scope_nodes(scope):
            if isinstance(node, ast.Return) and node.value is not None:
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                if any(isinstance(v, ast.Name) and v.id in names for v in values):
                    return True
            elif isinstance(node, ast.Name) and node.id in names:
                # `self.attn_map = attn`, `maps[i] = attn`
                if any(
                    isinstance(t, (ast.Attribute, ast.Subscript)) for t in model.targets_of(node)
                ):
                    return True
            elif isinstance(node, ast.Call) and terminal_name(node.func) == "append":
                if any(isinstance(a, ast.Name) and a.id in names for a in node.args):
                    return True
        return False

    # -- the fused path elsewhere ----------------------------------------------------------------
    @staticmethod
    def _reference_file(file: PythonFile) -> bool:
        parts = file.display_path.replace("\\", "/").split("/")
        return bool(_REFERENCE_FILE.search(parts[-1])) or any(
            p.lower() in _BENCH_DIRS for p in parts[:-1]
        )

    @staticmethod
    def _reference_function(
        file: PythonFile, function: ast.FunctionDef | ast.AsyncFunctionDef
    ) -> bool:
        names = [function.name] + [
            a.name
            for a in file.ancestors(function)
            if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
        return any(_REFERENCE_NAME.search(n) for n in names)

    @staticmethod
    def _in_fused_branch(file: PythonFile, node: ast.AST, scope: ast.AST) -> bool:
        for parent in file.ancestors(node):
            if parent is scope:
                return False
            if isinstance(parent, (ast.If, ast.IfExp)) and _FUSED_FLAG.search(
                file.segment(parent.test)
            ):
                return True
        return False

    # -- softmax ---------------------------------------------------------------------------------
    def _is_softmax(self, file: PythonFile, node: ast.AST) -> bool:
        return self._softmax_input(file, node) is not None

    @staticmethod
    def _softmax_input(file: PythonFile, node: ast.AST) -> ast.AST | None:
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        qualified = file.qualname(node)
        if qualified in _SOFTMAX:
            return (
                node.args[0]
                if node.args
                else next((k.value for k in node.keywords if k.arg == "input"), None)
            )
        name = terminal_name(func)
        if name and name in _softmax_modules(file) and len(node.args) == 1:
            return node.args[0]  # self.softmax = nn.Softmax(dim=-1); self.softmax(attn)
        if isinstance(func, ast.Attribute) and func.attr == "softmax" and qualified is None:
            if not (isinstance(func.value, ast.Name) and func.value.id == "self"):
                return func.value  # x.softmax(dim=-1)
        return None

    # -- values through assignments --------------------------------------------------------------
    @staticmethod
    def _bindings(file: PythonFile, scope, name: str, at: ast.AST) -> list[ast.AST]:
        """The statements before `at` in `scope` that may have bound `name` last, latest first:
        bindings inside an `if` or loop that does not hold `at` may not have run, so the search
        goes on to the first one that always runs. A tuple target is unknown (`ast.Pass`)."""
        found: list[ast.AST] = []
        for b in file.model.bindings_in(scope, name):
            node = b.node
            if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                continue
            if end_position(node) > position(at):
                continue
            if _exclusive_branches(file, node, at):
                continue  # `if mask: attn = f(attn) else: attn = g(attn)`: the if side never reaches else
            if b.value is None:  # a tuple target: what `name` got is unknown
                unknown = ast.Pass()
                unknown.lineno, unknown.col_offset = position(node)
                found.append(unknown)
            else:
                found.append(node)
        found.sort(key=position, reverse=True)
        out = []
        for binding in found[:_MAX_BINDINGS]:
            out.append(binding)
            if not _conditional(file, binding, at, scope):
                break
        return out

    # -- q @ k^T ---------------------------------------------------------------------------------
    def _trace_scores(
        self, file: PythonFile, scope, expr: ast.AST, at: ast.AST, depth: int
    ) -> bool:
        """Does `expr` reach q·kᵀ through scaling, masking, bias and dtype or shape changes only?"""
        if depth <= 0:
            return False
        if self._is_qk(file, scope, expr, at):
            return True
        again = lambda e: self._trace_scores(file, scope, e, at, depth - 1)  # noqa: E731
        if isinstance(expr, ast.BinOp):
            if isinstance(expr.op, (ast.Mult, ast.Add)):
                return again(expr.left) or again(expr.right)
            if isinstance(expr.op, (ast.Div, ast.Sub)):
                return again(expr.left)
            return False
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.USub):
            return False
        if isinstance(expr, ast.Call):
            func = expr.func
            qualified = file.qualname(expr)
            if qualified == "torch.where" and len(expr.args) == 3:
                return again(expr.args[1]) or again(expr.args[2])
            if (
                qualified in {"torch.mul", "torch.add", "torch.div", "torch.masked_fill"}
                and expr.args
            ):
                return again(expr.args[0]) or (
                    qualified in {"torch.mul", "torch.add"}
                    and len(expr.args) > 1
                    and again(expr.args[1])
                )
            if (
                isinstance(func, ast.Attribute)
                and qualified is None
                and (func.attr in _SAME_VALUES or func.attr in _SCALE_METHODS)
            ):
                return again(func.value)
            return False
        if isinstance(expr, ast.Name):
            for binding in self._bindings(file, scope, expr.id, at):
                if isinstance(binding, (ast.Assign, ast.AnnAssign)) and binding.value is not None:
                    if self._trace_scores(file, scope, binding.value, binding, depth - 1):
                        return True
                elif isinstance(binding, ast.AugAssign) and isinstance(
                    binding.op, (ast.Mult, ast.Div, ast.Add, ast.Sub)
                ):
                    if self._trace_scores(file, scope, expr, binding, depth - 1):
                        return True
        return False

    def _is_qk(self, file: PythonFile, scope, expr: ast.AST, at: ast.AST) -> bool:
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.MatMult):
            return self._transposed(file, scope, expr.right, at, 4)
        if isinstance(expr, ast.Call):
            qualified = file.qualname(expr)
            if qualified in _MATMUL and len(expr.args) == 2:
                return self._transposed(file, scope, expr.args[1], at, 4)
            if qualified == "torch.baddbmm" and len(expr.args) >= 3:
                return self._transposed(file, scope, expr.args[2], at, 4)
            func = expr.func
            if (
                isinstance(func, ast.Attribute)
                and qualified is None
                and func.attr in {"matmul", "bmm"}
                and len(expr.args) == 1
            ):
                return self._transposed(file, scope, expr.args[0], at, 4)
            spec = _einsum_spec(file, expr)
            if spec:
                (left, right), output, _ = spec
                # The softmax axis (the output's last index) comes from the keys only, and one
                # index is summed: q·kᵀ. A head-mixing einsum keeps its last index from the scores.
                contracted = (set(left) & set(right)) - set(output)
                return bool(contracted) and output[-1] in right and output[-1] not in left
        return False

    def _transposed(self, file: PythonFile, scope, expr: ast.AST, at: ast.AST, depth: int) -> bool:
        if isinstance(expr, ast.Attribute) and expr.attr in {"mT", "T", "mH"}:
            return True
        if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
            if expr.func.attr in _TRANSPOSE_METHODS and file.qualname(expr) is None:
                return True
            if expr.func.attr in _SAME_VALUES and file.qualname(expr) is None and depth > 0:
                return self._transposed(file, scope, expr.func.value, at, depth - 1)
        if isinstance(expr, ast.Call) and file.qualname(expr) in {
            "torch.transpose",
            "torch.permute",
        }:
            return True
        if isinstance(expr, ast.Call) and re.search(
            r"transpose|permute", terminal_name(expr.func) or ""
        ):
            return True  # `self.transpose_key_for_scores(k)`: the model's own helper
        if isinstance(expr, ast.BinOp) and isinstance(expr.op, (ast.Mult, ast.Div)) and depth > 0:
            return self._transposed(file, scope, expr.left, at, depth - 1) or self._transposed(
                file, scope, expr.right, at, depth - 1
            )
        if isinstance(expr, ast.Name) and depth > 0:
            return any(
                self._transposed(file, scope, binding.value, binding, depth - 1)
                for binding in self._bindings(file, scope, expr.id, at)
                if isinstance(binding, ast.Assign)
            )
        return False

    # -- probabilities @ v -----------------------------------------------------------------------
    @staticmethod
    def _av_operands(file: PythonFile, node: ast.AST) -> list[ast.AST]:
        """The probabilities operand of a candidate `p @ v`."""
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return [node.left]
        if not isinstance(node, ast.Call):
            return []
        qualified = file.qualname(node)
        if qualified in _MATMUL and len(node.args) == 2:
            return [node.args[0]]
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and qualified is None
            and func.attr in {"matmul", "bmm"}
            and len(node.args) == 1
        ):
            return [func.value]
        spec = _einsum_spec(file, node)
        if spec:
            parts, output, operands = spec
            out = []
            # The probabilities are summed over their last index (the keys), which v shares.
            for i, part in enumerate(parts):
                other = parts[1 - i]
                if part[-1] in other and part[-1] not in output:
                    out.append(operands[i])
            return out
        return []

    def _trace_probs(
        self, file: PythonFile, scope, expr: ast.AST, at: ast.AST, depth: int
    ) -> ast.Call | None:
        """The softmax that `expr` is, through dropout and dtype or shape changes only."""
        if depth <= 0:
            return None
        if self._softmax_input(file, expr) is not None and isinstance(expr, ast.Call):
            return expr
        if isinstance(expr, ast.Call):
            func = expr.func
            name = terminal_name(func) or ""
            if (
                isinstance(func, ast.Attribute)
                and file.qualname(expr) is None
                and func.attr
                in _SAME_VALUES
                | {
                    "masked_fill",
                    "masked_fill_",
                    "nan_to_num",
                }
            ):
                return self._trace_probs(file, scope, func.value, at, depth - 1)
            if "drop" in name.lower() and expr.args:
                return self._trace_probs(file, scope, expr.args[0], at, depth - 1)
            return None
        if isinstance(expr, ast.Name):
            for binding in self._bindings(file, scope, expr.id, at):
                if isinstance(binding, ast.Assign):
                    found = self._trace_probs(file, scope, binding.value, binding, depth - 1)
                    if found is not None:
                        return found
        return None


_SOFTMAX_MODULES: MemoKey[set[str]] = MemoKey("names bound to nn.Softmax modules")


def _softmax_modules(file: PythonFile) -> set[str]:
    """Names bound to `nn.Softmax(...)` anywhere in the file (`self.softmax`, `attend`)."""
    return file.memo.get(_SOFTMAX_MODULES, lambda: _find_softmax_modules(file))


def _find_softmax_modules(file: PythonFile) -> set[str]:
    found: set[str] = set()
    for call in file.model.calls_to(*_SOFTMAX_MODULE):
        found |= {n for t in file.model.targets_of(call) if (n := terminal_name(t)) is not None}
    return found


def _exclusive_branches(file: PythonFile, a: ast.AST, b: ast.AST) -> bool:
    """`a` and `b` sit on different sides (body / orelse) of one `if`."""
    path_a = {id(p): child for child, p in _edges(file, a)}
    for child_b, parent in _edges(file, b):
        child_a = path_a.get(id(parent))
        if child_a is None:
            continue
        if isinstance(parent, ast.If):
            side_a = (
                "body"
                if child_a in parent.body
                else "orelse"
                if child_a in parent.orelse
                else "test"
            )
            side_b = (
                "body"
                if child_b in parent.body
                else "orelse"
                if child_b in parent.orelse
                else "test"
            )
            return {side_a, side_b} == {"body", "orelse"}
        return False
    return False


def _edges(file: PythonFile, node: ast.AST):
    """(child, parent) pairs from `node` up to the module."""
    child = node
    for parent in file.ancestors(node):
        yield child, parent
        child = parent


def _conditional(file: PythonFile, node: ast.AST, at: ast.AST, scope: ast.AST) -> bool:
    """`node` sits in an `if`, loop or `try` (inside `scope`) that does not also hold `at`."""
    holders = {id(a) for a in file.ancestors(at)}
    for parent in file.ancestors(node):
        if parent is scope:
            return False
        if (
            isinstance(parent, (ast.If, ast.For, ast.While, ast.Try, ast.With))
            and id(parent) not in holders
        ):
            if isinstance(parent, ast.With):
                continue  # a `with` body always runs
            return True
    return False
