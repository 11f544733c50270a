from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TypeAlias

from gpulint.diagnostics import Finding, Severity
from gpulint.levers import Lever, preset_levers, registry, table_markdown
from gpulint.rule import Exemption, Invalid, Rule, Valid

if TYPE_CHECKING:
    from gpulint.frontends.python.file import PythonFile
    from gpulint.frontends.shell import ShellCommand, ShellFile
    from gpulint.frontends.yamlconfig import ConfigKey, YamlFile

    # What GPU901 reads: Python code, YAML configs, shell scripts.
    LeverSite: TypeAlias = PythonFile | YamlFile | ShellFile

_IMPORT_ERRORS = {
    "ImportError",
    "ModuleNotFoundError",
    "PackageNotFoundError",
    "Exception",
    "BaseException",
}
_TRUE = {"true", "1", "yes", "on"}
# `if is_flash_attn_2_available():`, `if fa_utils.is_installed:`, `if self.use_flash_attn:`:
# used only where installed, or switched by a setting we cannot see.
_AVAILABILITY = re.compile(
    r"available|installed|^has_|^use_|enabled?$|^is_.*supported", re.IGNORECASE
)
_PIP = {"pip", "pip3", "uv", "pipx", "mamba", "conda", "micromamba"}


def _matches_module(name: str, patterns) -> str | None:
    return next((p for p in patterns if name == p or name.startswith(p + ".")), None)


def _literal(node) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool, int, float)):
        return str(node.value).lower()
    return None


def _config_hit(lever: Lever, key: str, value: str | None) -> str | None:
    key = key.lower().rsplit(".", 1)[-1]
    for want_key, want_value in lever.config_pairs():
        if key != want_key or value is None:
            continue
        if (want_value is None and value in _TRUE) or value == want_value:
            return f"{key}={value}"
    return None


def _is_test_path(path: str) -> bool:
    parts = path.replace("\\", "/").lower().split("/")
    name = parts[-1]
    return (
        any(p in ("test", "tests", "qa") for p in parts[:-1])
        or name.startswith("test")
        or "_test." in name
    )


# Hardware a file says it targets, in its path or its opening comments / docstring, or in a CI
# job's `runs-on:` labels: (pattern, architectures).
_HARDWARE_NAMES = [
    (r"sm_?(\d{2,3})a?", None),  # the architecture itself
    (r"hopper|h100|h800|h200|gh200", ("sm_90",)),
    (r"ampere|a100|a10g?|a40|a6000|rtx_?30\d0", ("sm_80", "sm_86")),
    (r"ada|l4|l40s?|rtx_?40\d0|rtx_?6000_?ada", ("sm_89",)),
    (r"blackwell", ("sm_100", "sm_120", "sm_121")),
    (r"b100|b200|b300|gb200|gb300", ("sm_100",)),
    (r"rtx_?50\d0|rtx_?pro_?6000|pro6000", ("sm_120",)),
    (r"gb10|dgx_?spark", ("sm_121",)),
    (r"turing|t4|rtx_?20\d0", ("sm_75",)),
    (r"volta|v100", ("sm_70",)),
]
_HARDWARE_RE = [
    (re.compile(rf"(?<![a-z0-9])(?:{pattern})(?![a-z0-9])"), archs)
    for pattern, archs in _HARDWARE_NAMES
]
_RUNS_ON = re.compile(r"^\s*runs-on\s*:\s*(.+)$", re.MULTILINE)
_CI_PATH = re.compile(
    r"(^|/)(\.github/workflows|\.gitlab-ci|\.circleci|\.buildkite|\.azure-pipelines)"
)
_COMMENT = ("#", "//", "/*", "*", '"""', "'''")


def _hardware_in(text: str) -> set[str]:
    """Architectures named in `text` (lower-cased; spaces and dashes read as `_`)."""
    text = re.sub(r"[\s\-]+", "_", text.lower())
    found: set[str] = set()
    for pattern, archs in _HARDWARE_RE:
        for m in pattern.finditer(text):
            found.update(archs or (f"sm_{m.group(1)}",))
    return found


def _opening_text(text: str, lines: int = 30) -> str:
    """The comments and module docstring a file opens with (its header says what it targets)."""
    head: list[str] = []
    in_docstring = False
    for line in text.splitlines()[:lines]:
        stripped = line.strip()
        quotes = stripped.count('"""') + stripped.count("'''")
        if in_docstring or stripped.startswith(_COMMENT):
            head.append(stripped)
            in_docstring = in_docstring != (quotes % 2 == 1)
        elif stripped and not stripped.startswith(("import ", "from ")):
            break
    return "\n".join(head)


def file_targets(path: str, text: str) -> tuple[set[str], bool]:
    """(architectures the file says it targets, whether it is a CI job definition)."""
    path = path.replace("\\", "/")
    ci = bool(_CI_PATH.search(path))
    if ci or _RUNS_ON.search(text):
        labels = " ".join(m.group(1) for m in _RUNS_ON.finditer(text))
        return _hardware_in(labels), True
    folders_and_name = " ".join(path.split("/")[-4:])
    return _hardware_in(folders_and_name) | _hardware_in(_opening_text(text)), False


def _inside_package(path: str, lever: Lever) -> bool:
    """The file belongs to a package the lever is about, whose own modules, benchmarks and
    examples use it on purpose: a folder or the file named after it (`flash_attn/...`,
    `bench_fa3.py`), or a project that holds the package (`TransformerEngine/benchmarks/x.py`
    next to `TransformerEngine/transformer_engine/`)."""
    parts = path.replace("\\", "/").split("/")
    names = {_normal(n) for n in lever.packages_about()}
    stem = parts[-1].rsplit(".", 1)[0]
    tokens = re.split(r"[_\-.]", stem.lower())
    named = {_normal(n) for n in lever.about}  # a file is named after an explicit `about` only
    if _normal(stem) in names or any(_normal(p) in names for p in parts[:-1]):
        return True  # the package's own module, or a wrapper module named after it
    if named & set(tokens):
        return True
    try:
        folder = str(Path(path).resolve().parent)
    except (OSError, RuntimeError, ValueError):  # an unreadable or looping path: no project
        return False
    return _project_holds(folder, tuple(sorted(lever.packages_about())))


def _normal(name: str) -> str:
    return name.lower().replace("_", "").replace("-", "")


@functools.lru_cache(maxsize=4096)
def _project_holds(folder: str, packages: tuple[str, ...]) -> bool:
    """A folder above the file (up to the repository root) holds one of the packages."""
    here = Path(folder)
    try:
        for directory in [here, *here.parents][:8]:
            if any((directory / name / "__init__.py").is_file() for name in packages):
                return True
            if (directory / ".git").exists() or (directory / "pyproject.toml").is_file():
                break
    except OSError:
        pass
    return False


def _package_name(word: str) -> str:
    for stop in "=<>![;@ ":
        word = word.split(stop, 1)[0]
    return word.lower().replace("_", "-")


class RefutedLever(Rule):
    """
    ## What it does
    Finds code that re-attempts a lever already refuted for a configured hardware target, from
    the lever registry: an import (`import flash_attn_interface`), a call
    (`te.fp8_autocast(...)`, `MXLinearConfig(...)`), a config key
    (`attn_implementation="flash_attention_3"` in a call or a YAML config) or a package
    installed in a shell script (`pip install flash-attn`). The message quotes the refuting fact
    and its source. In Python it reports the first re-attempt of each lever in a file (one
    finding per lever per file).

    It needs configured targets, and judges a lever only for the targets it is refuted for.

    Severity: `warning` for a lever whose refuting fact is SOURCED; `info` (SARIF `note`) for an
    UNSOURCED or reasoned one, whose message says the fact is unsourced and may be stale.

    The built-in registry (`gpulint/data/levers.toml`) holds only public facts, each with its
    source and the hardware it is about:

    LEVER_TABLE

    A team's own evidence is opted into, never a default. The `cuda-dev-routing` preset is the
    fleet table of the cuda-dev-routing document (a DGX Spark GB10 and an RTX PRO 6000: FP8
    training and flash-attn on CC 12.x, GPU vector search, Muon for fine-tuning, Unsloth
    measured at 0.92x on an RTX 4090):

    ```toml
    [tool.gpulint]
    targets = ["sm_121"]
    lever-presets = ["cuda-dev-routing"]
    ```

    PRESET_TABLE

    Add your own levers with the same keys in pyproject.toml, or in `[[levers]]` of a
    `levers.toml` beside it (an entry with a built-in's or a preset's `id` replaces it):

    ```toml
    [[tool.gpulint.levers]]
    id = "xformers-on-sm120"
    name = "xformers memory-efficient attention on the Pro 6000"
    targets = ["sm_120"]                      # or GPU names, or "any"
    fact = "SDPA's cuDNN backend was 1.8x faster (5 runs, median, spread 2%)."
    status = "SOURCED"                        # SOURCED / UNSOURCED / reasoned
    source = ".gpulint/evidence/20261202T101500Z-attention-4242.json"
    imports = ["xformers.ops"]                # modules (and submodules)
    calls = ["xformers.ops.memory_efficient_attention"]   # qualified call names
    config = ["attention_backend=xformers"]   # call keywords and YAML keys ("key" = any true value)
    packages = ["xformers"]                   # `pip install` in shell scripts
    context = []                              # optional: also needs one of these in the file
    about = ["xformers"]                      # never fires inside these packages (default: from imports)
    note = ""                                 # why the fact may be out of date
    instead = "F.scaled_dot_product_attention"
    ```

    An entry without a `source` is reported by GPU902.

    ## Why is this bad?
    A lever that was tried, measured and refuted costs the same again when a new session tries
    it quietly: FlashAttention-3 has no kernel off Hopper, FP8 needs compute capability 8.9,
    MXFP8 needs Blackwell. If you believe a refuted lever now pays, that is a new pre-registered
    experiment with a stated gate, not a quiet retry. Rows whose refuting fact is UNSOURCED need
    a citation before they can justify not doing work: the message says so.

    ## Example
    ```python
    # [tool.gpulint] targets = ["sm_121"]
    from flash_attn_interface import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)
    ```

    ## Use instead
    ```python
    import torch.nn.functional as F
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    ```

    ## References
    - [FlashAttention README: FlashAttention-3 requirements (H100 / H800)](https://github.com/Dao-AILab/flash-attention#flashattention-3-beta-release)
    - [Transformer Engine: datatype and hardware support matrix](https://nvidia.github.io/TransformerEngine/support_matrix.html)
    - [torch.nn.functional.scaled_dot_product_attention](https://docs.pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html)
    """

    code = "GPU901"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "refuted-lever"
    language = ("python", "yaml", "shell")
    triggers = ()  # from the registry: see trigger_bytes
    message = (
        're-attempts a refuted lever, {lever} ({what}), refuted for {targets}: "{fact}" '
        "[{status}]{instead}"
    )
    tags = ("levers",)

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "test-code",
            "Test code (a test module, or a config or script under `tests/`): tests exercise "
            "every backend on purpose; they re-attempt nothing.",
            Valid("from flash_attn_interface import flash_attn_func\n", targets=("sm_121",)),
            filename="tests/test_attention.py",
        ),
        Exemption(
            "optional-backend",
            "A lever imported only under `try: ... except ImportError` or an availability check "
            "(`if is_flash_attn_3_available():`): an optional backend, used only where installed.",
            Valid(
                "try:\n    from flash_attn import flash_attn_func\nexcept ImportError:\n"
                "    flash_attn_func = None\n\n\ndef attend(q, k, v):\n"
                "    return flash_attn_func(q, k, v)\n",
                targets=("sm_75",),
            ),
        ),
        Exemption(
            "switched-off",
            "A call made with `enabled=False`, an `enabled=` from a variable or `**kwargs`: off, "
            "or switched by a setting the file does not show.",
            Valid(
                "import transformer_engine.pytorch as te\n"
                "with te.fp8_autocast(enabled=args.fp8):\n    y = model(x)\n",
                targets=("A100",),
            ),
        ),
        Exemption(
            "inside-lever-package",
            "Inside the package a lever is about (flash-attn's own modules, torchao's, "
            "Transformer Engine's), or a module named after it: it uses the lever on purpose.",
            Valid(
                "from flash_attn_interface import flash_attn_func\nout = flash_attn_func(q, k, v)\n",
                targets=("sm_121",),
            ),
            filename="flash_attn/flash_attn_interface.py",
        ),
        Exemption(
            "other-hardware",
            "A file that targets other hardware: its path or opening comment names it "
            "(`mha_h100/`, `# Hopper (sm_90) kernels`), or a CI job whose `runs-on:` labels name "
            "none of your targets (`ubuntu-latest`, other GPUs).",
            Valid(
                '"""Attention for Hopper (sm_90): FA3 kernels."""\n'
                "from flash_attn_interface import flash_attn_func\n",
                targets=("sm_121",),
            ),
        ),
    )

    VALID = [
        Valid(
            "from flash_attn import flash_attn_func\nout = flash_attn_func(q, k, v)\n",
            targets=("sm_90",),
        ),
        "from flash_attn_interface import flash_attn_func\n",  # no targets configured
        Valid("from flash_attn_interface import flash_attn_func\n", targets=("sm_90",)),
        Valid(
            "try:\n    import flash_attn_interface\nexcept ImportError:\n    flash_attn_interface = None\n",
            targets=("sm_121",),
        ),
        Valid(
            "import torch.nn.functional as F\nout = F.scaled_dot_product_attention(q, k, v)\n",
            targets=("sm_121",),
        ),
    ]
    INVALID = [
        Invalid(
            "from flash_attn_interface import flash_attn_func\nout = flash_attn_func(q, k, v)\n",
            targets=("sm_121",),
        ),
        Invalid("from flash_attn import flash_attn_func\n", targets=("sm_75",)),
        Invalid(
            "import transformer_engine.pytorch as te\nwith te.fp8_autocast(enabled=True):\n    y = model(x)\n",
            targets=("A100",),
        ),
        Invalid(
            "from transformers import AutoModelForCausalLM\n"
            'model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="flash_attention_3")\n',
            targets=("sm_121",),
        ),
        Invalid(
            "from torchao.prototype.mx_formats import MXLinearConfig\nconfig = MXLinearConfig()\n",
            targets=("H100",),
        ),
    ]

    @classmethod
    def doc(cls) -> str:
        return (
            super()
            .doc()
            .replace("LEVER_TABLE", table_markdown())
            .replace("PRESET_TABLE", table_markdown(preset_levers("cuda-dev-routing")))
        )

    @classmethod
    def applicable(cls, settings) -> bool:
        return bool(settings.targets)  # a lever is refuted for targets; none configured, none fire

    @classmethod
    def trigger_bytes(cls, settings=None) -> tuple[bytes, ...]:
        words = {w for lever in registry(settings) for w in lever.trigger_words()}
        # No lever has a detectable pattern: nothing can fire, and no file needs parsing.
        return tuple(sorted(w.encode() for w in words)) or (b"\x00gpulint: no lever patterns\x00",)

    def __init__(self, settings):
        super().__init__(settings)
        self.active = [
            (lever, hit)
            for lever in registry(settings)
            if (hit := lever.refuted_for(settings.targets))
        ]

    def _active_for(self, file: LeverSite) -> list[tuple[Lever, list]]:
        """The levers that apply to this file: not inside a package a lever is about, and only
        for the targets the file can run on (a file that names its hardware, an `h100` module or
        a header saying `sm_90`, targets that; a CI job runs on its runners' hardware only)."""
        path = file.display_path
        text = getattr(file, "text", "") or ""
        declared, ci = file_targets(path, text)
        out = []
        for lever, targets in self.active:
            if self.exempt("inside-lever-package", _inside_package(path, lever)):
                continue
            if declared or ci:
                targets = [t for t in targets if t.arch.name in declared]
            if self.exempt("other-hardware", not targets):
                continue
            out.append((lever, targets))
        return out

    # -- Python ------------------------------------------------------------------------------
    def finish(self, file: LeverSite) -> Iterator[Finding]:
        # Test code exercises every backend on purpose; it re-attempts nothing. (The Python
        # front-end is imported here, not with the module: `gpulint check` asks this rule for
        # its triggers without linting anything.)
        from gpulint.frontends.python.file import PythonFile

        if not self.active or not isinstance(file, PythonFile):
            return
        if self.exempt("test-code", file.is_test):
            return
        active = self._active_for(file)
        if not active:
            return
        imports, calls, optional = self._python_sites(file)
        for lever, targets in active:
            if lever.context and not self._in_context(lever, imports, calls):
                continue
            if self.exempt(
                "optional-backend",
                any(_matches_module(name, lever.imports + lever.calls) for name in optional)
                and not any(_matches_module(name, lever.imports) for _, name in imports),
            ):
                continue  # a guarded import: used only where installed
            hits: list[tuple[ast.stmt | ast.expr | ast.keyword, str]] = [
                (node, name) for node, name in imports if _matches_module(name, lever.imports)
            ]
            if not hits:
                for node, name in calls:
                    if name in lever.calls and not self.exempt(
                        "switched-off", self._disabled(node, name)
                    ):
                        hits.append((node, f"{name}()"))
                    elif isinstance(node, ast.Call):
                        for kw in node.keywords:
                            if kw.arg and (what := _config_hit(lever, kw.arg, _literal(kw.value))):
                                hits.append((kw, what))
            if hits:  # one finding per lever per file: the first place that re-attempts it
                first, what = min(hits, key=lambda h: (h[0].lineno, h[0].col_offset))
                yield self._report(file, first, lever, targets, what)

    def _python_sites(
        self, file: PythonFile
    ) -> tuple[
        list[tuple[ast.Import | ast.ImportFrom, str]], list[tuple[ast.Call, str]], list[str]
    ]:
        imports: list[tuple[ast.Import | ast.ImportFrom, str]] = []
        optional: list[str] = []  # modules and names imported under `try/except ImportError`
        for node in file.nodes(ast.Import, ast.ImportFrom):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif node.module and not node.level:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            if self._guarded(file, node):
                optional.extend(names)
            else:
                imports.extend((node, n) for n in names[:1] if isinstance(node, ast.ImportFrom))
                imports.extend((node, n) for n in names if isinstance(node, ast.Import))
        calls = [(node, file.qualname(node) or "") for node in file.nodes(ast.Call)]
        return imports, calls, optional

    @staticmethod
    def _guarded(file: PythonFile, node: ast.AST) -> bool:
        """Imported as an optional backend: under `try/except ImportError`, or under an
        availability check or a switch (`if is_flash_attn_2_available():`, `if self.use_flash_attn:`)."""
        for parent in file.ancestors(node):
            if isinstance(parent, ast.If):
                for part in ast.walk(parent.test):
                    target = part.func if isinstance(part, ast.Call) else part
                    name = getattr(target, "attr", None) or getattr(target, "id", None) or ""
                    if isinstance(name, str) and _AVAILABILITY.search(name):
                        return True
            if isinstance(parent, ast.Try):
                for handler in parent.handlers:
                    names = (
                        handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
                    )
                    if handler.type is None or any(
                        (getattr(n, "id", None) or getattr(n, "attr", None)) in _IMPORT_ERRORS
                        for n in names
                    ):
                        return True
        return False

    @staticmethod
    def _disabled(node, name: str = "") -> bool:
        """Off, or switched by a value we cannot see: `enabled=False`, `enabled=<variable>`,
        `**kwargs`; JAX's Transformer Engine autocast is off unless `enabled=True`."""
        keywords = getattr(node, "keywords", ())
        if any(k.arg is None for k in keywords):
            return True
        enabled = [k for k in keywords if k.arg in ("enabled", "fp8_enabled")]
        if not enabled:
            return name.startswith("transformer_engine.jax.")
        return not any(isinstance(k.value, ast.Constant) and k.value.value is True for k in enabled)

    @staticmethod
    def _in_context(lever: Lever, imports, calls) -> bool:
        for want in lever.context:
            if "." in want:
                if any(_matches_module(n, [want]) for _, n in imports) or any(
                    n == want for _, n in calls
                ):
                    return True
            else:
                if any(n.split(".")[0] == want for _, n in imports):
                    return True
                if any(
                    isinstance(c, ast.Call)
                    and getattr(c.func, "attr", getattr(c.func, "id", None)) == want
                    for c, _ in calls
                ):
                    return True
        return False

    # -- YAML config keys and shell installs -------------------------------------------------
    def visit_ConfigKey(self, node: ConfigKey, file: YamlFile) -> Iterator[Finding]:
        if self.exempt("test-code", _is_test_path(file.display_path)):
            return
        for lever, targets in self._active_for(file):
            if lever.context:
                continue  # context needs code, not a config file
            what = _config_hit(lever, node.key, str(node.value).lower())
            if what:
                yield self._report(file, node, lever, targets, what)

    def visit_ShellCommand(
        self, node: ShellCommand, file: ShellFile | YamlFile
    ) -> Iterator[Finding]:
        if self.exempt("test-code", _is_test_path(file.display_path)):
            return
        words = list(node.words)
        if "install" not in words:
            return
        head = [w.rsplit("/", 1)[-1] for w in words[: words.index("install")]]
        if not any(h in _PIP or h.startswith("pip") for h in head):
            return
        packages = {
            _package_name(w) for w in words[words.index("install") + 1 :] if not w.startswith("-")
        }
        for lever, targets in self._active_for(file):
            wanted = {p.lower().replace("_", "-") for p in lever.packages}
            for name in sorted(packages & wanted):
                yield self._report(file, node, lever, targets, f"pip install {name}")

    def _report(self, file: LeverSite, node: object, lever: Lever, targets, what: str) -> Finding:
        instead = f"; instead: {lever.instead}" if lever.instead else ""
        return self.report(
            file,
            node,
            # A sourced refutation is a measured cost; an unsourced or reasoned one is advice.
            severity=None if lever.status == "SOURCED" else Severity.INFO,
            lever=lever.name,
            what=what,
            targets="any hardware"
            if "any" in lever.targets
            else ", ".join(t.label for t in targets),
            fact=lever.fact,
            status=lever.status_sentence(),
            instead=instead,
        )
