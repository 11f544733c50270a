"""CUDA rules judged with the project's facts: a device printing helper nothing calls (GPU809),
the suggested launch check spelt as the file or its siblings spell it (GPU802)."""

from __future__ import annotations

from pathlib import Path

from gpulint.config import Config
from gpulint.engine import Linter
from gpulint.frontends.cuda.callgraph import uncalled_device_printers
from gpulint.frontends.cuda.project import CudaProject
from gpulint.testing import lint_text

TILE_H = """#pragma once
#include <cstdio>
template <typename T>
__device__ inline void seed_tile(T* tile, int rows, int cols) {
  printf("seeding %dx%d tile\\n", rows, cols);
  for (int i = 0; i < rows * cols; ++i) tile[i] = T(i % cols == i / cols);
}
template <typename T>
__device__ inline void scale_rows(T* tile, int rows, int cols, T s) {
  printf("scaling %d rows\\n", rows);
  for (int i = 0; i < rows * cols; ++i) tile[i] *= s;
}
"""
KERNELS_CU = """#include "tile.cuh"
__global__ void rescale(float* x, int rows, int cols) {
  scale_rows<float>(x + blockIdx.x * rows * cols, rows, cols, 0.5f);
}
"""


def _gpu809(root: Path) -> list[tuple[str, int]]:
    config = Config(root=root)
    config.select = ["GPU809"]
    found = Linter(config).run([root], jobs=1).findings
    return sorted((f.path, f.line) for f in found)


def test_a_device_printing_helper_nothing_calls_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tile.cuh").write_text(TILE_H)
    (tmp_path / "kernels.cu").write_text(KERNELS_CU)
    # seed_tile is called by nothing; scale_rows by the rescale kernel
    assert _gpu809(tmp_path) == [("tile.cuh", 10)]
    # once a kernel calls it, the helper's printf costs that kernel
    (tmp_path / "more.cu").write_text(
        '#include "tile.cuh"\n__global__ void init(float* t) { seed_tile(t, 16, 16); }\n'
    )
    assert _gpu809(tmp_path) == [("tile.cuh", 5), ("tile.cuh", 10)]


def test_a_file_linted_alone_keeps_its_printf_findings():
    # (an editor's one file: the callers are not in sight)
    found = lint_text(TILE_H, "tile.cuh")
    assert sorted(f.line for f in found if f.code == "GPU809") == [5, 10]
    assert uncalled_device_printers([("tile.cuh", TILE_H.encode())]) == frozenset()


def test_uncalled_printers_survive_the_project_json_round_trip():
    files = [("tile.cuh", TILE_H.encode()), ("kernels.cu", KERNELS_CU.encode())]
    found = uncalled_device_printers(files)
    assert found == frozenset({"tile.cuh:seed_tile"})
    project = CudaProject(
        uncalled_printers=found, launch_spellings={"a/x.cu": "STD_CUDA_KERNEL_LAUNCH_CHECK();"}
    )
    assert CudaProject.from_json(project.to_json()) == project
    # a comment or declaration naming the helper counts as a use (kept reported)
    declared = b"__device__ void seed_tile(float* t, int r, int c);\n"
    assert uncalled_device_printers([*files, ("decl.h", declared)]) == frozenset()


def _op(name: str, check: str) -> str:
    return (
        "#include <torch/extension.h>\n"
        "#include <ATen/cuda/CUDAContext.h>\n"
        f"__global__ void {name}_kernel(float* x, int n);\n"
        f"void {name}(torch::Tensor x) {{\n"
        "  auto stream = at::cuda::getCurrentCUDAStream();\n"
        f"  {name}_kernel<<<(x.numel() + 255) / 256, 256, 0, stream>>>(x.data_ptr<float>(), x.numel());\n"
        f"  {check}\n"
        "}\n"
    )


def _suggested(root: Path) -> dict[str, str]:
    config = Config(root=root)
    config.select = ["GPU802"]
    found = Linter(config).run([root], jobs=1).findings
    return {f.path: f.message.rsplit("add `", 1)[-1].split("`")[0] for f in found}


def test_the_suggested_launch_check_is_the_file_or_its_siblings_spelling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ops = tmp_path / "csrc" / "sparse"
    ops.mkdir(parents=True)
    for name in ("pack", "apply", "prune"):  # a stable-ABI extension's own launch check
        (ops / f"{name}.cu").write_text(_op(name, "STD_CUDA_KERNEL_LAUNCH_CHECK();"))
    (ops / "mask.cu").write_text(_op("mask", ""))
    # a file writing its own spelling elsewhere keeps it
    own = (
        _op("scale", "")
        + _op("shift", "CUDA_KERNEL_LAUNCH_CHECK_OR_THROW();").split(
            "<ATen/cuda/CUDAContext.h>\n", 1
        )[1]
    )
    (ops / "scale.cu").write_text(own)
    # a sibling's own macro, defined in that source, is no spelling for the others
    (tmp_path / "local").mkdir()
    local = "#define LOCAL_LAUNCH_CHECK() C10_CUDA_CHECK(cudaGetLastError())\n"
    (tmp_path / "local" / "a.cu").write_text(local + _op("a", "LOCAL_LAUNCH_CHECK();"))
    (tmp_path / "local" / "b.cu").write_text(_op("b", ""))
    # a folder far from them: PyTorch's own check
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "lone.cu").write_text(_op("lone", ""))
    assert _suggested(tmp_path) == {
        "csrc/sparse/mask.cu": "STD_CUDA_KERNEL_LAUNCH_CHECK();",
        "csrc/sparse/scale.cu": "CUDA_KERNEL_LAUNCH_CHECK_OR_THROW();",
        "other/lone.cu": "C10_CUDA_KERNEL_LAUNCH_CHECK();",
        "local/b.cu": "C10_CUDA_KERNEL_LAUNCH_CHECK();",
    }


def test_a_discarded_status_is_checked_the_way_the_folder_checks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ops = tmp_path / "ops"
    ops.mkdir()
    (ops / "check.cuh").write_text(
        "#pragma once\n#include <cstdlib>\n"
        "#define RT_CHECK(x) do { if ((x) != cudaSuccess) abort(); } while (0)\n"
    )
    body = (
        '#include "check.cuh"\n__global__ void k(float* x, int n);\n'
        "void {name}(float* d, const float* h, int n) {{\n"
        "  {copy}\n"
        "  k<<<(n + 255) / 256, 256>>>(d, n);\n"
        "  RT_CHECK(cudaGetLastError());\n}}\n"
    )
    copy = "cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice);"
    (ops / "a.cu").write_text(body.format(name="load_a", copy=f"RT_CHECK({copy})"))
    (ops / "b.cu").write_text(body.format(name="load_b", copy=f"RT_CHECK({copy})"))
    # c.cu wraps none of its calls: the folder's RT_CHECK is suggested, not plain C++
    unchecked = body.format(name="load_c", copy=copy).replace(
        "  RT_CHECK(cudaGetLastError());\n", ""
    )
    (ops / "c.cu").write_text(unchecked)
    config = Config(root=tmp_path)
    config.select = ["GPU803"]
    found = Linter(config).run([tmp_path], jobs=1).findings
    assert [(f.path, f.line) for f in found] == [("ops/c.cu", 4)]
    assert "`RT_CHECK(cudaMemcpy(" in found[0].message


def test_an_attribute_before_a_launch_whose_check_is_commented_out_is_reported():
    code = """
#define CHECK_CUDA_ERROR(x) do { if ((x) != cudaSuccess) abort(); } while (0)
template <int D> __global__ void attend(const float* q, float* o);
void attention(const float* q, float* o) {
  CHECK_CUDA_ERROR(cudaFuncSetAttribute(attend<32>, cudaFuncAttributeMaxDynamicSharedMemorySize, 65536));
  attend<32><<<64, 256, 65536>>>(q, o);
  CHECK_CUDA_ERROR(cudaGetLastError());
}
void attention_bwd(const float* q, float* o) {
  cudaFuncSetAttribute(attend<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, 117760);
  attend<64><<<64, 256, 117760>>>(q, o);
  // CHECK_CUDA_ERROR(cudaGetLastError());
}
void attention_fwd(const float* q, float* o) {
  cudaFuncSetAttribute(attend<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, 117760);
  attend<128><<<64, 256, 117760>>>(q, o);
  CHECK_CUDA_ERROR(cudaGetLastError());
}
"""
    found = lint_text(code, "attention.cu")
    assert [f.line for f in found if f.code == "GPU803"] == [10]


ALLOC_CU = """\
#include <cuda_runtime.h>
void* device_alloc(unsigned long n) {
  void* p;
#if USE_CUDA_MALLOC_MANAGED
  cudaMallocManaged(&p, n);
#else
  cudaMalloc(&p, n);
#endif
  return p;
}
"""


def test_managed_memory_under_a_macro_is_reported_once_a_build_or_a_source_defines_it(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    src = tmp_path / "src"
    src.mkdir()
    (src / "alloc.cu").write_text(ALLOC_CU)

    def gpu807() -> list[tuple[str, int]]:
        config = Config(root=tmp_path)
        config.select = ["GPU807"]
        found = Linter(config).run([tmp_path], jobs=1).findings
        return sorted((f.path, f.line) for f in found)

    assert gpu807() == []  # nothing defines it: every build takes the cudaMalloc side
    (tmp_path / "CMakeLists.txt").write_text(
        "option(UNIFIED OFF)\nif(UNIFIED)\n  add_compile_definitions(USE_CUDA_MALLOC_MANAGED=1)\n"
        "endif()\n"
    )
    assert gpu807() == [("src/alloc.cu", 5)]  # a build option passes it
    (tmp_path / "CMakeLists.txt").unlink()
    (src / "config.h").write_text("#pragma once\n#define USE_CUDA_MALLOC_MANAGED 1\n")
    (src / "main.cu").write_text('#include "config.h"\nint run();\n')
    assert gpu807() == [("src/alloc.cu", 5)]  # a header of the tree defines it
