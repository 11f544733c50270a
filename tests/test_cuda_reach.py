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
