"""The judged-precision benchmark: run gpulint over the corpus, match the judged findings, and
print per-code precision, volume and what is still unjudged.

    python bench/precision/run.py [scan] [--corpus DIR] [--out DIR] [--repos A,B] [-j N]
    python bench/precision/run.py table --findings OUT/findings.jsonl
    python bench/precision/run.py sample --findings OUT/findings.jsonl --n 440 --seed 1 \\
        --out OUT/sample1.md [--parts 8]
    python bench/precision/run.py ingest --sample OUT/sample1.json VERDICTS... [--judge ID]

`scan` (the default) runs the installed `gpulint check` (a subprocess, JSON output, every rule
of every tier selected by code) over each repository of corpus.toml checked out by fetch.py,
fingerprints each finding (see README.md), writes OUT/raw/<owner+name>.json, OUT/findings.jsonl
and OUT/summary.json, and prints the table. `sample` draws a stratified sample of the findings
no judgment covers yet, for blind judges; `ingest` turns their verdict files into lines of
judgments.jsonl. Nothing here imports or runs the analysed code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fetch import corpus_dir, load_corpus, slug  # noqa: E402

JUDGMENTS = HERE / "judgments.jsonl"
MEASURED = HERE / "measured.json"  # what tests/test_tiers.py holds the default tier to
VERDICTS = ("right", "wrong", "unsure")
CONTEXT = 6  # source lines shown either side of a sampled finding


# -- fingerprints ------------------------------------------------------------------------------
def normalise(line_text: str) -> str:
    """The line as the SARIF reporter's `_line_hash` reads it: whitespace runs collapsed."""
    return " ".join(line_text.split())


def fingerprint(repo: str, path: str, code: str, line_text: str, occurrence: int) -> str:
    """Stable when other lines move: the finding's own line text, not its number, plus the
    occurrence index of that (code, text) pair in the file (the SARIF partialFingerprint basis,
    with the repository and path added)."""
    basis = f"{repo}\0{path}\0{code}\0{normalise(line_text)}\0{occurrence}"
    return hashlib.sha256(basis.encode()).hexdigest()[:20]


def assign_fingerprints(findings: list[dict], lines_of) -> None:
    """Set `fingerprint` and `line_text` on each finding (dicts with repo, path, code, line, col).
    `lines_of(repo, path)` gives the file's lines (empty list if unreadable)."""
    seen: Counter = Counter()
    for f in sorted(findings, key=lambda f: (f["repo"], f["path"], f["line"], f.get("col", 0))):
        lines = lines_of(f["repo"], f["path"])
        text = lines[f["line"] - 1] if 0 < f["line"] <= len(lines) else ""
        key = (f["repo"], f["path"], f["code"], normalise(text))
        f["line_text"] = text
        f["fingerprint"] = fingerprint(f["repo"], f["path"], f["code"], text, seen[key])
        seen[key] += 1


class Sources:
    """Lines of corpus files, read once each (never imported or run)."""

    def __init__(self, corpus: Path) -> None:
        self.corpus = corpus
        self._cache: dict[tuple[str, str], list[str]] = {}

    def __call__(self, repo: str, path: str) -> list[str]:
        key = (repo, path)
        if key not in self._cache:
            try:
                data = (self.corpus / slug(repo) / path).read_bytes()
                self._cache[key] = data.decode("utf-8", "replace").splitlines()
            except OSError:
                self._cache[key] = []
        return self._cache[key]


# -- judgments ---------------------------------------------------------------------------------
def load_judgments(path: Path = JUDGMENTS) -> dict[str, dict]:
    """fingerprint -> the newest judgment of it (later lines win)."""
    out: dict[str, dict] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip():
                j = json.loads(line)
                out[j["fingerprint"]] = j
    return out


# -- rules and tiers ---------------------------------------------------------------------------
def gpulint_bin() -> str:
    local = Path(sys.executable).parent / "gpulint"
    return str(local) if local.exists() else (shutil.which("gpulint") or "gpulint")


def rule_catalog() -> dict[str, dict]:
    out = subprocess.run(
        [gpulint_bin(), "rules", "--format", "json"], capture_output=True, text=True, check=True
    ).stdout
    return {r["code"]: r for r in json.loads(out)}


_TIERS = """
import json
from gpulint.rule import all_rules

def tier(r):
    t = getattr(r, "tier", None)
    if t is not None:
        return str(getattr(t, "value", t))
    return "default" if getattr(r, "default_enabled", True) else "opt-in"

print(json.dumps({r.code: tier(r) for r in all_rules()}))
"""


def rule_tiers(catalog: dict[str, dict]) -> dict[str, str]:
    """Each rule's tier: the catalog's `tier` (or `default_enabled`) where `gpulint rules` gives
    it, else read from the rule classes by the interpreter gpulint is installed in."""
    out: dict[str, str] = {}
    for code, rule in catalog.items():
        if rule.get("tier"):
            out[code] = str(rule["tier"])
        elif "default_enabled" in rule:
            out[code] = "default" if rule["default_enabled"] else "opt-in"
    if len(out) == len(catalog):
        return out
    python = Path(gpulint_bin()).parent / "python"
    r = subprocess.run(
        [str(python) if python.exists() else sys.executable, "-c", _TIERS],
        capture_output=True,
        text=True,
        check=False,
    )
    try:
        classes = json.loads(r.stdout)
    except json.JSONDecodeError:
        classes = {}
    return {code: out.get(code) or classes.get(code, "?") for code in catalog}


def gpulint_commit() -> str:
    r = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, check=False
    )
    return r.stdout.strip() or "unknown"


# -- scan --------------------------------------------------------------------------------------
def scan_repo(entry: dict, corpus: Path, codes: list[str], jobs: int) -> tuple[list[dict], dict]:
    root = corpus / slug(entry["name"])
    target = entry.get("path") or "."
    cmd = [
        gpulint_bin(),
        "check",
        target,
        "--output-format",
        "json",
        "--no-cache",
        "--exit-zero",
        "--quiet",
        "-j",
        str(jobs),
        "--select",
        ",".join(codes),
    ]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=root, capture_output=True, text=True, check=False)
    secs = time.monotonic() - t0
    try:
        raw = json.loads(r.stdout)
    except json.JSONDecodeError:
        raw = {"error": (r.stderr or r.stdout)[-2000:], "returncode": r.returncode}
    findings = []
    for f in raw.get("findings", []):
        p = Path(f["path"])
        rel = p.resolve().relative_to(root.resolve()) if p.is_absolute() else p
        findings.append(
            {
                "repo": entry["name"],
                "path": rel.as_posix(),
                "line": f["line"],
                "col": f.get("col", 0),
                "end_line": f.get("end_line", f["line"]),
                "code": f["code"],
                "severity": f.get("severity"),
                "message": f.get("message", ""),
            }
        )
    raw["seconds"] = round(secs, 1)
    return findings, raw


def cmd_scan(args) -> int:
    corpus = corpus_dir(args.corpus)
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    catalog = rule_catalog()
    codes = sorted(catalog)
    wanted = {slug(r) for r in args.repos.split(",")} if args.repos else None
    every: list[dict] = []
    for entry in load_corpus(Path(args.manifest)):
        if wanted is not None and slug(entry["name"]) not in wanted:
            continue
        root = corpus / slug(entry["name"])
        if not root.is_dir():
            print(f"scan: {entry['name']} is not in {corpus} (run fetch.py)", file=sys.stderr)
            continue
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        if head != entry["commit"]:
            print(f"scan: warning: {entry['name']} is at {head[:12]}, not the pinned commit")
        findings, raw = scan_repo(entry, corpus, codes, args.jobs)
        (out / "raw" / f"{slug(entry['name'])}.json").write_text(json.dumps(raw, indent=1))
        if "error" in raw:
            print(f"scan: {entry['name']}: gpulint failed: {raw['error'][-300:]}", file=sys.stderr)
        print(f"  {entry['name']:40} {len(findings):5} findings  {raw['seconds']:6.1f} s")
        every.extend(findings)
    assign_fingerprints(every, Sources(corpus))
    commit = gpulint_commit()
    for f in every:
        f["commit"] = commit
    with (out / "findings.jsonl").open("w") as fh:
        for f in every:
            fh.write(json.dumps(f) + "\n")
    return report(every, catalog, load_judgments(Path(args.judgments)), out / "summary.json")


# -- table -------------------------------------------------------------------------------------
def precision(right: int, wrong: int) -> float | None:
    return right / (right + wrong) if right + wrong else None


def summarise(findings: list[dict], judgments: dict[str, dict], tiers: dict[str, str]) -> dict:
    rows: dict[str, dict] = {}
    for f in findings:
        row = rows.setdefault(
            f["code"],
            {"code": f["code"], "tier": tiers.get(f["code"], "?"), "volume": 0, "judged": 0}
            | {v: 0 for v in VERDICTS}
            | {"unjudged": 0, "repos": set()},
        )
        row["volume"] += 1
        row["repos"].add(f["repo"])
        j = judgments.get(f["fingerprint"])
        if j is None:
            row["unjudged"] += 1
        else:
            row["judged"] += 1
            row[j["verdict"]] += 1
    for row in rows.values():
        row["repos"] = len(row["repos"])
        row["precision"] = precision(row["right"], row["wrong"])
    current = {f["fingerprint"] for f in findings}

    def total(select) -> dict:
        picked = [r for r in rows.values() if select(r)]
        t = {k: sum(r[k] for r in picked) for k in ("volume", "judged", *VERDICTS, "unjudged")}
        t["precision"] = precision(t["right"], t["wrong"])
        return t

    return {
        "rows": [rows[c] for c in sorted(rows)],
        "default_on": total(lambda r: r["tier"] == "default"),
        "all": total(lambda r: True),
        "stale_judgments": sum(1 for fp in judgments if fp not in current),
        "findings": len(findings),
    }


def _pct(p: float | None) -> str:
    return "   -" if p is None else f"{p:4.2f}"


def render(summary: dict) -> str:
    head = (
        f"{'code':8} {'tier':8} {'volume':>6} {'repos':>5} {'judged':>6} {'right':>5} "
        f"{'wrong':>5} {'unsure':>6} {'prec':>5} {'unjudged':>8}"
    )
    lines = [head, "-" * len(head)]
    for r in summary["rows"]:
        lines.append(
            f"{r['code']:8} {r['tier']:8} {r['volume']:6} {r['repos']:5} {r['judged']:6} "
            f"{r['right']:5} {r['wrong']:5} {r['unsure']:6} {_pct(r['precision']):>5} "
            f"{r['unjudged']:8}"
        )
    lines.append("-" * len(head))
    for label, t in (("default-on", summary["default_on"]), ("all tiers", summary["all"])):
        lines.append(
            f"{label:17} {t['volume']:6} {'':5} {t['judged']:6} {t['right']:5} {t['wrong']:5} "
            f"{t['unsure']:6} {_pct(t['precision']):>5} {t['unjudged']:8}"
        )
    lines.append(
        f"{summary['findings']} findings; {summary['stale_judgments']} judgments match no "
        "current finding"
    )
    return "\n".join(lines)


def report(findings, catalog, judgments, summary_path: Path | None) -> int:
    tiers = rule_tiers(catalog)
    summary = summarise(findings, judgments, tiers)
    print(render(summary))
    if summary_path is not None:
        summary["gpulint_commit"] = gpulint_commit()
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    return 0


def read_findings(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def cmd_table(args) -> int:
    findings = read_findings(Path(args.findings))
    if args.repos:
        wanted = {slug(r) for r in args.repos.split(",")}
        findings = [f for f in findings if slug(f["repo"]) in wanted]
    summary = Path(args.summary) if args.summary else None
    judgments = load_judgments(Path(args.judgments))
    code = report(findings, rule_catalog(), judgments, summary)
    if args.record:
        record(findings, judgments, Path(args.record))
    return code


def record(findings: list[dict], judgments: dict[str, dict], path: Path) -> None:
    """The measurement the tiers are decided by (MEASURED, committed): per code the corpus
    volume and the judged verdicts, without the tiers themselves (those live on the rules)."""
    summary = summarise(findings, judgments, {})
    keys = ("volume", "repos", "judged", "right", "wrong", "unsure")
    out = {
        "gpulint_commit": gpulint_commit(),
        "judgments": len(judgments),
        "findings": summary["findings"],
        "codes": {r["code"]: {k: r[k] for k in keys} for r in summary["rows"]},
    }
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"measurement written to {path}")


# -- sample ------------------------------------------------------------------------------------
def quotas(counts: dict[str, int], n: int, per_code: int) -> dict[str, int]:
    """Items per code: every code gets the same cap c (at most per_code) or all it has, with the
    largest c whose total is <= n; what is left of n goes one each to the biggest codes."""
    best = 0
    for c in range(1, per_code + 1):
        if sum(min(k, c) for k in counts.values()) <= n:
            best = c
    q = {code: min(k, best) for code, k in counts.items()}
    left = n - sum(q.values())
    for code in sorted(counts, key=lambda c: (-counts[c], c)):
        if left <= 0 or best >= per_code:
            break
        if counts[code] > q[code]:
            q[code] += 1
            left -= 1
    return q


def stratified_sample(
    findings: list[dict],
    n: int,
    seed: int,
    per_code: int = 25,
    per_repo: int = 5,
    per_repo_max: int | None = None,
) -> list[dict]:
    """Deterministic for a seed and an input set (the input order does not matter): per code
    its quota, at most `per_repo` from one repository while others still have findings, and
    never more than `per_repo_max` (default twice `per_repo`): near-copies in one repository
    tell a judge little more than the first few."""
    cap = 2 * per_repo if per_repo_max is None else per_repo_max
    by_code: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        by_code[f["code"]].append(f)
    q = quotas({c: len(v) for c, v in by_code.items()}, n, per_code)
    picked: list[dict] = []
    for code in sorted(by_code):
        pool = sorted(by_code[code], key=lambda f: f["fingerprint"])
        random.Random(f"{seed}:{code}").shuffle(pool)
        take: list[dict] = []
        per: Counter = Counter()
        for f in pool:
            if len(take) < q[code] and per[f["repo"]] < per_repo:
                take.append(f)
                per[f["repo"]] += 1
        chosen = {id(f) for f in take}
        for f in pool:  # a code found in few repositories: fill up past the per-repo cap
            if len(take) >= q[code]:
                break
            if id(f) not in chosen and per[f["repo"]] < cap:
                take.append(f)
                per[f["repo"]] += 1
        picked.extend(take)
    return picked


def split_parts(items: list[dict], parts: int) -> list[list[dict]]:
    """Deal the items out round-robin in (code, repo, path, line) order, so that each code is
    spread over every judge; each part is then read in (repo, path, line) order."""
    ordered = sorted(items, key=lambda f: (f["code"], f["repo"], f["path"], f["line"]))
    out: list[list[dict]] = [[] for _ in range(parts)]
    for i, f in enumerate(ordered):
        out[i % parts].append(f)
    return [sorted(p, key=lambda f: (f["repo"], f["path"], f["line"], f["code"])) for p in out]


def context_block(lines: list[str], line: int, end_line: int) -> str:
    end_line = min(max(end_line, line), line + 12)
    lo, hi = max(1, line - CONTEXT), min(len(lines), end_line + CONTEXT)
    width = len(str(hi))
    rows = []
    for k in range(lo, hi + 1):
        mark = ">>" if line <= k <= end_line else "  "
        rows.append(f"{mark} {k:>{width}} | {lines[k - 1]}")
    return "\n".join(rows) if rows else "(source not readable)"


SAMPLE_HEAD = """\
# Judge sample {name}{part}

Each item below is one finding of gpulint (a linter for GPU performance anti-patterns) on a
public repository. Judge it blind, as that repository's maintainer would: **right** (a real cost
worth changing, or a real defect, where the message says), **wrong** (a false alarm: the cost is
not real here, the facts in the message are wrong, or the fix would be wrong), or **unsure**.
The source is checked out under `{corpus}/<owner+name>/` at the pinned commit (bench/precision/
corpus.toml); open the file for more context than the lines shown.

Write one line per item to your verdict file, as JSON: `{{"item": 12, "verdict": "right",
"reason": "one line"}}` (or `12 | right | reason`).
"""


def write_sample(items: list[dict], out: Path, parts: int, corpus: Path, sources) -> list[Path]:
    chunks = split_parts(items, parts) if parts > 1 else [items]
    written = []
    number = 0
    meta = []
    all_md = [SAMPLE_HEAD.format(name=out.stem, part="", corpus=corpus)]
    for k, chunk in enumerate(chunks, 1):
        md = [
            SAMPLE_HEAD.format(
                name=out.stem,
                part=f", part {k} of {len(chunks)}" if parts > 1 else "",
                corpus=corpus,
            )
        ]
        for f in chunk:
            number += 1
            f = dict(f, item=number, part=k)
            meta.append(f)
            block = (
                f"\n## Item {number}\n\n"
                f"- repo: `{f['repo']}` (source: `{corpus}/{slug(f['repo'])}/{f['path']}`)\n"
                f"- at: `{f['path']}:{f['line']}`\n"
                f"- code: `{f['code']}`\n"
                f"- message: {f['message']}\n\n"
                "```\n"
                + context_block(
                    sources(f["repo"], f["path"]), f["line"], f.get("end_line", f["line"])
                )
                + "\n```\n"
            )
            md.append(block)
            all_md.append(block)
        if parts > 1:
            p = out.with_name(f"{out.stem}-part{k}{out.suffix}")
            p.write_text("".join(md))
            written.append(p)
    out.write_text("".join(all_md))
    written.insert(0, out)
    sidecar = out.with_suffix(".json")
    sidecar.write_text(json.dumps({"commit": gpulint_commit(), "items": meta}, indent=1) + "\n")
    written.append(sidecar)
    return written


def cmd_sample(args) -> int:
    findings = read_findings(Path(args.findings))
    judged = load_judgments(Path(args.judgments))
    if args.repos:
        wanted = {slug(r) for r in args.repos.split(",")}
        findings = [f for f in findings if slug(f["repo"]) in wanted]
    pool = [f for f in findings if f["fingerprint"] not in judged]
    items = stratified_sample(
        pool, args.n, args.seed, args.per_code, args.per_repo, args.per_repo_max
    )
    corpus = corpus_dir(args.corpus)
    written = write_sample(items, Path(args.out), args.parts, corpus, Sources(corpus))
    print(f"{len(items)} of {len(pool)} unjudged findings sampled; wrote:")
    for p in written:
        print(f"  {p}")
    counts = Counter(f["code"] for f in items)
    print("  per code: " + ", ".join(f"{c} {k}" for c, k in sorted(counts.items())))
    return 0


# -- ingest ------------------------------------------------------------------------------------
_PIPE = re.compile(r"^\s*#?(\d+)\s*[|\t,]\s*(right|wrong|unsure)\s*(?:[|\t,]\s*(.*))?$", re.I)


def parse_verdicts(text: str) -> Iterable[tuple[int, str, str, str | None]]:
    """(item, verdict, reason, judge-or-None) per line: JSON objects or `item | verdict | reason`."""
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("//"):
            continue
        if s.startswith("{"):
            d = json.loads(s)
            yield (
                int(d["item"]),
                str(d["verdict"]).lower(),
                str(d.get("reason", "")),
                d.get("judge"),
            )
            continue
        m = _PIPE.match(s)
        if m:
            yield int(m[1]), m[2].lower(), (m[3] or "").strip(), None


def ingest(sample: dict, verdict_files: list[Path], judge: str | None) -> list[dict]:
    by_item = {it["item"]: it for it in sample["items"]}
    out = []
    for vf in verdict_files:
        for item, verdict, reason, who in parse_verdicts(vf.read_text()):
            if verdict not in VERDICTS:
                raise ValueError(f"{vf}: item {item}: verdict {verdict!r} is not one of {VERDICTS}")
            it = by_item.get(item)
            if it is None:
                raise ValueError(f"{vf}: item {item} is not in the sample")
            out.append(
                {
                    "fingerprint": it["fingerprint"],
                    "repo": it["repo"],
                    "path": it["path"],
                    "code": it["code"],
                    "line": it["line"],
                    "verdict": verdict,
                    "reason": " ".join(reason.split()),
                    "judge": who or judge or vf.stem,
                    "commit": sample.get("commit", "unknown"),
                }
            )
    return out


def cmd_ingest(args) -> int:
    sample = json.loads(Path(args.sample).read_text())
    new = ingest(sample, [Path(v) for v in args.verdicts], args.judge)
    path = Path(args.judgments)
    with path.open("a") as fh:
        for j in new:
            fh.write(json.dumps(j) + "\n")
    print(f"{len(new)} judgments appended to {path}: {dict(Counter(j['verdict'] for j in new))}")
    return 0


# -- main --------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in {"scan", "table", "sample", "ingest", "-h", "--help"}:
        argv.insert(0, "scan")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    default_out = os.environ.get("GPULINT_BENCH_OUT", "/work/review/bench")

    def common(p):
        p.add_argument(
            "--corpus", help="the corpus checkouts (default $GPULINT_CORPUS or /work/corpus)"
        )
        p.add_argument("--repos", help="comma-separated owner/name (or owner+name) to limit to")
        p.add_argument("--judgments", default=str(JUDGMENTS))
        return p

    s = common(sub.add_parser("scan", help="run gpulint over the corpus and print the table"))
    s.add_argument("--out", default=default_out, help="raw output, findings.jsonl, summary.json")
    s.add_argument("--manifest", default=str(HERE / "corpus.toml"))
    s.add_argument("-j", "--jobs", type=int, default=1)
    t = common(sub.add_parser("table", help="the table from a saved findings.jsonl"))
    t.add_argument("--findings", default=f"{default_out}/findings.jsonl")
    t.add_argument("--summary", help="also write the summary JSON here")
    t.add_argument("--record", help=f"write the per-code measurement here (e.g. {MEASURED})")
    m = common(sub.add_parser("sample", help="a stratified sample of unjudged findings"))
    m.add_argument("--findings", default=f"{default_out}/findings.jsonl")
    m.add_argument("--n", type=int, default=440)
    m.add_argument("--seed", type=int, default=1)
    m.add_argument("--per-code", type=int, default=25)
    m.add_argument("--per-repo", type=int, default=5)
    m.add_argument("--per-repo-max", type=int, help="hard cap per repository (2 x --per-repo)")
    m.add_argument("--parts", type=int, default=8)
    m.add_argument("--out", required=True, help="the sample's .md (parts and a .json beside it)")
    g = common(sub.add_parser("ingest", help="judges' verdict files -> judgments.jsonl"))
    g.add_argument("--sample", required=True, help="the sample's .json sidecar")
    g.add_argument("--judge", help="judge id (default: the verdict file's name)")
    g.add_argument("verdicts", nargs="+")
    args = ap.parse_args(argv)
    return {"scan": cmd_scan, "table": cmd_table, "sample": cmd_sample, "ingest": cmd_ingest}[
        args.cmd
    ](args)


if __name__ == "__main__":
    sys.exit(main())
