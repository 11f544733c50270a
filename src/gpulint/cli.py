"""The `gpulint` command: check, rules, rule, and the runtime's probe/bench/roofline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpulint import __version__
from gpulint.config import Config, ConfigError, apply_table, load_config
from gpulint.engine import Linter, cpu_count, evidence_notes
from gpulint.hardware import UnknownTargetError
from gpulint.reporters import REPORTERS
from gpulint.rule import all_rules, rule_by_code
from gpulint.ruledocs import rule_markdown
from gpulint.safeio import Unreadable, escape

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """A command line that cannot be carried out (exit 2)."""


def _codes_arg(value: str) -> list[str]:
    return [c.strip().upper() for c in value.split(",") if c.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpulint",
        description="Find GPU and deep-learning performance anti-patterns in PyTorch, Triton and CUDA code.",
    )
    parser.add_argument("--version", action="version", version=f"gpulint {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    check = sub.add_parser("check", help="lint files and folders (default: .)")
    check.add_argument("paths", nargs="*", type=Path, default=None, help="files or folders")
    check.add_argument("--format", choices=sorted(REPORTERS), default="text")
    check.add_argument("--output-file", "-o", type=Path, help="write the report here")
    check.add_argument("--select", type=_codes_arg, help="comma-separated codes or prefixes")
    check.add_argument("--ignore", type=_codes_arg, help="comma-separated codes or prefixes")
    check.add_argument("--extend-select", type=_codes_arg)
    check.add_argument(
        "--targets",
        type=lambda s: [t.strip() for t in s.split(",") if t.strip()],
        help="hardware targets, e.g. sm_90,H100,GB10",
    )
    check.add_argument("--config", type=Path, help="pyproject.toml to read [tool.gpulint] from")
    check.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    check.add_argument("--fix", action="store_true", help="apply safe fixes")
    check.add_argument(
        "--diff", action="store_true", help="print the fixes as a diff; write nothing"
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
    check.add_argument("--no-gitignore", action="store_true", help="do not honour .gitignore")
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


def _config_for(args) -> Config:
    start = args.paths[0] if args.paths else Path.cwd()
    config = load_config(start if start.exists() else Path.cwd(), args.config)
    overrides = {}
    for flag, key in (
        ("select", "select"),
        ("ignore", "ignore"),
        ("extend_select", "extend-select"),
        ("targets", "targets"),
    ):
        value = getattr(args, flag)
        if value is not None:
            overrides[key] = value
    apply_table(config, overrides)
    if args.cache_dir:
        config.cache_dir = str(args.cache_dir)
    return config


def cmd_check(args) -> int:
    from gpulint.cache import ResultCache
    from gpulint.fixes import fix_until_stable, unified_diff

    config = _config_for(args)
    if args.paths is None or not args.paths:
        args.paths = [Path(".")]
    evidence_problems: list[tuple[str, str]] = []
    linter = Linter(config, evidence_notes(config, args.evidence, evidence_problems))
    if args.no_gitignore:
        linter.respect_gitignore = False
    linter.force_exclude = args.force_exclude
    # A repository's `jobs` is capped at the cores (`jobs = 100000` must not fork-bomb CI);
    # --jobs on the command line is the user's own choice.
    jobs = args.jobs or min(config.jobs, cpu_count()) or cpu_count()
    cache = None
    if not args.no_cache and not args.no_prefilter:
        cache_dir = Path(config.cache_dir)
        cache = ResultCache(
            cache_dir if cache_dir.is_absolute() else config.root / cache_dir, linter.fingerprint()
        )
    if args.no_prefilter:
        linter.prefilter = False
    report = linter.run(args.paths, jobs=jobs, cache=cache)
    if evidence_problems:
        from gpulint.diagnostics import unanalysable
        from gpulint.engine import FileResult, display_path

        for path, why in dict(evidence_problems).items():  # once per file
            shown = display_path(Path(path))
            report.results.append(FileResult(shown, [unanalysable(shown, why)]))
    findings = report.findings

    if args.fix or args.diff:
        diffs = []
        fixed_paths = []
        for result in report.results:
            if not any(f.fix for f in result.findings):
                continue
            path = Path(result.path)
            relpath = linter.relpath(path)

            def lint(data: bytes, shown=result.path, relpath=relpath):
                return linter.lint_bytes(shown, data, relpath, prefilter=linter.prefilter)[0]

            # --diff writes nothing, also with --fix.
            write = args.fix and not args.diff
            outcome = fix_until_stable(
                path, result.findings, result.digest, write, lint, config.root
            )
            if outcome.error:
                print(f"{result.path}: {outcome.error}", file=sys.stderr)
            elif args.diff:
                diffs.append(unified_diff(outcome, result.path))
            elif outcome.applied:
                fixed_paths.append(Path(result.path))
        if args.diff:
            sys.stdout.write("".join(diffs))
            return EXIT_FINDINGS if any(diffs) and not args.exit_zero else EXIT_OK
        if fixed_paths:
            # Re-check what was written: report what is left, and prove the fix parsed.
            refreshed = {r.path: r for r in (linter.lint_path(p) for p in fixed_paths)}
            report.results = [refreshed.get(r.path, r) for r in report.results]
            findings = report.findings
            total = len(fixed_paths)
            print(f"Fixed {total} file{'s' if total != 1 else ''}.", file=sys.stderr)

    def read_text(path: str) -> str | None:
        try:
            return linter.read(Path(path)).decode("utf-8")
        except (Unreadable, UnicodeDecodeError):
            return None

    output = REPORTERS[args.format](
        findings, files_checked=report.files_checked, root=config.root, read_text=read_text
    )
    if args.output_file:
        try:
            args.output_file.parent.mkdir(parents=True, exist_ok=True)
            # surrogateescape: a file name that is not UTF-8 is written back as its own bytes.
            args.output_file.write_text(output, encoding="utf-8", errors="surrogateescape")
        except OSError as e:
            raise UsageError(f"cannot write {args.output_file}: {e.strerror or e}") from None
    else:
        sys.stdout.write(output)
    if findings and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_OK


def cmd_rules(args) -> int:
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
        flags += " opt-in" if not r.default_enabled else "       "
        print(
            f"{r.code}  {r.name:<{width}}  {r.severity.value:<7}  {','.join(r.languages()):<8} "
            f"{flags}  {short_summary(r)}"
        )
    print("\n`gpulint rule CODE` prints a rule's whole documentation.")
    return EXIT_OK


def cmd_rule(args) -> int:
    rule = rule_by_code(args.code)
    if rule is None:
        print(f"gpulint: unknown rule {args.code!r}; see `gpulint rules`", file=sys.stderr)
        return EXIT_USAGE
    print(rule_markdown(rule))
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
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
