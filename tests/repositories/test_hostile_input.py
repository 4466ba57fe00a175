"""Hostile input through the repositories and search, on SQLite and on PostgreSQL (the
`store` fixture runs each test on both): NUL bytes, lone surrogates, 10 MB of text,
queries over 2 KB, every ASCII punctuation character, titles with control characters,
unknown or odd session ids, tool_calls that cannot be JSON. Each is stored exactly (or
by the original's documented rule) or refused with a typed error and nothing written.
Real databases, no mocks."""

from __future__ import annotations

import string
import unicodedata
from typing import Any

import pytest

from hermes_store.errors import InvalidInput, InvalidTitle, SessionNotFound
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.search import search_messages
from hermes_store.store import Store


@pytest.fixture
def repos(store: Store) -> tuple[SessionRepository, MessageRepository, TitleRepository]:
    sessions = SessionRepository(store)
    sessions.create_session("s", "cli")
    return sessions, MessageRepository(store), TitleRepository(store)


def search(store: Store, query: str, **options: Any) -> list[dict[str, Any]]:
    with store.read() as session:
        return search_messages(session, query, **options)


def hit_ids(store: Store, query: str, **options: Any) -> set[int]:
    return {int(h["id"]) for h in search(store, query, **options)}


# --------------------------------------------------------------------------- NUL bytes

TEXT_FIELDS = (
    "tool_name",
    "tool_call_id",
    "finish_reason",
    "reasoning",
    "reasoning_content",
    "platform_message_id",
    "api_content",
    "display_kind",
)


def test_nul_bytes_in_every_text_field_round_trip(store: Store, repos: Any) -> None:
    """PostgreSQL text cannot hold U+0000; the driver escapes it, so both backends give
    back exactly what was written, in content and in every other text column."""
    _, messages, _ = repos
    value = "before\x00middle\x00\x00after \uffff0 \uffff"
    fields = {name: f"{name}\x00{value}" for name in TEXT_FIELDS}
    mid = messages.append_message("s", "assistant", value, **fields)
    row = messages.get_messages("s")[0]
    assert row["id"] == mid
    assert row["content"] == value
    for name, expected in fields.items():
        assert row[name] == expected, name
    # the words around the NULs are searchable, a NUL query is no error
    assert hit_ids(store, "middle") == {mid}
    assert hit_ids(store, "after") == {mid}
    assert isinstance(search(store, "\x00"), list)
    assert isinstance(search(store, "middle\x00after"), list)


def test_numbers_given_for_text_are_stored_as_their_text_on_both_backends(
    store: Store, repos: Any
) -> None:
    """The encoding lets a number through for content and the other text columns (SQLite
    stores it in a TEXT column as its text). On PostgreSQL the one-call append casts it to
    text, as the batch INSERT's assignment does; both read back the same strings."""
    _, messages, _ = repos
    fields = {name: 7 for name in TEXT_FIELDS}
    one = messages.append_message("s", "assistant", 5, **fields)
    floats = messages.append_message("s", "user", 2.5)
    (batch,) = messages.append_messages("s", [{"role": "user", "content": 5}])
    rows = {row["id"]: row for row in messages.get_messages("s")}
    assert rows[one]["content"] == "5" and rows[batch]["content"] == "5"
    assert rows[floats]["content"] == "2.5"
    for name in TEXT_FIELDS:
        assert rows[one][name] == "7", name


def test_nul_bytes_in_session_fields_and_ids(store: Store, repos: Any) -> None:
    sessions, messages, _ = repos
    sid = "odd\x00id"
    sessions.create_session(sid, "cli", system_prompt="p\x00q", model="m\x00", user_id="\x00")
    row = sessions.get_session(sid)
    assert row is not None
    assert (row["id"], row["system_prompt"], row["model"], row["user_id"]) == (
        sid,
        "p\x00q",
        "m\x00",
        "\x00",
    )
    messages.append_message(sid, "user", "x")
    assert [m["content"] for m in messages.get_messages(sid)] == ["x"]
    assert sessions.get_session("odd") is None  # no truncation at the NUL


# --------------------------------------------------------------------------- surrogates


def test_lone_surrogates_in_text_become_replacement_characters(store: Store, repos: Any) -> None:
    """The original's rule (docs/reference/behaviour.md 17): U+FFFD before binding, in
    every text field."""
    sessions, messages, titles = repos
    messages.append_message("s", "user", "a\ud800b\udfffc", reasoning="r\udc00")
    row = messages.get_messages("s")[0]
    assert (row["content"], row["reasoning"]) == ("a\ufffdb\ufffdc", "r\ufffd")
    assert titles.set_session_title("s", "t\ud800t") is True
    assert titles.get_session_title("s") == "t\ufffdt"
    sessions.create_session("s2", "cli", system_prompt="x\udfffy")
    second = sessions.get_session("s2")
    assert second is not None and second["system_prompt"] == "x\ufffdy"
    for query in ("\ud800", "a\udc00b", "\udfff*", '"\ud800"'):
        assert isinstance(search(store, query), list), repr(query)


def test_ids_with_lone_surrogates_are_refused_with_a_typed_error(store: Store, repos: Any) -> None:
    """An id cannot be scrubbed (it would name another session) and cannot exist in the
    database: InvalidInput, for writes and lookups, nothing written, the store usable."""
    sessions, messages, titles = repos
    bad = "s\ud800"
    with pytest.raises(InvalidInput, match="surrogate"):
        messages.append_message(bad, "user", "x")
    with pytest.raises(InvalidInput, match="surrogate"):
        messages.append_messages(bad, [{"role": "user", "content": "x"}])
    with pytest.raises(InvalidInput, match="surrogate"):
        sessions.create_session(bad, "cli")
    with pytest.raises(InvalidInput, match="surrogate"):
        sessions.get_session(bad)
    with pytest.raises(InvalidInput, match="surrogate"):
        messages.get_messages(bad)
    assert messages.message_count() == 0
    assert [r["id"] for r in sessions.list_sessions_rich()] == ["s"]
    messages.append_message("s", "user", "still writable")
    assert messages.message_count("s") == 1


# --------------------------------------------------------------------------- 10 MB


def test_ten_megabytes_of_words_are_stored_exactly_and_searchable(store: Store, repos: Any) -> None:
    """Real words, not one long token (PostgreSQL's tsvector has a 1 MB limit), with a word
    of their own at the very end. On PostgreSQL only the first 100,000 characters of a
    message are word-indexed; the trigram route covers the rest of non-tool rows, so the
    last word of a tool row is found on SQLite only (docs/postgresql.md)."""
    _, messages, _ = repos
    words = " ".join(f"w{i}x" for i in range(1_200_000))
    big = words[: 10 * 1024 * 1024 - len(" zzlastword")] + " zzlastword"
    assert len(big) == 10 * 1024 * 1024
    user = messages.append_message("s", "user", big)
    tool = messages.append_message("s", "tool", big.replace("zzlastword", "zztoolword"))
    stored = messages.get_messages("s")
    assert stored[0]["content"] == big
    assert stored[1]["content"] == big.replace("zzlastword", "zztoolword")
    assert hit_ids(store, "w1000x") == {user, tool}
    assert hit_ids(store, "zzlastword") == {user}
    expected = {tool} if store.dialect == "sqlite" else set()
    assert hit_ids(store, "zztoolword") == expected


# --------------------------------------------------------------------------- long queries


def test_queries_over_two_kilobytes(store: Store, repos: Any) -> None:
    """Queries are cut to 2048 characters (the original's MAX_FTS5_QUERY_CHARS): what lies
    in the first 2048 is searched, the rest is not, and nothing raises."""
    _, messages, _ = repos
    mid = messages.append_message("s", "user", "needle in a haystack")
    assert hit_ids(store, "needle " * 400) == {mid}  # 2800 characters
    assert hit_ids(store, "needle" + " OR needle" * 500) == {mid}
    assert hit_ids(store, "zz " * 700 + "needle") == set()  # the term is past the cut
    for query in ("x" * 5000, '"' * 3000, "(" * 3000, "*" * 3000, "needle " * 20_000):
        assert search(store, query) is not None
        for options in ({"role_filter": ["user"]}, {"sort": "newest"}, {"limit": 1}):
            assert isinstance(search(store, query, **options), list)


# --------------------------------------------------------------------------- punctuation

#: Characters the sanitiser turns into spaces or accepts around a word (the "ok" rows of
#: docs/reference/behaviour.md 6.2): `needle<c>` must find the row (the original's reading,
#: after the literal `needle<c>`, which the row does not hold). With the others FTS5's
#: reading is a syntax error and the literal is not there: no results, never an error.
FINDS_THE_WORD = set('"()*+:^_{}')


def test_every_ascii_punctuation_character(store: Store, repos: Any) -> None:
    sessions, messages, titles = repos
    content = f"needle haystack {string.punctuation} foo.bar-baz_qux"
    mid = messages.append_message("s", "user", content)
    other = messages.append_message("s", "tool", "unrelated row", tool_name="shell")
    assert [m["content"] for m in messages.get_messages("s")] == [content, "unrelated row"]

    for c in string.punctuation:
        queries = [c, c * 3, f"needle{c}", f"{c}needle", f"need{c}le", f"needle {c} haystack"]
        queries += [f"needle {c}", f"{c} OR needle", f"needle AND {c}{c}", f'"{c}"']
        for query in queries:
            for options in ({}, {"role_filter": ["user"]}, {"sort": "newest"}):
                hits = search(store, query, **options)
                assert {h["id"] for h in hits} <= {mid}, (query, hits)
                assert other not in {h["id"] for h in hits}
        assert (hit_ids(store, f"needle{c}") == {mid}) is (c in FINDS_THE_WORD), c
    assert hit_ids(store, string.punctuation) <= {mid}
    assert hit_ids(store, "foo.bar-baz_qux") == {mid}
    # each character alone, and the whole run, is a literal the row holds (docs/search.md,
    # "Literals"); the tool row holds none of them
    for c in string.punctuation:
        assert hit_ids(store, c) == {mid}, c
    assert hit_ids(store, string.punctuation) == {mid}
    assert hit_ids(store, f"needle haystack {string.punctuation[:10]}") == {mid}

    # punctuation in ids and titles is stored exactly
    sessions.create_session(string.punctuation, "cli")
    messages.append_message(string.punctuation, "user", string.punctuation)
    assert messages.get_messages(string.punctuation)[0]["content"] == string.punctuation
    assert titles.set_session_title(string.punctuation, string.punctuation) is True
    assert titles.get_session_title(string.punctuation) == string.punctuation
    found = titles.get_session_by_title(string.punctuation)
    assert found is not None and found["id"] == string.punctuation
    assert titles.resolve_session_by_title(string.punctuation) == string.punctuation
    assert titles.get_next_title_in_lineage(string.punctuation) == string.punctuation + " #2"


def test_punctuation_queries_find_the_same_rows_on_both_backends(
    fresh_db: str, pg_fresh_db: str
) -> None:
    """The PostgreSQL route rebuilds FTS5's reading of the query: for every punctuation
    query the two backends return the same hits (ranking and snippets may differ:
    docs/postgresql.md, "What differs from SQLite"). `chat*send` was the first difference
    found: FTS5's lexer ends a bareword at `*` (`chat*` AND `send`), PostgreSQL's reading
    took it for one word and failed."""
    contents = [
        f"needle haystack {string.punctuation}",
        "chat-send failed: error:timeout at src/main.py",
        "user@example.com wrote [tag] <tag> a,b why? $5 e=mc2 x|y",
        "C++ and C# and 50% and #123 and don't",
        "plain words only",
    ]
    results: dict[str, list[list[Any]]] = {}
    for url in (fresh_db, pg_fresh_db):
        store = Store(url)
        try:
            SessionRepository(store).create_session("s", "cli")
            messages = MessageRepository(store)
            for text in contents:
                messages.append_message("s", "user", text)
            answers = []
            for c in string.punctuation:
                for query in (c, f"needle{c}", f"{c}needle", f"chat{c}send", f"error{c}timeout"):
                    answers.append([query, sorted(h["id"] for h in search(store, query))])
            results[store.dialect] = answers
        finally:
            store.close()
    assert results["sqlite"] == results["postgresql"]


# --------------------------------------------------------------------------- titles

#: Every C0 control and DEL (the original removes all but tab, LF and CR, which collapse
#: into one space with the other whitespace).
CONTROLS = "".join(chr(c) for c in range(0x20)) + "\x7f"


def test_titles_with_control_characters(store: Store, repos: Any) -> None:
    _, _, titles = repos
    raw = f"Hello{CONTROLS}\x1b[31m world\r\n!\u200b\u202e\ufeff"
    assert titles.set_session_title("s", raw) is True
    title = titles.get_session_title("s")
    assert title == "Hello [31m world !"
    assert title is not None and not [c for c in title if unicodedata.category(c) == "Cc"]
    found = titles.get_session_by_title(title)
    assert found is not None and found["id"] == "s"
    # C1 controls are not in the original's list: kept exactly
    # (U+0085 is whitespace to Python: it collapses like a newline)
    assert titles.set_session_title("s", "c1\x85\x9f") is True
    assert titles.get_session_title("s") == "c1 \x9f"
    # too long after sanitising: typed error, title unchanged
    before = titles.get_session_title("s")
    with pytest.raises(InvalidTitle):
        titles.set_session_title("s", CONTROLS + "t" * 101)
    assert titles.get_session_title("s") == before
    # nothing left after sanitising: the title is cleared
    assert titles.set_session_title("s", CONTROLS) is True
    assert titles.get_session_title("s") is None


# --------------------------------------------------------------------------- unknown ids

HOSTILE_IDS = ["nope", "", " ", "x" * 5000, "'; DROP TABLE messages; --", "%", "_", "\\", "\x00"]


@pytest.mark.parametrize("sid", HOSTILE_IDS, ids=range(len(HOSTILE_IDS)))
def test_unknown_session_ids(store: Store, repos: Any, sid: str) -> None:
    sessions, messages, titles = repos
    with pytest.raises(SessionNotFound):
        messages.append_message(sid, "user", "orphan")
    with pytest.raises(SessionNotFound):
        messages.append_messages(sid, [{"role": "user", "content": "orphan"}])
    assert sessions.get_session(sid) is None
    assert messages.get_messages(sid) == []
    assert messages.message_count(sid) == 0
    assert titles.set_session_title(sid, "t") is False
    assert titles.get_session_title(sid) is None
    assert messages.message_count() == 0
    assert [r["id"] for r in sessions.list_sessions_rich()] == ["s"]


# --------------------------------------------------------------------------- tool_calls


def test_tool_calls_that_are_not_json(store: Store, repos: Any) -> None:
    sessions, messages, _ = repos
    # text that is not JSON: the original's normalisation stores no calls
    messages.append_message("s", "assistant", "x", tool_calls="{not json")
    row = sessions.get_session("s")
    assert row is not None and row["tool_call_count"] == 0
    # objects JSON cannot encode: a typed error, nothing written
    for bad in ({1, 2}, object(), [object()], {"f": lambda: 1}, [float("nan"), b"\x00"]):
        with pytest.raises(InvalidInput):
            messages.append_message("s", "assistant", "y", tool_calls=bad)
        with pytest.raises(InvalidInput):
            messages.append_messages("s", [{"role": "assistant", "tool_calls": bad}])
    assert messages.message_count("s") == 1
    row = sessions.get_session("s")
    assert row is not None and (row["message_count"], row["tool_call_count"]) == (1, 0)


# --------------------------------------------------------------------------- lookups

HOSTILE_LOOKUPS = [
    *string.punctuation,
    "\x00",
    "a\x00b",
    "x" * 5000,
    "%_",
    "\\%",
    "'; --",
    "my title #",
    "my title #2 #3",
    "\u202e",
    "needle " * 400,
]


def test_lookups_by_hostile_strings(store: Store, repos: Any) -> None:
    """Session search, id prefixes, title resolution and cwd prefixes take any text: an
    answer, never an error; wildcards are literal. A lone surrogate is refused typed."""
    sessions, messages, titles = repos
    sessions.create_session("20260101_a", "cli", cwd="home/x")
    messages.append_message("20260101_a", "user", "hello needle")
    titles.set_session_title("20260101_a", "my title")
    lookups = {
        "search": lambda q: sessions.list_sessions_rich(search_query=q),
        "id_query": lambda q: sessions.list_sessions_rich(id_query=q),
        "search_sessions": lambda q: sessions.search_sessions(q),
        "resolve_id": lambda q: sessions.resolve_session_id(q),
        "resolve_title": lambda q: titles.resolve_session_by_title(q),
        "next_title": lambda q: titles.get_next_title_in_lineage(q),
        "cwd_prefix": lambda q: sessions.list_sessions_rich(cwd_prefix=q),
        "by_title": lambda q: titles.get_session_by_title(q),
    }
    for query in HOSTILE_LOOKUPS:
        for lookup in lookups.values():
            lookup(query)  # an untyped error fails the test here
        assert sessions.resolve_session_id(query) is None, query
        assert titles.resolve_session_by_title(query) is None, query
        assert [r["id"] for r in sessions.list_sessions_rich(cwd_prefix=query)] == [], query
    # `%` and `_` are literal in prefixes and titles
    assert sessions.resolve_session_id("2026%") is None
    assert sessions.resolve_session_id("2026") == "20260101_a"
    assert [r["id"] for r in sessions.list_sessions_rich(cwd_prefix="home")] == ["20260101_a"]
    for literal in ("h_me", "ho%", "home/%", "home/_"):
        assert [r["id"] for r in sessions.list_sessions_rich(cwd_prefix=literal)] == [], literal
    for name, lookup in lookups.items():
        if name in ("search", "id_query"):
            continue  # the listing scrubs its filter text like stored text
        with pytest.raises(InvalidInput, match="surrogate"):
            lookup("\ud800")
