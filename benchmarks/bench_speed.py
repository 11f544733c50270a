#!/usr/bin/env python3
"""gpulint speed on a large real tree, side by side with flake8 + TorchFix, ruff and `ast.parse`.

Not a test: run it by hand on a quiet machine.

    python benchmarks/bench_speed.py                 # transformers' sdist from PyPI (pip download)
    python benchmarks/bench_speed.py --tree PATH     # any tree of Python files

It prints, from one run: gpulint cold (empty cache), warm (nothing changed), warm with one file
changed, flake8 with TorchFix (`--select TOR`), `ruff check`, and plain `ast.parse` over the same
files: wall time, files/s and peak memory (resident set of the whole process tree), with ratios.
It also checks that gpulint's findings with and without the trigger prefilter are identical.
flake8 + TorchFix takes about half an hour on transformers, so by default it runs on a
deterministic sample of the files and its rate (files/s) is what the ratio compares; say
`--flake8-sample 0` to run it on every file.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    found = BIN / name
    return str(found) if found.exists() else (shutil.which(name) or name)


def fetch_transformers(cache: Path) -> Path:
    """transformers' source distribution, as PyPI serves it (the only download)."""
    cache.mkdir(parents=True, exist_ok=True)
    existing = sorted(cache.glob("transformers-*/src"))
    if existing:
        return existing[-1]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "transformers",
            "-d",
            str(cache),
        ],
        check=True,
    )
    archive = sorted(cache.glob("transformers-*.tar.gz"))[-1]
    with tarfile.open(archive) as tar:
        tar.extractall(cache, filter="data")
    return sorted(cache.glob("transformers-*/src"))[-1]


def _tree_rss_kb(root_pid: int) -> int:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            ppid = int(fields[1])
            with open(f"/proc/{entry}/status") as f:
                kb = next((int(line.split()[1]) for line in f if line.startswith("VmRSS:")), 0)
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
        rss[int(entry)] = kb
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss.get(pid, 0)
        stack.extend(children.get(pid, []))
    return total


def measure(cmd: list[str], cwd: Path) -> dict:
    """Wall time and peak resident memory (whole process tree) of one command."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss_kb(proc.pid))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    return {
        "wall_s": wall,
        "peak_mb": peak / 1024,
        "stdout": out,
        "stderr": err,
        "rc": proc.returncode,
    }


def ast_baseline(files: list[Path]) -> dict:
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for path in files:
            try:
                ast.parse(path.read_bytes())
            except (SyntaxError, ValueError):
                pass
    return {"wall_s": time.perf_counter() - start, "peak_mb": float("nan")}


def findings(result: dict) -> list:
    return json.loads(result["stdout"])["findings"]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--tree", type=Path, help="tree of Python files (default: transformers' src/)"
    )
    parser.add_argument("--cache", type=Path, default=HERE / ".cache", help="download folder")
    parser.add_argument(
        "--flake8-sample", type=int, default=300, help="files for flake8+TorchFix (0: all)"
    )
    parser.add_argument("--jobs", type=int, default=0, help="gpulint --jobs (0: one per core)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    tree = (args.tree or fetch_transformers(args.cache)).resolve()
    files = sorted(p for p in tree.rglob("*.py") if p.is_file())
    size_mb = sum(p.stat().st_size for p in files) / 1e6
    print(f"tree: {tree} ({len(files)} Python files, {size_mb:.1f} MB), {os.cpu_count()} cores")

    rows = {}
    rows["ast.parse (one process)"] = {**ast_baseline(files), "files": len(files)}

    gpulint = [tool("gpulint"), "check", "--format", "json", "--exit-zero"]
    if args.jobs:
        gpulint += ["--jobs", str(args.jobs)]
    with tempfile.TemporaryDirectory() as cache_dir:
        cached = [*gpulint, "--cache-dir", cache_dir, str(tree)]
        rows["gpulint cold"] = {**measure(cached, tree), "files": len(files)}
        rows["gpulint warm (no change)"] = {**measure(cached, tree), "files": len(files)}
        victim = files[len(files) // 2]
        original = victim.read_bytes()
        try:
            victim.write_bytes(original + b"\n# touched by bench_speed\n")
            rows["gpulint warm (1 file changed)"] = {**measure(cached, tree), "files": len(files)}
        finally:
            victim.write_bytes(original)
    unfiltered = measure([*gpulint, "--no-cache", "--no-prefilter", str(tree)], tree)
    rows["gpulint no prefilter, no cache"] = {**unfiltered, "files": len(files)}
    same = findings(rows["gpulint cold"]) == findings(unfiltered)

    sample = files
    if args.flake8_sample and args.flake8_sample < len(files):
        sample = sorted(random.Random(0).sample(files, args.flake8_sample))
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as listing:
        listing.write("\n".join(str(p) for p in sample))
    flake8 = [
        tool("flake8"),
        "--select",
        "TOR",
        "--exit-zero",
        "-j",
        str(os.cpu_count() or 1),
        *map(str, sample),
    ]
    rows[f"flake8 + TorchFix (--select TOR), {len(sample)} files"] = {
        **measure(flake8, tree),
        "files": len(sample),
    }
    ruff = [tool("ruff"), "check", "--no-cache", "--exit-zero", "--quiet", "--isolated", str(tree)]
    rows["ruff check (defaults)"] = {**measure(ruff, tree), "files": len(files)}

    cold = rows["gpulint cold"]
    cold_rate = cold["files"] / cold["wall_s"]
    print()
    print(
        f"{'tool':<46} {'files':>6} {'wall s':>8} {'files/s':>9} {'peak MB':>8} {'vs gpulint cold':>16}"
    )
    for name, row in rows.items():
        rate = row["files"] / row["wall_s"]
        ratio = cold_rate / rate
        print(
            f"{name:<46} {row['files']:>6} {row['wall_s']:>8.2f} {rate:>9.0f} {row['peak_mb']:>8.0f} "
            f"{f'(gpulint {ratio:.2f}x faster)' if ratio >= 1 else f'({ratio:.2f}x of its rate)':>16}"
        )
    base = rows["ast.parse (one process)"]["wall_s"]
    flake = next(v for k, v in rows.items() if k.startswith("flake8"))
    print()
    print(f"cold vs ast.parse: {cold['wall_s'] / base:.2f}x the time (target <= 3x)")
    print(
        f"cold vs flake8+TorchFix, by files/s: {cold_rate / (flake['files'] / flake['wall_s']):.1f}x faster (target >= 10x)"
    )
    print(
        f"warm, nothing changed: {rows['gpulint warm (no change)']['wall_s']:.2f} s (target < 1 s)"
    )
    print(
        f"warm, one file changed: {rows['gpulint warm (1 file changed)']['wall_s']:.2f} s (target < 1 s plus that file)"
    )
    print(f"peak memory, cold: {cold['peak_mb']:.0f} MB (target < 500 MB)")
    print(
        f"findings with and without the prefilter identical: {same} ({len(findings(cold))} findings)"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    k: {kk: vv for kk, vv in v.items() if kk not in ("stdout", "stderr")}
                    for k, v in rows.items()
                },
                indent=2,
            )
        )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
