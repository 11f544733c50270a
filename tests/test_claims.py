"""Claims in docs: GPU910 evidence and drift, GPU911 absolute pairs, GPU912 denominators."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from gpulint.config import Config
from gpulint.engine import Linter
from gpulint.testing import lint_text

RECORD = (
    Path(__file__).resolve().parent.parent
    / "fixtures/docs/evidence/20261202T101500Z-attention-4242.json"
)


def codes(text: str, name: str = "README.md", targets=()) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in lint_text(text, name, targets) if f.code.startswith("GPU91")]


def _project(tmp_path: Path) -> Linter:
    folder = tmp_path / ".gpulint" / "evidence"
    folder.mkdir(parents=True)
    shutil.copy(RECORD, folder / RECORD.name)
    config = Config(root=tmp_path)
    config.select = ["GPU"]
    return Linter(config)


def _lint(linter: Linter, text: str, name: str = "docs/README.md") -> list[tuple[int, str, str]]:
    findings, _ = linter.lint_bytes(name, text.encode())
    return [(f.line, f.code, f.message) for f in findings if f.code.startswith("GPU91")]


def test_plain_claim_fires_910_and_911():
    assert codes("Our kernel is 2x faster than PyTorch.\n") == [(1, "GPU910"), (1, "GPU911")]


def test_percent_and_speedup_of_forms():
    assert (1, "GPU910") in codes("It gives a speedup of up to 40% on OPT.\n")
    assert (1, "GPU910") in codes("- 45% speedup fine-tuning OPT.\n")
    assert (1, "GPU910") in codes("Training is 3 times faster with it.\n")


def test_not_claims():
    silent = [
        "```\n2x faster\n```\n",
        "    2x faster (indented code)\n",
        "> 2x faster, says upstream\n",
        'The release calls it "2x faster".\n',
        "Use `2x faster` literally.\n",
        "<!-- 2x faster -->\n",
        "Accuracy improved by 1.5% over the baseline.\n",
        "It uses 58% less memory.\n",
        "Sequences 5-10x longer than in training.\n",
        "We would expect eight GPUs to be 8 times faster.\n",
        "Press et al. report that it trains 1.15x faster.\n",
    ]
    for text in silent:
        assert codes(text) == [], text


def test_runs_and_dispersion_are_evidence_but_911_still_wants_the_pair():
    assert codes("It is 1.8x faster (median of 5 runs, ±2%).\n") == [(1, "GPU911")]
    assert codes("It is 1.8x faster: 0.94 → 0.51 ms, median of 5 runs, ±2%.\n") == []


def test_changelog_is_history():
    assert codes("## v1.2: 2x faster attention\n\n- up to 20% faster\n", "CHANGELOG.md") == []


def test_results_table_row_is_data():
    table = "| case | before | after |\n|---|---|---|\n| decode | 1.35 req/s | 1.57 req/s (1.16x speedup) |\n"
    assert codes(table) == []


def test_cited_record_that_matches_is_silent(tmp_path):
    linter = _lint_setup = _project(tmp_path)
    text = (
        "cuDNN SDPA is 1.84× faster than flash (0.94 → 0.51 ms).\n"
        f"<!-- gpulint-evidence: .gpulint/evidence/{RECORD.name} -->\n"
    )
    assert _lint(_lint_setup, text) == []
    # A link to the record works as well as the tag.
    linked = f"cuDNN SDPA is 1.84× faster (0.94 → 0.51 ms), [evidence](.gpulint/evidence/{RECORD.name}).\n"
    assert _lint(linter, linked) == []


def test_record_relative_to_the_document(tmp_path):
    linter = _project(tmp_path)
    docs = tmp_path / "docs"
    docs.mkdir()
    shutil.copy(RECORD, docs / "record.json")
    text = "cuDNN is 1.84× faster (0.94 → 0.51 ms).\n<!-- gpulint-evidence: record.json -->\n"
    findings, _ = linter.lint_bytes(str(docs / "README.md"), text.encode())
    assert [f for f in findings if f.code == "GPU910"] == []


def test_drifted_ratio_fires(tmp_path):
    linter = _project(tmp_path)
    text = f"cuDNN is 2.5× faster (0.94 → 0.38 ms).\n<!-- gpulint-evidence: .gpulint/evidence/{RECORD.name} -->\n"
    [(line, code, message)] = _lint(linter, text)
    assert (line, code) == (1, "GPU910") and "drifted" in message and "1.84×" in message


def test_drifted_absolute_figure_fires(tmp_path):
    linter = _project(tmp_path)
    text = f"cuDNN takes 0.30 ms against 0.94 ms for flash, 1.84× faster.\n<!-- gpulint-evidence: .gpulint/evidence/{RECORD.name} -->\n"
    [(_, code, message)] = _lint(linter, text)
    assert code == "GPU910" and "0.30 ms" in message


def test_missing_record_fires(tmp_path):
    linter = _project(tmp_path)
    text = "It is 1.84× faster (0.94 → 0.51 ms).\n<!-- gpulint-evidence: .gpulint/evidence/nope.json -->\n"
    [(_, code, message)] = _lint(linter, text)
    assert code == "GPU910" and "does not exist" in message


def test_bench_tag_uses_the_newest_record(tmp_path):
    linter = _project(tmp_path)
    ok = "cuDNN is 1.84× faster (0.94 → 0.51 ms; gpulint bench attention, 5 runs).\n"
    assert _lint(linter, ok) == []
    missing = "Pinned copies are 3.3× faster (16.5 → 54.9 GB/s; gpulint bench h2d).\n"
    [(_, code, message)] = _lint(linter, missing)
    assert code == "GPU910" and "gpulint bench h2d" in message


def test_invalid_record_is_not_evidence(tmp_path):
    linter = _project(tmp_path)
    bad = json.loads(RECORD.read_text())
    bad["variants"][0]["runs"] = 1
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    text = "It is 1.84× faster (0.94 → 0.51 ms).\n<!-- gpulint-evidence: bad.json -->\n"
    [(_, code, message)] = _lint(linter, text)
    assert code == "GPU910" and "no valid" in message


def test_gpu912_denominators():
    assert codes("The GEMM hits 71% of peak BF16 on the DGX Spark.\n") == [(1, "GPU912")]
    assert codes("We reach 45% MFU on GB10.\n") == [(1, "GPU912")]
    assert codes("It reaches 40% of peak BF16 on the RTX PRO 6000.\n") == [(1, "GPU912")]
    assert codes("It reaches 79% of peak BF16 on H100.\n") == []
    assert codes("It reaches 23.5% of GB10's peak memory bandwidth.\n") == []
    assert codes("Apache Spark jobs reach 70% of peak.\n") == []


def test_gpu912_sparse_quoted_as_dense():
    assert codes("H100 peak: 1,979 TFLOPS BF16.\n") == [(1, "GPU912")]
    assert codes("H100 peak: 1,979 TFLOPS FP8.\n") == []
    assert codes("H100 peak: 1,979 TFLOPS BF16 with 2:4 sparsity.\n") == []
    assert codes("H100 peak: 989 TFLOPS BF16.\n") == []


def test_rst_blocks():
    text = (
        "Title\n=====\n\n.. code-block:: python\n\n    x = 1  # 4x faster\n\n"
        "Literal::\n\n    10x speedup\n\n.. note::\n\n   Pinning gives a 2x speedup.\n"
    )
    assert codes(text, "guide.rst") == [(14, "GPU910"), (14, "GPU911")]


def test_docstring_claim_position():
    code = 'def f():\n    """Fast path.\n\n    This is 2x faster than eager.\n    """\n'
    findings = [f for f in lint_text(code, "m.py") if f.code == "GPU910"]
    assert [(f.line, f.col) for f in findings] == [(4, 13)]


def test_noqa_in_markdown():
    assert codes("Our kernel is 2x faster. <!-- noqa: GPU910, GPU911 -->\n") == []
