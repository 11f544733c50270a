"""Environment variables set for a GPU job, whatever the file format: the shared model that
GPU903 (debug variables left set) and GPU904 (NCCL tuning without a stated reason) judge.

Each front-end (Python, shell, `.env`, YAML) turns what it parses into `EnvSetting`s: the name,
the literal value when there is one (None when it comes from a variable), where it is, and the
comments that sit on its line or directly above it. The rules then judge one model.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    import ast

    from gpulint.diagnostics import Finding
    from gpulint.frontends.envfile import EnvFile
    from gpulint.frontends.python.file import PythonFile
    from gpulint.frontends.shell import ShellFile
    from gpulint.frontends.yamlconfig import YamlFile

    # The parsed files that set environment variables (what `judge` gets).
    SettingFile: TypeAlias = PythonFile | ShellFile | EnvFile | YamlFile

# Debug switches: each costs speed on every step (serialised launches, device-side assertion
# bookkeeping, NCCL logging on every communicator call).
DEBUG_VARIABLES = {
    "CUDA_LAUNCH_BLOCKING": "serialises every kernel launch: the host waits for each kernel",
    "TORCH_USE_CUDA_DSA": "compiles in device-side assertions, which slow every kernel",
    "NCCL_DEBUG": "logs every NCCL communicator call",
}
# NCCL variables that change transport, algorithm or buffers: performance tuning that NCCL's
# own autotuning does better unless a measurement says otherwise.
NCCL_TUNING = {
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_BUFFSIZE",
    "NCCL_LL128_BUFFSIZE",
    "NCCL_MIN_NCHANNELS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_CTAS",
    "NCCL_MAX_CTAS",
    "NCCL_NTHREADS",
    "NCCL_CROSS_NIC",
    "NCCL_NVLS_ENABLE",
    "NCCL_COLLNET_ENABLE",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_CHUNK_SIZE",
}
NAMES = frozenset(DEBUG_VARIABLES) | NCCL_TUNING
# Trigger substrings: every name above contains one of these.
TRIGGERS = ("CUDA_LAUNCH_BLOCKING", "TORCH_USE_CUDA_DSA", "NCCL_")

# Tool directives are not reasons: noqa, type-ignore, shellcheck and similar pragmas.
_PRAGMA = re.compile(
    r"^(noqa|type:|pylint:|expect:|fixture:|shellcheck|yamllint|fmt:|isort:|pragma|nosec)",
    re.IGNORECASE,
)
_FALSE = {"", "0", "false", "no", "off", "n"}
_CODE_LIKE = re.compile(r"^\s*(export\s+)?[A-Z_][A-Z0-9_]*\s*[=:]")


@dataclass(frozen=True)
class EnvSetting:
    """One variable set: `export NCCL_ALGO=Tree`, `os.environ["X"] = "1"`, `env: {X: "1"}`."""

    name: str
    value: str | None  # the literal value; None when it is computed or from a variable
    line: int
    col: int
    end_line: int
    end_col: int
    comments: tuple[str, ...] = field(default=(), compare=False)  # same line, and the block above

    @property
    def span(self) -> tuple[int, int, int, int]:
        return self.line, self.col, self.end_line, self.end_col


def is_debug_value(name: str, value: str | None) -> bool:
    """Whether `value` turns the debug switch `name` on (unknown values are not judged)."""
    if value is None or "$" in value:
        return False
    v = value.strip().strip("'\"").lower()
    if name == "NCCL_DEBUG":
        return v in {"info", "trace"}
    return v not in _FALSE


def says_why(comments: tuple[str, ...]) -> bool:
    """A comment that gives a reason: prose, not a commented-out setting."""
    for comment in comments:
        text = comment.lstrip("#").strip()
        if not text or _CODE_LIKE.match(text) or _PRAGMA.match(text):
            continue
        if sum(ch.isalpha() for ch in text) >= 3:
            return True
    return False


def marks_debug(path: str, comments: tuple[str, ...]) -> bool:
    """A debug script the user marks as such: `debug` in its file name, or in a comment on the
    setting's line or the block above it."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1].lower()
    if "debug" in name:
        return True
    return any(
        "debug" in c.lower() and not _CODE_LIKE.match(c.lstrip("#").strip()) for c in comments
    )


def comments_around(lines: list[str], index: int, same_line_comment: str | None) -> tuple[str, ...]:
    """The comment on the setting's own line plus the comment block directly above it, reaching
    over a contiguous group of settings (one comment may explain the group under it).

    `lines` are the file's lines; `index` is the 0-based line of the setting; `same_line_comment`
    is the front-end's own reading of the comment on that line (None: no comment).
    """
    found: list[str] = []
    if same_line_comment:
        found.append(same_line_comment)
    i = index - 1
    while i >= 0:
        text = lines[i].strip()
        if text.startswith("#!"):
            break  # the interpreter line is not a comment
        if text.startswith("#"):
            found.append(text)
        elif text and _is_setting_line(text):
            pass  # the group continues upward
        else:
            break
        i -= 1
    return tuple(found)


def _is_setting_line(text: str) -> bool:
    for name in NAMES:
        if name in text:
            return True
    return bool(_SETTING_LINE.match(text))


# `export X=1`, `X=1 \`, YAML `X: 1` / `- X=1` / `- name: X`, Python `os.environ["X"] = "1"`
_SETTING_LINE = re.compile(
    r"^(export\s+|-\s*)?[\"']?[A-Z_][A-Z0-9_]*[\"']?\s*[=:]|^os\.environ|^-?\s*(name|value):"
)


# -- Python: os.environ[...] = ..., os.environ.setdefault / update, os.putenv ----------------
def python_settings(file: PythonFile, node: ast.AST) -> list[tuple[object, EnvSetting]]:
    """(ast node to report at, EnvSetting) for each variable a Python statement sets."""
    import ast

    pairs: list[tuple[ast.AST, ast.AST, ast.AST]] = []  # (report node, key node, value node)
    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Subscript) and file.qualname(target.value) == "os.environ":
                pairs.append((target, target.slice, node.value))
    elif isinstance(node, ast.Call):
        name = file.qualname(node)
        if name in ("os.environ.setdefault", "os.putenv") and len(node.args) >= 2:
            pairs.append((node, node.args[0], node.args[1]))
        elif name == "os.environ.update":
            for arg in node.args[:1]:
                if isinstance(arg, ast.Dict):
                    pairs.extend(
                        (k, k, v)
                        for k, v in zip(arg.keys, arg.values, strict=True)
                        if k is not None
                    )
            for kw in node.keywords:
                if kw.arg:
                    pairs.append((kw, ast.Constant(kw.arg), kw.value))
    out: list[tuple[object, EnvSetting]] = []
    for at, key, value in pairs:
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        if key.value not in NAMES:
            continue
        literal = (
            value.value
            if isinstance(value, ast.Constant) and isinstance(value.value, (str, int))
            else None
        )
        line, col, end_line, end_col = file.span(at)
        end = getattr(node, "end_lineno", line) or line
        tail = file.source.line_text(end)[getattr(node, "end_col_offset", 0) or 0 :].strip()
        own = tail if tail.startswith("#") else None
        lines = [file.source.line_text(n) for n in range(max(1, line - 30), line + 1)]
        comments = comments_around(lines, len(lines) - 1, own)
        setting = EnvSetting(
            key.value,
            None if literal is None else str(literal),
            line,
            col,
            line if end_line is None else end_line,  # parsed nodes always have an end
            col if end_col is None else end_col,
            comments,
        )
        out.append((at, setting))
    return out


class EnvSettingVisits:
    """What GPU903 and GPU904 share: every environment-variable setting a file makes (Python's
    `os.environ[...] = ...`, `setdefault`, `putenv`, `update`; shell, `.env` and YAML settings)
    goes to the rule's `judge(setting, at, file)`. Test code sets variables on purpose."""

    if TYPE_CHECKING:

        def judge(self, setting: EnvSetting, at: object, file: SettingFile) -> Iterator[Finding]:
            """The rule's judgment of one setting (each rule defines it)."""
            ...

    def skips_python_file(self, file: PythonFile) -> bool:
        """Test code (the rule names that exemption: it overrides this)."""
        return file.is_test

    def visit_Assign(self, node: ast.Assign, file: PythonFile) -> Iterator[Finding]:
        yield from self._python(node, file)

    def visit_Call(self, node: ast.Call, file: PythonFile) -> Iterator[Finding]:
        yield from self._python(node, file)

    def visit_EnvSetting(
        self, node: EnvSetting, file: ShellFile | EnvFile | YamlFile
    ) -> Iterator[Finding]:
        yield from self.judge(node, node, file)

    def _python(self, node: ast.Assign | ast.Call, file: PythonFile) -> Iterator[Finding]:
        if self.skips_python_file(file):
            return
        for at, setting in python_settings(file, node):
            yield from self.judge(setting, at, file)
