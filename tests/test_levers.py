"""The refuted-lever registry: the built-in table, user levers, GPU901/GPU902 end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpulint.config import ConfigError, load_config
from gpulint.engine import Linter
from gpulint.levers import builtin_levers, registry
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


def test_builtin_registry_reproduces_the_documents_table():
    levers = {lever.name: lever for lever in builtin_levers()}
    assert set(levers) == set(DOCUMENT_TABLE)
    for name, (status, text) in DOCUMENT_TABLE.items():
        assert levers[name].status == status, name
        assert levers[name].status_text == text, name
        assert levers[name].builtin
    assert levers["Upstream flash-attn on sm_121"].fact == "Rejected upstream; use SDPA/cuDNN."
    assert "0.92×" in levers["Unsloth"].fact
    assert levers["Unsloth"].source == "agi-proof/benchmark-results/"
    assert levers["Upstream flash-attn on sm_121"].targets == ("sm_121",)
    assert set(levers["FP8/MXFP4 training on the Spark"].targets) == {"sm_120", "sm_121"}


def test_unsourced_message_says_the_refutation_needs_a_source():
    [finding] = [
        f for f in lint_text("import flash_attn\n", "x.py", ("sm_121",)) if f.code == "GPU901"
    ]
    assert "Rejected upstream; use SDPA/cuDNN." in finding.message
    assert "UNSOURCED" in finding.message and "needs a source" in finding.message


def test_sourced_message_quotes_status_without_asking_for_a_source():
    [finding] = [f for f in lint_text("import unsloth\n", "x.py", ("sm_90",)) if f.code == "GPU901"]
    assert "SOURCED (agi-proof/benchmark-results/)" in finding.message
    assert "needs a source" not in finding.message


@pytest.mark.parametrize("targets", [(), ("sm_90",), ("H100",), ("sm_120",)])
def test_flash_attn_silent_where_not_refuted(targets):
    assert not [f for f in lint_text("import flash_attn\n", "x.py", targets) if f.code == "GPU901"]


def test_gb10_name_resolves_to_sm_121():
    assert [f for f in lint_text("import flash_attn\n", "x.py", ("GB10",)) if f.code == "GPU901"]


def test_one_finding_per_lever_per_file():
    code = "from flash_attn import flash_attn_func\nflash_attn_func(q, k, v)\nflash_attn_func(q, k, v)\n"
    assert len([f for f in lint_text(code, "m.py", ("sm_121",)) if f.code == "GPU901"]) == 1


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
    assert "needs a source" in finding.message  # no source: UNSOURCED by default


def test_user_lever_with_builtin_id_replaces_it(tmp_path):
    override = """
[[tool.gpulint.levers]]
id = "flash-attn-sm121"
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
    assert "issues/1234" in finding.message and "needs a source" not in finding.message


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
    assert "[[tool.gpulint.levers]]" in out and "levers.toml" in out
