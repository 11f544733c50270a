"""Performance claims in prose, and the evidence they cite: the one analysis behind GPU910
(speedup or throughput claim without evidence, or drifted from it), GPU911 (bare ratio without
the absolute pair) and GPU912 (%-of-peak against an unknown or estimated denominator; a sparse
peak quoted as dense), for Markdown, reStructuredText and Python docstrings alike.

Front-ends hand over *prose units* (a paragraph, a list item, a table row, a heading, a docstring
paragraph) as `Unit`s: the text with code, quotes, comments and link targets already blanked out
(same length, so offsets still map onto the file), the raw text of the same region, and the
evidence references found there. Everything here works on those units.

Evidence references (documented in GPU910):
- a link to a bench record: `[evidence](.gpulint/evidence/20261202T101500Z-attention-4242.json)`
  (Markdown) or `` `evidence <.gpulint/evidence/...json>`_ `` (reStructuredText): any link whose
  target is a `.json` file under a `gpulint/evidence/` directory, or whose text is `evidence`;
- a tag: `<!-- gpulint-evidence: PATH -->` (Markdown), `.. gpulint-evidence: PATH` (RST),
  `gpulint-evidence: PATH` (docstrings), in the unit or on the line right after it;
- a bench tag naming the bench: `(gpulint bench attention, 5 runs, median ...)`: the newest
  record of that bench under the project's `.gpulint/evidence/` backs the claim.
A claim that states its runs count and its dispersion ("median of 5 runs, ±2%") carries its own
evidence and is left alone.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpulint.hardware import GPU, SPARSE_TO_DENSE, table

# The prefilter's words for the claim rules: every speed/ratio pattern below needs one of these
# (raw bytes, so the capital is left off: "aster" finds faster/Faster).
SPEED_WORDS = (
    "aster",
    "uicker",
    "peed",
    "cceleration",
    "hroughput",
    "atency",
    "erformance",
    "less time",
    "shorter",
    "eduction in",
)
# A citation of a record, checked whether or not a claim is found next to it.
EVIDENCE_WORDS = ("gpulint-evidence", "gpulint bench", "gpulint/evidence", "evidence")
# ...and a throughput figure needs one of its units.
THROUGHPUT_WORDS = ("FLOP", "flop", "/s", "per second")

# A docstring is analysed only when its own text, lowercased, holds one of these: every claim
# pattern below (case-insensitive, words split across lines) needs one, so skipping the others
# loses no claim. Looser than the file prefilter's words on purpose ("less" for "less wall-clock
# time", "second" for "tokens per\nsecond"), since this gate cannot be checked by a fixture.
DOCSTRING_WORDS = (
    *(w.lower() for w in SPEED_WORDS if " " not in w),
    "less",
    "reduction",
    "flop",
    "/s",
    "second",
    "evidence",
    "gpulint",
    "eak",
    "oofline",
    "mfu",
    "hfu",
    "sol",
)

TOLERANCE = 0.10  # a quoted figure within 10% of the record's figure matches it

# A number starts where its digits start (not inside a run of digits or after a thousands
# comma): without the lookbehind every position of a long digit run restarts the match, which is
# quadratic in the run (40 KB of digits took minutes).
# Speed claims judged per unit: a paragraph makes a handful; a unit with hundreds of figures is
# a table or a log, and bounding the count keeps the per-claim work linear in the text.
MAX_CLAIMS = 50
_NUM = r"(?<![\d,])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
_HEDGE = r"(?:(?:up\s+to|about|around|roughly|nearly|almost|over|more\s+than|at\s+least|approximately|an?)\s+|~\s?|≈\s?)?"
_SPEED = (
    r"(?:faster|quicker|speed-?ups?|speed\s+ups?|acceleration|higher\s+throughput|more\s+throughput"
    r"|better\s+throughput|throughput\s+(?:gains?|improvements?|increases?|boost)|lower\s+latency"
    r"|less\s+(?:wall[- ]clock\s+)?time|shorter\s+(?:training|step|run)\s+time"
    r"|(?:performance|speed)\s+(?:gains?|improvements?|boost|increases?)|reduction\s+in\s+(?:latency|step\s+time|training\s+time|wall[- ]clock))"
)
_RATIO_MARK = r"(?:\s?[x×](?![\w])|\s?X(?![\w])|-fold|\s+times)"
RATIO_CLAIM = re.compile(
    rf"{_HEDGE}{_NUM}{_RATIO_MARK}\s+(?:[\w-]+\s+){{0,2}}?(?:{_SPEED}|(?:the\s+)?(?:throughput|speed|performance)\b)",
    re.IGNORECASE,
)
PCT_CLAIM = re.compile(rf"{_HEDGE}{_NUM}\s?%\s+(?:[\w-]+\s+){{0,2}}?{_SPEED}", re.IGNORECASE)
SPEEDUP_OF = re.compile(
    rf"(?:speed-?ups?|acceleration)\s+(?:of\s+)?{_HEDGE}{_NUM}(?P<mark>{_RATIO_MARK}|\s?%)",
    re.IGNORECASE,
)
THROUGHPUT_CLAIM = re.compile(
    rf"\b(?:achiev(?:es|ed|ing|e)|reach(?:es|ed|ing)?|deliver(?:s|ed|ing)?|hits?|peaks?\s+at|sustain(?:s|ed|ing)?)"
    rf"\s+{_HEDGE}{_NUM}\s?(?P<unit>[PT]FLOP/?s|[PT]FLOPS|tokens?/s(?:ec)?|tok/s|tokens\s+per\s+second|samples/s|images/s|img/s|it/s|[GT]B/s)\b",
    re.IGNORECASE,
)
PEAK_PCT = re.compile(
    rf"{_NUM}\s?%\s+(?:of\s+(?:the\s+)?(?:[\w/-]+\s+){{0,4}}?(?P<what>peak|roofline|speed[- ]of[- ]light|SOL)\b|(?P<mfu>MFU|HFU)\b)"
    rf"|(?P<mfu2>MFU|HFU)\s+(?:of\s+|=\s*|:\s*)?{_NUM.replace('num', 'num2')}\s?%",
    re.IGNORECASE,
)
PEAK_FIGURE = re.compile(
    rf"{_NUM}\s?(?:dense\s+|sparse\s+)?(?:TFLOPS|TFLOP/s|TFLOPs|teraflops)\b", re.IGNORECASE
)

_RUNS = re.compile(
    r"\b(?:\d+|three|four|five|six|seven|eight|nine|ten|twenty)\s+(?:independent\s+|timed\s+)?(?:runs|trials|repeats|repetitions|seeds)\b"
    r"|\b(?:median|mean|average)\s+(?:of|over)\s+\d+\b|\bn\s*=\s*\d+\b|\baveraged\s+over\s+\d+",
    re.IGNORECASE,
)
_DISPERSION = re.compile(
    r"±|\+/-|\bstd\b|\bstdev\b|standard\s+deviation|\bspread\b|\bmin(?:imum)?\s*(?:/|,|and|-)\s*max|\bIQR\b"
    r"|confidence\s+interval|\b\d+%\s+CI\b|\bvariance\b|\brange\b",
    re.IGNORECASE,
)
_TIME_UNIT = r"(?:ms|µs|us|ns|s|sec|secs|seconds?|minutes?|mins?|hours?|hrs?|h)"
_THROUGHPUT_UNIT = r"(?:[PT]FLOP/?s|[PT]FLOPS|tokens?/s(?:ec)?|tok/s|samples/s|images/s|img/s|it/s|[GMT]B/s|qps|QPS|req/s|reqs/s|requests/s|TPS)"
ABSOLUTE = re.compile(
    rf"(?<![\w.])\d+(?:[.,]\d+)?\s?(?P<unit>{_TIME_UNIT}|{_THROUGHPUT_UNIT})(?:/(?:step|query|iter|it|batch|token|epoch|sample))?(?![\w])",
    re.IGNORECASE,
)
_DURATION = re.compile(r"(?<![\w.])\d+\s?d\s?\d+\s?h(?![\w])|(?<![\w.])\d+h\d+m(?![\w])")
PAIR = re.compile(
    rf"(?<![\w.,])\d[\d,]*(?:\.\d+)?\s?(?:{_TIME_UNIT}|{_THROUGHPUT_UNIT})?(?:/\w+)?\s*(?:→|->|—>|=>|⇒|\bto\b|\bvs\.?|\bversus\b|/)\s*"
    rf"\d[\d,]*(?:\.\d+)?\s?(?:{_TIME_UNIT}|{_THROUGHPUT_UNIT})(?![\w])",
    re.IGNORECASE,
)
_BENCH_TAG = re.compile(r"gpulint\s+bench\s+(?P<bench>[a-z][a-z0-9-]*)", re.IGNORECASE)
EVIDENCE_TAG = re.compile(r"gpulint-evidence:\s*(?P<path>[^\s>]+)")
_DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "tf32": "tf32",
    "fp32": "fp32",
    "float32": "fp32",
}
_DTYPE_RE = re.compile(r"\b(" + "|".join(_DTYPES) + r")\b", re.IGNORECASE)
_GENERIC_ALIASES = {"spark"}  # "Spark" alone is as often Apache Spark: require "DGX Spark"
UNIT_SCALE = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "sec": 1.0,
    "secs": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "min": 60.0,
    "mins": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hr": 3600.0,
    "hrs": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
}


@dataclass
class Unit:
    """One prose unit: blanked text (offsets map to the file), raw text, evidence references."""

    text: str
    raw: str
    start: int  # character offset of text[0] in the file
    kind: str = "paragraph"  # paragraph / heading / table-row / list-item / docstring
    references: list[str] = field(default_factory=list)  # record paths cited
    section_references: list[str] = field(default_factory=list)  # cited in its section
    external_link: bool = False  # cites an outside source (paper, blog, upstream release)
    section: str = ""  # for a heading: the prose of the section under it (where its evidence is)
    link_texts: list[tuple[int, int]] = field(default_factory=list)  # link-text spans, unit offsets
    previous_item: str = ""  # for a list item: the item before it in the same list
    # Set by the front-end from the unit's neighbourhood in the document:
    beside_figure: bool = False  # an image/figure sits right above or below it (its caption)
    beside_table: bool = False  # a table row with figures sits right above or below it
    news: bool = False  # a dated news item, or under a News / Updates / Release heading
    lead: str = ""  # the text just before it: the paragraph above, the parent list item
    document_measures: bool = False  # the document shows results (a table, plot, results link)


UNSUPPORTED, BARE_RATIO, DENOMINATOR = "unsupported", "bare-ratio", "denominator"
# A speed claim the analysis found and judged backed or not the author's (no finding of any
# kind); `Claim.spared` says why, one of the reasons below, so a rule can name the case.
SPARED = "spared"
EXPECTATION = "expectation"  # "would be 8 times faster", "2x theoretical", "X reports 25%"
LINK_TEXT = "link-text"  # the claim is the text of a link: the link is its source
CITES_SOURCE = "cites-source"  # someone else's result named ("et al."), or a cited source
RESULTS_ROW = "results-row"  # a row of a results table that carries both figures
BESIDE_FIGURE = "beside-figure"  # the caption of a figure (an image beside it, `Figure 3:`)
BESIDE_TABLE = "beside-table"  # right above or below a results table or a benchmark log
NEWS = "news"  # a dated news item, or under a News / Updates / Release notes heading
DOCUMENT_MEASURES = "document-measures"  # the document shows its measurements somewhere
LINKED_SENTENCE = "linked-sentence"  # the claim's sentence links where its figures are
POINTING = "pointing"  # "the table below", "see the benchmarks"
MEASURED = "measured"  # its absolute pair, or an absolute figure, is there
RUNS_AND_DISPERSION = "runs-and-dispersion"  # runs count and dispersion (a ratio wants a pair)


@dataclass
class Claim:
    # What is wrong with it (each claim rule reports one kind, `ClaimRule.claim_kind`):
    # UNSUPPORTED (no measurement behind it, or drifted from its record), BARE_RATIO (a ratio
    # without the absolute pair), DENOMINATOR (%-of-peak against an unknown denominator).
    kind: str
    start: int  # offset in the file
    end: int
    message: str
    severity: str | None = None  # None: the rule's own; "warning" for a defect (dangling, drift)
    spared: str | None = None  # for kind SPARED: why the claim needs no finding


# Every evidence path a lint looked at (found or not), for the result cache: the engine empties
# it before a file and keeps what it holds after, so an edited, deleted or created record is a
# cache miss for the files that cite it.
EVIDENCE_READS: set[str] = set()


@dataclass
class EvidenceContext:
    """Where records live: the document's directory and the project root."""

    doc_dir: Path | None
    root: Path | None

    def resolve(self, ref: str) -> Path | None:
        """The record a reference names, only inside the project: a document must not make
        gpulint read (or reveal whether there is) a file elsewhere on the machine."""
        from gpulint.safeio import is_regular

        ref = ref.strip().strip("<>").split("#", 1)[0]
        path = Path(ref)
        if path.is_absolute() or "\x00" in ref:
            return None
        candidates = [
            *([self.doc_dir / path] if self.doc_dir else []),
            *([self.root / path] if self.root else []),
        ]
        EVIDENCE_READS.update(str(c) for c in candidates)  # the cache key (gpulint.cache)
        inside = [r for r in (self.root, self.doc_dir) if r is not None] or [Path.cwd()]
        return next((c for c in candidates if _within(c, inside) and is_regular(c, inside)), None)

    def bench_records(self, bench: str) -> list[dict]:
        if self.root is None:
            return []
        folder = self.root / ".gpulint" / "evidence"
        EVIDENCE_READS.add(str(folder))
        return (
            [r for r in load_records(folder) if r.get("bench") == bench] if folder.is_dir() else []
        )


def _within(path: Path, roots: list[Path]) -> bool:
    import os

    real = os.path.realpath(path)
    for root in roots:
        top = os.path.realpath(root)
        if real == top or real.startswith(top.rstrip(os.sep) + os.sep):
            return True
    return False


def load_records(path: Path) -> list[dict]:
    """Valid records from a file or folder, through gpulint.runtime.evidence when present."""
    try:
        from gpulint.runtime.evidence import load_records as runtime_load
    except ImportError:  # pragma: no cover - the runtime package ships with gpulint
        pass
    else:
        return runtime_load([path])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    items = data if isinstance(data, list) else [data]
    return [r for r in items if isinstance(r, dict) and r.get("schema") == "gpulint.evidence/1"]


# -- figures -------------------------------------------------------------------------------------
def number(text: str) -> float:
    return float(text.replace(",", ""))


def record_ratios(record: dict) -> list[float]:
    """The speed ratios a record supports: headline baseline/improved, and every variant pair."""
    ok = [v for v in record.get("variants", []) if v.get("status") == "ok" and v.get("median")]
    out = []
    for a in ok:
        for b in ok:
            if a is b or a.get("unit") != b.get("unit"):
                continue
            lower = a.get("better", "lower") == "lower"
            ratio = a["median"] / b["median"] if lower else b["median"] / a["median"]
            if ratio > 1.0:
                out.append(ratio)
    return out


def record_figures(record: dict) -> list[tuple[float, str]]:
    return [
        (float(v["median"]), str(v.get("unit", "")))
        for v in record.get("variants", [])
        if v.get("status") == "ok" and isinstance(v.get("median"), (int, float))
    ]


def _close(a: float, b: float, tolerance: float = TOLERANCE) -> bool:
    return b != 0 and abs(a - b) / abs(b) <= tolerance


def _same_unit(quoted: str, recorded: str) -> float | None:
    """Factor converting a quoted figure into the record's unit, or None if not comparable."""
    q, r = quoted.lower().replace("µ", "u"), recorded.lower().replace("µ", "u")
    if q.split("/")[0] in UNIT_SCALE and r in UNIT_SCALE:
        return UNIT_SCALE[q.split("/")[0]] / UNIT_SCALE[r]
    return 1.0 if q == r or q.replace("flops", "flop/s") == r else None


# -- the analysis --------------------------------------------------------------------------------
def analyse(
    unit: Unit, evidence: EvidenceContext, changelog: bool = False, scope: bool = True
) -> list[Claim]:
    """The claims findings of one unit, at most one per sentence. Out of `scope` (a blog post,
    a changelog, a code docstring not opted in) only a dangling evidence reference is reported:
    a link to a record that does not exist is a defect wherever it is written."""
    dangling = _dangling(unit, evidence)
    if not scope or changelog:
        # Release notes record what was announced at the time, often quoting upstream
        # (a new flash-attn, a new CUDA): history, not the docs a claim lives in.
        return dangling
    claims: list[Claim] = []
    spared: list[Claim] = []
    speed = []
    for c in _speed_claims(unit.text):
        if _hypothetical(unit.text, c[0], c[1]):
            spared.append(_spare(unit, c[0], c[1], EXPECTATION))
        elif _in_link(unit, c[0]):
            spared.append(_spare(unit, c[0], c[1], LINK_TEXT))
        else:
            speed.append(c)
    if speed and not dangling:
        judged = _judge_speed(unit, speed, evidence)
        claims.extend(c for c in judged if c.kind != SPARED)
        spared.extend(c for c in judged if c.kind == SPARED)
    claims.extend(_peak_claims(unit))
    return dangling + _one_per_sentence(unit, claims) + spared


def _spare(unit: Unit, start: int, end: int, why: str) -> Claim:
    return Claim(SPARED, unit.start + start, unit.start + end, "", spared=why)


_PRIORITY = {DENOMINATOR: 0, UNSUPPORTED: 1, BARE_RATIO: 2}


def _one_per_sentence(unit: Unit, claims: list[Claim]) -> list[Claim]:
    """One finding per sentence: a wrong denominator first, then missing evidence, then a
    bare ratio (two findings on one sentence read as noise, not as two problems)."""
    best: dict[tuple[int, int], Claim] = {}
    for claim in claims:
        key = _sentence(unit.text, claim.start - unit.start)
        kept = best.get(key)
        if kept is None or (_PRIORITY[claim.kind], claim.start) < (
            _PRIORITY[kept.kind],
            kept.start,
        ):
            best[key] = claim
    return sorted(best.values(), key=lambda c: c.start)


def _dangling(unit: Unit, evidence: EvidenceContext) -> list[Claim]:
    _, problem = _cited_records(unit, evidence, own=True)
    if problem is None:
        return []
    first = unit.text.strip()
    at = unit.start + (unit.text.index(first[0]) if first else 0)
    return [
        Claim(UNSUPPORTED, at, at + min(len(first), 80) if first else at + 1, problem, "warning")
    ]


def _speed_claims(text: str) -> list[tuple[int, int, str, float | None]]:
    """(start, end, kind, ratio) of each speedup/throughput claim; kind: ratio / percent / absolute."""
    found: list[tuple[int, int, str, float | None]] = []
    taken: list[tuple[int, int]] = []  # sorted, disjoint

    def add(m: re.Match, kind: str, ratio: float | None) -> None:
        s, e = m.start("num"), m.end()
        k = bisect.bisect_left(taken, (s, e))
        if (k and taken[k - 1][1] > s) or (k < len(taken) and taken[k][0] < e):
            return
        taken.insert(k, (s, e))
        found.append((s, e, kind, ratio))

    for m in itertools.islice(RATIO_CLAIM.finditer(text), MAX_CLAIMS):
        add(m, "ratio", number(m.group("num")))
    for m in itertools.islice(PCT_CLAIM.finditer(text), MAX_CLAIMS):
        add(m, "percent", 1 + number(m.group("num")) / 100)
    for m in itertools.islice(SPEEDUP_OF.finditer(text), MAX_CLAIMS):
        value = number(m.group("num"))
        add(
            m,
            "percent" if "%" in m.group("mark") else "ratio",
            1 + value / 100 if "%" in m.group("mark") else value,
        )
    for m in itertools.islice(THROUGHPUT_CLAIM.finditer(text), MAX_CLAIMS):
        add(m, "absolute", None)
    return sorted(found)[:MAX_CLAIMS]


def _judge_speed(unit: Unit, speed, evidence: EvidenceContext) -> list[Claim]:
    out: list[Claim] = []
    text = unit.text
    context = f"{text}\n{unit.section}"
    runs = bool(_RUNS.search(context))
    self_evident = runs and bool(_DISPERSION.search(context))
    quoting = unit.external_link or bool(_QUOTING.search(context))
    records, _ = _cited_records(unit, evidence)
    absolutes = list(ABSOLUTE.finditer(text))
    section_absolutes = list(ABSOLUTE.finditer(unit.section)) if unit.section else []
    durations = len(_DURATION.findall(text))  # `~1d7h`: a figure too, never drift-checked
    paired = (
        _has_absolute_pair(unit, absolutes)
        or len(absolutes) + durations >= 2
        or bool(unit.section and (len(section_absolutes) >= 2 or PAIR.search(unit.section)))
        # `- FP8: 10.31 ms (1.64x faster)` under `- BF16: 16.95 ms`: the list is the pair.
        or bool(
            (absolutes or durations)
            and unit.previous_item
            and (ABSOLUTE.search(unit.previous_item) or _DURATION.search(unit.previous_item))
        )
    )
    around = f"{context}\n{unit.lead}"
    hardware = bool(_HARDWARE.search(around) or devices_named(around))
    results_row = unit.kind == "table-row" and paired  # a results table: the row is the data
    # Where the measurement is shown rather than said: the figure this text captions, the
    # results table right above or below it; and news items, which announce (and link) results.
    shown = (
        unit.beside_figure
        or unit.beside_table
        or unit.news
        or unit.document_measures
        or _CAPTION.match(text)
    )
    pointing: dict[tuple[int, int], bool] = {}  # per sentence, searched once
    for start, end, kind, ratio in speed:
        at, until = unit.start + start, unit.start + end
        claim_text = " ".join(text[start:end].split())
        if records:
            drift = _drift(claim_text, kind, ratio, absolutes, records)
            if drift:
                out.append(Claim(UNSUPPORTED, at, until, drift, "warning"))
            elif kind in ("ratio", "percent") and not paired:
                out.append(Claim(BARE_RATIO, at, until, _bare(claim_text)))
            continue
        why = CITES_SOURCE if quoting else RESULTS_ROW if results_row else None
        why = why or (_shown(unit, text) if shown else None)
        why = why or (LINKED_SENTENCE if _linked_sentence(unit, start) else None)
        if why is not None:
            out.append(_spare(unit, start, end, why))
            continue
        sentence = _sentence(text, start)
        if sentence not in pointing:
            pointing[sentence] = bool(_POINTING.search(text, *sentence))
        if pointing[sentence]:
            out.append(_spare(unit, start, end, POINTING))
            continue  # "as the table below shows": the evidence is pointed at
        # Backed where it is made: the absolute pair (or an absolute figure) is the measurement.
        measured = paired or kind == "absolute"
        if measured:
            out.append(_spare(unit, start, end, MEASURED))
            continue
        if self_evident:
            if kind in ("ratio", "percent") and not paired:
                out.append(Claim(BARE_RATIO, at, until, _bare(claim_text)))
            out.append(_spare(unit, start, end, RUNS_AND_DISPERSION))
            continue
        missing = [
            what
            for what, there in (
                ("no absolute pair (X → Y)", measured),
                ("no hardware", hardware),
                ("no runs count", runs),
            )
            if not there
        ]
        out.append(
            Claim(
                UNSUPPORTED,
                at,
                until,
                f'performance claim "{claim_text}" has no measurement behind it in this document: '
                f"it gives {_join(missing)}, and the document has no results table, benchmark "
                f"figure or results link; put the measurement next to it (`X ms → Y ms on <GPU>, "
                f"median of N runs`) or link the record or page that holds it",
            )
        )
    return out


def _shown(unit: Unit, text: str) -> str:
    """Where the measurement is shown, for a claim `_judge_speed` found shown."""
    if unit.beside_figure or _CAPTION.match(text):
        return BESIDE_FIGURE
    if unit.beside_table:
        return BESIDE_TABLE
    return NEWS if unit.news else DOCUMENT_MEASURES


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def _bare(claim_text: str) -> str:
    return (
        f'bare ratio "{claim_text}": give the absolute pair it came from '
        f"(`X s/step → Y s/step`, both medians) next to it"
    )


# Hardware a measurement names: a GPU family or model, a CPU, a device count.
_HARDWARE = re.compile(
    r"\b(?:[AHBLTVP]\d{2,3}[A-Za-z]?|GB\d{3}|MI\d{3}X?|RTX\s?(?:PRO\s?)?[A-Z]?\d{3,4}\w*|GTX\s?\d{3,4}"
    r"|Titan|Jetson|Orin|Xavier|Hopper|Ampere|Blackwell|Ada|Volta|Turing|TPU\s?v?\d*|Gaudi\d?"
    r"|sm_?\d{2,3}a?|GPUs?|CPUs?|Xeon|EPYC|M[1-4](?:\s?(?:Pro|Max|Ultra))?|\d+\s?x\s?[A-Z]\d{2,3})\b",
)
# "Figure 3: ...", "Table 2. ...": a caption, the figure or table is the evidence.
_CAPTION = re.compile(
    r"^\s*(?:[-*]\s+)?(?:\*\*|__|\*|_)?(?:Fig(?:ure)?|Table|Tab)\.?\s*\d+", re.IGNORECASE
)
_POINTING = re.compile(
    r"\b(?:the\s+)?(?:following|below|above)\b|\bshown\s+in\b|\bsee\s+(?:the\s+)?(?:table|figure|fig\.|chart|plot|results|benchmarks?)",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n\s*\n")


def _sentence(text: str, at: int) -> tuple[int, int]:
    """The sentence of `text` holding offset `at`: (start, end) offsets."""
    starts, ends = _sentence_ends(text)
    k = bisect.bisect_left(ends, at)  # the last sentence end before `at`...
    start = ends[k - 1] if k else 0
    j = bisect.bisect_left(starts, at)  # ...and the first one from `at` on
    return start, starts[j] if j < len(starts) else len(text)


@functools.lru_cache(maxsize=16)
def _sentence_ends(text: str) -> tuple[list[int], list[int]]:
    """(starts, ends) of every sentence end in `text`, found once: each claim of a long unit
    looks its sentence up by bisection instead of rescanning the unit (quadratic before)."""
    found = [(m.start(), m.end()) for m in _SENTENCE_END.finditer(text)]
    return [a for a, _ in found], [b for _, b in found]


def _linked_sentence(unit: Unit, at: int) -> bool:
    """The claim's sentence links where its figures are (a results page, a paper, the project
    that measured it): the reader is one click from the evidence."""
    start, end = _sentence(unit.text, at)
    return any(start <= s <= end for s, _ in unit.link_texts)


# Someone else's result, named: "Press et al. report", "the authors found", "according to".
_QUOTING = re.compile(
    r"\bet\s+al\.?|\b(?:they|authors?)\s+(?:report|found|show|claim)|\breports?\s+that\b"
    r"|\baccording\s+to\b",
    re.IGNORECASE,
)
# A figure someone expects rather than measured: "we expect it to run 4 times faster".
_HYPOTHETICAL = re.compile(
    r"\b(?:expect(?:s|ed)?|ideal(?:ly)?|optimal|maximum\s+possible|in\s+theory|theoretical(?:ly)?"
    r"|would|should|could|might|hope"
    r"|if\s+we|assum(?:e|ing))\b",
    re.IGNORECASE,
)


# Someone else's figure, in the claim's own sentence: "torchtitan reports 25-28% speedups".
_REPORTED = re.compile(r"\breports\b|\breported\s+(?:by|in)\b", re.IGNORECASE)


def _sentence_start(text: str, at: int) -> int:
    return max(text.rfind(". ", 0, at), text.rfind("\n\n", 0, at), 0)


def _hypothetical(text: str, at: int, end: int) -> bool:
    """An expectation in the claim's sentence up to the claim's end ("should see ~1.6x",
    "2x theoretical throughput"), or a figure the sentence says someone else reported."""
    start = _sentence_start(text, at)
    return bool(_HYPOTHETICAL.search(text, start, end) or _REPORTED.search(text, start, end))


def _in_link(unit: Unit, at: int) -> bool:
    """The claim is the text of a link: the link is its source (a model card, a results page)."""
    return any(start <= at < end for start, end in unit.link_texts)


def _has_absolute_pair(unit: Unit, absolutes) -> bool:
    if len(absolutes) >= 2 or PAIR.search(unit.text):
        return True
    if unit.kind == "table-row":
        cells = [c.strip() for c in unit.text.strip().strip("|").split("|")]
        numeric = [c for c in cells if re.match(r"^[~≈]?\d[\d,]*(\.\d+)?\s*\S{0,8}$", c)]
        return len(numeric) >= 3  # two figures and the ratio
    return False


def _cited_records(
    unit: Unit, evidence: EvidenceContext, own: bool = False
) -> tuple[list[dict], str | None]:
    """The records the unit cites (with `own`, not counting those of the section under it), or
    a problem sentence when a citation does not resolve."""
    records: list[dict] = []
    for ref in unit.references if own else unit.references + unit.section_references:
        path = evidence.resolve(ref)
        if path is None:
            return (
                [],
                f"cites evidence record `{ref}`, which does not exist: run the bench and link the record it wrote",
            )
        found = load_records(path)
        if not found:
            return [], f"cites `{ref}`, which holds no valid `gpulint.evidence/1` record"
        records.extend(found)
    for m in _BENCH_TAG.finditer(unit.raw):
        bench = m.group("bench").lower()
        found = evidence.bench_records(bench)
        if not found:
            return [], (
                f"cites `gpulint bench {bench}` but no record of that bench exists under "
                f".gpulint/evidence/: run `gpulint bench {bench}` and link the record"
            )
        records.append(max(found, key=lambda r: r.get("timestamp", "")))
    return records, None


def _drift(
    claim_text: str, kind: str, ratio: float | None, absolutes, records: list[dict]
) -> str | None:
    names = ", ".join(Path(r.get("_source", "record")).name for r in records)
    if kind in ("ratio", "percent") and ratio is not None:
        supported = [x for r in records for x in record_ratios(r)]
        candidates = [ratio] if kind == "ratio" else [ratio, 1 / max(2 - ratio, 1e-9)]
        if supported and not any(_close(c, s) for c in candidates for s in supported):
            best = min(supported, key=lambda s: abs(s - ratio))
            return (
                f'claim "{claim_text}" drifted from its evidence: {names} measured {best:.2f}× '
                f"(tolerance {TOLERANCE:.0%}); quote the record's figure"
            )
    figures = [f for r in records for f in record_figures(r)]
    for m in absolutes:
        digits = re.match(r"[\d.,]+", m.group(0))
        if digits is None:  # an absolute figure starts with its number
            continue
        value = number(digits.group(0))
        comparable = [
            (v, u, k) for v, u in figures if (k := _same_unit(m.group("unit"), u)) is not None
        ]
        if comparable and not any(_close(value * k, v) for v, u, k in comparable):
            shown = ", ".join(f"{v:g} {u}" for v, u, _ in comparable[:4])
            return (
                f'figure "{" ".join(m.group(0).split())}" drifted from its evidence: {names} '
                f"measured {shown} (tolerance {TOLERANCE:.0%}); quote the record's figures"
            )
    return None


# -- GPU912: denominators --------------------------------------------------------------------------
def devices_named(text: str) -> list[GPU]:
    """GPUs of the hardware table named in `text` (longest spelling first)."""
    hw = table()
    spellings = []
    for gpu in hw.gpus.values():
        for s in (gpu.name, *gpu.aliases):
            if s.lower() not in _GENERIC_ALIASES:
                spellings.append((s, gpu))
    found: list[GPU] = []
    masked = text
    for spelling, gpu in sorted(spellings, key=lambda t: -len(t[0])):
        pattern = re.compile(
            r"(?<![\w-])" + re.escape(spelling).replace(r"\ ", r"[\s_-]?") + r"(?![\w])",
            re.IGNORECASE,
        )
        m = pattern.search(masked)
        if m:
            if all(g.name != gpu.name for g in found):
                found.append(gpu)
            masked = masked[: m.start()] + " " * (m.end() - m.start()) + masked[m.end() :]
    return found


def _dtypes(text: str) -> list[str]:
    return list(dict.fromkeys(_DTYPES[m.group(1).lower()] for m in _DTYPE_RE.finditer(text)))


def _peak_claims(unit: Unit) -> list[Claim]:
    out: list[Claim] = []
    text = unit.text
    has_peak = PEAK_PCT.search(text)
    has_figure = PEAK_FIGURE.search(text)
    if not has_peak and not has_figure:
        return out
    gpus = devices_named(text)
    if not gpus:
        return out
    dtypes = _dtypes(text)
    bandwidth = re.search(r"bandwidth|GB/s|TB/s|memory[- ]bound|HBM|DRAM", text, re.IGNORECASE)
    for m in PEAK_PCT.finditer(text):
        if bandwidth and not m.group("mfu") and not m.group("mfu2"):
            for gpu in gpus:
                if gpu.memory_tbps is None or gpu.is_estimated("memory"):
                    out.append(
                        _peak_claim(
                            unit, m, f"{gpu.name} memory bandwidth is not a known datasheet figure"
                        )
                    )
            continue
        for gpu in gpus:
            wanted: list[str | None] = [*dtypes] if dtypes else [None]
            for dtype in wanted:
                why = _unknown_denominator(gpu, dtype)
                if why:
                    out.append(_peak_claim(unit, m, why))
                    break
    sparse_words = re.search(r"sparse|sparsity|2:4", text, re.IGNORECASE)
    if not sparse_words:
        for m in PEAK_FIGURE.finditer(text):
            value = number(m.group("num"))
            for gpu in gpus:
                why = _sparse_as_dense(gpu, value, dtypes)
                if why:
                    out.append(
                        Claim(DENOMINATOR, unit.start + m.start(), unit.start + m.end(), why)
                    )
    return out


def _peak_claim(unit: Unit, m: re.Match, why: str) -> Claim:
    return Claim(
        DENOMINATOR,
        unit.start + m.start(),
        unit.start + m.end(),
        f'%-of-peak figure "{" ".join(m.group(0).split())}" against an unknown denominator: {why}; '
        f"divide by a datasheet dense peak, or quote the absolute figure instead",
    )


def _unknown_denominator(gpu: GPU, dtype: str | None) -> str | None:
    if dtype is None:
        known = [d for d, v in gpu.peak_tflops.items() if v and not gpu.is_estimated(d)]
        if not known:
            return f"{gpu.name} has no published dense compute peak (only estimates)"
        return None
    if dtype not in gpu.peak_tflops:
        return f"{gpu.name} {dtype.upper()} peak is not published (unknown)"
    if gpu.is_estimated(dtype):
        return f"{gpu.name} {dtype.upper()} peak {gpu.peak_tflops[dtype]:g} TFLOP/s is an estimate, not a datasheet figure"
    return None


def _sparse_as_dense(gpu, value: float, dtypes: list[str]) -> str | None:
    peaks = {d: v for d, v in gpu.peak_tflops.items() if v}
    if not peaks:
        return None
    candidates = [d for d in dtypes if d in peaks] if dtypes else list(peaks)
    if not candidates:
        return None
    if not dtypes and any(_close(value, v, 0.01) for v in peaks.values()):
        return None  # equals some dense figure: not evidently a sparse one
    for d in candidates:
        dense = peaks[d]
        if _close(value, dense * SPARSE_TO_DENSE, 0.01):
            return (
                f"{value:g} TFLOP/s is {gpu.name}'s 2:4-sparse {d.upper()} figure quoted as dense; "
                f"the dense peak is {dense:g} TFLOP/s (sparse figures are exactly {SPARSE_TO_DENSE:g}× dense)"
            )
    return None
