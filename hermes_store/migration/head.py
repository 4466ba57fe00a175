"""The project head: the revision a database must be at for this code to serve it.

Unlike the names in `contract` (frozen once shipped), this value moves forward with every
new revision, upstream or the project's own: set it in the same change that adds the
revision (tests/migrations/test_own_tables.py checks it is the script directory's single head).
`Store`, `migrate` and everything that compares a database's revision read it from here.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Final

HEAD_REVISION: Final = "hs0010"

#: The revision whose schema is exactly upstream v23. Revisions 0001..0023 replay the
#: upstream versions (adoption stamps a legacy file at one of them); the project's own
#: revisions follow it, named hs0001, hs0002, ... so that no upstream number is ever
#: taken by one of them.
UPSTREAM_HEAD_REVISION: Final = "0023"


@cache
def known_revisions() -> frozenset[str]:
    """Every revision this code has, from the revision files' names (`0007_...`,
    `hs0001_...`; tests/migrations/test_own_tables.py checks them against Alembic's own reading).
    A database at a revision outside this set was written by a newer hermes-store."""
    versions = Path(__file__).resolve().parent.parent / "_migrations" / "versions"
    return frozenset(
        path.name.split("_", 1)[0]
        for path in versions.glob("*.py")
        if "_" in path.stem and not path.name.startswith("_")
    )
