"""One documentation text per rule, from the rule class alone.

`rule_markdown(rule)` is the page: `gpulint rule CODE` prints it, docs/rules/CODE.md is it
(written by `python -m gpulint.docsgen`), and SARIF carries it as `help.markdown`. It is built
from the rule's single source: its metadata (code, severity, language, autofix, bench), its
docstring sections, its VALID/INVALID examples, and the measured figure of the bench it cites
(data/bench_figures.toml). The language server's hover shows `rule_hover`, a short cut of it.
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources

from gpulint.rule import DOC_SECTIONS, Invalid, Rule, Valid

# Docstring sections the page places itself (not among a rule's extra sections).
KNOWN_PROBLEMS = "Known problems"

# Families by hundreds, as in the catalog.
FAMILIES = {
    "GPU1": "Host-device syncs and data movement",
    "GPU2": "Precision",
    "GPU3": "Input pipeline",
    "GPU4": "Distributed",
    "GPU5": "Memory, attention, graphs",
    "GPU6": "Benchmarking hygiene",
    "GPU7": "Triton kernels",
    "GPU8": "CUDA C++",
    "GPU9": "Refuted levers, launch hygiene and claims",
}

# How a `noqa` comment is written in each front-end language: (opening, closing).
_NOQA_COMMENT = {
    "cuda": ("// ", ""),
    "cpp": ("// ", ""),
    "c++": ("// ", ""),
    "c": ("// ", ""),
    "markdown": ("<!-- ", " -->"),
}
# Code fence info string per language or file extension (examples and snippets).
_FENCE = {
    "python": "python",
    "cuda": "cuda",
    "cpp": "cpp",
    "markdown": "markdown",
    "shell": "sh",
    "yaml": "yaml",
    "env": "sh",
    "toml": "toml",
    ".toml": "toml",
    ".py": "python",
    ".pyi": "python",
    ".cu": "cuda",
    ".cuh": "cuda",
    ".cpp": "cpp",
    ".cc": "cpp",
    ".h": "cpp",
    ".hpp": "cpp",
    ".md": "markdown",
    ".rst": "rst",
    ".sh": "sh",
    ".bash": "sh",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".env": "sh",
}
_LANGUAGE_NAMES = {
    "python": "Python",
    "cuda": "CUDA/C++",
    "markdown": "Markdown/reStructuredText",
    "shell": "shell scripts",
    "yaml": "YAML",
    "env": "`.env` files",
    "toml": "TOML (`levers.toml`, `pyproject.toml`)",
}


def family(code: str) -> str:
    return FAMILIES.get(code[:4], "Other")


SHORT_SUMMARY = 100  # characters a `gpulint rules` line gives a rule's summary


def _drop_parentheticals(text: str) -> str:
    """`text` without its "(...)" asides; code in backticks is left whole."""
    out, depth, in_code = [], 0, False
    for ch in text:
        if ch == "`" and depth == 0:
            in_code = not in_code
        elif not in_code and ch == "(":
            depth += 1
            continue
        elif not in_code and ch == ")" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    if depth:  # unbalanced: leave the text alone
        return text
    return re.sub(r"\s+([,.:;])", r"\1", re.sub(r"\s{2,}", " ", "".join(out))).strip()


def _cut_points(text: str, marks: tuple[str, ...]) -> list[int]:
    """Where one of `marks` starts outside backticks."""
    points, in_code = [], False
    for i, ch in enumerate(text):
        if ch == "`":
            in_code = not in_code
        elif not in_code and text.startswith(marks, i):
            points.append(i)
    return points


def short_summary(rule: type[Rule], limit: int = SHORT_SUMMARY) -> str:
    """The summary in about one line: `gpulint rules` and SARIF's shortDescription.

    The first sentence of "What it does" without its asides, cut before the list that follows
    a colon or the examples after "such as"; only when that fails, cut at a word. The whole
    sentence stays in `gpulint rule CODE` and the rule's page."""
    text = rule.summary().rstrip(".")
    if len(text) <= limit:
        return text + "."
    text = _drop_parentheticals(text)
    for marks in ((": ", "; ", " — "), (", such as ", " such as ", ", e.g. ")):
        for i in _cut_points(text, marks):
            if 30 <= i <= limit * 1.4:
                return text[:i].rstrip(",") + "."
    if len(text) <= limit * 1.3:
        return text + "."
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def noqa_comment(language: str, codes: str) -> str:
    """The comment that suppresses `codes` on a line of `language`, e.g. `// noqa: GPU802`."""
    opening, closing = _NOQA_COMMENT.get(language, ("# ", ""))
    return f"{opening}noqa: {codes}{closing}"


# -- measured figures ------------------------------------------------------------------------
@dataclass(frozen=True)
class BenchFigure:
    bench: str
    date: str
    device: str
    software: str
    method: str
    config: str
    summary: str
    variants: tuple[tuple[str, float, str, float | None], ...]  # (label, median, unit, spread)
    record: str = ""  # the evidence record the figures come from
    note: str = ""


@functools.cache
def bench_figures() -> dict[str, BenchFigure]:
    """bench name -> what it measured on the H200 (data/bench_figures.toml)."""
    text = resources.files("gpulint").joinpath("data/bench_figures.toml").read_text("utf-8")
    data = tomllib.loads(text)
    defaults = data.get("defaults", {})
    out = {}
    for name, entry in data.get("bench", {}).items():
        merged = {**defaults, **entry}
        out[name] = BenchFigure(
            bench=name,
            date=merged["date"],
            device=merged["device"],
            software=merged["software"],
            method=merged["method"],
            config=merged["config"],
            summary=merged["summary"],
            variants=tuple(
                (v["label"], v["value"], v["unit"], v.get("spread")) for v in merged["variants"]
            ),
            record=merged.get("record", ""),
            note=merged.get("note", ""),
        )
    return out


def _number(value: float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:,.2f}".rstrip("0").rstrip(".")


def _percent(fraction: float | None) -> str:
    if fraction is None:
        return "—"
    return f"{fraction:.1%}" if fraction < 0.01 else f"{fraction:.0%}"


def _evidence(rule: type[Rule]) -> list[str]:
    if not rule.bench:
        return []
    lines = ["## Measured cost", ""]
    figure = bench_figures().get(rule.bench)
    if figure is None:
        lines += [
            f"Backed by `gpulint bench {rule.bench}`. No H200 figure is recorded for it yet; run "
            "it on your own hardware and pass the record to `gpulint check --evidence` to have "
            "findings quote it.",
            "",
        ]
        return lines
    claim = getattr(rule, "bench_claim", None)
    cited = f" (this rule cites its `{claim}` comparison)" if claim else ""
    lines += [
        f"Backed by `gpulint bench {rule.bench}`{cited}: {figure.config}. "
        f"On an {figure.device} ({figure.date}; {figure.software}; {figure.method}):",
        "",
        "| variant | median | spread |",
        "|---|---|---|",
    ]
    for label, value, unit, spread in figure.variants:
        lines.append(f"| {label} | {_number(value)} {unit} | {_percent(spread)} |")
    lines += ["", figure.summary]
    if figure.note:
        lines += ["", figure.note]
    if figure.record:
        lines += ["", f"Record: `{figure.record}`; spread is (max − min) / median over the runs."]
    lines += [
        "",
        f"Run `gpulint bench {rule.bench}` on your own GPU to measure it there; "
        "`gpulint check --evidence .gpulint/evidence` then quotes your figure in the findings.",
        "",
    ]
    return lines


# -- the page --------------------------------------------------------------------------------
def tier_text(rule: type[Rule]) -> str:
    """The tier and how to turn the rule on: the page's fact, the same words everywhere."""
    family = rule.code[:4]
    if rule.tier == "pedantic":
        return (
            f'pedantic: off by default; select it by code (`"{rule.code}"`), by family '
            f'(`"{family}"`) or with all pedantic rules (`extend-select = ["pedantic"]`)'
        )
    if rule.tier == "preview":
        return (
            f'preview: off by default; select it by code (`"{rule.code}"`), or turn on '
            "preview mode (`preview = true`, `--preview`) to run it wherever the selection "
            "covers it"
        )
    return "default: on unless ignored"


def _facts(rule: type[Rule]) -> list[tuple[str, str]]:
    facts = [
        ("Code", f"`{rule.code}`"),
        ("Name", f"`{rule.name}`"),
        ("Family", f"{rule.code[:4]}xx {family(rule.code).lower()}"),
        ("Severity", rule.severity.value),
        ("Language", ", ".join(_LANGUAGE_NAMES.get(x, x) for x in rule.languages())),
        ("Autofix", "yes (`gpulint check --fix`)" if rule.fixable else "no"),
        ("Tier", tier_text(rule)),
    ]
    if rule.bench:
        facts.append(("Evidence", f"`gpulint bench {rule.bench}`"))
    return facts


def _suppression(rule: type[Rule]) -> str:
    comments = []
    for language in rule.languages():
        comment = f"`{noqa_comment(language, rule.code)}`"
        if comment not in comments:
            comments.append(comment)
    where = " or ".join(comments)
    return (
        f"Add {where} at the end of the line the finding is on (the language server's "
        f"code action does it for you). To turn it off for a project or for some files, use "
        f'`ignore = ["{rule.code}"]` or `per-file-ignores = {{ "glob" = ["{rule.code}"] }}` '
        f"under `[tool.gpulint]` in pyproject.toml."
    )


def _autofix(rule: type[Rule]) -> list[str]:
    lines = ["## Autofix", ""]
    if not rule.fixable:
        return lines + ["None: the change needs a decision only the author can make.", ""]
    lines += [
        "`gpulint check --fix` applies it (`--diff` shows it first), and so does the language "
        "server's quick fix. A fix is written only if the file still parses afterwards; "
        "findings the rule cannot fix safely are reported without one.",
        "",
    ]
    return lines


def _fence(code: str, info: str) -> list[str]:
    longest = max((len(m) for m in re.findall(r"`{3,}|~{3,}", code)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [f"{ticks}{info}", code.strip("\n"), ticks]


def _example_info(rule: type[Rule]) -> str:
    if rule.example_filename:
        name = rule.example_filename.lower()
        for ext in sorted((k for k in _FENCE if k.startswith(".")), key=len, reverse=True):
            if name.endswith(ext):
                return _FENCE[ext]
    return _FENCE.get(rule.languages()[0], "")


def _targets_note(targets: tuple[str, ...]) -> list[str]:
    if not targets:
        return []
    shown = ", ".join(f'"{t}"' for t in targets)
    return [f"With `targets = [{shown}]`:", ""]


def _examples(rule: type[Rule]) -> list[str]:
    info = _example_info(rule)
    lines = []
    if rule.INVALID:
        lines += ["## Examples that fire", ""]
        for example in rule.INVALID:
            case = example if isinstance(example, Invalid) else Invalid(example)
            lines += _targets_note(case.targets)
            lines += _fence(case.code, info) + [""]
            if case.fixed is not None:
                lines += ["After `gpulint check --fix`:", ""]
                lines += _fence(case.fixed, info) + [""]
    if rule.VALID:
        lines += ["## Examples that stay silent", ""]
        for silent in rule.VALID:
            quiet = silent if isinstance(silent, Valid) else Valid(silent)
            lines += _targets_note(quiet.targets)
            lines += _fence(quiet.code, info) + [""]
    return lines


def _left_alone(rule: type[Rule]) -> list[str]:
    """The rule's declared exemptions (`Rule.EXEMPTIONS`), each with the silent example the
    test suite runs to show the rule takes it."""
    if not rule.EXEMPTIONS:
        return []
    lines = [
        "## Left alone",
        "",
        "Cases the rule leaves alone on purpose. Each is named where the rule's code takes it "
        "(`self.exempt(...)`), and its example is linted by the test suite, which checks that "
        "the rule stays silent there for that reason.",
        "",
    ]
    info = _example_info(rule)
    for exemption in rule.EXEMPTIONS:
        lines += [f"### `{exemption.name}`", "", exemption.why, ""]
        if exemption.example is not None:
            quiet = (
                exemption.example
                if isinstance(exemption.example, Valid)
                else Valid(exemption.example)
            )
            lines += _targets_note(quiet.targets)
            if exemption.filename:
                lines += [f"In `{exemption.filename}`:", ""]
            lines += _fence(quiet.code, info) + [""]
        for path, text in exemption.files:
            suffix = "." + path.rsplit(".", 1)[-1] if "." in path else ""
            lines += [f"`{path}`:", ""] + _fence(text, _FENCE.get(suffix, "")) + [""]
        if exemption.fixture is not None:
            lines += [f"Example: `fixtures/{exemption.fixture}`.", ""]
    return lines


def _section(sections: dict[str, str], name: str) -> list[str]:
    body = sections.get(name, "")
    return [f"## {name}", "", body, ""] if body else []


def rule_markdown(rule: type[Rule]) -> str:
    """The rule's page: the same text in the terminal, docs/rules/ and SARIF `help.markdown`."""
    sections = rule.doc_sections()
    lines = [f"# {rule.code} `{rule.name}`", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(rule)]
    lines.append("")
    lines += _section(sections, "What it does")
    lines += _section(sections, "Why is this bad?")
    lines += _evidence(rule)
    lines += _section(sections, "Example")
    lines += _section(sections, "Use instead")
    # Sections a rule adds beyond the five (e.g. "Options"), in the order it wrote them.
    for name in sections:
        if name not in DOC_SECTIONS and name != KNOWN_PROBLEMS:
            lines += _section(sections, name)
    lines += _left_alone(rule)
    lines += _section(sections, KNOWN_PROBLEMS)
    lines += _autofix(rule)
    lines += _examples(rule)
    lines += ["## Suppressing it", "", _suppression(rule), ""]
    lines += _section(sections, "References")
    return "\n".join(lines).rstrip("\n") + "\n"


def rule_hover(rule: type[Rule], message: str | None = None) -> str:
    """A short cut of the page for an editor's hover: what, why, the measured cost, the fix."""
    sections = rule.doc_sections()
    lines = [f"**{rule.code}** `{rule.name}` ({rule.severity.value})", ""]
    if message:
        lines += [message, ""]
    for name in ("What it does", "Why is this bad?", "Use instead"):
        lines += _section(sections, name)
    figure = bench_figures().get(rule.bench) if rule.bench else None
    if figure is not None:
        lines += [
            f"**Measured** (`gpulint bench {rule.bench}`, {figure.device}): {figure.summary}",
            "",
        ]
    lines += [
        f"Suppress: `{noqa_comment(rule.languages()[0], rule.code)}`. "
        f"Full text: `gpulint rule {rule.code}`.",
        "",
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def rule_text(rule: type[Rule], brief: bool = False) -> str:
    """Plain text: headings as lines, code fences kept (terminals and SARIF `text`)."""
    if brief:
        sections = rule.doc_sections()
        what = sections.get("What it does", rule.summary())
        why = sections.get("Why is this bad?", "")
        return " ".join(f"{what}\n\n{why}".split()) if why else " ".join(what.split())
    out = []
    fence = None
    for line in rule_markdown(rule).splitlines():
        m = re.match(r"^(`{3,}|~{3,})", line)
        if m and (fence is None or m.group(1) == fence):
            fence = None if fence else m.group(1)
        elif fence is None:
            line = re.sub(r"^#+\s*", "", line).replace("**", "")
        out.append(line)
    return "\n".join(out) + "\n"
