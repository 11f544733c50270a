"""`gpulint check --fix` over copies of real repositories, checked the way a reviewer would.

    python benchmarks/fix_corpus.py CORPUS_DIR [REPO ...] [--variants]

For each repository (a folder under CORPUS_DIR), a scratch copy is made as a git repository and
fixed twice. Every changed file must: parse; bind every name it binds before (ruff's F821, no
new undefined name) and leave no import dead that was alive (F401); change only the lines the
fixes' own edits cover; keep its mode, encoding (BOM, PEP 263 cookie) and line endings. The
second `--fix` must change nothing. With `--variants`, each file that has a fixable finding is
also checked as a CRLF copy and as a latin-1 copy with a coding cookie (real repositories rarely
have them, and they are what an encoding bug breaks).

Nothing here imports or runs the analysed code. Prints one row per repository and a total.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

BIN = Path(sys.executable).parent


def gpulint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "gpulint"), *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def ruff_codes(paths: list[Path], cwd: Path) -> Counter:
    """(file, code, name) counts of undefined names and unused imports."""
    if not paths:
        return Counter()
    run = subprocess.run(
        [str(BIN / "ruff"), "check", "--isolated", "--select", "F821,F401", "--output-format",
         "json", "--exit-zero", *map(str, paths)],
        cwd=cwd, capture_output=True, text=True, check=False,
    )  # fmt: skip
    out: Counter = Counter()
    for item in json.loads(run.stdout or "[]"):
        name = item["message"].split("`")[1] if "`" in item["message"] else item["message"]
        out[(Path(item["filename"]).name, item["code"], name)] += 1
    return out


def fixable_lines(findings: list[dict], root: Path) -> dict[str, set[int]]:
    """Per file, the 1-based lines the fixes' edits touch (in the file as it was)."""
    out: dict[str, set[int]] = {}
    texts: dict[str, str] = {}
    for f in findings:
        if not f.get("fix"):
            continue
        path = f["path"]
        if path not in texts:
            from gpulint.frontends import decode

            texts[path] = decode((root / path).read_bytes())
        text = texts[path]
        for e in f["fix"]["edits"]:
            first = text.count("\n", 0, e["start"]) + 1
            last = text.count("\n", 0, e["end"]) + 1
            out.setdefault(path, set()).update(range(first, last + 1))
    return out


def changed_lines(before: str, after: str) -> set[int]:
    import difflib

    out: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), False)
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag != "equal":
            out.update(range(i1 + 1, max(i2, i1 + 1) + 1))
    return out


def variants(copy: Path, findings: list[dict]) -> int:
    """Add a CRLF twin and a latin-1 twin of every file with a fixable finding."""
    made = 0
    for path in sorted({f["path"] for f in findings if f.get("fix")}):
        source = copy / path
        text = source.read_text(encoding="utf-8")
        stem = source.with_suffix("")
        Path(f"{stem}_crlf.py").write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
        try:
            latin = ("# -*- coding: latin-1 -*-\n# café\n" + text).encode("latin-1")
        except UnicodeEncodeError:
            latin = None
        if latin is not None:
            Path(f"{stem}_latin1.py").write_bytes(latin)
            made += 1
        made += 1
    return made


def check_repo(src: Path, scratch: Path, with_variants: bool) -> dict:
    from gpulint.fixes import file_encoding

    copy = scratch / src.name
    shutil.copytree(src, copy, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    row = Counter()
    first = json.loads(gpulint("check", "--no-cache", "--format", "json", ".", cwd=copy).stdout)
    if with_variants:
        row["variant files"] = variants(copy, first["findings"])
        first = json.loads(gpulint("check", "--no-cache", "--format", "json", ".", cwd=copy).stdout)
    git("init", "-q", cwd=copy)
    git("add", "-A", cwd=copy)
    git("-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qm", "before", cwd=copy)
    allowed = fixable_lines(first["findings"], copy)
    row["fixable findings"] = sum(1 for f in first["findings"] if f.get("fix"))
    files = sorted(allowed)
    before_bytes = {p: (copy / p).read_bytes() for p in files}
    modes = {p: (copy / p).stat().st_mode for p in files}
    names_before = ruff_codes([copy / p for p in files], copy)

    gpulint("check", "--fix", "--no-cache", ".", cwd=copy)
    changed = [p for p in files if (copy / p).read_bytes() != before_bytes[p]]
    row["files changed"] = len(changed)
    problems: list[str] = []
    for p in changed:
        data = (copy / p).read_bytes()
        enc_before, enc_after = file_encoding(before_bytes[p]), file_encoding(data)
        if enc_before != enc_after:
            problems.append(f"{p}: encoding {enc_before} -> {enc_after}")
        if before_bytes[p].count(b"\r\n") and data.count(b"\n") != data.count(b"\r\n"):
            problems.append(f"{p}: line endings changed")
        if (copy / p).stat().st_mode != modes[p]:
            problems.append(f"{p}: mode changed")
        text = data.decode(enc_after.codec)
        try:
            ast.parse(text.encode("utf-8").decode("utf-8"))
        except SyntaxError as e:
            problems.append(f"{p}: does not parse: {e}")
        old_text = before_bytes[p].decode(enc_before.codec)
        outside = changed_lines(old_text, text) - allowed.get(p, set())
        if outside:
            problems.append(f"{p}: lines outside the fixes changed: {sorted(outside)[:5]}")
    names_after = ruff_codes([copy / p for p in changed], copy)
    for key, count in names_after.items():
        if key[1] == "F821" and count > names_before.get(key, 0):
            problems.append(f"new undefined name: {key}")
        if key[1] == "F401" and count > names_before.get(key, 0):
            problems.append(f"new dead import: {key}")
    after_first = {p: (copy / p).read_bytes() for p in files}
    gpulint("check", "--fix", "--no-cache", ".", cwd=copy)
    again = [p for p in files if (copy / p).read_bytes() != after_first[p]]
    if again:
        problems.append(f"second --fix changed {len(again)} files: {again[:3]}")
    left = json.loads(gpulint("check", "--no-cache", "--format", "json", ".", cwd=copy).stdout)
    row["fixable left"] = sum(1 for f in left["findings"] if f.get("fix"))
    row["problems"] = len(problems)
    return {"repo": src.name, **row, "details": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path)
    parser.add_argument("repos", nargs="*")
    parser.add_argument("--variants", action="store_true")
    args = parser.parse_args(argv)
    repos = [args.corpus / r for r in args.repos] or sorted(
        p for p in args.corpus.iterdir() if p.is_dir()
    )
    total = Counter()
    with tempfile.TemporaryDirectory() as scratch:
        for repo in repos:
            row = check_repo(repo, Path(scratch), args.variants)
            details = row.pop("details")
            print(json.dumps(row))
            for d in details:
                print(f"  PROBLEM {d}")
            total.update({k: v for k, v in row.items() if isinstance(v, int)})
    print("TOTAL", json.dumps(dict(total)))
    return 1 if total["problems"] else 0


if __name__ == "__main__":
    os.environ.setdefault("NO_COLOR", "1")
    sys.exit(main())
