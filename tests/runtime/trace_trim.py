"""Trim a `gpulint trace` recording into a small fixture: ``python tests/runtime/trace_trim.py
RECORDING OUT [--steps N]``. Keeps the first N profiler steps (default 2) of the trace, the
event categories and args the mapping reads, the sync warnings of those steps, and the small
JSON files; paths outside the checked tree are shortened (no machine paths in fixtures)."""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import shutil

KEEP_CATS = {
    "cpu_op",
    "user_annotation",
    "cuda_runtime",
    "cuda_driver",
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
}
KEEP_ARGS = {
    "External id",
    "Sequence number",
    "Fwd thread id",
    "Input type",
    "correlation",
    "bytes",
    "device",
    "stream",
}


def trim(src: pathlib.Path, out: pathlib.Path, steps: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with gzip.open(src / "trace.json.gz", "rt", encoding="utf-8") as fh:
        trace = json.load(fh)
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    marks = sorted(
        (e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"]
    )[:steps]
    t0, t1 = marks[0]["ts"], marks[-1]["ts"] + marks[-1]["dur"]
    kept = []
    for e in events:
        if e.get("cat") not in KEEP_CATS or not (t0 <= e["ts"] <= t1):
            continue
        e = {
            k: v
            for k, v in e.items()
            if k in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")
        }
        if "args" in e:
            e["args"] = {k: v for k, v in e["args"].items() if k in KEEP_ARGS}
        kept.append(e)
    with gzip.open(out / "trace.json.gz", "wt", encoding="utf-8") as fh:
        json.dump({"traceEvents": kept}, fh, separators=(",", ":"))
    cfg = json.loads((src / "config.json").read_text())
    first = cfg["warmup"] + 1
    lines = []
    for line in (
        (src / "syncs.jsonl").read_text().splitlines() if (src / "syncs.jsonl").exists() else []
    ):
        s = json.loads(line)
        if first <= s["step"] < first + steps:
            s["stack"] = [f if f[3] else [_short(f[0]), f[1], f[2], False] for f in s["stack"]]
            lines.append(json.dumps(s))
    (out / "syncs.jsonl").write_text("\n".join(lines) + ("\n" if lines else ""))
    cfg.update(steps=steps, out="", root="")
    (out / "config.json").write_text(json.dumps(cfg, indent=1))
    for name in ("device.json", "status.json", "window.json"):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    if (src / "untraced" / "window.json").exists():
        (out / "untraced").mkdir(exist_ok=True)
        shutil.copy(src / "untraced" / "window.json", out / "untraced" / "window.json")


def _short(path: str) -> str:
    parts = path.split("/")
    for marker in ("site-packages", "dist-packages", "lib"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1 :])
    return parts[-1]


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("recording", type=pathlib.Path)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--steps", type=int, default=2)
    a = ap.parse_args()
    trim(a.recording, a.out, a.steps)
