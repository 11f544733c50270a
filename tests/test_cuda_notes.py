"""GPU800 (CUDA lines the parser could not read) is a per-file note on the analysis, not a
finding: never silent, never counted, never the exit status; the same in every output."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

BROKEN = """\
__global__ void scale(float* x) {}
void run(float* x, int n) {
  scale<<<(n + 255) / 256, 256>>>(x)  ))) }}} template <<< ;
}
"""
CLEAN_WITH_FINDING = """\
__global__ void scale(float* x) {}
void run(float* x) {
  scale<<<1, 256>>>(x);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return;
  cudaMalloc(&x, 64);
}
"""


def _check(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "broken.cu").write_text(BROKEN)
    return tmp_path


def test_text_output_prints_the_note_on_stderr_and_exits_clean(tree):
    proc = _check(tree, "broken.cu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GPU800" not in proc.stdout
    assert "All checks passed" in proc.stdout
    [note] = [line for line in proc.stderr.splitlines() if "GPU800" in line]
    assert note.startswith("broken.cu:2:1: note: GPU800 3 lines not analysed")


def test_quiet_prints_no_note(tree):
    proc = _check(tree, "--quiet", "broken.cu")
    assert proc.returncode == 0
    assert "GPU800" not in proc.stdout + proc.stderr


def test_json_lists_the_note_under_diagnostics_not_findings(tree):
    proc = _check(tree, "--format", "json", "broken.cu")
    assert proc.returncode == 0
    payload = json.loads(proc.stdout)
    assert payload["findings"] == []
    [note] = payload["diagnostics"]
    assert (note["path"], note["line"], note["code"], note["level"]) == (
        "broken.cu",
        2,
        "GPU800",
        "note",
    )


def test_sarif_carries_the_note_as_a_tool_execution_notification(tree):
    proc = _check(tree, "--format", "sarif", "broken.cu")
    assert proc.returncode == 0
    run = json.loads(proc.stdout)["runs"][0]
    assert run["results"] == []
    [note] = run["invocations"][0]["toolExecutionNotifications"]
    assert note["level"] == "note"
    assert note["associatedRule"]["id"] == "GPU800"
    rules = run["tool"]["driver"]["rules"]
    assert rules[note["associatedRule"]["index"]]["id"] == "GPU800"
    location = note["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "broken.cu"
    assert location["region"]["startLine"] == 2


def test_findings_elsewhere_still_set_the_exit_status(tree):
    (tree / "leak.cu").write_text(CLEAN_WITH_FINDING)
    proc = _check(tree, "--format", "json", ".")
    assert proc.returncode == 1
    payload = json.loads(proc.stdout)
    assert {f["code"] for f in payload["findings"]} == {"GPU803"}
    assert [d["code"] for d in payload["diagnostics"]] == ["GPU800"]


def test_a_deselected_note_is_not_printed(tree):
    proc = _check(tree, "--ignore", "GPU800", "broken.cu")
    assert "GPU800" not in proc.stderr


def test_stdin_text_output_prints_the_note_on_stderr(tree):
    proc = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--stdin-filename", "broken.cu", "-"],
        cwd=tree,
        input=BROKEN,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: GPU800" in proc.stderr and "GPU800" not in proc.stdout
