"""The rule page: one text for `gpulint rule`, docs/rules/ and SARIF help.markdown."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpulint.cli import main
from gpulint.docsgen import expected_files
from gpulint.reporters import REPORTERS
from gpulint.rule import Invalid, all_rules, rule_by_code
from gpulint.ruledocs import bench_figures, noqa_comment, rule_hover, rule_markdown, rule_text

RULES = [pytest.param(r, id=r.code) for r in all_rules()]
RECORDED_BENCHES = {
    "sync", "h2d", "attention", "train-step", "matmul", "copy", "dataloader", "graph-break",
    "recompile", "no-grad", "anomaly", "eval-mode", "ddp-no-sync", "graph-capture",
    "launch-blocking", "device-per-rank", "int32-offset",
}  # fmt: skip


@pytest.mark.parametrize("rule", RULES)
def test_page_has_every_part(rule):
    page = rule_markdown(rule)
    assert page.startswith(f"# {rule.code} `{rule.name}`\n")
    for heading in (
        "What it does",
        "Why is this bad?",
        "Example",
        "Use instead",
        "References",
        "Autofix",
        "Examples that fire",
        "Examples that stay silent",
        "Suppressing it",
    ):
        assert f"\n## {heading}\n" in page, f"{rule.code}: no '{heading}' section"
    assert f"**Severity**: {rule.severity.value}" in page
    assert noqa_comment(rule.languages()[0], rule.code) in page
    assert "https://" in page.split("## References", 1)[1]
    if rule.bench:
        assert f"gpulint bench {rule.bench}" in page.split("## Measured cost", 1)[1]
    # Every example is in the page, in a fence.
    for example in rule.INVALID:
        case = example if isinstance(example, Invalid) else Invalid(example)
        assert case.code.strip("\n") in page
        if case.fixed:
            assert case.fixed.strip("\n") in page
    # Fences are balanced.
    fences = re.findall(r"^(`{3,})", page, flags=re.MULTILINE)
    assert len(fences) % 2 == 0


def test_bench_figures_cover_the_recorded_benches():
    figures = bench_figures()
    assert set(figures) == RECORDED_BENCHES
    for name, figure in figures.items():
        # The H200 reference set; a bench added later may have run on the H100 the pool gave.
        assert figure.device in ("NVIDIA H200", "NVIDIA H100 80GB HBM3") and figure.date
        assert figure.config
        assert figure.variants and all(v[1] > 0 for v in figure.variants)
        # A run of the H200 reference set (h200/, or its same-day rerun h200-rerun/), or of a
        # bench added later (h200-YYYYMMDD/, h100-YYYYMMDD/).
        assert figure.record.startswith(
            (
                "tests/runtime/data/h200/",
                "tests/runtime/data/h200-rerun/",
                "tests/runtime/data/h200-2",
                "tests/runtime/data/h100-2",
            )
        )
        assert f"-{name}-" in figure.record


def test_page_quotes_the_h200_figure():
    rule = next((r for r in all_rules() if r.bench in bench_figures()), None)
    if rule is None:
        pytest.skip("no rule cites a bench with a recorded figure")
    page = rule_markdown(rule)
    figure = bench_figures()[rule.bench]
    assert "NVIDIA H200" in page and figure.summary in page
    for label, _, unit, _ in figure.variants:
        assert f"| {label} |" in page and unit in page


def test_bench_without_a_figure_says_so(monkeypatch):
    rule = rule_by_code("GPU201")

    class Cited(rule):  # a rule citing a bench with no recorded figure
        bench = "nccl"

    page = rule_markdown(Cited)
    assert "No H200 figure is recorded" in page and "gpulint bench nccl" in page


def test_one_text_in_three_places(capsys, tmp_path):
    rule = all_rules()[0]
    assert main(["rule", rule.code]) == 0
    printed = capsys.readouterr().out
    assert printed == rule_markdown(rule) + "\n"  # print() adds the final newline
    assert expected_files()[f"{rule.code}.md"] == rule_markdown(rule)
    sarif = json.loads(REPORTERS["sarif"]([], files_checked=0, root=tmp_path, read_text=None))
    descriptors = {d["id"]: d for d in sarif["runs"][0]["tool"]["driver"]["rules"]}
    assert descriptors[rule.code]["help"]["markdown"] == rule_markdown(rule)


def test_plain_text_keeps_code_comments():
    rule = rule_by_code("GPU201")
    text = rule_text(rule)
    assert "# torch.cuda.amp.autocast is deprecated" in text  # a comment inside an example
    assert "\nWhat it does\n" in text and "**" not in text.split("```")[0]


def test_hover_is_short_and_says_how_to_suppress():
    rule = rule_by_code("GPU201")
    hover = rule_hover(rule, "message here")
    assert hover.startswith("**GPU201**") and "message here" in hover
    assert "# noqa: GPU201" in hover and "Examples that fire" not in hover


def test_noqa_comment_per_language():
    assert noqa_comment("python", "GPU101") == "# noqa: GPU101"
    assert noqa_comment("cuda", "GPU802") == "// noqa: GPU802"
    assert noqa_comment("markdown", "GPU910") == "<!-- noqa: GPU910 -->"


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("bench", sorted(RECORDED_BENCHES))
def test_figures_are_the_records_medians(bench):
    """No invented numbers: every figure is a median of the bench's H200 record, and back."""
    figure = bench_figures()[bench]
    path = ROOT / figure.record
    if not path.is_file():
        pytest.skip(f"record {figure.record} not in this checkout")
    record = json.loads(path.read_text())
    assert record["bench"] == bench and record["device"]["name"] == figure.device
    assert record["timestamp"].startswith(figure.date)
    medians = [v["median"] for v in record["variants"] if v.get("status") == "ok"]

    def close(a, b):
        return abs(a - b) <= 0.005 * max(abs(a), abs(b))

    for label, value, _, spread in figure.variants:
        match = [v for v in record["variants"] if v.get("median") and close(v["median"], value)]
        match.sort(key=lambda v: abs(v["median"] - value))  # medians within 0.5% of each other
        assert match, f"{bench}: {label} = {value} is no median of the record"
        if spread is not None:
            assert abs(match[0]["spread"] - spread) < 0.006 or close(match[0]["spread"], spread)
    for median in medians:
        assert any(close(median, v[1]) for v in figure.variants), f"{bench}: {median} not shown"


def test_measured_cost_leads_with_the_run_that_shows_the_effect():
    # A null run is context, after the run that shows what the rule is about.
    for name, figure in bench_figures().items():
        assert "no difference" not in figure.summary, name
    page = rule_markdown(rule_by_code("GPU101"))
    section = page.split("## Measured cost", 1)[1].split("\n## ", 1)[0]
    assert section.index("cost 15% per step") < section.index("no difference")
