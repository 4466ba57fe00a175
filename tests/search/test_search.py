"""Search on a real SQLite file at head: the sanitiser table of docs/reference/behaviour.md 6.2,
the routing of 6.4, filters, snippets, context, and hostile input that must never raise."""

from __future__ import annotations

import json
import re
import string
import unicodedata
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, text

from hermes_store.runtime.engine import make_engine
from hermes_store.search import sanitize_fts5_query, search_messages
from hermes_store.search.query import fold as ascii_fold
from hermes_store.search.query import literals_of

SANITISER_CASES = {
    "hello world": "hello world",
    "issue AND main": "issue AND main",
    '"exact phrase"': '"exact phrase"',
    "C++": "C",
    '"unterminated': "unterminated",
    "(problem": "problem",
    "{test}": "test",
    "^start": "start",
    "foo(bar)": "foo bar",
    "hello AND": "hello",
    "OR world": "world",
    "NOT secret": "secret",
    "hello NOT": "hello",
    "***": "",
    "deploy*": "deploy*",
    "chat-send": '"chat-send"',
    "fix chat-send bug": 'fix "chat-send" bug',
    '"chat-send"': '"chat-send"',
    "docker-compose-up": '"docker-compose-up"',
    "P2.2": '"P2.2"',
    "simulate.p2.test.ts": '"simulate.p2.test.ts"',
    "my-app.config": '"my-app.config"',
    "sp_new": '"sp_new"',
    "3-way": '"3-way"',
    "1.2.3-rc.1": '"1.2.3-rc.1"',
    "chat-send*": '"chat-send"*',
    "TODO: fix": "TODO  fix",
    "error:timeout": "error timeout",
    "x^2": "x 2",
    '"don\'t ship"': '"don\'t ship"',
    "a AND OR b": "a AND OR b",
    "don't": "don't",
    "user@example.com": 'user@"example.com"',
    "src/main.py": 'src/"main.py"',
    "a/b/c.d": 'a/b/"c.d"',
    "C:\\path\\file": "C \\path\\file",
    "path\\to\\file.txt": 'path\\to\\"file.txt"',
    "issue --- main": "issue --- main",
    "a - b": "a - b",
    "完成50%": "完成50%",
    "记忆断裂": "记忆断裂",
}


@pytest.mark.parametrize(("query", "expected"), list(SANITISER_CASES.items()))
def test_sanitiser_matches_the_original(query: str, expected: str) -> None:
    assert sanitize_fts5_query(query) == expected


def test_sanitiser_caps_queries_at_2048_characters() -> None:
    assert len(sanitize_fts5_query("a" * 5000)) == 2048


ROWS = [
    # (session, source, role, content, tool_name, tool_calls, active, compacted)
    ("s-cli", "cli", "user", "please refactor the auth module", None, None, 1, 0),
    (
        "s-cli",
        "cli",
        "assistant",
        "I will refactor it with chat-send helpers",
        None,
        json.dumps([{"function": {"name": "patch_file", "arguments": "{}"}}]),
        1,
        0,
    ),
    ("s-cli", "cli", "tool", "patched 3 files", "patch_file", None, 1, 0),
    ("s-tg", "telegram", "user", "聊天记录，记忆断裂问题复现了", None, None, 1, 0),
    ("s-tg", "telegram", "assistant", "Agent通信 works, 100%完成 now", None, None, 1, 0),
    ("s-tg", "telegram", "user", "rewound secret zebra", None, None, 0, 0),
    ("s-tg", "telegram", "user", "archived summary of zebra", None, None, 0, 1),
    ("s-cron", "cron", "assistant", "deployment finished: deploy42 ok", None, None, 1, 0),
]


@pytest.fixture
def populated(raw_con: Any, backend_url: str) -> Iterator[Connection]:
    """ROWS in a database at head, on SQLite and on PostgreSQL in turn."""
    con = raw_con
    for sid, source in sorted({(r[0], r[1]) for r in ROWS}):
        con.execute(
            "INSERT INTO sessions (id, source, started_at) VALUES (?, ?, 1000)", (sid, source)
        )
    for n, (sid, _src, role, content, tool, calls, active, compacted) in enumerate(ROWS):
        con.execute(
            "INSERT INTO messages (session_id, role, content, tool_name, tool_calls, timestamp,"
            " active, compacted) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (sid, role, content, tool, calls, 1000 + n, active, compacted),
        )
    engine = make_engine(backend_url)
    with engine.connect() as conn:
        yield conn
    engine.dispose()


def ids(hits: list[dict[str, object]]) -> set[object]:
    return {h["id"] for h in hits}


def test_hit_shape_snippet_and_context(populated: Connection) -> None:
    hits = search_messages(populated, "refactor")
    assert ids(hits) == {1, 2}
    hit = next(h for h in hits if h["id"] == 2)
    assert set(hit) == {
        "id",
        "session_id",
        "role",
        "snippet",
        "timestamp",
        "tool_name",
        "source",
        "model",
        "session_started",
        "context",
    }
    assert ">>>refactor<<<" in str(hit["snippet"])
    assert [c["role"] for c in hit["context"]] == ["user", "assistant", "tool"]  # type: ignore[union-attr]


def test_tool_calls_and_tool_name_are_indexed(populated: Connection) -> None:
    assert ids(search_messages(populated, "patch_file")) == {2, 3}


def test_boolean_operators_phrase_and_prefix(populated: Connection) -> None:
    assert ids(search_messages(populated, "refactor AND module")) == {1}
    assert ids(search_messages(populated, "module OR deployment")) == {1, 8}
    assert ids(search_messages(populated, "refactor NOT auth")) == {2}
    assert ids(search_messages(populated, '"auth module"')) == {1}
    assert ids(search_messages(populated, "deploy*")) == {8}
    assert ids(search_messages(populated, "chat-send")) == {2}


def test_filters(populated: Connection) -> None:
    assert ids(search_messages(populated, "refactor", role_filter=["user"])) == {1}
    assert ids(search_messages(populated, "refactor", source_filter=["telegram"])) == set()
    assert ids(search_messages(populated, "refactor", source_filter=[])) == set()
    assert ids(search_messages(populated, "refactor", exclude_sources=["cli"])) == set()
    assert len(search_messages(populated, "refactor", limit=1)) == 1
    assert len(search_messages(populated, "refactor", limit=1, offset=1)) == 1


def test_rewound_rows_hidden_compacted_rows_found(populated: Connection) -> None:
    assert ids(search_messages(populated, "zebra")) == {7}
    assert ids(search_messages(populated, "zebra", include_inactive=True)) == {6, 7}


def test_cjk_routes(populated: Connection) -> None:
    trigram = search_messages(populated, "记忆断裂")
    assert ids(trigram) == {4}
    assert ">>>记忆断裂<<<" in str(trigram[0]["snippet"])
    assert ids(search_messages(populated, "通信")) == {5}  # two characters: LIKE scan
    assert ids(search_messages(populated, "100%完成")) == {5}  # % is literal
    assert ids(search_messages(populated, "50%完成")) == set()


def test_zero_hit_latin_query_retries_on_trigram(populated: Connection) -> None:
    assert ids(search_messages(populated, "ploy42")) == {8}


@pytest.mark.parametrize(
    "query",
    [
        "don't",
        "50%",
        "#123",
        "a,b",
        "why?",
        "a AND OR b",
        "-negative",
        "a - b",
        "",
        "   ",
        "***",
        '"',
        "\ud800lone",
        "nul\x00byte",
        "x" * 3000,
        "NEAR(a b)",
        "\\",
    ],
)
def test_hostile_queries_never_raise(populated: Connection, query: str) -> None:
    assert isinstance(search_messages(populated, query), list)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.text(
        alphabet=st.characters(codec="utf-8") | st.sampled_from(string.punctuation), max_size=60
    )
)
def test_random_text_never_raises_and_hits_really_match(populated: Connection, query: str) -> None:
    for hit in search_messages(populated, query, include_inactive=True):
        row = populated.execute(
            text("SELECT content, tool_name, tool_calls FROM messages WHERE id = :id"),
            {"id": hit["id"]},
        ).one()
        haystack = fold(" ".join(str(v) for v in row if v is not None))
        # a literal of the query (`query.read_query`) stands in the row as typed
        if any(ascii_fold(x) in ascii_fold(" ".join(map(str, row))) for x in literals_of(query)):
            continue
        # or one of its words does: the tokenizer's view, runs of letters and digits
        words = [
            w
            for w in re.findall(r"[^\W_]+", fold(sanitize_fts5_query(query)))
            if w.upper() not in ("AND", "OR", "NOT")
        ]
        assert words, "a hit needs a search term"
        assert any(w[:3] in haystack for w in words)


def fold(text: str) -> str:
    """What unicode61 compares: case-folded, diacritics removed."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()
