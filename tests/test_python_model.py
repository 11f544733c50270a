"""The Python semantic model: bindings, reaching assignments, calls, memo, summaries."""

from __future__ import annotations

import ast
import textwrap

from gpulint.frontends.python import FRONTEND
from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.model import MemoKey, unpacked_value
from gpulint.frontends.python.summaries import summaries
from gpulint.settings import Settings


def parse(text: str, path: str = "train.py") -> PythonFile:
    return FRONTEND.parse(path, textwrap.dedent(text).encode(), Settings())


def _name_at(file: PythonFile, name: str, line: int) -> ast.Name:
    return next(
        n
        for n in file.nodes(ast.Name)
        if n.id == name and n.lineno == line and isinstance(n.ctx, ast.Load)
    )


def test_bindings_of_sees_earlier_assignments_and_loop_carried_ones():
    file = parse(
        """
        def f(xs):
            total = 0
            for x in xs:
                use(total)
                total = total + x
            late = 1
            return total
        """
    )
    read = _name_at(file, "total", 5)
    kinds = [(b.kind, b.position[0]) for b in file.model.bindings_of("total", before=read)]
    assert kinds == [("assign", 3), ("assign", 6)]  # the loop's own assignment reaches round two
    after = _name_at(file, "total", 8)
    assert len(file.model.bindings_of("total", before=after)) == 2
    assert file.model.bindings_of("late", before=read) == []


def test_closures_resolve_to_the_enclosing_function_not_class_bodies():
    file = parse(
        """
        device = "cpu"
        class C:
            device = "meta"
            def m(self):
                def inner():
                    return device
                return inner
        """
    )
    read = _name_at(file, "device", 7)
    (binding,) = file.model.bindings_of("device", before=read)
    assert isinstance(binding.value, ast.Constant) and binding.value.value == "cpu"


def test_parameters_carry_their_defaults_and_targets_bind_only_stored_names():
    file = parse(
        """
        def f(a, device="cpu", *, k=3):
            self.x = 1
            a[0] = 2
            b, c = g()
            return a
        """
    )
    function = file.tree.body[0]
    table = file.model.table(function)
    assert table["device"][0].value.value == "cpu"
    assert table["a"][0].value is None and len(table["a"]) == 1  # `a[0] = ...` binds nothing
    assert "self" not in table
    assert [b.value for b in table["b"]] == [None]  # tuple unpacking: value unknown


def test_unpacked_value_pairs_names_with_literal_tuple_elements_only():
    file = parse(
        """
        def launch(x):
            BLOCK_M, (BLOCK_N, k) = 64, (128, x)
            M, N = x.shape
            a, *rest = 1, 2, 3
            b = c = 32
        """
    )
    fn = next(file.nodes(ast.FunctionDef))

    def values(name: str) -> list[str | None]:
        return [
            None if (v := unpacked_value(b)) is None else ast.unparse(v)
            for b in file.model.bindings_in(fn, name)
        ]

    assert values("BLOCK_M") == ["64"]
    assert values("BLOCK_N") == ["128"]
    assert values("k") == ["x"]
    assert values("M") == [None]  # not a literal tuple: unknown
    assert values("a") == [None]  # a starred target: unknown
    assert values("b") == values("c") == ["32"]


def test_attribute_stores_lists_assignments_to_an_attribute_in_source_order():
    file = parse(
        """
        import time
        class Timer:
            def start(self):
                self.t0 = time.time()
            def reset(self):
                self.t0: float = 0.0
                self.t0 += 1
                other.t0, self.n = None, 3
                self.log[0] = 1
        """
    )
    model = file.model
    stores = model.attribute_stores("t0")
    assert [(ast.unparse(s.target), s.value and ast.unparse(s.value)) for s in stores] == [
        ("self.t0", "time.time()"),
        ("self.t0", "0.0"),
        ("other.t0", "None"),
    ]  # `+=` is not an assignment of a value
    assert [getattr(model.scope_of(s.node), "name", None) for s in stores] == [
        "start",
        "reset",
        "reset",
    ]
    assert [ast.unparse(s.value) for s in model.attribute_stores("n") if s.value] == ["3"]
    assert model.attribute_stores("log") == []  # `self.log[0] = ...` stores into, not to, it


def test_calls_to_resolves_aliases_once():
    file = parse(
        """
        import torch as T
        from torch.cuda import synchronize as sync
        T.cuda.synchronize()
        sync()
        other()
        """
    )
    calls = file.model.calls_to("torch.cuda.synchronize")
    assert [c.lineno for c in calls] == [4, 5]


def test_memo_is_typed_and_computed_once():
    file = parse("x = 1\n")
    key: MemoKey[list[int]] = MemoKey("test")
    built = []
    first = file.memo.get(key, lambda: built.append(1) or [1])
    second = file.memo.get(key, lambda: built.append(2) or [2])
    assert first is second and built == [1]
    # The file's own side tables keyed by node (declared in __init__) are allowed; nothing else
    # private is stashed on it: derived facts go through the typed memo.
    tables = {"_parents", "_qualnames"}
    assert not any(k.startswith("_") and k not in tables for k in vars(file) if k != "model")


def test_summaries_reach_a_fixed_point_through_recursion_and_closures():
    file = parse(
        """
        def a(t):
            return b(t)
        def b(t):
            if t:
                a(t)
            return t.item()
        def loop(model, opt, loader):
            def step(x):
                model(x).backward()
                opt.step()
            for x in loader:
                step(x)
        """
    )
    table = summaries(file)
    a, b, loop = (n for n in file.tree.body)
    assert table.of(b).sync is not None and table.of(b).sync.line == 7
    assert table.of(a).sync is not None and table.of(a).sync.via == "b()"
    step = loop.body[0]
    assert table.of(step).steps
    assert not table.of(loop).steps  # its step runs in its own loop: a training loop, not a step


def test_device_from_configuration_makes_gpu_code_and_cpu_defaults_do_not():
    assert parse("def f(m, args):\n    m.to(args.device)\n").uses_cuda
    assert parse("import torch\nd = torch.device(device_type)\n").uses_cuda
    assert parse("from accelerate import Accelerator\nacc = Accelerator()\n").uses_cuda
    assert not parse("def f(m, device='cpu'):\n    m.to(device)\n").uses_cuda
    assert not parse("device = 'cpu'\nx = y.to(device)\nz = w.to(device=device)\n").uses_cuda
    assert not parse("x = 1\n").uses_cuda


def test_accelerators_handed_in_config_mappings_and_trainer_frameworks_make_gpu_code():
    # an accelerator object the file is handed, not builds
    assert parse(
        "from accelerate import Accelerator\n"
        "def train(model, accelerator: Accelerator):\n    accelerator.backward(model())\n"
    ).uses_cuda
    assert parse(
        "from deepspeed.accelerator import get_accelerator\nname = get_accelerator().device_name()\n"
    ).uses_cuda
    assert parse("def f(m, cfg):\n    m.to(cfg['device'])\n").uses_cuda
    assert parse("def f(m, cfg):\n    m.to(cfg.get('device'))\n").uses_cuda
    lightning = "import pytorch_lightning as pl\nclass M(pl.LightningModule):\n    pass\n"
    assert parse(lightning).uses_cuda
    hf = "from transformers import Trainer, TrainingArguments\nt = Trainer(m, TrainingArguments('o'))\n"
    assert parse(hf).uses_cuda
    # the CPU chosen for the framework: CPU code; and a class named Trainer of one's own is not one
    assert not parse(lightning + "trainer = pl.Trainer(accelerator='cpu')\n").uses_cuda
    assert not parse(hf.replace("('o')", "('o', use_cpu=True)")).uses_cuda
    assert not parse("class Trainer:\n    pass\ntrainer = Trainer()\n").uses_cuda
    assert not parse("def f(m, cfg):\n    m.to(cfg['dtype'])\n").uses_cuda


def test_reaching_drops_bindings_a_later_assignment_always_overwrites():
    file = parse(
        """
        def f(z, flag):
            z = normalize(z)
            sim = z @ z.T
            if flag:
                sim = sim * 2
            out = sim
            return out
        """
    )
    z_read = _name_at(file, "z", 4)
    assert [b.kind for b in file.model.reaching("z", z_read)] == ["assign"]
    assert len(file.model.bindings_of("z", z_read)) == 2  # the parameter may reach, textually
    # The read inside `z = normalize(z)` still sees the parameter.
    assert [b.kind for b in file.model.reaching("z", _name_at(file, "z", 3))] == ["param"]
    # An assignment under an `if` does not dominate the read after it: both reach.
    assert len(file.model.reaching("sim", _name_at(file, "sim", 7))) == 2


def test_option_defaults_decide_which_branches_the_default_run_takes():
    from gpulint.frontends.python.options import default_truth, off_by_default

    file = parse(
        """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--caption_dropout", type=float, default=0.0)
        parser.add_argument("--use-ema", action="store_true")
        parser.add_argument("--resume", default=None)
        parser.add_argument("--lr", type=float, default=computed())
        args = parser.parse_args()
        for x in loader:
            if args.caption_dropout > 0:
                a = 1
            if not args.use_ema:
                b = 1
            else:
                c = 1
            if args.resume is not None or args.lr > 0:
                d = 1
        """
    )
    tests = [n.test for n in file.nodes(ast.If)]
    assert [default_truth(file, t) for t in tests] == [False, True, None]
    loop = next(iter(file.nodes(ast.For)))
    names = {n.id: n for n in file.nodes(ast.Name) if isinstance(n.ctx, ast.Store)}
    assert off_by_default(file, names["a"], loop)
    assert not off_by_default(file, names["b"], loop)
    assert off_by_default(file, names["c"], loop)
    assert not off_by_default(file, names["d"], loop)  # `args.lr` is computed: unknown


def test_an_option_the_scripts_folder_documents_passing_is_not_taken_at_its_default(
    tmp_path, monkeypatch
):
    from gpulint.frontends.python.options import default_truth

    monkeypatch.chdir(tmp_path)
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "README.md").write_text("accelerate launch train.py \\\n  --use-lpl\n")
    text = """
        import argparse
        parser = argparse.ArgumentParser()
        parser.add_argument("--use_lpl", action="store_true")
        parser.add_argument("--use_ema", action="store_true")
        args = parser.parse_args()
        if args.use_lpl:
            pass
        if args.use_ema:
            pass
        """
    file = parse(text, "proj/train.py")
    lpl, ema = (n.test for n in file.nodes(ast.If))
    assert default_truth(file, lpl) is None  # the README runs it with --use-lpl
    assert default_truth(file, ema) is False
    from gpulint import claims

    assert "proj/README.md" in claims.EVIDENCE_READS  # a changed README drops cached results


def _item_at(file: PythonFile, line: int) -> ast.Call:
    return next(
        n
        for n in file.nodes(ast.Call)
        if n.lineno == line and isinstance(n.func, ast.Attribute) and n.func.attr == "item"
    )


def test_already_synced_holds_where_the_first_readback_runs_on_every_path_before():
    from gpulint.frontends.python.syncs import already_synced

    file = parse(
        """
        for x, y in loader:
            loss = model(x)
            a = loss.item()
            b = acc.item() if flag else 0
            if flag:
                c = loss.item()
                d = loss.item()
            try:
                e = loss.item()
            except ValueError:
                f = loss.item()
            g = (flag and loss.item())
            h = loss.item()
            loss2 = model(y)
            i = loss2.item()
        """
    )
    loop = next(iter(file.nodes(ast.For)))

    def paid(first: int, then: int) -> bool:
        return already_synced(file, _item_at(file, first), _item_at(file, then), loop)

    assert paid(4, 5) and paid(4, 7) and paid(4, 14)  # after the first, on every path
    assert not paid(5, 14)  # one side of a conditional expression
    assert not paid(7, 14) and paid(7, 8)  # an `if` body pays only for its own block
    assert paid(10, 14) and not paid(12, 14)  # a try body runs; a handler may not
    assert not paid(13, 14)  # the right of `and` may not run
    assert not paid(14, 4)  # later in the text is later in the iteration
    assert not paid(14, 16)  # a forward between them: the queue fills again


def _spread(file: PythonFile, line: int) -> ast.expr:
    call = next(c for c in file.nodes(ast.Call) if c.lineno == line)
    return next(k.value for k in call.keywords if k.arg is None)


def test_dict_keys_reads_literals_through_names_and_branches():
    file = parse(
        """
        BASE = {"preserve_rng_state": True}
        def f(x, c, param):
            a = {"debug": False, **BASE}
            g(**a)
            b = dict(determinism_check="none") if c else {}
            g(**b)
            g(**{"use_reentrant": False})
            g(**param)
            d = {}
            d["use_reentrant"] = False
            g(**d)
            e = {"k": 1}
            e.update(param)
            g(**e)
            h = {"k": 1}
            fill(h)
            g(**h)
            i = {"k": 1}
            if c:
                i = {"use_reentrant": True}
            g(**i)
            k = {param: 1}
            g(**k)
            m = {"k": 1}
            if m.get("k") and "k" in m:
                g(**m)
        """
    )
    model = file.model
    assert model.dict_keys(_spread(file, 5)) == {"debug", "preserve_rng_state"}
    assert model.dict_keys(_spread(file, 7)) == {"determinism_check"}
    assert model.dict_keys(_spread(file, 8)) == {"use_reentrant"}
    assert model.dict_keys(_spread(file, 9)) is None  # a parameter
    assert model.dict_keys(_spread(file, 12)) is None  # filled by subscript
    assert model.dict_keys(_spread(file, 15)) is None  # updated
    assert model.dict_keys(_spread(file, 18)) is None  # handed to a call that may fill it
    assert model.dict_keys(_spread(file, 22)) == {"k", "use_reentrant"}  # either binding
    assert model.dict_keys(_spread(file, 24)) is None  # a computed key
    assert model.dict_keys(_spread(file, 27)) == {"k"}  # only read


def test_dict_keys_of_a_shadowed_dict_builtin_is_unknown():
    file = parse(
        """
        from mylib import dict
        a = dict(k=1)
        g(**a)
        """
    )
    assert file.model.dict_keys(_spread(file, 4)) is None
