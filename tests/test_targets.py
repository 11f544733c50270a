"""Hardware targets end to end: the table, `[tool.gpulint] targets`, `--targets`, and errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpulint.cli import main
from gpulint.config import ConfigError, load_config
from gpulint.hardware import GPU, Target, UnknownTargetError, resolve_targets, table
from gpulint.testing import lint_text

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "triton"
MATMUL = (FIXTURES / "gpu702_autotuned_matmul_sm121.py").read_text(encoding="utf-8")


# -- the table ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("arch", "smem"),
    [
        ("sm_80", 166_912),
        ("sm_86", 101_376),
        ("sm_89", 101_376),
        ("sm_90", 232_448),
        ("sm_100", 232_448),
        ("sm_120", 101_376),
        ("sm_121", 101_376),
    ],
)
def test_shared_memory_per_block_matches_the_catalog(arch, smem):
    assert table().archs[arch].smem_per_block == smem
    assert table().target(arch).arch.smem_per_block == smem


@pytest.mark.parametrize("name", sorted(table().gpus))
def test_every_gpu_resolves_by_name_and_aliases(name):
    gpu = table().gpus[name]
    assert isinstance(gpu, GPU)
    assert gpu.arch.name in table().archs
    assert gpu.source, f"{name} cites no source"
    for spelling in (name, *gpu.aliases, name.lower(), name.upper()):
        target = table().target(spelling)
        assert target.gpu is gpu and target.arch is gpu.arch
        assert table().gpu(spelling) is gpu
    # Estimated fields are named; a peak that is unknown is absent, never guessed.
    for what in gpu.estimated:
        assert gpu.is_estimated(what)
    assert all(v > 0 for v in gpu.peak_tflops.values())


@pytest.mark.parametrize(
    ("spelling", "arch", "gpu"),
    [
        ("sm_121", "sm_121", None),
        ("sm121", "sm_121", None),
        ("SM_90", "sm_90", None),
        ("sm_90a", "sm_90", None),
        ("sm_100a", "sm_100", None),
        ("H100", "sm_90", "H100"),
        ("h100-sxm", "sm_90", "H100"),
        ("H100 PCIe", "sm_90", "H100 PCIe"),
        ("H200", "sm_90", "H200"),
        ("B200", "sm_100", "B200"),
        ("A100", "sm_80", "A100"),
        ("A100-SXM4-80GB", "sm_80", "A100"),
        ("L4", "sm_89", "L4"),
        ("RTX 5090", "sm_120", "RTX 5090"),
        ("GeForce RTX 5090", "sm_120", "RTX 5090"),
        ("RTX PRO 6000", "sm_120", "RTX PRO 6000"),
        ("RTX PRO 6000 Blackwell", "sm_120", "RTX PRO 6000"),
        ("GB10", "sm_121", "GB10"),
        ("DGX Spark", "sm_121", "GB10"),
    ],
)
def test_names_and_aliases_resolve(spelling, arch, gpu):
    (target,) = resolve_targets([spelling])
    assert isinstance(target, Target)
    assert target.arch.name == arch
    assert (target.gpu.name if target.gpu else None) == gpu
    assert target.label == (f"{gpu} ({arch})" if gpu else arch)


def test_gb10_has_no_published_peaks():
    gb10 = table().gpu("GB10")
    assert gb10.peak_tflops == {}
    assert gb10.is_estimated("bf16")
    assert gb10.memory_tbps == pytest.approx(0.273)


@pytest.mark.parametrize("bad", ["sm_999", "X1", "H1000", "sm 90", ""])
def test_unknown_target_lists_the_known_names(bad):
    with pytest.raises(UnknownTargetError) as e:
        resolve_targets([bad])
    text = str(e.value)
    assert repr(bad) in text
    for known in ("sm_80", "sm_90", "sm_121", "H100", "GB10", "RTX PRO 6000"):
        assert known in text
    # Architectures in compute-capability order, not string order.
    assert text.index("sm_90") < text.index("sm_100") < text.index("sm_121")


# -- configuration ------------------------------------------------------------------------------
def _project(tmp_path: Path, targets: str) -> Path:
    (tmp_path / "pyproject.toml").write_text(
        f"[tool.gpulint]\ntargets = {targets}\n", encoding="utf-8"
    )
    kernel = tmp_path / "matmul.py"
    kernel.write_text(MATMUL.replace("# fixture: targets=sm_121\n", ""), encoding="utf-8")
    return kernel


def test_pyproject_targets_resolve(tmp_path):
    _project(tmp_path, '["GB10", "sm_90"]')
    config = load_config(tmp_path)
    assert [t.label for t in config.resolved_targets()] == ["GB10 (sm_121)", "sm_90"]


def test_pyproject_unknown_target_is_a_config_error(tmp_path):
    _project(tmp_path, '["GB10", "H1000"]')
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path)
    text = str(e.value)
    assert "targets" in text and "'H1000'" in text and "GB10" in text and "sm_121" in text


def test_pyproject_targets_must_be_strings(tmp_path):
    _project(tmp_path, '"GB10"')
    with pytest.raises(ConfigError, match="targets"):
        load_config(tmp_path)


def _check(*argv: str) -> int:
    return main(["check", "--no-cache", "--select", "GPU702", *argv])


def test_cli_reads_pyproject_targets(tmp_path, capsys):
    kernel = _project(tmp_path, '["GB10"]')
    assert _check(str(kernel)) == 1
    out = capsys.readouterr().out
    assert "GPU702" in out and "on GB10 (sm_121) Config(" in out and "101,376 B per block" in out


def test_cli_targets_flag_overrides_pyproject(tmp_path, capsys):
    kernel = _project(tmp_path, '["GB10"]')
    assert _check("--targets", "sm_90", str(kernel)) == 0
    assert _check("--targets", "sm_121,H100", str(kernel)) == 1
    out = capsys.readouterr().out
    assert "on sm_121 Config(" in out
    assert "on H100 (sm_90)" not in out  # 4 buffers, 196,608 B, fit in 232,448 B


def test_cli_unknown_target_exits_2_with_known_names(tmp_path, capsys):
    kernel = _project(tmp_path, '["GB10"]')
    assert _check("--targets", "sm_999", str(kernel)) == 2
    err = capsys.readouterr().err
    assert "configuration error" in err and "'sm_999'" in err
    assert "sm_121" in err and "GB10" in err and "H100" in err


def test_cli_unknown_target_in_pyproject_exits_2(tmp_path, capsys):
    kernel = _project(tmp_path, '["Spark2"]')
    assert _check(str(kernel)) == 2
    assert "'Spark2'" in capsys.readouterr().err


# -- rules read targets from settings -----------------------------------------------------------
def test_gpu702_depends_only_on_the_configured_targets():
    def codes(targets):
        return [f.code for f in lint_text(MATMUL, "matmul.py", targets) if f.code == "GPU702"]

    assert codes(()) == []
    assert codes(("sm_90",)) == []
    assert codes(("H200", "B200")) == []
    assert codes(("sm_121",)) == ["GPU702"] * 3
    assert codes(("GB10",)) == ["GPU702"] * 3
    assert codes(("RTX 5090",)) == ["GPU702"] * 3
    assert codes(("A100",)) == []  # at most 3 buffers × 384 × 64 × 2 B = 147,456 B < 166,912 B


@pytest.mark.parametrize(
    ("arch", "stages", "block_m", "buffers"),
    [
        # Measured with Triton 3.6.0 (compiled metadata.shared of a tutorial matmul).
        ("sm_90", 3, 128, 3),
        ("sm_100", 4, 64, 4),
        ("sm_90", 2, 32, 1),  # BLOCK_M < 64: no wgmma, the cp.async pipeline
        ("sm_80", 3, 128, 2),
        ("sm_89", 4, 128, 3),
        ("sm_120", 3, 128, 2),
        ("sm_121", 1, 128, 1),
    ],
)
def test_pipeline_buffers_per_arch(arch, stages, block_m, buffers):
    from gpulint.frontends.python.triton import pipeline_buffers

    assert pipeline_buffers(table().archs[arch], stages, block_m) == buffers
