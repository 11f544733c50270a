"""Text for people: `concise` (one finding per line, `path:line:col: CODE message`, as flake8
prints and the pre-commit hook shows), `full` (each finding with its source line and a caret
under the span, as ruff's default) and `grouped` (findings under their file). Colour only when
asked (the CLI decides: a terminal, no NO_COLOR); `quiet` drops the summary line.

A finding's related locations (the calls down to the sync a step loop pays for) follow it as
compilers print theirs: `path:line:col: note: message`, one line each; no code, so a reader of
`path:line:col: CODE` lines never takes one for a finding."""

from __future__ import annotations

from gpulint.diagnostics import Finding, Related, Severity
from gpulint.safeio import escape

_BOLD, _RED, _CYAN, _YELLOW, _BLUE, _RESET = (
    "\x1b[1m",
    "\x1b[31m",
    "\x1b[36m",
    "\x1b[33m",
    "\x1b[34m",
    "\x1b[0m",
)
_SEVERITY_COLOR = {Severity.ERROR: _RED, Severity.WARNING: _RED, Severity.INFO: _YELLOW}


class _Paint:
    def __init__(self, on: bool):
        self.on = on

    def __call__(self, text: str, *styles: str) -> str:
        return f"{''.join(styles)}{text}{_RESET}" if self.on and text else text


def _summary(findings: list[Finding], files_checked: int, paint: _Paint) -> str:
    fixable = sum(1 for f in findings if f.fix)
    files = len({f.path for f in findings})
    if not findings:
        checked = f"{files_checked} file{'s' if files_checked != 1 else ''}"
        return f"All checks passed ({checked} checked)."
    summary = f"Found {len(findings)} finding{'s' if len(findings) != 1 else ''}"
    summary += f" in {files} file{'s' if files != 1 else ''}"
    summary += f" ({files_checked} checked)."
    if fixable:
        summary += f" {fixable} fixable with `gpulint check --fix`."
    return summary


def _head(f: Finding, paint: _Paint) -> str:
    return (
        f"{paint(escape(f.path), _BOLD)}{paint(':', _CYAN)}{_where(f, paint)}"
        f"{paint(':', _CYAN)} {paint(f.code, _BOLD, _SEVERITY_COLOR[f.severity])}"
    )


def _where(f: Finding | Related, paint: _Paint) -> str:
    """`line:col`, or in a notebook ruff's `cell N:line:col`."""
    return paint(":", _CYAN).join(f.where.split(":"))


def _notes(f: Finding, paint: _Paint, indent: str = "") -> list[str]:
    """`path:line:col: note: message` for each related location, in order."""
    return [
        f"{indent}{paint(escape(r.path), _BOLD)}{paint(':', _CYAN)}{_where(r, paint)}"
        f"{paint(':', _CYAN)} {paint('note', _BOLD, _CYAN)}: {escape(r.message)}"
        for r in f.related
    ]


def _finish(lines: list[str], findings, files_checked, paint, quiet: bool) -> str:
    if not quiet:
        lines.append(_summary(findings, files_checked, paint))
    return "\n".join(lines) + ("\n" if lines else "")


def render(
    findings: list[Finding],
    *,
    files_checked: int,
    color: bool = False,
    quiet: bool = False,
    **_: object,
) -> str:
    # One finding per line, whatever a file name or an analysed file holds (escape sequences,
    # newlines): printed escaped.
    paint = _Paint(color)
    lines: list[str] = []
    for f in findings:
        lines.append(f"{_head(f, paint)} {escape(f.message)}")
        lines.extend(_notes(f, paint))
    return _finish(lines, findings, files_checked, paint, quiet)


def render_grouped(
    findings: list[Finding],
    *,
    files_checked: int,
    color: bool = False,
    quiet: bool = False,
    **_: object,
) -> str:
    paint = _Paint(color)
    lines: list[str] = []
    current = None
    widths: dict[str, int] = {}
    for f in findings:  # the line:col column is as wide as its file needs
        widths[f.path] = max(widths.get(f.path, 0), len(f.where))
    for f in findings:
        width = widths[f.path]
        if f.path != current:
            if current is not None:
                lines.append("")
            lines.append(f"{paint(escape(f.path), _BOLD)}:")
            current = f.path
        mark = paint("[*]", _CYAN) + " " if f.fix else ""
        where = f.where
        lines.append(
            f"  {where:<{width}} {paint(f.code, _BOLD, _SEVERITY_COLOR[f.severity])} "
            f"{mark}{escape(f.message)}"
        )
        lines.extend(_notes(f, paint, " " * (width + 3)))
    if lines:
        lines.append("")
    return _finish(lines, findings, files_checked, paint, quiet)


def _caret_line(line_text: str, f: Finding) -> tuple[str, str]:
    """The source line (tabs as 4 spaces) and the caret row under the finding's span."""
    expanded = line_text.replace("\t", "    ")

    def width(col: int) -> int:  # display width of the text before 1-based code-point `col`
        prefix = line_text[: max(col - 1, 0)]
        return len(prefix) + 3 * prefix.count("\t")

    start = width(f.col)
    if f.end_line == f.line and f.end_col and f.end_col > f.col:
        end = width(f.end_col)
    else:  # a point finding, or a span running past this line: to the end of the line
        end = max(len(expanded.rstrip()), start + 1)
    return expanded, " " * start + "^" * max(end - start, 1)


def render_full(
    findings: list[Finding],
    *,
    files_checked: int,
    read_text=None,
    color: bool = False,
    quiet: bool = False,
    **_: object,
) -> str:
    from gpulint.reporters import finding_source

    paint = _Paint(color)
    texts: dict = {}
    lines: list[str] = []
    for f in findings:
        lines.append(f"{_head(f, paint)} {escape(f.message)}")
        source = finding_source(read_text, f.path, f.cell, texts)
        line_text = source.line_text(f.line) if source else ""
        if line_text.strip():
            shown, carets = _caret_line(escape(line_text), f)
            number = str(f.line)
            gutter = " " * len(number)
            lines.append(paint(f"{gutter} |", _BLUE))
            lines.append(f"{paint(f'{number} |', _BLUE)} {shown}")
            lines.append(
                f"{paint(f'{gutter} |', _BLUE)} "
                f"{paint(carets, _BOLD, _SEVERITY_COLOR[f.severity])} {paint(f.code, _BOLD)}"
            )
            lines.append(paint(f"{gutter} |", _BLUE))
            if f.fix is not None:
                lines.append(f"{gutter} = {paint('help', _BOLD)}: {escape(f.fix.description)}")
        lines.extend(_notes(f, paint))
        lines.append("")
    return _finish(lines, findings, files_checked, paint, quiet)
