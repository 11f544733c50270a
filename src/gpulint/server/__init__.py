"""`gpulint server`: a language server for editors (VS Code, Neovim, Helix, ...).

Diagnostics for every file type gpulint lints (Python and Triton, CUDA/C++, Markdown, and any
front-end added later) as you type and on save, honouring `[tool.gpulint]` and reloading it when
it changes; quick fixes that apply a rule's autofix or add a `noqa` comment; the rule's
documentation on hover. Setup per editor: docs/editors.md.

This module only registers the subcommand; the server itself (gpulint.server.lsp) needs pygls,
an optional dependency (`pip install "gpulint[lsp]"`), imported when the command runs.
"""

from __future__ import annotations

import sys

EXIT_USAGE = 2
INSTALL_HINT = (
    'gpulint server needs pygls 2: pip install "gpulint[lsp]" (or pip install "pygls>=2")'
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "server",
        help="run the language server (LSP) for editors",
        description="Serve gpulint diagnostics, quick fixes and rule docs over the Language "
        "Server Protocol. Editors start it as `gpulint server` and talk on stdin/stdout.",
    )
    p.add_argument("--stdio", action="store_true", help="talk on stdin/stdout (the default)")
    p.add_argument("--tcp", action="store_true", help="listen on a TCP port instead")
    p.add_argument("--host", default="127.0.0.1", help="with --tcp (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=2087, help="with --tcp (default 2087)")
    p.add_argument(
        "--debounce",
        type=int,
        default=150,
        metavar="MS",
        help="lint this long after the last keystroke (default 150 ms; 0: at once)",
    )
    p.add_argument("--log-file", help="write the server's log here (stdout is the protocol)")
    p.set_defaults(func=cmd_server)


def cmd_server(args) -> int:
    try:
        import lsprotocol.types  # noqa: F401
        import pygls.lsp.server  # noqa: F401  (pygls 2.x; 1.x has no pygls.lsp.server)
    except ImportError as e:
        print(f"gpulint: {INSTALL_HINT} ({e})", file=sys.stderr)
        return EXIT_USAGE
    from gpulint.server.lsp import serve

    if args.log_file:
        import logging

        logging.basicConfig(filename=args.log_file, level=logging.INFO)
    return serve(args)
