"""The project head: the revision a database must be at for this code to serve it.

Unlike the names in `contract` (frozen once shipped), this value moves forward with every
new revision, upstream or the project's own: set it in the same change that adds the
revision (tests/test_own_tables.py checks it is the script directory's single head).
`Store`, `migrate` and everything that compares a database's revision read it from here.
"""

from __future__ import annotations

from typing import Final

HEAD_REVISION: Final = "hs0001"

#: The revision whose schema is exactly upstream v23. Revisions 0001..0023 replay the
#: upstream versions (adoption stamps a legacy file at one of them); the project's own
#: revisions follow it, named hs0001, hs0002, ... so that no upstream number is ever
#: taken by one of them.
UPSTREAM_HEAD_REVISION: Final = "0023"
