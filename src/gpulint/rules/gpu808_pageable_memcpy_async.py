import bisect
import re

from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.file import LOOP_TYPES, CudaFile
from gpulint.frontends.cuda.syntax import function_name
from gpulint.rule import Exemption, Rule

_REFERENCE = re.compile(r"(?i)reference|verify|validate|golden|^ref_|_ref$|^check_|^test_")

_PAGEABLE = re.compile(
    r"^\(?\s*(\([^()]*\)\s*)?(std::)?(malloc|calloc|realloc|aligned_alloc)\s*\(|^new\b"
)
_PINNED = ("cudaMallocHost", "cudaHostAlloc", "cudaHostRegister", "cudaMallocManaged")
# `name = value;` (not `==`): the value read in a lookahead, so `a = b = malloc(n)` gives both;
# bounded, so a statement of `a=a=a=...` cannot make the scan quadratic.
_ASSIGNMENT = re.compile(r"(?<![\w.>])([A-Za-z_]\w*)\s*=(?!=)(?=\s*([^;]{0,1000}))")
_VECTOR = re.compile(r"\bstd::vector\s*<|^vector\s*<")
_ARG = re.compile(
    r"^\s*(?:\([^()]*\)\s*)?&?\s*([A-Za-z_]\w*)\s*(?:\.data\s*\(\s*\)|\[\s*0\s*\])?\s*(?:\+.*)?$"
)


# cudaDeviceSynchronize() (group 1 empty) or cudaStreamSynchronize(<stream>) (group 1: stream).
_SYNC = re.compile(
    rb"\bcuda(?:DeviceSynchronize\s*\(\s*\)|StreamSynchronize\s*\(\s*([^()]*?)\s*\))"
)
_WORD = re.compile(rb"\w+")


# Once per file: per function (by start byte), where the device or each stream is synchronised
# and where each word occurs; every name inside a pinning call's arguments; per scope, the
# right-hand sides assigned to each name.
_FUNCTION_INDEX: MemoKey[dict[int, tuple[dict[str, list[int]], dict[bytes, list[int]]]]] = MemoKey(
    "gpu808.function_index"
)
_PINNED_NAMES: MemoKey[set[str]] = MemoKey("gpu808.pinned_names")
_ASSIGNED: MemoKey[dict[tuple[int, int], dict[str, list[str]]]] = MemoKey("gpu808.assigned")


class PageableMemcpyAsync(Rule):
    """
    ## What it does
    Finds `cudaMemcpyAsync` whose host-side buffer is pageable: it came from `malloc`, `calloc`,
    `new`, or is a `std::vector` (`v.data()`, `&v[0]`), declared in the same function or at file
    level, in library code, where the copy may repeat on a hot path and could overlap with
    other work.

    ## Why is this bad?
    An async copy from pageable memory is not async: the driver first copies the data into a
    pinned staging buffer on the CPU, synchronously, and the transfer cannot overlap with
    kernels. It also runs at a fraction of the bandwidth: on an NVIDIA H200 a 256 MiB
    host-to-device copy measured 6–10 GB/s pageable (bound by the host's memcpy) against 55 GB/s
    pinned.

    ## Example
    ```cuda
    float* h_x = (float*)malloc(bytes);
    cudaMemcpyAsync(d_x, h_x, bytes, cudaMemcpyHostToDevice, stream);
    ```

    ## Use instead
    ```cuda
    float* h_x;
    cudaMallocHost(&h_x, bytes);
    cudaMemcpyAsync(d_x, h_x, bytes, cudaMemcpyHostToDevice, stream);
    ```

    ## Known problems
    A buffer whose origin is not visible in the file (a parameter, a member, what a helper
    returns) is not judged: a pageable buffer handed in from elsewhere is missed. Reference
    implementations are recognised by name (`reference`, `verify`, `validate`, `golden`,
    `ref_*`, `*_ref`, `check_*`, `test_*`): a product function named like one
    (`check_and_upload`) is left alone too. A file that defines `main` anywhere, even in an
    `#ifdef BENCH_MAIN` branch, is a program for copies outside loops: library code beside
    such a `main`, which `main` does not run, is left alone too.

    ## References
    - [CUDA C++ Best Practices Guide: pinned memory](https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#pinned-memory)
    - [CUDA Runtime API: API synchronization behavior](https://docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html)
    """

    code = "GPU808"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "pageable-memcpy-async"
    language = "cuda"
    triggers = ("cudaMemcpyAsync",)
    bench = "h2d"
    message = (
        "`cudaMemcpyAsync` with pageable host memory `{name}` ({origin}) is staged synchronously "
        "and runs at a fraction of pinned bandwidth; allocate it with `cudaMallocHost` (or "
        "`cudaHostRegister` it once)"
    )
    tags = ("memory", "transfer")

    EXEMPTIONS = (
        Exemption(
            "reference-implementation",
            "A copy in a reference implementation that checks results (`reference_*`, "
            "`verify_*`, `golden_*`, `check_*`): it runs to validate, not on the hot path.",
            """
#include <vector>
void verify_upload(float* d, size_t n, int steps, cudaStream_t s) {
  std::vector<float> h(n);
  for (int i = 0; i < steps; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
}
""",
        ),
        Exemption(
            "test-code",
            "A copy in a test file: it moves a test's data, and its staging costs nothing "
            "worth a change.",
            """
#include <vector>
void upload_steps(float* d, size_t n, int steps, cudaStream_t s) {
  std::vector<float> h(n);
  for (int i = 0; i < steps; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
}
""",
            filename="tests/test_upload.cu",
        ),
        Exemption(
            "program-copy-made-once",
            "A copy outside any loop in a file that defines `main` (a sample, a benchmark or "
            "test driver): it moves the program's data once.",
            """
#include <cstdlib>
static float* h_table = (float*)malloc(1024 * sizeof(float));
void upload_table(float* d, cudaStream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(d, h_table, 1024 * sizeof(float), cudaMemcpyHostToDevice, s));
}
#ifdef BENCH_MAIN
int main() {
  float* d;
  CUDA_CHECK(cudaMalloc(&d, 1024 * sizeof(float)));
  CUDA_CHECK(cudaMemset(d, 0, 1024 * sizeof(float)));
  return 0;
}
#endif
""",
        ),
        Exemption(
            "standalone-program",
            "A copy in a loop of standalone-program code: `main` (or the `#if` branch that "
            "holds it), the functions of the file only it calls, headers the project includes "
            "only from such code; a sample's data, not a library's hot path.",
            """
#include <vector>
__global__ void scale(float* x, int n) {}
int main() {
  int n = 1 << 20;
  std::vector<float> h(n, 1.0f);
  float* d;
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreate(&s));
  CUDA_CHECK(cudaMalloc(&d, n * sizeof(float)));
  for (int it = 0; it < 10; ++it) {
    CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    scale<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  return 0;
}
""",
        ),
        Exemption(
            "one-off-setup-copy",
            "A copy outside any loop whose stream (or the device) is synchronised after it "
            "before the host buffer is touched again: nothing overlaps with it either way, and "
            "made once, its staging costs little.",
            """
#include <vector>
void load_table(float* d, size_t n, cudaStream_t s) {
  std::vector<float> h(n, 1.0f);
  CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}
""",
        ),
        Exemption(
            "pinned-buffer",
            "A buffer the file passes to a pinning call (`cudaHostRegister` on a `malloc`ed "
            "buffer, `cudaMallocHost`, `cudaHostAlloc`, `cudaMallocManaged`): not pageable.",
            """
void upload_steps(float* d, size_t n, int steps, cudaStream_t s) {
  float* h = (float*)malloc(n * sizeof(float));
  CUDA_CHECK(cudaHostRegister(h, n * sizeof(float), cudaHostRegisterDefault));
  for (int i = 0; i < steps; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
}
""",
        ),
        Exemption(
            "relies-on-staging",
            "A copy whose host buffer the code touches before any sync of the stream (reads "
            "the result, refills or frees the source), or a buffer of the function's own that "
            "dies with no sync after the copy: the code relies on a copy to or from pageable "
            "memory being done with the buffer when the call returns; pinned memory would need "
            "a sync added.",
            """
#include <vector>
void wait_converged(const float* d_sum, int n, cudaStream_t s) {
  std::vector<float> sums(n);
  for (int it = 0; it < 10; ++it) {
    CUDA_CHECK(cudaMemcpyAsync(sums.data(), d_sum, n * sizeof(float), cudaMemcpyDeviceToHost, s));
    if (sums[0] < 1e-6f) break;  // read at once: the copy to pageable memory has returned
  }
}
""",
        ),
    )

    VALID = [
        """
void f(float* d, size_t n, cudaStream_t s) {
  float* h;
  cudaMallocHost(&h, n);
  CUDA_CHECK(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s));
}
""",
        """
template <typename T>
void fill_device(T* d, size_t n, T value, cudaStream_t s) {
  T* h = new T[n];
  std::fill(h, h + n, value);
  CUDA_CHECK(cudaMemcpyAsync(d, h, n * sizeof(T), cudaMemcpyHostToDevice, s));
  delete[] h;  // safe only because a pageable source is staged before the call returns
}
""",
    ]
    INVALID = [
        """
#include <vector>
void upload_steps(float* d, size_t n, int steps, cudaStream_t s) {
  std::vector<float> h(n);
  for (int i = 0; i < steps; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
}
""",
        """
void download_steps(float* d, size_t n, int steps, cudaStream_t s) {
  float* h = (float*)malloc(n);
  for (int i = 0; i < steps; ++i) {
    CUDA_CHECK(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
  }
  free(h);
}
""",
    ]

    def visit_call_expression(self, node, file: CudaFile):
        if file.call_name(node) != "cudaMemcpyAsync":
            return
        args = node.child_by_field_name("arguments")
        if args is None:
            return
        values = [a for a in args.named_children if a.type != "comment"]
        if len(values) < 4:
            return
        kind = file.node_text(values[3])
        if "HostToDevice" in kind:
            candidates = [values[1]]
        elif "DeviceToHost" in kind:
            candidates = [values[0]]
        else:
            return
        function = file.enclosing_function(node)
        name = function_name(file, function) if function is not None else ""
        if self.exempt("reference-implementation", name and _REFERENCE.search(name)):
            return
        if self.exempt("test-code", file.is_test):
            return
        if self.exempt(
            "program-copy-made-once",
            file.is_program and not any(a.type in LOOP_TYPES for a in file.ancestors(node)),
        ):
            return
        if self.exempt("standalone-program", file.in_program(node)):
            return  # a standalone program's (or its harness's) copy: a sample's data, not a hot path
        if self.exempt("one-off-setup-copy", self._one_off(file, node, function, values)):
            return
        for arg in candidates:
            m = _ARG.match(" ".join(file.node_text(arg).split()))
            if not m:
                continue
            name = m.group(1)
            origin = self._origin(file, name, function)
            if origin is not None and not self.exempt(
                "relies-on-staging", self._relies_on_staging(file, node, function, values, name)
            ):
                yield self.report(file, arg, name=name, origin=origin)

    def _one_off(self, file: CudaFile, node, function, values) -> bool:
        """A setup copy: not in a loop, and the same stream (or the device) is synchronised
        after it before the copied buffer is touched again. Nothing can overlap with it anyway,
        so pinning only buys bandwidth on a copy made once."""
        if function is None or any(a.type in LOOP_TYPES for a in file.ancestors(node)):
            return False
        syncs, words = self._function_index(file, function)
        stream = " ".join(file.node_text(values[4]).split()) if len(values) > 4 else "0"
        after = [p for key in ("", stream) for p in syncs.get(key, ()) if p >= node.end_byte]
        if not after:
            return False
        sync = min(after)
        host = values[1] if "HostToDevice" in file.node_text(values[3]) else values[0]
        m = _ARG.match(" ".join(file.node_text(host).split()))
        if m is None:
            return True
        uses = words.get(m.group(1).encode(), [])
        i = bisect.bisect_left(uses, node.end_byte)
        return i == len(uses) or uses[i] >= sync

    def _relies_on_staging(self, file: CudaFile, node, function, values, name: str) -> bool:
        """The code relies on the copy being done with the host buffer when the call returns, as
        a copy from or to pageable memory is: it reads, writes or frees the buffer before any
        sync of the stream (`delete[] h;`, `if (h[0] < eps)`), or the buffer is the function's
        own and no sync follows before it dies (a `std::vector` filled, copied, gone). Pinned
        memory there would need a sync added, for a copy that does not repeat a hot path."""
        if function is None:
            return False
        syncs, words = self._function_index(file, function)
        stream = " ".join(file.node_text(values[4]).split()) if len(values) > 4 else "0"
        after = [p for key in ("", stream) for p in syncs.get(key, ()) if p >= node.end_byte]
        uses = words.get(name.encode(), [])
        i = bisect.bisect_left(uses, node.end_byte)
        if i < len(uses) and (not after or uses[i] < min(after)):
            return True
        if after:
            return False
        return any(
            function.start_byte <= decl.start_byte < function.end_byte
            for decl in file.consts.declarations.get(name, ())
        )

    def _function_index(
        self, file: CudaFile, function
    ) -> tuple[dict[str, list[int]], dict[bytes, list[int]]]:
        """Per function, once: where the device or each stream is synchronised, and where each
        word occurs (sorted byte offsets), so each copy's question costs a bisection instead of
        a scan of the rest of the function (2,000 copies in one function were quadratic)."""
        cache = file.memo.get(_FUNCTION_INDEX, dict)
        key = function.start_byte
        if key not in cache:
            body = file.data[function.start_byte : function.end_byte]
            syncs: dict[str, list[int]] = {}
            for m in _SYNC.finditer(body):
                stream = (
                    " ".join(m.group(1).decode("utf-8", "replace").split()) if m.group(1) else ""
                )
                syncs.setdefault(stream, []).append(function.start_byte + m.start())
            words: dict[bytes, list[int]] = {}
            for m in _WORD.finditer(body):
                words.setdefault(m.group(), []).append(function.start_byte + m.start())
            cache[key] = (syncs, words)
        return cache[key]

    def _pinned_names(self, file: CudaFile) -> set[str]:
        """Every name inside the arguments of a pinning call (cudaHostRegister(...), ...),
        found in one pass over the file (per copy, a search of the whole file: quadratic)."""
        return file.memo.get(
            _PINNED_NAMES,
            lambda: {
                word
                for m in re.finditer(rf"\b(?:{'|'.join(_PINNED)})\s*\(([^;]*)", file.text)
                for word in re.findall(r"\w+", m.group(1))
            },
        )

    def _assignments(self, file: CudaFile, scope) -> dict[str, list[str]]:
        """name -> right-hand sides of `name = ...` in `scope`, read once per scope (nested
        assignments `a = b = malloc(n)` too: the right-hand side is read in a lookahead)."""
        memo = file.memo.get(_ASSIGNED, dict)
        key = (scope.start_byte, scope.end_byte)  # tree-sitter hands out a new node each time
        found = memo.get(key)
        if found is None:
            text = file.data[scope.start_byte : scope.end_byte].decode("utf-8", "replace")
            found = memo[key] = {}
            for m in _ASSIGNMENT.finditer(text):
                found.setdefault(m.group(1), []).append(m.group(2))
        return found

    def _origin(self, file: CudaFile, name: str, function) -> str | None:
        """'malloc'/'new'/'std::vector' when every visible definition of `name` is pageable."""
        scope = function if function is not None else file.root
        if self.exempt("pinned-buffer", name in self._pinned_names(file)):
            return None
        origins: set[str | None] = set()
        for decl in file.consts.declarations.get(name, ()):
            inside = scope.start_byte <= decl.start_byte < scope.end_byte
            if not inside and file.enclosing_function(decl) is not None:
                continue
            type_text = file.node_text(decl.child_by_field_name("type"))
            if _VECTOR.search(type_text):
                origins.add("std::vector")
                continue
            value = None
            for d in decl.children_by_field_name("declarator"):
                if (
                    d.type == "init_declarator"
                    and file.node_text(d.child_by_field_name("declarator")).lstrip("*& ") == name
                ):
                    value = d.child_by_field_name("value")
            if value is None:
                origins.add(None)
                continue
            m = _PAGEABLE.search(" ".join(file.node_text(value).split()))
            origins.add(("new" if m.group(0).startswith("new") else m.group(3)) if m else None)
        for value in self._assignments(file, scope).get(name, ()):
            p = _PAGEABLE.search(value.strip())
            origins.add(("new" if p.group(0).startswith("new") else p.group(3)) if p else None)
        if len(origins) == 1 and None not in origins:
            return origins.pop()
        return None
