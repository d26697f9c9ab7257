"""Command line: ``python -m qsdpa info`` (more subcommands, e.g. ``bench``, plug in beside it)."""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from . import _dispatch, _show


def _cmd_info(args: argparse.Namespace) -> int:
    _show.show_runtime()
    try:
        _dispatch.selection()
    except (ValueError, RuntimeError) as exc:  # invalid or unrunnable QSDPA_ISA, or nothing runnable
        message = " ".join(str(exc).split())  # one line, whatever the message holds
        print(f"qsdpa: error: {message}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m qsdpa", description="qsdpa command line tools")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    info = sub.add_parser("info", help="show CPU features, built/supported variants and the selected one",
                          description="Print the runtime report (same as qsdpa.show_runtime()). Exits 2 "
                                      "when QSDPA_ISA is invalid or names a variant this machine cannot run.")
    info.set_defaults(func=_cmd_info)
    bench = sub.add_parser("bench", help="time qsdpa against PyTorch / ExecuTorch / numpy in one run",
                           add_help=False)
    bench.set_defaults(func=None)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:  # bench has its own parser (and options)
        from . import _bench

        return _bench.main(argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
