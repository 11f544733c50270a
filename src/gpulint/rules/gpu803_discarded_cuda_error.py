from collections.abc import Iterator
from typing import ClassVar

from tree_sitter import Node

from gpulint.diagnostics import Finding, Related, Severity
from gpulint.frontends.cuda import discarded
from gpulint.frontends.cuda.checkspelling import fix_for
from gpulint.frontends.cuda.discarded import discarded_call
from gpulint.frontends.cuda.errorstate import (
    FAILURE_ALLOWED,
    STATUS_READ,
    is_bare_clear,
    swallowed,
)
from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.launchconfig import (
    ATTRIBUTE_LAUNCH_CHECKED,
    ATTRIBUTE_NO_OP,
    attribute_needs_no_check,
)
from gpulint.rule import Exemption, Rule
from gpulint.rules._cuda_conventions import unchecked_by_convention


class DiscardedCudaError(Rule):
    """
    ## What it does
    Finds a CUDA runtime call whose failure leaves results silently wrong (an allocation, a
    copy, a memset, a kernel launch through the API, a function attribute or device limit a
    later launch relies on) used as a statement, its `cudaError_t` discarded: not assigned,
    compared, returned, or wrapped in a check macro (`CUDA_CHECK`, `checkCudaErrors`, the
    project's own macros and checking helpers, names in `[tool.gpulint.cuda] check-macros`).
    A check counts where the next statement makes it, and where a read of the last error
    (`cudaGetLastError()`, `C10_CUDA_KERNEL_LAUNCH_CHECK()`, or the project's own macro or
    helper that reads it, also only in debug builds: `sync_check()` expanding to a
    `syncAndCheck(...)` that calls `cudaGetLastError()`) follows on the call's straight-line
    path (not inside a branch of its own): it reports the failure of any runtime call before
    it. The functions of a file that defines `main` are checked unless `main` runs them:
    library code beside a self-test `main` that never calls it is library code.

    Also a bare `cudaGetLastError();` (its result dropped) after a kernel launch, or after a
    dropped call of these kinds that a later check of the last error would have reported, on
    its straight-line path in the same function with nothing reading a status in between: it
    reads the failure, resets the error state to `cudaSuccess` and drops it, so the failure
    goes unreported and a check after it sees success.

    Only for a kind of call (copies, memsets, allocations, attribute and limit calls, API
    launches, graph launches) the code checks by convention: the file, where it makes at least
    3 calls of the kind, else the nearest folder above it that makes at least 3, else the
    checked tree, uses the status of at least 15% of them
    (where the tree makes fewer than 3, all its calls of these kinds are counted, and where
    those are too few as well, whether it checks its kernel launches: see GPU812). A call
    of a kind it leaves unchecked (a file of weight-loading copies none of which is checked,
    a project that never checks its attribute calls) is GPU811's: there the bare call is the
    house style, not a slip. Other runtime calls (synchronisation, events, streams, frees
    outside teardown, queries whose result is never read) are GPU811 too, off by default.
    The suggested check is the macro the file already uses, else the one the other files of
    its folder use (not one a sibling source defines for itself), `C10_CUDA_CHECK` in a
    PyTorch extension, else a plain `if (... != cudaSuccess)`.

    ## Why is this bad?
    CUDA reports failures only through return values. A `cudaMalloc` that ran out of memory
    leaves the pointer unset, a `cudaMemcpy` that failed leaves the buffer stale, and errors from
    earlier asynchronous work are reported by whichever call comes next: dropping them moves the
    failure to a later, unrelated place.

    ## Example
    ```cuda
    cudaMalloc(&d_x, bytes);
    cudaMemcpy(d_x, h_x, bytes, cudaMemcpyHostToDevice);
    ```

    ## Use instead
    ```cuda
    CUDA_CHECK(cudaMalloc(&d_x, bytes));
    CUDA_CHECK(cudaMemcpy(d_x, h_x, bytes, cudaMemcpyHostToDevice));
    ```

    ## Known problems
    Validating functions, debugging helpers and debug-only code are recognised by name (a
    function starting `verify`, `validate`, `compare`, `print_`, `dump_`, `debug_`; a macro
    spelled `*DEBUG*` in the `#if`): product code named like one (`compare_and_swap_weights`)
    is left alone too, and a checker with another name (`assert_same`) is not.

    ## References
    - [CUDA Runtime API: error handling](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)
    - [CUDA C++ Programming Guide: error checking](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#error-checking)
    """

    code = "GPU803"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    severity = Severity.ERROR  # an unnoticed failure corrupts results
    name = "discarded-cuda-error"
    language = "cuda"
    triggers = ("cuda",)
    message = (
        "the cudaError_t returned by `{name}` is discarded: a failure leaves memory unallocated, "
        "unfilled or a kernel not run, and the results silently wrong; check it: `{suggest}`"
    )
    tags = ("correctness",)

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "void-cast",
            "A call cast to `(void)`: the code says in so many words that it drops the status.",
            """
void scrub(float* d, size_t n, cudaStream_t s) {
  (void)cudaMemsetAsync(d, 0, n, s);  // best effort: the buffer is rewritten before use
}
""",
        ),
        Exemption(
            "project-function",
            "A function the file or project defines with a runtime-like name, or a method "
            "(`pool.cudaMalloc(...)`): not the runtime, and what a failure does is its own.",
            """
// the project's own allocator, named like the runtime: it checks what it calls
void cudaMallocPool(void** p, size_t n) { CUDA_CHECK(cudaMallocAsync(p, n, 0)); }
void grow(void** p, size_t n) {
  cudaMallocPool(p, n);
}
""",
        ),
        Exemption(
            "device-code",
            "A runtime call in device code (dynamic parallelism, `cudaGraphSetConditional`): "
            "the device runtime, whose errors a host-side check cannot see.",
            fixture="cuda/gpu803_silent_device_runtime.cu",
        ),
        Exemption(
            "checked-next-statement",
            'A call whose next statement checks the error (`getLastCudaError("...")`, '
            "`cudaCheckError();`, `if (cudaGetLastError() != cudaSuccess)`).",
            """
void upload(float* d, const float* h, size_t n) {
  cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);
  getLastCudaError("upload failed");
}
""",
        ),
        Exemption(
            "last-error-checked-later",
            "A call followed later on its straight-line path by a read of the last error "
            "(`cudaGetLastError()` checked, `C10_CUDA_KERNEL_LAUNCH_CHECK()`, the project's own "
            "macro or helper reading it, also only in debug builds): that read reports the "
            "failure of any runtime call before it.",
            fixture="cuda/gpu803_silent_project_last_error_check.cu",
        ),
        Exemption(
            "host-to-host-copy",
            "A `cudaMemcpy` from host to host memory (`cudaMemcpyHostToHost`): nothing on the "
            "GPU to fail.",
            """
void stage(float* pinned, const float* h, size_t n) {
  cudaMemcpy(pinned, h, n * sizeof(float), cudaMemcpyHostToHost);
}
""",
        ),
        Exemption(
            "validating-test",
            "A call in test code followed in its function by a validation of the output "
            "(`ASSERT_NEAR`, `EXPECT_*`, `allclose`, `validate(...)`): a failed call fails the "
            "test.",
            """
void test_scale_matches_reference(const float* d_out, const float* ref, int n) {
  std::vector<float> out(n);
  cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
  for (int i = 0; i < n; ++i) ASSERT_NEAR(out[i], ref[i], 1e-5);
}
""",
            filename="tests/test_scale.cu",
        ),
        Exemption(
            "validating-function",
            "A call in a function whose job is to compare results with a reference "
            "(`check_correctness`, `verify_output`, `compare_*`): a failed copy shows as a "
            "mismatch.",
            """
#include <vector>
template <typename T>
void check_correctness(const T* d_out, const T* d_ref, size_t n) {
  std::vector<T> out(n), ref(n);
  cudaMemcpy(out.data(), d_out, n * sizeof(T), cudaMemcpyDeviceToHost);
  cudaMemcpy(ref.data(), d_ref, n * sizeof(T), cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < n; ++i) {
    if (out[i] != ref[i]) { printf("mismatch at %zu\\n", i); return; }
  }
}
""",
        ),
        Exemption(
            "debug-helper",
            "A call in a debugging helper (`print_*`, `dump_*`, `debug_*` functions): a "
            "diagnostic aid, not the product.",
            """
void print_device_rows(const float* d, int rows, int cols) {
  float* h = (float*)malloc(rows * cols * sizeof(float));
  cudaMemcpy(h, d, rows * cols * sizeof(float), cudaMemcpyDeviceToHost);
  for (int r = 0; r < rows; ++r) printf("%d: %f\\n", r, h[r * cols]);
  free(h);
}
""",
        ),
        Exemption(
            "debug-build-only",
            "A call compiled only in debug builds (the first branch of `#if DEBUG_GUARDS`, "
            "`#ifdef MY_DEBUG`, `#ifndef NDEBUG`): a diagnostic aid, not the product.",
            """
void inspect_block(const unsigned char* d, size_t n) {
#if DEBUG_GUARD_BYTES > 0
  unsigned char guard[DEBUG_GUARD_BYTES];
  cudaMemcpy(guard, d + n, DEBUG_GUARD_BYTES, cudaMemcpyDeviceToHost);
  for (int i = 0; i < DEBUG_GUARD_BYTES; ++i) {
    if (guard[i] != 0xfe) { printf("overrun after block %p\\n", d); break; }
  }
#endif
}
""",
        ),
        Exemption(
            "attribute-within-default",
            "A `cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n)` where "
            "`n` is a compile-time constant of at most 48 KB: every device grants that without "
            "the attribute, so the call changes nothing.",
            """
template <int T> __global__ void norm(const float* x, float* y);
void small(const float* x, float* y) {
  cudaFuncSetAttribute(norm<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 24 * 1024);
}
""",
        ),
        Exemption(
            "attribute-launch-checked",
            "A `cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n)` "
            "followed on its path by a launch of `k` that is checked, after it or by every "
            "caller of its function (as GPU802 judges it): without the attribute the launch "
            "fails, and that failure is reported.",
            """
template <int T> __global__ void norm(const float* x, float* y);
template <int T> void launch_norm(const float* x, float* y) {
  cudaFuncSetAttribute(norm<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, 160 * 1024);
  norm<T><<<64, 256, 160 * 1024>>>(x, y);  // fails without the attribute
}
void layer_norm(const float* x, float* y) {
  CUDA_CHECK(cudaFuncSetAttribute(norm<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 0));
  launch_norm<64>(x, y);
  CUDA_CHECK(cudaGetLastError());  // reports the launch's failure
}
""",
        ),
        Exemption(
            "driver-path",
            "A file under a test, benchmark, demo or example path (`tests/`, `benchmarks/`, "
            "`bench_gemm.cu`): a failure shows when the driver runs.",
            """
void run_gemm(float* d_a, const float* h_a, size_t n) {
  cudaMemcpy(d_a, h_a, n * sizeof(float), cudaMemcpyHostToDevice);
}
""",
            filename="benchmarks/gemm.cu",
        ),
        Exemption(
            "standalone-program",
            "What a standalone program runs: `main` (or the `#if` branch that holds it, such "
            "as `#ifdef RUN_MAIN`), the functions of the file only it calls (two levels down), "
            "and headers the project includes only from such code; a failure shows as soon as "
            "the program runs. Also its bare `cudaGetLastError();` resets (a benchmark timing "
            "the call this way).",
            fixture="cuda/gpu803_silent_standalone_program.cu",
        ),
        Exemption(
            "script-only-extension",
            "The sources of a PyTorch extension whose every Python user in the checked tree is "
            "a script (as GPU802 judges it): its one caller is a benchmark or experiment whose "
            "run shows a failure.",
            files=(
                (
                    "csrc/scale.cu",
                    """#include <torch/extension.h>
__global__ void scale_kernel(float* x, int n) {}
void scale(torch::Tensor x, torch::Tensor h) {
  int n = x.numel();
  cudaMemcpy(x.data_ptr<float>(), h.data_ptr<float>(), n * 4, cudaMemcpyHostToDevice);
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
}
""",
                ),
                (
                    "bench_scale.py",
                    """import torch
from torch.utils.cpp_extension import load

toy_scale = load(name="toy_scale", sources=["csrc/scale.cu"])
if __name__ == "__main__":
    x = torch.empty(1 << 20, device="cuda")
    toy_scale.scale(x, torch.ones(1 << 20))
    print(x.sum())
""",
                ),
            ),
        ),
        Exemption(
            "reset-meant",
            "A bare `cudaGetLastError();` whose line, or the line above, says the reset is "
            "meant (`// reset`, `// clear`, `// ignore`, `// expected`).",
            """
__global__ void gather_rows(const float* src, float* dst, int n) {}
void probe(const float* src, float* dst, int n, cudaStream_t stream) {
  gather_rows<<<(n + 255) / 256, 256, 0, stream>>>(src, dst, n);
  cudaGetLastError();  // reset: an unsupported configuration falls back to the host path
}
""",
        ),
        Exemption(
            "status-read-before-clear",
            "A bare `cudaGetLastError();` after a launch or call whose status the code has "
            "already read (a check, a comparison with `cudaSuccess`): the failure was seen.",
            """
__global__ void gather_rows(const float* src, float* dst, int n) {}
void gather_quiet(const float* src, float* dst, int n, cudaStream_t stream) {
  gather_rows<<<(n + 255) / 256, 256, 0, stream>>>(src, dst, n);
  CUDA_CHECK(cudaPeekAtLastError());
  cudaGetLastError();
}
""",
        ),
        Exemption(
            "failure-allowed",
            "A bare `cudaGetLastError();` right after a call allowed to fail "
            "(`cudaHostRegister(...); cudaGetLastError();` for memory that may be registered "
            "already): how code says that failure is fine.",
            """
void pin(float* host, float* dev, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  cudaHostRegister(host, bytes, cudaHostRegisterDefault);  // may be registered already
  cudaGetLastError();
}
""",
        ),
    )

    VALID = [
        """
void f(float** d, size_t n) {
  cudaMalloc(d, n);
  getLastCudaError("cudaMalloc failed");
  cudaDeviceSynchronize();  // a status call: GPU811
}
""",
        """
void f(float** d, size_t n) {
  CUDA_CHECK(cudaMalloc(d, n));
  cudaError_t err = cudaMemset(*d, 0, n);
  if (cudaDeviceSynchronize() != cudaSuccess) return;
  (void)cudaFree(*d);
  cudaGetLastError();
}
""",
    ]
    INVALID = [
        """
void f(float** d, float** e, size_t n) {
  CUDA_CHECK(cudaMalloc(e, n));  // the code checks its allocations
  cudaMalloc(d, n);
}
""",
    ]

    grades: tuple[str, ...] = ("corrupting",)
    house_message = ""  # GPU811's
    clear_message = (
        "`cudaGetLastError();` reads and drops the error of {what} (line {line}){more}, "
        "resetting the error state: that failure goes unreported{later}; check it: `{suggest}`"
    )

    def visit_call_expression(self, node, file: CudaFile):
        if is_bare_clear(file, node):
            if "corrupting" in self.grades:
                yield from self._swallowing_clear(file, node)
            return
        found = discarded_call(file, node)
        if found is None:
            return
        # (the front-end says why nothing is lost, or why the call is not the runtime's)
        spared = found.spared
        if self.exempt("void-cast", spared == discarded.VOID_CAST):
            return
        if self.exempt("project-function", spared in (discarded.METHOD, discarded.OWN_FUNCTION)):
            return
        if self.exempt("device-code", spared == discarded.DEVICE_CODE):
            return
        if self.exempt("checked-next-statement", spared == discarded.CHECKED_NEXT):
            return
        if self.exempt("last-error-checked-later", spared == discarded.LAST_ERROR_READ_LATER):
            return
        if self.exempt("host-to-host-copy", spared == discarded.HOST_TO_HOST):
            return
        if self.exempt("validating-test", spared == discarded.TEST_VALIDATES):
            return
        if self.exempt("validating-function", spared == discarded.VALIDATING_FUNCTION):
            return
        if self.exempt("debug-helper", spared == discarded.DEBUG_HELPER):
            return
        if self.exempt("debug-build-only", spared == discarded.DEBUG_ONLY):
            return
        if found.grade is None:
            self._nothing_lost(found)  # teardown, an output read later: GPU811 names them
            return
        name, grade = found.name, found.grade
        if name == "cudaFuncSetAttribute":
            covered = attribute_needs_no_check(
                file, node, tuple(self.settings.option("cuda", "check-macros", []))
            )
            if self.exempt("attribute-within-default", covered == ATTRIBUTE_NO_OP):
                return
            if self.exempt("attribute-launch-checked", covered == ATTRIBUTE_LAUNCH_CHECKED):
                return
        house = unchecked_by_convention(file, name) if grade == "corrupting" else None
        if grade == "corrupting":
            # a test, benchmark or demo program: a failure shows when it runs
            if self.exempt("driver-path", file.is_driver):
                return
            if self.exempt("standalone-program", file.run_by_main(node) or file.is_harness_header):
                return
            path = file.display_path.replace("\\", "/")
            if self.exempt("script-only-extension", path in file.project.harness):
                return
            if house is not None:
                # a kind of call the file (or project) never checks: the house style, not a
                # slip; GPU811 (opt-in) reports it
                grade = "house"
        if grade not in self.grades:
            return
        call = " ".join(file.node_text(node).split())
        if len(call) > 60:
            call = f"{name}(...)"
        if house is not None:
            where, used, total, what = house
            yield self.report(
                file,
                node,
                self.house_message,
                name=name,
                suggest=fix_for(file, call),
                used=used,
                total=total,
                kind=what,
                where=where,
            )
            return
        yield self.report(file, node, name=name, suggest=fix_for(file, call))

    def _nothing_lost(self, found: discarded.Discard) -> None:
        """Where dropping a status loses nothing for a reason only GPU811's calls have (frees
        in teardown, queries whose output is read later): GPU811 takes its exemptions here."""

    def _swallowing_clear(self, file: CudaFile, node: Node) -> Iterator[Finding]:
        """A bare `cudaGetLastError();` after launches or dropped runtime calls whose failure
        nothing read: it reads that failure, resets the state and drops it."""
        # a test, benchmark or demo program (a benchmark times the call this way)
        if self.exempt("driver-path", file.is_driver):
            return
        if self.exempt("standalone-program", file.run_by_main(node) or file.is_harness_header):
            return
        if self.exempt(
            "script-only-extension", file.display_path.replace("\\", "/") in file.project.harness
        ):
            return
        found = swallowed(file, node)
        if found is None:
            return
        if self.exempt("reset-meant", found.meant):
            return
        if not found.lost:
            # (a clear that follows nothing it could lose needs no name: there is no case)
            self.exempt("status-read-before-clear", STATUS_READ in found.spared)
            self.exempt("failure-allowed", FAILURE_ALLOWED in found.spared)
            return
        first = found.lost[0]
        if file.launch_config(first) is not None:
            what = f"the launch of `{file.call_name(first) or 'the kernel'}`"
        else:
            what = f"`{file.call_name(first)}`"
        others = len(found.lost) - 1
        more = f" and of {others} more call{'s' if others > 1 else ''} before it" if others else ""
        later = ""
        related = [
            Related(file.display_path, *file.launch_span(c)[:2], "its failure is lost here")
            for c in found.lost[:3]
        ]
        if found.later_check is not None:
            line = file.span(found.later_check)[0]
            later = f", and the check at line {line} sees success"
            related.append(
                Related(file.display_path, line, file.span(found.later_check)[1], "sees success")
            )
        elif found.checked_callers:
            site = found.checked_callers[0]
            where = (
                f"at line {site.line}"
                if site.path == file.display_path
                else f"in {site.path}:{site.line}"
            )
            later = f", and the check after its call {where} sees success"
            related.append(
                Related(site.path, site.line, 1, "the check after this call sees success")
            )
        yield self.report(
            file,
            node,
            self.clear_message,
            related=tuple(related),
            what=what,
            line=file.launch_span(first)[0],
            more=more,
            later=later,
            suggest=fix_for(file, "cudaGetLastError()"),
        )
