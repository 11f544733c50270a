from collections.abc import Iterator

from tree_sitter import Node

from gpulint.diagnostics import Finding, Related, Severity
from gpulint.frontends.cuda.checkspelling import fix_for
from gpulint.frontends.cuda.discarded import discarded_call
from gpulint.frontends.cuda.errorstate import is_bare_clear, swallowed
from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.launchconfig import attribute_needs_no_check
from gpulint.rule import Rule
from gpulint.rules._cuda_conventions import unchecked_by_convention


class DiscardedCudaError(Rule):
    """
    ## What it does
    Finds a CUDA runtime call whose failure leaves results silently wrong (an allocation, a
    copy, a memset, a kernel launch through the API, a function attribute or device limit a
    later launch relies on) used as a statement, its `cudaError_t` discarded: not assigned,
    compared, returned, or wrapped in a check macro (`CUDA_CHECK`, `checkCudaErrors`, the
    project's own macros and checking helpers, names in `[tool.gpulint.cuda] check-macros`).
    Left alone: a call the next statement checks (`getLastCudaError("...")`,
    `cudaCheckError();`, `if (cudaGetLastError() != cudaSuccess)`), a call followed later on
    its straight-line path (not inside a branch of its own) by a check of the last error
    (`cudaGetLastError()`, `C10_CUDA_KERNEL_LAUNCH_CHECK()`, or the project's own macro or helper
    that reads it, also only in debug builds: `sync_check()` expanding to a `syncAndCheck(...)`
    that calls `cudaGetLastError()`), which reports the failure of any runtime call before it,
    a host-to-host copy (`cudaMemcpyHostToHost`), an explicit `(void)` cast,
    the project's own wrappers (`cudaFreeCheck(p)`, functions the project defines with a
    runtime-like name), device code, and standalone programs with their harness code, where a
    failure shows as soon as the program runs: `main` (or the `#if` branch that holds it, such
    as `#ifdef RUN_MAIN`) and the functions of the file only it calls, two levels down, a
    header the project includes only from such code, and files under test, benchmark, demo or
    example paths, and the sources of a PyTorch extension only scripts use (see GPU802). The
    other functions of a file that defines `main` are checked: library code beside a self-test
    `main` that never calls it (benchmark drivers and tutorial exercises, whose helpers `main`
    calls, stay left alone); and
    a `cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, n)` where `n` is a
    compile-time constant of at most 48 KB (the default limit: the call changes nothing), or
    where a launch of `k` follows on its path and that launch is checked, after it or by every
    caller of its function (as GPU802 judges it): without the attribute the launch fails, and
    that failure is reported;
    calls in a function whose job is to compare results with a reference
    (`check_correctness`, `verify_output`, `compare_*`), where a failed copy shows as a
    mismatch; debugging helpers (`print_*`, `dump_*`, `debug_*` functions); and debug-only
    code (the first branch of `#if DEBUG_GUARDS`, `#ifdef MY_DEBUG`, `#ifndef NDEBUG`), a
    diagnostic aid rather than the product.

    Also a bare `cudaGetLastError();` (its result dropped) after a kernel launch, or after a
    dropped call of these kinds that a later check of the last error would have reported, on
    its straight-line path in the same function with nothing reading a status in between: it
    reads the failure, resets the error state to `cudaSuccess` and drops it, so the failure
    goes unreported and a check after it sees success. Left alone: a clear after a status the
    code has read (`if (err != cudaSuccess) { cudaGetLastError(); throw ...; }`), at the top of
    a function, right after a call allowed to fail (`cudaHostRegister(...);
    cudaGetLastError();`), a reset a comment on its line says is meant (`// reset`), and in
    the programs and harness code left alone above (a benchmark timing the call this way).

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
    VALID.append(
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
"""
    )
    VALID.append(
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
"""
    )
    VALID.append(
        """
void print_device_rows(const float* d, int rows, int cols) {
  float* h = (float*)malloc(rows * cols * sizeof(float));
  cudaMemcpy(h, d, rows * cols * sizeof(float), cudaMemcpyDeviceToHost);
  for (int r = 0; r < rows; ++r) printf("%d: %f\\n", r, h[r * cols]);
  free(h);
}
"""
    )
    VALID.append(
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
void small(const float* x, float* y) {
  cudaFuncSetAttribute(norm<8>, cudaFuncAttributeMaxDynamicSharedMemorySize, 24 * 1024);
}
"""
    )
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
        name, grade = found
        if name == "cudaFuncSetAttribute" and attribute_needs_no_check(
            file, node, tuple(self.settings.option("cuda", "check-macros", []))
        ):
            return  # a no-op (<= 48 KB), or the launch that needs it is checked
        house = unchecked_by_convention(file, name) if grade == "corrupting" else None
        if grade == "corrupting":
            if file.is_driver or file.run_by_main(node) or file.is_harness_header:
                return  # a test, benchmark or demo program: a failure shows when it runs
            if file.display_path.replace("\\", "/") in file.project.harness:
                return  # an extension only scripts use: the benchmark run shows a failure
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

    def _swallowing_clear(self, file: CudaFile, node: Node) -> Iterator[Finding]:
        """A bare `cudaGetLastError();` after launches or dropped runtime calls whose failure
        nothing read: it reads that failure, resets the state and drops it."""
        if file.is_driver or file.run_by_main(node) or file.is_harness_header:
            return  # a test, benchmark or demo program (a benchmark times the call this way)
        if file.display_path.replace("\\", "/") in file.project.harness:
            return
        found = swallowed(file, node)
        if found is None:
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
