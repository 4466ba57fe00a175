"""Search finds what people type (issue 11), on SQLite and on PostgreSQL: a recall test of
realistic queries, each typed exactly as it stands in one stored message among
distractors (one of which holds the query's words but not the query); property tests
that a token or a punctuated substring taken from a stored message finds it; and the
reading's rules (mixed queries, operators, ranking, snippets, filters, pagination)."""

from __future__ import annotations

import string
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from helpers.search import record_wider_windows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.search import limits, search_messages
from hermes_store.search.query import (
    TRIGRAM_CHARS,
    Term,
    contains_cjk,
    fold,
    has_literals,
    literals_of,
    read_query,
    sanitize_fts5_query,
    words_of,
)
from hermes_store.store import Store

#: (query, the message holding it literally, its role). Tool rows are only in the word
#: index: their literals start and end on word boundaries (docs/search.md,
#: "Literals").
RECALL: list[tuple[str, str, str]] = [
    # shell commands
    ("rm -rf node_modules", "$ rm -rf node_modules\nremoved 1200 entries", "tool"),
    ("git push --force-with-lease", "use git push --force-with-lease origin main", "assistant"),
    ("ls -la", "the output of ls -la shows the hidden files", "user"),
    ("chmod +x deploy.sh", "then chmod +x deploy.sh before running it", "assistant"),
    ("docker compose up -d", "docker compose up -d started 3 containers", "tool"),
    ("kill -9", "had to kill -9 the stuck worker", "user"),
    ("grep -rn TODO", "grep -rn TODO src/ found 12 hits", "tool"),
    ("pip install -e .[test]", "pip install -e .[test] worked this time", "user"),
    ("2>&1", "redirect with 2>&1 to capture stderr", "assistant"),
    ("cd ~/projects", "cd ~/projects && make all", "user"),
    # file paths
    ("src/main.py", "edit src/main.py around line 40", "user"),
    (".env", "never commit the .env file", "assistant"),
    ("/etc/nginx/nginx.conf", "reload after editing /etc/nginx/nginx.conf", "tool"),
    ("C:\\Users\\me\\AppData", "the config lives in C:\\Users\\me\\AppData\\Roaming", "user"),
    ("~/.ssh/id_ed25519", "the key at ~/.ssh/id_ed25519 has the wrong mode", "assistant"),
    ("package.json", "bump the version in package.json", "user"),
    # URLs
    ("https://example.com/docs?page=2", "see https://example.com/docs?page=2 for details", "user"),
    ("localhost:8080", "the server listens on localhost:8080 now", "tool"),
    ("github.com/nousresearch/hermes-agent", "cloned github.com/nousresearch/hermes-agent", "user"),
    # e-mail addresses
    ("user@example.com", "mail user@example.com about the invoice", "user"),
    ("ops+alerts@corp.io", "alerts go to ops+alerts@corp.io at night", "assistant"),
    # versions
    ("v2.3.1", "we released v2.3.1 on friday", "assistant"),
    ("1.2.3-rc.1", "the tag 1.2.3-rc.1 is broken", "user"),
    (">=3.11", "requires python >=3.11 at least", "assistant"),
    ("numpy==1.26.4", "pin numpy==1.26.4 in requirements", "user"),
    ("^18.2.0", "react ^18.2.0 in the dependencies", "assistant"),
    # flags
    ("--dry-run", "try it with --dry-run first", "user"),
    ("-Wall", "compile with -Wall -Werror", "assistant"),
    ("--no-verify", "the commit with --no-verify skipped hooks", "tool"),
    ("-k", "select tests with pytest -k expression", "user"),
    # contractions
    ("don't", "I don't think that is right", "user"),
    ("it's", "it's working now", "assistant"),
    ("won't", "the build won't start", "user"),
    ("y'all", "thanks y'all for the review", "user"),
    ("Don't", "Don't merge on fridays", "assistant"),
    # currency and percentages
    ("50%", "coverage dropped to 50% overnight", "user"),
    ("$5", "the plan costs $5 a month", "assistant"),
    ("€19.99", "the ticket costs €19.99 with VAT", "user"),
    ("12.5%", "conversion rose 12.5% this week", "assistant"),
    ("$1,200", "a budget of $1,200 was approved", "user"),
    # issue numbers
    ("#12563", "fixed in #12563 last sprint", "assistant"),
    ("PR #42", "see PR #42 for the patch", "user"),
    ("GH-1234", "tracked as GH-1234 upstream", "assistant"),
    ("issue#77", "a regression from issue#77 is back", "user"),
    # code identifiers
    ("foo_bar", "call foo_bar() with the id", "assistant"),
    ("C++", "rewrite it in C++ later", "user"),
    ("C#", "the C# client is slow", "user"),
    ("os.path.join", "use os.path.join instead", "assistant"),
    ("__init__", "move it into __init__ please", "user"),
    ("std::vector<int>", "a std::vector<int> resized twice", "assistant"),
    ("a:b", "the mapping a:b in the yaml", "user"),
    ("key=value", "set key=value in the config", "user"),
    ("$HOME", "export PATH=$HOME/bin:$PATH", "tool"),
    ("obj->next", "obj->next was null", "assistant"),
    ("a != b", "check that a != b first", "user"),
    ("@property", "decorate it with @property", "assistant"),
    ("[tag]", "prefix the title with [tag] please", "user"),
    ("<div>", "wrap it in a <div> element", "assistant"),
    ('--name="hermes"', 'run with --name="hermes" as the flag', "user"),
    ("/users/{id}", "the route /users/{id} returns 404", "tool"),
    ("(optional)", "the field (optional) is ignored", "user"),
    ("snake_case_name", "rename it to snake_case_name", "assistant"),
    ("error:timeout", "got error:timeout from upstream", "tool"),
    ("TODO: fix", "TODO: fix the flaky test", "user"),
    ("rm -rf docker", "rm -rf /var/lib/docker freed space", "user"),
    # CJK and accented words
    ("记忆断裂", "聊天记录，记忆断裂问题复现了", "user"),
    ("数据库", "连接数据库失败了", "assistant"),
    ("東京", "明日は東京へ行きます", "user"),
    ("한국어", "한국어 번역을 추가했어요", "assistant"),
    ("naïve", "a naïve approach first", "user"),
    ("café-crème", "ordered a café-crème today", "assistant"),
    ("Zürich", "the office in Zürich opens", "user"),
    ("résumé.pdf", "attached résumé.pdf to the mail", "user"),
    ("São Paulo", "the flight to São Paulo is delayed", "assistant"),
    ("über-cool", "an über-cool feature", "user"),
]

FILLER = [
    "please refactor the auth module",
    "the deployment finished without errors",
    "lunch at noon with the team",
    "numbers 1 2 3 and letters a b c",
    "path and file and main and python",
]


def _distractor(query: str) -> str | None:
    """The query's words without its punctuation: a message holding only its words."""
    words = words_of(query)
    if not words or contains_cjk(query) or not has_literals(read_query(query)):
        return None
    return " and ".join(words) + " only"


def search(store: Store, query: str, **options: Any) -> list[dict[str, Any]]:
    with store.read() as session:
        return search_messages(session, query, **options)


def _planted(store: Store) -> tuple[dict[str, int], dict[str, int]]:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("recall", "cli")
    sessions.create_session("noise", "telegram")
    targets: dict[str, int] = {}
    distractors: dict[str, int] = {}
    for n, text in enumerate(FILLER * 4):
        messages.append_message("noise", ("user", "assistant")[n % 2], text, timestamp=10.0 + n)
    for n, (query, text, role) in enumerate(RECALL):
        decoy = _distractor(query)
        if decoy is not None:
            # newer than its target: only the literal tier puts the target first
            distractors[query] = messages.append_message("noise", role, decoy, timestamp=2000.0 + n)
        targets[query] = messages.append_message(
            "recall",
            role,
            text,
            timestamp=1000.0 + n,
            tool_name="shell" if role == "tool" else None,
        )
    return targets, distractors


@pytest.fixture
def planted(store: Store) -> Iterator[tuple[Store, dict[str, int], dict[str, int]]]:
    targets, distractors = _planted(store)
    yield store, targets, distractors


def test_recall_of_realistic_queries(planted: Any) -> None:
    store, targets, distractors = planted
    assert len(RECALL) >= 60
    missed, misranked, unmarked = [], [], []
    for query, _text, _role in RECALL:
        hits = search(store, query, limit=50)
        found = [h["id"] for h in hits]
        if targets[query] not in found:
            missed.append(query)
            continue
        decoy = distractors.get(query)
        if decoy in found and found.index(decoy) < found.index(targets[query]):
            misranked.append(query)
        target_hit = hits[found.index(targets[query])]
        if any(f">>>{literal}<<<" not in target_hit["snippet"] for literal in literals_of(query)):
            unmarked.append((query, target_hit["snippet"]))
    assert not missed, f"{len(missed)} of {len(RECALL)} not found: {missed}"
    assert not misranked, f"a message with only the words ranked first: {misranked}"
    assert not unmarked, f"the snippet does not mark the literal: {unmarked}"


def test_recall_gives_the_same_results_on_both_backends(fresh_db: str, pg_fresh_db: str) -> None:
    answers: dict[str, dict[str, list[int]]] = {}
    for url in (fresh_db, pg_fresh_db):
        store = Store(url)
        try:
            _planted(store)
            queries = [query for query, _, _ in RECALL] + [f"{q} OR lunch" for q, _, _ in RECALL]
            answers[store.dialect] = {
                query: sorted(h["id"] for h in search(store, query, limit=100)) for query in queries
            }
        finally:
            store.close()
    differ = {
        query: (ids, answers["postgresql"][query])
        for query, ids in answers["sqlite"].items()
        if ids != answers["postgresql"][query]
    }
    assert not differ, differ


# --------------------------------------------------------------------------- properties

_TEXT_CHARS = string.ascii_letters + string.digits + string.punctuation + "éÉüßçñ"
_words = st.text(alphabet=_TEXT_CHARS, min_size=1, max_size=12)
_message = st.lists(_words, min_size=1, max_size=8).map(" ".join)


def _findable(query: str) -> bool:
    """A query the sanitiser does not empty (`*`, a lone operator) with a search term."""
    return bool(sanitize_fts5_query(query).strip('" *')) and query.upper() not in (
        "AND",
        "OR",
        "NOT",
    )


@pytest.fixture
def property_store(store: Store) -> Iterator[tuple[Store, MessageRepository]]:
    SessionRepository(store).create_session("p", "cli")
    messages = MessageRepository(store)
    for text in FILLER:
        messages.append_message("p", "user", text)
    yield store, messages


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_message, role=st.sampled_from(["user", "assistant", "tool"]), data=st.data())
def test_any_token_of_a_message_finds_it(
    property_store: Any, text: str, role: str, data: st.DataObject
) -> None:
    """Every whitespace-separated token of a stored message, in any row (tool rows too)."""
    store, messages = property_store
    mid = messages.append_message("p", role, text)
    token = data.draw(st.sampled_from(text.split()))
    if not _findable(token):
        return
    found = {h["id"] for h in search(store, token, limit=1000)}
    if role == "tool" and len(token) >= TRIGRAM_CHARS and not words_of(token):
        # the documented limit (docs/search.md, "Literals"): no index holds
        # punctuation of tool output, and 3+ characters of it are not scanned for
        return
    assert mid in found, (token, text, role)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_message, data=st.data())
def test_any_punctuated_substring_of_a_message_finds_it(
    property_store: Any, text: str, data: st.DataObject
) -> None:
    """Any substring of 3+ characters, without whitespace and holding punctuation (a
    literal), of a user or assistant message, also where it starts or ends inside a
    word; ASCII letters in either case."""
    store, messages = property_store
    mid = messages.append_message("p", "assistant", text)
    start = data.draw(st.integers(0, len(text) - 1))
    end = data.draw(st.integers(start + 1, len(text)))
    piece = text[start:end]
    if len(piece) < 3 or " " in piece or not has_literals(read_query(piece)):
        return
    if not _findable(piece):
        return
    query = data.draw(st.sampled_from([piece, piece.swapcase() if piece.isascii() else piece]))
    found = {h["id"] for h in search(store, query, limit=1000)}
    assert mid in found, (query, text)
    assert fold(query) in fold(text)


# --------------------------------------------------------------------------- rules


@pytest.fixture
def rows(store: Store) -> tuple[Store, dict[str, int]]:
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    texts = {
        "docker": "rm -rf /var/lib/docker freed 20 GB",
        "other": "rm -rf /tmp/cache then restart",
        "words": "docker rm and rf flags",
        "env": "Copy .ENV.example to .env",
        "tool": "see config.yaml and .env",
        "inside": "the file foo.envrc is new",
        "compound": "run docker-rm now",
        "compound2": "then Docker-RM again",
    }
    ids = {}
    for n, (key, value) in enumerate(texts.items()):
        role = "tool" if key == "tool" else "user"
        ids[key] = messages.append_message("s", role, value, timestamp=100.0 + n)
    return store, ids


def test_mixed_queries_and_the_literal_with_the_words(rows: Any) -> None:
    store, ids = rows
    hits = [h["id"] for h in search(store, "rm -rf docker")]
    # literal hits first (newest first), then what the original's reading adds
    assert hits[0] == ids["docker"]
    assert ids["other"] not in hits
    assert search(store, "rm -rf NOT docker")[0]["id"] == ids["other"]
    # a negated literal, in rows whose tool name and tool calls are NULL
    assert [h["id"] for h in search(store, "rm -rf NOT /tmp")][:1] == [ids["docker"]]
    assert ids["other"] not in {h["id"] for h in search(store, "rm -rf NOT /tmp")}
    assert {h["id"] for h in search(store, "-rf OR config.yaml")} >= {
        ids["docker"],
        ids["other"],
        ids["tool"],
    }


def test_literals_ignore_ascii_case_and_reach_inside_words(rows: Any) -> None:
    store, ids = rows
    found = {h["id"] for h in search(store, ".env")}
    # `.ENV.example` (case), `foo.envrc` (inside a word), a tool row on word boundaries
    assert found == {ids["env"], ids["tool"], ids["inside"]}
    assert {h["id"] for h in search(store, ".env", role_filter=["tool"])} == {ids["tool"]}
    assert {h["id"] for h in search(store, "NV.EX")} == {ids["env"]}


def test_pages_run_across_the_literal_and_the_word_tiers(rows: Any) -> None:
    store, ids = rows
    everything = [h["id"] for h in search(store, "docker-rm", limit=50)]
    # the literal (either case), newest first, then the original's phrase "docker rm"
    assert everything == [ids["compound2"], ids["compound"], ids["words"]]
    pages = [
        h["id"]
        for n in range(len(everything))
        for h in search(store, "docker-rm", limit=1, offset=n)
    ]
    assert pages == everything
    assert [h["id"] for h in search(store, "docker-rm", limit=2, offset=1)] == everything[1:]
    oldest = [h["id"] for h in search(store, "docker-rm", sort="oldest", limit=2)]
    assert oldest == [ids["compound"], ids["compound2"]]


def test_short_literals(rows: Any) -> None:
    store, ids = rows
    messages = MessageRepository(store)
    pct = messages.append_message("s", "user", "disk at 95% now")
    arrow = messages.append_message("s", "tool", "a->b", tool_name="x")
    assert {h["id"] for h in search(store, "%")} == {pct}  # punctuation only: a scan
    assert {h["id"] for h in search(store, "->")} == {arrow}
    assert {h["id"] for h in search(store, "95%")} == {pct}
    # shorter than a trigram: found where it starts on a word boundary only
    assert {h["id"] for h in search(store, "5%")} == set()


@pytest.mark.sqlite_only
def test_literals_in_a_range_a_backfill_has_not_indexed_yet(store: Store) -> None:
    """Rows the triggers skipped (ids in (progress, high water]) are found by the
    pending-range top-up, literals included (docs/reference/behaviour.md 6.5)."""
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    indexed = messages.append_message("s", "user", "edit src/main.py now")
    store.write(
        lambda s: s.execute(
            sa.text(
                "INSERT INTO state_meta (key, value) VALUES"
                " ('fts_rebuild_high_water', :h), ('fts_rebuild_progress', :p)"
            ),
            {"h": str(indexed + 100), "p": str(indexed)},
        )
    )
    pending = messages.append_message("s", "assistant", "and src/main.py again")
    with store.read() as session:
        conn = session
        in_index = conn.execute(
            sa.text(
                "SELECT count(*) FROM messages_fts_trigram WHERE messages_fts_trigram MATCH"
                " '\"src/main.py\"'"
            )
        ).scalar()
    assert in_index == 1  # the triggers left the second one for the backfill
    assert {h["id"] for h in search(store, "src/main.py")} == {indexed, pending}


# --------------------------------------------------------------------------- order


FLAG = "--force-with-lease"


@pytest.fixture
def stacked(store: Store) -> tuple[Store, list[dict[str, Any]]]:
    return _stack(store)


def _stack(store: Store) -> tuple[Store, list[dict[str, Any]]]:
    """150 messages, the literal in every third (a tool row every seventh, where it
    stands on word boundaries), stamped so that timestamp order is the reverse of the
    order they were stored in."""
    SessionRepository(store).create_session("s", "cli")
    rows: list[dict[str, Any]] = []
    for n in range(150):
        tool = n % 7 == 0
        text = f"step {n}: git push {FLAG} origin" if n % 3 == 0 else f"step {n}: git push"
        rows.append(
            {
                "role": "tool" if tool else ("user", "assistant")[n % 2],
                "content": text,
                "tool_name": "shell" if tool else None,
                "timestamp": 10_000.0 - n,
            }
        )
    ids = MessageRepository(store).append_messages("s", rows)
    stored = [{**row, "id": id_} for row, id_ in zip(rows, ids, strict=True)]
    return store, stored


def _holding(stored: list[dict[str, Any]], literal: str) -> list[dict[str, Any]]:
    return [row for row in stored if literal in row["content"]]


@pytest.mark.parametrize(
    ("window", "widest"),
    [
        (10, 0),
        (40, 0),
        (10**9, 0),
        # 8 hits in the first 24 ids: a second window of up to 192 ids, or of 50 that
        # falls short of a page of 20 and is followed by the whole table
        (24, 16_384),
        (24, 50),
    ],
)
def test_a_literal_page_is_the_most_recently_stored_first_whatever_the_window(
    stacked: Any, window: int, widest: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page cut from a window of the newest ids (when it holds a whole page) is the
    page the whole table gives; a window short of a page falls back to a second, wider
    window where the backend has one, then to the table."""
    from hermes_store.search.postgres_fts import PostgresSearch
    from hermes_store.search.sqlite_fts import SqliteSearch

    # what the backend chose after each short window
    windows = record_wider_windows(monkeypatch, SqliteSearch, PostgresSearch)
    for backend in (SqliteSearch, PostgresSearch):
        monkeypatch.setattr(backend, "literal_window", window)
        monkeypatch.setattr(backend, "literal_widest_window", widest)
    store, stored = stacked
    expected = [row["id"] for row in reversed(_holding(stored, FLAG))]
    assert len(expected) == 50
    for limit, offset in [(5, 0), (10, 5), (20, 0), (50, 0), (60, 0), (7, 44)]:
        found = [h["id"] for h in search(store, FLAG, limit=limit, offset=offset)]
        assert found == expected[offset : offset + limit], (limit, offset)
    tools = [row["id"] for row in reversed(_holding(stored, FLAG)) if row["role"] == "tool"]
    assert [h["id"] for h in search(store, FLAG, role_filter=["tool"], limit=50)] == tools
    # with the words too: the literal's rows first, then rows holding only the words
    mixed = [h["id"] for h in search(store, f"{FLAG} origin", limit=50)]
    assert mixed == expected
    if widest == 16_384:
        assert 24 * 8 in windows  # a page of 20 after 8 hits in 24 ids: 3 x 60 ids
    if widest == 50:
        assert 50 in windows


@pytest.mark.parametrize("sort", [None, "newest", "oldest"])
@pytest.mark.parametrize(
    ("window", "widest", "by_index"),
    [
        (10, 0, (30, 60)),  # windows read through the indexes, the page kept in them
        (24, 16_384, (30, 60)),  # a density window first
        (12, 0, ()),  # the whole table after the first window
        (200, 0, ()),  # one window holds every row
    ],
)
def test_a_window_at_either_end_of_a_pruned_table_gives_the_whole_tables_page(
    stacked: Any,
    monkeypatch: pytest.MonkeyPatch,
    sort: str | None,
    window: int,
    widest: int,
    by_index: tuple[int, ...],
) -> None:
    """With the oldest rows deleted (the lowest id past 1), every window series at
    either end of the table gives the page the whole table gives: in id order, or the
    limits.TIME_WINDOW hits at the sort's end of the table by timestamp."""
    from hermes_store.search.postgres_fts import PostgresSearch
    from hermes_store.search.sqlite_fts import SqliteSearch

    store, stored = stacked
    with store.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM messages WHERE id < :first"), {"first": stored[7]["id"]})
    kept = _holding(stored[7:], FLAG)  # the first hit kept is the lowest id left
    assert kept[0]["id"] == stored[9]["id"]
    monkeypatch.setattr(limits, "TIME_WINDOW", 12)
    for backend in (SqliteSearch, PostgresSearch):
        monkeypatch.setattr(backend, "literal_window", window)
        monkeypatch.setattr(backend, "literal_widest_window", widest)
    monkeypatch.setattr(PostgresSearch, "literal_index_windows", by_index)
    by_id = sorted(kept, key=lambda row: row["id"])
    for limit in (5, 12, 20):
        if sort is None:
            expected = [row["id"] for row in reversed(by_id)][:limit]
        else:
            newest = sort == "newest"
            end = by_id[-max(12, limit) :] if newest else by_id[: max(12, limit)]
            by_time = sorted(end, key=lambda row: (row["timestamp"], row["id"]), reverse=newest)
            expected = [row["id"] for row in by_time][:limit]
        found = [h["id"] for h in search(store, FLAG, sort=sort, limit=limit)]
        assert found == expected, (limit, sort)


def test_in_a_large_table_two_hits_size_the_second_window(
    pg_fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL (SQLite's indexes seek to the floor: no density window there): where
    the table's estimate is past literal_sparse_table_rows, a first window with two hits
    sizes the second (read row by row); the pages stay the ones the whole table gives."""
    from hermes_store.search.postgres_fts import PostgresSearch

    store, stored = _stack(Store(pg_fresh_db))
    windows = record_wider_windows(monkeypatch, PostgresSearch)
    monkeypatch.setattr(PostgresSearch, "literal_window", 6)  # 2 hits in the newest 6
    monkeypatch.setattr(PostgresSearch, "literal_sizing_hits", 1_000)  # never on its own
    expected = [row["id"] for row in reversed(_holding(stored, FLAG))]
    found = [h["id"] for h in search(store, FLAG, limit=10)]
    assert found == expected[:10] and windows[0] == 65_536  # a small table: the indexes

    windows.clear()
    monkeypatch.setattr(PostgresSearch, "literal_sparse_table_rows", 100)  # 150 rows here
    found = [h["id"] for h in search(store, FLAG, limit=10)]
    assert found == expected[:10] and windows[0] == 6 * 15  # 3 x 10 / 2 windows of 6
    store.close()


def test_a_density_window_where_the_first_showed_it_then_windows_by_the_indexes() -> None:
    from hermes_store.search.postgres_fts import PostgresSearch
    from hermes_store.search.sqlite_fts import SqliteSearch

    postgres = PostgresSearch(None)  # type: ignore[arg-type]  # no statement is run
    table_rows = 1_000_000.0
    postgres._table_rows = lambda: table_rows  # type: ignore[method-assign]
    assert postgres.wider_window(1_024, 10, 20) == 1_024 * 6  # 3 x 20 / 10 windows
    assert postgres.wider_window(1_024, 8, 100) == 16_384  # at most the widest
    # too few hits to tell the density, or after the density window: the indexes' windows
    assert postgres.wider_window(1_024, 7, 20) == 65_536
    assert postgres.wider_window(6_144, 19, 20) == 65_536
    assert postgres.wider_window(65_536, 19, 20) == 524_288
    assert postgres.wider_window(524_288, 19, 20) is None  # then the whole table
    # row by row up to 16,384 ids, through the indexes above the floor past it
    assert not postgres.literal_window_by_index(16_384)
    assert postgres.literal_window_by_index(65_536)
    assert SqliteSearch(None).wider_window(8_192, 100, 200) is None  # type: ignore[arg-type]
    # in a table of more than 3M rows two hits are enough (the indexes' windows cost
    # what the literal's posting lists hold there)
    table_rows = 10_000_000.0
    assert postgres.wider_window(1_024, 3, 20) == 16_384
    assert postgres.wider_window(1_024, 2, 5) == 1_024 * 8
    assert postgres.wider_window(1_024, 1, 20) == 65_536


def test_sort_newest_and_oldest_order_literal_hits_by_timestamp(stacked: Any) -> None:
    store, stored = stacked
    by_time = sorted(_holding(stored, FLAG), key=lambda row: row["timestamp"], reverse=True)
    newest = [h["id"] for h in search(store, FLAG, sort="newest", limit=8)]
    assert newest == [row["id"] for row in by_time[:8]]
    oldest = [h["id"] for h in search(store, FLAG, sort="oldest", limit=8)]
    assert oldest == [row["id"] for row in reversed(by_time)][:8]
    # stored order is the reverse here: the default order differs from "newest"
    assert [h["id"] for h in search(store, FLAG, limit=8)] != newest


@pytest.mark.parametrize("sort", ["newest", "oldest"])
def test_a_time_sort_orders_the_literal_hits_at_its_end_by_timestamp(
    stacked: Any, monkeypatch: pytest.MonkeyPatch, sort: str
) -> None:
    """sort="newest" on a literal keeps the newest limits.TIME_WINDOW hits in id order
    (found through the windows of the newest ids, whose work the page bounds) and orders
    them by timestamp, as the other time-ordered routes do; sort="oldest" the oldest,
    from windows of the oldest ids. With no more hits than that, the page is every hit
    by timestamp."""
    from hermes_store.search import literal

    store, stored = stacked
    newest = sort == "newest"
    holding = _holding(stored, FLAG)  # 50 rows, timestamps the reverse of ids
    by_time = sorted(holding, key=lambda row: row["timestamp"], reverse=newest)
    assert [h["id"] for h in search(store, FLAG, sort=sort, limit=8)] == [
        row["id"] for row in by_time[:8]
    ]
    from hermes_store.search.postgres_fts import PostgresSearch
    from hermes_store.search.sqlite_fts import SqliteSearch

    monkeypatch.setattr(limits, "TIME_WINDOW", 10)
    for backend in (SqliteSearch, PostgresSearch):
        monkeypatch.setattr(backend, "literal_window", 30)  # 30 ids at either end: 10 hits
    pages: list[int | None] = []  # the bound of each statement the tier ran
    original = literal._page

    def recorded(*args: Any) -> list[Any]:
        pages.append(None if args[5] is None else args[5][1])
        return original(*args)

    monkeypatch.setattr(literal, "_page", recorded)
    by_id = sorted(holding, key=lambda row: row["id"])
    ten = by_id[-10:] if newest else by_id[:10]
    expected = sorted(ten, key=lambda row: row["timestamp"], reverse=newest)
    assert [h["id"] for h in search(store, FLAG, sort=sort, limit=4)] == [
        row["id"] for row in expected[:4]
    ]
    ids = [row["id"] for row in stored]
    assert pages == [max(ids) - 30 if newest else min(ids) - 1 + 30]  # that window only


def test_a_literal_is_found_as_a_whole_not_as_its_pieces(store: Store) -> None:
    """The trigram index is asked for the literal's pieces; the row must hold the whole
    literal, in one column."""
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    whole = messages.append_message("s", "user", "run xx--force-with-leasexx now")
    messages.append_message("s", "user", "--force then -with-lease apart")
    messages.append_message("s", "user", "-with-lease--force reversed")
    messages.append_message(
        "s",
        "assistant",
        "call --force",
        tool_calls=[{"id": "c1", "function": {"name": "x", "arguments": "-with-lease"}}],
    )
    assert [h["id"] for h in search(store, FLAG)] == [whole]


def test_only_ascii_letters_are_folded_even_where_lower_would_fold_into_ascii(
    store: Store,
) -> None:
    """The KELVIN SIGN (U+212A) and the dotted capital I (U+0130) lowercase to `k` and
    `i`: a literal's ASCII letters must still match only ASCII letters (query.fold), the
    same on both backends, in rows of ASCII text and in rows holding other characters."""
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    kelvin = messages.append_message("s", "user", "status o\u212a-1 at 300 \u212a")
    dotted = messages.append_message("s", "user", "open \u0130n.txt now")
    plain = messages.append_message("s", "user", "status OK-1 and In.TXT")
    accented = messages.append_message("s", "user", "été: status ok-1, then in.txt")
    # the literal tier alone: the original's reading that follows it finds the KELVIN
    # SIGN row too, as FTS5 and tsvector fold it to the word `ok`
    assert _literal_tier(store, "ok-1") == {plain, accented}
    assert _literal_tier(store, "in.txt") == {plain, accented}
    assert _literal_tier(store, "o\u212a-1") == {kelvin}
    assert _literal_tier(store, "\u0130n.txt") == {dotted}


def _literal_tier(store: Store, query: str) -> set[int]:
    from hermes_store.search.backend import Filters, backend_for
    from hermes_store.search.literal import literal_hits

    with store.read() as conn:
        filters = Filters(None, None, None, False)
        hits = literal_hits(backend_for(conn), read_query(query), filters, None, 50)
    return {h["id"] for h in hits}


def test_a_literal_is_checked_whole_where_the_index_is_asked_for_less(store: Store) -> None:
    """PostgreSQL asks pg_trgm for the literal's words without their edges (`%config%
    zephyr%toml%`); SQLite asks FTS5 for its trigrams side by side: rows holding the
    words in another shape are candidates, never hits, on both backends."""
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    add = messages.append_message
    hits = {
        add("s", "user", "edit ~/.config/zephyr.toml first"),
        add("s", "assistant", "EDIT ~/.CONFIG/Zephyr.TOML then"),  # ASCII case
        add("s", "user", "x~/.config/zephyr.tomlx"),  # inside words
        add("s", "tool", "cat ~/.config/zephyr.toml", tool_name="shell"),  # word edges
    }
    add("s", "user", "reconfigure ~/.configs/zephyr.toml")
    add("s", "user", "config zephyr toml, ~/.config and zephyr.toml")
    add("s", "user", "~/.config/zephyr_toml")
    add("s", "tool", "x~/.config/zephyr.tomlx", tool_name="shell")  # tool output: words only
    assert _literal_tier(store, "~/.config/zephyr.toml") == hits


@pytest.mark.parametrize(
    ("literal", "stored", "not_stored"),
    [
        ("50%_off", "sale: 50%_OFF today", ["50xoff", "50% off", "50%-off", "50%__off"]),
        ("c:\\tmp_x", "at C:\\TMP_X now", ["c:\\tmpax", "c:tmp_x", "c:\\\\tmp_x"]),
        ("%%%", "odd %%% row", ["odd %% row", "% % %"]),
    ],
)
def test_like_wildcards_and_the_escape_in_a_literal_are_taken_literally(
    store: Store, literal: str, stored: str, not_stored: list[str]
) -> None:
    SessionRepository(store).create_session("s", "cli")
    messages = MessageRepository(store)
    hit = messages.append_message("s", "user", stored)
    for text in not_stored:
        messages.append_message("s", "user", text)
    assert _literal_tier(store, literal) == {hit}


@pytest.mark.parametrize(
    ("literal", "asked"),
    [
        ("~/.config/zephyr.toml", "%config%zephyr%toml%"),
        ("ops@zephyr.io", "%ops%zephyr.io%"),  # `io` has no inner trigram: kept whole
        ("don't", "%don't%"),
        ("99.5%", "%99.5\\%%"),
        ("100%_done", "%100%done%"),
        ("-->", "%-->%"),
        ("数据库。x", "%数据库。x%"),
    ],
)
def test_pg_trgm_is_asked_for_the_inner_trigrams_of_long_words(literal: str, asked: str) -> None:
    from hermes_store.search.postgres_fts import _index_pattern

    assert _index_pattern(literal) == asked


def test_a_literal_window_is_bounded_at_one_end_only() -> None:
    """A window of the newest ids is the ids above :floor, of the oldest those up to
    :ceiling: a second bound that is always true changes PostgreSQL's plan (the word
    index takes it as a condition and the primary key's range is no longer intersected
    with the other indexes: 50 -> 176 ms for a 65,536-id window at 10M rows)."""
    from sqlalchemy import column
    from sqlalchemy.dialects import postgresql, sqlite

    from hermes_store.search.backend import id_window
    from hermes_store.search.postgres_fts import PostgresSearch
    from hermes_store.search.sqlite_fts import SqliteSearch

    pg_dialect = postgresql.psycopg.dialect(paramstyle="named")  # type: ignore[no-untyped-call]
    lite_dialect = sqlite.dialect(paramstyle="named")
    assert str(id_window(column("id"), "newest").compile(dialect=lite_dialect)) == "id > :floor"
    assert str(id_window(column("id"), "oldest").compile(dialect=lite_dialect)) == "id <= :ceiling"
    postgres = PostgresSearch(None)  # type: ignore[arg-type]  # no statement is run
    for edge, bound, other in (
        ("newest", "> :floor", ":ceiling"),
        ("oldest", "<= :ceiling", ":floor"),
    ):
        ids = postgres.literal_ids("ops@zephyr.io", {}, trigram=True, words=True, edge=edge)
        sql = " ".join(str(ids.compile(dialect=pg_dialect)).split())
        assert f"WHERE messages.id {bound} LIMIT ALL OFFSET 0) AS m" in sql, sql
        assert other not in sql
    lite = SqliteSearch(None)  # type: ignore[arg-type]
    found = lite.word_ids([Term("zephyr", prefix=False, phrase=False)], {}, edge="oldest")
    sql = " ".join(str(found.compile(dialect=lite_dialect)).split())
    assert sql.endswith("AND messages_fts.rowid <= :ceiling"), sql


def test_the_id_range_is_read_from_the_primary_key(store: Store) -> None:
    """The literal tier reads the lowest and highest ids before its windows: two seeks
    of the primary key on either backend, never a scan of the table (SQLite scans it
    for min() and max() in one SELECT)."""
    from hermes_store.search.backend import ID_RANGE_SQL

    SessionRepository(store).create_session("s", "cli")
    ids = MessageRepository(store).append_messages(
        "s", [{"role": "user", "content": f"line {n}"} for n in range(5)]
    )
    with store.read() as conn:
        assert tuple(conn.execute(sa.text(ID_RANGE_SQL)).one()) == (min(ids), max(ids))
        explain = "EXPLAIN QUERY PLAN " if store.dialect == "sqlite" else "EXPLAIN "
        rows = conn.execute(sa.text(explain + ID_RANGE_SQL))
        plan = " ".join(str(row[-1]) for row in rows)
    assert "SCAN messages" not in plan and "Seq Scan" not in plan, plan
