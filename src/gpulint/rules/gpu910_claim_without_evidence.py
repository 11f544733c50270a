from typing import ClassVar

from gpulint import claims
from gpulint.claims import EVIDENCE_WORDS, SPEED_WORDS, THROUGHPUT_WORDS
from gpulint.diagnostics import Severity
from gpulint.rule import Exemption, Invalid
from gpulint.rules._claim_rule import ClaimFile, ClaimRule, claim_findings, file_claims


class ClaimWithoutEvidence(ClaimRule):
    """
    ## What it does
    Finds speedup and throughput claims in a project's result documents, `3.2× faster`, `30%
    speedup`, `up to 2x higher throughput`, `achieves 700 TFLOPS`, that are not backed where
    they are made: no absolute pair (`0.94 → 0.51 ms`, `107 vs 66 tok/s`, or an absolute figure
    such as `115 TFLOPS`), no cited record, and nothing in the document that shows measurements.
    One finding per sentence, saying what is missing
    (the pair, the hardware, the runs count). A claim that cites a `gpulint bench` record is
    checked against it: a quoted figure more than 10% away from what the record measured (a
    ratio, or an absolute figure in a comparable unit) is a warning. A cited record that does
    not exist (or holds no valid record) is a warning in every document, whatever its scope.

    Which documents: by default the project's own result documents: READMEs, files under
    `docs/` (or `doc/`, `documentation/`), `benchmark(s)/`, `bench/`, `results/`, `perf/`, and
    files named like `RESULTS.md`, `benchmarks.md`, `LEADERBOARD.md`. Not blog, news or posts
    trees, changelogs and release notes, vendored copies of other projects (`third_party/`,
    `vendor/`, `deps/`, `dependencies/`), nor Python docstrings. Opt them in:

    ```toml
    [tool.gpulint.claims]
    include = ["blog/**", "CHANGELOG.md"]   # globs, relative to the pyproject.toml
    docstrings = true                       # judge claims in module/class/function docstrings
    ```

    Evidence references, in the claim's paragraph, list item or table row (or on the line right
    after it):
    - a link to the record: `[evidence](.gpulint/evidence/20261202T101500Z-attention-4242.json)`
      (any link to a `.json` under `gpulint/evidence/`, or a `.json` link whose text says
      `evidence`; RST: `` `evidence <.gpulint/evidence/...json>`_ ``);
    - a tag: `<!-- gpulint-evidence: PATH -->` (Markdown), `.. gpulint-evidence: PATH` (RST) or
      `gpulint-evidence: PATH` (docstrings);
    - the bench named in the text: `(gpulint bench attention, 5 runs, median)`: the newest
      record of that bench under `.gpulint/evidence/` backs the claim.
    A relative PATH is resolved against the document's directory, then against the project root
    (the directory of the pyproject.toml holding `[tool.gpulint]`).

    Code blocks, inline code, block quotes, text in quotation marks and HTML/RST comments are
    not read as claims.

    ## Why is this bad?
    A speedup claim with no evidence cannot be checked, and it outlives the code it described.
    "≥3 runs, median + dispersion, never a single run" is the minimum for a number anyone should
    repeat; a record written by `gpulint bench` carries the command, the device, the versions and
    every sample. Claims drift: the README says 2× while the last measurement says 1.4×. Linking
    the record lets gpulint notice.

    ## Example
    ```markdown
    Our fused attention is 2.0× faster than the eager baseline (0.94 → 0.47 ms).
    ```

    ## Use instead
    ```markdown
    Our fused attention is 1.8× faster than the eager baseline (0.94 → 0.51 ms, 5 runs).
    <!-- gpulint-evidence: .gpulint/evidence/20261202T101500Z-attention-4242.json -->
    ```

    ## References
    - [CUDA C++ Best Practices Guide: timing and performance metrics](https://docs.nvidia.com/cuda/pdf/CUDA_C_Best_Practices_Guide.pdf)
    - [triton.testing.do_bench: medians over repeated runs](https://triton-lang.org/main/python-api/generated/triton.testing.do_bench.html)
    """

    code = "GPU910"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    claim_kind = claims.UNSUPPORTED
    name = "claim-without-evidence"
    severity = Severity.INFO  # advice; a dangling or drifted citation is a warning
    language = ("markdown", "python")
    triggers = SPEED_WORDS + THROUGHPUT_WORDS + EVIDENCE_WORDS
    message = "performance claim without evidence"
    tags = ("claims", "docs")

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "absolute-pair",
            "A claim with its absolute pair (`0.94 → 0.51 ms`, `107 vs 66 tok/s`) or an absolute "
            "figure (`115 TFLOPS`), in its text or its section (a heading's claim): the "
            "measurement is there.",
            "Our fused attention is 1.8x faster than the eager baseline (0.94 → 0.51 ms).\n",
        ),
        Exemption(
            "runs-and-dispersion",
            "A claim that states its runs count and dispersion: measured (the absolute pair it "
            "still wants is GPU911's).",
            "Our kernel is 2x faster than PyTorch (median of 5 runs, spread ±2%).\n",
        ),
        Exemption(
            "results-table-row",
            "A row of a results table that carries both figures: the row is the data.",
            "| Kernel | Eager | Fused | Speedup |\n|---|---|---|---|\n"
            "| attention | 0.94 ms | 0.51 ms | 1.8x faster |\n",
        ),
        Exemption(
            "figure-caption",
            "The caption of a figure (an image right above or below it, or text starting "
            "`Figure 3:`): the figure is the evidence.",
            "![latency](latency.png)\n\nOur kernel is 2x faster than PyTorch.\n",
        ),
        Exemption(
            "beside-a-results-table",
            "Text within two units of a results table or a benchmark log: it summarises the "
            "figures beside it.",
            "Our kernel is 2x faster than PyTorch.\n\n| Batch | PyTorch | Ours |\n|---|---|---|\n"
            "| 1 | 10 ms | 5 ms |\n",
        ),
        Exemption(
            "document-shows-measurements",
            "Every claim of a document that shows its measurements somewhere (a results table "
            "whose header or cells carry units, a benchmark figure, a link to a benchmark or "
            "results page): its claims summarise results a reader finds there.",
            "# Fast kernels\n\nOur kernel is 2x faster than PyTorch.\n\nInstall it with pip.\n\n"
            "It runs on Linux.\n\nIt needs CUDA 12.\n\n| Batch | PyTorch | Ours |\n|---|---|---|\n"
            "| 1 | 10 ms | 5 ms |\n",
        ),
        Exemption(
            "news",
            "News: dated items (`[2023/09]`) and everything under a News / Updates / Release "
            "notes heading, which announce (and link) results.",
            "## News\n\n- [2024/03] Our kernel is now 2x faster than PyTorch.\n",
        ),
        Exemption(
            "cites-a-source",
            "Someone else's result named as such (`Press et al. report`, `according to`), or a "
            "claim whose paragraph, list item, neighbour or parent item links a paper, blog "
            "post, benchmark, results page, log or docs section.",
            "According to the authors, the kernel is 2x faster than the baseline.\n",
        ),
        Exemption(
            "linked-sentence",
            "A claim whose own sentence links where its figures are (a results page, the "
            "project that measured it): the reader is one click from the evidence.",
            "Our kernel is 2x faster than PyTorch on [our cluster](docs/cluster.md).\n",
        ),
        Exemption(
            "points-at-evidence",
            "Text that points at its evidence (`the table below`, `see the benchmarks`).",
            "Our kernel is 2x faster than PyTorch, as the table below shows.\n",
        ),
        Exemption(
            "expectation-or-theory",
            "Expectations and theory (`would be 8 times faster`, `the optimal 3.87x`, `2x "
            "theoretical`), or a figure the sentence says someone else reported: not a "
            "measurement the project claims.",
            "With the fused kernel we expect it to run 4 times faster.\n",
        ),
        Exemption(
            "link-text",
            "A claim that is itself the text of a link: the link is its source.",
            "- [3x faster attention](https://example.com/blog/attention)\n",
        ),
    )

    VALID = [
        "The cache took retrieval from 2050.9 to 66.2 ms/query (median of 5 runs, spread ±1.2%).\n",
        "```\nthis is 2x faster\n```\n",
        "> FlashAttention is 2x faster than the baseline.\n",
        'Upstream says it is "2x faster" in their notes.\n',
        "Use `torch.compile` for a 2x speedup, see the [blog post](https://pytorch.org/blog/accelerating-generative-ai/).\n",
    ]
    INVALID = [
        "Our fused kernel is 2x faster than PyTorch.\n",
        "- 45% speedup fine-tuning OPT at low cost.\n",
        "- Up to 3x higher throughput with the new scheduler.\n",
        Invalid(
            "Our fused kernel is 2x faster.\n<!-- gpulint-evidence: .gpulint/evidence/missing.json -->\n"
        ),
    ]

    def finish(self, file: ClaimFile):
        # The analysis (gpulint.claims) says why it spared a claim; the rule names the case.
        for claim, _ in file_claims(self, file):
            if claim.kind == claims.SPARED:
                self._spared(claim.spared)
        return claim_findings(self, file)

    def _spared(self, why: str | None) -> None:
        self.exempt("absolute-pair", why == claims.MEASURED)
        self.exempt("runs-and-dispersion", why == claims.RUNS_AND_DISPERSION)
        self.exempt("results-table-row", why == claims.RESULTS_ROW)
        self.exempt("figure-caption", why == claims.BESIDE_FIGURE)
        self.exempt("beside-a-results-table", why == claims.BESIDE_TABLE)
        self.exempt("document-shows-measurements", why == claims.DOCUMENT_MEASURES)
        self.exempt("news", why == claims.NEWS)
        self.exempt("cites-a-source", why == claims.CITES_SOURCE)
        self.exempt("linked-sentence", why == claims.LINKED_SENTENCE)
        self.exempt("points-at-evidence", why == claims.POINTING)
        self.exempt("expectation-or-theory", why == claims.EXPECTATION)
        self.exempt("link-text", why == claims.LINK_TEXT)
