"""Vendored copies outside vendored-named folders (gpulint.vendored): a foreign licence header,
a copied package, a submodule. Left alone by default, said in a note and by --show-files;
`--no-skip-vendored` and `skip-vendored = false` check them. The project's own files, a
contributor's notice under the project's licence, a file reworked from another project's, and a
copy wired into the project's own packages are never skipped."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpulint.vendored import Identity, header_copy, holders, identity, licence_family

MIT = (
    "MIT License\n\nCopyright (c) 2023 Jane Doe\n\nPermission is hereby granted, free of "
    "charge, to any person obtaining a copy of this software...\nThe above copyright notice "
    "and this permission notice shall be included in all copies.\n"
)
APACHE_HEADER = (
    "# Copyright (c) 2017 Facebook, Inc. and its affiliates. All Rights Reserved.\n"
    '# Licensed under the Apache License, Version 2.0 (the "License");\n'
)
BSD_LICENSE = (
    "Copyright (c) 2019, Some Lab\nAll rights reserved.\n\nRedistribution and use in source "
    "and binary forms, with or without modification, are permitted...\n"
)
BODY = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"  # GPU201: the file was checked


def _tree(tmp_path: Path) -> Path:
    files = {
        "LICENSE": MIT,
        "pyproject.toml": '[project]\nname = "dataloop"\n\n[tool.gpulint]\n',
        "dataloop/__init__.py": "",
        "dataloop/ops.py": BODY,
        # the project's own notice
        "dataloop/own.py": "# Copyright (c) 2024 Jane Doe. MIT License.\n" + BODY,
        # a contributor's notice under the project's licence
        "dataloop/contrib.py": "# Copyright 2023 Ahmed Contributor\n# SPDX-License-Identifier: MIT\n"
        + BODY,
        # someone else's file, with its own licence
        "dataloop/metrics/fid_inception.py": APACHE_HEADER + BODY,
        # the same, but reworked by the project (it says so first)
        "dataloop/adapted.py": "# Modified from https://github.com/other/repo\n"
        + APACHE_HEADER
        + BODY,
        # the same, but wired into the project's own package
        "dataloop/integrated.py": APACHE_HEADER + "from dataloop import ops\n" + BODY,
        # a notice of another holder under the project's licence, that says it is a copy
        "scripts/copied.py": "# Copyright 2021 Other Org\n# MIT License\n"
        "# Copied from https://github.com/other-org/fastloader/blob/main/x.py\n" + BODY,
        # a copied package: its own licence of another holder, and its setup.py
        "tools/fastfid/LICENSE": BSD_LICENSE,
        "tools/fastfid/setup.py": "from setuptools import setup\nsetup()\n",
        "tools/fastfid/fid.py": BODY,
        # a sub-package of the project: the project's licence, repeated
        "plugins/extra/LICENSE": MIT,
        "plugins/extra/pyproject.toml": '[project]\nname = "extra"\n',
        "plugins/extra/run.py": BODY,
        # a part with its own gpulint configuration is the project's, whatever its licence
        "bench/LICENSE": BSD_LICENSE,
        "bench/pyproject.toml": "[tool.gpulint]\n",
        "bench/run.py": BODY,
        # a submodule: another repository's checkout
        "libs/upstream/.git": "gitdir: ../../.git/modules/upstream\n",
        "libs/upstream/train.py": BODY,
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / ".git").mkdir()
    return tmp_path


CHECKED = {
    "dataloop/ops.py",
    "dataloop/own.py",
    "dataloop/contrib.py",
    "dataloop/adapted.py",
    "dataloop/integrated.py",
    "plugins/extra/run.py",
    "bench/run.py",
}
SKIPPED_FILES = {"dataloop/metrics/fid_inception.py", "scripts/copied.py"}
SKIPPED_FOLDERS = {"tools/fastfid", "libs/upstream"}


def _check(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulint", "check", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
    )


def _report(cwd: Path, *args: str) -> dict:
    proc = _check(cwd, "--format", "json", *args, ".")
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads(proc.stdout)


def test_copies_are_left_alone_and_own_files_checked(tmp_path):
    project = _tree(tmp_path)
    report = _report(project, "--no-cache")
    checked = {f["path"] for f in report["findings"]}
    assert checked == CHECKED
    skipped = {d["path"] for d in report["diagnostics"] if d["code"] == "GPU002"}
    assert skipped == SKIPPED_FILES | SKIPPED_FOLDERS
    shown = _check(project, "--show-files", ".").stdout.splitlines()
    assert report["files_checked"] == len([line for line in shown if "[" not in line])
    # the same from the cache
    assert _report(project) == _report(project)
    assert {f["path"] for f in _report(project)["findings"]} == CHECKED


def test_a_note_says_what_was_left_alone(tmp_path):
    proc = _check(_tree(tmp_path), "--no-cache", ".")
    assert "4 vendored copies of other projects not checked" in proc.stderr
    assert "--no-skip-vendored" in proc.stderr
    assert "GPU002" not in proc.stdout  # a note, not a finding
    assert _check(tmp_path, "--no-cache", "-q", ".").stderr == ""


def test_show_files_lists_both_with_why(tmp_path):
    out = _check(_tree(tmp_path), "--show-files", ".").stdout.splitlines()
    plain = {line for line in out if "[" not in line}
    assert CHECKED <= plain and not plain & (SKIPPED_FILES | {"tools/fastfid/fid.py"})
    why = {line.split("  [")[0]: line for line in out if "[GPU002" in line}
    assert set(why) == SKIPPED_FILES | SKIPPED_FOLDERS
    assert "Copyright Facebook, Inc (Apache-2.0)" in why["dataloop/metrics/fid_inception.py"]
    assert "this project: MIT, Jane Doe" in why["dataloop/metrics/fid_inception.py"]
    assert "a copy of other-org/fastloader" in why["scripts/copied.py"]
    assert "Copyright Some Lab" in why["tools/fastfid"]
    assert "submodule" in why["libs/upstream"]


@pytest.mark.parametrize(
    "how", [("--no-skip-vendored",), ("--config", "alt.toml")], ids=["flag", "config"]
)
def test_no_skip_vendored_checks_them(tmp_path, how):
    project = _tree(tmp_path)
    (project / "alt.toml").write_text("[tool.gpulint]\nskip-vendored = false\n")
    report = _report(project, "--no-cache", *how)
    expected = CHECKED | SKIPPED_FILES | {"tools/fastfid/fid.py", "libs/upstream/train.py"}
    assert {f["path"] for f in report["findings"]} == expected
    assert not [d for d in report["diagnostics"] if d["code"] == "GPU002"]


def test_named_files_as_pre_commit_names_them(tmp_path):
    project = _tree(tmp_path)
    names = ["tools/fastfid/fid.py", "dataloop/metrics/fid_inception.py", "dataloop/ops.py"]
    proc = _check(project, "--no-cache", "--format", "json", "--force-exclude", *names)
    report = json.loads(proc.stdout)
    assert {f["path"] for f in report["findings"]} == {"dataloop/ops.py"}
    notes = {d["path"]: d["message"] for d in report["diagnostics"]}
    assert "in tools/fastfid: its own LICENSE" in notes["tools/fastfid/fid.py"]


def test_flake8_leaves_the_same_files_alone(tmp_path):
    project = _tree(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "flake8", "--isolated", "--select", "GPU", "--format=%(path)s", "."],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert {p.removeprefix("./") for p in proc.stdout.split()} == CHECKED


def test_a_project_of_unknown_identity_skips_no_header(tmp_path):
    project = _tree(tmp_path)
    (project / "LICENSE").unlink()
    report = _report(project, "--no-cache")
    skipped = {d["path"] for d in report["diagnostics"] if d["code"] == "GPU002"}
    assert skipped == {"libs/upstream"}  # the submodule still is another checkout


def test_a_walk_that_starts_in_a_checkout_is_no_submodule(tmp_path):
    # checking a folder of several clones: each is a repository, none is nested in another
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / ".git").mkdir()
    (tmp_path / "a" / "LICENSE").write_text(BSD_LICENSE)
    (tmp_path / "a" / "train.py").write_text(BODY)
    (tmp_path / "pyproject.toml").write_text("[tool.gpulint]\n")
    assert {f["path"] for f in _report(tmp_path, "--no-cache")["findings"]} == {"a/train.py"}


def test_holders_and_licences():
    assert [h for h, _ in holders(APACHE_HEADER)] == ["Facebook, Inc"]
    assert holders("The above copyright notice and this permission notice") == []
    assert holders("Copyright [yyyy] [name of copyright owner]") == []
    assert [h for h, _ in holders("Copyright 2020-present, NVIDIA CORPORATION.")] == [
        "NVIDIA CORPORATION"
    ]
    assert licence_family(APACHE_HEADER) == "Apache-2.0"
    assert licence_family(MIT) == "MIT"
    assert licence_family(BSD_LICENSE) == "BSD"
    assert licence_family("// SPDX-License-Identifier: BSD-3-Clause") == "BSD"
    assert licence_family("just code") is None


def test_same_holder_renamed_spelling_is_the_projects():
    ident = Identity(
        (("The HuggingFace Team", frozenset({"huggingface"})),), "MIT", "x", frozenset()
    )
    text = "# Copyright 2024 The Hugging Face team.\n# Licensed under the Apache License\n" + BODY
    assert header_copy(text.encode(), ident) is None


def test_reworked_from_a_named_source_is_the_projects():
    ident = Identity((("Jane Doe", frozenset({"jane", "doe"})),), "MIT", "x", frozenset())
    caffe = "/*\n * Copyright (c) 2014 The Regents of the University of California\n"
    caffe += " * Redistribution and use in source and binary forms ...\n */\n"
    plain = caffe + "#include <cuda.h>\n"
    assert header_copy(plain.encode(), ident) is not None  # a BSD notice in an MIT project
    reworked = (
        caffe + "// modified from\n// https://github.com/someone/dcn/blob/x.cu\n#include <cuda.h>\n"
    )
    assert header_copy(reworked.encode(), ident) is None
    # a copied model file's own history, with only the licence's address after it, is no
    # reworking by this project
    history = (
        "# Copyright 2022 EleutherAI and the HuggingFace Inc. team.\n"
        "# It has been modified from its original forms to fit.\n"
        "# Licensed under the Apache License, Version 2.0\n"
        "#     http://www.apache.org/licenses/LICENSE-2.0\nimport torch\n"
    )
    assert header_copy(history.encode(), ident) is not None


def test_identity_reads_licence_notice_and_authors(tmp_path):
    (tmp_path / "LICENSE.txt").write_text(MIT)
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """\
            [project]
            name = "dataloop"
            authors = [{name = "Kim Lee"}]
            """
        )
    )
    ident = identity(str(tmp_path))
    assert ident.licence == "MIT"
    assert {h for h, _ in ident.holders} == {"Jane Doe", "dataloop", "Kim Lee"}
