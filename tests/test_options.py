"""Command-line option defaults (`gpulint.frontends.python.options`)."""

from __future__ import annotations

import ast
import textwrap

from gpulint.frontends.python import FRONTEND
from gpulint.frontends.python.options import option_default
from gpulint.settings import Settings

SCRIPT = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--num-workers", type=int, default=0)
parser.add_argument("-b", "--batch_size", type=int, default=32)
parser.add_argument("--pin", dest="pin_memory", action="store_true", default=False)
parser.add_argument("--device")
parser.add_argument("--lr", default=base_lr * 2)
parser.add_argument("--twice", default=1)
parser.add_argument("--twice", default=2)
args = parser.parse_args()
use(args.num_workers, args.batch_size, args.pin_memory, args.device, args.lr, args.twice, args.nope)
"""


def _defaults(text: str) -> list:
    file = FRONTEND.parse("train.py", textwrap.dedent(text).encode(), Settings())
    use = next(
        c
        for c in ast.walk(file.tree)
        if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "use"
    )
    return [option_default(file, arg) for arg in use.args]


def test_constant_defaults_by_destination():
    assert _defaults(SCRIPT) == [
        ("num_workers", 0),  # dashes become underscores
        ("batch_size", 32),  # the long flag names it
        ("pin_memory", False),  # dest= names it
        None,  # no default given
        None,  # a computed default
        None,  # declared twice
        None,  # not an option of this module
    ]


def test_set_defaults_makes_it_unknown():
    text = SCRIPT.replace("args = parser", "parser.set_defaults(num_workers=8)\nargs = parser")
    assert _defaults(text)[0] is None


def test_nothing_without_parsing():
    assert _defaults(SCRIPT.replace("parser.parse_args()", "None")) == [None] * 7
