"""The shell, .env and YAML front-ends, and GPU903/GPU904 across all four formats."""

from __future__ import annotations

import pytest

from gpulint.frontends.envfile import EnvFile
from gpulint.frontends.shell import ShellFile, split_comment
from gpulint.frontends.yamlconfig import YamlFile
from gpulint.registry import frontend_for
from gpulint.testing import lint_text


def found(text: str, name: str) -> list[tuple[int, str]]:
    return sorted(
        (f.line, f.code) for f in lint_text(text, name) if f.code in ("GPU903", "GPU904", "GPU403")
    )


def test_frontends_by_name():
    assert frontend_for("scripts/train.sh").language == "shell"
    assert frontend_for("run.bash").language == "shell"
    assert frontend_for(".env").language == "env"
    assert frontend_for("cluster.env").language == "env"
    assert frontend_for("job.yaml").language == "yaml"
    assert frontend_for("levers.toml").language == "toml"


def test_split_comment_respects_quotes():
    assert split_comment('echo "a # b" # c') == ('echo "a # b" ', "# c")
    assert split_comment("echo a#b") == ("echo a#b", None)


def test_shell_logical_lines_positions():
    text = "#!/bin/bash\nexport A=1 NCCL_ALGO=Tree\nNCCL_DEBUG=INFO torchrun \\\n  --nproc_per_node=8 \\\n  train.py\n"
    f = ShellFile("t.sh", text)
    settings = [(s.name, s.value, s.line, s.col) for s in f.nodes_by_type["EnvSetting"]]
    assert settings == [
        ("A", "1", 2, 8),
        ("NCCL_ALGO", "Tree", 2, 12),
        ("NCCL_DEBUG", "INFO", 3, 1),
    ]
    [cmd] = f.nodes_by_type["ShellCommand"]
    assert cmd.words == ("torchrun", "--nproc_per_node=8", "train.py") and (cmd.line, cmd.col) == (
        3,
        17,
    )


def test_heredoc_and_quotes_are_not_settings():
    text = "cat <<EOF\nexport NCCL_DEBUG=INFO\nEOF\necho 'CUDA_LAUNCH_BLOCKING=1 python x.py'\nX=\"a\nb\" cmd\n"
    f = ShellFile("t.sh", text)
    assert [s.name for s in f.nodes_by_type["EnvSetting"]] == ["X"]


def test_env_command_prefix():
    assert found("env CUDA_LAUNCH_BLOCKING=1 python train.py\n", "run.sh") == [(1, "GPU903")]


@pytest.mark.parametrize(
    ("text", "name", "want"),
    [
        ("export CUDA_LAUNCH_BLOCKING=1\n", "a.sh", [(1, "GPU903")]),
        ("export CUDA_LAUNCH_BLOCKING=0\n", "a.sh", []),
        ("export NCCL_DEBUG=WARN\n", "a.sh", []),
        ("export NCCL_DEBUG=$LEVEL\n", "a.sh", []),
        ("export TORCH_USE_CUDA_DSA=1\n", "debug_kernels.sh", []),
        ("# debug: find the bad kernel\nexport CUDA_LAUNCH_BLOCKING=1\n", "a.sh", []),
        ("export NCCL_P2P_DISABLE=1\n", "a.sh", [(1, "GPU904")]),
        ("export NCCL_P2P_DISABLE=1  # PCIe switch hangs with P2P\n", "a.sh", []),
        ("# export NCCL_ALGO=Ring\nexport NCCL_ALGO=Tree\n", "a.sh", [(2, "GPU904")]),
        ("export NCCL_ALGO=Tree  # noqa: GPU904\n", "a.sh", []),
        ("NCCL_DEBUG=INFO\nNCCL_PROTO=Simple\n", ".env", [(1, "GPU903"), (2, "GPU904")]),
        (
            'export NCCL_DEBUG="INFO"  # fine-grained logs for the hang\n',
            "job.env",
            [(1, "GPU903")],
        ),
        (
            "python -m torch.distributed.launch --nproc_per_node 8 train.py\n",
            "a.sh",
            [(1, "GPU403")],
        ),
        ("torchrun --nproc_per_node 8 train.py\n", "a.sh", []),
    ],
)
def test_shell_and_env(text, name, want):
    assert found(text, name) == want


def test_env_file_parsing():
    f = EnvFile("x.env", "# comment\nexport A='1 2'\nB=3 # why\nnot a setting\n")
    assert [(s.name, s.value, s.line) for s in f.nodes_by_type["EnvSetting"]] == [
        ("A", "1 2", 2),
        ("B", "3", 3),
    ]


def test_yaml_env_shapes_and_positions():
    text = (
        "env:\n"
        "  NCCL_DEBUG: INFO\n"
        "services:\n"
        "  trainer:\n"
        "    environment:\n"
        "      - NCCL_ALGO=Tree\n"
        "containers:\n"
        "  - env:\n"
        "      - name: CUDA_LAUNCH_BLOCKING\n"
        '        value: "1"\n'
        "run: |\n"
        "  echo start\n"
        "  export TORCH_USE_CUDA_DSA=1\n"
    )
    f = YamlFile("job.yaml", text)
    got = [(s.name, s.value, s.line, s.col) for s in f.nodes_by_type["EnvSetting"]]
    assert ("NCCL_DEBUG", "INFO", 2, 3) in got
    assert ("NCCL_ALGO", "Tree", 6, 9) in got
    assert ("CUDA_LAUNCH_BLOCKING", "1", 9, 15) in got
    assert ("TORCH_USE_CUDA_DSA", "1", 13, 10) in got
    assert found(text, "job.yaml") == [(2, "GPU903"), (6, "GPU904"), (9, "GPU903"), (13, "GPU903")]


def test_yaml_ignores_non_launcher_keys_and_reads_comments():
    text = (
        "model:\n  note: NCCL_DEBUG=INFO is for hangs\n"
        "env:\n  # no InfiniBand on this cluster\n  NCCL_IB_DISABLE: '1'\n  NCCL_PROTO: LL  # measured +4% busbw\n"
    )
    assert found(text, "cfg.yml") == []


def test_yaml_k8s_command_list_and_bash_c():
    text = 'command: ["bash", "-c", "export NCCL_DEBUG=INFO; python -m torch.distributed.launch x.py"]\n'
    assert found(text, "pod.yaml") == [(1, "GPU403"), (1, "GPU903")]


def test_yaml_syntax_error_is_gpu000():
    [f] = [f for f in lint_text("env:\n  NCCL_DEBUG: [INFO\n", "bad.yaml")]
    assert f.code == "GPU000"


@pytest.mark.parametrize(
    ("code", "want"),
    [
        ('import os\nos.environ["CUDA_LAUNCH_BLOCKING"] = "1"\n', [(2, "GPU903")]),
        ('from os import environ\nenviron["NCCL_DEBUG"] = "INFO"\n', [(2, "GPU903")]),
        ('import os\nos.environ.setdefault("NCCL_ALGO", "Tree")\n', [(2, "GPU904")]),
        ('import os\nos.environ.update(NCCL_PROTO="Simple")\n', [(2, "GPU904")]),
        ('import os\nos.putenv("TORCH_USE_CUDA_DSA", "1")\n', [(2, "GPU903")]),
        ('import os\nos.environ["CUDA_LAUNCH_BLOCKING"] = flag\n', []),
        ('import os\n# os.environ["CUDA_LAUNCH_BLOCKING"] = "1"\n', []),
        ('import os\nos.environ["NCCL_ALGO"] = "Tree"  # Ring hangs on this fabric\n', []),
    ],
)
def test_python_env(code, want):
    assert found(code, "launch.py") == want


def test_python_env_in_tests_is_silent():
    assert (
        found('import os\nos.environ["CUDA_LAUNCH_BLOCKING"] = "1"\n', "tests/test_kernels.py")
        == []
    )
