"""The context of search hits (docs/reference/behaviour.md 6.1), on both backends: for every hit
the previous message of its session, the hit, the next one, ordered by (timestamp, id),
inactive rows included, content decoded and cut to 200 characters."""

from __future__ import annotations

from typing import Any

from sqlalchemy import text

from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.search import search_messages
from hermes_store.search.backend import CONTEXT_CHUNK
from hermes_store.store import Store


def _search(store: Store, query: str, **kw: Any) -> list[dict[str, Any]]:
    with store.read() as session:
        return search_messages(session, query, **kw)


def _expected_context(transcript: list[tuple[float, int, str, str]], hit_id: int) -> list[Any]:
    ordered = sorted(transcript)  # (timestamp, id, role, content)
    at = next(i for i, row in enumerate(ordered) if row[1] == hit_id)
    return [
        {"role": role, "content": content[:200]}
        for _, _, role, content in ordered[max(0, at - 1) : at + 2]
    ]


def test_context_of_many_hits_in_several_sessions(store: Store) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    transcripts: dict[str, list[tuple[float, int, str, str]]] = {}
    for n, sid in enumerate(("alpha", "beta", "gamma")):
        sessions.create_session(sid, "cli")
        transcripts[sid] = []
        for i in range(8):
            role = ("user", "assistant")[i % 2]
            # equal timestamps in pairs, so the id decides the order inside a pair; the
            # third session's rows are appended newest first, so id order != time order
            ts = 1_000.0 + (i // 2 if n < 2 else (7 - i) // 2)
            content = f"{sid} row {i} " + ("needle " if i % 3 == 0 else "") + "x" * (i * 60)
            mid = messages.append_message(sid, role, content, timestamp=ts)
            transcripts[sid].append((ts, mid, role, content))
    hits = _search(store, "needle", limit=100)
    expected_ids = {
        mid for rows in transcripts.values() for _, mid, _, content in rows if "needle" in content
    }
    assert {h["id"] for h in hits} == expected_ids
    for hit in hits:
        assert hit["context"] == _expected_context(transcripts[hit["session_id"]], hit["id"])
    # the first and the last message of a session have one neighbour only
    assert {len(h["context"]) for h in hits} == {2, 3}


def test_context_over_more_hits_than_one_statement_carries(store: Store) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("long", "cli")
    count = CONTEXT_CHUNK + 50
    batch = [
        {"role": "user", "content": f"haystack {i}", "timestamp": 2_000.0 + i}
        for i in range(count)
    ]
    messages.append_messages("long", batch)
    hits = _search(store, "haystack", limit=count)
    assert len(hits) == count
    by_id = sorted(hits, key=lambda h: h["id"])
    for i, hit in enumerate(by_id):
        wanted = [f"haystack {j}" for j in range(max(0, i - 1), min(count, i + 2))]
        assert [c["content"] for c in hit["context"]] == wanted


def test_context_includes_rewound_neighbours(store: Store) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("s", "cli")
    first = messages.append_message("s", "user", "before the rewind", timestamp=1.0)
    messages.append_message("s", "assistant", "the answer mentions quokka", timestamp=2.0)
    # rewound: hidden from transcripts, but still context for a hit next to it
    store.write(
        lambda s: s.execute(
            text("UPDATE messages SET active = 0, compacted = 0 WHERE id = :i"), {"i": first}
        )
    )
    (hit,) = _search(store, "quokka")
    assert [c["content"] for c in hit["context"]] == [
        "before the rewind",
        "the answer mentions quokka",
    ]
