"""The GPU of this machine as a default hardware target, where the project has already been
told what it is: a bench record under `.gpulint/evidence/` (or the configured `evidence`
paths) names its device, or `gpulint probe --json > .gpulint/probe.json` saved what the probe
saw. Nothing is probed here (no torch, no driver): only those files are read, and only when no
`targets` are configured. Several different GPUs named: none is chosen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from gpulint.hardware import Target, UnknownTargetError, table

PROBE_FILE = Path(".gpulint") / "probe.json"


@dataclass(frozen=True)
class LocalGPU:
    target: Target
    source: str  # the file that named it, relative to the project root where possible

    def describe(self) -> str:
        return f"the local GPU named by {self.source}; no `targets` configured"


def _resolve(device: dict) -> Target | None:
    for key in ("table_name", "name"):
        name = device.get(key)
        if isinstance(name, str) and name:
            try:
                return table().target(name)
            except UnknownTargetError:
                pass
    cc = device.get("compute_capability")
    if isinstance(cc, str) and cc.replace(".", "").isdigit():
        try:
            return table().target("sm_" + cc.replace(".", ""))
        except UnknownTargetError:
            return None
    return None


def _probe_devices(root: Path) -> list[tuple[dict, str]]:
    from gpulint.safeio import MAX_RECORD_BYTES, Unreadable, read_text

    path = root / PROBE_FILE
    if not path.is_file():
        return []
    try:
        info = json.loads(read_text(path, MAX_RECORD_BYTES, [root]))
    except (Unreadable, ValueError, RecursionError):
        return []
    devices = info.get("torch", {}).get("devices", []) if isinstance(info, dict) else []
    return [(d, str(PROBE_FILE)) for d in devices if isinstance(d, dict)][:1]


def _record_devices(root: Path, evidence: list[str]) -> list[tuple[dict, str]]:
    places = [root / ".gpulint" / "evidence", *(root / p for p in evidence)]
    found = [p for p in places if p.exists()]
    if not found:
        return []  # no records: the runtime's modules are not imported for it
    try:
        from gpulint.runtime.evidence import load_records
    except ImportError:
        return []
    records = load_records(found)
    out = []
    for r in records:
        device = r.get("device")
        if isinstance(device, dict):
            source = r.get("_source", "")
            try:
                source = str(Path(source).resolve().relative_to(root.resolve()))
            except ValueError:
                pass
            out.append((device, source))
    return out


_CACHE: dict[tuple, LocalGPU | None] = {}


def local_gpu(root: Path, evidence: list[str] | tuple[str, ...] = ()) -> LocalGPU | None:
    """The one GPU the project's probe output or bench records name, or None."""

    def stamp(p: Path) -> tuple[int, int]:
        try:
            st = p.stat()
        except OSError:
            return (0, 0)
        return (st.st_mtime_ns, st.st_size)

    key = (
        str(root),
        tuple(evidence),
        stamp(root / PROBE_FILE),
        stamp(root / ".gpulint" / "evidence"),
    )
    if key not in _CACHE:
        found: dict[str, LocalGPU] = {}
        for device, source in _probe_devices(root) + _record_devices(root, list(evidence)):
            target = _resolve(device)
            if target is not None:
                found.setdefault(target.label, LocalGPU(target, source))
        _CACHE[key] = next(iter(found.values())) if len(found) == 1 else None
    return _CACHE[key]
