from gpulint import claims
from gpulint.diagnostics import Severity
from gpulint.rules._claim_rule import ClaimRule


class UnknownPeakDenominator(ClaimRule):
    """
    ## What it does
    Finds %-of-peak figures (`71% of peak`, `45% MFU`, `80% of the roofline`) in documentation
    (Markdown, reStructuredText; docstrings when opted in; the same documents as GPU910) that
    name a GPU of the hardware table whose peak for the dtype in question is unknown or only estimated: every GB10 (DGX Spark) compute
    peak, the RTX PRO 6000 BF16/TF32/FP8 figures, RTX 5090 TF32. With no dtype named, it fires
    when the GPU has no published compute peak at all. It also finds a TFLOP/s figure that is
    exactly a GPU's 2:4-sparse peak quoted as dense ("H100: 1,979 TFLOPS BF16": the dense BF16
    peak is 989), unless the text says sparse. Bandwidth percentages are judged against the
    memory bandwidth, which is known for all listed GPUs (GB10 273 GB/s).

    ## Why is this bad?
    A wrong denominator silently poisons every headline built on it. NVIDIA publishes no dense
    compute peak for GB10: a community measurement exceeds the entered BF16 estimate, so
    88.92 TFLOP/s reads 71.1% against 125 but 41.8% against 212.9. NVIDIA markets 2:4-sparsity
    FLOPS at exactly 2× dense, so a sparse figure entered as dense halves every reported %. A
    denominator that is not known is refused, not guessed.

    ## Example
    ```markdown
    The NVFP4 GEMM reaches 71% of peak BF16 on the DGX Spark.
    ```

    ## Use instead
    ```markdown
    The NVFP4 GEMM reaches 88.9 TFLOP/s BF16 on the DGX Spark (GB10 has no published dense
    peak; bandwidth-bound kernels: 23.5% of its 273 GB/s).
    ```

    ## References
    - [NVIDIA H100 product page and datasheet (peak figures marked "with sparsity" are 2× the dense ones)](https://www.nvidia.com/en-us/data-center/h100/)
    - [Nsight Systems user guide: measuring achieved throughput](https://docs.nvidia.com/nsight-systems/UserGuide/)
    """

    code = "GPU912"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    claim_kind = claims.DENOMINATOR
    name = "unknown-peak-denominator"
    severity = Severity.WARNING
    language = ("markdown", "python")
    # A %-of-peak figure names its peak/roofline/MFU; a quoted peak is in FLOPS.
    triggers = (
        "eak",
        "EAK",
        "oofline",
        "MFU",
        "HFU",
        "SOL",
        "of light",
        "of-light",
        "FLOP",
        "flop",
        "Flop",
    )
    message = "%-of-peak figure against an unknown denominator"
    tags = ("claims", "docs", "roofline")

    VALID = [
        "The GEMM reaches 79% of peak BF16 on H100 (776 of 989 TFLOP/s).\n",
        "The dequant kernel reaches 23.5% of the GB10's 273 GB/s peak bandwidth.\n",
        "H100 offers 1,979 TFLOPS of FP8 compute.\n",
        "H100 offers 1,979 TFLOPS BF16 with 2:4 sparsity.\n",
    ]
    INVALID = [
        "The kernel reaches 71% of peak BF16 on the DGX Spark.\n",
        "H100 delivers 1,979 TFLOPS BF16.\n",
        "We measured 45% MFU on GB10 in bf16.\n",
    ]
