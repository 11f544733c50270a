"""GPU702's shared-memory estimate against Triton's compiler: each autotune config of the
kernels in tests/triton_oracle/kernels.py is compiled for sm_80, sm_90, sm_120 and sm_121 (no
GPU needed) and the compiled `metadata.shared` compared with the estimate. Skipped where Triton
is not installed (it is not in the `dev` extra: see docs/triton-oracle.md).

`python tests/test_triton_oracle.py` prints the table kept in docs/triton-oracle.md.
"""

from __future__ import annotations

import inspect
import os
import sys
from pathlib import Path

import pytest

from gpulint.frontends.python import parse_python
from gpulint.frontends.python import triton as tt
from gpulint.frontends.python.file import PythonFile
from gpulint.hardware import table

HERE = Path(__file__).parent / "triton_oracle"
TARGETS = ("sm_80", "sm_90", "sm_120", "sm_121")
LAUNCH = {"HEAD_DIM": 64}  # constexprs the launcher passes (not in the configs)
# The estimate counts the operand tiles; Triton may add a little scratch (seen: 512 B when
# scale vectors are loaded beside the operands). It must never exceed the compiled size.
SLACK = 1024


def _cases():
    text = (HERE / "kernels.py").read_text()
    f = PythonFile(str(HERE / "kernels.py"), text, parse_python(text))
    for kernel in tt.kernels(f):
        configs = tt.autotune_configs(f, kernel.autotune)
        for i, config in enumerate(configs):
            yield f, kernel, i, config


def _estimate(f, kernel, config, target):
    nbytes, _ = tt.element_bytes(f, kernel)
    return tt.shared_memory_estimate(f, kernel, config, table().archs[target], nbytes, LAUNCH)


def _compiled(kernel_name: str, index: int, target: str) -> int:
    triton = pytest.importorskip("triton")
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError:  # pragma: no cover - an older or newer layout
        pytest.skip("this Triton has no ASTSource/GPUTarget")
    sys.path.insert(0, str(HERE))
    try:
        import kernels  # noqa: PLC0415
    finally:
        sys.path.remove(str(HERE))
    autotuner = getattr(kernels, kernel_name)
    config = autotuner.configs[index]
    fn = autotuner.fn
    signature, constexprs, attrs = {}, {**LAUNCH, **config.kwargs}, {}
    for i, p in enumerate(inspect.signature(fn.fn).parameters):
        if p in constexprs:
            signature[p] = "constexpr"
        elif p.endswith("_ptr"):
            signature[p] = "*fp16"
            attrs[(i,)] = [["tt.divisibility", 16]]  # as the launcher specialises aligned args
        elif p == "sm_scale":
            signature[p] = "fp32"
        else:
            signature[p] = "i32"
            attrs[(i,)] = [["tt.divisibility", 16]]
    constexprs = {k: v for k, v in constexprs.items() if k in signature}
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    src = ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    cc = int(target.removeprefix("sm_"))
    options = {"num_warps": config.num_warps, "num_stages": config.num_stages}
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=options)
    except TypeError as e:  # pragma: no cover - another Triton's compile signature
        pytest.skip(f"this Triton compiles differently: {e}")
    return compiled.metadata.shared


CASES = list(_cases())


def test_at_least_twenty_configs():
    assert len(CASES) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", CASES, ids=[f"{k.name}-{i}" for _, k, i, _ in CASES])
def test_estimate_matches_compiled_shared_memory(case, target):
    f, kernel, index, config = case
    compiled = _compiled(kernel.name, index, target)
    estimate = _estimate(f, kernel, config, target)
    assert estimate is not None
    assert estimate.total <= compiled <= estimate.total + SLACK, estimate.explain()
    limit = table().archs[target].smem_per_block
    assert (estimate.total > limit) == (compiled > limit)  # the rule's verdict is the compiler's


if __name__ == "__main__":
    import triton

    print(f"Triton {triton.__version__}, cross-compiled (no GPU), fp16 operands.\n")
    print(
        "| kernel | config | stages | " + " | ".join(f"{t} est / compiled" for t in TARGETS) + " |"
    )
    print("|---|---|---|" + "---|" * len(TARGETS))
    for f, kernel, i, config in CASES:
        cells = []
        for t in TARGETS:
            e = _estimate(f, kernel, config, t).total
            c = _compiled(kernel.name, i, t)
            cells.append(f"{e:,} / {c:,}" + ("" if e == c else " (+" + f"{c - e:,})"))
        blocks = "×".join(str(v) for v in config.kwargs.values())
        print(f"| {kernel.name} | {blocks} | {config.num_stages} | " + " | ".join(cells) + " |")
