"""GPU701-GPU704 beyond their examples and fixtures: messages, de-duplication, edge shapes."""

from __future__ import annotations

from gpulint.testing import lint_text

MATMUL = """
import triton
import triton.language as tl

CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64}, num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_stages=3, num_warps=4),
]

@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def fwd(a_ptr, b_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr))

@triton.autotune(configs=CONFIGS, key=["M", "N", "K"])
@triton.jit
def bwd(a_ptr, b_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    acc = tl.dot(tl.load(a_ptr), tl.load(b_ptr))
"""


def codes(findings, code):
    return [f for f in findings if f.code == code]


def test_gpu702_message_names_config_estimate_target_and_limit():
    (f,) = codes(lint_text(MATMUL, "mm.py", ("GB10", "H100")), "GPU702")
    assert f.line == 6  # the Config(...) itself, once although two kernels share the list
    assert (
        "on GB10 (sm_121) Config(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_stages=4)" in f.message
    )
    assert "147,456 B (3 stage buffers × (128 + 256) × 64 × 2 B)" in f.message
    assert "101,376 B per block" in f.message
    assert "fp16/bf16" in f.message
    assert "H100" not in f.message  # 196,608 B fits in 232,448 B


def test_gpu702_names_every_exceeded_target():
    (f,) = codes(
        lint_text(MATMUL.replace("num_stages=4", "num_stages=6"), "mm.py", ("sm_121", "A100")),
        "GPU702",
    )
    assert "on sm_121" in f.message and "on A100 (sm_80)" in f.message and "166,912 B" in f.message


def test_gpu702_silent_without_targets_and_on_hopper():
    assert codes(lint_text(MATMUL, "mm.py"), "GPU702") == []  # fits on an H100 (and an A100)
    assert codes(lint_text(MATMUL, "mm.py", ("sm_90", "B200")), "GPU702") == []


def test_gpu702_without_targets_reports_what_fits_on_no_gpu():
    """No target and no local GPU: A100 and H100 are assumed; only a config over both is
    reported (so over every GPU of the table), and the message says how to set targets."""
    from gpulint.hardware import table

    big = MATMUL.replace('"BLOCK_K": 64}, num_stages=4', '"BLOCK_K": 128}, num_stages=4')
    (f,) = codes(lint_text(big, "mm.py"), "GPU702")
    assert "on every GPU" in f.message
    assert "294,912 B on A100 (sm_80)" in f.message and "393,216 B on H100 (sm_90)" in f.message
    assert "no `targets` are configured" in f.message and "--targets" in f.message
    for name in table().archs:  # the claim holds for every architecture known
        assert codes(lint_text(big, "mm.py", (name,)), "GPU702"), name
    # Over the A100 only (7 stages of 32 KiB: 6 buffers there, 7 on sm_90): not reported.
    a100_only = MATMUL.replace(
        '"BLOCK_N": 256, "BLOCK_K": 64}, num_stages=4',
        '"BLOCK_N": 128, "BLOCK_K": 64}, num_stages=7',
    )
    assert codes(lint_text(a100_only, "mm.py"), "GPU702") == []
    assert codes(lint_text(a100_only, "mm.py", ("A100",)), "GPU702")


def test_gpu702_kernel_constexpr_default_fills_a_missing_block():
    text = MATMUL.replace('"BLOCK_K": 64}, num_stages=4', "}, num_stages=4").replace(
        "BLOCK_K: tl.constexpr):\n    acc", "BLOCK_K: tl.constexpr = 64):\n    acc"
    )
    assert len(codes(lint_text(text, "mm.py", ("sm_121",)), "GPU702")) == 1


def test_gpu701_silent_in_tests_and_with_static_assert():
    kernel = """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs) + 1)

def inc(x, BLOCK=1024):
    k[(triton.cdiv(x.numel(), BLOCK),)](x, x.numel(), BLOCK=BLOCK)
"""
    assert len(codes(lint_text(kernel, "ops/k.py"), "GPU701")) == 2
    assert codes(lint_text(kernel, "tests/test_k.py"), "GPU701") == []
    guarded = kernel.replace("    offs =", "    tl.static_assert(n % BLOCK == 0)\n    offs =")
    assert codes(lint_text(guarded, "ops/k.py"), "GPU701") == []


def test_gpu701_tile_guard_and_full_tile_fast_path():
    kernel = """
import triton
import triton.language as tl

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    if pid * BLOCK + BLOCK <= n:
        x = tl.load(x_ptr + offs)
    else:
        x = tl.load(x_ptr + offs, mask=offs < n)
"""
    assert codes(lint_text(kernel, "k.py"), "GPU701") == []


def test_gpu703_environ_update_and_putenv():
    text = 'import os\nos.environ.update({"TRITON_INTERPRET": "1"})\nos.putenv("TRITON_INTERPRET", "true")\n'
    assert [f.line for f in codes(lint_text(text, "run.py"), "GPU703")] == [2, 3]
    assert codes(lint_text(text, "tests/conftest.py"), "GPU703") == []


def test_gpu703_leaves_compile_time_and_debug_build_ops_alone():
    kernel = "import triton\nimport triton.language as tl\n@triton.jit\ndef k(x):\n    v = tl.load(x)\n    {op}\n"
    for op in ("tl.device_assert(v > 0)", 'tl.static_print("v", v)'):
        assert codes(lint_text(kernel.format(op=op), "k.py"), "GPU703") == [], op
    (f,) = codes(lint_text(kernel.format(op='tl.device_print("v", v)'), "k.py"), "GPU703")
    assert "printf" in f.message


def test_gpu704_messages_suggest_the_neighbouring_powers():
    text = "import triton\nimport triton.language as tl\nc = triton.Config({}, num_warps=6)\nx = tl.arange(0, 100)\n"
    warps, arange = codes(lint_text(text, "k.py"), "GPU704")
    assert "`num_warps=6`" in warps.message and "use 4 or 8" in warps.message
    assert "size 100" in arange.message and "size 64 or 128 with a mask" in arange.message


GATED = (
    __import__("pathlib").Path(__file__).parent.parent / "fixtures/triton/gpu702_gated_mlp_sm121.py"
).read_text()


def _probe(root, *devices):
    import json

    (root / ".gpulint").mkdir(exist_ok=True)
    (root / ".gpulint" / "probe.json").write_text(
        json.dumps({"torch": {"devices": [dict(index=i, **d) for i, d in enumerate(devices)]}})
    )


def test_gpu702_three_operand_tiles_per_k_step():
    (f,) = codes(lint_text(GATED, "mlp.py", ("sm_121",)), "GPU702")
    assert "122,880 B (3 stage buffers × (64×64 + 64×128 + 64×128) × 2 B)" in f.message


def test_gpu702_uses_the_local_gpu_a_probe_output_names(tmp_path):
    from gpulint.config import Config
    from gpulint.engine import Linter

    def lint():
        return codes(
            Linter(Config(root=tmp_path)).lint_bytes("mlp.py", GATED.encode())[0], "GPU702"
        )

    assert lint() == []  # nothing names the GPU: silent
    _probe(tmp_path, {"name": "NVIDIA GB10", "compute_capability": "12.1", "table_name": "GB10"})
    (f,) = lint()
    assert "on GB10 (sm_121) (the local GPU named by .gpulint/probe.json" in f.message
    assert "no `targets` configured" in f.message
    # A GPU with room for the config: silent, as with that target configured.
    _probe(tmp_path, {"name": "NVIDIA H200", "compute_capability": "9.0"})
    assert lint() == []
    # Two different GPUs named: none is chosen.
    _probe(tmp_path, {"name": "NVIDIA GB10"}, {"name": "NVIDIA H200"})
    assert lint() == []


def test_hardware_note_once_per_run_not_per_finding(tmp_path, monkeypatch, capsys):
    from gpulint.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(GATED)
    (tmp_path / "b.py").write_text(GATED)
    main(["check", "--no-cache", "--exit-zero", "--select", "GPU205", "."])
    err = capsys.readouterr().err
    assert err.count("hardware `targets`") == 1 and "GPU205" in err
    main(["check", "--no-cache", "--exit-zero", "--select", "GPU205", "--targets", "GB10", "."])
    assert "hardware `targets`" not in capsys.readouterr().err
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    main(["check", "--no-cache", "--exit-zero", "--select", "GPU205", "."])
    assert "hardware `targets`" not in capsys.readouterr().err  # nothing it would have looked at


def test_hardware_note_once_per_project_and_never_under_quiet(tmp_path, monkeypatch, capsys):
    """With a cache the note is recorded there and not repeated; -q never prints it; another
    note (other rules skipped) is shown once too; a fresh cache folder shows it again."""
    from gpulint.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(GATED)
    argv = ["check", "--exit-zero", "--select", "GPU205", "."]
    main([*argv, "-q"])
    assert "hardware `targets`" not in capsys.readouterr().err
    main(argv)
    err = capsys.readouterr().err
    assert err.count("hardware `targets`") == 1 and "GPU205" in err
    assert (tmp_path / ".gpulint_cache" / "notes.json").is_file()
    main(argv)
    assert "hardware `targets`" not in capsys.readouterr().err  # said once
    main([*argv, "--extend-select", "GPU901"])  # another set of skipped rules: a new note
    err = capsys.readouterr().err
    assert err.count("hardware `targets`") == 1, err
    main([*argv, "--extend-select", "GPU901"])
    assert "hardware `targets`" not in capsys.readouterr().err
    main([*argv, "--cache-dir", str(tmp_path / "elsewhere")])
    assert "hardware `targets`" in capsys.readouterr().err
