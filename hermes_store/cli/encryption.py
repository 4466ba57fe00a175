"""`encrypt` and `decrypt`: a SQLite file converted in place between plain text and
SQLCipher's encryption, with a backup (docs/encryption.md). The key comes from
`HERMES_STORE_KEY` or `HERMES_STORE_KEY_FILE` and is never printed."""

from __future__ import annotations

import argparse
from typing import Any

from ._args import with_url
from ._output import _printable


def _convert(args: argparse.Namespace, *, encrypting: bool) -> int:
    from ..config import resolve_url, sqlite_path
    from ..errors import EncryptionKeyRequired, InvalidURL
    from ..sqlite.encrypt import decrypt_file, encrypt_file, refuse_plain
    from ..sqlite.encryption import KEY_ENV, KEY_FILE_ENV, key_for

    command = "encrypt" if encrypting else "decrypt"
    path = sqlite_path(resolve_url(args.url))
    if path is None:
        raise InvalidURL(
            f"hermes-store {command} converts a SQLite file; on PostgreSQL the server "
            "encrypts its disk (docs/encryption.md)"
        )
    key = key_for(path)
    if key is None and not encrypting:
        refuse_plain(path)  # nothing to decrypt says more than "no key"
    if key is None:
        raise EncryptionKeyRequired(
            f"hermes-store {command} needs the key: set {KEY_ENV} (the key) or "
            f"{KEY_FILE_ENV} (a file holding it). Nothing was changed"
        )
    convert = encrypt_file if encrypting else decrypt_file
    done = convert(path, key, backup=not args.no_backup)
    shown = _printable(str(done.path), lines=False)
    state = "encrypted (SQLCipher)" if done.encrypted else "decrypted (plain SQLite)"
    print(
        f"{state}: {shown} ({done.tables} tables, journal mode {done.journal_mode}, "
        f"file mode {done.mode:04o} kept)"
    )
    if done.backup is None:
        print("backup: none (--no-backup)")
    else:
        copy = _printable(str(done.backup), lines=False)
        if encrypting:
            print(
                f"backup: {copy} (the database before encryption, mode 0600, NOT encrypted: "
                "it holds every conversation in plain text; delete it once the encrypted "
                "file is checked)"
            )
        else:
            print(f"backup: {copy} (the database before decryption, encrypted with the same key)")
    if encrypting:
        print(
            "the original Hermes cannot open an encrypted file; hermes-store (and its "
            "SessionDB) opens it with HERMES_STORE_KEY set (docs/encryption.md)"
        )
    return 0


def _cmd_encrypt(args: argparse.Namespace) -> int:
    return _convert(args, encrypting=True)


def _cmd_decrypt(args: argparse.Namespace) -> int:
    return _convert(args, encrypting=False)


def add_parsers(sub: Any) -> None:
    for name, func, what in (
        ("encrypt", _cmd_encrypt, "encrypt a SQLite file in place (key: $HERMES_STORE_KEY)"),
        ("decrypt", _cmd_decrypt, "decrypt a SQLite file in place (key: $HERMES_STORE_KEY)"),
    ):
        parser = with_url(sub.add_parser(name, help=what))
        parser.add_argument(
            "--no-backup",
            action="store_true",
            help="do not back up the file before converting it",
        )
        parser.set_defaults(func=func)
