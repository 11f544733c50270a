"""GPU802/GPU803 graded by the checked tree's own convention (checks_launches and
unchecked_by_convention in rules/_cuda_conventions.py), and launches whose fixed configuration
cannot fail."""

from __future__ import annotations

from pathlib import Path

from gpulint.config import Config
from gpulint.engine import Linter
from gpulint.frontends.cuda import FRONTEND
from gpulint.frontends.cuda.launchconfig import fixed_safe_config
from gpulint.settings import Settings
from gpulint.testing import example_config

KERNELS = "#include <cuda_runtime.h>\n__global__ void k(float* x, int n) {}\n"


def _checked(name: str) -> str:
    return (
        f"void {name}(float* x, int n, cudaStream_t s) {{\n"
        "  k<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n"
        "  CUDA_CHECK(cudaGetLastError());\n}\n"
    )


def _unchecked(name: str) -> str:
    return (
        f"void {name}(float* x, int n, cudaStream_t s) {{\n"
        "  CUDA_CHECK(cudaMemsetAsync(x, 0, n, s));\n"
        "  k<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n}\n"
    )


def _run(root: Path, default: bool = False):
    if default:
        config = Config(root=root)
        config.select = ["GPU"]
    else:
        config = example_config(root=root)
    return Linter(config).run([root], jobs=1).findings


def test_a_project_that_checks_its_launches_gets_gpu802_with_the_count(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(KERNELS + "".join(_checked(f"op{i}") for i in range(2)))
    (tmp_path / "more_ops.cu").write_text(KERNELS + "".join(_checked(f"m{i}") for i in range(2)))
    # (two files check: checking is the project's style, not one file's)
    (tmp_path / "fast.cu").write_text(KERNELS + _unchecked("fast"))
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert [(f.path, f.code) for f in found] == [("fast.cu", "GPU802")]
    assert "this project checks 4 of its 5 launches" in found[0].message


def _status_checked(name: str) -> str:
    # tiny-cuda-nn's shape: statuses checked after the launch, the last error never read
    return (
        f"void {name}(float* x, float* h, int n, cudaStream_t s) {{\n"
        "  k<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n"
        "  CUDA_CHECK_THROW(cudaMemcpyAsync(h, x, n, cudaMemcpyDeviceToHost, s));\n}\n"
    )


def test_a_tree_that_never_reads_the_last_error_checks_no_launch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(KERNELS + "".join(_status_checked(f"op{i}") for i in range(3)))
    (tmp_path / "more.cu").write_text(KERNELS + "".join(_status_checked(f"m{i}") for i in range(3)))
    (tmp_path / "fast.cu").write_text(KERNELS + _unchecked("fast"))
    codes = [f.code for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert codes == ["GPU812"]  # the unchecked launch: no convention, so the opt-in code
    # one read of the last error anywhere in the tree, and the statuses count again
    (tmp_path / "check.cpp").write_text(
        "#include <cuda_runtime.h>\nvoid sync_check() { CUDA_CHECK(cudaGetLastError()); }\n"
    )
    codes = [f.code for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert codes == ["GPU802"]


def test_one_file_that_checks_is_its_own_style_not_the_projects(tmp_path, monkeypatch):
    # a header vendored from a project that checks, in a code base that checks none of its own
    monkeypatch.chdir(tmp_path)
    (tmp_path / "vendored.cuh").write_text(KERNELS + "".join(_checked(f"v{i}") for i in range(6)))
    for name in ("a", "b", "c", "d", "e", "f", "g"):
        (tmp_path / f"{name}.cu").write_text(KERNELS + _unchecked(name))
    codes = [f.code for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert codes == ["GPU812"] * 7
    # the file that checks holds most launches: a file beside it that does not is a slip
    for name in ("b", "c", "d", "e", "f", "g"):
        (tmp_path / f"{name}.cu").unlink()
    assert [f.code for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")] == ["GPU802"]


def test_a_project_that_checks_none_gets_the_opt_in_gpu812(
    tmp_path, monkeypatch, default_tier_only
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ops.cu").write_text(KERNELS + "".join(_unchecked(f"op{i}") for i in range(5)))
    assert {f.code for f in _run(tmp_path, default=True)} & {"GPU802", "GPU812"} == set()
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert [f.code for f in found] == ["GPU812"] * 5
    assert "as 0 of this project's 5 launches are" in found[0].message


def test_a_stray_check_is_no_convention(tmp_path, monkeypatch):
    # 1 checked of 10 (10%): the house style is still not to check
    monkeypatch.chdir(tmp_path)
    body = _checked("op0") + "".join(_unchecked(f"op{i}") for i in range(1, 10))
    (tmp_path / "ops.cu").write_text(KERNELS + body)
    codes = [f.code for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert codes == ["GPU812"] * 9


def test_tests_and_programs_do_not_count_towards_the_convention(tmp_path, monkeypatch):
    # a test suite that checks every launch says nothing of the library's own style
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ops.cu").write_text(
        KERNELS + "".join(_checked(f"t{i}") for i in range(10))
    )
    (tmp_path / "ops.cu").write_text(KERNELS + "".join(_unchecked(f"op{i}") for i in range(5)))
    codes = [f.code for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert codes == ["GPU812"] * 5


def test_copies_the_project_checks_elsewhere_stay_gpu803(tmp_path, monkeypatch):
    # the header is not parsed by the index (no launch): its checks are read from its text
    monkeypatch.chdir(tmp_path)
    (tmp_path / "memory.h").write_text(
        "#pragma once\ninline void h2d(float* d, const float* h, size_t n) {\n"
        "  CUDA_CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));\n}\n"
        "inline void d2h(float* h, const float* d, size_t n) {\n"
        "  CUDA_CHECK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));\n}\n"
    )
    (tmp_path / "load.cu").write_text(
        "void load(float* d, const float* h, size_t n) {\n"
        "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n}\n"
        "void load2(float* d, const float* h, size_t n) {\n"
        "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n}\n"
    )
    found = [(f.path, f.code) for f in _run(tmp_path) if f.code in ("GPU803", "GPU811")]
    assert found == [("load.cu", "GPU803"), ("load.cu", "GPU803")]


def test_a_kind_of_call_the_project_never_checks_is_gpu811(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "memory.h").write_text(
        "#pragma once\ninline void h2d(float* d, const float* h, size_t n) {\n"
        "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n}\n"
        "inline void alloc(float** d, size_t n) {\n  CUDA_CHECK(cudaMalloc(d, n));\n}\n"
    )
    (tmp_path / "load.cu").write_text(
        "void load(float* d, const float* h, size_t n) {\n"
        "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n}\n"
        "void load2(float* d, const float* h, size_t n) {\n"
        "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n}\n"
    )
    found = [f for f in _run(tmp_path) if f.code in ("GPU803", "GPU811")]
    assert {(f.path, f.code) for f in found} == {("load.cu", "GPU811"), ("memory.h", "GPU811")}
    assert "as this project checks 0 of its 3 copies" in found[0].message
    assert not [f for f in _run(tmp_path, default=True) if f.code == "GPU803"]


def _launches(text: str):
    parsed = FRONTEND.parse("k.cu", text.encode(), Settings())
    return [
        (parsed.node_text(c).split("(")[0].strip(), fixed_safe_config(parsed, c))
        for c in parsed.launches
    ]


def test_fixed_safe_config_is_conservative():
    text = (
        "#define T 128\nconstexpr int kB = 64;\n__global__ void k() {}\n"
        "void f(int n, cudaStream_t s, int t) {\n"
        "  a<<<1, 1>>>();\n"
        "  b<<<kB, T, 0, s>>>();\n"
        "  c<<<dim3(4, 2), dim3(32, 8)>>>();\n"
        "  d<<<1, 512>>>();\n"  # registers may not fit 512 threads
        "  e<<<1, 128, 1024>>>();\n"  # dynamic shared memory
        "  g<<<n, 128>>>();\n"  # sized by the input
        "  h<<<1, t>>>();\n"  # a parameter
        "  i<<<0, 32>>>();\n"  # an empty grid is an invalid configuration
        "  j<<<1, dim3(16, 16, 2)>>>();\n"  # 512 threads
        "  m<<<70000 * 70000, 32>>>();\n"  # beyond the grid's x limit
        "}\n"
    )
    assert _launches(text) == [
        ("a<<<1, 1>>>", True),
        ("b<<<kB, T, 0, s>>>", True),
        ("c<<<dim3", True),
        ("d<<<1, 512>>>", False),
        ("e<<<1, 128, 1024>>>", False),
        ("g<<<n, 128>>>", False),
        ("h<<<1, t>>>", False),
        ("i<<<0, 32>>>", False),
        ("j<<<1, dim3", False),
        ("m<<<70000 * 70000, 32>>>", False),
    ]


def test_a_lone_call_in_a_project_that_checks_nothing_is_gpu811(tmp_path, monkeypatch):
    # two allocations are too few to show a convention of their own; the project's launches,
    # none checked, show it
    monkeypatch.chdir(tmp_path)
    launches = "".join(
        f"void op{i}(float* x, int n, cudaStream_t s) {{\n"
        "  k<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n}\n"
        for i in range(5)
    )
    table = "void make(float** t, size_t n) {\n  cudaMalloc(t, n);\n  cudaMemset(*t, 0, n);\n}\n"
    (tmp_path / "ops.cu").write_text(KERNELS + launches + table)
    found = [f for f in _run(tmp_path) if f.code in ("GPU803", "GPU811")]
    assert [f.code for f in found] == ["GPU811", "GPU811"]
    assert "as this project checks 0 of its 5 kernel launches" in found[0].message
    # the same calls where the project checks its launches: GPU803
    checked = launches.replace("(x, n);\n}", "(x, n);\n  CUDA_CHECK(cudaGetLastError());\n}")
    (tmp_path / "ops.cu").write_text(KERNELS + checked + table)
    assert [f.code for f in _run(tmp_path) if f.code in ("GPU803", "GPU811")] == ["GPU803"] * 2


def test_a_cached_file_follows_the_convention_other_files_set(tmp_path, monkeypatch):
    # fast.cu is unchanged; unchecked launches added in another file leave the project
    # checking 1 of its 10 launches, and fast.cu's cached GPU802 must become GPU812
    from gpulint.cache import ResultCache

    monkeypatch.chdir(tmp_path)

    def run():
        linter = Linter(example_config(root=tmp_path))
        cache = ResultCache(tmp_path / ".gpulint_cache", linter.fingerprint())
        report = linter.run([Path(".")], jobs=1, cache=cache)
        return sorted((f.path, f.code) for f in report.findings if f.code in ("GPU802", "GPU812"))

    (tmp_path / "fast.cu").write_text(KERNELS + _unchecked("fast"))
    (tmp_path / "ops.cu").write_text(KERNELS + _checked("op"))
    assert run() == [("fast.cu", "GPU802")]
    (tmp_path / "more.cu").write_text(KERNELS + "".join(_unchecked(f"m{i}") for i in range(8)))
    assert run() == [("fast.cu", "GPU812")] + [("more.cu", "GPU812")] * 8


_DEBUG_CHECK_H = """#include <cstdlib>
#include <stdexcept>
inline void syncAndCheck(const char* file, int line) {
  static const char* level = std::getenv("LIB_DEBUG_LEVEL");
  if (level != nullptr) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
  }
#ifndef NDEBUG
  cudaError_t result = cudaGetLastError();
  if (result != cudaSuccess) throw std::runtime_error(cudaGetErrorString(result));
#endif
}
#define sync_check_error() syncAndCheck(__FILE__, __LINE__)
"""


def _debug_checked(name: str) -> str:
    return (
        f"void {name}(float* x, int n, cudaStream_t s) {{\n"
        "  k<<<(n + 255) / 256, 256, 0, s>>>(x, n);\n"
        "  sync_check_error();\n}\n"
    )


def test_debug_only_checks_are_read_from_the_preprocessor_and_getenv_gates():
    from gpulint.frontends.cuda.debugbuilds import debug_only_checks

    assert debug_only_checks(_DEBUG_CHECK_H.encode()) == {"syncAndCheck", "sync_check_error"}
    read = "  cudaError_t e = cudaGetLastError();\n  if (e) abort();\n"
    for gate in ("#ifdef DEBUG", "#if defined(_DEBUG)", "#if !defined(NDEBUG)", "#ifndef NDEBUG"):
        text = f"void chk() {{\n{gate}\n{read}#endif\n}}\n#define CHK() chk()\n"
        assert debug_only_checks(text.encode()) == {"chk", "CHK"}, gate
    # the release branch of `#ifdef NDEBUG ... #else`, and an ungated read, are release checks
    for text in (
        f'void chk() {{\n#ifdef NDEBUG\n{read}#else\n  puts("debug");\n#endif\n}}\n',
        f"void chk() {{\n{read}}}\n",
        f'void chk() {{\n#ifdef DEBUG\n  puts("x");\n#endif\n{read}}}\n',
    ):
        assert debug_only_checks(text.encode()) == frozenset(), text
    # a debug-only definition beside a release one of the same macro name is not debug-only
    both = f"void chk() {{\n#ifndef NDEBUG\n{read}#endif\n}}\nvoid chk2() {{\n{read}}}\n"
    assert debug_only_checks(both.encode()) == {"chk"}


def test_launches_checked_only_in_debug_builds_are_no_release_convention(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "check.h").write_text(_DEBUG_CHECK_H)
    header = '#include "check.h"\n' + KERNELS
    (tmp_path / "ops.cu").write_text(header + "".join(_debug_checked(f"op{i}") for i in range(3)))
    (tmp_path / "more.cu").write_text(header + "".join(_debug_checked(f"m{i}") for i in range(3)))
    (tmp_path / "fast.cu").write_text(header + _unchecked("fast"))
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    # the debug-checked launches stay covered; the unchecked one is the house style (GPU812)
    assert [(f.path, f.code) for f in found] == [("fast.cu", "GPU812")]
    assert "it checks 6 more only in debug builds" in found[0].message
    assert "as 0 of this project's 7 launches are in a release build" in found[0].message
    # the same project with a check that also runs in a release build has a convention
    (tmp_path / "check.h").write_text(_DEBUG_CHECK_H.replace("#ifndef NDEBUG", "#if 1"))
    found = [f for f in _run(tmp_path) if f.code in ("GPU802", "GPU812")]
    assert [(f.path, f.code) for f in found] == [("fast.cu", "GPU802")]
    assert "checks 6 of its 7 launches" in found[0].message


def test_runtime_shared_memory_is_what_can_fail_by_configuration():
    from gpulint.frontends.cuda.sharedmem import runtime_shared_memory

    head = "#include <cuda_runtime.h>\nconstexpr int TILE = 64;\n__global__ void k(float* x) {}\n"
    cases = {
        "void f(float* x, int n, cudaStream_t s) { k<<<n, 128, n * sizeof(float), s>>>(x); }": (
            "`n * sizeof(float)`"
        ),
        "void f(float* x, cudaStream_t s) { k<<<1, 128, 96 * 1024, s>>>(x); }": "96 KB",
        "void f(float* x, cudaStream_t s) { k<<<8, 128, 16 * 1024, s>>>(x); }": None,
        "void f(float* x, cudaStream_t s) { k<<<8, 128>>>(x); }": None,
        # compile time, value unknown: `sizeof`, a local initialised from constants only
        "template <typename T>\nvoid f(T* x, cudaStream_t s) {\n"
        "  int smem = 2 * TILE * sizeof(T);\n  k<<<8, TILE, smem, s>>>(x);\n}": None,
        # assigned again from the input: run time
        "void f(float* x, int n, cudaStream_t s) {\n  int smem = TILE * 4;\n"
        "  if (n > 4) smem = n * 4;\n  k<<<8, TILE, smem, s>>>(x);\n}": "`smem`",
        # a parameter: the caller's choice
        "void f(float* x, size_t shmem, cudaStream_t s) { k<<<8, 128, shmem, s>>>(x); }": None,
        # the block's threads times a float: at most 4 KB
        "void f(float* x, int t, cudaStream_t s) { k<<<8, t, t * sizeof(float), s>>>(x); }": None,
        "void f(float* x, int n, cudaStream_t s) {\n  dim3 b(32, 8);\n"
        "  k<<<8, b, b.x * b.y * sizeof(float), s>>>(x);\n}": None,
    }
    for body, want in cases.items():
        file = FRONTEND.parse("k.cu", (head + body + "\n").encode(), Settings())
        (launch,) = file.launches
        assert runtime_shared_memory(file, launch) == want, body


def test_copies_are_graded_by_the_nearest_folder_that_shows_a_convention(tmp_path, monkeypatch):
    # utils/ checks its copies; models/ checks none of its many: a copy in models/vit/ (one a
    # file, too few for a file's convention) follows models/, one in utils/ follows utils/
    monkeypatch.chdir(tmp_path)
    copy = "  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);\n"
    checked = "  CUDA_CHECK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));\n"
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "memory.cu").write_text(
        "".join(
            f"void h2d{i}(float* d, const float* h, size_t n) {{\n{checked}}}\n" for i in range(6)
        )
    )
    (tmp_path / "utils" / "stage.cu").write_text(
        f"void stage(float* d, const float* h, size_t n) {{\n{copy}}}\n"
    )
    for name in ("gpt", "bert"):
        (tmp_path / "models" / name).mkdir(parents=True)
        (tmp_path / "models" / name / f"{name}.cc").write_text(
            "".join(
                f"void w{i}(float* d, const float* h, size_t n) {{\n{copy}}}\n" for i in range(4)
            )
        )
    (tmp_path / "models" / "vit").mkdir()
    (tmp_path / "models" / "vit" / "vit.cc").write_text(
        f"void load(float* d, const float* h, size_t n) {{\n{copy}}}\n"
    )
    found = {f.path: f for f in _run(tmp_path) if f.code in ("GPU803", "GPU811")}
    assert found["utils/stage.cu"].code == "GPU803"
    vit = found["models/vit/vit.cc"]
    assert vit.code == "GPU811"
    assert "as this folder (`models/`) checks 0 of its 9 copies" in vit.message
    # (the project as a whole checks 6 of 16: 37%, a convention it would have been graded by)
