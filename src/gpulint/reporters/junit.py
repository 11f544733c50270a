"""JUnit XML, as CI test dashboards read it: one test suite per file, one failed test case per
finding (GitLab's `artifacts: reports: junit`, Jenkins, Azure Pipelines). A clean run is one
suite with no failures."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from gpulint.diagnostics import Finding


def render(findings: list[Finding], *, files_checked: int = 0, **_: object) -> str:
    suites = ET.Element(
        "testsuites", name="gpulint", tests=str(len(findings)), failures=str(len(findings))
    )
    by_file: dict[str, list[Finding]] = {}
    for f in findings:
        by_file.setdefault(f.path, []).append(f)
    if not by_file:
        suite = ET.SubElement(suites, "testsuite", name="gpulint", tests="0", failures="0")
        suite.set("errors", "0")
    for path, group in by_file.items():
        suite = ET.SubElement(
            suites,
            "testsuite",
            name=_clean(path),
            tests=str(len(group)),
            failures=str(len(group)),
            errors="0",
        )
        for f in group:
            case = ET.SubElement(
                suite,
                "testcase",
                name=f"gpulint.{f.code}",
                classname=_clean(path),
                file=_clean(path),
                line=str(f.line),
            )
            failure = ET.SubElement(
                case, "failure", message=_clean(f.message), type=f.severity.value
            )
            cell = "" if f.cell is None else f"cell {f.cell}, "
            failure.text = _clean(f"{cell}line {f.line}, col {f.col}, {f.code}: {f.message}")
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, "unicode") + "\n"


def _clean(text: str) -> str:
    """XML 1.0 cannot hold most control characters (nor lone surrogates): escape them."""
    from gpulint.safeio import escape

    return escape(text)
