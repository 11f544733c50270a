import ast
from typing import ClassVar

from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile
from gpulint.hardware import assumed_targets
from gpulint.rule import Exemption, Invalid, Rule, Valid


class AutotuneConfigExceedsSharedMemory(Rule):
    """
    ## What it does
    Estimates the shared memory of each `triton.Config` in a `@triton.autotune` list over a
    matmul-like kernel (one that calls `tl.dot`) and reports the configs whose estimate exceeds
    the per-block shared-memory limit of a configured hardware target (`[tool.gpulint] targets`
    or `--targets`). With no targets configured, the GPU of this machine is the target where the
    project names it: `gpulint probe --json > .gpulint/probe.json`, or the device of bench
    records under `.gpulint/evidence/` (one GPU; several different ones: none); the message
    says so. Otherwise it assumes the common datacenter GPUs, A100 (sm_80, 166,912 B per
    block) and H100 (sm_90, 232,448 B), and reports only configs that exceed both: each has the
    most shared memory of the GPUs that pipeline as it does, so such a config fits on no GPU of
    the hardware table; the message names the assumed targets and how to set `targets`.

    The estimate is every tile that feeds a `tl.dot` in the kernel's loop, once per buffer of
    the software pipeline, plus the dot operands loaded before the loop, once:
    `buffers × Σ tiles × element bytes` (+ `Σ tiles loaded once × element bytes`). A gated MLP
    that loads the input, the gate weight and the up weight per K step counts three tiles; an
    attention kernel counts its K and V tiles per buffer and its Q tile once. The tiles are
    found by following each dot operand back to its `tl.load` (through names, conversions and
    arithmetic) and their shapes from the `tl.arange` sizes of the pointer (or a block
    pointer's `block_shape`). `buffers` depends on the target, as measured with Triton (the
    compiled kernel's `metadata.shared`): Hopper and datacenter Blackwell (sm_90, sm_100) keep
    `num_stages` buffers when `BLOCK_M >= 64` (the wgmma/tcgen05 pipelines); the cp.async
    pipeline of sm_80/86/89/120/121, and of any target when `BLOCK_M < 64`, keeps
    `num_stages - 1` (at least one). So a tutorial matmul at `BLOCK 128×256×64,
    num_stages=3` in fp16 is 98,304 B on sm_121 (fits) and 147,456 B on sm_90 (fits);
    `num_stages=4` is 147,456 B on sm_121 (does not fit). Triton's own `early_config_prune`
    uses `num_stages` for every target, which over-counts by one stage off Hopper.

    The estimate is checked against Triton's compiler in the test suite
    (`tests/test_triton_oracle.py`: 20 autotune configs of a matmul, a gated MLP, a
    blockwise-scaled matmul and an attention kernel, cross-compiled for sm_80, sm_90, sm_120
    and sm_121 with Triton 3.9): equal in 72 of 80 cases, and at most 512 B under the compiled
    size where scale vectors are loaded beside the operands (docs/triton-oracle.md has the
    table). Where the tiles cannot be read, the estimate falls back to the A and B tiles of a
    matmul, `buffers × (BLOCK_M + BLOCK_N) × BLOCK_K × element bytes`.

    `BLOCK_M`, `BLOCK_N` and `BLOCK_K` are read from the config's meta-parameters (spelled
    `BLOCK_M`, `BLOCK_SIZE_M`, `BLOCK_M_SIZE`, `BM` or `TILE_M`) or the kernel's constexpr
    defaults; `num_stages` defaults to Triton's 3. Configs written as list comprehensions over
    literal lists, module-level lists and `+` of lists are expanded. The element size is 1 byte
    when the kernel or its file names an 8-bit type (fp8, int8), else 2 bytes (fp16/bf16), and
    the message says which; fp32 operands would need twice that, so the estimate is a lower
    bound. The epilogue's own scratch space (converting the
    accumulator's layout before the store) and 1-D vectors loaded beside the operands are not
    counted.

    ## Why is this bad?
    A config that needs more shared memory than the device allows per block cannot launch.
    Triton raises `OutOfResources` when it compiles it; recent autotuners catch that and drop
    the config after paying its compile time on every new key, older ones and direct launches
    fail. Configs tuned on an H100 (227 KiB per block) routinely exceed the 99 KiB of Ada,
    consumer and workstation Blackwell (sm_120) and DGX Spark (GB10, sm_121); on GB10 such
    configs have been reported to crash (an unverified field note).

    ## Example
    ```python
    # targets = ["GB10"]
    @triton.autotune(
        configs=[
            triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=4, num_warps=8),
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
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "autotune-config-exceeds-shared-memory"
    triggers = ("autotune",)
    message = (
        "autotune config exceeds shared memory: {details} (assuming {why}); prune it (lower "
        "num_stages or BLOCK sizes for that target, or add `prune_configs_by`)"
    )
    everywhere_message = (
        "autotune config exceeds shared memory on every GPU: {config} needs about {details}; "
        "no `targets` are configured, so {targets} are assumed: no GPU has more shared memory "
        "for its kind of pipeline (set `targets = [...]` under [tool.gpulint] or `--targets` to "
        "check yours; assuming {why}); prune it (lower num_stages or BLOCK sizes, or add "
        "`prune_configs_by`)"
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
        _KERNEL.replace("{prune}", ""),  # no targets: fits on an H100, silent
    ]
    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "configs-pruned",
            "An autotune with `prune_configs_by`: the project prunes its configs for the device "
            "it runs on.",
            Valid(
                _KERNEL.replace("{prune}", '\n    prune_configs_by={"early_config_prune": prune},'),
                targets=("sm_121",),
            ),
        ),
        Exemption(
            "packed-sub-byte",
            "A kernel with packed sub-byte operands (int4/nf4/fp4 named in its file, or any `>>` "
            "unpacking): its tile sizes in bytes cannot be read from its block sizes.",
            fixture="triton/gpu702_silent_int4_dequant_sm121.py",
        ),
        Exemption(
            "configs-not-evaluable",
            "An autotune list the rule cannot evaluate (built by a helper function): no config "
            "to estimate.",
            Valid(
                """
import triton
import triton.language as tl

def get_configs():
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=4)
            for m in (64, 128)]

@triton.autotune(configs=get_configs(), key=["M", "N", "K"])
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        acc += tl.dot(tl.load(a_ptr), tl.load(b_ptr))
""",
                targets=("sm_121",),
            ),
        ),
        Exemption(
            "block-sizes-unread",
            "A config whose block sizes cannot be read (a block size from a variable, an "
            "attention kernel whose K is the head dimension passed at launch): no estimate.",
            Valid(
                _KERNEL.replace("{prune}", "").replace('"BLOCK_K": 64}', '"BLOCK_K": bk}'),
                targets=("sm_121",),
            ),
        ),
        Exemption(
            "fits-an-assumed-target",
            "With no targets configured or found, a config that fits one of the assumed GPUs "
            "(A100, H100): a finding would rest on a guess of the hardware.",
            fixture="triton/gpu702_silent_no_targets_fits_a_datacenter_gpu.py",
        ),
    )

    INVALID = [
        Invalid(_KERNEL.replace("{prune}", ""), targets=("sm_121",)),
        Invalid(_KERNEL.replace("{prune}", ""), targets=("RTX 5090", "H100")),
    ]

    def finish(self, file: PythonFile):
        targets = self.settings.targets
        local = ""
        assumed = False
        if not targets and self.settings.option("local_gpu", "target") is not None:
            targets = (self.settings.option("local_gpu", "target"),)
            local = f" ({self.settings.option('local_gpu', 'why')})"
        if not targets:
            # None configured or found: a config is reported only where it overflows on every
            # assumed target (so on every GPU of the table), never for one GPU of a guess.
            targets = assumed_targets()
            assumed = True
        reported: set[int] = set()
        for kernel in tt.kernels(file):
            if kernel.autotune is None:
                continue
            if self.exempt("configs-pruned", tt.prunes_configs(kernel.autotune)):
                continue
            if not _calls_dot(file, kernel):
                continue
            configs = tt.autotune_configs(file, kernel.autotune)
            if not configs:
                self.exempt("configs-not-evaluable", True)  # no config to estimate
                continue
            nbytes, why = tt.element_bytes(file, kernel)
            if nbytes is None:
                self.exempt("packed-sub-byte", True)  # the tiles' bytes are unknowable
                continue
            if assumed:
                yield from self._everywhere(file, kernel, configs, targets, nbytes, why, reported)
                continue
            # Per config node (a comprehension yields many) and target: the largest estimate.
            worst: dict[int, dict[str, tuple[int, str, tt.Config]]] = {}
            for config in configs:
                for target in targets:
                    found = _estimate(file, kernel, config, target.arch, nbytes)
                    if found is None:
                        self.exempt("block-sizes-unread", True)
                        continue
                    per_target = worst.setdefault(id(config.node), {})
                    if found[0] > per_target.get(target.label, (-1,))[0]:
                        per_target[target.label] = (*found, config)
            for key, per_target in worst.items():
                if key in reported:
                    continue
                over = []
                for target in targets:
                    if target.label not in per_target:
                        continue
                    estimate, explain, config = per_target[target.label]
                    if estimate > target.arch.smem_per_block:
                        over.append(
                            f"on {target.label}{local} {config.label()} needs about {estimate:,} B "
                            f"({explain}), more than its {target.arch.smem_per_block:,} B per block"
                        )
                        node = config.node
                if not over:
                    continue
                reported.add(key)
                yield self.report(file, node, details="; ".join(over), why=why)

    def _everywhere(self, file: PythonFile, kernel, configs, targets, nbytes, why, reported):
        """No target known: the configs that exceed every assumed target, each config node
        once (for a comprehension, the element with the largest estimate)."""
        worst: dict[int, tuple[int, list[str], tt.Config]] = {}
        for config in configs:
            parts = []
            largest = 0
            for target in targets:
                found = _estimate(file, kernel, config, target.arch, nbytes)
                if found is None:
                    self.exempt("block-sizes-unread", True)
                    break
                if self.exempt("fits-an-assumed-target", found[0] <= target.arch.smem_per_block):
                    break
                largest = max(largest, found[0])
                parts.append(
                    f"{found[0]:,} B on {target.label} ({found[1]}; "
                    f"{target.arch.smem_per_block:,} B per block)"
                )
            else:
                key = id(config.node)
                if key not in reported and largest > worst.get(key, (-1,))[0]:
                    worst[key] = (largest, parts, config)
        for key, (_, parts, config) in worst.items():
            reported.add(key)
            yield self.report(
                file,
                config.node,
                self.everywhere_message,
                config=config.label(),
                details=" and ".join(parts),
                targets=" and ".join(t.label for t in targets),
                why=why,
            )


def _estimate(file: PythonFile, kernel, config, arch, nbytes) -> tuple[int, str] | None:
    """Every tile feeding a `tl.dot` in the loop, per pipeline buffer; where the tiles cannot be
    read, the A and B tiles of a matmul from its BLOCK_M/N/K."""
    found = tt.shared_memory_estimate(file, kernel, config, arch, nbytes)
    if found is not None:
        return found.total, found.explain()
    dims = _dims(config, kernel)
    if dims is None or config.num_stages is None:
        return None
    buffers = tt.pipeline_buffers(arch, config.num_stages, dims["M"])
    total = buffers * (dims["M"] + dims["N"]) * dims["K"] * nbytes
    return total, (
        f"{buffers} stage buffer{'s' if buffers > 1 else ''} × ({dims['M']} + {dims['N']}) × "
        f"{dims['K']} × {nbytes} B"
    )


def _calls_dot(file: PythonFile, kernel) -> bool:
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
