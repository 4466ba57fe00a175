"""A test that needs something of the machine the project cannot install (RUM, a tmpfs)
skips with the reason outside CI and fails under CI."""

from __future__ import annotations

import pytest
from helpers.system import unavailable


def test_outside_ci_the_test_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="mounting a tmpfs needs root"):
        unavailable("mounting a tmpfs needs root")


def test_under_ci_the_test_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run this test, but no RUM"):
        unavailable("no RUM")
