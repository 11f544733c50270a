from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from gpulint.diagnostics import Finding, Severity
from gpulint.envvars import NCCL_TUNING, EnvSetting, EnvSettingVisits, says_why
from gpulint.rule import Exemption, Rule

if TYPE_CHECKING:
    from gpulint.envvars import SettingFile
    from gpulint.frontends.python.file import PythonFile


class NcclTuningWithoutReason(EnvSettingVisits, Rule):
    """
    ## What it does
    Finds NCCL tuning variables (`NCCL_P2P_DISABLE`, `NCCL_IB_DISABLE`, `NCCL_SHM_DISABLE`,
    `NCCL_SOCKET_NTHREADS`, `NCCL_NSOCKS_PERTHREAD`, `NCCL_ALGO`, `NCCL_PROTO`, `NCCL_BUFFSIZE`,
    the channel and CTA counts, ...) set with no comment saying why: neither on the same line
    nor in the comment block directly above it (one comment may explain a group of settings).
    It reads Python (`os.environ[...] = ...` and friends), shell launch scripts, `.env` files
    and YAML launcher configs. A commented-out setting is not a reason. Site configuration that
    names hardware (`NCCL_SOCKET_IFNAME`, `NCCL_IB_HCA`) and `NCCL_DEBUG` (GPU903) are not
    tuning.

    ## Why is this bad?
    NCCL picks transports, algorithms, protocols and buffer sizes per topology at run time.
    Disabling peer-to-peer or InfiniBand forces traffic through host memory or sockets and can
    cut all-reduce bandwidth many times over; fixed algorithms and buffers that helped on one
    cluster hurt on the next. Copied from a forum post with no reason attached, these settings
    outlive the problem they worked around and nobody dares remove them. Change them only after
    evidence (`gpulint bench nccl` measures bus bandwidth), and write down why.

    ## Example
    ```bash
    export NCCL_P2P_DISABLE=1
    torchrun --nproc_per_node=8 train.py
    ```

    ## Use instead
    ```bash
    # P2P hangs on this host's PCIe switch (driver 550, see INFRA-123); remeasure after upgrade
    export NCCL_P2P_DISABLE=1
    torchrun --nproc_per_node=8 train.py
    ```

    ## References
    - [NCCL environment variables](https://docs.nvidia.com/deeplearning/nccl/archives/nccl_2265/user-guide/docs/env.html)
    - [PyTorch distributed: which backend to use](https://docs.pytorch.org/docs/stable/distributed.html)
    """

    code = "GPU904"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "nccl-tuning-without-reason"
    severity = Severity.INFO
    language = ("python", "shell", "env", "yaml")
    triggers = ("NCCL_",)
    bench = "nccl"
    message = (
        "`{name}={value}` set with no comment saying why: NCCL tunes this per topology itself; "
        "change it only after evidence (`gpulint bench nccl`) and state the reason in a comment"
    )
    tags = ("launch", "distributed")
    example_filename = "launch.sh"

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "test-code",
            "A variable set from Python test code, which sets variables on purpose (a test of "
            "the transport fallback disables P2P to exercise it).",
            'import os\nos.environ["NCCL_P2P_DISABLE"] = "1"\n',
            filename="tests/test_distributed.py",
        ),
    )

    VALID = [
        "# P2P hangs on this PCIe switch (driver 550); remeasure after the upgrade\nexport NCCL_P2P_DISABLE=1\n",
        "export NCCL_IB_DISABLE=1  # no InfiniBand on these nodes\n",
        "export NCCL_SOCKET_IFNAME=eth0\nexport NCCL_DEBUG=WARN\n",
        "# single node, no IB fabric\nexport NCCL_IB_DISABLE=1\nexport NCCL_P2P_LEVEL=NVL\n",
    ]
    INVALID = [
        "export NCCL_P2P_DISABLE=1\ntorchrun --nproc_per_node=8 train.py\n",
        "# export NCCL_ALGO=Ring\nexport NCCL_ALGO=Tree\n",
    ]

    def judge(self, setting: EnvSetting, at: object, file: SettingFile) -> Iterator[Finding]:
        if setting.name not in NCCL_TUNING or says_why(setting.comments):
            return
        value = setting.value if setting.value is not None else "..."
        yield self.report(file, at, name=setting.name, value=value)

    def skips_python_file(self, file: PythonFile) -> bool:
        return self.exempt("test-code", file.is_test)
