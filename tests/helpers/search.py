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


#: 16 one-character prefixes OR'ed: each expands to every indexed word it begins, so on
#: the messages `fill_with_short_words` writes a search with no limit runs for a second
#: or more, most of it inside single FTS5 statements
PREFIXES = " OR ".join(f"{c}*" for c in "0123456789abcdef")


def fill_with_short_words(store: Any, session_id: str = "w", count: int = 2000) -> None:
    """A session of `count` messages of 60 short random hexadecimal words each (the same
    every run): the data a search for PREFIXES is slow on. Tool rows, which the trigram
    index leaves out, so that writing them costs the word index only."""
    import random

    from hermes_store.repositories.messages import MessageRepository
    from hermes_store.repositories.sessions import SessionRepository

    rnd = random.Random(35)
    SessionRepository(store).create_session(session_id, "cli")
    messages = MessageRepository(store)
    for start in range(0, count, 500):
        batch = [
            " ".join(f"{rnd.getrandbits(20):x}" for _ in range(60))
            for _ in range(min(500, count - start))
        ]
        messages.append_messages(session_id, [{"role": "tool", "content": c} for c in batch])
