import re

from gpulint.diagnostics import Severity
from gpulint.frontends import MemoKey
from gpulint.frontends.cuda.callgraph import functor_key
from gpulint.frontends.cuda.checkspelling import launch_check_for
from gpulint.frontends.cuda.conventions import launch_checked_in
from gpulint.frontends.cuda.file import CudaFile
from gpulint.frontends.cuda.launchconfig import fixed_safe_config
from gpulint.frontends.cuda.sharedmem import runtime_shared_memory
from gpulint.frontends.cuda.syntax import function_name
from gpulint.rule import Exemption, Rule
from gpulint.rules._cuda_conventions import checks_launches

_RUNTIME_CALL = re.compile(r"\bcuda[A-Z]\w*\s*\(")


class UncheckedKernelLaunch(Rule):
    """
    ## What it does
    Finds a kernel launch `kernel<<<...>>>(...)` with no launch error check after it in the same
    function: `cudaGetLastError()`, `cudaPeekAtLastError()`, `C10_CUDA_KERNEL_LAUNCH_CHECK()`,
    `getLastCudaError(...)`, or a check macro (`CUDA_CHECK`, `checkCudaErrors`, `AT_CUDA_CHECK`,
    `C10_CUDA_CHECK`, project spellings such as `CUDA_CHECK_ERROR`/`CHECK_CUDA`, and the names in
    `[tool.gpulint.cuda] check-macros`). A check anywhere later in the function counts, including
    after the loop or the dispatch macro around the launch. Launches written in `#define`
    bodies are parsed too.

    A *launcher* (a host function other than `main` that computes a grid and launches, with no
    CUDA runtime call of its own, or a launching macro) may leave the check to its caller: the
    rule then looks up every call of it in the checked tree (other files too) and fires only
    when a caller does not check after the call, naming that caller. A caller that does not
    check is followed up to its own callers (five levels); the message names the one up the
    chain after which nothing checks, and the function it calls there; a method (`Layer<T>::forward`) through
    the calls known to reach its class (`layer_->forward(...)` in a file that sets
    `layer_ = new Layer<T>(...)` or declares `Layer<T>* layer_`, or a class deriving from or
    derived from it). A caller is checked too when, after the call on its path (a later
    statement of a block holding the call, not inside a branch of its own; loops accepted),
    it calls a function of the project that reads the last error (`ffn_->forward(...)` whose
    body runs the project's `sync_check()`): that read reports the failed launch as well.
    Not counted as callers: a call
    that cannot run (after `return`, `throw` or an assertion of `false` in its block) and a
    size query (a null pointer passed where the function returns before launching when it is
    null: `invokeTopk(nullptr, ws_size, ...)` asking for its workspace size). A function that also
    allocates or copies, or any function of a PyTorch extension (PyTorch checks after every
    launch), fires unless callers are found and every one of them checks (the message then
    names the one that does not). Callers are found across translation units: a launcher
    template in a header called as `launch<float, 256>(...)` (template arguments holding
    parentheses too), from inside a dispatch lambda, or handed a device lambda
    (`parallel_for(n, s, [=] __device__ (int i) {...})`), and a functor's `operator()` through
    the calls of objects declared of its class in any file (`functor::PoolFunctor<float>
    ftor;` then `ftor(stream, out, in, n)`). Calls from tests,
    benchmarks, demos and examples (by their path) or from a `main` are not the library's use: a
    launcher is judged by its library callers.

    Only where the code base checks its launches: at least 15% of its library launches (tests
    and standalone programs left out) are checked, on their path or by every caller, and
    not all in one file beside files that check none and launch more (that file's style,
    often vendored), or it has fewer than 5 launches (too few to show a house style); the
    message says how many. A launch checked only by a check compiled into debug builds (its
    read of the last error under `#ifndef NDEBUG`, `#ifdef DEBUG`..., or in an `if` on an
    environment variable read by `getenv`, and the macros calling it) is covered, but does not
    count as checked for the convention: a project that checks its launches only in debug
    builds has no release convention. In a code
    base that checks none, or a stray few, the same findings are GPU812, off by default:
    there an unchecked launch is the house style, not a slip.

    A launch whose dynamic shared memory can fail by configuration is GPU802 in every
    project, with a convention or not (the message says why): a size computed at run time
    (`smem_sz` from the sequence length, `n * sizeof(T)`), or a known size above the 48 KB a
    block gets by default. Not such: a known size within 48 KB, a compile-time expression
    (`sizeof(T) * BLOCK`, a template's constants, a local initialised only from those), a
    size handed in as a parameter (a generic launch helper: the caller's choice), and the
    block's threads times a small per-thread size (`block.x * sizeof(float)`).

    A launch written over lines (`k<T, BLOCK>` above `<<<grid, block, 0, stream>>>(...)`) is
    reported at its `<<<`, spanning the launch; a `noqa` on the kernel's name covers it too.

    The suggested check is the one the file already writes after its launches, else the one
    the other files of its folder write (a stable-ABI extension's
    `STD_CUDA_KERNEL_LAUNCH_CHECK();`), else `C10_CUDA_KERNEL_LAUNCH_CHECK();` in a PyTorch
    extension, the file's own check macro around `cudaGetLastError()`, or plain C++.

    ## Why is this bad?
    A launch returns nothing. A bad configuration (too many threads, too much shared memory, a
    missing kernel image for this GPU) makes the launch fail silently: the kernel never runs, the
    output buffer keeps stale values, and the error surfaces later in an unrelated call, or never.

    ## Example
    ```cuda
    add_kernel<<<blocks, 256, 0, stream>>>(out, a, b, n);
    return out;
    ```

    ## Use instead
    ```cuda
    add_kernel<<<blocks, 256, 0, stream>>>(out, a, b, n);
    C10_CUDA_KERNEL_LAUNCH_CHECK();  // or CUDA_CHECK(cudaGetLastError());
    return out;
    ```

    ## Known problems
    A launcher none of whose callers is in the checked tree (called from Python through a
    binding, or through a table of function pointers) is not reported: the call that should
    check is out of sight. Callers are followed five levels up, and a method only through the
    calls known to reach its class; a launch checked further up, or through an object the
    rule cannot type, is reported at the last caller it sees.

    ## References
    - [CUDA C++ Programming Guide: error checking](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#error-checking)
    - [CUDA Runtime API: cudaGetLastError](https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__ERROR.html)
    """

    code = "GPU802"
    severity = Severity.ERROR  # an unnoticed failed launch is wrong on every run
    name = "unchecked-kernel-launch"
    language = "cuda"
    triggers = ("<<<",)
    message = (
        "kernel launch is not checked{convention}: a failed launch goes unnoticed; add `{check}` "
        "after it"
    )
    by_caller = (
        "kernel launch is not checked, nor by {caller} ({where}) that calls {kind} `{function}`"
        "{convention}: a failed launch goes unnoticed; add `{check}` after the launch (or after "
        "that call)"
    )
    # GPU812 (opt-in) takes the launches of a project that checks none (or a stray few)
    wants_convention = True
    tags = ("correctness", "launch")

    EXEMPTIONS = (
        Exemption(
            "device-side-launch",
            "A launch from device code (dynamic parallelism): its errors are read on the "
            "device, if at all, and a host-side check cannot see them.",
            """
__global__ void child(float* x) {}
__global__ void parent(float* x, int n) {
  child<<<(n + 127) / 128, 128>>>(x);
}
""",
        ),
        Exemption(
            "fixed-safe-config",
            "A configuration fixed at compile time that no device rejects (`<<<1, 1>>>`, "
            "`<<<NUM_BLOCKS, dim3(32, 4)>>>` with known values: every dim within its limit, at "
            "most 256 threads a block, which fits the register file whatever the kernel uses, "
            "and no dynamic shared memory): no input can make it fail.",
            fixture="cuda/gpu802_silent_fixed_safe_config.cu",
        ),
        Exemption(
            "fixed-before-checked-launch",
            "A configuration fixed at compile time (`<<<1, 1>>>`, `<<<Cfg::NUM_BLOCKS, "
            "NUM_THREADS>>>`) followed in the same function by a checked launch (its own check, "
            "or a call of a project function that launches and checks): a fixed configuration "
            "cannot be wrong for some inputs only, and what can still fail (no kernel image for "
            "this GPU) fails the checked launch too.",
            """
#include <torch/extension.h>
__global__ void zero_scale(float* s) {}
__global__ void quantize(float* x, float* s) {}
template <typename Cfg>
void launch_checked(float* x, float* s) {
  CUDA_CHECK(cudaLaunchKernel((void*)quantize, dim3(Cfg::BLOCKS), dim3(256), nullptr, 0, 0));
}
void quantize_op(float* x, float* s) {
  zero_scale<<<1, 1024>>>(s);  // fixed configuration; the checked launch below fails likewise
  launch_checked<QuantCfg>(x, s);
}
""",
        ),
        Exemption(
            "functor-checked-by-users",
            "A launch in a method of a functor or launcher class whose every use in the file "
            "(`Dispatch<KnnFunctor, T>(...)`) is followed by a check in the using function.",
            """
#include <torch/extension.h>
__global__ void gather(const float* p, float* out, int n) {}
template <typename T, int K>
struct GatherFunctor {
  static void run(int blocks, int threads, const T* p, T* out, int n) {
    gather<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(p, out, n);
  }
};
at::Tensor gather_op(const at::Tensor& p, int k) {
  auto out = at::empty_like(p);
  DispatchOnK<GatherFunctor, float>(k, 64, 256, p.data_ptr<float>(), out.data_ptr<float>(), 4);
  AT_CUDA_CHECK(cudaGetLastError());
  return out;
}
""",
        ),
        Exemption(
            "launcher-name-shared",
            "A launcher whose name other functions share (overloads that do not all launch): "
            "its calls cannot be matched to it by name, so its callers are not judged.",
            """
__global__ void k(float* x) {}
void fill(float* x, int n) { k<<<(n + 127) / 128, 128>>>(x); }
void fill(double* x, int n) {}
void step(float* x, int n) { fill(x, n); }
""",
        ),
        Exemption(
            "standalone-program",
            "What a standalone program runs: `main`, the `#if` branch holding `main` beside "
            "library code, the functions of the file only it calls (two levels down), headers "
            "only programs include, a "
            "file that `#include`s a driver source defining `main` (a tutorial step's "
            '`#include "launch.cu"`). Demos and benchmark drivers print what they measured, '
            "and whether to check is their author's choice, not a hot-path bug. A function "
            "beside a self-test `main` that `main` never calls is library code, judged as any "
            "other.",
            """
__global__ void k(float* x) {}
int main(int argc, char** argv) {  // a demo program: left to its author
  float* x;
  int n = atoi(argv[1]);
  k<<<(n + 127) / 128, 128>>>(x);
  return 0;
}
""",
        ),
        Exemption(
            "test-code",
            "Test code (a file under a test path: tests and their helpers): a failed launch "
            "fails or skews the test.",
            """
__global__ void k(float* x) {}
void run_case(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
}
""",
            filename="tests/test_kernels.cu",
        ),
        Exemption(
            "script-only-extension",
            "The sources of a PyTorch extension whose every Python user in the checked tree is "
            "a script (a `__main__` guard, or argparse, a loop or a print at module level outside "
            "any package, or a test, benchmark or example path), none a package's module; users "
            "are the files that `cpp_extension.load(...)` the source and those importing the "
            "module a `setup.py` beside it (or up to three folders above) names in "
            "`CUDAExtension(...)`. Their one caller is a benchmark or experiment that compares "
            "the outputs itself.",
            files=(
                (
                    "csrc/relu.cu",
                    """#include <torch/extension.h>
__global__ void relu_kernel(float* x, int n) {}
void relu(torch::Tensor x) {
  int n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
}
""",
                ),
                (
                    "bench_relu.py",
                    """import torch
from torch.utils.cpp_extension import load

toy_relu = load(name="toy_relu", sources=["csrc/relu.cu"])
if __name__ == "__main__":
    x = torch.randn(1 << 20, device="cuda")
    toy_relu.relu(x)
    print(torch.allclose(x, x.clamp(min=0)))
""",
                ),
            ),
        ),
    )

    VALID = [
        """
__global__ void k(float* x) {}
// A launcher: grid arithmetic and a launch; the caller checks.
void launch_k(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
}
void step(float* x, int n, cudaStream_t s) {
  launch_k(x, n, s);
  CUDA_CHECK(cudaGetLastError());
}
""",
        """
__global__ void k(float* x) {}
void run(float* x, cudaStream_t s) {
  k<<<1, 128, 0, s>>>(x);
  CUDA_CHECK(cudaGetLastError());
}
""",
        """
#include <torch/extension.h>
__global__ void k(float* x) {}
void run(float* x) {
  for (int i = 0; i < 4; ++i) {
    k<<<1, 128, 0, at::cuda::getCurrentCUDAStream()>>>(x);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
""",
    ]
    INVALID = [
        """
#include <torch/extension.h>
__global__ void scale(float* x, int n) {}
__global__ void quantize(float* x) {}
template <typename Cfg>
void launch_checked(float* x) {
  CUDA_CHECK(cudaLaunchKernel((void*)quantize, dim3(Cfg::BLOCKS), dim3(256), nullptr, 0, 0));
}
void prescale(float* x, int n) {
  scale<<<(n + 255) / 256, 256>>>(x, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();  // the project checks its launches
}
void op(float* x, int n) {
  scale<<<(n + 255) / 256, 256>>>(x, n);  // sized by the input: the later launch says nothing
  launch_checked<QuantCfg>(x);
}
""",
        """
#include <torch/extension.h>
__global__ void gather(const float* p, float* out, int n) {}
struct GatherFunctor {
  static void run(int blocks, const float* p, float* out, int n) {
    gather<<<blocks, 256, 0, at::cuda::getCurrentCUDAStream()>>>(p, out, n);
  }
};
void gather_one(const float* p, float* out, int n) {
  gather<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(p, out, n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();  // the project checks its launches
}
void gather_checked(const float* p, float* out, int n) {
  Dispatch<GatherFunctor>(n, p, out, n);
  AT_CUDA_CHECK(cudaGetLastError());
}
void gather_fast(const float* p, float* out, int n) {
  Dispatch<GatherFunctor>(n, p, out, n);  // this use is not checked
}
""",
        """
__global__ void k(float* x) {}
void launch_k(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
}
void warm(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
  CUDA_CHECK(cudaGetLastError());  // the project checks its launches
}
void step(float* x, int n, cudaStream_t s) {
  launch_k(x, n, s);  // no check here either
}
""",
        """
#define LAUNCH_K(x, n, s) k<<<(n) / 128, 128, 0, s>>>(x)
__global__ void k(float* x) {}
void warm(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
  CUDA_CHECK(cudaGetLastError());  // the project checks its launches
}
void step(float* x, int n, cudaStream_t s) { LAUNCH_K(x, n, s); }
""",
        """
__global__ void k(float* x) {}
void warm(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
  CUDA_CHECK(cudaGetLastError());  // the project checks its launches
}
void run(float* x, int n, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(x, 0, 512, s));
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
}
""",
        """
__global__ void k(float* x) {}
void warm(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
  CUDA_CHECK(cudaGetLastError());  // the project checks its launches
}
void run_wide(float* x, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(x, 0, 4096, s));
  k<<<1, 1024, 0, s>>>(x);  // fixed, but 1024 threads can run out of registers
}
""",
    ]

    INVALID.append(
        """
__global__ void attend(float* out, const float* q, int seq_len) {}
// a project that checks none of its launches, but this one's shared memory grows with the input
void attention(float* out, const float* q, int heads, int seq_len, cudaStream_t s) {
  size_t smem = seq_len * sizeof(float);
  attend<<<heads, 128, smem, s>>>(out, q, seq_len);
}
void forward(float* out, const float* q, int heads, int seq_len, cudaStream_t s) {
  attention(out, q, heads, seq_len, s);
}
"""
    )

    def visit_call_expression(self, node, file: CudaFile):
        if file.launch_config(node) is None:
            return
        # A launch whose dynamic shared memory is sized at run time or past the default 48 KB
        # can fail for some inputs or GPUs: GPU802 in every project.
        smem = runtime_shared_memory(file, node)
        convention = checks_launches(file.project)
        if (convention or smem is not None) != self.wants_convention:
            return  # the other code's: GPU802 where the project checks launches, else GPU812
        function = file.enclosing_function(node)
        if self.exempt(
            "device-side-launch", function is not None and file.is_device_function(function)
        ):
            return
        if self.exempt("fixed-safe-config", fixed_safe_config(file, node)):
            return
        configured = tuple(self.settings.option("cuda", "check-macros", []))
        scope = function or file.root
        if launch_checked_in(file, node, scope, configured):
            return
        if self.exempt(
            "fixed-before-checked-launch",
            function is not None and _fixed_before_checked_launch(file, node, function),
        ):
            return
        if self.exempt(
            "functor-checked-by-users",
            function is not None and _functor_checked_by_users(file, function, configured),
        ):
            return
        if self.exempt("standalone-program", file.run_by_main(node) or file.is_harness_header):
            return
        if self.exempt("test-code", file.is_test):
            return
        path = file.display_path.replace("\\", "/")
        if self.exempt("script-only-extension", path in file.project.harness):
            return
        check = launch_check_for(file)
        checked, total = file.project.launches_checked, file.project.launches_total
        debug = file.project.launches_debug_checked
        counts = {
            "checked": checked,
            "total": total,
            # launches checked only by checks compiled into debug builds (GPU812's wording)
            "debug": f" in a release build (it checks {debug} more only in debug builds)"
            if debug
            else "",
            # (a project of a few launches shows no convention either way: not quoted)
            "convention": f", while this project checks {checked} of its {total} launches"
            if total >= 5 and convention
            else "",
        }
        if smem is not None and not convention:
            # (a project without a convention: why this one launch still matters)
            counts["convention"] = (
                f", and its dynamic shared memory ({smem}) is "
                + ("sized at run time" if smem.startswith("`") else "above the default 48 KB")
                + " (more than the device allows fails it)"
            )
        if function is None:
            yield self.report(file, file.launch_span(node), check=check, **counts)
            return
        # (a functor's `operator()` goes by its class: `Cls::operator()`, as its callers do)
        name = functor_key(file, function) or function_name(file, function)
        in_macro = file.macro_name(function) is not None
        body = file.node_text(function)
        if not in_macro and (
            name == "main" or file.is_torch_extension or _RUNTIME_CALL.search(body)
        ):
            # PyTorch checks after every launch; and a function that allocates, copies and
            # launches is where the check belongs, unless every caller of it checks.
            known = name in file.project.launchers  # matched to its callers by name
            chain = file.project.unchecked_chain(name) if known and name != "main" else None
            if not chain:
                if name == "main" or not known or not file.project.callers(name):
                    yield self.report(file, file.launch_span(node), check=check, **counts)
                return
            # (an op helper whose callers are found: the message names the one that does not
            # check, as for a launcher)
        else:
            # A launcher (grid arithmetic and a launch, or a macro): its callers must check. A
            # method, or a name other functions share, cannot be matched to its callers: left
            # alone.
            known = name in file.project.launchers
            if self.exempt("launcher-name-shared", not known):
                return
            # A macro of a source file is expanded only in that file (a header's is shared).
            local = in_macro and not file.display_path.endswith((".h", ".cuh", ".hpp", ".hh"))
            own = file.display_path if local else None
            chain = file.project.unchecked_chain(name, path=own)
            if not chain:
                return
        # (named: the caller up the chain after which nothing checks, with what it calls)
        site = chain[-1]
        if len(chain) > 1:
            in_macro, name = False, chain[-2].caller
        where = (
            f"line {site.line}" if site.path == file.display_path else f"{site.path}:{site.line}"
        )
        caller = f"`{site.caller}`" if site.caller else "file-scope code"
        yield self.report(
            file,
            file.launch_span(node),
            self.by_caller,
            check=check,
            caller=caller,
            where=where,
            kind="macro" if in_macro else "function",
            function=name,
            **counts,
        )


_FUNCTOR_CHECKED: MemoKey[dict[tuple, bool]] = MemoKey("gpu802.functor_checked")

# A compile-time constant in a launch configuration: a literal, an ALL_CAPS name, `Cfg::NAME`.
_CONSTANT_CONFIG = re.compile(
    r"^(?:\s|\d+[uUlL]*|[-+*/%()]|(?:[A-Za-z_]\w*::)*[A-Z][A-Z0-9_]*\b|dim3\b|,)*$"
)
_LATER_CALL = re.compile(rb"\b([A-Za-z_]\w*)\s*(?:<[^;{}]*>)?\s*\(")


def _fixed_before_checked_launch(file: CudaFile, node, function) -> bool:
    """`node` has a compile-time configuration and a checked launch follows it in `function`:
    a `cudaLaunch*` call inside a check, or a call to a project function whose own launch is
    checked (`launch_kernel<Cfg, G, k>(g)` ending in `CUDACHECK(cudaLaunchKernelEx(...))`)."""
    config = file.launch_config(node)
    if not config or len(config) < 2:
        return False
    for part in config[:2]:
        if file.consts.threads(part, node) is None and not _CONSTANT_CONFIG.match(
            file.node_text(part)
        ):
            return False
    checked = set(file.project.checked_launching)
    from gpulint.frontends.cuda.lasterror import launch_helpers

    checked |= launch_helpers(file)[1]
    rest = file.data[node.end_byte : function.end_byte]
    for m in _LATER_CALL.finditer(rest):
        name = m.group(1).decode("ascii", "replace")
        if name in checked:
            return True
    return bool(re.search(rb"\b[A-Za-z_]*(?i:check)\w*\s*\(\s*cudaLaunch", rest))


def _functor_checked_by_users(file: CudaFile, function, configured) -> bool:
    """`function` is a method of a class (a functor handed to a dispatch template) whose every
    mention in the file outside its own body sits in a function that checks after it."""

    body = next((a for a in file.ancestors(function) if a.type == "field_declaration_list"), None)
    if body is None or body.parent is None:
        return False
    name_node = body.parent.child_by_field_name("name")
    if name_node is None:
        return False
    owner = body.parent
    memo = file.memo.get(_FUNCTOR_CHECKED, dict)
    key = (owner.start_byte, tuple(configured))
    if key not in memo:  # once per class, not once per launch in its methods
        memo[key] = _class_uses_checked(file, owner, file.node_text(name_node).encode(), configured)
    return memo[key]


def _class_uses_checked(file: CudaFile, owner, name: bytes, configured) -> bool:
    from gpulint.frontends.cuda.conventions import last_check_end

    seen = 0
    for m in re.finditer(rb"\b" + re.escape(name) + rb"\b", file.data):
        if owner.start_byte <= m.start() < owner.end_byte:
            continue
        at = file.root.descendant_for_byte_range(m.start(), m.end())
        user = file.enclosing_function(at) if at is not None else None
        if user is None or file.is_device_function(user):
            return False  # a declaration elsewhere, or a use the rule cannot follow
        if last_check_end(file, user, configured) <= m.end():
            return False
        seen += 1
    return seen > 0
