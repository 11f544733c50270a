"""Run a bench's part in a fresh Python process and read back the one JSON line it prints.

Some measurements need a process of their own: an environment variable CUDA reads once, at
initialisation (`CUDA_LAUNCH_BLOCKING`); a kernel that may fault (an illegal address poisons the
CUDA context of the process it ran in); a capture that may fail half-way. The child is
``python -m gpulint.runtime.benches.<module> ARGS...`` with this checkout's ``src`` first on
``PYTHONPATH``; it prints its result as a JSON object on a line of its own (the last such line
counts). No torch is imported here.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@dataclasses.dataclass
class ChildResult:
    result: dict | None  # the last JSON object the child printed, or None
    returncode: int | None  # None: timed out
    error: str  # why there is no result ('' when there is one)
    stderr_tail: str = ""


def child_env(set_vars: dict[str, str] | None = None, unset: tuple[str, ...] = ()) -> dict:
    """The parent's environment with ``src`` first on PYTHONPATH, ``set_vars`` set and the
    names in ``unset`` removed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    for name in unset:
        env.pop(name, None)
    env.update(set_vars or {})
    return env


def command(module: str, args: list[str]) -> list[str]:
    return [sys.executable, "-m", f"gpulint.runtime.benches.{module}", *args]


def last_json(stdout: str) -> dict | None:
    """The last line of ``stdout`` that parses as a JSON object."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def tail(text: str, chars: int = 300) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:chars]


def run_child(module: str, args: list[str], *, env: dict | None = None, timeout: float = 300.0):
    """Run the child to completion; never raises for what the child did."""
    try:
        done = subprocess.run(
            command(module, args),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env if env is not None else child_env(),
        )
    except subprocess.TimeoutExpired:
        return ChildResult(None, None, f"timed out after {timeout:.0f} s")
    result = last_json(done.stdout)
    err = "" if result is not None else f"child exited {done.returncode}: {tail(done.stderr)}"
    return ChildResult(result, done.returncode, err, tail(done.stderr))
