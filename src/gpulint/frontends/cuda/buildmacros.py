"""A branch no build takes: `#if USE_MANAGED` on a macro that no source, build file
or toolchain of the checked tree defines."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from gpulint.frontends import MemoKey

if TYPE_CHECKING:
    from gpulint.frontends.cuda.file import CudaFile


# -- a branch no build takes (GPU807): `#if USE_MANAGED` that nothing defines ----------------
_DEFINE_NAME = re.compile(rb"(?m)^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)")
# Macros the compiler, the platform or a library header defines: never judged undefined.
_TOOLCHAIN_MACROS = frozenset(
    {"NDEBUG", "WIN32", "WIN64", "linux", "unix", "USE_ROCM", "GOOGLE_CUDA", "USE_CUDA"}
    | {"WITH_CUDA", "TENSORFLOW_USE_ROCM", "EIGEN_USE_GPU", "MPI_VERSION", "HIP_VERSION"}
)
_LIBRARY_PREFIX = re.compile(
    r"^(_|CUDA|CUDART|CUB_|THRUST_|CUTLASS_|CUTE_|NCCL_|CUBLAS|CUDNN|CUSPARSE|CUFFT|CURAND|"
    r"CUSOLVER|NVTX|NV|TORCH_|AT_|C10_|HIP|ROCM|EIGEN_|OMPI_|MPI|PYBIND11_|BOOST_|GLOG_|GOOGLE_)"
)
# Build files that pass `-DNAME` or declare an option: a macro named in one may be defined.
_BUILD_FILES = (
    "CMakeLists.txt", "setup.py", "Makefile", "makefile", "GNUmakefile", "meson.build",
    "meson_options.txt", "BUILD", "BUILD.bazel", "build.sh", "setup.cfg", "pyproject.toml",
    "configure.ac", "SConstruct", "build.py",
)  # fmt: skip
_BUILD_SUFFIXES = (".cmake", ".mk", ".bzl", ".sh")
_BUILD_WORD = re.compile(rb"[A-Za-z_]\w*")
_BUILD_WORDS: MemoKey[frozenset[str]] = MemoKey("cuda.build_words")
# `X`, `defined(X)`, `defined X`, `X == 1`, `X > 0`, `X != 0`: true only where X is defined
_SIMPLE_CONDITION = re.compile(
    r"^\(?\s*(?:defined\s*\(\s*(\w+)\s*\)|defined\s+(\w+)|(\w+)(?:\s*(?:==\s*[1-9]\d*|>\s*0|"
    r"!=\s*0|>=\s*1))?)\s*\)?$"
)


def tree_macros(files) -> frozenset[str]:
    """Names `#define`d in any of the checked tree's sources (path, bytes)."""
    names: set[str] = set()
    for _, data in files:
        if b"define" in data:
            names.update(m.decode("ascii", "replace") for m in _DEFINE_NAME.findall(data))
    return frozenset(names)


def _build_words(file: CudaFile) -> frozenset[str]:
    """Every word of the build files in the file's folder and the folders above it
    (`-DUSE_MANAGED=1`, `option(USE_MANAGED ...)`, `define_macros=[("USE_MANAGED", None)]`).
    Read as bounded text, never run; each read recorded as evidence for the cache."""
    import os

    from gpulint import claims
    from gpulint.safeio import read_side

    words: set[str] = set()
    folder = os.path.dirname(file.display_path)
    for _ in range(12):
        here = folder or "."
        claims.EVIDENCE_READS.add(os.path.abspath(here))  # a build file added: a cache miss
        try:
            with os.scandir(here) as entries:
                names = [
                    e.name
                    for e in entries
                    if (e.name in _BUILD_FILES or e.name.endswith(_BUILD_SUFFIXES))
                    and e.is_file(follow_symlinks=False)
                ][:64]
        except OSError:
            names = []
        for name in names:
            path = os.path.join(here, name)
            text = read_side(path, 1 << 20)
            if text is not None:
                claims.EVIDENCE_READS.add(os.path.abspath(path))
                for w in _BUILD_WORD.findall(text):
                    word = w.decode("ascii", "replace")
                    words.add(word[1:] if word.startswith("D") else word)  # `-DNAME`
                    words.add(word)
        if not folder:
            break
        folder = os.path.dirname(folder)
    return frozenset(words)


def undefined_macro_branch(file: CudaFile, node) -> str | None:
    """The macro of an `#if NAME`/`#ifdef NAME`/`#if defined(NAME) && ...` branch that holds
    `node` where no build defines NAME: no `#define` of it in this file or the checked tree,
    no build file in the folders up from this one names it (`-DNAME`, an option), and it is no
    toolchain, platform or library macro (`__CUDA_ARCH__`, `NDEBUG`, `_WIN32`, `CUDART_*`,
    `TORCH_*`...). The branch is dead code as the tree is built; None otherwise (an `#else`,
    an `#ifndef`, an `||`, a macro that may be defined)."""
    child = node
    for parent in file.ancestors(node):
        if parent.type in ("preproc_if", "preproc_ifdef", "preproc_elif"):
            alternative = parent.child_by_field_name("alternative")
            if alternative is None or child != alternative:
                name = _undefined_in(file, parent)
                if name is not None:
                    return name
        child = parent
    return None


def _undefined_in(file: CudaFile, branch) -> str | None:
    if branch.type == "preproc_ifdef":
        if file.node_text(branch).lstrip().startswith("#ifndef"):
            return None
        names = [file.node_text(branch.child_by_field_name("name"))]
    else:
        condition = file.node_text(branch.child_by_field_name("condition")).strip()
        names = []
        for part in condition.split("&&"):
            m = _SIMPLE_CONDITION.match(part.strip())
            if m is not None:
                names.append(next(g for g in m.groups() if g))
        if "||" in condition:
            return None
    for name in names:
        if not name or name.isdigit() or name in _TOOLCHAIN_MACROS or _LIBRARY_PREFIX.match(name):
            continue
        if name.encode() in file.data and re.search(
            rb"(?m)^[ \t]*#[ \t]*define[ \t]+" + re.escape(name.encode()) + rb"\b", file.data
        ):
            continue
        if name in file.project.macros:
            continue
        if name in file.memo.get(_BUILD_WORDS, lambda: _build_words(file)):
            continue
        return name
    return None
