"""What the Python front-end says about data-parallel wrappers (wrappers.py) and about train/eval
mode (modes.py): which names hold a DDP model, whether the file turns the gradient all-reduce
off itself, whether a model is put in eval mode before a loop, and whether its mode matters."""

from __future__ import annotations

import ast
import textwrap

import pytest

from gpulint.frontends.python.file import PythonFile
from gpulint.frontends.python.modes import (
    eval_before,
    evaluation_loop,
    mode_dependent,
    says_evaluation,
)
from gpulint.frontends.python.wrappers import (
    DDP,
    DEEPSPEED,
    FSDP,
    single_process,
    skips_grad_sync,
    wrapped_kinds,
    wraps,
)

HEAD = (
    "import torch\nimport torch.nn as nn\nimport torchvision\nimport deepspeed\n"
    "from torch.nn.parallel import DistributedDataParallel as DDP\n"
    "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP\n"
)


def _file(src: str) -> PythonFile:
    text = HEAD + textwrap.dedent(src)
    return PythonFile("x.py", text, ast.parse(text))


def _name(file: PythonFile, text: str) -> ast.expr:
    """The last expression of the file written as `text` (a model as the loop reads it)."""
    found = [
        n
        for n in ast.walk(file.tree)
        if isinstance(n, (ast.Name, ast.Attribute)) and file.segment(n) == text
    ]
    return max(found, key=lambda n: (n.lineno, n.col_offset))


def _loop(file: PythonFile) -> ast.For:
    return max((n for n in ast.walk(file.tree) if isinstance(n, ast.For)), key=lambda n: n.lineno)


@pytest.mark.parametrize(
    ("src", "expr", "kinds"),
    [
        ("model = DDP(model.cuda(), device_ids=[r])\nmodel(x)\n", "model", {DDP}),
        ("self.net = DDP(net).cuda()\nself.net(x)\n", "self.net", {DDP}),
        ("model = FSDP(model)\nmodel(x)\n", "model", {FSDP}),
        ("engine, opt, _, _ = deepspeed.initialize(model=m)\nengine(x)\n", "engine", {DEEPSPEED}),
        # a helper returning the wrap hands the kind to the targets of its calls
        ("def wrap(m):\n    return DDP(m)\nnet = wrap(net)\nnet(x)\n", "net", {DDP}),
        # `.module` is the module inside, not the wrapper
        ("model = DDP(model)\nmodel.module(x)\n", "model.module", set()),
        ("model = Net()\nmodel(x)\n", "model", set()),
    ],
)
def test_wrapped_kinds(src, expr, kinds):
    file = _file(src)
    assert wrapped_kinds(file, _name(file, expr)) == kinds


def test_wraps_record_the_call_and_targets():
    file = _file("model = DDP(model.cuda(), device_ids=[r])\n")
    (wrap,) = wraps(file)
    assert wrap.kind == DDP and wrap.names == ("model",)


@pytest.mark.parametrize(
    ("src", "skips"),
    [
        ("with model.no_sync():\n    loss.backward()\n", True),
        ("ctx = model.no_sync if not last else contextlib.nullcontext\n", True),
        ("model.require_backward_grad_sync = last\n", True),
        ('setattr(model, "require_backward_grad_sync", last)\n', True),
        ("with accelerator.accumulate(model):\n    pass\n", True),
        ("with misc.ddp_sync(ddp, last):\n    loss.backward()\n", True),
        ("with torch.autocast('cuda'):\n    loss.backward()\n", False),
        ("model.accumulate = 4\n", False),
    ],
)
def test_skips_grad_sync(src, skips):
    assert skips_grad_sync(_file(src)) is skips


@pytest.mark.parametrize(
    ("src", "single"),
    [
        ('torch.distributed.init_process_group("nccl", rank=0, world_size=1)\n', True),
        ('ws = 1\ntorch.distributed.init_process_group("nccl", rank=0, world_size=ws)\n', True),
        ('torch.distributed.init_process_group("nccl", world_size=args.world_size)\n', False),
        ('torch.distributed.init_process_group("nccl")\n', False),
        ("x = 1\n", False),
    ],
)
def test_single_process(src, single):
    assert single_process(_file(src)) is single


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("val_loader", True),
        ("evalLoader", True),
        ("testloader", True),
        ('dataloaders["val"]', True),
        ("run_validation", True),
        ("interval", False),
        ("latest_loader", False),
        ("device", False),
        ("train_loader", False),
    ],
)
def test_says_evaluation(name, says):
    assert says_evaluation(name) is says


def test_evaluation_loop_by_loader_or_function_name():
    file = _file("def evaluate(model, loader):\n    for x in loader:\n        model(x)\n")
    assert evaluation_loop(file, _loop(file))
    file = _file("for x in train_loader:\n    model(x)\n")
    assert not evaluation_loop(file, _loop(file))


EVAL_LOOP = "with torch.no_grad():\n    for x, y in val_loader:\n        model(x)\n"


@pytest.mark.parametrize(
    ("src", "answer"),
    [
        ("model = torchvision.models.resnet18().cuda()\n" + EVAL_LOOP, False),
        ("model = torchvision.models.resnet18().cuda()\nmodel.eval()\n" + EVAL_LOOP, True),
        ("model = torchvision.models.resnet18().cuda()\nmodel.train(False)\n" + EVAL_LOOP, True),
        ("model = torchvision.models.resnet18().cuda().eval()\n" + EVAL_LOOP, True),
        ("model = torchvision.models.resnet18()\nmodel.module.eval()\n" + EVAL_LOOP, True),
        ("model = AutoModel.from_pretrained(p).cuda()\n" + EVAL_LOOP, True),
        ("model = torch.load(path)\n" + EVAL_LOOP, None),  # saved with its mode
        ("model = Net()\nmodel.apply(set_bn_eval)\n" + EVAL_LOOP, None),
        ("model = Net()\nprepare(model)\n" + EVAL_LOOP, None),  # a call whose body is elsewhere
        ("model = Net()\nprint(model)\n" + EVAL_LOOP, False),
        # a helper of this file that switches it
        (
            "def freeze(m):\n    m.eval()\nmodel = Net()\nfreeze(model)\n" + EVAL_LOOP,
            True,
        ),
    ],
)
def test_eval_before_in_one_scope(src, answer):
    file = _file(src)
    assert eval_before(file, _name(file, "model"), _loop(file)) is answer


HELPER = (
    "@torch.no_grad()\ndef evaluate(model, val_loader):\n    for x, y in val_loader:\n"
    "        model(x)\n"
)


@pytest.mark.parametrize(
    ("caller", "answer"),
    [
        ("", None),  # nothing here calls it
        ("net = Net().cuda()\nevaluate(net, loader)\n", False),
        ("net = Net().cuda()\nnet.eval()\nevaluate(net, loader)\n", True),
        ("net = Net().cuda()\nevaluate(model=net, val_loader=loader)\n", False),
        ("def main(net):\n    evaluate(net, loader)\n", None),  # and nothing calls main
        (
            "def main():\n    net = Net().cuda()\n    for epoch in range(3):\n"
            "        net.train()\n        evaluate(net, loader)\n",
            False,
        ),
    ],
)
def test_eval_before_through_callers(caller, answer):
    file = _file(HELPER + caller)
    loop = next(n for n in ast.walk(file.tree) if isinstance(n, ast.For) and n.lineno < 12)
    model = loop.body[0].value.func  # type: ignore[attr-defined]
    assert eval_before(file, model, loop) is answer


def test_eval_before_on_self_attributes():
    cls = (
        "class Trainer:\n    def __init__(self):\n        self.model = Net().cuda()\n"
        "    def validate(self):\n        with torch.no_grad():\n"
        "            for x in self.val_loader:\n                self.model(x)\n"
    )
    file = _file(cls)
    assert eval_before(file, _name(file, "self.model"), _loop(file)) is False
    file = _file(cls + "    def on_epoch_end(self):\n        self.model.eval()\n")
    assert eval_before(file, _name(file, "self.model"), _loop(file)) is None
    file = _file(cls.replace("with torch", "self.eval()\n        with torch"))
    assert eval_before(file, _name(file, "self.model"), _loop(file)) is True


@pytest.mark.parametrize(
    ("build", "answer"),
    [
        ("model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))\n", False),
        ("model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))\n", True),
        ("model = nn.Linear(4, 2).cuda()\n", False),
        ("model = torchvision.models.resnet18()\n", None),
        (
            "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.fc = nn.Linear(4, 2)\n    def forward(self, x):\n"
            "        return torch.relu(self.fc(x))\nmodel = Net().cuda()\n",
            False,
        ),
        (
            "class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.bn = nn.BatchNorm1d(4)\nmodel = Net()\n",
            True,
        ),
        (
            "class Net(nn.Module):\n    def forward(self, x):\n"
            "        return x if not self.training else x * 2\nmodel = Net()\n",
            True,
        ),
        ("model = nn.LSTM(4, 4, dropout=0.2)\n", True),
        ("class Net(Base):\n    pass\nmodel = Net()\n", None),  # layers defined elsewhere
    ],
)
def test_mode_dependent(build, answer):
    file = _file(build + EVAL_LOOP)
    assert mode_dependent(file, _name(file, "model"), _loop(file)) is answer


def test_a_name_bound_here_to_another_model_is_not_the_wrapped_one():
    file = _file(
        "def main(model):\n    model = DDP(model)\n"
        "def probe(loader):\n    model = LinearProbe().cuda()\n    model(x)\n"
        "def train(model, loader):\n    model(y)\n"
    )
    assert wrapped_kinds(file, _name(file, "model")) == {DDP}  # a parameter: by its name
    probe_call = next(
        n for n in ast.walk(file.tree) if isinstance(n, ast.Call) and file.segment(n) == "model(x)"
    )
    assert wrapped_kinds(file, probe_call.func) == set()


def test_skips_grad_sync_through_a_context_name():
    file = _file("ctx = sync_context(model, last)\nwith ctx:\n    loss.backward()\n")
    assert skips_grad_sync(file)


def test_eval_before_a_call_inside_the_loop_and_under_a_base_class():
    file = _file(
        "model = torchvision.models.resnet18()\nwith torch.no_grad():\n"
        "    for x in val_loader:\n        model.eval()\n        model(x)\n"
    )
    call = next(
        n for n in ast.walk(file.tree) if isinstance(n, ast.Call) and file.segment(n) == "model(x)"
    )
    assert eval_before(file, call.func, call) is True
    file = _file(
        "class Trainer(BaseTrainer):\n    def validate(self):\n        with torch.no_grad():\n"
        "            for x in self.val_loader:\n                self.model(x)\n"
    )
    assert eval_before(file, _name(file, "self.model"), _loop(file)) is None


def test_train_before_the_loop_sets_training_mode_however_built():
    prepared = (
        "model = AutoModel.from_pretrained(p)\nmodel, opt = accelerator.prepare(model, opt)\n"
    )
    file = _file(prepared + EVAL_LOOP)
    assert eval_before(file, _name(file, "model"), _loop(file)) is None  # prepare: not seen
    file = _file(prepared + "model.train()\n" + EVAL_LOOP)
    assert eval_before(file, _name(file, "model"), _loop(file)) is False
    # unpacked from a helper of this file that passes it on: followed to the argument
    helper = "def setup(m, o):\n    return m, o\n"
    file = _file(helper + "model = Net().eval()\nmodel, opt = setup(model, opt)\n" + EVAL_LOOP)
    assert eval_before(file, _name(file, "model"), _loop(file)) is True
    file = _file(helper + "model = Net()\nmodel, opt = setup(model, opt)\n" + EVAL_LOOP)
    assert eval_before(file, _name(file, "model"), _loop(file)) is False
