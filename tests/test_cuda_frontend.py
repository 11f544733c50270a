"""The CUDA/C++ front-end: positions, suppression, configuration, broken input, cost."""

from __future__ import annotations

import random
from pathlib import Path

from gpulint.config import load_config
from gpulint.engine import Linter
from gpulint.frontends.cuda import FRONTEND
from gpulint.frontends.cuda.syntax import function_name
from gpulint.registry import frontend_for
from gpulint.settings import Settings
from gpulint.source import is_driver_path
from gpulint.testing import example_config, lint_text


def parse(text: str):
    return FRONTEND.parse("x.cu", text.encode(), Settings())


LAUNCH = """
__global__ void k(float* x) {}
void run(float* x, int n, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(x, 0, 512, s));
  k<<<n / 128, 128, 0, s>>>(x);
}
"""


def codes(findings):
    return sorted(f.code for f in findings)


def test_extensions_are_claimed():
    for name in ("a.cu", "a.cuh", "a.cpp", "a.cc", "a.cxx", "a.h", "a.hpp"):
        assert frontend_for(name) is FRONTEND


def test_columns_are_code_points_not_bytes():
    text = 'void f() { const char* s = "ééé"; cudaMemset(0, 0, 4); }\n'
    [finding] = [f for f in lint_text(text, "x.cu") if f.code == "GPU803"]
    assert finding.col == text.index("cudaMemset") + 1
    assert finding.end_col == text.index(";", text.index("cudaMemset")) + 1


def test_noqa_with_slashes():
    text = LAUNCH.replace("(x);\n}", "(x);  // noqa: GPU802\n}")
    assert "GPU802" not in codes(lint_text(text, "x.cu"))
    blanket = LAUNCH.replace("(x);\n}", "(x);  // noqa\n}")
    assert codes(lint_text(blanket, "x.cu")) == []


def test_configured_check_macro():
    text = LAUNCH.replace("(x);\n}", "(x);\n  MY_LAUNCH_GUARD();\n}")
    assert "GPU802" in codes(lint_text(text, "x.cu"))
    assert "GPU802" not in codes(
        lint_text(text, "x.cu", options={"cuda": {"check-macros": ["MY_LAUNCH_GUARD"]}})
    )


def test_configured_check_macro_wraps_runtime_calls():
    text = "void f(void* p) { MY_WRAP(cudaMemset(p, 0, 4)); cudaMemset(p, 0, 4); }\n"
    found = [f for f in lint_text(text, "x.cu") if f.code == "GPU803"]
    assert len(found) == 1


def test_plain_cpp_is_never_parsed():
    linter = Linter(example_config())
    findings, parsed = linter.lint_bytes("util.h", b"#pragma once\nint add(int a, int b);\n")
    assert (findings, parsed) == ([], False)
    _, parsed = linter.lint_bytes("k.cu", LAUNCH.encode())
    assert parsed


def test_broken_region_is_skipped_and_the_rest_still_judged():
    text = """
__global__ void k(float* x) {}
void broken(float* x) {
  k<<<1, 100>>>(x)  ))) }}} template <<< ;
}
void fine(float* x) {
  cudaMallocManaged(&x, 4);
}
"""
    found = lint_text(text, "x.cu")
    assert "GPU000" not in codes(found)
    assert "GPU807" in codes(found)
    # The skipped region is said, once, with its size: never silence.
    [notice] = [f for f in found if f.code == "GPU800"]
    assert notice.line == 3 and notice.message.startswith("3 lines not analysed")
    assert all(f.line >= 6 for f in found if f.code != "GPU800")


def test_dispatch_lambda_without_semicolon_is_judged():
    # `AT_DISPATCH_...(..., [&] { k<<<...>>>(...) })` written without `;`: the launch is
    # understood (a missing `;` is not a broken statement) and judged.
    text = """
#include <torch/extension.h>
__global__ void k(float* x) {}
void run(torch::Tensor x) {
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "run", [&] {
    k<<<x.numel() / 100, 100, 0, at::cuda::getCurrentCUDAStream()>>>(x.data_ptr<float>())
  })
}
"""
    found = {(f.line, f.code) for f in lint_text(text, "x.cu")}
    assert (6, "GPU801") in found and (6, "GPU802") in found
    assert not any(code == "GPU800" for _, code in found)


def test_garbage_never_raises():
    rng = random.Random(0)
    pieces = [
        "<<<",
        ">>>",
        "{",
        "}",
        "(",
        ")",
        "#define X",
        "__syncthreads();",
        "cudaMalloc(",
        "dim3 b(",
        "template<",
        "__shared__ float s[",
        "]",
        ";",
        "if (threadIdx.x",
        "\n",
        "é",
        "\\",
        '"',
    ]
    for _ in range(200):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 60)))
        lint_text(text, "x.cu")  # an internal error (GPU001) fails inside lint_text


def test_undecodable_bytes_are_not_fatal():
    data = b"// caf\xe9 comment\nvoid f(void* p) { cudaMemset(p, 0, 4); }\n"
    linter = Linter(example_config())
    findings, _ = linter.lint_bytes("x.cu", data)
    assert codes(findings) == ["GPU803"]


def test_binary_file_is_reported_not_crashed():
    linter = Linter(example_config())
    findings, _ = linter.lint_bytes("x.cu", b"\x00\x01<<<cuda\x00" * 10)
    assert codes(findings) == ["GPU000"]


def test_launch_config_evaluation():
    f = FRONTEND.parse(
        "x.cu",
        b"""
#define BLOCK 256
#define HALF (BLOCK / 2 + 1)
constexpr int kThreads = 128;
enum { kE = 64 };
__global__ void k(float* x) {}
template <int B>
void f(float* x, int t) {
  dim3 block(16, 16);
  const int threads = kThreads * 2;
  int changed = 32; changed = 64;
  k<<<1, BLOCK>>>(x);
  k<<<1, block>>>(x);
  k<<<1, dim3(32, 4)>>>(x);
  k<<<1, HALF>>>(x);
  k<<<1, threads>>>(x);
  k<<<1, changed>>>(x);
  k<<<1, t>>>(x);
  k<<<1, B>>>(x);
  k<<<1, kE>>>(x);
  k<<<1, std::min(1024, 2048)>>>(x);
}
""",
        Settings(),
    )
    launches = [c for c in f.nodes("call_expression") if f.launch_config(c)]
    got = [f.consts.threads(f.launch_config(c)[1], c) for c in launches]
    assert got == [256, 256, 128, 129, 256, None, None, None, 64, 1024]


def test_cli_exit_code_and_json(tmp_path: Path):
    import json
    import subprocess
    import sys

    (tmp_path / "k.cu").write_text(LAUNCH)
    run = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", "--format", "json", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert run.returncode == 1, run.stderr
    assert [f["code"] for f in json.loads(run.stdout)["findings"]] == ["GPU802"]


def test_config_reads_check_macros(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.gpulint.cuda]\ncheck-macros = ["GUARD"]\n')
    config = load_config(tmp_path)
    assert config.options["cuda"]["check-macros"] == ["GUARD"]
    (tmp_path / "k.cu").write_text(LAUNCH.replace("(x);\n}", "(x);\n  GUARD();\n}"))
    report = Linter(config).run([tmp_path / "k.cu"])
    assert report.findings == []


def test_captures_mix_common_and_other_node_types():
    f = FRONTEND.parse("x.cu", b"void f(int a) { if (a) { g(); } h(); }\n", Settings())
    found = f.captures("if_statement", "call_expression")
    assert [n.type for n in found["if_statement"]] == ["if_statement"]
    assert [f.node_text(n) for n in found["call_expression"]] == ["g()", "h()"]
    assert f.nodes("preproc_include") == []


def test_rewrites_keep_offsets_and_mark_device_code():
    from gpulint.frontends.cuda import mask_attributes

    data = b'struct __align__(16) S {\n  CUTLASS_DEVICE void f() { printf("x"); }\n};\n'
    masked = mask_attributes(data)
    assert len(masked) == len(data) and masked.count(b"\n") == data.count(b"\n")
    found = lint_text(data.decode(), "x.cuh")
    assert [(f.code, f.line, f.col) for f in found] == [("GPU809", 2, 29)]


def test_dead_preprocessor_branches_are_blanked_in_place():
    from gpulint.frontends.cuda import mask_dead_code

    src = (
        b'#if 0\nprintf("a");\n#ifdef X\nnested();\n#endif\n#else\nlive();\n#endif\n'
        b"#if 1\nkept();\n#else\ndropped();\n#endif\n#ifdef Y\nunknown();\n#endif\n"
        b"#if 0\n// caf\xc3\xa9\n#elif FOO\nelif_live();\n#endif\n"
    )
    out = mask_dead_code(src)
    assert len(out) == len(src) and out.count(b"\n") == src.count(b"\n")
    for gone in (b"printf", b"nested", b"dropped", b"caf"):
        assert gone not in out
    for kept in (b"live();", b"kept();", b"unknown();", b"elif_live();", b"\xc3\xa9", b"#else"):
        assert kept in out


def test_test_paths_are_recognised_the_same_way_in_every_language():
    from gpulint.source import is_test_path

    for path in (
        "kernels/attention/mha/test.py",
        "kernels/gemm/tests.cu",
        "pkg/test_ops.py",
        "pkg/ops_test.cu",
        "conftest.py",
        "repo/tests/helpers.cuh",
        "repo/unit_tests/x.py",
    ):
        assert is_test_path(path), path
    for path in ("train.py", "kernels/attest.cu", "contest.py", "testing_utils.py", "latest.py"):
        assert not is_test_path(path), path


def test_driver_paths_are_tests_benchmarks_demos_and_examples():
    for path in (
        "repo/tests/helpers.cuh",
        "repo/benchmarks/gemm.cu",
        "repo/bench/util.h",
        "repo/examples/01_basic/main.cu",
        "repo/samples/x.cpp",
        "repo/demos/relu.cu",
        "repo/kernels/bench_gemm.cu",
        "repo/kernels/gemm_benchmark.cu",
        "repo/demo.cu",
    ):
        assert is_driver_path(path), path
    for path in ("csrc/gemm.cu", "kernels/benchmark_utils_lib/x.cu", "ops/exemplar.cu"):
        assert not is_driver_path(path), path


def test_program_ranges_are_the_file_or_the_branch_holding_main():
    guarded = (
        "void lib() {}\n#ifdef RUN_MAIN\nvoid h() {}\nint main() { h(); }\n#else\n"
        "void bind() { lib(); }\n#endif\n"
    )
    file = parse(guarded)
    fns = {function_name(file, f): f for f in file.nodes("function_definition")}
    assert file.in_program(fns["main"]) and file.in_program(fns["h"])
    assert not file.in_program(fns["lib"]) and not file.in_program(fns["bind"])
    plain = parse("void lib() {}\nint main() { lib(); }\n")
    assert plain.program_ranges == [(0, len(plain.data))]
    assert parse("void lib() {}\n").program_ranges == []


def test_a_broken_line_in_a_header_guard_does_not_take_the_whole_header():
    text = "#ifndef G_H\n#define G_H\nvoid ok(float* d) { cudaMemset(d, 0, 4); }\nDEVICE T\nF(const T& x) { return x; }\n#endif\n"
    file = parse(text)
    assert file.lines_not_analysed and 3 not in file.lines_not_analysed


def test_gpu803_suggests_the_check_the_file_already_uses():
    text = (
        "#include <cuda_runtime.h>\n"
        "void upload() {\n"
        "  float* d;\n"
        "  cudaCheck(cudaMalloc(&d, 1024));\n"
        "  cudaCheck(cudaMemset(d, 0, 1024));\n"
        "  cudaMemcpy(d, d, 4, cudaMemcpyDeviceToDevice);\n"
        "  cudaFree(d);\n"
        "}\n"
    )
    [finding] = [f for f in lint_text(text, "x.cu") if f.code == "GPU803"]
    assert finding.message.endswith("`cudaCheck(cudaMemcpy(d, d, 4, cudaMemcpyDeviceToDevice));`")
    bare = text.replace("cudaCheck(cudaMalloc(&d, 1024));", "").replace(
        "cudaCheck(cudaMemset(d, 0, 1024));", ""
    )
    # No check of its own: a plain check that compiles anywhere, not a macro it may lack.
    [finding] = [f for f in lint_text(bare, "x.cu") if f.code == "GPU803"]
    assert "`if (cudaMemcpy(d, d, 4, cudaMemcpyDeviceToDevice) != cudaSuccess)" in finding.message
    # The end of `main` is teardown: the free is not reported, even opt-in.
    program = text.replace("void upload() {", "int main() {")
    assert "GPU811" not in codes(lint_text(program, "x.cu"))


def test_gpu802_suggests_the_check_the_file_already_uses():
    text = (
        "#include <cuda_runtime.h>\n"
        "__global__ void k(float* x) { x[threadIdx.x] = 0; }\n"
        "int setup(int n) {\n"
        "  float* d;\n"
        "  gpuErrchk(cudaMalloc(&d, 1024));\n"
        "  k<<<n, 32>>>(d);\n"
        "  gpuErrchk(cudaDeviceSynchronize());\n"
        "  return 0;\n"
        "}\n"
    )
    [finding] = [f for f in lint_text(text, "x.cu") if f.code == "GPU802"]
    assert "add `gpuErrchk(cudaGetLastError());` after it" in finding.message


LAUNCHER_CU = """
__global__ void k(float* x) {}
void launch_k(float* x, int n, cudaStream_t s) {
  k<<<(n + 127) / 128, 128, 0, s>>>(x);
}
"""


def _run_tree(tmp_path, caller_body, cache=None):
    (tmp_path / "ops.cu").write_text(LAUNCHER_CU)
    (tmp_path / "step.cpp").write_text(
        "void launch_k(float* x, int n, cudaStream_t s);\n"
        f"void step(float* x, int n, cudaStream_t s) {{\n{caller_body}}}\n"
    )
    linter = Linter(example_config(root=tmp_path))
    report = linter.run([tmp_path], jobs=1, cache=cache)
    return [f for f in report.findings if f.code == "GPU802"]


def test_launcher_is_judged_by_its_callers_in_other_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    [finding] = _run_tree(tmp_path, "  launch_k(x, n, s);\n")
    assert finding.path == "ops.cu"
    assert "nor by `step` (step.cpp:3)" in finding.message
    assert _run_tree(tmp_path, "  launch_k(x, n, s);\n  CUDA_CHECK(cudaGetLastError());\n") == []
    # Alone (an editor, flake8), the launcher has no caller in sight: left to its callers.
    assert "GPU802" not in codes(lint_text(LAUNCHER_CU, "ops.cu"))


def test_cached_launcher_findings_follow_their_callers(tmp_path, monkeypatch):
    from gpulint.cache import ResultCache

    monkeypatch.chdir(tmp_path)
    fingerprint = Linter(example_config(root=tmp_path)).fingerprint()

    def cache():
        return ResultCache(tmp_path / ".cache", fingerprint)

    assert len(_run_tree(tmp_path, "  launch_k(x, n, s);\n", cache())) == 1
    # ops.cu's bytes are unchanged, but its caller now checks: the cached finding must go.
    checked = "  launch_k(x, n, s);\n  CUDA_CHECK(cudaGetLastError());\n"
    assert _run_tree(tmp_path, checked, cache()) == []
    assert len(_run_tree(tmp_path, "  launch_k(x, n, s);\n", cache())) == 1
    # The per-file facts are kept beside the results, so a warm run need not parse.
    [store] = (tmp_path / ".cache").glob("cuda-facts-*.json")
    assert "launch_k" in store.read_text()


def test_launch_in_a_macro_body_is_seen():
    text = (
        "#define THREADS_K 140\n"
        "#define LAUNCH(x, n) k<<<(n + THREADS_K - 1) / THREADS_K, THREADS_K>>>(x)\n"
        "__global__ void k(float* x) {}\n"
        "void run(float* x, int n) { LAUNCH(x, n); }\n"
        "void run_checked(float* x, int n) { LAUNCH(x, n); CUDA_CHECK(cudaGetLastError()); }\n"
    )
    found = {(f.line, f.code) for f in lint_text(text, "x.cu")}
    assert (2, "GPU801") in found  # the block of 140 threads, evaluated in the macro body
    [gpu802] = [f for f in lint_text(text, "x.cu") if f.code == "GPU802"]
    assert gpu802.line == 2 and "`run` (line 4)" in gpu802.message


def test_cli_judges_a_launcher_by_its_callers(tmp_path, monkeypatch, capsys):
    # The command line lints per configuration group: it must build the project index too.
    from gpulint.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(LAUNCHER_CU)
    (tmp_path / "step.cpp").write_text(
        "void launch_k(float* x, int n, cudaStream_t s);\n"
        "void step(float* x, int n, cudaStream_t s) {\n  launch_k(x, n, s);\n}\n"
    )
    main(["check", ".", "--no-cache", "--select", "GPU802", "--exit-zero"])
    out = capsys.readouterr().out
    assert "ops.cu:4:3: GPU802" in out and "nor by `step` (step.cpp:3)" in out


def test_test_driver_that_validates_output_needs_no_launch_check():
    text = """
__global__ void k(float* x) {}
int run_k(int n) {
  float* d;
  CUDA_CHECK(cudaMalloc(&d, 512));
  k<<<n / 128, 128>>>(d);
  return validate(d) ? 0 : 1;
}
"""
    assert "GPU802" not in codes(lint_text(text, "tests/test_k.cu"))
    assert "GPU802" in codes(lint_text(text, "src/k.cu"))


def test_test_driver_that_validates_output_needs_no_status_check():
    text = """
int main() {
  float* d;
  cudaMalloc(&d, 512);
  run_op(d);
  return validate(d) ? 0 : 1;
}
"""
    assert "GPU803" not in codes(lint_text(text, "tests/test_op.cu"))
    # A standalone program anywhere: its failure shows when it runs.
    assert "GPU803" not in codes(lint_text(text, "src/op.cu"))
    library = text.replace("int main() {", "int prepare() {")
    assert "GPU803" in codes(lint_text(library, "src/op.cu"))
    assert "GPU803" not in codes(lint_text(library, "benchmarks/op.cu"))


def test_a_header_only_programs_include_is_their_harness(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    helper = "#pragma once\nvoid upload(float** d, int n) {\n  cudaMalloc(d, n);\n}\n"
    for folder in ("gemm/utils", "attn/utils"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "utils.h").write_text(helper)
    bench = (
        "#include <torch/extension.h>\n__global__ void k(float* x) {}\nvoid lib(float* x) {\n"
        "  k<<<1, 1, 0, at::cuda::getCurrentCUDAStream()>>>(x);\n"
        '  C10_CUDA_KERNEL_LAUNCH_CHECK();\n}\n#ifndef NO_BIN\n#include "utils.h"\n'
        "int main() { float* d; upload(&d, 4); lib(d); }\n#endif\n"
    )
    (tmp_path / "gemm" / "gemm.cu").write_text(bench)
    # attn/ includes its own utils.h from library code: a different header of the same name.
    (tmp_path / "attn" / "attn.cu").write_text(
        bench.replace("#ifndef NO_BIN\n", "")
        .replace("#endif\n", "")
        .replace("int main()", "void run()")
    )
    report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
    paths = {f.path for f in report.findings if f.code == "GPU803"}
    assert paths == {"attn/utils/utils.h"}


def test_launch_check_suggestion_compiles_without_a_conditional_torch():
    kernel = (
        "__global__ void k(float* x) {}\nvoid f(float* x, int n, cudaStream_t s) {\n"
        "  k<<<n / 128, 128, 0, s>>>(x);\n}\n"
    )
    guarded = "#ifndef BIN\n#include <torch/extension.h>\n#endif\n" + kernel
    always = "#ifndef OP_H\n#define OP_H\n#include <torch/extension.h>\n#endif\n" + kernel
    (found,) = [f for f in lint_text(guarded, "src/op.cu") if f.code == "GPU802"]
    assert "C10_CUDA" not in found.message and "cudaGetLastError" in found.message
    (found,) = [f for f in lint_text(always, "src/op.cu") if f.code == "GPU802"]
    assert "C10_CUDA_KERNEL_LAUNCH_CHECK" in found.message


def test_a_file_that_includes_its_program_driver_is_that_program(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gemm").mkdir()
    level = (
        "__global__ void k(float* x) {}\nvoid matmul(float* x, int smem) {\n"
        "  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);\n"
        "  k<<<1, 128, smem>>>(x);\n}\n"
    )
    driver = (
        "int main() {\n  float* d;\n  matmul(d, 0);\n  cudaError_t e = cudaGetLastError();\n"
        "  return e != cudaSuccess;\n}\n"
    )
    (tmp_path / "gemm" / "launch.cu").write_text(driver)
    for step in ("level_01.cu", "level_02.cu"):  # each a step of a tutorial, one driver
        (tmp_path / "gemm" / step).write_text(level + '#include "launch.cu"\n')
    (tmp_path / "gemm" / "op.cu").write_text(level.replace("matmul", "op_matmul"))
    report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
    for code in ("GPU802", "GPU803"):  # the driver's code is the program's: left alone
        assert {f.path for f in report.findings if f.code == code} == {"gemm/op.cu"}


def test_a_project_macro_defined_in_another_header_checks_the_call_site(tmp_path, monkeypatch):
    # `CHECK_LAUNCH()` is #defined in one header (with cudaGetLastError in its body) and used
    # after the launching macro in another: the call site is checked.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "launch.cuh").write_text(
        "#define LAUNCH_1D(F, N, S, ...) F<<<((N) + 255) / 256, 256, 0, S>>>(__VA_ARGS__);\n"
        '#define CHECK_LAUNCH() TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch");\n'
        "__global__ void fill(float* x, int n) {}\n"
    )
    body = "  LAUNCH_1D(fill, n, s, x, n);\n"
    (tmp_path / "step.cu").write_text(
        '#include "launch.cuh"\n'
        f"void step(float* x, int n, cudaStream_t s) {{\n{body}  CHECK_LAUNCH();\n}}\n"
    )
    linter = Linter(example_config(root=tmp_path))
    assert [f for f in linter.run([tmp_path], jobs=1).findings if f.code == "GPU802"] == []
    (tmp_path / "step.cu").write_text(
        f'#include "launch.cuh"\nvoid step(float* x, int n, cudaStream_t s) {{\n{body}}}\n'
    )
    [finding] = [f for f in linter.run([tmp_path], jobs=1).findings if f.code == "GPU802"]
    assert "nor by `step`" in finding.message


OP_CU = """\
#include <torch/extension.h>
__global__ void relu_kernel(float* x, int n) {}
void relu(torch::Tensor x) {
  int n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
BENCH_PY = """\
import torch
from torch.utils.cpp_extension import load

lib = load(name="relu_lib", sources=["relu.cu"], extra_cuda_cflags=["-O3"])
x = torch.randn(1 << 20, device="cuda")
lib.relu(x)
"""


def _default_stream_findings(tmp_path, extra=None):
    (tmp_path / "relu.cu").write_text(OP_CU)
    (tmp_path / "bench.py").write_text(BENCH_PY + (extra or ""))
    linter = Linter(example_config(root=tmp_path))
    return [f for f in linter.run([tmp_path / "relu.cu"], jobs=1).findings if f.code == "GPU804"]


def test_an_op_built_only_by_its_stream_free_script_runs_on_the_default_stream(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    assert _default_stream_findings(tmp_path) == []


def test_an_op_whose_script_uses_streams_still_fires(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    side = "s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    lib.relu(x)\n"
    assert len(_default_stream_findings(tmp_path, side)) == 1


def test_a_packaged_op_still_fires(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "setup.py").write_text(
        "from setuptools import setup\nfrom torch.utils.cpp_extension import CUDAExtension\n"
        "setup(ext_modules=[CUDAExtension('relu_ext', ['relu.cu'])])\n"
    )
    assert len(_default_stream_findings(tmp_path)) == 1


def test_a_launcher_is_judged_by_its_library_callers_not_by_its_tests(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "src" / "ops.cu").write_text(LAUNCHER_CU)
    (tmp_path / "src" / "layer.cpp").write_text(
        "void launch_k(float* x, int n, cudaStream_t s);\n"
        "void layer_forward(float* x, int n, cudaStream_t s) {\n"
        "  launch_k(x, n, s);\n  CUDA_CHECK(cudaGetLastError());\n}\n"
    )
    (tmp_path / "tests" / "bench_k.cpp").write_text(
        "void launch_k(float* x, int n, cudaStream_t s);\n"
        "void time_k(float* x, int n, cudaStream_t s) {\n  launch_k(x, n, s);\n}\n"
    )
    linter = Linter(example_config(root=tmp_path))
    assert [f for f in linter.run([tmp_path], jobs=1).findings if f.code == "GPU802"] == []
    # An unchecked library caller is still named.
    (tmp_path / "src" / "other.cpp").write_text(
        "void launch_k(float* x, int n, cudaStream_t s);\n"
        "void other_forward(float* x, int n, cudaStream_t s) {\n  launch_k(x, n, s);\n}\n"
    )
    [finding] = [f for f in linter.run([tmp_path], jobs=1).findings if f.code == "GPU802"]
    assert "nor by `other_forward`" in finding.message


# An extension whose only Python user is a benchmark script is that script's harness; the same
# sources imported by a package's module are a library, reported as before.
UNCHECKED_OP_CU = """\
#include <torch/extension.h>
__global__ void relu_kernel(float* x, int n) {}
void relu(torch::Tensor x) {
  int n = x.numel();
  relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), n);
  cudaFuncSetAttribute(relu_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536);
}
"""
SETUP_PY = """\
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="toy-relu",
    ext_modules=[
        CUDAExtension(
            # the module to import
            name="toy_relu",
            sources=["csrc/relu.cu"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
"""
RUN_PY = """\
import time

import torch
import toy_relu

for n in (1 << 16, 1 << 20):
    x = torch.randn(n, device="cuda")
    start = time.time()
    toy_relu.relu(x)
    torch.cuda.synchronize()
    print(n, time.time() - start, torch.allclose(x, x.clamp(min=0)))
"""


def _extension_findings(tmp_path, files):
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "relu.cu").write_text(UNCHECKED_OP_CU)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    linter = Linter(example_config(root=tmp_path))
    report = linter.run([tmp_path], jobs=1, cache=None)
    return sorted(f.code for f in report.findings if f.code in ("GPU802", "GPU803", "GPU804"))


def test_an_extension_only_a_benchmark_script_imports_is_its_harness(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _extension_findings(tmp_path, {"setup.py": SETUP_PY, "run_relu.py": RUN_PY}) == []


def test_an_extension_only_a_script_loads_is_its_harness(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = RUN_PY.replace(
        "import toy_relu\n",
        "from torch.utils.cpp_extension import load\n\n"
        'toy_relu = load(name="toy_relu", sources=["csrc/relu.cu"])\n',
    )
    assert _extension_findings(tmp_path, {"relu.py": script}) == []


def test_an_extension_a_package_module_imports_is_a_library(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = {
        "setup.py": SETUP_PY,
        "run_relu.py": RUN_PY,
        "toyrelu/__init__.py": "from toyrelu.layers import ReLU\n",
        "toyrelu/layers.py": "import torch\nimport toy_relu\n\n\n"
        "class ReLU(torch.nn.Module):\n    def forward(self, x):\n"
        "        toy_relu.relu(x)\n        return x\n",
    }
    assert _extension_findings(tmp_path, files) == ["GPU802", "GPU803", "GPU804"]


def test_an_extension_a_package_module_loads_is_a_library(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    files = {
        "relu.py": RUN_PY.replace("import toy_relu\n", "from toyrelu.backend import toy_relu\n"),
        "toyrelu/__init__.py": "",
        "toyrelu/backend.py": "from torch.utils.cpp_extension import load\n\n"
        'toy_relu = load(name="toy_relu", sources=["../csrc/relu.cu"])\n',
    }
    assert _extension_findings(tmp_path, files) == ["GPU802", "GPU803", "GPU804"]


CHECK_HEADER = """
#include <cuda_runtime.h>
inline void syncAndReport(const char* file, int line) {
#ifndef NDEBUG
  cudaDeviceSynchronize();
  cudaError_t result = cudaGetLastError();
  if (result) report_cuda_failure(result, file, line);
#endif
}
#define SYNC_STEP() syncAndReport(__FILE__, __LINE__)
"""


def _gpu803_tree(tmp_path, body):
    (tmp_path / "util.h").write_text(CHECK_HEADER)
    (tmp_path / "model.cc").write_text(
        '#include "util.h"\n'
        "void Model::prepare(int* ids, int n, cudaStream_t s) {\n"
        f"  cudaMemsetAsync(ids, 0, sizeof(int) * n, s);\n  fill_ids(ids, n, s);\n{body}}}\n"
    )
    report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
    return [f for f in report.findings if f.code == "GPU803"]


def test_a_later_check_macro_of_another_header_reading_the_last_error_covers_a_call(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    # The header's macro calls a helper that reads cudaGetLastError (in debug builds): the
    # failed memset before it is reported there.
    assert _gpu803_tree(tmp_path, "  SYNC_STEP();\n") == []
    # The same project without that check after the call: reported.
    [finding] = _gpu803_tree(tmp_path, "  log_step(n);\n")
    assert finding.path == "model.cc" and finding.line == 3
    # A check on one branch only does not cover it.
    assert len(_gpu803_tree(tmp_path, "  if (n > 4096) {\n    SYNC_STEP();\n  }\n")) == 1


def test_a_macro_launcher_names_its_caller_in_its_own_file(tmp_path, monkeypatch):
    # Two sources each define their own `LAUNCH_K` (a macro is seen only in its file): the
    # caller named is the one of the file the launch is in.
    monkeypatch.chdir(tmp_path)
    for name in ("a", "b"):
        (tmp_path / f"{name}.cu").write_text(
            "__global__ void k(float* x) {}\n"
            "#define LAUNCH_K(x, n) k<<<(n + 127) / 128, 128>>>(x)\n"
            f"void run_{name}(float* x, int n) {{\n  LAUNCH_K(x, n);\n}}\n"
        )
    report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
    found = {f.path: f.message for f in report.findings if f.code == "GPU802"}
    assert "`run_a` (line 4)" in found["a.cu"]
    assert "`run_b` (line 4)" in found["b.cu"]


def test_a_launchers_caller_checked_by_a_last_error_macro_of_another_header(tmp_path, monkeypatch):
    # `SYNC_STEP()` (util.h) expands to a helper reading cudaGetLastError: the caller checks.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "util.h").write_text(CHECK_HEADER)
    assert _run_tree(tmp_path, "  launch_k(x, n, s);\n  SYNC_STEP();\n") == []
    assert len(_run_tree(tmp_path, "  launch_k(x, n, s);\n  log_step(n);\n")) == 1


def test_a_launcher_called_by_an_overload_whose_every_call_checks_is_left_alone(
    tmp_path, monkeypatch
):
    # `launch_pos` is called by one of two overloads of `lookup` (an adapter); every call of
    # the name `lookup` checks, so the one that launches is checked too.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(
        "__global__ void k(float* x) {}\n"
        "void launch_pos(float* x, int n, cudaStream_t s) {\n"
        "  k<<<(n + 127) / 128, 128, 0, s>>>(x);\n}\n"
        "void lookup(float* x, int n, cudaStream_t s) { launch_pos(x, n, s); }\n"
        "void lookup(float* x, int n) { lookup(x, n, 0); }\n"
    )

    def run(after):
        (tmp_path / "step.cpp").write_text(
            "void lookup(float* x, int n, cudaStream_t s);\n"
            f"void step(float* x, int n, cudaStream_t s) {{\n  lookup(x, n, s);\n{after}}}\n"
        )
        report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
        return [f for f in report.findings if f.code == "GPU802"]

    assert run("  CUDA_CHECK(cudaGetLastError());\n") == []
    [finding] = run("  log_step(n);\n")
    assert finding.path == "ops.cu" and finding.line == 3


def test_a_later_wrapped_last_error_check_covers_an_attribute_call_but_a_bare_one_does_not():
    # `CHECK(cudaGetLastError())` after the branches reports a failed cudaFuncSetAttribute;
    # a bare `cudaGetLastError();` clears the error and reports nothing.
    text = (
        "__global__ void k(float* o);\n"
        "void run(float* o, bool big, cudaStream_t s) {\n"
        "  if (big) {\n"
        "    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 98304);\n"
        "    k<<<64, 256, 98304, s>>>(o);\n"
        "  }\n"
        "  CUDA_CHECK(cudaGetLastError());\n"
        "}\n"
    )
    assert [f for f in lint_text(text, "attn.cu") if f.code == "GPU803"] == []
    bare = text.replace("CUDA_CHECK(cudaGetLastError());", "cudaGetLastError();")
    attribute, clear = [f for f in lint_text(bare, "attn.cu") if f.code == "GPU803"]
    assert attribute.line == 4
    # ... and the bare clear itself drops the launch's error (errorstate.swallowed)
    assert clear.line == 7 and "the launch of `k` (line 5)" in clear.message


QUERY_FIXTURE = Path(__file__).resolve().parent.parent / (
    "fixtures/cuda/gpu802_silent_query_dead_and_deep_callers.cu"
)


def _gpu802(text):
    return [f for f in lint_text(text, "sampling.cu") if f.code == "GPU802"]


def test_callers_followed_past_size_queries_dead_calls_and_five_levels_up():
    text = QUERY_FIXTURE.read_text(encoding="utf-8")

    def line(snippet):
        return text[: text.index(snippet)].count("\n") + 1

    stage2, stage1 = line("topk_stage2<<<"), line("topk_stage1<<<")
    layer = line("  decode_step<T>(workspace_, workspace_size_,")
    assert _gpu802(text) == []
    # The call after `LIB_CHECK(false)` is live once the assertion is gone: it is not checked.
    [found] = _gpu802(text.replace("    LIB_CHECK(false);\n", ""))
    assert "`beam_topk`" in found.message and found.line == stage2
    # A workspace that is not null: the allocating call launches, and nothing checks it.
    # (and called from nowhere that checks: `forward` calling it checks after it)
    live = text.replace(
        "invoke_topk<T>(nullptr, workspace_size_,", "invoke_topk<T>(scratch_, ws,"
    ).replace("  allocateBuffer(batch, vocab);\n", "")
    assert {f.line for f in _gpu802(live)} == {stage2, stage1}
    # Five callers up, the layer does not check: reported, naming it (what it calls too).
    unchecked = text.replace("  log_step(batch);\n  SYNC_CHECK();\n", "  log_step(batch);\n")
    found = _gpu802(unchecked)
    assert {f.line for f in found} == {stage2, stage1}
    assert all(
        f"`forward` (line {layer}) that calls function `decode_step`" in f.message for f in found
    )


def _layer_tree(tmp_path, model):
    (tmp_path / "scale.cu").write_text(
        "__global__ void scale_kernel(float* x, int n);\n"
        "void invokeScale(float* x, int n, cudaStream_t s) {\n"
        "  scale_kernel<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n}\n"
    )
    (tmp_path / "ScaleLayer.cc").write_text(
        "template <typename T>\nvoid ScaleLayer<T>::forward(float* x, int n) {\n"
        "  invokeScale(x, n, stream_);\n}\n"
    )
    (tmp_path / "Model.cc").write_text(
        '#include "check.h"\n'
        "template <typename T>\nModel<T>::Model(int n) {\n  layer_ = new ScaleLayer<T>(n);\n"
        "  other_ = new OtherLayer<T>(n);\n}\n"
        f"template <typename T>\nvoid Model<T>::forward(float* x, int n) {{\n{model}}}\n"
    )
    (tmp_path / "check.h").write_text(CHECK_HEADER)
    report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
    return [f for f in report.findings if f.code == "GPU802"]


def test_a_method_caller_is_followed_to_calls_through_objects_of_its_class(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # `layer_` is a ScaleLayer (the file makes it one): its forward's caller checks.
    assert _layer_tree(tmp_path, "  layer_->forward(x, n);\n  SYNC_STEP();\n") == []
    # The model does not check: reported, naming the layer's method that calls the launcher.
    [found] = _layer_tree(tmp_path, "  layer_->forward(x, n);\n  log_step(n);\n")
    assert found.path == "scale.cu"
    assert "nor by `forward` (Model.cc:9) that calls function `forward`" in found.message
    # A checked call of another class's forward says nothing about this one.
    [found] = _layer_tree(tmp_path, "  layer_->forward(x, n);\n  other_->forward(x, n);\n")
    found = _layer_tree(tmp_path, "  other_->forward(x, n);\n  SYNC_STEP();\n")
    assert len(found) == 1 and "`forward` (ScaleLayer.cc:3)" in found[0].message


SPLIT_FIXTURE = Path(__file__).resolve().parent.parent / (
    "fixtures/cuda/gpu802_silent_caller_split_by_ifdef.cu"
)


def test_a_function_split_by_ifdef_braces_is_parsed_in_one_configuration():
    from gpulint.frontends.cuda import mask_unbalanced_branches

    text = SPLIT_FIXTURE.read_text(encoding="utf-8")
    parsed = FRONTEND.parse("layer.cu", text.encode(), Settings())
    assert not any(parsed.broken(c) for c in parsed.all_calls)
    # offsets kept: the sparse branch is blanked, its directives too, lines stay
    picked = mask_unbalanced_branches(text.encode())
    assert len(picked) == len(text.encode()) and picked.count(b"\n") == text.count("\n")
    assert b"sparse_gemm" not in picked and b"dense_gemm" in picked
    # the layer's call is a caller now: without its check, the launch is reported through it
    unchecked = text.replace("  LAYER_CHECK();\n}", "  log_step(m);\n}")
    [found] = [f for f in lint_text(unchecked, "layer.cu") if f.code == "GPU802"]
    assert "`forward` (line 32)" in found.message
    # a balanced #ifdef is left as it is
    balanced = b"#ifdef A\nint f() { return 1; }\n#endif\nint g( {\n"
    assert mask_unbalanced_branches(balanced) == balanced


def test_a_virtual_method_is_reached_through_its_base_classes_call(tmp_path, monkeypatch):
    # The base layer's forward calls the activation hook (virtual) and checks; the hook the
    # derived class overrides launches.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "act.cu").write_text(
        "__global__ void gelu(float* x, int n);\n"
        "void invokeGelu(float* x, int n, cudaStream_t s) {\n"
        "  gelu<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n}\n"
    )
    (tmp_path / "ffn.h").write_text(
        "template <typename T>\nclass FfnLayer : public BaseLayer {\n"
        "  virtual void activate(float* x, int n) = 0;\n};\n"
        "template <typename T>\nclass GeluFfnLayer : public FfnLayer<T> {\n"
        "  void activate(float* x, int n) override;\n};\n"
    )
    (tmp_path / "check.h").write_text(CHECK_HEADER)

    def run(after):
        (tmp_path / "ffn.cc").write_text(
            '#include "ffn.h"\n#include "check.h"\n'
            "template <typename T>\nvoid FfnLayer<T>::forward(float* x, int n) {\n"
            f"  activate(x, n);\n{after}}}\n"
            "template <typename T>\nvoid GeluFfnLayer<T>::activate(float* x, int n) {\n"
            "  invokeGelu(x, n, stream_);\n}\n"
        )
        report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
        return [f for f in report.findings if f.code == "GPU802"]

    assert run("  SYNC_STEP();\n") == []
    [found] = run("  log_step(n);\n")
    assert "nor by `forward` (ffn.cc:5) that calls function `activate`" in found.message


def test_a_later_call_on_the_path_of_a_function_reading_the_last_error_checks(
    tmp_path, monkeypatch
):
    # The model runs the attention layer (which launches unchecked) and then the FFN layer,
    # whose forward ends in the project's last-error check: that reports the launch too.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "check.h").write_text(CHECK_HEADER)
    (tmp_path / "attn.cu").write_text(
        "__global__ void softmax(float* x, int n);\n"
        "void invokeSoftmax(float* x, int n, cudaStream_t s) {\n"
        "  softmax<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n}\n"
        "template <typename T>\nvoid AttnLayer<T>::forward(float* x, int n) {\n"
        "  invokeSoftmax(x, n, stream_);\n}\n"
    )

    def run(model, ffn_check="  SYNC_STEP();\n"):
        (tmp_path / "ffn.cc").write_text(
            '#include "check.h"\n'
            "template <typename T>\nvoid FfnLayer<T>::forward(float* x, int n) {\n"
            f"  gemm(x, n);\n{ffn_check}}}\n"
        )
        (tmp_path / "model.cc").write_text(
            "template <typename T>\nModel<T>::Model(int n) {\n"
            "  attn_ = new AttnLayer<T>(n);\n  ffn_ = new FfnLayer<T>(n);\n}\n"
            f"template <typename T>\nvoid Model<T>::forward(float* x, int n) {{\n{model}}}\n"
        )
        report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1)
        return [f for f in report.findings if f.code == "GPU802"]

    steps = "  for (int i = 0; i < layers_; ++i) {\n    attn_->forward(x, n);\n"
    assert run(steps + "    ffn_->forward(x, n);\n  }\n") == []
    # the FFN layer runs on one branch only: not on the launch's path
    assert len(run(steps + "    if (use_ffn_) ffn_->forward(x, n);\n  }\n")) == 1
    # a FFN layer that checks nothing
    assert len(run(steps + "    ffn_->forward(x, n);\n  }\n", ffn_check="")) == 1


def test_an_extension_a_plain_helper_loads_is_the_harness_of_the_scripts_importing_it(
    tmp_path, monkeypatch
):
    # ops.py is no package's module and no script: the scripts importing it are its users
    monkeypatch.chdir(tmp_path)
    helper = (
        "from torch.utils.cpp_extension import load\n\n"
        'toy_relu = load(name="toy_relu", sources=["csrc/relu.cu"])\n'
    )
    bench = RUN_PY.replace("import toy_relu\n", "from ops import toy_relu\n")
    assert _extension_findings(tmp_path, {"ops.py": helper, "bench_relu.py": bench}) == []
    library = "import torch\nfrom ops import toy_relu\n\n\ndef relu(x):\n    toy_relu.relu(x)\n"
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text(library)
    report = Linter(example_config(root=tmp_path)).run([tmp_path], jobs=1, cache=None)
    assert "GPU804" in {f.code for f in report.findings}


def test_import_lines_answer_every_import_pattern_as_the_whole_text():
    from gpulint.frontends.cuda.harness import _import_lines, _imports

    text = (
        b'"""Uses toy_relu (import toy_relu to try it)."""\n'
        b"import os, toy_relu as t\r\n"
        b"    from pkg.toy_relu import relu  # indented\n"
        b"from pkg import (\n    toy_relu,\n)\n"
        b"x = 1; import toy_relux\n"
        b"def f():\n    return 2\n"
        b"from a.b import c, toy_relu"
    )
    lines = _import_lines(text)
    assert b"def f" not in lines and len(lines) < len(text)
    for name in ("toy_relu", "os", "relu", "pkg", "toy_relux", "c", "b", "t", "f", "x"):
        assert bool(_imports(name).search(lines)) == bool(_imports(name).search(text)), name
