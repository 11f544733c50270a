"""The refuted-lever registry: the built-in table, user levers, GPU901/GPU902 end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpulint.config import ConfigError, load_config
from gpulint.engine import Linter
from gpulint.levers import builtin_levers, preset_levers, registry
from gpulint.testing import lint_text

# The document's "Refuted levers" table: lever -> (status, the table's status cell).
DOCUMENT_TABLE = {
    "FP8/MXFP4 training on the Spark": (
        "UNSOURCED",
        "UNSOURCED in-repo — no artifact carries this; verify against TE before relying on it",
    ),
    "Upstream flash-attn on sm_121": ("UNSOURCED", "UNSOURCED in-repo — verify"),
    "GPU vector search / GPU dedup for the RAG corpus": ("SOURCED", "SOURCED"),
    "GPU for the CPU instruments": ("UNSOURCED", "UNSOURCED figure — verify before citing"),
    "Muon optimizer for fine-tuning": ("reasoned", "Reasoned, not measured here"),
    "Unsloth": ("SOURCED", "SOURCED (agi-proof/benchmark-results/)"),
}
FLEET = {"lever-presets": ["cuda-dev-routing"]}


def _gpu901(code: str, targets, path: str = "x.py", options=None):
    return [f for f in lint_text(code, path, targets, options) if f.code == "GPU901"]


def test_builtin_registry_holds_only_public_sourced_hardware_facts():
    for lever in builtin_levers():
        assert lever.status == "SOURCED" and lever.source.startswith("https://"), lever.name
        assert "any" not in lever.targets, lever.name  # tied to the hardware it is about
    names = {lever.name for lever in builtin_levers()}
    assert not names & set(DOCUMENT_TABLE)  # the fleet's own evidence is not a default


def test_the_fleet_table_is_a_preset_reproducing_the_document():
    levers = {lever.name: lever for lever in preset_levers("cuda-dev-routing")}
    assert set(levers) == set(DOCUMENT_TABLE)
    for name, (status, text) in DOCUMENT_TABLE.items():
        assert levers[name].status == status, name
        assert levers[name].status_text == text, name
    assert levers["Upstream flash-attn on sm_121"].fact == "Rejected upstream; use SDPA/cuDNN."
    assert "0.92×" in levers["Unsloth"].fact
    assert levers["Unsloth"].source == "agi-proof/benchmark-results/"
    assert levers["Upstream flash-attn on sm_121"].targets == ("sm_121",)
    assert set(levers["FP8/MXFP4 training on the Spark"].targets) == {"sm_120", "sm_121"}
    # Not on by default; on when the project opts in.
    assert not _gpu901("import unsloth\n", ("sm_90",))
    assert _gpu901("import unsloth\n", ("sm_90",), options=FLEET)


def test_unsourced_lever_is_a_note_that_says_it_may_be_stale():
    [finding] = _gpu901("import flash_attn\n", ("sm_121",), options=FLEET)
    assert "Rejected upstream; use SDPA/cuDNN." in finding.message
    assert "unsourced and may be stale" in finding.message
    assert "forward kernel for sm_120/sm_121" in finding.message
    assert finding.severity.value == "info"


def test_sourced_message_quotes_its_source_at_warning_level():
    [finding] = _gpu901("import flash_attn_interface\n", ("sm_121",))
    assert "github.com/Dao-AILab/flash-attention" in finding.message
    assert "may be stale" not in finding.message and finding.severity.value == "warning"
    [fleet] = _gpu901("import unsloth\n", ("sm_90",), options=FLEET)
    assert "SOURCED (agi-proof/benchmark-results/)" in fleet.message


@pytest.mark.parametrize("targets", [(), ("sm_90",), ("H100",), ("sm_120",), ("sm_121",)])
def test_flash_attn_2_silent_where_not_refuted(targets):
    assert not _gpu901("import flash_attn\n", targets)


def test_gb10_name_resolves_to_sm_121():
    assert _gpu901("import flash_attn_interface\n", ("GB10",))


def test_one_finding_per_lever_per_file():
    code = "from flash_attn_interface import flash_attn_func\nflash_attn_func(q, k, v)\nflash_attn_func(q, k, v)\n"
    assert len(_gpu901(code, ("sm_121",), "m.py")) == 1


def test_never_inside_the_package_it_is_about():
    code = "import transformer_engine.pytorch as te\nwith te.fp8_autocast(enabled=True):\n    y = m(x)\n"
    assert _gpu901(code, ("A100",), "train.py")
    assert not _gpu901(code, ("A100",), "transformer_engine/pytorch/module/linear.py")
    mx = "from torchao.prototype.mx_formats import MXLinearConfig\nc = MXLinearConfig()\n"
    assert not _gpu901(mx, ("sm_90",), "ao/torchao/prototype/mx_formats/utils.py")
    fa = "import flash_attn\n"
    assert not _gpu901(fa, ("sm_121",), "flash_attn/cute/interface.py", FLEET)
    assert not _gpu901("import flash_attn_interface\n", ("sm_121",), "hopper/benchmark_attn.py")
    wrapper = "from flash_attn_interface import flash_attn_varlen_func as _f\n"
    assert not _gpu901(wrapper, ("sm_121",), "serve/kernels/flash_attn_interface.py")


def test_never_in_files_that_target_other_hardware():
    fa3 = "from flash_attn_interface import flash_attn_func\n"
    assert not _gpu901(fa3, ("sm_121",), "kernels/attention/mha_h100/benchmark.py")
    assert not _gpu901("# FA3 path for H100 / H800 only\n" + fa3, ("sm_121",))
    # A header naming the refuted target itself keeps the finding.
    assert _gpu901("# Blackwell (sm_121) attention\n" + fa3, ("sm_121",))
    # CI jobs: judged only for the hardware their runners name.
    job = "jobs:\n  test:\n    runs-on: {}\n    steps:\n      - run: pip install flash-attn\n"
    path = ".github/workflows/gpu.yml"
    assert not _gpu901(job.format("[self-hosted, h100]"), ("sm_121",), path, FLEET)
    assert not _gpu901(job.format("ubuntu-latest"), ("sm_121",), path, FLEET)
    assert _gpu901(job.format("[self-hosted, dgx-spark]"), ("sm_121",), path, FLEET)


def test_availability_check_is_an_optional_backend():
    code = "if is_flash_attn_2_available():\n    from flash_attn import flash_attn_varlen_func\n"
    assert not [f for f in lint_text(code, "m.py", ("sm_121",)) if f.code == "GPU901"]


def _project(tmp_path: Path, pyproject: str, levers: str | None = None) -> Path:
    (tmp_path / "pyproject.toml").write_text(pyproject, encoding="utf-8")
    if levers is not None:
        (tmp_path / "levers.toml").write_text(levers, encoding="utf-8")
    return tmp_path


USER_LEVER = """
[[tool.gpulint.levers]]
id = "xformers-on-pro6000"
name = "xformers attention on the Pro 6000"
targets = ["sm_120"]
fact = "SDPA cuDNN was 1.8x faster (0.94 -> 0.51 ms, 5 runs)."
status = "SOURCED"
source = ".gpulint/evidence/a.json"
imports = ["xformers.ops"]
"""


def test_user_lever_from_pyproject_fires(tmp_path):
    root = _project(tmp_path, '[tool.gpulint]\ntargets = ["sm_120"]\n' + USER_LEVER)
    config = load_config(root)
    linter = Linter(config)
    assert any(lever.id == "xformers-on-pro6000" for lever in registry(linter.settings))
    findings, _ = linter.lint_bytes("m.py", b"import xformers.ops as xops\n")
    [finding] = [f for f in findings if f.code == "GPU901"]
    assert "xformers attention on the Pro 6000" in finding.message


def test_levers_toml_beside_the_config_is_merged(tmp_path):
    levers = """
[[levers]]
name = "torch.compile for the decoder"
targets = ["sm_121"]
fact = "Slower than eager."
calls = ["torch.compile"]
"""
    root = _project(tmp_path, '[tool.gpulint]\ntargets = ["sm_121"]\n', levers)
    linter = Linter(load_config(root))
    findings, _ = linter.lint_bytes("m.py", b"import torch\nmodel = torch.compile(model)\n")
    [finding] = [f for f in findings if f.code == "GPU901"]
    assert "unsourced and may be stale" in finding.message  # no source: UNSOURCED by default


def test_user_lever_with_builtin_id_replaces_it(tmp_path):
    override = """
[[tool.gpulint.levers]]
id = "flash-attn-2-pre-ampere"
name = "Upstream flash-attn on sm_121"
targets = ["sm_121"]
fact = "No sm_121 build in flash-attn 2.8 (upstream issue 1234)."
status = "SOURCED"
source = "https://github.com/Dao-AILab/flash-attention/issues/1234"
imports = ["flash_attn"]
"""
    linter = Linter(
        load_config(_project(tmp_path, '[tool.gpulint]\ntargets = ["sm_121"]\n' + override))
    )
    findings, _ = linter.lint_bytes("m.py", b"import flash_attn\n")
    [finding] = [f for f in findings if f.code == "GPU901"]
    assert "issues/1234" in finding.message and "may be stale" not in finding.message


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ('name = "x"\nfact = "y"\ncolour = "red"\n', "unknown key"),
        ('name = "x"\nfact = "y"\ntargets = ["sm_999"]\n', "unknown target"),
        ('name = "x"\n', "`fact` is required"),
        ('name = "x"\nfact = "y"\nstatus = "maybe"\n', "status"),
        ('name = "x"\nfact = "y"\nimports = "flash_attn"\n', "list of non-empty strings"),
    ],
)
def test_bad_user_levers_are_config_errors(tmp_path, entry, why):
    root = _project(tmp_path, "[tool.gpulint]\n\n[[tool.gpulint.levers]]\n" + entry)
    with pytest.raises(ConfigError, match=why):
        load_config(root)


def test_unknown_lever_preset_is_a_config_error(tmp_path):
    root = _project(tmp_path, '[tool.gpulint]\nlever-presets = ["my-fleet"]\n')
    with pytest.raises(ConfigError, match="unknown lever preset 'my-fleet'.*cuda-dev-routing"):
        load_config(root)


def test_gpu902_in_pyproject(tmp_path):
    text = '[tool.gpulint]\ntargets = ["sm_121"]\n\n[[tool.gpulint.levers]]\nname = "x"\nfact = "slower"\n'
    findings = [f for f in lint_text(text, "pyproject.toml") if f.code == "GPU902"]
    assert [(f.line, f.col) for f in findings] == [(4, 1)]


def test_gpu902_silent_without_levers():
    assert not lint_text('[project]\nname = "levers-demo"\n', "pyproject.toml")


def test_rule_docs_explain_the_registry_and_how_to_extend_it():
    out = subprocess.run(
        [sys.executable, "-m", "gpulint", "rule", "GPU901"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for row in DOCUMENT_TABLE:
        assert row in out
    for lever in builtin_levers():
        assert lever.name in out
    assert "[[tool.gpulint.levers]]" in out and "levers.toml" in out
    assert 'lever-presets = ["cuda-dev-routing"]' in out
