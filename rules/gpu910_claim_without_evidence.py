from gpulint.rules._claim_rule import claim_findings

from gpulint.claims import SPEED_WORDS, THROUGHPUT_WORDS
from gpulint.diagnostics import Severity
from gpulint.rule import Invalid, Rule


class ClaimWithoutEvidence(Rule):
    """
    ## What it does
    Finds speedup and throughput claims in documentation (Markdown, reStructuredText, and
    Python docstrings): `3.2× faster`, `30% speedup`, `up to 2x higher throughput`, `achieves
    700 TFLOPS`, that cite no evidence. A claim that cites a `gpulint bench` record is checked
    against it: a record that does not exist, or a quoted figure more than 10% away from what the
    record measured (a ratio, or an absolute figure in a comparable unit), is a finding too.

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

    Left alone: code blocks, inline code, block quotes and text in quotation marks (someone
    else's words), HTML/RST comments, headings of changelogs (they quote upstream releases),
    claims that link the paper, blog post or benchmark they come from, claims that are
    themselves the text of a link (a model card, a results page, a `:ref:` to the benchmark
    section, a table-of-contents anchor), someone else's result named as such ("Press et al.
    report", "torchtitan reports 25% speedups"), expectations and theory ("we would expect 8 GPUs
    to be 8 times faster", "we should see ~1.6x", "2x theoretical throughput"), rows of a results
    table that carry both figures, heading claims whose section holds the evidence, list items
    whose nested items hold it, and claims that state their runs count and dispersion
    ("median of 5 runs, ±2%").

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
    name = "claim-without-evidence"
    severity = Severity.WARNING
    language = ("markdown", "python")
    triggers = SPEED_WORDS + THROUGHPUT_WORDS
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
        "The new allocator achieves 700 TFLOPS on H100.\n",
        Invalid(
            "Our fused kernel is 2x faster.\n<!-- gpulint-evidence: .gpulint/evidence/missing.json -->\n"
        ),
    ]

    def finish(self, file):
        return claim_findings(self, file)
