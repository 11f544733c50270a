"""CUDA rules judged with the project's facts: a device printing helper nothing calls (GPU809),
the suggested launch check spelt as the file or its siblings spell it (GPU802)."""

from __future__ import annotations

from pathlib import Path

from gpulint.config import Config
from gpulint.engine import Linter
from gpulint.frontends.cuda.project import CudaProject, uncalled_device_printers
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
    project = CudaProject(uncalled_printers=found)
    assert CudaProject.from_json(project.to_json()) == project
    # a comment or declaration naming the helper counts as a use (kept reported)
    declared = b"__device__ void seed_tile(float* t, int r, int c);\n"
    assert uncalled_device_printers([*files, ("decl.h", declared)]) == frozenset()
