from tree_sitter import Node

from gpulint.diagnostics import Severity
from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.file import CudaFile
from gpulint.rule import Exemption, Rule

CONDITIONAL = ("if_statement", "conditional_expression", "switch_statement")


# Per function (by start byte): the local names computed from threadIdx.
_TAINT: MemoKey[dict[int, set[str]]] = MemoKey("gpu806.thread_dependent")


class DivergentSyncthreads(Rule):
    """
    ## What it does
    Finds `__syncthreads()` (and `__syncthreads_count/and/or`) under an `if`, `switch` or `?:`
    whose condition depends on `threadIdx`, directly or through a local variable computed from
    it (`int tid = threadIdx.x; if (tid < 32) { ... __syncthreads(); }`). A condition on values
    the same for every thread of the block (`blockIdx`, `blockDim`, kernel parameters,
    constants) is not divergent.

    ## Why is this bad?
    `__syncthreads()` waits until every thread of the block reaches it. Inside a branch that only
    some threads take, the others never arrive: the CUDA programming guide makes this undefined
    behaviour, which in practice is a hang, or a barrier that silently syncs the wrong threads and
    corrupts shared memory.

    ## Example
    ```cuda
    int tid = threadIdx.x;
    if (tid < 32) {
      buf[tid] += buf[tid + 32];
      __syncthreads();
    }
    ```

    ## Use instead
    ```cuda
    int tid = threadIdx.x;
    if (tid < 32) {
      buf[tid] += buf[tid + 32];
    }
    __syncthreads();
    ```

    ## Known problems
    Loops are not judged: a barrier in a loop whose trip count differs per thread
    (`for (int i = tid; i < n; i += 32) { ...; __syncthreads(); }`) is missed.

    A value that passes through a call counts as uniform (`size<3>(tAgA)` is, even where
    `tAgA` is a per-thread partition), except the lane and rank helpers (`thread_rank()`,
    `__lane_id()`): a per-thread index from another helper (`int lane = my_lane();`) is missed.

    ## References
    - [CUDA C++ Programming Guide: synchronization functions](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#synchronization-functions)
    """

    code = "GPU806"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "divergent-syncthreads"
    severity = Severity.ERROR
    language = "cuda"
    triggers = ("__syncthreads",)
    message = (
        "`{name}()` under a condition that depends on the thread index (line {line}): threads that "
        "skip it never reach the barrier; move the barrier out of the branch so every thread of the block runs it"
    )
    tags = ("correctness", "divergence")

    EXEMPTIONS = (
        Exemption(
            "balanced-barrier",
            "A barrier in one arm of a thread-dependent `if` whose other arm holds one too "
            "(`if (warp0) { ...; __syncthreads(); } else { __syncthreads(); }`): every thread "
            "of the block reaches a barrier.",
            """
__global__ void reduce(float* x) {
  __shared__ float buf[64];
  if (threadIdx.x < 32) {
    buf[threadIdx.x] += buf[threadIdx.x + 32];
    __syncthreads();
  } else {
    __syncthreads();
  }
}
""",
        ),
    )

    VALID = [
        """
__global__ void k(float* x, int n) {
  __shared__ float buf[256];
  if (threadIdx.x < 32) buf[threadIdx.x] = 0;
  __syncthreads();
  if (blockIdx.x < n) { __syncthreads(); }
  for (int i = 0; i < n; ++i) { __syncthreads(); }
}
""",
    ]
    INVALID = [
        """
__global__ void k(float* x) {
  __shared__ float buf[64];
  int tid = threadIdx.x;
  if (tid < 32) {
    buf[tid] += buf[tid + 32];
    __syncthreads();
  }
}
""",
    ]

    def visit_call_expression(self, node, file: CudaFile):
        name = file.call_name(node)
        if name is None or not name.startswith("__syncthreads"):
            return
        function = file.enclosing_function(node)
        if function is None:
            return
        tainted = self._thread_dependent(file, function)
        for a in file.ancestors(node):
            if a.type == "function_definition" or a.type == "lambda_expression":
                return
            if a.type not in CONDITIONAL:
                continue
            cond = a.child_by_field_name("condition")
            if a.type == "if_statement" and self.exempt(
                "balanced-barrier", self._balanced(file, a, node)
            ):
                continue
            if (
                cond is not None
                and not file.broken(cond)
                and depends_on_thread(file, cond, tainted)
            ):
                yield self.report(file, node, name=name, line=file.span(a)[0])
                return

    @staticmethod
    def _balanced(file: CudaFile, branch, barrier) -> bool:
        """Both arms of the `if` hold a barrier (`if (warp0) {...; __syncthreads();} else
        {__syncthreads();}`): every thread reaches one, the deliberate balanced form."""
        then, other = (
            branch.child_by_field_name("consequence"),
            branch.child_by_field_name("alternative"),
        )
        if then is None or other is None:
            return False
        inside_then = then.start_byte <= barrier.start_byte < then.end_byte
        arm = other if inside_then else then
        return b"__syncthreads" in file.data[arm.start_byte : arm.end_byte]

    @staticmethod
    def _thread_dependent(file: CudaFile, function) -> set[str]:
        """Local names whose value is computed from threadIdx (directly or through each other)."""
        cache = file.memo.get(_TAINT, dict)
        key = function.start_byte
        if key in cache:
            return cache[key]
        pairs: list[tuple[str, Node]] = []
        for kind in ("init_declarator", "assignment_expression"):
            for d in file.nodes(kind):
                if not function.start_byte <= d.start_byte < function.end_byte:
                    continue
                if kind == "init_declarator":
                    target, value = (
                        d.child_by_field_name("declarator"),
                        d.child_by_field_name("value"),
                    )
                else:
                    target, value = d.child_by_field_name("left"), d.child_by_field_name("right")
                if target is not None and value is not None and target.type == "identifier":
                    pairs.append((file.node_text(target), value))
        tainted: set[str] = set()
        changed = True
        rounds = 0
        while changed and rounds < 8:
            changed = False
            rounds += 1
            for name, expr in pairs:
                if name not in tainted and depends_on_thread(file, expr, tainted):
                    tainted.add(name)
                    changed = True
        cache[key] = tainted
        return tainted


# Expressions through which a per-thread value flows. A call stops the flow (`size<3>(tAgA)` is
# uniform even when tAgA is a per-thread partition): precision before recall.
_FLOW = {
    "binary_expression",
    "unary_expression",
    "parenthesized_expression",
    "cast_expression",
    "conditional_expression",
    "subscript_expression",
    "field_expression",
    "condition_clause",
    "comma_expression",
    "update_expression",
    "assignment_expression",
    "pointer_expression",
}
_THREAD_CALLS = {"thread_rank", "__lane_id", "laneid", "lane_id", "get_lane_id"}


def depends_on_thread(file: CudaFile, node, tainted: set[str]) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        t = n.type
        if t == "identifier":
            text = file.node_text(n)
            if text == "threadIdx" or text in tainted:
                return True
        elif t == "call_expression":
            if file.call_name(n) in _THREAD_CALLS:
                return True
        elif t in _FLOW or t == "declaration":
            stack.extend(n.named_children)
    return False
