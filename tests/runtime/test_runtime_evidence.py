import json

import pytest

from gpulint.runtime import evidence
from gpulint.runtime.evidence import (
    BENCHES,
    EvidenceError,
    check_record,
    evidence_note,
    load_records,
    validate_record,
    write_record,
)


def test_valid_record_passes(sync_record):
    assert validate_record(sync_record) == []


def test_bench_names_are_the_twenty_the_rules_cite():
    assert set(BENCHES) == {
        "sync", "h2d", "dataloader", "attention", "train-step", "graph-break",
        "recompile", "no-grad", "anomaly", "eval-mode",
        "graph-capture", "launch-blocking", "device-per-rank", "int32-offset",
        "matmul", "copy", "nccl", "ddp", "fsdp", "ddp-no-sync",
    }  # fmt: skip


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda r: r.update(schema="gpulint.evidence/0"), "schema"),
        (lambda r: r.update(bench="warp-speed"), "bench: unknown"),
        (lambda r: r.pop("command"), "command: missing"),
        (lambda r: r.update(timestamp="yesterday"), "timestamp"),
        (lambda r: r["variants"][0].update(runs=2, samples=[1, 2]), "runs: 2 < 3"),
        (lambda r: r["variants"][0].update(samples=[1.0]), "samples"),
        (lambda r: r["variants"][0].update(unit="furlongs"), "unit"),
        (lambda r: r["variants"][0].update(min=99999.0), "min <= median <= max"),
        (lambda r: r["headline"].update(improved="every_1000"), "headline.improved"),
        (lambda r: r["variants"][1].update(status="failed"), "reason: missing"),
        (lambda r: r.pop("ok"), "ok: missing"),
    ],
)
def test_invalid_records_say_why(sync_record, mutate, fragment):
    mutate(sync_record)
    errors = validate_record(sync_record)
    assert any(fragment in e for e in errors), errors
    with pytest.raises(EvidenceError):
        check_record(sync_record)


def test_non_object_is_invalid():
    assert validate_record([1, 2]) == ["a record is a JSON object"]


def test_write_then_load_round_trip(tmp_path, sync_record):
    path = write_record(sync_record, tmp_path / ".gpulint" / "evidence")
    second = write_record(sync_record, tmp_path / ".gpulint" / "evidence")
    assert path != second  # records are appended, never overwritten
    for where in (tmp_path, tmp_path / ".gpulint" / "evidence", path):
        loaded = load_records([where])
        assert loaded and loaded[0]["bench"] == "sync"
        assert loaded[0]["_source"].endswith(".json")


def test_malformed_files_are_collected_not_fatal(tmp_path, sync_record):
    d = tmp_path / ".gpulint" / "evidence"
    write_record(sync_record, d)
    (d / "broken.json").write_text("{not json")
    (d / "wrong.json").write_text(json.dumps({"schema": "other"}))
    (d / "binary.json").write_bytes(b"\xff\xfe\x00")
    errors: list[str] = []
    records = load_records([tmp_path, tmp_path / "missing"], errors)
    assert len(records) == 1
    assert len(errors) == 4
    assert any("missing" in e for e in errors)


def test_a_file_may_hold_a_list_of_records(tmp_path, sync_record):
    other = json.loads(json.dumps(sync_record))
    other["bench"] = "h2d"
    f = tmp_path / "all.json"
    f.write_text(json.dumps([sync_record, other, {"junk": 1}]))
    errors: list[str] = []
    assert [r["bench"] for r in load_records([f], errors)] == ["sync", "h2d"]
    assert errors and "[2]" in errors[0]


def test_note_for_the_sync_bench_reads_like_the_issue(sync_record):
    note = evidence_note([sync_record], "sync")
    assert (
        note == "on NVIDIA H200 an .item() every step cost +15% per step (1,535 → 1,334 µs, 5 runs)"
    )


def test_note_for_a_throughput_bench(sync_record):
    r = sync_record
    from gpulint.runtime.harness import variant_from

    r["bench"] = "h2d"
    r["variants"] = [
        variant_from("pageable", "pageable", [16.4, 16.5, 16.6], "GB/s", "higher"),
        variant_from("pinned", "pinned", [54.8, 54.9, 55.0], "GB/s", "higher"),
    ]
    r["headline"] = {
        "baseline": "pageable",
        "improved": "pinned",
        "what": "a host-to-device copy from pageable memory",
        "versus": "from pinned memory",
    }
    assert evidence_note([r], "h2d") == (
        "on NVIDIA H200 a host-to-device copy from pageable memory was 3.3× slower than from "
        "pinned memory (16.5 → 54.9 GB/s, 3 runs)"
    )


def test_note_reports_noise_and_no_cost_honestly(sync_record):
    from gpulint.runtime.harness import variant_from

    sync_record["variants"][1] = variant_from("every_50", "x", [1500, 1536, 1600], "us", "lower")
    assert "no difference beyond run-to-run spread" in evidence_note([sync_record], "sync")
    sync_record["variants"][1] = variant_from("every_50", "x", [1700, 1710, 1720], "us", "lower")
    assert "was not slower here" in evidence_note([sync_record], "sync")


def test_note_uses_the_newest_usable_record(sync_record):
    newer = json.loads(json.dumps(sync_record))
    newer["timestamp"] = "2026-12-03T00:00:00Z"
    newer["device"]["name"] = "NVIDIA H100 80GB HBM3"
    failed = json.loads(json.dumps(sync_record))
    failed["timestamp"] = "2026-12-04T00:00:00Z"
    failed["ok"] = False
    failed["device"]["name"] = "BROKEN"
    note = evidence_note([sync_record, newer, failed], "sync")
    assert note.startswith("on NVIDIA H100 80GB HBM3 ")


def test_no_note_without_a_record_or_headline(sync_record):
    assert evidence_note([], "sync") is None
    assert evidence_note([sync_record], "h2d") is None
    sync_record["headline"] = None
    assert evidence_note([sync_record], "sync") is None


def test_newest_filters_by_device(sync_record):
    assert evidence.newest([sync_record], "sync", "NVIDIA H200") is sync_record
    assert evidence.newest([sync_record], "sync", "NVIDIA B200") is None


def _dataloader_record(sync_record):
    from gpulint.runtime.harness import variant_from

    r = json.loads(json.dumps(sync_record))
    r["bench"] = "dataloader"
    r["variants"] = [
        variant_from("workers0", "num_workers=0", [2000, 2010, 1990], "samples/s", "higher"),
        variant_from("workers8", "num_workers=8", [7500, 7600, 7400], "samples/s", "higher"),
        variant_from("workers8_pin", "+pin", [7700, 7300, 7900], "samples/s", "higher"),
        variant_from("persist", "+persistent", [12600, 12700, 12000], "samples/s", "higher"),
    ]
    r["headline"] = {"baseline": "workers0", "improved": "persist", "what": "num_workers=0"}
    r["headlines"] = {
        "pin_memory": {"baseline": "workers8", "improved": "workers8_pin",
                       "what": "a DataLoader without pin_memory", "versus": "with it"},
        "persistent": {"baseline": "workers8_pin", "improved": "persist",
                       "what": "a DataLoader whose workers restart every epoch"},
    }  # fmt: skip
    return r


def test_claims_pick_one_comparison_of_a_bench(sync_record):
    r = _dataloader_record(sync_record)
    assert validate_record(r) == []
    assert "num_workers=0 was 6.3× slower" in evidence_note([r], "dataloader")
    assert evidence_note([r], "dataloader", "persistent") == (
        "on NVIDIA H200 a DataLoader whose workers restart every epoch cost +64% "
        "(7,700 → 12,600 samples/s, 3 runs)"
    )
    assert "no difference beyond run-to-run spread" in evidence_note(
        [r], "dataloader", "pin_memory"
    )
    assert evidence_note([r], "dataloader", "prefetch") is None


def test_a_claim_must_name_real_variants(sync_record):
    r = _dataloader_record(sync_record)
    r["headlines"]["persistent"]["improved"] = "nope"
    assert any("headlines.persistent.improved" in e for e in validate_record(r))
    r["headlines"] = []
    assert "headlines: expected an object" in validate_record(r)


def test_note_quotes_the_host_context_variant(sync_record):
    from gpulint.runtime.harness import variant_from

    sync_record["variants"].append(
        variant_from(
            "host_issue", "host time to issue one step (context)", [1150, 1153, 1160], "us", "lower"
        )
    )
    sync_record["headline"]["context"] = "host_issue"
    assert validate_record(sync_record) == []
    assert evidence_note([sync_record], "sync") == (
        "on NVIDIA H200 an .item() every step cost +15% per step "
        "(1,535 → 1,334 µs, 5 runs; host time to issue one step: 1,153 µs)"
    )
    sync_record["headline"]["context"] = "nope"
    assert validate_record(sync_record) == ["headline.context: no variant named 'nope'"]


def test_note_quotes_every_context_variant_in_order_and_skips_unavailable(sync_record):
    from gpulint.runtime.harness import variant_from, variant_not_run

    sync_record["variants"] += [
        variant_from(
            "host_issue", "host time to issue one step (context)", [1940] * 3, "us", "lower"
        ),
        variant_from(
            "gpu_step", "GPU time for one step (context, CUDA graph)", [1210] * 3, "us", "lower"
        ),
    ]
    sync_record["headline"]["context"] = ["host_issue", "gpu_step"]
    assert validate_record(sync_record) == []
    assert evidence_note([sync_record], "sync").endswith(
        "host time to issue one step: 1,940 µs; GPU time for one step: 1,210 µs)"
    )
    sync_record["variants"][-1] = variant_not_run(
        "gpu_step",
        "GPU time for one step (context, CUDA graph)",
        "us",
        "lower",
        "unavailable",
        "RuntimeError('capture failed')",
    )
    assert validate_record(sync_record) == []
    assert evidence_note([sync_record], "sync").endswith("host time to issue one step: 1,940 µs)")
    sync_record["headline"]["context"] = 7
    assert validate_record(sync_record) == [
        "headline.context: expected a variant name or a list of them"
    ]


def _paired(record, a, b):
    from gpulint.runtime.harness import variant_from

    record["variants"] = [
        variant_from("every_step", ".item() every step", a, "us", "lower"),
        variant_from("every_50", ".item() every 50 steps", b, "us", "lower"),
    ]
    record["headline"]["paired"] = True
    return record


def test_paired_runs_show_a_cost_that_overlapping_ranges_hide(sync_record):
    # Host drift moves both variants run by run: the ranges overlap, every pair shows the cost.
    r = _paired(sync_record, [1500, 1711, 1760, 1719, 1667], [1303, 1419, 1529, 1448, 1403])
    assert evidence_note([r], "sync") == (
        "on NVIDIA H200 an .item() every step cost +21% per step "
        "(1,711 → 1,419 µs, 5 runs alternating; per run +15% to +21%)"
    )
    r["headline"]["paired"] = False  # the same samples judged by their ranges
    assert "no difference beyond run-to-run spread" in evidence_note([r], "sync")


def test_paired_cost_is_the_ratio_of_the_medians_it_quotes(sync_record):
    # The median of the per-run ratios (+19%) differs from the medians' ratio (+6%): the
    # sentence quotes the pair, so its percentage is the pair's.
    r = _paired(sync_record, [1662, 1681, 1883], [1391, 1666, 1582])
    assert evidence_note([r], "sync") == (
        "on NVIDIA H200 an .item() every step cost +6% per step "
        "(1,681 → 1,582 µs, 3 runs alternating; per run +1% to +19%)"
    )


def test_paired_runs_on_both_sides_of_one_are_noise(sync_record):
    r = _paired(sync_record, [1617, 1837, 1813, 1590, 1811], [1708, 1800, 1423, 1484, 1717])
    note = evidence_note([r], "sync")
    assert "made no difference beyond run-to-run spread" in note
    assert "per run -5% to +27%" in note


def test_unpaired_samples_fall_back_to_ranges(sync_record):
    r = _paired(sync_record, [1530, 1535, 1540, 1536, 1533], [1330, 1334, 1338])
    assert evidence_note([r], "sync") == (
        "on NVIDIA H200 an .item() every step cost +15% per step (1,535 → 1,334 µs, 3 runs)"
    )
