"""CUDA reach (issue 32): launches written over lines reported at their `<<<`, callers of
launcher templates across translation units and through device lambdas, the error state a
bare `cudaGetLastError();` resets, standalone programs' code, and torch through a project
header."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

from gpulint.cli import main
from gpulint.engine import Linter
from gpulint.testing import example_config, lint_text

MULTILINE = """#include <torch/extension.h>
template <typename T, int BLOCK> __global__ void k(T* x, int n) {}
void fill(torch::Tensor x) {
  const int n = x.numel();
  k<float,
    256>
      <<<(n + 255) / 256, 256>>>(
          x.data_ptr<float>(), n);
}
"""


def _run(root: Path):
    return Linter(example_config(root=root)).run([root], jobs=1).findings


def test_a_launch_over_lines_is_reported_at_its_launch_with_the_whole_span():
    found = [f for f in lint_text(MULTILINE, "ops.cu") if f.code == "GPU804"]
    assert [(f.line, f.col, f.end_line, f.end_col) for f in found] == [(7, 7, 8, 34)]


def test_a_noqa_on_the_kernel_name_still_covers_a_launch_over_lines():
    text = MULTILINE.replace("  k<float,", "  k<float,  // noqa: GPU804")
    assert not [f for f in lint_text(text, "ops.cu") if f.code == "GPU804"]
    other = text.replace("noqa: GPU804", "noqa: GPU802")
    assert [f.line for f in lint_text(other, "ops.cu") if f.code == "GPU804"] == [7]


def test_sarif_region_of_a_launch_over_lines_is_the_launch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(MULTILINE)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--isolated", "--select", "GPU804", "--format", "sarif", "--no-cache", "."])
    result = json.loads(out.getvalue())["runs"][0]["results"][0]
    region = result["locations"][0]["physicalLocation"]["region"]
    assert region == {"startLine": 7, "startColumn": 7, "endLine": 8, "endColumn": 34}


LAUNCHER = """#pragma once
#include <cuda_runtime.h>
template <typename T> __global__ void scale_kernel(T* x, T a, int n) {}
template <typename F> __global__ void for_each_kernel(int n, F f) {}
template <typename T>
void launch_scale(T* x, T a, int n, cudaStream_t s) {
  scale_kernel<T>
      <<<(n + 255) / 256, 256, 0, s>>>(x, a, n);
}
template <typename F>
void parallel_for(int n, cudaStream_t s, F f) {
  for_each_kernel<F><<<(n + 255) / 256, 256, 0, s>>>(n, f);
}
"""
OPS = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include "launch.cuh"
void scale_op(torch::Tensor x, double a) {
  auto s = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "scale", [&] {
    launch_scale<scalar_t>(x.data_ptr<scalar_t>(), (scalar_t)a, x.numel(), s);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
void add_one(torch::Tensor x) {
  auto s = at::cuda::getCurrentCUDAStream();
  float* p = x.data_ptr<float>();
  parallel_for(x.numel(), s, [=] __device__(int i) { p[i] += 1; });
  AT_CUDA_CHECK(cudaGetLastError());
}
"""


def test_launcher_templates_called_from_other_files_that_check_are_silent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "launch.cuh").write_text(LAUNCHER)
    (tmp_path / "ops.cu").write_text(OPS)
    assert not [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]


def test_the_unchecked_caller_in_another_file_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "launch.cuh").write_text(LAUNCHER)
    (tmp_path / "ops.cu").write_text(OPS)
    (tmp_path / "more.cpp").write_text(
        '#include "launch.cuh"\n'
        "void bump(float* p, int n, cudaStream_t s) {\n"
        "  parallel_for(n, s, [=] __device__(int i) { p[i] += 2; });\n"
        "}\n"
        "void twice(float* x, int n, cudaStream_t s) {\n"
        "  launch_scale<float>(x, 2.f, n, s);\n"
        "}\n"
    )
    found = sorted(
        (f.path, f.line, f.message) for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")
    )
    assert [(p, line) for p, line, _ in found] == [("launch.cuh", 8), ("launch.cuh", 12)]
    assert "nor by `twice` (more.cpp:6) that calls function `launch_scale`" in found[0][2]
    assert "nor by `bump` (more.cpp:3) that calls function `parallel_for`" in found[1][2]


def test_an_extension_helper_names_the_caller_that_does_not_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(
        "#include <torch/extension.h>\n"
        "template <typename T> __global__ void k(T* x, int n) {}\n"
        "template <typename T> void k_cuda(T* x, int n, cudaStream_t s) {\n"
        "  k<T><<<(n + 255) / 256, 256, 0, s>>>(x, n);\n"
        "}\n"
        "template void k_cuda<float>(float*, int, cudaStream_t);\n"
    )
    (tmp_path / "bind.cpp").write_text(
        "#include <torch/extension.h>\n"
        "template <typename T> void k_cuda(T* x, int n, cudaStream_t s);\n"
        "void checked(torch::Tensor x, cudaStream_t s) {\n"
        "  k_cuda<float>(x.data_ptr<float>(), x.numel(), s);\n"
        "  C10_CUDA_KERNEL_LAUNCH_CHECK();\n"
        "}\n"
        "void fast(torch::Tensor x, cudaStream_t s) {\n"
        "  k_cuda<float>(x.data_ptr<float>(), x.numel(), s);\n"
        "}\n"
    )
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert [(f.path, f.line) for f in found] == [("ops.cu", 4)]
    assert "nor by `fast` (bind.cpp:8) that calls function `k_cuda`" in found[0].message
    bind = (
        (tmp_path / "bind.cpp")
        .read_text()
        .replace("s);\n}\n", "s);\n  C10_CUDA_KERNEL_LAUNCH_CHECK();\n}\n")
    )
    (tmp_path / "bind.cpp").write_text(bind)
    assert not [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]


def _tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


KERNEL_FILE = """#include "{header}"
__global__ void fill_kernel(float* p, int n) {{}}
void fill_cuda(float* p, int n) {{
  fill_kernel<<<(n + 255) / 256, 256{stream}>>>(p, n);
}}
"""


def test_torch_through_a_project_header_makes_the_default_stream_a_finding(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tree(
        tmp_path,
        {
            "csrc/common/helper.hpp": "#pragma once\n#include <ATen/cuda/CUDAContext.h>\n",
            "csrc/common.h": '#pragma once\n#include "common/helper.hpp"\n',
            "csrc/ops/fill.cu": KERNEL_FILE.format(header="../common.h", stream=""),
        },
    )
    found = [f for f in _run(tmp_path) if f.code == "GPU804"]
    assert [(f.path, f.line) for f in found] == [("csrc/ops/fill.cu", 4)]
    assert "in a PyTorch extension" in found[0].message


def test_no_torch_in_the_project_headers_leaves_plain_cuda_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tree(
        tmp_path,
        {
            "csrc/common.h": "#pragma once\n#include <cuda_runtime.h>\n",
            # (another folder's common.h includes torch: not the one this file includes)
            "other/common.h": "#pragma once\n#include <torch/extension.h>\n",
            "csrc/fill.cu": KERNEL_FILE.format(header="common.h", stream=""),
        },
    )
    assert not [f for f in _run(tmp_path) if f.code == "GPU804"]


def test_torch_through_a_header_on_the_current_stream_is_silent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tree(
        tmp_path,
        {
            "csrc/common.h": "#pragma once\n#include <torch/extension.h>\n",
            "csrc/fill.cu": KERNEL_FILE.format(
                header="common.h", stream=", 0, at::cuda::getCurrentCUDAStream()"
            ),
            "csrc/dead.cu": '#include "common.h"\n__global__ void k(float* p) {}\n'
            "void clear_cuda(float* p) {\n  return;\n  k<<<1, 256>>>(p);  // switched off\n}\n",
        },
    )
    assert not [f for f in _run(tmp_path) if f.code == "GPU804"]


def test_torch_by_header_follows_includes_to_any_depth():
    from gpulint.frontends.cuda.project import torch_by_header

    files = [
        ("a/x.cu", b'#include "y.h"\n'),
        ("a/y.h", b'#include "../b/z.h"\n'),
        ("b/z.h", b"#include <torch/extension.h>\n"),
        ("a/direct.cu", b'#include <torch/extension.h>\n#include "y.h"\n'),
        ("a/plain.cu", b'#include "w.h"\n'),
        ("a/w.h", b"#include <cuda_runtime.h>\n"),
    ]
    assert torch_by_header(files) == frozenset({"a/x.cu", "a/y.h"})


def test_a_sync_in_a_loop_calling_a_launcher_template_of_another_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tree(
        tmp_path,
        {
            "step.cuh": "#pragma once\n#include <cuda_runtime.h>\n"
            "template <typename T> __global__ void step_kernel(T* x, int n) {}\n"
            "template <typename T> void launch_step(T* x, int n, cudaStream_t s) {\n"
            "  step_kernel<T><<<(n + 255) / 256, 256, 0, s>>>(x, n);\n"
            "  CUDA_CHECK(cudaGetLastError());\n}\n",
            "run.cpp": '#include "step.cuh"\n'
            "void run(float* x, int n, int steps, cudaStream_t s) {\n"
            "  for (int t = 0; t < steps; ++t) {\n"
            "    launch_step<float>(x, n, s);\n"
            "    CUDA_CHECK(cudaStreamSynchronize(s));\n"
            "  }\n"
            "}\n"
            "void wait_host(float* h, int steps, cudaStream_t s) {\n"
            "  for (int t = 0; t < steps; ++t) {\n"
            "    h[t] = 0.f;\n"
            "    CUDA_CHECK(cudaStreamSynchronize(s));\n"
            "  }\n"
            "}\n",
        },
    )
    found = [f for f in _run(tmp_path) if f.code == "GPU805"]
    assert [(f.path, f.line) for f in found] == [("run.cpp", 5)]


# A functor whose `operator()` launches, defined in a header, used from another translation
# unit (mmcv's spconv shape: `functor::Cls<tv::TorchGPU, T, int>\n ftor;` then `ftor(...)`).
FUNCTOR = """#pragma once
#include <cuda_runtime.h>
template <typename T> __global__ void pool_kernel(T* out, const T* in, int n) {}
namespace functor {
template <typename T>
struct PoolForwardFunctor {
  void operator()(cudaStream_t s, T* out, const T* in, int n) {
    pool_kernel<T><<<(n + 255) / 256, 256, 0, s>>>(out, in, n);
  }
};
}  // namespace functor
"""
POOL_OPS = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include "pool.cuh"
void pool_checked(torch::Tensor out, torch::Tensor in) {
  functor::PoolForwardFunctor<float>
      ftor;
  ftor(at::cuda::getCurrentCUDAStream(), out.data_ptr<float>(), in.data_ptr<float>(), in.numel());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""
POOL_UNCHECKED = """#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include "pool.cuh"
void pool_fast(torch::Tensor out, torch::Tensor in) {
  functor::PoolForwardFunctor<float> forwardFtor;
  forwardFtor(at::cuda::getCurrentCUDAStream(), out.data_ptr<float>(), in.data_ptr<float>(), 4);
}
"""


def test_a_functor_s_callers_in_other_files_are_its_callers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, {"pool.cuh": FUNCTOR, "ops.cu": POOL_OPS})
    assert not [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    (tmp_path / "fast.cu").write_text(POOL_UNCHECKED)
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert [(f.path, f.line) for f in found] == [("pool.cuh", 8)]
    assert "`pool_fast` (fast.cu:6)" in found[0].message


def test_another_functor_s_callers_are_not_this_ones(tmp_path, monkeypatch):
    # `PoolBackwardFunctor` objects called unchecked say nothing of the forward functor.
    monkeypatch.chdir(tmp_path)
    other = POOL_UNCHECKED.replace("PoolForwardFunctor", "PoolBackwardFunctor")
    header = FUNCTOR + FUNCTOR.replace("PoolForwardFunctor", "PoolBackwardFunctor").replace(
        "pool_kernel", "pool_bwd_kernel"
    ).replace("#pragma once\n", "")
    _tree(tmp_path, {"pool.cuh": header, "ops.cu": POOL_OPS, "fast.cu": other})
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert [(f.path, f.line) for f in found] == [("pool.cuh", 18)]


def test_a_sync_in_a_loop_calling_a_launching_functor_of_another_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    loop = (
        '#include "pool.cuh"\n'
        "void pool_all(float* out, const float* in, int n, int steps, cudaStream_t s) {\n"
        "  functor::PoolForwardFunctor<float> ftor;\n"
        "  for (int t = 0; t < steps; ++t) {\n"
        "    ftor(s, out, in, n);\n"
        "    CUDA_CHECK(cudaStreamSynchronize(s));\n"
        "  }\n"
        "}\n"
    )
    _tree(tmp_path, {"pool.cuh": FUNCTOR, "run.cpp": loop})
    found = [f for f in _run(tmp_path) if f.code == "GPU805"]
    assert [(f.path, f.line) for f in found] == [("run.cpp", 6)]
    # an object of a class whose call operator launches nothing: no GPU work in the loop
    _tree(tmp_path, {"run.cpp": loop.replace("PoolForwardFunctor", "HostFunctor")})
    assert not [f for f in _run(tmp_path) if f.code == "GPU805"]


CLEARING_LAUNCHER = """#include <cuda_runtime.h>
__global__ void foo_kernel(float* p, int n) {}
void launch_foo(float* p, int n, cudaStream_t s) {
  foo_kernel<<<(n + 255) / 256, 256, 0, s>>>(p, n);
  cudaGetLastError();
}
"""
CLEARING_CALLER = """#include <cuda_runtime.h>
#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) abort(); } while (0)
void launch_foo(float* p, int n, cudaStream_t s);
void run(float* p, int n, cudaStream_t s) {
  CHECK(cudaMemset(p, 0, n));
  launch_foo(p, n, s);
{check}}
"""


def test_a_clear_names_the_check_after_its_call_in_another_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.cu").write_text(CLEARING_LAUNCHER)
    for check in ("  CHECK(cudaGetLastError());\n", "  C10_CUDA_KERNEL_LAUNCH_CHECK();\n"):
        (tmp_path / "b.cu").write_text(CLEARING_CALLER.replace("{check}", check))
        found = [f for f in _run(tmp_path) if f.code == "GPU803"]
        assert [(f.path, f.line) for f in found] == [("a.cu", 5)]
        assert ", and the check after its call in b.cu:6 sees success;" in found[0].message
        assert [(r.path, r.line) for r in found[0].related] == [("a.cu", 4), ("b.cu", 6)]


def test_a_clear_whose_caller_in_another_file_does_not_check_is_unchanged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.cu").write_text(CLEARING_LAUNCHER)
    (tmp_path / "b.cu").write_text(CLEARING_CALLER.replace("{check}", ""))
    found = [f for f in _run(tmp_path) if f.code == "GPU803"]
    assert [(f.path, f.line) for f in found] == [("a.cu", 5)]
    assert "sees success" not in found[0].message
    assert "that failure goes unreported; check it:" in found[0].message
    assert [(r.path, r.line) for r in found[0].related] == [("a.cu", 4)]
