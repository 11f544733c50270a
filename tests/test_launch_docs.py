"""GPU302 on `num_workers=args.x` with `--x` defaulting to 0 reads the script's folder: a README
or `.sh` launch script whose command runs the script with the option set (or a README that
names the option) is the run the maintainers document, and the finding stays silent."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
from pathlib import Path

import pytest

from gpulint.cli import main

SCRIPT = (
    Path(__file__).resolve().parent.parent / "fixtures/python/gpu302_workers_option_default_zero.py"
)


def _gpu302_lines(*args: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", *args, "--select", "GPU302", "--exit-zero", "--format", "text", "."])
    return [line for line in out.getvalue().splitlines() if "GPU302" in line]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shutil.copy(SCRIPT, tmp_path / "train_captions.py")
    return tmp_path


def _fires(folder: Path) -> bool:
    return any("dataloader_num_workers" in line for line in _gpu302_lines("--no-cache"))


def test_no_documentation_fires(folder):
    assert _fires(folder)


def test_readme_command_setting_the_option_is_silent(folder):
    (folder / "README.md").write_text(
        "## Training\n\n```bash\naccelerate launch train_captions.py \\\n"
        "  --train_batch_size=16 \\\n  --dataloader_num_workers=4 \\\n  --output_dir=out\n```\n"
    )
    assert not _fires(folder)


def test_launch_script_setting_the_option_is_silent(folder):
    (folder / "launch_captions.sh").write_text(
        "#!/bin/bash\npython train_captions.py --train_batch_size 16 --dataloader-num-workers $NPROC\n"
    )
    assert not _fires(folder)


def test_readme_prose_naming_the_option_is_silent(folder):
    (folder / "README.md").write_text(
        "Keep data_time low: raise --dataloader_num_workers to 4 or more on Linux.\n"
    )
    assert not _fires(folder)


def test_commands_that_do_not_set_it_for_this_script_fire(folder):
    (folder / "README.md").write_text(
        "```bash\naccelerate launch train_captions.py --train_batch_size=16\n```\n\n"
        "```bash\naccelerate launch train_captions_sdxl.py \\\n  --dataloader_num_workers=8\n```\n\n"
        "```bash\naccelerate launch train_captions.py --dataloader_num_workers 0\n```\n"
    )
    (folder / "notes.txt").write_text("python train_captions.py --dataloader_num_workers=8\n")
    assert _fires(folder)


def test_a_readme_linked_from_outside_the_folder_is_not_read(folder, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "README.md"
    elsewhere.write_text("python train_captions.py --dataloader_num_workers=4\n")
    try:
        os.symlink(elsewhere, folder / "README.md")
    except OSError:
        pytest.skip("no symbolic links here")
    assert _fires(folder)


def test_an_edited_readme_invalidates_the_cached_result(folder):
    assert any("dataloader_num_workers" in line for line in _gpu302_lines())
    (folder / "README.md").write_text("python train_captions.py --dataloader_num_workers=4\n")
    assert not any("dataloader_num_workers" in line for line in _gpu302_lines())
    (folder / "README.md").write_text("python train_captions.py --train_batch_size=4\n")
    assert any("dataloader_num_workers" in line for line in _gpu302_lines())
