import ast

from gpulint.frontends.python import triton as tt
from gpulint.rule import Invalid, Rule, Valid


class AutotuneConfigExceedsSharedMemory(Rule):
    """
    ## What it does
    Estimates the shared memory of each `triton.Config` in a `@triton.autotune` list over a
    matmul-like kernel (one that calls `tl.dot`) and reports the configs whose estimate exceeds
    the per-block shared-memory limit of a configured hardware target (`[tool.gpulint] targets`
    or `--targets`). With no targets configured the rule is silent.

    The estimate is the one Triton's own matmul pruning uses:
    `num_stages × (BLOCK_M + BLOCK_N) × BLOCK_K × element bytes`, one A tile and one B tile per
    pipeline stage. `BLOCK_M`, `BLOCK_N` and `BLOCK_K` are read from the config's meta-parameters
    (spelled `BLOCK_M`, `BLOCK_SIZE_M`, `BLOCK_M_SIZE`, `BM` or `TILE_M`); `num_stages` defaults
    to Triton's 3. The element size is 1 byte when the kernel names an 8-bit type (fp8, int8),
    else 2 bytes (fp16/bf16), and the message says which; fp32 operands would need twice that,
    so the estimate is a lower bound. Configs whose block sizes cannot be read (a block size from
    a variable, an attention kernel whose K is the head dimension passed at launch) are left
    alone, as are lists the rule cannot evaluate.

    Per-block limits (opt-in maximum): sm_80 166,912 B; sm_86/sm_89 101,376 B; sm_90/sm_100
    232,448 B; sm_120/sm_121 101,376 B (from the one hardware table, `gpulint/data/hardware.toml`).

    Left alone: autotuners with `prune_configs_by=` (an `early_config_prune` hook sees the real
    device and dtype at run time and can drop the config before it is compiled, which is the fix
    this rule asks for), and kernels without `tl.dot`, whose shared memory is not dominated by
    staged tiles.

    ## Why is this bad?
    A config that needs more shared memory than the device has cannot launch. Triton raises
    `OutOfResources` when it is compiled; depending on the Triton version the autotuner skips
    it after paying its compile time, or the run fails. Configs tuned on an H100 (227 KiB per
    block) routinely exceed the 99 KiB of consumer and workstation Blackwell parts (sm_120) and
    DGX Spark (GB10, sm_121), where oversized autotune configs have been reported to crash.

    ## Example
    ```python
    # targets = ["GB10"]
    @triton.autotune(
        configs=[
            triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=3, num_warps=8),
        ],
        key=["M", "N", "K"],
    )
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr):
        ...
        acc += tl.dot(a, b)
    ```

    ## Use instead
    ```python
    def prune_by_smem(configs, named_args, **kwargs):
        limit = triton.runtime.driver.active.utils.get_device_properties(0)["max_shared_mem"]
        return [c for c in configs
                if c.num_stages * (c.kwargs["BLOCK_M"] + c.kwargs["BLOCK_N"])
                * c.kwargs["BLOCK_K"] * named_args["a_ptr"].element_size() <= limit]

    @triton.autotune(configs=CONFIGS, key=["M", "N", "K"],
                     prune_configs_by={"early_config_prune": prune_by_smem})
    @triton.jit
    def matmul_kernel(...):
        ...
    ```

    ## References
    - [triton.autotune (`prune_configs_by`)](https://triton-lang.org/main/python-api/generated/triton.autotune.html)
    - [triton.Config (`num_stages`)](https://triton-lang.org/main/python-api/generated/triton.Config.html)
    - [Triton tutorial: matrix multiplication](https://triton-lang.org/main/getting-started/tutorials/03-matrix-multiplication.html)
    - [CUDA C++ Programming Guide: compute capabilities (shared memory per block)](https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications)
    """

    code = "GPU702"
    name = "autotune-config-exceeds-shared-memory"
    triggers = ("autotune",)
    message = (
        "autotune {config} needs about {estimate:,} B of shared memory ({stages} stages × "
        "({bm} + {bn}) × {bk} × {bytes} B, assuming {why}), more than the {limits}; prune it "
        "(lower num_stages or BLOCK sizes, or add `prune_configs_by`)"
    )
    tags = ("triton", "hardware")

    _KERNEL = """
import triton
import triton.language as tl

@triton.autotune(
    configs=[
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_stages=4, num_warps=4),
        triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=4, num_warps=8),
    ],
    key=["M", "N", "K"],{prune}
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a_ptr), tl.load(b_ptr))
"""
    VALID = [
        Valid(_KERNEL.replace("{prune}", ""), targets=("sm_90",)),
        _KERNEL.replace("{prune}", ""),  # no targets: silent
        Valid(
            _KERNEL.replace("{prune}", '\n    prune_configs_by={"early_config_prune": prune},'),
            targets=("sm_121",),
        ),
    ]
    INVALID = [
        Invalid(_KERNEL.replace("{prune}", ""), targets=("sm_121",)),
        Invalid(_KERNEL.replace("{prune}", ""), targets=("RTX 5090", "H100")),
    ]

    def finish(self, file):
        targets = self.settings.targets
        if not targets:
            return
        reported: set[int] = set()
        for kernel in tt.kernels(file):
            if kernel.autotune is None or tt.prunes_configs(kernel.autotune):
                continue
            if not _calls_dot(file, kernel):
                continue
            configs = tt.autotune_configs(file, kernel.autotune)
            if not configs:
                continue
            nbytes, why = tt.element_bytes(file, kernel)
            if nbytes is None:
                continue
            worst: dict[int, tuple[int, tt.Config, dict[str, int]]] = {}
            for config in configs:
                dims = _dims(config, kernel)
                if dims is None or config.num_stages is None:
                    continue
                estimate = config.num_stages * (dims["M"] + dims["N"]) * dims["K"] * nbytes
                key = id(config.node)
                if key not in worst or estimate > worst[key][0]:
                    worst[key] = (estimate, config, dims)
            for key, (estimate, config, dims) in worst.items():
                over = [t for t in targets if estimate > t.arch.smem_per_block]
                if not over or key in reported:
                    continue
                reported.add(key)
                limits = ", ".join(f"{t.label} limit of {t.arch.smem_per_block:,} B" for t in over)
                yield self.report(
                    file,
                    config.node,
                    config=config.label(),
                    estimate=estimate,
                    stages=config.num_stages,
                    bm=dims["M"],
                    bn=dims["N"],
                    bk=dims["K"],
                    bytes=nbytes,
                    why=why,
                    limits=limits,
                )


def _calls_dot(file, kernel) -> bool:
    return any(
        isinstance(n, ast.Call) and tt.tl_name(file, n) == "dot" for n in ast.walk(kernel.node)
    )


def _dims(config: tt.Config, kernel) -> dict[str, int] | None:
    """BLOCK_M / BLOCK_N / BLOCK_K from the config, else from the kernel's constexpr defaults."""
    dims: dict[str, int] = {}
    for name, value in config.kwargs.items():
        role = tt.block_role(name)
        if role and isinstance(value, int) and not isinstance(value, bool):
            if role in dims and dims[role] != value:
                return None  # two spellings of one role disagree: not a plain matmul
            dims[role] = value
    for name, default in kernel.constexprs.items():
        role = tt.block_role(name)
        if role and role not in dims and isinstance(default, ast.Constant):
            if isinstance(default.value, int):
                dims[role] = default.value
    if set(dims) != {"M", "N", "K"}:
        return None
    return dims
