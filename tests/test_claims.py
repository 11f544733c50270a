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


def test_plain_claim_fires_one_finding_saying_what_is_missing():
    [finding] = [f for f in lint_text("Our kernel is 2x faster than PyTorch.\n", "README.md")]
    assert finding.code == "GPU910" and finding.severity.value == "info"
    assert "no absolute pair (X → Y), no hardware and no runs count" in finding.message


def test_never_two_findings_for_one_sentence():
    text = "It is 2x faster and gives a 30% speedup, 45% MFU on GB10.\nNext: 3x faster.\n"
    assert codes(text) == [(1, "GPU912"), (2, "GPU910")]


def test_the_absolute_pair_is_backing():
    assert codes("On an A100 it is 1.6x faster: 107 tok/s vs 66 tok/s.\n") == []
    assert codes("It is 1.6x faster (0.94 → 0.51 ms, 5 runs).\n") == []
    # The pair is the measurement; without it the message says what else is missing too.
    assert (
        codes("Previous record was 3.04 hours, so 2.91 hours is a 4.3% speed improvement.\n") == []
    )
    items = "- Training takes ~1d7h on 32 H100 GPUs.\n- Cached: ~1d11h on 16 H100 GPUs (nearly 2x faster).\n"
    assert codes(items) == []
    [f] = lint_text("On H100 it is 1.6x faster.\n", "README.md")
    assert "no absolute pair (X → Y) and no runs count" in f.message
    # An absolute throughput on named hardware is a measurement.
    assert codes("The kernel achieves 104 TFLOPS on an L20.\n") == []


def test_captions_tables_news_and_linked_sentences_are_left_alone():
    silent = [
        "* TinyChat on RTX 4090 (2.7x faster than FP16):\n\n![demo](figures/4090.gif)\n",
        '<img src="speed.png">\n\nFigure: the fused kernel is 3x faster.\n',
        "Figure 3: the fused kernel is 3x faster than eager.\n",
        "The fused kernel is 3x faster:\n\n| batch | eager | fused |\n|---|---|---|\n| 1 | 3 ms | 1 ms |\n",
        "## Latest News\n\n- Our kernel is now 2x faster.\n",
        "- [2023/09] TinyChat is ~2x faster than the first release on Orin!\n",
        "**[2023/6]** It achieves 1.7-2.9x inference speedup over previous systems.\n",
        "[Instant NGP](https://github.com/nvlabs/instant-ngp) achieves a 5x speedup by fusing.\n",
        "Marlin enables the maximum possible 3.87x speedup up to batch 16.\n",
    ]
    for text in silent:
        assert codes(text) == [], text


def test_a_document_that_shows_its_measurements_backs_its_claims():
    claim = "Our kernel is 2x faster than PyTorch.\n\n"
    assert codes(claim) == [(1, "GPU910")]
    shown = [
        "| batch | eager (ms) | fused (ms) |\n|---|---|---|\n| 1 | 3.1 ms | 1.5 ms |\n",
        "model | peak memory (GB) | toks/s\n---|---|---\nbf16 | 11.07 | 6200\n",
        "![throughput vs batch size](figures/throughput.png)\n",
        "Numbers: see [the benchmarks](benchmarks/README.md).\n",
    ]
    for tail in shown:
        assert codes(claim + "Some other section.\n\n" * 5 + tail) == [], tail


def test_scope_is_the_projects_own_result_documents():
    claim = "Our kernel is 2x faster than PyTorch.\n"
    for name in (
        "README.md",
        "docs/guide.md",
        "benchmarks/attention.md",
        "RESULTS.md",
        "sub/README.rst",
    ):
        assert codes(claim, name) == [(1, "GPU910")], name
    for name in (
        "blog/2024-fast.md",
        "docs/news/v2.md",
        "posts/x.md",
        "CHANGELOG.md",
        "BLOG.md",
        "notes/ideas.md",
        "third_party/cutlass/README.md",
        "deps/AutoGPTQ/README.md",
    ):
        assert codes(claim, name) == [], name
    # Opted in with [tool.gpulint.claims] include.
    findings = lint_text(claim, "blog/2024-fast.md", options={"claims": {"include": ["blog/*"]}})
    assert [f.code for f in findings] == ["GPU910"]


def test_dangling_evidence_is_reported_everywhere(tmp_path):
    linter = _project(tmp_path)
    text = "It is 1.84× faster (median of 3 runs, ±1%).\n<!-- gpulint-evidence: nope.json -->\n"
    for name in ("docs/README.md", "blog/post.md", "CHANGELOG.md"):
        [(_, code, message)] = _lint(linter, text, name)
        assert code == "GPU910" and "does not exist" in message, name
    # No claim at all, an expectation: the broken link is still a defect.
    text = "We would expect 2x.\n<!-- gpulint-evidence: nope.json -->\n"
    assert [c for _, c, _ in _lint(linter, text)] == ["GPU910"]


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
    assert codes("## v1.2: 2x faster attention\n\n- up to 20% faster\n", "docs/history.md") == []


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
    assert codes(text, "docs/guide.rst") == [(14, "GPU910")]


def test_docstring_claims_are_opt_in():
    code = 'def f():\n    """Fast path.\n\n    This is 2x faster than eager.\n    """\n'
    assert [f for f in lint_text(code, "m.py") if f.code.startswith("GPU91")] == []
    opted = {"claims": {"docstrings": True}}
    findings = [f for f in lint_text(code, "m.py", options=opted) if f.code == "GPU910"]
    assert [(f.line, f.col) for f in findings] == [(4, 13)]
    fixture = (
        Path(__file__).resolve().parent.parent / "fixtures/python/gpu910_silent_docstring_claims.py"
    )
    text = fixture.read_text(encoding="utf-8")
    found = [
        (f.line, f.code)
        for f in lint_text(text, "m.py", options=opted)
        if f.code.startswith("GPU91")
    ]
    assert found == [(3, "GPU910"), (10, "GPU910")]


def test_noqa_in_markdown():
    assert codes("Our kernel is 2x faster. <!-- noqa: GPU910 -->\n") == []


def test_docstring_gate_skips_docstrings_without_a_claim_word(monkeypatch):
    """Only a docstring whose own text holds a claim word is analysed; one with the word still
    gives its claim (also with the word in capitals, or split over two lines)."""
    import gpulint.frontends.docs.docstrings as docs

    analysed: list[str] = []
    real = docs.analyse

    def spy(unit, *args, **kwargs):
        analysed.append(unit.text)
        return real(unit, *args, **kwargs)

    monkeypatch.setattr(docs, "analyse", spy)
    opted = {"claims": {"docstrings": True}}
    code = (
        "# speed notes\n"  # the file's prefilter is case-sensitive: it needs one word as written
        'def a():\n    """Returns 3 tensors of shape (2, 4)."""\n\n'
        'def b():\n    """This is 2x FASTER than eager."""\n\n'
        'def c():\n    """Costs 40% less wall-clock\n    time than eager."""\n'
    )
    found = [(f.line, f.code) for f in lint_text(code, "m.py", options=opted)]
    assert found == [(6, "GPU910"), (9, "GPU910")]
    assert not any("tensors" in text for text in analysed)
    assert any("FASTER" in text for text in analysed)


def test_claim_rules_parse_python_only_where_they_can_report():
    """Without the docstring opt-in, a Python file is parsed for the claim rules only where it
    cites evidence (the one finding they can make there); with it, where a claim word occurs."""
    from gpulint.engine import Linter
    from gpulint.testing import example_config

    code = b'"""2x faster than eager."""\n'
    _, parsed = Linter(example_config()).lint_bytes("m.py", code)
    assert parsed is False
    config = example_config()
    config.options.update({"claims": {"docstrings": True}})
    findings, parsed = Linter(config).lint_bytes("m.py", code)
    assert parsed is True and [f.code for f in findings] == ["GPU910"]
    cited = code + b"# gpulint-evidence: .gpulint/evidence/missing.json\n"
    _, parsed = Linter(example_config()).lint_bytes("m.py", cited)
    assert parsed is True
