"""``python -m gpulint.runtime probe|bench|roofline``: the runtime commands on their own, for
machines where only this package matters (and for the CLI's tests)."""

from __future__ import annotations

import argparse
import sys

from .cli import register


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpulint", description="gpulint runtime commands")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
