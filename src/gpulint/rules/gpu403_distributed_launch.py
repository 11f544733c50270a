import ast
import re

from gpulint.diagnostics import Severity
from gpulint.frontends.python.file import PythonFile
from gpulint.rule import Exemption, Rule

_LAUNCH = "torch.distributed.launch"
_DASH_M = re.compile(r"-m\s+torch\.distributed\.launch\b")
_VERSION = re.compile(r"version|__version__|TORCH_VERSION", re.IGNORECASE)
_LOCAL_RANK_FLAGS = {"--local_rank", "--local-rank"}
_OTHER_LAUNCHER = re.compile(
    r"^\s*(?:import\s+deepspeed|from\s+deepspeed\b)|deepspeed\.add_config_arguments", re.MULTILINE
)
# Strings that only describe, never run: help texts, log lines, error messages.
_DESCRIBING_CALLS = re.compile(r"^(print|warn|warning|info|debug|error|exception|echo|log\w*)$")


class DistributedLaunch(Rule):
    """
    ## What it does
    Finds the deprecated `torch.distributed.launch` launcher in Python code: imported
    (`import torch.distributed.launch`, `from torch.distributed import launch`) or run as a
    module in a command built by the script (`"python -m torch.distributed.launch ..."`,
    `[sys.executable, "-m", "torch.distributed.launch", ...]`); and scripts that parse a
    `--local_rank` / `--local-rank` argument with argparse, which only that launcher passes.
    The same `python -m torch.distributed.launch` command is found in shell scripts, YAML
    `run:` blocks and the shell code blocks of Markdown guides (fenced blocks labelled `bash`,
    `sh`, `console` or unlabelled; `$ ` prompts dropped).

    A project that declares only torch releases before 1.10, which have no `torchrun`, is not
    checked.

    ## Why is this bad?
    `torch.distributed.launch` is deprecated in favour of `torchrun`, which sets `LOCAL_RANK`,
    `RANK` and `WORLD_SIZE` in the environment, restarts failed workers and supports elastic
    membership. A script that still expects `--local_rank` on its command line breaks or
    silently runs every process on GPU 0 when started by `torchrun`.

    ## Example
    ```python
    parser.add_argument("--local_rank", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.local_rank)
    ```

    ## Use instead
    ```python
    # launched with: torchrun --nproc-per-node=NUM_GPUS train.py
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    ```

    ## References
    - [torchrun (Elastic Launch), and the transition from torch.distributed.launch](https://docs.pytorch.org/docs/stable/elastic/run.html)
    - [Distributed communication package: launch utility](https://docs.pytorch.org/docs/stable/distributed.html#launch-utility)
    """

    code = "GPU403"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    torch_since = (1, 10)  # torchrun is new in torch 1.10
    name = "distributed-launch"
    language = ("python", "shell", "yaml", "markdown")  # scripts, `run:` blocks, guides
    triggers = ("launch", "local_rank", "local-rank")
    message = (
        "`torch.distributed.launch` is deprecated: launch with `torchrun` and read "
        '`int(os.environ["LOCAL_RANK"])`'
    )
    tags = ("distributed",)

    EXEMPTIONS = (
        Exemption(
            "describing-text",
            "A docstring, a `help=` text, or the message of a print, a log call, a warning or an "
            "exception that merely mentions the launcher: it describes, it does not run it.",
            'def main():\n    """Run with python -m torch.distributed.launch (deprecated)."""\n',
        ),
        Exemption(
            "old-torch-shim",
            "A launcher command or a `--local_rank` argument under a PyTorch version check (`if "
            "torch_version < (1, 10):`): it serves releases that had no `torchrun`, on purpose.",
            fixture="python/gpu403_silent_version_guarded_local_rank.py",
        ),
        Exemption(
            "other-launcher",
            "`--local_rank` in a script started by DeepSpeed's launcher (`import deepspeed`, "
            "`deepspeed.add_config_arguments`), which passes it too.",
            fixture="python/gpu403_silent_other_launchers.py",
        ),
    )

    VALID = [
        'import os\nlocal_rank = int(os.environ["LOCAL_RANK"])\n',
        "import argparse\nparser = argparse.ArgumentParser()\n"
        'parser.add_argument("--rank", type=int, help="use torchrun, not torch.distributed.launch")\n',
        'import subprocess\nsubprocess.run(["torchrun", "--nproc-per-node=8", "train.py"])\n',
        'import sys\nif torch_version < (1, 10):\n    cmd = [sys.executable, "-m", "torch.distributed.launch"]\n',
    ]
    INVALID = [
        "import argparse\nparser = argparse.ArgumentParser()\n"
        'parser.add_argument("--local_rank", type=int, default=0)\n',
        "import torch.distributed.launch\n",
        "from torch.distributed.launch import main as launch_main\n",
        'import os\nos.system(f"python -m torch.distributed.launch --nproc_per_node={n} train.py")\n',
        'import subprocess, sys\ncmd = [sys.executable, "-m", "torch.distributed.launch", "train.py"]\n',
    ]

    # -- imports -------------------------------------------------------------------------------
    def visit_ShellCommand(self, node, file: PythonFile):
        """`python -m torch.distributed.launch ...` in a shell script or a YAML `run:` block
        (the shell front-end's simple commands; `echo "..."` text is one word, never a match)."""
        words = list(node.words)
        if any(w == "-m" and nxt == _LAUNCH for w, nxt in zip(words, words[1:], strict=False)):
            yield self.report(file, node)

    def visit_Import(self, node: ast.Import, file: PythonFile):
        for alias in node.names:
            if alias.name == _LAUNCH or alias.name.startswith(_LAUNCH + "."):
                yield self.report(file, node)
                return

    def visit_ImportFrom(self, node: ast.ImportFrom, file: PythonFile):
        if node.level or not node.module:
            return
        if node.module == _LAUNCH or node.module.startswith(_LAUNCH + "."):
            yield self.report(file, node)
        elif node.module == "torch.distributed" and any(a.name == "launch" for a in node.names):
            yield self.report(file, node)

    # -- commands built as strings -------------------------------------------------------------
    def visit_Constant(self, node: ast.Constant, file: PythonFile):
        if not isinstance(node.value, str) or "torch.distributed.launch" not in node.value:
            return
        if self.exempt("describing-text", self._describes(node, file)) or self.exempt(
            "old-torch-shim", self._behind_version_check(node, file)
        ):
            return
        if _DASH_M.search(node.value):
            yield self.report(file, node)
            return
        # ["python", "-m", "torch.distributed.launch", ...]
        parent = file.parent(node)
        if node.value.strip() == _LAUNCH and isinstance(parent, (ast.List, ast.Tuple)):
            index = next(i for i, e in enumerate(parent.elts) if e is node)
            before = parent.elts[index - 1] if index else None
            if isinstance(before, ast.Constant) and before.value == "-m":
                yield self.report(file, node)

    @staticmethod
    def _behind_version_check(node: ast.AST, file: PythonFile) -> bool:
        """`if torch_version < (1, 10): cmd = [..., "torch.distributed.launch"]`: a shim for old
        PyTorch, which had no torchrun."""
        return any(
            isinstance(parent, (ast.If, ast.IfExp)) and _VERSION.search(file.segment(parent.test))
            for parent in file.ancestors(node)
        )

    @staticmethod
    def _describes(node: ast.AST, file: PythonFile) -> bool:
        """A docstring, a help= text, or the argument of print/logging/warnings."""
        child = node
        for parent in file.ancestors(node):
            if isinstance(parent, ast.Expr) and parent.value is node:
                return True  # a bare string statement: a docstring or a comment-like string
            if isinstance(parent, ast.keyword) and parent.arg in {
                "help",
                "description",
                "epilog",
                "msg",
            }:
                return True
            if isinstance(parent, ast.Call) and child is not parent.func:
                name = (
                    parent.func.attr
                    if isinstance(parent.func, ast.Attribute)
                    else getattr(parent.func, "id", "")
                )
                if _DESCRIBING_CALLS.match(name) or name.endswith(
                    ("Error", "Warning", "Exception")
                ):
                    return True
            if isinstance(parent, (ast.stmt, ast.Lambda)):
                return False
            child = parent
        return False

    # -- --local_rank arguments ----------------------------------------------------------------
    def visit_Call(self, node: ast.Call, file: PythonFile):
        if not isinstance(node.func, ast.Attribute) or node.func.attr != "add_argument":
            return
        flags = [
            a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ]
        flag = next((f for f in flags if f in _LOCAL_RANK_FLAGS), None)
        if flag is None:
            return
        if self.exempt("other-launcher", _OTHER_LAUNCHER.search(file.text)) or self.exempt(
            "old-torch-shim", self._behind_version_check(node, file)
        ):
            return
        required = next((k.value for k in node.keywords if k.arg == "required"), None)
        # Reading LOCAL_RANK too makes the argument a harmless leftover; requiring it breaks torchrun.
        reads_env = "LOCAL_RANK" in file.text and not (
            isinstance(required, ast.Constant) and required.value is True
        )
        yield self.report(
            file,
            node,
            f"`{flag}` is passed only by the deprecated `torch.distributed.launch`: launch with "
            '`torchrun` and read `int(os.environ["LOCAL_RANK"])`'
            + (" (this file already reads it; drop the argument)" if reads_env else ""),
            severity=Severity.INFO if reads_env else None,
        )
