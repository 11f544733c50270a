from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from gpulint.diagnostics import Edit, Finding, Fix, Severity
from gpulint.rule import Exemption, Invalid, Rule
from gpulint.suppression import NoqaComment, NoqaUse


def _every_case(word: str) -> tuple[str, ...]:
    """`word` in every mix of cases: flake8 reads `noqa` and its codes in any case."""
    return tuple(
        "".join(c.upper() if mask >> i & 1 else c for i, c in enumerate(word))
        for mask in range(2 ** len(word))
    )


_GPU_ANY_CASE = tuple(w.encode() for w in _every_case("gpu"))


class UnusedNoqa(Rule):
    """
    ## What it does
    Finds `noqa` comments that suppressed nothing in this run, as ruff's RUF100 does: a
    `# noqa: GPU101` (CUDA `// noqa: GPU802`, Markdown `<!-- noqa: GPU910 -->`, shell, YAML,
    `.env` and lever-file `# noqa: ...`) whose code names no finding on the lines it covers, a
    code that is no gpulint code at all (`GPU999`), and, outside Python, a blanket `noqa` that
    suppressed nothing. The fix removes the unused codes and keeps the others (`# noqa: E501,
    GPU101` becomes `# noqa: E501`), or removes the whole comment when none remain.

    Only codes starting with `GPU` are gpulint's, and a code is judged only where this run
    could have reported it. So `extend-select = ["GPU003"]` alone judges the codes of the
    default-tier rules only; with `pedantic` (or `ALL`) selected, those of every stable rule. `noqa` text that is not a comment (inside a Python string, a Markdown
    code block, reStructuredText's `.. noqa` directive) is no `noqa` comment, and is not read.

    Whether a code suppressed something is decided after every other rule ran, so the rule
    agrees with `gpulint check`, its SARIF and JSON output, the language server (which offers
    the fix as a quick fix) and the flake8 plugin (`flake8 --select GPU003`; flake8 reads its
    own `noqa` afterwards, which never hides a GPU003 finding: the comment it is on does not
    name GPU003). The result cache keys each file by the selection and settings, so a changed
    selection judges the comments again. `gpulint check --add-noqa` never adds `GPU003`.

    ## Why is this bad?
    A `noqa` outlives the finding it silenced: once the code is fixed or the rule no longer
    fires there, the comment stays, and it will silently hide the next real finding on that
    line. Unknown codes are typos or codes of a rule that was renamed; they suppress nothing.

    ## Example
    ```python
    loss = model(x).sum()  # noqa: E501, GPU101
    ```

    ## Use instead
    ```python
    loss = model(x).sum()  # noqa: E501
    ```

    ## References
    - [ruff: unused-noqa (RUF100)](https://docs.astral.sh/ruff/rules/unused-noqa/)
    - [flake8: selecting and ignoring violations, in-line ignoring](https://flake8.pycqa.org/en/latest/user/violations.html#in-line-ignoring-errors)
    """

    code = "GPU003"
    tier = "pedantic"  # opt-in, as ruff's RUF100: a judgment on the comments, not the code
    name = "unused-noqa"
    severity = Severity.INFO
    language = ("python", "cuda", "markdown", "shell", "yaml", "env", "toml")
    triggers = _every_case("noqa")
    message = "unused `noqa` ({what})"
    fixable = True
    tags = ("suppression",)
    judges_noqa = True

    EXEMPTIONS = (
        Exemption(
            "other-tools-code",
            "Another tool's code (`E501`, `F401`, `RUF100`): only codes starting with `GPU` are "
            "gpulint's, and whether the other tool needs it is not known here.",
            fixture="python/gpu003_silent_used_and_foreign.py",
        ),
        Exemption(
            "rule-not-run",
            'A code of a rule this run did not select (ruff\'s "non-enabled"), or that cannot '
            "fire under its settings (a hardware rule with no `targets`, advice newer than the "
            "project's pinned torch), or a family prefix (`# noqa: GPU1`) some of whose rules did "
            "not run: another run may need it.",
            "import torch\nx = torch.ones(3)  # noqa: GPU205\n",
        ),
        Exemption(
            "shared-blanket",
            "A blanket `# noqa` in Python: flake8 and ruff read the same comment, and it may be "
            "theirs.",
            fixture="python/gpu003_silent_used_and_foreign.py",
        ),
        Exemption(
            "names-gpu003",
            "A comment that names `GPU003` itself (or a prefix covering it): that is how one "
            "deliberate unused `noqa` is kept.",
            "import torch\nx = torch.ones(3)  # noqa: GPU101, GPU003\n",
        ),
    )

    VALID = [
        "import torch\nx = torch.ones(3)  # noqa: E501\n",
        "import torch\nx = torch.ones(3)  # noqa\n",
        'import torch\ns = "# noqa: GPU101"\n',
    ]
    INVALID = [
        Invalid(
            "import torch\nx = torch.ones(3)  # noqa: GPU101\n", "import torch\nx = torch.ones(3)\n"
        ),
        Invalid(
            "import torch\nx = torch.ones(3)  # noqa: E501, GPU101\n",
            "import torch\nx = torch.ones(3)  # noqa: E501\n",
        ),
        Invalid(
            "import torch\nx = torch.ones(3)  # noqa: GPU999 keep the shape\n",
            "import torch\nx = torch.ones(3)  # keep the shape\n",
        ),
    ]

    @classmethod
    def gates(cls, language: str, settings: Any) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        # A Python file is judged only for its `GPU` codes (a bare `# noqa` is flake8's too):
        # one with `# noqa: F401` and no gpulint code is not parsed for this rule.
        requires = _GPU_ANY_CASE if language == "python" else ()
        return cls.trigger_bytes(settings), requires

    def judge_noqa(self, file: Any, uses: Sequence[NoqaUse]) -> Iterator[Finding]:
        for use in uses:
            comment = use.comment
            listed = comment.listed
            if self.exempt("names-gpu003", any(self.code.startswith(c) for c in listed)):
                continue  # `# noqa: GPU003`: kept on purpose
            if not listed:
                if "" in use.used or self.exempt("shared-blanket", comment.shared):
                    continue
                yield self._report(file, comment, "blanket, nothing suppressed", ())
                continue
            unused, unknown = [], []
            for c, k in zip(listed, use.kinds, strict=True):
                if self.exempt("other-tools-code", k == "other"):
                    continue
                if self.exempt("rule-not-run", k == "off"):
                    continue
                if k == "unknown":
                    unknown.append(c)
                elif c not in use.used:  # (a code this run could have reported)
                    unused.append(c)
            if not unused and not unknown:
                continue
            parts = []
            if unused:
                parts.append("unused: " + ", ".join(unused))
            if unknown:
                parts.append("unknown: " + ", ".join(unknown))
            yield self._report(file, comment, "; ".join(parts), {*unused, *unknown})

    def _report(
        self, file: Any, comment: NoqaComment, what: str, drop: set[str] | tuple[()]
    ) -> Finding:
        end_col = comment.col + (comment.end - comment.start) + len(comment.closing)
        at = (comment.line, comment.col, comment.line, end_col)
        fix = Fix("remove unused noqa codes", (_removal(comment, set(drop)),))
        return self.report(file, at, what=what, fix=fix)


def _removal(comment: NoqaComment, drop: set[str]) -> Edit:
    """The edit that takes `drop` out of the comment: its other codes stay as written, and a
    comment left with none goes, with the blanks before it (what follows it on the line, a
    reason in words, stays a comment)."""
    kept = [written for written, _, _ in comment.codes if written.upper() not in drop]
    if kept:
        first, last = comment.codes[0][1], comment.codes[-1][2]
        return Edit(first, last, ", ".join(kept))
    end = comment.end + len(comment.closing)
    rest = comment.rest[len(comment.closing) :]
    end += len(rest) - len(rest.lstrip())
    if not rest.strip():
        return Edit(comment.start - comment.padding, end, "")
    if comment.closing or rest.lstrip().startswith(comment.opening):
        # `<!-- noqa: GPU901 --> text`, `# noqa: GPU101  # why`: what follows stays as it was
        return Edit(comment.start, end, "")
    # `# noqa: GPU101 reason`: the reason stays, as a comment
    return Edit(comment.start, end, comment.opening + " ")
