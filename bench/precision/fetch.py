"""Check out every repository of the judged-precision corpus at its pinned commit.

    python bench/precision/fetch.py [--corpus DIR] [--mirror DIR] [--repos A,B] [--manifest F]

Each `[[repo]]` of corpus.toml lands in CORPUS/owner+name (CORPUS: --corpus, else
$GPULINT_CORPUS, else /work/corpus; never inside this repository), checked out detached at its
`commit`. With --mirror, a local git directory MIRROR/owner+name/repo (or .../repo/.git) is the
source; otherwise the public git host. Idempotent: a checkout already at its commit is left as
it is; one at another commit is moved to the pinned one. Nothing is imported or run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CORPUS = "/work/corpus"


def load_corpus(manifest: Path) -> list[dict]:
    with manifest.open("rb") as f:
        return list(tomllib.load(f)["repo"])


def corpus_dir(arg: str | None) -> Path:
    return Path(arg or os.environ.get("GPULINT_CORPUS") or DEFAULT_CORPUS).resolve()


def slug(name: str) -> str:
    return name.replace("/", "+")


def _git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=check, capture_output=True, text=True, timeout=1800
    )


def _head(dest: Path) -> str | None:
    r = _git("rev-parse", "HEAD", cwd=dest, check=False)
    return r.stdout.strip() if r.returncode == 0 else None


def _mirror_source(mirror: Path | None, name: str) -> str | None:
    if mirror is None:
        return None
    for cand in (mirror / slug(name) / "repo" / ".git", mirror / slug(name) / "repo"):
        if (cand / "HEAD").is_file() and (cand / "objects").is_dir():
            return str(cand)
    return None


def fetch_one(entry: dict, corpus: Path, mirror: Path | None) -> str:
    name, commit = entry["name"], entry["commit"]
    dest = corpus / slug(name)
    source = _mirror_source(mirror, name) or f"https://github.com/{name}.git"
    if (dest / ".git").exists():
        if _head(dest) == commit:
            return "present"
        if _git("cat-file", "-e", f"{commit}^{{commit}}", cwd=dest, check=False).returncode:
            _git("fetch", "-q", source, commit, cwd=dest)
        _git("checkout", "-q", "--detach", commit, cwd=dest)
        return "moved"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    if tmp.exists():
        shutil.rmtree(tmp)  # a checkout an earlier run left half done
    if source.startswith("https://"):
        _git("init", "-q", str(tmp))
        _git("fetch", "-q", "--depth", "1", source, commit, cwd=tmp)
    else:  # a local mirror: a plain clone (hard links, and no pack to rewrite)
        _git("clone", "-q", "--no-checkout", source, str(tmp))
    _git("checkout", "-q", "--detach", commit, cwd=tmp)
    tmp.rename(dest)
    return "cloned"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--corpus", help="where the checkouts go (default $GPULINT_CORPUS or /work/corpus)"
    )
    ap.add_argument("--mirror", help="local mirrors: MIRROR/owner+name/repo[/.git]")
    ap.add_argument("--repos", help="comma-separated owner/name (or owner+name) to fetch")
    ap.add_argument("--manifest", default=str(HERE / "corpus.toml"))
    args = ap.parse_args(argv)
    corpus = corpus_dir(args.corpus)
    repo_root = HERE.parent.parent
    if corpus == repo_root or repo_root in corpus.parents:
        print(f"fetch: the corpus must live outside the repository ({corpus})", file=sys.stderr)
        return 2
    mirror = Path(args.mirror).resolve() if args.mirror else None
    wanted = {slug(r) for r in args.repos.split(",")} if args.repos else None
    failed = 0
    for entry in load_corpus(Path(args.manifest)):
        if wanted is not None and slug(entry["name"]) not in wanted:
            continue
        try:
            status = fetch_one(entry, corpus, mirror)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            err = getattr(e, "stderr", "") or str(e)
            status = f"FAILED: {str(err).strip().splitlines()[-1:] or e}"
            failed += 1
        print(f"{entry['name']:40} {entry['commit'][:12]}  {status}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
