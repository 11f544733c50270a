from gpulint import claims
from gpulint.claims import EVIDENCE_WORDS, SPEED_WORDS, THROUGHPUT_WORDS
from gpulint.diagnostics import Severity
from gpulint.rule import Invalid
from gpulint.rules._claim_rule import ClaimRule


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

    Left alone (the measurement is there, or is someone else's): code blocks, inline code, block
    quotes and text in quotation marks, HTML/RST comments; every claim of a document that shows
    its measurements somewhere (a results table whose header or cells carry units, a benchmark
    figure, a link to a benchmark or results page: its claims summarise results a reader finds
    there); a claim with its absolute pair or an absolute figure; the caption of a figure (an image right above or below it, or text starting
    `Figure 3:`); text within two units of a results table or a benchmark log; text that points
    at its evidence ("the table below", "see the benchmarks"); a claim whose paragraph, list item,
    neighbour or parent item links a paper, blog post, benchmark, results page, log or docs
    section; claims that are themselves link text; news (dated items such as `[2023/09]`, and
    everything under a News / Updates / Release notes heading); someone else's result named as
    such ("Press et al. report"); expectations and theory ("would be 8 times faster", "the
    optimal 3.87x", "2x theoretical"); rows of a results table that carry both figures; heading
    claims whose section holds the evidence; claims that state their runs count and dispersion
    (those still want the pair: GPU911).

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
