"""What a test needs of the machine beyond Python and the PostgreSQL server (a server
extension such as RUM, the right to mount a file system): where it is missing the test
skips with the reason, except under CI (`CI` set), where it must run and fails instead,
as the PostgreSQL tests do (helpers/postgres.py)."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run this test, but {reason}")
    pytest.skip(reason)
