"""MessageRepository.pop_newest_message: the newest active message deleted and returned,
the counters lowered with it, on SQLite files and PostgreSQL."""

from __future__ import annotations

import threading

import pytest

from hermes_store.errors import CompressionSessionBusyError, CompressionSessionClosedError
from hermes_store.repositories.coordination import CompressionLockRepository
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store


def _counts(store: Store, session_id: str) -> tuple[int, int]:
    row = SessionRepository(store).get_session(session_id)
    assert row is not None
    return row["message_count"], row["tool_call_count"]


def test_pop_returns_the_newest_and_lowers_the_counters(store: Store) -> None:
    SessionRepository(store).ensure_session("s1", "cli")
    messages = MessageRepository(store)
    first = messages.append_message("s1", "user", "hello")
    calls = [
        {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}},
    ]
    second = messages.append_message("s1", "assistant", "calling", tool_calls=calls)
    assert _counts(store, "s1") == (2, 2)

    popped = messages.pop_newest_message("s1")
    assert popped is not None
    assert popped["id"] == second and popped["tool_calls"] == calls
    assert popped["content"] == "calling"
    assert _counts(store, "s1") == (1, 0)
    assert [m["id"] for m in messages.get_messages("s1")] == [first]

    popped = messages.pop_newest_message("s1")
    assert popped is not None and popped["id"] == first and popped["content"] == "hello"
    assert _counts(store, "s1") == (0, 0)
    assert messages.pop_newest_message("s1") is None
    assert _counts(store, "s1") == (0, 0)


def test_pop_skips_rewound_rows_and_knows_no_unknown_session(store: Store) -> None:
    SessionRepository(store).ensure_session("s1", "cli")
    messages = MessageRepository(store)
    kept = messages.append_message("s1", "assistant", "kept")
    rewound = messages.append_message("s1", "user", "rewound")
    messages.rewind_to_message("s1", rewound)

    popped = messages.pop_newest_message("s1")
    assert popped is not None and popped["id"] == kept
    # the inactive row stays on disk
    assert [m["id"] for m in messages.get_messages("s1", include_inactive=True)] == [rewound]
    assert messages.pop_newest_message("no-such-session") is None


def test_concurrent_pops_each_take_another_message(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).ensure_session("s1", "cli")
        messages = MessageRepository(store)
        ids = messages.append_messages(
            "s1", [{"role": "user", "content": str(i)} for i in range(6)]
        )
        popped: list[object] = []
        lock = threading.Lock()

        def pop() -> None:
            row = MessageRepository(store).pop_newest_message("s1")
            with lock:
                popped.append(None if row is None else row["id"])

        threads = [threading.Thread(target=pop) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(p for p in popped if p is not None) == ids  # type: ignore[type-var]
        assert popped.count(None) == 2
        assert _counts(store, "s1") == (0, 0)


def test_pop_is_refused_where_an_append_is(store: Store) -> None:
    """A compression in progress (another holder's lock) and a session compression has
    closed keep their transcript: the pop raises and deletes nothing."""
    SessionRepository(store).ensure_session("s1", "cli")
    messages = MessageRepository(store)
    kept = messages.append_message("s1", "user", "kept")
    assert CompressionLockRepository(store).try_acquire("s1", "compressor", 60.0)
    with pytest.raises(CompressionSessionBusyError):
        messages.pop_newest_message("s1")
    CompressionLockRepository(store).release("s1", "compressor")
    SessionRepository(store).end_session("s1", "compression")
    with pytest.raises(CompressionSessionClosedError):
        messages.pop_newest_message("s1")
    assert [m["id"] for m in messages.get_messages("s1")] == [kept]
    assert _counts(store, "s1") == (1, 0)
