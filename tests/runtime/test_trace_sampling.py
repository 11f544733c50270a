"""Sampling (`gpulint trace --every K`) without torch: the recorder's plan of which steps the
profiler records, what the profiler does on every step (driven through a fake torch whose
profiler follows torch.profiler's schedule transitions), CUPTI teardown between cycles, and the
overhead broken down by kind of step, with the in-process baseline."""

from __future__ import annotations

import enum
import json
import os
import sys
import types

import pytest

from gpulint.runtime import trace_cli
from gpulint.runtime.trace_report import overhead, render_table, step_roles
from gpulint.runtime.trace_runner import NONE, RECORD, SAVE, WARMUP, Plan, Runner, StopTrace

# ---- the plan ------------------------------------------------------------------------------------


def test_spread_records_the_last_step_of_each_cycle():
    # --warmup 1 --steps 3 --every 4: the window is steps 2..13, cycles 2-5, 6-9, 10-13
    p = Plan(1, 3, 4, "spread")
    assert p.total == 13 and p.recorded == [5, 9, 13] and p.warm == [4, 8, 12]
    assert p.cycles and p.start_at == 1
    assert [p.action(s) for s in range(2, 10)] == [
        NONE,
        NONE,
        WARMUP,
        SAVE,
        NONE,
        NONE,
        WARMUP,
        SAVE,
    ]
    # --warmup 2 --steps 3 --every 20 (the measured runs): steps 22, 42, 62 of a 60-step window
    p = Plan(2, 3, 20, "spread")
    assert p.recorded == [22, 42, 62] and p.warm == [21, 41, 61] and p.start_at == 1
    # the profiler's own step j is program step start_at + 1 + j
    assert p.schedule(20) == SAVE and p.schedule(19) == WARMUP and p.schedule(0) == NONE


def test_tail_records_the_last_steps_one_after_the_other():
    p = Plan(2, 3, 20, "tail")
    assert p.total == 62 and p.recorded == [60, 61, 62] and p.warm == [59]
    assert not p.cycles
    assert [p.action(s) for s in (58, 59, 60, 61, 62, 63)] == [
        NONE,
        WARMUP,
        RECORD,
        RECORD,
        SAVE,
        NONE,
    ]
    assert not any(p.recording(s) for s in range(1, 60))


def test_every_step_recorded_without_sampling():
    p = Plan(3, 5)
    assert p.recorded == [4, 5, 6, 7, 8] and p.warm == [3] and p.start_at == 2
    assert p.action(8) == SAVE and p.action(4) == RECORD and not p.cycles
    p = Plan(1, 3)  # no room for a warm-up step
    assert p.warm == [] and p.start_at == 1 and p.schedule(0) == RECORD
    assert Plan(2, 3, 4, "bogus").sample == "spread"


# ---- the recorder, on a fake torch -----------------------------------------------------------------


class _Action(enum.Enum):
    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


_ACTIVE = (_Action.RECORD, _Action.RECORD_AND_SAVE)


class _Fake:
    """What the fake profiler did, and on which program step's end."""

    def __init__(self):
        self.events: list[tuple[int, str]] = []
        self.runner: Runner | None = None
        self.modes: list[tuple[int, str]] = []  # the line mode entered and left
        self.stack: list[object] = []
        self.sync_debug: list[tuple[int, object]] = []

    def log(self, what: str, into: list | None = None) -> None:
        (self.events if into is None else into).append(
            (self.runner.count if self.runner else 0, what)
        )


def _fake_torch(fake: _Fake) -> dict[str, types.ModuleType]:
    torch = types.ModuleType("torch")
    cuda = types.SimpleNamespace(
        is_available=lambda: False,
        synchronize=lambda: None,
        set_sync_debug_mode=lambda m: fake.sync_debug.append((fake.runner.count, m)),
    )
    torch.cuda = cuda  # type: ignore[attr-defined]
    # the torch function mode stack: the recorder toggles its mode only while it is innermost
    torch._C = types.SimpleNamespace(_len_torch_function_stack=lambda: len(fake.stack))  # type: ignore[attr-defined]

    profiler = types.ModuleType("torch.profiler")

    class _Cycle:
        def export_chrome_trace(self, path):
            with open(path, "w", encoding="utf-8") as fh:
                json.dump({"traceEvents": []}, fh)

    class profile:  # noqa: N801 - torch's name
        """torch.profiler.profile's schedule transitions (profiler.py's action map)."""

        def __init__(self, activities, schedule, on_trace_ready, record_shapes, with_stack):
            self.schedule, self.on_trace_ready = schedule, on_trace_ready
            self.step_num = 0
            self.current_action = schedule(0)
            self.profiler = None

        def _transit(self, prev, cur):
            table = {
                (_Action.NONE, _Action.NONE): [],
                (_Action.NONE, _Action.WARMUP): ["prepare"],
                (_Action.NONE, _Action.RECORD): ["prepare", "start"],
                (_Action.NONE, _Action.RECORD_AND_SAVE): ["prepare", "start"],
                (_Action.WARMUP, _Action.RECORD): ["start"],
                (_Action.WARMUP, _Action.RECORD_AND_SAVE): ["start"],
                (_Action.RECORD, _Action.RECORD): [],
                (_Action.RECORD, _Action.RECORD_AND_SAVE): [],
                (_Action.RECORD_AND_SAVE, _Action.NONE): ["stop", "ready"],
                (_Action.RECORD_AND_SAVE, _Action.WARMUP): ["stop", "ready", "prepare"],
                (_Action.RECORD_AND_SAVE, None): ["stop", "ready"],
                (_Action.RECORD, None): ["stop", "ready"],
                (_Action.NONE, None): [],
            }
            for what in table[(prev, cur)]:  # an unexpected transition fails the test
                fake.log(what)
                if what == "prepare":
                    self.profiler = _Cycle()
                if what == "ready":
                    self.on_trace_ready(self)

        def start(self):
            self._transit(_Action.NONE, self.current_action)

        def step(self):
            prev = self.current_action
            self.step_num += 1
            self.current_action = self.schedule(self.step_num)
            self._transit(prev, self.current_action)

        def stop(self):
            self._transit(self.current_action, None)

        def export_chrome_trace(self, path):
            _Cycle().export_chrome_trace(path)

    class record_function:  # noqa: N801
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    profiler.profile = profile  # type: ignore[attr-defined]
    profiler.record_function = record_function  # type: ignore[attr-defined]
    profiler.ProfilerAction = _Action  # type: ignore[attr-defined]
    profiler.ProfilerActivity = types.SimpleNamespace(CPU="cpu", CUDA="cuda")  # type: ignore[attr-defined]

    overrides = types.ModuleType("torch.overrides")

    class TorchFunctionMode:
        def __enter__(self):
            fake.log("on", fake.modes)
            fake.stack.append(self)
            return self

        def __exit__(self, *exc):
            fake.log("off", fake.modes)
            fake.stack.remove(self)

    overrides.TorchFunctionMode = TorchFunctionMode  # type: ignore[attr-defined]
    dl = types.ModuleType("torch.utils.data.dataloader")

    class _BaseDataLoaderIter:
        def __next__(self):
            return 1

    class DataLoader:
        def __iter__(self):
            return _BaseDataLoaderIter()

    dl._BaseDataLoaderIter = _BaseDataLoaderIter  # type: ignore[attr-defined]
    dl.DataLoader = DataLoader  # type: ignore[attr-defined]
    utils = types.ModuleType("torch.utils")
    data = types.ModuleType("torch.utils.data")
    utils.data = data  # type: ignore[attr-defined]
    data.dataloader = dl  # type: ignore[attr-defined]
    torch.profiler = profiler  # type: ignore[attr-defined]
    torch.overrides = overrides  # type: ignore[attr-defined]
    torch.utils = utils  # type: ignore[attr-defined]
    return {
        "torch": torch,
        "torch.profiler": profiler,
        "torch.overrides": overrides,
        "torch.utils": utils,
        "torch.utils.data": data,
        "torch.utils.data.dataloader": dl,
    }


@pytest.fixture
def fake(monkeypatch):
    f = _Fake()
    for name, mod in _fake_torch(f).items():
        monkeypatch.setitem(sys.modules, name, mod)
    # whatever the test leaves in TEARDOWN_CUPTI is undone afterwards
    monkeypatch.setenv("TEARDOWN_CUPTI", "unset")
    monkeypatch.delenv("TEARDOWN_CUPTI")
    # the recorder's warnings hook stays this test's
    monkeypatch.setattr("warnings.showwarning", __import__("warnings").showwarning)
    return f


def _run(fake, tmp_path, **cfg):
    cfg = {"out": str(tmp_path), "root": str(tmp_path), "mode": "traced", **cfg}
    runner = Runner(cfg)
    runner.torch = sys.modules["torch"]
    fake.runner = runner
    tracing = {}
    with pytest.raises(StopTrace):
        for _ in range(runner.plan.total + 5):
            runner.on_step()
            tracing[runner.count + 1] = runner.tracing  # whether the coming step is traced
    assert runner.count == runner.plan.total
    return runner, json.loads((tmp_path / "window.json").read_text()), tracing


def test_spread_profiler_acts_only_around_recorded_steps_and_detaches_cupti(fake, tmp_path):
    runner, window, tracing = _run(fake, tmp_path, steps=3, warmup=1, every=4, sample="spread")
    # the profiler prepares (CUPTI attaches) at the end of the step before its warm-up step,
    # starts before the recorded step and stops right after it; nothing on the other steps
    assert fake.events == [
        (3, "prepare"),
        (4, "start"),
        (5, "stop"),
        (5, "ready"),
        (7, "prepare"),
        (8, "start"),
        (9, "stop"),
        (9, "ready"),
        (11, "prepare"),
        (12, "start"),
        (13, "stop"),
        (13, "ready"),
    ]
    assert window["profiled"] == [5, 9, 13] and window["warm_steps"] == [4, 8, 12]
    assert window["sample"] == "spread" and window["cupti_teardown"] is True
    assert os.environ.get("TEARDOWN_CUPTI") == "1"  # kineto reads it when each trace stops
    assert [s for s, on in tracing.items() if on] == [5, 9, 13]
    # the line ranges only around the recorded steps
    assert fake.modes == [(4, "on"), (5, "off"), (8, "on"), (9, "off"), (12, "on"), (13, "off")]
    assert sorted(p.name for p in tmp_path.glob("trace-*.json.gz")) == [
        f"trace-{i}.json.gz" for i in range(3)
    ]


def test_keep_cupti_and_the_users_own_setting_are_left_alone(fake, tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    _, window, _ = _run(
        fake, tmp_path / "a", steps=3, warmup=2, every=4, sample="spread", cupti_teardown=False
    )
    assert window["cupti_teardown"] is False and "TEARDOWN_CUPTI" not in os.environ
    # one unrecorded step between cycles leaves no room for the teardown to finish
    (tmp_path / "c").mkdir()
    _, window, _ = _run(fake, tmp_path / "c", steps=3, warmup=2, every=3, sample="spread")
    assert window["cupti_teardown"] is False and "TEARDOWN_CUPTI" not in os.environ
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")  # the user's (or torch's, for CUDA graphs)
    (tmp_path / "b").mkdir()
    _, window, _ = _run(fake, tmp_path / "b", steps=3, warmup=2, every=4, sample="spread")
    assert window["cupti_teardown"] is False and os.environ["TEARDOWN_CUPTI"] == "0"


def test_tail_leaves_every_step_before_the_recorded_ones_untouched(fake, tmp_path):
    runner, window, tracing = _run(fake, tmp_path, steps=3, warmup=2, every=4, sample="tail")
    # window 3..14: nothing until the end of step 10, then one warm-up step and 3 recorded
    assert fake.events == [
        (10, "prepare"),
        (11, "start"),
        (14, "stop"),
        (14, "ready"),
    ]
    assert window["profiled"] == [12, 13, 14] and window["warm_steps"] == [11]
    assert window["sample"] == "tail" and window["cupti_teardown"] is False
    assert "TEARDOWN_CUPTI" not in os.environ  # nothing runs after the one cycle
    assert [s for s, on in tracing.items() if on] == [12, 13, 14]
    assert fake.modes == [(11, "on"), (14, "off")]
    assert (tmp_path / "trace.json.gz").exists() and not list(tmp_path.glob("trace-*"))


def test_every_step_recorded_is_one_warm_up_and_one_trace(fake, tmp_path):
    _, window, _ = _run(fake, tmp_path, steps=3, warmup=2)
    assert [w for _, w in fake.events[:2]] == ["prepare", "start"]
    assert fake.events[0][0] == 1 and fake.events[1][0] == 2  # warm-up step 2, recorded 3..5
    assert window["profiled"] is None and window["sample"] is None
    assert window["cupti_teardown"] is False


# ---- the command line and the analysis -------------------------------------------------------------


def test_cli_passes_the_sampling_choice_to_the_recorder(tmp_path, monkeypatch):
    import argparse

    (tmp_path / "train.py").write_text("pass\n")
    seen = []

    def run_child(cfg, interpreter, out, timeout, stdout=None):
        seen.append(cfg)
        return {"phase": "failed", "steps_seen": 0, "error": "stop here"}, False

    monkeypatch.setattr(trace_cli, "run_child", run_child)
    monkeypatch.setattr(
        "gpulint.runtime.guard.check_gpus", lambda: types.SimpleNamespace(ok=True, message="ok")
    )
    parser = argparse.ArgumentParser()
    trace_cli.register(parser.add_subparsers())
    for extra, sample, teardown in (
        ([], "spread", True),
        (["--sample", "tail"], "tail", True),  # the recorder needs no teardown for one cycle
        (["--keep-cupti"], "spread", False),
    ):
        seen.clear()
        args = parser.parse_args(
            [
                "trace",
                "--root",
                str(tmp_path),
                "--every",
                "20",
                *extra,
                "--",
                str(tmp_path / "train.py"),
            ]
        )
        assert args.func(args) == 1
        (cfg,) = seen
        assert cfg["sample"] == sample and cfg["every"] == 20
        assert cfg["cupti_teardown"] is teardown


def test_a_tail_recording_is_analysed_over_its_recorded_steps():
    stack = [["t.py", 7, "main", True]]
    syncs = [{"step": s, "op": "x", "stack": stack} for s in (5, 60, 61, 62)]
    rec = {
        "config": {"steps": 3, "warmup": 2},
        "trace": {"traceEvents": []},
        "syncs": syncs,
        "window": {"profiled": [60, 61, 62]},
        "device": {},
    }
    (sync,) = trace_cli.analyse_recording(rec).get("sync")
    assert sync.count == 3  # step 5's warning is outside the recorded steps


# ---- the overhead, by kind of step -----------------------------------------------------------------


def _window(walls_by_step: dict[int, float], warmup: int, steps: int, **extra) -> dict:
    last = max(walls_by_step)
    # step_wall_s[i] is step i + 2's duration
    return {
        "warmup": warmup,
        "steps": steps,
        "step_wall_s": [walls_by_step.get(s, 0.010) for s in range(2, last + 1)],
        **extra,
    }


def test_overhead_by_kind_of_step_and_against_the_same_process():
    # recorded 6, 10, 14 after their warm-up steps, in a window of steps 2..14
    walls = {s: 0.010 for s in range(2, 15)}
    walls.update({5: 0.015, 9: 0.015, 13: 0.015, 6: 0.030, 10: 0.030, 14: 0.030})
    walls.update({7: 0.020, 11: 0.020, 8: 0.011, 12: 0.011})
    traced = _window(walls, 1, 13, profiled=[6, 10, 14], warm_steps=[5, 9, 13])
    untraced = _window({s: 0.0125 for s in range(2, 15)}, 1, 13)
    roles = step_roles(traced)
    assert [roles[s] for s in range(2, 15)] == [
        "before",
        "before",
        "before",
        "warm-up",
        "recorded",
        "after",
        "idle",
        "warm-up",
        "recorded",
        "after",
        "idle",
        "warm-up",
        "recorded",
    ]
    ov = overhead(traced, untraced)
    parts = ov["parts"]
    assert list(parts) == ["recorded", "warm-up", "after", "idle", "before"]
    assert parts["recorded"]["steps"] == 3 and parts["recorded"]["pct"] == 140.0
    assert parts["before"]["pct"] == -20.0  # this process ran faster than the untraced one
    # the parts' points add up to the window's overhead
    assert sum(p["points"] for p in parts.values()) == pytest.approx(ov["pct"], abs=0.3)
    inside = ov["in_process"]
    assert inside["steps"] == 3 and inside["baseline_ms"] == 10.0
    assert inside["runs_differ_pct"] == -20.0 and inside["idle_pct"] == 10.0
    assert inside["pct"] > ov["pct"]  # against its own process the window costs more
    text = render_table(
        [],
        {
            "summary": {"steps": 3},
            "config": {"program": ["t.py"], "warmup": 2, "overhead": ov},
            "device": {"name": "GPU"},
        },
    )
    lines = [ln for ln in text.splitlines() if ln.startswith("overhead")]
    assert len(lines) == 3
    assert "3 recorded +140%" in lines[1] and "3 before the profiler first started -20%" in lines[1]
    assert "against the 3 steps before the profiler started" in lines[2]
    assert "unrecorded steps after it +10%" in lines[2] and "-20% from the untraced" in lines[2]


def test_no_parts_without_sampling_and_no_in_process_figure_from_too_few_steps():
    walls = {s: 0.020 for s in range(2, 9)}
    untraced = _window({s: 0.010 for s in range(2, 9)}, 3, 5)
    ov = overhead(_window(walls, 3, 5), untraced)
    assert "parts" not in ov and "in_process" not in ov and ov["pct"] == 100.0
    # tail: window 3..14, 8 steps before the profiler, then its warm-up and 3 recorded steps
    walls = {s: 0.010 for s in range(2, 15)}
    walls.update({11: 0.014, 12: 0.03, 13: 0.03, 14: 0.03})
    ov = overhead(_window(walls, 2, 12, profiled=[12, 13, 14], warm_steps=[11]), untraced)
    assert list(ov["parts"]) == ["recorded", "warm-up", "before"]
    assert ov["in_process"]["steps"] == 8 and "idle_pct" not in ov["in_process"]
    # spread with one wait step per cycle: only 1 step before the profiler, no baseline
    ov = overhead(_window(walls, 2, 9, profiled=[5, 8, 11], warm_steps=[4, 7, 10]), untraced)
    assert ov["parts"]["before"]["steps"] == 1 and "in_process" not in ov
