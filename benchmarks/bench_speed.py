#!/usr/bin/env python3
"""gpulint's speed on a pinned real tree, side by side with `ast.parse`, ruff and flake8 + TorchFix.

Not a test: run it by hand, and read the load it records.

    python benchmarks/bench_speed.py                    # transformers 4.57.1 (pip download)
    python benchmarks/bench_speed.py --readme README.md # also rewrite the README's Speed table
    python benchmarks/bench_speed.py --tree PATH        # any tree of Python files
    python benchmarks/bench_speed.py --workers-only     # cold CPU/wall at 1 and N workers

What makes the numbers trustworthy:
- the corpus is pinned: transformers==4.57.1's wheel (2,214 Python files), fetched once with
  `pip download --no-deps` into benchmarks/.cache (gitignored);
- every tool runs `--repeat` times (at least 3), the tools interleaved round by round, each run
  with the load average read before it; the table gives medians with min-max;
- CPU time (user + system of the whole process tree) beside wall time: on a shared machine wall
  time says as much about the neighbours as about the tool;
- flake8 + TorchFix run from their own virtual environment (created here, pinned), never from
  gpulint's (whose flake8 plugin would load too), on a fixed sample of files; gpulint and
  `ast.parse` run on the same sample for that comparison;
- gpulint's own bytecode is compiled before anything is timed;
- memory is the proportional set size (PSS) of the whole process tree at its peak, and the
  largest single process, sampled from /proc;
- `--scale` times cold runs over 1x, 2x and 4x copies of the tree (hard links) and fits the
  log-log slope of CPU against files (1.0 is linear);
- `--workers-only` times only cold runs at 1 worker and at `--workers` (default: the usable
  cores), for the scaling target on a many-core machine: it needs nothing beyond Python and
  gpulint's own dependencies (no ruff, no flake8, no network once the tree is there);
- gpulint runs with the pedantic tier selected (every rule not in preview): the default tier
  alone is three CUDA rules, which parse no Python file, and would time reading, not linting.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
TRANSFORMERS = "4.57.1"
FLAKE8_PINS = ("flake8==7.5.0", "torchfix==0.7.0")
AST_PARSE = r"""
import ast, sys, warnings
warnings.simplefilter("ignore")
for line in open(sys.argv[1], encoding="utf-8"):
    try:
        ast.parse(open(line.rstrip("\n"), "rb").read())
    except (SyntaxError, ValueError):
        pass
"""
# The machine's own ceiling for parse-bound Python work: the same files parsed by N forked
# processes, largest first, one file a task (as gpulint's workers take them). What 16 workers
# can gain over one is bounded by this, not by the core count (shared caches, SMT, turbo).
AST_PARSE_PARALLEL = r"""
import ast, os, sys, warnings
from multiprocessing import get_context
warnings.simplefilter("ignore")
def parse(path):
    try:
        ast.parse(open(path, "rb").read())
    except (SyntaxError, ValueError):
        pass
if __name__ == "__main__":
    paths = [line.rstrip("\n") for line in open(sys.argv[1], encoding="utf-8")]
    paths.sort(key=os.path.getsize, reverse=True)
    with get_context("fork").Pool(int(sys.argv[2])) as pool:
        for _ in pool.imap_unordered(parse, paths, chunksize=1):
            pass
"""
# A one-file check where the process is already running: what an editor waits for on each
# change through `gpulint server` (the flake8 plugin lints its files the same way, in a worker
# kept for its configuration). The document is edited between re-lints (a comment appended),
# so nothing could be served for the same text; wall time of each call, the first (imports,
# the worker's fork) apart.
RESIDENT = r"""
import json, statistics, sys, time
from pathlib import Path
from gpulint.config import load_config
from gpulint.engine import Linter
from gpulint.server.core import lint_text
tree, repeat = Path(sys.argv[1]), int(sys.argv[2])
out = {}
for path in map(Path, sys.argv[3:]):
    config = load_config(path.parent)  # as the server's ConfigStore, with the pedantic tier
    config.extend_select = ["PEDANTIC"]
    linter = Linter(config)
    text = path.read_text(encoding="utf-8")
    t0 = time.perf_counter()
    found = lint_text(linter, path, path.as_uri(), text, "python").findings
    first = time.perf_counter() - t0
    times = []
    for i in range(repeat):
        t0 = time.perf_counter()
        lint_text(linter, path, path.as_uri(), text + f"\n# edit {i}\n", "python")
        times.append(time.perf_counter() - t0)
    out[path.name] = {"first_s": first, "median_s": statistics.median(times),
                      "min_s": min(times), "max_s": max(times), "findings": len(found)}
print(json.dumps(out))
"""
# What a one-file check costs before any of gpulint's own code runs: the standard-library
# modules a one-file check has loaded by its end (run here in-process on the same file and
# arguments), timed alone in a fresh interpreter. Beside `python -c pass`, it is the floor of
# the one-file line for any CLI of this shape on this machine's Python.
STDLIB_OF_CHECK = r"""
import contextlib, io, os, sys, sysconfig
before = set(sys.modules)
sys.argv = ["gpulint", *sys.argv[1:]]
from gpulint.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main()
    except SystemExit:
        pass
stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
def standard(name):
    module = sys.modules.get(name)
    where = getattr(module, "__file__", None)
    if where is None:
        return name in sys.builtin_module_names or name in sys.stdlib_module_names
    where = os.path.realpath(where)
    return where.startswith(stdlib + os.sep) and "site-packages" not in where
loaded = [n for n in sys.modules if n not in before and "." not in n and not n.startswith("_")]
print(",".join(sorted(n for n in loaded if standard(n) and n != "__main__")))
"""
README_BEGIN = "<!-- bench_speed: begin -->"
README_END = "<!-- bench_speed: end -->"


# -- set-up ------------------------------------------------------------------------------------
def fetch_transformers(cache: Path) -> Path:
    """transformers==4.57.1's package, unpacked from its wheel (the only download)."""
    target = cache / f"transformers-{TRANSFORMERS}" / "src"
    if (target / "transformers").is_dir():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    wheel = cache / f"transformers-{TRANSFORMERS}-py3-none-any.whl"
    if not wheel.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(cache)]
            + [f"transformers=={TRANSFORMERS}"],
            check=True,
        )
    with zipfile.ZipFile(wheel) as z:
        z.extractall(target, [n for n in z.namelist() if n.startswith("transformers/")])
    return target


def flake8_venv(cache: Path) -> Path:
    """flake8 + TorchFix in a virtual environment of their own (not gpulint's)."""
    venv = cache / "flake8-venv"
    flake8 = venv / "bin" / "flake8"
    if not flake8.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *FLAKE8_PINS], check=True)
    return flake8


def compile_gpulint() -> None:
    import gpulint
    import gpulint.rules

    for root in {Path(gpulint.__file__).parent, Path(gpulint.rules.__file__).parent}:
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(root)], check=True)


def scaled_tree(tree: Path, cache: Path, copies: int) -> Path:
    """`copies` copies of the tree side by side (hard links where the file system allows)."""
    if copies == 1:
        return tree
    out = cache / f"scale-{copies}"
    if not out.is_dir():
        for i in range(copies):
            shutil.copytree(tree, out / f"copy{i}", copy_function=_link_or_copy)
    return out


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


# -- measuring one command ---------------------------------------------------------------------
def _tree_memory(root_pid: int) -> tuple[int, int]:
    """(PSS of the process tree, PSS of its largest process), in kB, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    total = largest = 0
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, ()))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                pss = next((int(line.split()[1]) for line in f if line.startswith("Pss:")), 0)
        except OSError:
            continue
        total += pss
        largest = max(largest, pss)
    return total, largest


def measure(cmd: list[str], cwd: Path) -> dict:
    """Wall time, CPU time (user + system, the process and every child it waited for), the
    peak PSS of the tree and of its largest process, and the load average before the run."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = [0, 0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            total, largest = _tree_memory(proc.pid)
            peak[0], peak[1] = max(peak[0], total), max(peak[1], largest)
            stop.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stop.set()
    sampler.join()
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in (0, 1):
        sys.stderr.write(f"{' '.join(cmd[:4])}... exited {proc.returncode}: {err[-500:]!r}\n")
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "pss_mb": peak[0] / 1024,
        "largest_mb": peak[1] / 1024,
        "load": load,
        "stdout": out,
    }


def summary(runs: list[dict], key: str) -> tuple[float, float, float]:
    values = [r[key] for r in runs]
    return statistics.median(values), min(values), max(values)


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(y) against log(x)."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}"


# -- the benchmark -----------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tree", type=Path, help="tree of Python files (default: transformers)")
    parser.add_argument("--cache", type=Path, default=HERE / ".cache", help="download folder")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each tool (at least 3)")
    parser.add_argument("--flake8-sample", type=int, default=300, help="files for flake8")
    parser.add_argument("--scale", action="store_true", help="also 1x/2x/4x copies, cold")
    parser.add_argument("--scale-only", action="store_true", help="only the 1x/2x/4x runs")
    parser.add_argument(
        "--workers", type=int, help="workers of the many-worker cold run (default: usable cores)"
    )
    parser.add_argument(
        "--workers-only", action="store_true", help="only cold runs at 1 and --workers workers"
    )
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--readme", type=Path, help="rewrite this README's Speed table")
    args = parser.parse_args()
    repeat = max(3, args.repeat)
    args.cache = args.cache.resolve()

    tree = (args.tree or fetch_transformers(args.cache)).resolve()
    compile_gpulint()
    files = sorted(p for p in tree.rglob("*.py") if p.is_file())
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    sample = sorted(random.Random(0).sample(files, min(args.flake8_sample, len(files))))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = args.workers or cores or 1
    print(f"tree: {tree} ({len(files)} Python files, {size_mb:.1f} MB)")
    print(f"machine: {machine()}; {cores} usable cores")

    work = Path(tempfile.mkdtemp(prefix="bench_speed-"))
    all_list, sample_list = work / "all.txt", work / "sample.txt"
    all_list.write_text("\n".join(map(str, files)) + "\n")
    sample_list.write_text("\n".join(map(str, sample)) + "\n")
    py = sys.executable
    # The tree sits in the repository's gitignored cache, under this repository's licence:
    # neither gitignore nor the vendored-copy test is what is measured. Every rule outside
    # preview runs (the module docstring says why).
    gpulint = [py, "-m", "gpulint", "check", "--format", "json", "--exit-zero", "--no-gitignore"]
    gpulint += ["--no-skip-vendored", "--extend-select", "pedantic"]
    cache_dir = work / "cache"
    if args.scale_only:
        report_scaling(scale(tree, args.cache, gpulint, len(files), repeat))
        return 0
    if args.workers_only:
        ceiling = [py, "-c", AST_PARSE_PARALLEL, str(all_list)]
        report_workers(workers(tree, gpulint, cores, repeat, ceiling), cores)
        return 0
    flake8 = flake8_venv(args.cache)
    victim = files[len(files) // 2]
    original = victim.read_bytes()
    one_file = sorted(files, key=lambda p: p.stat().st_size)[len(files) // 2]
    # The one-file check that parses (a file with findings, median size among them): what an
    # editor or a pre-commit hook pays on a training script, not only on a file no rule wants.
    filled = subprocess.run(
        [*gpulint, "--cache-dir", str(cache_dir), str(tree)], cwd=tree, capture_output=True
    )
    flagged = sorted(
        {tree / f["path"] for f in json.loads(filled.stdout)["findings"]},
        key=lambda p: p.stat().st_size,
    )
    parsed_file = flagged[len(flagged) // 2] if flagged else one_file
    script = Path(py).parent / "gpulint"  # the console script pip installs
    # the median-size one-file check's arguments after `python -m gpulint`: the console-script
    # row and the standard-library floor run the very same check
    one_args = [*gpulint[3:], "--no-cache", str(one_file)]
    stdlib_modules = subprocess.run(
        [py, "-c", STDLIB_OF_CHECK, *one_args], cwd=tree, capture_output=True, text=True, check=True
    ).stdout.strip()
    commands = {
        "ast.parse, one process": [py, "-c", AST_PARSE, str(all_list)],
        f"ast.parse, {cores} processes": [py, "-c", AST_PARSE_PARALLEL, str(all_list), str(cores)],
        "gpulint cold, 1 worker": [*gpulint, "--no-cache", "--jobs", "1", str(tree)],
        f"gpulint cold, {cores} workers": [*gpulint, "--no-cache", "--jobs", str(cores), str(tree)],
        "gpulint warm, nothing changed": [*gpulint, "--cache-dir", str(cache_dir), str(tree)],
        "gpulint warm, 1 file changed": [*gpulint, "--cache-dir", str(cache_dir), str(tree)],
        "gpulint, one file (median size)": [*gpulint[:3], *one_args],
        "gpulint, one file, console script": [str(script), *one_args],
        "gpulint, one file with findings": [*gpulint, "--no-cache", str(parsed_file)],
        "python start-up (-c pass)": [py, "-c", "pass"],
        "python + a one-file check's stdlib": [py, "-c", f"import {stdlib_modules}"],
        "ruff check (defaults)": [
            str(Path(py).parent / "ruff"),
            "check",
            "--no-cache",
            "--exit-zero",
            "--quiet",
            "--isolated",
            str(tree),
        ],
        f"ast.parse, {len(sample)}-file sample": [py, "-c", AST_PARSE, str(sample_list)],
        f"gpulint cold, {len(sample)}-file sample": [
            *gpulint,
            "--no-cache",
            "--jobs",
            str(cores),
            *map(str, sample),
        ],
        f"flake8 + TorchFix, {len(sample)}-file sample": [
            str(flake8),
            "--select",
            "TOR",
            "--exit-zero",
            "-j",
            str(cores),
            *map(str, sample),
        ],
    }
    counts = {name: len(sample) if "sample" in name else len(files) for name in commands}
    for name in counts:
        if name.startswith(("gpulint, one file", "python ")):
            counts[name] = 1
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    try:
        for round_ in range(repeat):
            for name, cmd in commands.items():
                if name == "gpulint warm, 1 file changed":
                    victim.write_bytes(original + f"\n# bench_speed round {round_}\n".encode())
                try:
                    runs[name].append(measure(cmd, tree))
                finally:
                    if name == "gpulint warm, 1 file changed":
                        victim.write_bytes(original)
                        # restore the cache entry for the next round's "nothing changed"
                        subprocess.run(
                            commands["gpulint warm, nothing changed"], cwd=tree, capture_output=True
                        )
            print(f"round {round_ + 1}/{repeat} done", file=sys.stderr)
    finally:
        victim.write_bytes(original)

    resident = json.loads(
        subprocess.run(
            [py, "-c", RESIDENT, str(tree), "20", str(one_file), str(parsed_file)],
            cwd=tree,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    unfiltered = measure([*gpulint, "--no-cache", "--no-prefilter", str(tree)], tree)
    cold_findings = json.loads(runs["gpulint cold, 1 worker"][0]["stdout"])["findings"]
    same = cold_findings == json.loads(unfiltered["stdout"])["findings"]

    scaling = scale(tree, args.cache, gpulint, len(files), repeat) if args.scale else []

    loads = [r["load"] for rs in runs.values() for r in rs]
    rows = []
    print()
    header = f"{'':<40} {'files':>6} {'CPU s (median, min-max)':>25} {'wall s (median, min-max)':>26} {'PSS MB':>7} {'largest':>8}"
    print(header)
    for name, rs in runs.items():
        cpu, wall = summary(rs, "cpu_s"), summary(rs, "wall_s")
        pss, largest = summary(rs, "pss_mb")[0], summary(rs, "largest_mb")[0]
        rows.append((name, counts[name], cpu, wall, pss, largest))
        print(
            f"{name:<40} {counts[name]:>6} {cpu[0]:>9.2f} ({cpu[1]:.2f}-{cpu[2]:.2f})"
            f"{'':>4}{wall[0]:>9.2f} ({wall[1]:.2f}-{wall[2]:.2f}){'':>4} {pss:>7.0f} {largest:>8.0f}"
        )
    print(f"\nload average before the runs: {min(loads):.1f}-{max(loads):.1f} over {cores} cores")
    ast_cpu = summary(runs["ast.parse, one process"], "cpu_s")[0]
    ast_wall = summary(runs["ast.parse, one process"], "wall_s")[0]
    ast_many = summary(runs[f"ast.parse, {cores} processes"], "wall_s")[0]
    one = summary(runs["gpulint cold, 1 worker"], "cpu_s")[0]
    many = summary(runs[f"gpulint cold, {cores} workers"], "wall_s")[0]
    one_wall = summary(runs["gpulint cold, 1 worker"], "wall_s")[0]
    warm = summary(runs["gpulint warm, nothing changed"], "cpu_s")
    changed = summary(runs["gpulint warm, 1 file changed"], "cpu_s")
    single = summary(runs["gpulint, one file (median size)"], "cpu_s")
    script_one = summary(runs["gpulint, one file, console script"], "cpu_s")
    parsed_one = summary(runs["gpulint, one file with findings"], "cpu_s")
    bare = summary(runs["python start-up (-c pass)"], "cpu_s")[0]
    floor = summary(runs["python + a one-file check's stdlib"], "cpu_s")[0]
    f8 = summary(runs[f"flake8 + TorchFix, {len(sample)}-file sample"], "cpu_s")[0]
    g8 = summary(runs[f"gpulint cold, {len(sample)}-file sample"], "cpu_s")[0]
    a8 = summary(runs[f"ast.parse, {len(sample)}-file sample"], "cpu_s")[0]
    verdicts = [
        f"cold, 1 worker: CPU {one / ast_cpu:.2f}x ast.parse's (target <= 2x)",
        f"cold, {cores} workers: wall {many / ast_wall:.2f}x ast.parse's (target <= 1.5x; wall is "
        "load-sensitive)",
        f"cold, {cores} workers: wall {one_wall / many:.1f}x faster than 1 worker (target >= 12x "
        f"on 16; ast.parse alone on {cores} processes: {ast_wall / ast_many:.1f}x)",
        f"warm, nothing changed: CPU {warm[0]:.2f} s ({warm[1]:.2f}-{warm[2]:.2f}) (target < 0.2 s)",
        f"warm, 1 file changed: CPU {changed[0]:.2f} s ({changed[1]:.2f}-{changed[2]:.2f}) "
        "(target < 0.4 s)",
        f"one-file check: CPU {single[0] * 1000:.0f} ms ({single[1] * 1000:.0f}-{single[2] * 1000:.0f})"
        " (target < 50 ms); through the console script "
        f"{script_one[0] * 1000:.0f} ms; a file with findings ({parsed_file.name}) "
        f"{parsed_one[0] * 1000:.0f} ms; before gpulint's own code: the interpreter's start-up "
        f"{bare * 1000:.0f} ms, with the {len(stdlib_modules.split(','))} standard-library "
        f"modules the check loads {floor * 1000:.0f} ms",
        "one file in a running language server (re-linted after an edit, wall, median of 20): "
        + "; ".join(
            f"{name} {r['median_s'] * 1000:.0f} ms ({r['min_s'] * 1000:.0f}-"
            f"{r['max_s'] * 1000:.0f}; first {r['first_s'] * 1000:.0f} ms, {r['findings']} findings)"
            for name, r in resident.items()
        ),
        f"same {len(sample)} files: flake8 + TorchFix {f8:.2f} s CPU, gpulint {g8:.2f} s "
        f"({f8 / g8:.1f}x less), ast.parse {a8:.2f} s",
        f"findings with and without the prefilter identical: {same} ({len(cold_findings)} findings)",
    ]
    if scaling:
        verdicts.append(report_scaling(scaling))
    print()
    for line in verdicts:
        print(line)

    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "loads": loads,
                    "runs": {
                        k: [{kk: vv for kk, vv in r.items() if kk != "stdout"} for r in v]
                        for k, v in runs.items()
                    },
                    "resident": resident,
                    "verdicts": verdicts,
                },
                indent=2,
            )
        )
    if args.readme:
        write_readme(args.readme, files, size_mb, rows, loads, cores, verdicts, repeat)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if same else 1


def scale(tree: Path, cache: Path, gpulint: list[str], n: int, repeat: int) -> list:
    """Cold runs, one worker, over 1x, 2x and 4x copies of the tree, interleaved."""
    trees = {copies: scaled_tree(tree, cache, copies) for copies in (1, 2, 4)}
    measured: dict[int, list[dict]] = {copies: [] for copies in trees}
    for _ in range(repeat):
        for copies, scaled in trees.items():
            cmd = [*gpulint, "--no-cache", "--jobs", "1", str(scaled)]
            measured[copies].append(measure(cmd, scaled))
    return [(copies, n * copies, m) for copies, m in measured.items()]


def workers(
    tree: Path, gpulint: list[str], many: int, repeat: int, ceiling: list[str]
) -> dict[str, dict[int, list[dict]]]:
    """Cold runs at 1 worker and at `many`, and `ceiling` (parallel ast.parse) at 1 process and
    at `many`, interleaved."""
    measured: dict[str, dict[int, list[dict]]] = {
        "gpulint": {1: [], many: []},
        "ast.parse": {1: [], many: []},
    }
    for _ in range(repeat):
        for jobs in (1, many):
            measured["gpulint"][jobs].append(
                measure([*gpulint, "--no-cache", "--jobs", str(jobs), str(tree)], tree)
            )
            measured["ast.parse"][jobs].append(measure([*ceiling, str(jobs)], tree))
    return measured


def speedup(measured: dict[int, list[dict]], many: int) -> float:
    return summary(measured[1], "wall_s")[0] / summary(measured[many], "wall_s")[0]


def report_workers(both: dict[str, dict[int, list[dict]]], many: int) -> str:
    measured = both["gpulint"]
    for jobs, m in both["ast.parse"].items():
        cpu, wall = summary(m, "cpu_s"), summary(m, "wall_s")
        print(
            f"ast.parse, {jobs} process(es): CPU {cpu[0]:.2f} s ({cpu[1]:.2f}-{cpu[2]:.2f}), wall "
            f"{wall[0]:.2f} s ({wall[1]:.2f}-{wall[2]:.2f})"
        )
    for jobs, m in measured.items():
        cpu, wall = summary(m, "cpu_s"), summary(m, "wall_s")
        print(
            f"cold, {jobs} worker(s): CPU {cpu[0]:.2f} s ({cpu[1]:.2f}-{cpu[2]:.2f}), wall "
            f"{wall[0]:.2f} s ({wall[1]:.2f}-{wall[2]:.2f}), PSS {summary(m, 'pss_mb')[0]:.0f} MB, "
            f"load {min(r['load'] for r in m):.1f}-{max(r['load'] for r in m):.1f}"
        )
    line = (
        f"cold, {many} workers: wall {speedup(measured, many):.1f}x faster than 1 worker (target "
        f">= 12x on 16; ast.parse alone on {many} processes: {speedup(both['ast.parse'], many):.1f}x)"
    )
    print(line)
    return line


def report_scaling(scaling: list) -> str:
    points = [(n, statistics.median(r["cpu_s"] for r in m)) for _, n, m in scaling]
    for copies, n, m in scaling:
        cpu = summary(m, "cpu_s")
        print(
            f"scale {copies}x ({n} files): CPU {cpu[0]:.2f} s ({cpu[1]:.2f}-{cpu[2]:.2f}), "
            f"PSS {summary(m, 'pss_mb')[0]:.0f} MB, largest process "
            f"{summary(m, 'largest_mb')[0]:.0f} MB, load {min(r['load'] for r in m):.1f}-"
            f"{max(r['load'] for r in m):.1f}"
        )
    line = f"scaling: log-log slope of cold CPU {slope(points):.3f} (target <= 1.02)"
    print(line)
    return line


def write_readme(readme, files, size_mb, rows, loads, cores, verdicts, repeat) -> None:
    lines = [
        README_BEGIN,
        f"transformers {TRANSFORMERS} (`src/`, {len(files):,} Python files, {size_mb:.0f} MB) on "
        f"{machine()}; load average {min(loads):.1f}-{max(loads):.1f} before the runs (other "
        f"work shared the {cores} cores: CPU time is the figure to read). Medians of "
        f"{repeat} interleaved runs, min-max in brackets:",
        "",
        "| | files | CPU s | wall s | peak PSS (tree) | largest process |",
        "|---|---|---|---|---|---|",
    ]
    for name, count, cpu, wall, pss, largest in rows:
        lines.append(
            f"| {name} | {count:,} | {cpu[0]:.2f} ({cpu[1]:.2f}-{cpu[2]:.2f}) | "
            f"{wall[0]:.2f} ({wall[1]:.2f}-{wall[2]:.2f}) | {pss:.0f} MB | {largest:.0f} MB |"
        )
    lines += ["", *[f"- {v}" for v in verdicts], README_END]
    text = readme.read_text(encoding="utf-8")
    if README_BEGIN in text:
        head, rest = text.split(README_BEGIN, 1)
        text = head + "\n".join(lines) + rest.split(README_END, 1)[1]
    readme.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
