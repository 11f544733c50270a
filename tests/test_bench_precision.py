"""bench/precision: fingerprints that survive line moves, a deterministic stratified sample, the
table's arithmetic and the verdict ingest, on tiny fake findings (no corpus needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent.parent / "bench" / "precision"


def _load(name: str):
    sys.path.insert(0, str(HERE))
    try:
        spec = importlib.util.spec_from_file_location(
            f"bench_precision_{name}", HERE / f"{name}.py"
        )
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(HERE))


run = _load("run")
fetch = _load("fetch")


def _finding(repo="o/r", path="train.py", line=1, code="GPU101", col=0, message="m"):
    return {"repo": repo, "path": path, "line": line, "col": col, "code": code, "message": message}


def _fps(source: str, findings: list[dict]) -> list[str]:
    lines = source.splitlines()
    run.assign_fingerprints(findings, lambda repo, path: lines)
    return [f["fingerprint"] for f in findings]


SRC = "import torch\nfor x in loader:\n    loss.item()\n    loss.item()\n"


def test_fingerprint_survives_a_line_move():
    before = _fps(SRC, [_finding(line=3)])
    moved = _fps("# a new header comment\n\n" + SRC, [_finding(line=5)])
    assert before == moved


def test_fingerprint_survives_reindenting_the_line():
    before = _fps(SRC, [_finding(line=3)])
    after = _fps(
        SRC.replace("    loss.item()\n    loss", "\tloss.item()\n    loss", 1), [_finding(line=3)]
    )
    assert before == after


def test_fingerprint_changes_with_the_line_text_the_code_the_path_and_the_repo():
    base = _fps(SRC, [_finding(line=3)])[0]
    assert _fps(SRC.replace("loss.item()", "acc.item()", 1), [_finding(line=3)])[0] != base
    assert _fps(SRC, [_finding(line=3, code="GPU102")])[0] != base
    assert _fps(SRC, [_finding(line=3, path="eval.py")])[0] != base
    assert _fps(SRC, [_finding(line=3, repo="o/other")])[0] != base


def test_identical_lines_are_told_apart_by_occurrence_in_file_order():
    a, b = _fps(SRC, [_finding(line=4), _finding(line=3)])
    assert a != b
    # the first in the file is occurrence 0 whatever order the findings came in
    (first,) = _fps(SRC, [_finding(line=3)])
    assert b == first


def test_unreadable_line_still_gets_a_fingerprint():
    (fp,) = _fps("", [_finding(line=40)])
    assert len(fp) == 20


def _pool():
    out = []
    for code, repos, per in (("GPU101", 6, 10), ("GPU303", 2, 20), ("GPU805", 1, 3)):
        for r in range(repos):
            for i in range(per):
                out.append(_finding(repo=f"o/r{r}", line=i + 1, code=code))
    lines = [f"line {i}" for i in range(100)]
    run.assign_fingerprints(out, lambda repo, path: lines)
    return out


def test_sample_is_deterministic_for_a_seed_and_independent_of_input_order():
    pool = _pool()
    a = [f["fingerprint"] for f in run.stratified_sample(pool, 40, seed=3)]
    b = [f["fingerprint"] for f in run.stratified_sample(list(reversed(pool)), 40, seed=3)]
    c = [f["fingerprint"] for f in run.stratified_sample(pool, 40, seed=4)]
    assert a == b
    assert a != c


def test_sample_is_stratified_small_codes_whole_and_repositories_capped():
    items = run.stratified_sample(_pool(), 40, seed=1, per_code=25, per_repo=5)
    per_code = {c: [f for f in items if f["code"] == c] for c in ("GPU101", "GPU303", "GPU805")}
    assert len(per_code["GPU805"]) == 3  # a code with few findings is taken whole
    assert len(items) == 40
    # GPU101 is spread over six repositories: none gives more than five
    per_repo = {}
    for f in per_code["GPU101"]:
        per_repo[f["repo"]] = per_repo.get(f["repo"], 0) + 1
    assert max(per_repo.values()) <= 5
    assert len({f["fingerprint"] for f in items}) == len(items)


def test_sample_fills_past_the_repository_cap_when_a_code_lives_in_one_repository():
    items = run.stratified_sample(_pool(), 200, seed=1, per_code=25, per_repo=5)
    # GPU303 lives in two repositories (20 each): past 5 each, up to the hard cap of 10 each
    g303 = [f for f in items if f["code"] == "GPU303"]
    assert len(g303) == 20 and {f["repo"] for f in g303} == {"o/r0", "o/r1"}
    assert len([f for f in items if f["code"] == "GPU101"]) == 25
    wide = run.stratified_sample(_pool(), 200, seed=1, per_code=25, per_repo=5, per_repo_max=20)
    assert len([f for f in wide if f["code"] == "GPU303"]) == 25


def test_quotas_never_exceed_n_nor_the_per_code_cap():
    q = run.quotas({"A": 100, "B": 30, "C": 2}, 40, 25)
    assert sum(q.values()) == 40
    assert q["C"] == 2 and max(q.values()) <= 25
    assert run.quotas({"A": 100, "B": 100}, 1000, 25) == {"A": 25, "B": 25}


def test_table_math():
    findings = [_finding(line=i, code="GPU101") for i in range(1, 6)]
    findings += [_finding(line=i, code="GPU811") for i in range(1, 3)]
    run.assign_fingerprints(findings, lambda repo, path: [f"l{i}" for i in range(10)])
    fp = [f["fingerprint"] for f in findings]
    judgments = {
        fp[0]: {"verdict": "right"},
        fp[1]: {"verdict": "right"},
        fp[2]: {"verdict": "wrong"},
        fp[3]: {"verdict": "unsure"},
        fp[5]: {"verdict": "wrong"},
        "stale": {"verdict": "right"},
    }
    s = run.summarise(findings, judgments, {"GPU101": "default", "GPU811": "opt-in"})
    r101, r811 = s["rows"]
    assert (r101["volume"], r101["judged"], r101["right"], r101["wrong"], r101["unsure"]) == (
        5,
        4,
        2,
        1,
        1,
    )
    assert r101["unjudged"] == 1 and r101["precision"] == pytest.approx(2 / 3)
    assert r811["precision"] == 0.0 and r811["unjudged"] == 1
    assert s["default_on"]["volume"] == 5 and s["default_on"]["precision"] == pytest.approx(2 / 3)
    assert s["all"]["precision"] == pytest.approx(2 / 4)
    assert s["stale_judgments"] == 1
    text = run.render(s)
    assert "GPU101" in text and "0.67" in text


def test_unjudged_code_has_no_precision():
    findings = [_finding()]
    run.assign_fingerprints(findings, lambda repo, path: ["x"])
    (row,) = run.summarise(findings, {}, {})["rows"]
    assert row["precision"] is None and "-" in run.render(run.summarise(findings, {}, {}))


def test_ingest_keys_verdicts_by_the_sampled_fingerprint(tmp_path):
    sample = {
        "commit": "abc",
        "items": [
            dict(_finding(line=3), item=1, fingerprint="f1"),
            dict(_finding(line=4, code="GPU303"), item=2, fingerprint="f2"),
        ],
    }
    v = tmp_path / "judge-a.txt"
    v.write_text(
        '{"item": 1, "verdict": "right", "reason": "syncs every step"}\n'
        "2 | WRONG | in-memory  dataset\n\n"
    )
    out = run.ingest(sample, [v], None)
    assert [(j["fingerprint"], j["verdict"], j["judge"]) for j in out] == [
        ("f1", "right", "judge-a"),
        ("f2", "wrong", "judge-a"),
    ]
    assert out[1]["reason"] == "in-memory dataset" and out[0]["commit"] == "abc"
    bad = tmp_path / "bad.txt"
    bad.write_text('{"item": 9, "verdict": "right"}\n')
    with pytest.raises(ValueError):
        run.ingest(sample, [bad], None)


def test_later_judgments_win(tmp_path):
    p = tmp_path / "j.jsonl"
    p.write_text(
        json.dumps({"fingerprint": "f", "verdict": "wrong"})
        + "\n"
        + json.dumps({"fingerprint": "f", "verdict": "right"})
        + "\n"
    )
    assert run.load_judgments(p)["f"]["verdict"] == "right"


def test_sample_parts_spread_each_code_over_every_part():
    items = run.stratified_sample(_pool(), 40, seed=1)
    parts = run.split_parts(items, 4)
    assert sum(len(p) for p in parts) == 40
    for p in parts:
        assert {"GPU101", "GPU303"} <= {f["code"] for f in p}


def test_context_block_marks_the_finding_lines():
    block = run.context_block([f"l{i}" for i in range(1, 31)], 15, 16)
    rows = block.splitlines()
    assert len(rows) == 2 + 2 * run.CONTEXT
    assert [r.split("|")[1].strip() for r in rows if r.startswith(">>")] == ["l15", "l16"]


def test_every_corpus_entry_is_pinned_and_kinded():
    entries = fetch.load_corpus(HERE / "corpus.toml")
    assert len(entries) >= 25
    for e in entries:
        assert len(e["commit"]) == 40 and e["kind"] in {"training", "cuda", "triton", "mixed"}
    assert len({e["name"] for e in entries}) == len(entries)
