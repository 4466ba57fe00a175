"""Watching the search's choices in tests."""

from __future__ import annotations

from typing import Any

import pytest


def record_wider_windows(monkeypatch: pytest.MonkeyPatch, *backends: Any) -> list[int | None]:
    """The windows each backend's `wider_window` chooses from now on, in call order
    (None: the whole table)."""
    windows: list[int | None] = []
    for backend in backends:
        chosen = backend.wider_window

        def wider_window(self: Any, *args: int, chosen: Any = chosen) -> int | None:
            windows.append(chosen(self, *args))
            return windows[-1]

        monkeypatch.setattr(backend, "wider_window", wider_window)
    return windows
