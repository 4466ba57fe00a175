"""The `hermes-store` command: argument parsing and output only; the work happens in
hermes_store.migrate, hermes_store.migration.copy and the repositories.

One module per command group (`schema`: upgrade, current and check; `revisions`:
history and downgrade; `search`; `sessions`; `stats`; `redact`; `copy`; `fts`), each adding its
parsers with `add_parsers`. Only
the standard library and hermes_store.errors are imported at module level anywhere in
this package, so `--help` and a bad command line answer without importing SQLAlchemy,
Alembic or the models; each command imports what it uses when it runs.

Imports allowed (tests/project/test_packages.py checks them):

    errors, config, contract, migrate, store, redaction, runtime, sqlite, migration,
    search, repositories
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from ..errors import StoreError
from . import copy, encryption, fts, redact, revisions, schema, search, sessions, stats
from ._output import TIME_FIELDS, _printable

__all__ = ["TIME_FIELDS", "build_parser", "main"]

#: The command groups, in the order `--help` lists them.
_GROUPS = (schema, revisions, search, sessions, stats, redact, copy, fts, encryption)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, reporting a bad command line as every other error is reported:
    one escaped line (it quotes what was typed) and exit status 2, with where to find the
    usage. Subcommand parsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        _error(f"{message} (see `{self.prog} --help`)")
        sys.exit(2)


class _Version(argparse.Action):
    """`--version`: the package's version and the schema it reads and writes."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_args: Any) -> NoReturn:
        from .. import __version__
        from ..config import SCHEMA_VERSION
        from ..migration.head import HEAD_REVISION

        # the head is what `current` and `upgrade` name; schema_version is the v23 contract
        print(
            f"hermes-store {__version__} (head revision {HEAD_REVISION}, "
            f"upstream schema_version {SCHEMA_VERSION})"
        )
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every group's subcommands under one parser."""
    parser = _Parser(
        prog="hermes-store",
        description="Hermes Agent session store: migrations, checks, sessions and usage",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True)
    for group in _GROUPS:
        group.add_parsers(sub)
    return parser


def _error(message: str) -> None:
    """The one line an error leaves on stderr; the message may quote stored text or what
    was typed, so it is escaped like them, newlines included."""
    print(f"hermes-store: error: {_printable(message, lines=False)}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line `argv` (default: sys.argv); the process's exit status."""
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help(sys.stderr)  # `hermes-store` alone: what can it do?
        return 2
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except StoreError as exc:
        _error(str(exc))
    except BrokenPipeError:
        # The reader went away (`hermes-store sessions export | head`): no message, and
        # stdout goes to /dev/null so the interpreter's final flush cannot fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        _error(str(exc))
    except Exception as exc:
        # SQLAlchemy is imported by the commands, not here: an error of its types can
        # only have been raised once it was
        errors = sys.modules.get("sqlalchemy.exc")
        if errors is None or not isinstance(exc, errors.SQLAlchemyError):
            raise
        detail = (str(getattr(exc, "orig", None) or exc).splitlines() or [""])[0]
        _error(f"database error: {detail}")
    except KeyboardInterrupt:
        print("hermes-store: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    return 2
