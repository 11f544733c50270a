"""Idle CPU of `gpulint check --watch DIR`: once the first check is done and it says
"Watching for file changes.", sum utime+stime (from /proc/<pid>/stat, the process and every
live descendant) before and after an idle window, and print the share of one core.

    python benchmarks/watch_idle_cpu.py /work/corpus/huggingface+accelerate --seconds 60

Linux only (reads /proc). The issue's target: under 1% of a core.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(ppid, utime+stime in seconds) of a live process."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def tree_cpu(root: int) -> float:
    """CPU seconds of `root` and its live descendants."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (s := _stat(int(entry))) is not None:
            stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=5.0, help="wait after the first check")
    args = parser.parse_args()
    cmd = [sys.executable, "-m", "gpulint", "check", "--watch", "--no-cache", args.directory]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    ready = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "Watching for file changes." in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        if not ready.wait(600):
            print("the first check did not finish in 600 s", file=sys.stderr)
            return 1
        time.sleep(args.settle)
        cpu0, t0 = tree_cpu(proc.pid), time.monotonic()
        time.sleep(args.seconds)
        cpu1, t1 = tree_cpu(proc.pid), time.monotonic()
    finally:
        proc.terminate()
        proc.wait(10)
    share = (cpu1 - cpu0) / (t1 - t0)
    print(f"command: {' '.join(cmd)}")
    print(f"idle window: {t1 - t0:.1f} s, CPU: {cpu1 - cpu0:.2f} s, {share:.2%} of one core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
