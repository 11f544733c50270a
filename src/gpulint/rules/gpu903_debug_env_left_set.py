from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from gpulint.diagnostics import Finding, Severity
from gpulint.envvars import (
    DEBUG_VARIABLES,
    TRIGGERS,
    EnvSetting,
    EnvSettingVisits,
    is_debug_value,
    marks_debug,
)
from gpulint.rule import Exemption, Rule

if TYPE_CHECKING:
    from gpulint.envvars import SettingFile
    from gpulint.frontends.python.file import PythonFile


class DebugEnvLeftSet(EnvSettingVisits, Rule):
    """
    ## What it does
    Finds CUDA and NCCL debug switches left set where a job is launched: `CUDA_LAUNCH_BLOCKING=1`,
    `TORCH_USE_CUDA_DSA` and `NCCL_DEBUG=INFO` (or `TRACE`) in Python (`os.environ[...] = ...`,
    `os.environ.setdefault`, `os.environ.update`, `os.putenv`), shell launch scripts (`export`,
    `VAR=value cmd`), `.env` files and YAML launcher configs (`env:`/`environment:` sections,
    `run:`/`script:` shell blocks). Values from variables are not judged; `0`/`false` and
    `NCCL_DEBUG=WARN` switch nothing on.

    ## Why is this bad?
    `CUDA_LAUNCH_BLOCKING=1` makes every kernel launch synchronous: the host waits for each
    kernel, so CPU and GPU stop overlapping and a training step can take several times longer.
    `TORCH_USE_CUDA_DSA` compiles device-side assertions into kernels. `NCCL_DEBUG=INFO` logs on
    every communicator set-up and can flood logs on large jobs. Each is a debugging aid that is
    easy to leave behind in the script every later run inherits.

    ## Example
    ```bash
    export CUDA_LAUNCH_BLOCKING=1
    torchrun --nproc_per_node=8 train.py
    ```

    ## Use instead
    ```bash
    torchrun --nproc_per_node=8 train.py
    # to debug a failing kernel, once: CUDA_LAUNCH_BLOCKING=1 python train.py
    ```

    ## References
    - [PyTorch CUDA environment variables (CUDA_LAUNCH_BLOCKING, TORCH_USE_CUDA_DSA)](https://docs.pytorch.org/docs/stable/cuda_environment_variables.html)
    - [NCCL environment variables (NCCL_DEBUG)](https://docs.nvidia.com/deeplearning/nccl/archives/nccl_2265/user-guide/docs/env.html)
    - [Compute Sanitizer: debug kernels without leaving launches serialised](https://docs.nvidia.com/compute-sanitizer/ComputeSanitizer/index.html)
    """

    code = "GPU903"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    bench = "launch-blocking"
    name = "debug-env-left-set"
    severity = Severity.WARNING
    language = ("python", "shell", "env", "yaml")
    triggers = TRIGGERS
    message = (
        "`{name}={value}` left set: {why}; set it only for a debug run, not in the launch config"
    )
    tags = ("launch", "debug")
    example_filename = "launch.sh"

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "marked-debug",
            "A debug script the user marks as such: `debug` in its file name, or in a comment on "
            "the setting's line or the block above it (`# debug run: serialise launches`).",
            fixture="shell/debug_single_gpu_gpu903_silent.sh",
        ),
        Exemption(
            "test-code",
            "A switch set from Python test code, which sets variables on purpose.",
            'import os\nos.environ["CUDA_LAUNCH_BLOCKING"] = "1"\n',
            filename="tests/test_launch.py",
        ),
    )

    VALID = [
        "torchrun --nproc_per_node=8 train.py\n",
        "export NCCL_DEBUG=WARN\ntorchrun train.py\n",
        "export CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:-0}\n",
        "# debug run: serialise launches to find the failing kernel\nexport CUDA_LAUNCH_BLOCKING=1\n",
        "cat <<EOF\nexport CUDA_LAUNCH_BLOCKING=1\nEOF\n",
        "echo 'CUDA_LAUNCH_BLOCKING=1 python train.py'\n",
    ]
    INVALID = [
        "export CUDA_LAUNCH_BLOCKING=1\ntorchrun --nproc_per_node=8 train.py\n",
        "NCCL_DEBUG=INFO torchrun --nproc_per_node=8 train.py \\\n  --batch-size 32\n",
        "export TORCH_USE_CUDA_DSA=1\n",
    ]

    def judge(self, setting: EnvSetting, at: object, file: SettingFile) -> Iterator[Finding]:
        why = DEBUG_VARIABLES.get(setting.name)
        if why is None or not is_debug_value(setting.name, setting.value):
            return
        if self.exempt("marked-debug", marks_debug(file.display_path, setting.comments)):
            return
        yield self.report(file, at, name=setting.name, value=setting.value, why=why)

    def skips_python_file(self, file: PythonFile) -> bool:
        return self.exempt("test-code", file.is_test)
