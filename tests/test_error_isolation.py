"""A rule or a front-end that raises costs one internal-error diagnostic (GPU001) naming it and
the file, never the run: the other rules and files are still linted, and the exit status is 2
in every way gpulint is run. The robustness tests assert that no input causes one; the tests
here inject a crashing rule and prove both halves: the run survives, and the suite would fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulint.cli import main
from gpulint.diagnostics import INTERNAL_ERROR, internal_errors
from gpulint.engine import Linter
from gpulint.rule import rule_by_code
from gpulint.testing import assert_no_internal_error, example_config, lint_text

ROOT = Path(__file__).resolve().parent.parent
AMP = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # GPU201
SYNC = (  # GPU101
    "import torch\nmodel = model.cuda()\nfor x in loader:\n"
    "    loss = model(x)\n    loss.backward()\n    print(loss.item())\n"
)


@pytest.fixture
def crashing_gpu201(monkeypatch):
    """GPU201's visits raise, as a bug in a rule would."""
    rule = rule_by_code("GPU201")
    assert rule is not None

    def boom(self, node, file):
        raise RuntimeError("injected crash")

    for name in ("visit_Name", "visit_Attribute"):
        monkeypatch.setattr(rule, name, boom)
    return rule


def _tree(root: Path) -> None:
    (root / "a.py").write_text(AMP)
    (root / "b.py").write_text(AMP + SYNC)
    (root / "c.py").write_text(SYNC)


def test_a_crashing_rule_is_one_internal_error_per_file_and_the_run_goes_on(
    crashing_gpu201, tmp_path, monkeypatch, capsys
):
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-cache", "--jobs", "1", "--format", "json", "."])
    out = json.loads(capsys.readouterr().out)
    assert code == 2
    errors = [d for d in out["diagnostics"] if d["code"] == INTERNAL_ERROR]
    assert sorted(d["path"] for d in errors) == ["a.py", "b.py"]  # one per file, not per node
    for d in errors:
        assert d["level"] == "error"
        message = "internal error in rule GPU201 on this file: RuntimeError: injected crash"
        assert message in d["message"]
    # The other rules ran on the same files, and the other files were linted.
    found = sorted((f["path"], f["code"]) for f in out["findings"])
    assert found == [("b.py", "GPU101"), ("c.py", "GPU101")]
    assert out["files_checked"] == 3


def test_the_exit_status_says_so_in_every_format(crashing_gpu201, tmp_path, monkeypatch, capsys):
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    # text: the error on stderr, the findings on stdout; --exit-zero hides findings, not this
    for flags in ([], ["--exit-zero"]):
        assert main(["check", "--no-cache", "-j", "1", *flags, "."]) == 2
        captured = capsys.readouterr()
        assert "a.py:1:1: error: GPU001 internal error in rule GPU201" in captured.err
        assert "GPU101" in captured.out and "GPU001" not in captured.out
    # SARIF: a tool execution notification, and the execution was not successful
    assert main(["check", "--no-cache", "-j", "1", "--format", "sarif", "."]) == 2
    run = json.loads(capsys.readouterr().out)["runs"][0]
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    notes = [n for n in invocation["toolExecutionNotifications"] if n["level"] == "error"]
    assert len(notes) == 2 and all(n["descriptor"]["id"] == "GPU001" for n in notes)
    assert {r["ruleId"] for r in run["results"]} == {"GPU101"}
    # standard input
    monkeypatch.setattr("sys.stdin", _Stdin(AMP.encode()))
    assert main(["check", "--stdin-filename", "x.py", "-"]) == 2
    assert "GPU001" in capsys.readouterr().err
    # a run with nothing wrong is unaffected
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("x = 1\n")
    assert main(["check", "--no-cache", "-j", "1", "."]) == 1  # c.py's GPU101


class _Stdin:
    def __init__(self, data: bytes):
        import io

        self.buffer = io.BytesIO(data)


def test_the_flake8_plugin_and_the_language_server_report_it(crashing_gpu201, tmp_path):
    from gpulint.supervisor import lint_bytes_budgeted

    linter = Linter(example_config(root=tmp_path))
    # the language server's and the flake8 plugin's path (a supervised worker, forked now)
    findings = lint_bytes_budgeted(linter, "a.py", AMP.encode(), "a.py")
    assert [f.code for f in findings] == ["GPU001"]
    pytest.importorskip("flake8")
    from gpulint.integrations.flake8_plugin import GpulintChecker

    path = tmp_path / "a.py"
    path.write_text(AMP)
    checker = GpulintChecker(None, str(path), AMP.splitlines(keepends=True))
    messages = [message for _, _, message, _ in checker.run()]
    assert len(messages) == 1 and messages[0].startswith("GPU001 internal error in rule GPU201")


def test_a_crashing_front_end_fact_names_the_rule_that_asked(monkeypatch):
    from gpulint.frontends.python.file import PythonFile

    def boom(self, node):
        raise KeyError("no such binding")

    monkeypatch.setattr(PythonFile, "qualname", boom)
    findings = Linter(example_config()).lint_bytes("a.py", AMP.encode())[0]
    errors = internal_errors(findings)
    assert errors and all(f.path == "a.py" for f in errors)
    assert "internal error in rule GPU201 on this file: KeyError" in errors[0].message
    assert len({f.message for f in errors}) == len(errors)  # one per rule


def test_a_crashing_parse_or_walk_is_the_front_end_s_internal_error(monkeypatch):
    from gpulint.frontends.python import PythonFrontend

    def boom(self, *args):
        raise IndexError("front-end bug")

    linter = Linter(example_config())
    for method in ("parse", "run"):
        with monkeypatch.context() as m:
            m.setattr(PythonFrontend, method, boom)
            findings = linter.lint_bytes("a.py", AMP.encode())[0]
        assert [f.code for f in findings] == ["GPU001"], method
        assert "internal error in the python front-end on this file: IndexError" in (
            findings[0].message
        )


def test_a_crashing_project_index_is_reported_and_its_files_are_judged_alone(
    monkeypatch, tmp_path, capsys
):
    from gpulint.frontends.cuda import CudaFrontend

    def boom(self, *args):
        raise TypeError("index bug")

    monkeypatch.setattr(CudaFrontend, "index", boom)
    fixture = ROOT / "fixtures" / "cuda" / "divergent_barrier_gpu806.cu"
    (tmp_path / "k.cu").write_bytes(fixture.read_bytes())
    monkeypatch.chdir(tmp_path)
    code = main(["check", "--no-cache", "-j", "1", "--format", "json", "."])
    out = json.loads(capsys.readouterr().out)
    assert code == 2
    (error,) = [d for d in out["diagnostics"] if d["code"] == INTERNAL_ERROR]
    assert "cuda front-end's project index on the 1 cuda files" in error["message"]
    assert any(f["code"] == "GPU806" for f in out["findings"])  # judged alone


def test_the_robustness_assertion_catches_a_crashing_rule(crashing_gpu201):
    """The suite fails with a crashing rule: the helpers every robustness test goes through
    raise, so `test_robustness`, `test_hostile`, the fixtures and the fuzz command fail."""
    findings = Linter(example_config()).lint_bytes("a.py", AMP.encode())[0]
    with pytest.raises(AssertionError, match="internal error in rule GPU201"):
        assert_no_internal_error(findings)
    with pytest.raises(AssertionError, match="GPU201"):
        lint_text(AMP, "a.py")  # the fixtures' and the rule examples' helper
    import test_robustness

    with pytest.raises(AssertionError, match="GPU201"):
        test_robustness.test_mutated_fixtures_never_crash(
            ROOT / "fixtures" / "python" / _amp_fixture()
        )
    import fuzz

    fuzz._linter = Linter(example_config(("sm_90",), root=ROOT))
    try:
        escaped, _, _ = fuzz._check("a.py", AMP.encode())
    finally:
        fuzz._linter = None
    assert escaped is not None and "GPU201" in escaped


def _amp_fixture() -> str:
    for path in sorted((ROOT / "fixtures" / "python").glob("*.py")):
        if "cuda.amp" in path.read_text(errors="replace") and "silent" not in path.name:
            return path.name
    raise AssertionError("no fixture uses torch.cuda.amp")
