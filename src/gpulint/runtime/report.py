"""Plain-text tables for bench results and A/B comparisons. No torch."""

from __future__ import annotations

from .evidence import UNIT_TEXT, variant
from .stats import fmt


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _extras(v: dict) -> str:
    e = v.get("extra", {})
    bits = []
    if "tflops" in e and v["unit"] != "TFLOP/s":
        bits.append(f"{fmt(e['tflops'])} TFLOP/s")
    if "pct_peak" in e:
        est = " est." if e.get("peak", {}).get("estimate") else ""
        bits.append(f"{e['pct_peak']:.0f}% of {e['peak']['dtype']} peak{est}")
    if "pct_measured_ceiling" in e:
        bits.append(f"{e['pct_measured_ceiling']:.0f}% of measured bf16 matmul")
    if "pct_datasheet" in e:
        bits.append(f"{e['pct_datasheet']:.0f}% of datasheet {e['datasheet']['tbps']:g} TB/s")
    if "busbw_GBps" in e:
        bits.append(f"algbw {fmt(e['algbw_GBps'])} GB/s, busbw {fmt(e['busbw_GBps'])} GB/s")
        if "busbw_note" in e:
            bits.append(e["busbw_note"])
    if "compile_s" in e:
        bits.append(f"compile {e['compile_s']:.1f} s")
    if "rel_err_vs_math" in e:
        bits.append(f"err {e['rel_err_vs_math']:.1e}")
    return "; ".join(bits)


def render_records(records: list[dict]) -> str:
    rows = []
    for r in records:
        for v in r["variants"]:
            unit = UNIT_TEXT.get(v["unit"], v["unit"])
            if v["status"] == "ok":
                rows.append(
                    [
                        r["bench"],
                        v["label"],
                        fmt(v["median"]),
                        fmt(v["min"]),
                        fmt(v["max"]),
                        unit,
                        str(v["runs"]),
                        _extras(v),
                    ]
                )
            else:
                rows.append(
                    [
                        r["bench"],
                        v["label"],
                        v["status"],
                        "",
                        "",
                        unit,
                        "",
                        v.get("reason", "")[:90],
                    ]
                )
    out = [_table(rows, ["bench", "variant", "median", "min", "max", "unit", "runs", "notes"])]
    for r in records:
        failed = [k for k, c in r.get("checks", {}).items() if not c.get("ok")]
        if failed:
            out.append(f"{r['bench']}: CHECK FAILED: {', '.join(failed)}")
    if records:
        r = records[0]
        v = r["versions"]
        out.append(
            f"device {r['device']['name']}; torch {v.get('torch')}, CUDA {v.get('cuda')}, "
            f"cuDNN {v.get('cudnn')}, NCCL {v.get('nccl')}, driver {v.get('driver')}"
        )
    return "\n".join(out)


def render_compare(a: list[dict], b: list[dict], a_name: str, b_name: str) -> str:
    """A/B by bench and variant: both absolute figures, then the ratio B/A."""
    rows = []
    b_by_bench: dict[str, dict] = {}
    for r in b:
        b_by_bench.setdefault(r["bench"], r)
    for ra in a:
        rb = b_by_bench.get(ra["bench"])
        if rb is None:
            continue
        for va in ra["variants"]:
            vb = variant(rb, va["name"])
            if not vb or va["status"] != "ok" or vb["status"] != "ok" or va["unit"] != vb["unit"]:
                continue
            unit = UNIT_TEXT.get(va["unit"], va["unit"])
            ratio = vb["median"] / va["median"]
            faster = ratio < 1 if va["better"] == "lower" else ratio > 1
            overlap = va["min"] <= vb["max"] and vb["min"] <= va["max"]
            verdict = "within spread" if overlap else ("B better" if faster else "B worse")
            rows.append(
                [
                    ra["bench"],
                    va["label"],
                    f"{fmt(va['median'])} [{fmt(va['min'])}–{fmt(va['max'])}]",
                    f"{fmt(vb['median'])} [{fmt(vb['min'])}–{fmt(vb['max'])}]",
                    unit,
                    f"{ratio:.3f}",
                    verdict,
                ]
            )
    if not rows:
        return "no bench variant appears in both A and B"
    head = f"A = {a_name} ({a[0]['device']['name']})\nB = {b_name} ({b[0]['device']['name']})\n"
    return head + _table(
        rows,
        ["bench", "variant", "A median [min–max]", "B median [min–max]", "unit", "B/A", "verdict"],
    )
