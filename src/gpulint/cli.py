"""The `gpulint` command: check, rules, rule, and the runtime's probe/bench/roofline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpulint.config import ConfigError
from gpulint.hardware import UnknownTargetError
from gpulint.reporters import REPORTERS
from gpulint.safeio import escape
from gpulint.status import EXIT_OK, EXIT_USAGE, UsageError


def _codes_arg(value: str) -> list[str]:
    return [c.strip().upper() for c in value.split(",") if c.strip()]


class _Version(argparse.Action):
    """`--version`: the installed version, looked up only when asked (gpulint.version)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from gpulint import version

        sys.stdout.write(f"gpulint {version()}\n")
        parser.exit()


def build_parser(core_only: bool = False) -> argparse.ArgumentParser:
    """The command line. `core_only`: only check, rules and rule (what `gpulint check`, run
    once per pre-commit hook or editor save, needs to parse its own arguments), without
    importing the runtime's and the language server's commands."""
    parser = argparse.ArgumentParser(
        prog="gpulint",
        description="Find GPU and deep-learning performance anti-patterns in PyTorch, Triton and CUDA code.",
    )
    parser.add_argument("--version", action=_Version, help="print gpulint's version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="lint files and folders (default: .)")
    check.add_argument(
        "paths", nargs="*", type=Path, default=None, help="files or folders; - for stdin"
    )
    formats = sorted(["text", *REPORTERS])
    check.add_argument(
        "--output-format",
        "--format",
        dest="format",
        choices=formats,
        default="concise",
        help="concise (default; `text` is an alias): path:line:col: CODE message, as flake8; "
        "full: with the source line and a caret; grouped: by file; json, sarif, github, "
        "gitlab (Code Quality), junit; as ruff: json-lines, rdjson (reviewdog), pylint",
    )
    check.add_argument("--output-file", "-o", type=Path, help="write the report here")
    check.add_argument(
        "--stdin-filename",
        type=Path,
        help="the name of the file standard input holds (language, configuration, ignores)",
    )
    check.add_argument("--select", type=_codes_arg, help="comma-separated codes or prefixes")
    check.add_argument("--ignore", type=_codes_arg, help="comma-separated codes or prefixes")
    check.add_argument(
        "--extend-select",
        type=_codes_arg,
        help="codes or prefixes to add to the selection; `pedantic` adds that tier's rules",
    )
    preview = check.add_mutually_exclusive_group()
    preview.add_argument(
        "--preview",
        action="store_true",
        default=None,
        help="run preview-tier rules too, wherever the selection covers them (as ruff's preview)",
    )
    preview.add_argument("--no-preview", dest="preview", action="store_false")
    check.add_argument(
        "--targets",
        type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
        help="hardware targets, e.g. sm_90,H100,GB10",
    )
    check.add_argument(
        "--config",
        action="append",
        metavar="FILE | KEY=VALUE",
        help="pyproject.toml to read [tool.gpulint] from, for every file (default: the "
        "nearest one above each file); or, as ruff, a setting as TOML that overrides the "
        "files' (`--config 'ignore = [\"GPU201\"]'`, `--config 'targets = [\"H100\"]'`); "
        "repeatable",
    )
    check.add_argument(
        "--show-files",
        action="store_true",
        help="list the files that would be checked, with these settings, and those left alone "
        "as vendored copies (with why), and exit",
    )
    check.add_argument(
        "--show-settings",
        action="store_true",
        help="print the settings the first file would be checked with, and exit",
    )
    check.add_argument(
        "--isolated",
        action="store_true",
        help="read no configuration file (the defaults, the command line and --config KEY=VALUE)",
    )
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    check.add_argument(
        "--exit-non-zero-on-fix",
        action="store_true",
        help="exit 1 when fixes were applied, even if nothing is left",
    )
    check.add_argument("--fix", action="store_true", help="apply safe fixes")
    # ruff's pair. Every gpulint fix is safe (applied only if the file still parses and,
    # re-linted, no longer reports what it fixed, with every token outside the edit kept), so
    # there are no unsafe fixes to opt into: accepted, so that a ruff command line works.
    check.add_argument(
        "--unsafe-fixes",
        action="store_true",
        help="as ruff's; gpulint has no unsafe fixes (each fix is verified), so nothing more is fixed",
    )
    check.add_argument("--no-unsafe-fixes", action="store_true", help=argparse.SUPPRESS)
    check.add_argument(
        "--diff", action="store_true", help="print the fixes as a diff; write nothing"
    )
    check.add_argument(
        "--show-fixes", action="store_true", help="list what --fix fixed, per file and code"
    )
    check.add_argument(
        "--add-noqa",
        action="store_true",
        help="write `noqa` comments for every current finding (keeps existing codes)",
    )
    check.add_argument(
        "--statistics", action="store_true", help="count findings per code instead of listing"
    )
    check.add_argument(
        "--watch", "-w", action="store_true", help="check again whenever a file changes"
    )
    check.add_argument(
        "--quiet", "-q", action="store_true", help="print findings, nothing else (no summary)"
    )
    check.add_argument(
        "--color",
        choices=["auto", "always", "never"],
        default="auto",
        help="colour the text output (auto: on a terminal, unless NO_COLOR is set)",
    )
    check.add_argument(
        "--jobs", "-j", type=int, default=None, help="worker processes (default: cores)"
    )
    check.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    check.add_argument("--cache-dir", type=Path, help="where the cache lives (.gpulint_cache)")
    check.add_argument(
        "--evidence",
        type=Path,
        action="append",
        default=[],
        help="bench records (file or folder) to cite in messages",
    )
    check.add_argument(
        "--trace",
        type=Path,
        action="append",
        default=[],
        help="a `gpulint trace` record or recording folder: mark each finding it judged "
        "confirmed / not observed (text, JSON, SARIF properties)",
    )
    check.add_argument(
        "--fail-on",
        choices=["findings", "confirmed"],
        default="findings",
        help="exit 1 on any finding (default), or only on findings a trace confirmed",
    )
    check.add_argument("--no-gitignore", action="store_true", help="do not honour .gitignore")
    check.add_argument(
        "--no-skip-vendored",
        dest="skip_vendored",
        action="store_false",
        default=None,
        help="check copies of other projects too (files with a foreign licence header, copied "
        "packages, submodules), which are left alone by default",
    )
    check.add_argument(
        "--force-exclude",
        action="store_true",
        help="apply exclude to files named on the command line too (for pre-commit)",
    )
    check.add_argument("--no-prefilter", action="store_true", help=argparse.SUPPRESS)
    check.set_defaults(func=cmd_check)

    rules = sub.add_parser("rules", help="list the rule catalog")
    rules.add_argument("--format", choices=["text", "json"], default="text")
    rules.set_defaults(func=cmd_rules)

    rule = sub.add_parser("rule", help="print one rule's documentation")
    rule.add_argument("code")
    rule.set_defaults(func=cmd_rule)

    if core_only:
        return parser
    try:
        from gpulint.runtime.cli import register
    except ImportError:
        pass
    else:
        register(sub)
    try:
        from gpulint.server import register as register_server
    except ImportError:
        pass
    else:
        register_server(sub)
    return parser


def cmd_check(args) -> int:
    from gpulint.checkcmd import cmd_check as run_check

    return run_check(args)


def cmd_rules(args) -> int:
    from gpulint.rule import all_rules

    rules = all_rules()
    if args.format == "json":
        import json

        print(
            json.dumps(
                [
                    {
                        "code": r.code,
                        "name": r.name,
                        "severity": r.severity.value,
                        "language": ",".join(r.languages()),
                        "fixable": r.fixable,
                        "tier": r.tier,
                        "bench": r.bench,
                        "summary": r.summary(),
                    }
                    for r in rules
                ],
                indent=2,
            )
        )
        return EXIT_OK
    from gpulint.ruledocs import short_summary

    # One line per rule: the short summary; `gpulint rule CODE` has the whole text.
    width = max((len(r.name) for r in rules), default=10)
    for r in rules:
        flags = "fix" if r.fixable else "   "
        print(
            f"{r.code}  {r.name:<{width}}  {r.severity.value:<7}  {','.join(r.languages()):<8} "
            f"{r.tier:<8}  {flags}  {short_summary(r)}"
        )
    print(
        "\nTiers: default rules run unless ignored; pedantic ones when selected by code, family "
        "prefix\nor `pedantic`; preview ones when selected by code, or by any pattern with "
        "--preview.\n`gpulint rule CODE` prints a rule's whole documentation."
    )
    return EXIT_OK


def cmd_rule(args) -> int:
    from gpulint.rule import rule_by_code
    from gpulint.ruledocs import rule_markdown

    rule = rule_by_code(args.code)
    if rule is None:
        print(f"gpulint: unknown rule {args.code!r}; see `gpulint rules`", file=sys.stderr)
        return EXIT_USAGE
    print(rule_markdown(rule))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # `check`'s arguments parse the same with or without the other commands registered
    parser = build_parser(core_only=argv[:1] == ["check"])
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return args.func(args)
    except (ConfigError, UnknownTargetError) as e:
        print(f"gpulint: configuration error: {escape(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except UsageError as e:
        print(f"gpulint: {escape(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as e:  # noqa: BLE001 - a traceback must never reach a user (exit 1 = findings)
        print(
            f"gpulint: internal error: {type(e).__name__}: {escape(str(e))} "
            "(please report it with the command that caused it)",
            file=sys.stderr,
        )
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
