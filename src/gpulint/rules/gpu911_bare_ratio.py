from gpulint import claims
from gpulint.claims import SPEED_WORDS
from gpulint.diagnostics import Severity
from gpulint.rules._claim_rule import ClaimRule


class BareRatio(ClaimRule):
    """
    ## What it does
    Finds a speed ratio, such as `2.3× faster` or `30% speedup`, that states its runs and
    dispersion ("median of 5 runs, ±2%") or cites a `gpulint bench` record, but gives no absolute
    pair next to it: no two figures with units (`1.21 s/step → 0.52 s/step`, `from 120 ms to 52
    ms`) in the same paragraph, list item or table row (a table row whose other cells hold the
    two figures counts, and so does a list item whose figure pairs with the item above it: `-
    BF16: 16.9 ms` then `- FP8: 10.3 ms (1.64x faster)`). A ratio with no evidence at all is
    GPU910's, whose message names the missing pair too: one finding per sentence, never both.
    Same documents as GPU910 (see its `[tool.gpulint.claims]` options).

    ## Why is this bad?
    A bare ratio hides both what was measured and how big it is: 2× of 10 µs is not 2× of a
    10-minute epoch, and a ratio cannot be checked against a later run or another machine. The
    absolute pair lets a reader see the baseline, spot the wrong denominator, and repeat the
    measurement.

    ## Example
    ```markdown
    Pinned memory makes host-to-device copies 3.3× faster.
    ```

    ## Use instead
    ```markdown
    Pinned memory makes host-to-device copies 3.3× faster (16.5 → 54.9 GB/s, 256 MiB, 5 runs).
    ```

    ## References
    - [CUDA C++ Best Practices Guide: timing and bandwidth](https://docs.nvidia.com/cuda/pdf/CUDA_C_Best_Practices_Guide.pdf)
    - [PyTorch benchmark utilities (torch.utils.benchmark)](https://docs.pytorch.org/docs/stable/benchmark_utils.html)
    """

    code = "GPU911"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    claim_kind = claims.BARE_RATIO
    name = "bare-ratio"
    severity = Severity.INFO
    language = ("markdown", "python")
    triggers = SPEED_WORDS
    message = "bare ratio without the absolute pair"
    tags = ("claims", "docs")

    VALID = [
        "Pinned memory makes copies 3.3× faster (16.5 → 54.9 GB/s).\n",
        "| kernel | eager | fused | speedup |\n|---|---|---|---|\n| attention | 0.94 ms | 0.51 ms | 1.8x faster |\n",
        "It trains 2x faster, as in the [paper](https://arxiv.org/abs/2205.14135).\n",
    ]
    INVALID = [
        "Pinned memory makes copies 3.3× faster (median of 5 runs, ±2%).\n",
        "The cache gives a 30% speedup on retrieval (10 runs, std 1%).\n",
    ]
