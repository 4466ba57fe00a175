"""Redaction (issue 39, item 3): a policy replaces secrets before a message's fields are
stored on every write path, so neither the rows nor the FTS indexes hold them; and
RedactionRepository.redact_stored replaces them in what is stored, a batch at a time,
resumably, with the search entries of changed rows rebuilt (docs/redaction.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers.statements import variables_held_to
from sqlalchemy import text

from hermes_store import (
    InvalidRedactionPattern,
    MaintenanceRepository,
    MessageRepository,
    RedactionPolicy,
    RedactionRepository,
    SessionRepository,
    Store,
)
from hermes_store.aio import AsyncStore
from hermes_store.compat import SessionDB
from hermes_store.errors import InvalidInput
from hermes_store.repositories.redaction import CURSOR_KEY

AWS = "AKIAIOSFODNN7EXAMPLE"
OPENAI = "sk-proj-" + "Q" * 40
ANTHROPIC = "sk-ant-api03-" + "w" * 40
GITHUB = "ghp_" + "R" * 36
GITHUB_PAT = "github_pat_" + "T" * 30
SLACK = "xoxb-123456789012-abcdefABCDEF"
GOOGLE = "AIza" + "G" * 35
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "E" * 10
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\n-----END OPENSSH PRIVATE KEY-----"
)

#: (text holding a secret, the secret, the pattern that must replace it)
CASES = [
    (f"key {OPENAI} here", OPENAI, "openai-key"),
    (f"key {ANTHROPIC} here", ANTHROPIC, "anthropic-key"),
    (f"aws {AWS} here", AWS, "aws-access-key"),
    (f"gh {GITHUB} here", GITHUB, "github-token"),
    (f"gh {GITHUB_PAT} here", GITHUB_PAT, "github-token"),
    (f"slack {SLACK} here", SLACK, "slack-token"),
    (f"maps {GOOGLE} here", GOOGLE, "google-api-key"),
    (
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig12345",
        "eyJhbGciOiJIUzI1NiJ9",
        "bearer-token",
    ),
    (f"id_ed25519:\n{PRIVATE_KEY}\nend", "b3BlbnNzaC1rZXktdjEA", "private-key"),
    ("postgresql://bob:hunter2secret@db.example/app", "hunter2secret", "url-password"),
    ('config {"api_key": "abcd1234efgh5678"}', "abcd1234efgh5678", "generic-secret"),
    ("PASSWORD=correcthorsebattery", "correcthorsebattery", "generic-secret"),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET, "aws-secret-key"),
    (f"[default]\naws_secret_access_key = {AWS_SECRET}\n", AWS_SECRET, "aws-secret-key"),
    ("export PGPASSWORD=hunter2x\npsql", "hunter2x", "env-secret"),
    ("MYSQL_PWD='pass phrase 9'", "pass phrase 9", "env-secret"),
    ('HERMES_STORE_KEY="k3y-Material-01"\n', "k3y-Material-01", "env-secret"),
    ("DB_PASSWD=s3cr3t-value  # comment", "s3cr3t-value", "env-secret"),
    ("STRIPE_API_TOKEN=tok_live_abc", "tok_live_abc", "env-secret"),
]


@pytest.mark.parametrize(("raw", "secret", "name"), CASES, ids=[c[2] for c in CASES])
def test_builtin_pattern_replaces_the_secret_only(raw: str, secret: str, name: str) -> None:
    counts: Counter[str] = Counter()
    redacted = RedactionPolicy().redact_text(raw, counts)
    assert secret not in redacted
    assert f"[REDACTED:{name}]" in redacted
    assert counts == {name: 1}
    # the text around a `secret` group stays: the scheme and user, the header name
    if name == "url-password":
        assert redacted == "postgresql://bob:[REDACTED:url-password]@db.example/app"
    # a second pass finds nothing: a marker is never matched again
    again: Counter[str] = Counter()
    assert RedactionPolicy().redact_text(redacted, again) == redacted
    assert not again


def test_ordinary_text_is_left_alone() -> None:
    prose = "ask-the-team about sk-short, the AKIA prefix, a bearer of news, https://example.com"
    counts: Counter[str] = Counter()
    assert RedactionPolicy().redact_text(prose, counts) == prose
    assert not counts


@pytest.mark.parametrize(
    "prose",
    [
        "MONKEY=banana and TURKEY=roast",
        "if X_TOKEN==other: return",
        "the SECRET_KEY setting is read at start; NUM_TOKENS=4096 is the budget",
        "GITHUB_TOKEN=$GH passes the variable on",
        "a KEY=value pair, max_token=512, PASSWORD_RESET_URL=/reset",
        "the key = the one in the drawer",
    ],
)
def test_env_assignments_of_ordinary_values_are_left_alone(prose: str) -> None:
    counts: Counter[str] = Counter()
    assert RedactionPolicy().redact_text(prose, counts) == prose
    assert not counts


def test_env_secret_leaves_the_name_and_the_next_line() -> None:
    redacted = RedactionPolicy().redact_text("A=1\nPGPASSWORD=hunter2x \nB=2")
    assert redacted == "A=1\nPGPASSWORD=[REDACTED:env-secret] \nB=2"


def test_user_pattern_with_and_without_a_secret_group() -> None:
    policy = RedactionPolicy(
        builtin=False,
        patterns={"ticket": r"TICKET-\d{4}", "pin": r"pin (?P<secret>\d{4,})"},
    )
    assert policy.names == ("ticket", "pin")
    assert (
        policy.redact_text("see TICKET-1234, pin 98765")
        == "see [REDACTED:ticket], pin [REDACTED:pin]"
    )


@pytest.mark.parametrize(
    ("patterns", "named"),
    [
        ({"broken": "(unclosed"}, "broken"),
        ({"empty-match": "x*"}, "empty-match"),
        ({"Bad Name": "x"}, "Bad Name"),
        ({"openai-key": "dup"}, "openai-key"),
    ],
)
def test_invalid_user_pattern_is_a_typed_error_naming_it(
    patterns: dict[str, str], named: str
) -> None:
    with pytest.raises(InvalidRedactionPattern) as caught:
        RedactionPolicy(patterns=patterns)
    assert caught.value.name == named
    assert repr(named) in str(caught.value)
    assert isinstance(caught.value, InvalidInput)


def test_patterns_file_and_environment_switch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patterns = tmp_path / "patterns.txt"
    patterns.write_text("# mine\nticket=TICKET-\\d+\n\n", encoding="utf-8")
    monkeypatch.setenv("HERMES_STORE_REDACT_PATTERNS", str(patterns))
    assert RedactionPolicy.from_env().compiled == ()  # off unless switched on
    monkeypatch.setenv("HERMES_STORE_REDACT", "on")
    assert RedactionPolicy.from_env().names[-1] == "ticket"
    patterns.write_text("broken=(\n", encoding="utf-8")
    with pytest.raises(InvalidRedactionPattern, match="'broken'"):
        RedactionPolicy.from_env()
    monkeypatch.setenv("HERMES_STORE_REDACT", "maybe")
    with pytest.raises(InvalidInput, match="HERMES_STORE_REDACT='maybe': choose on or off"):
        RedactionPolicy.from_env()


# --------------------------------------------------------------------------- write paths


SECRET_MESSAGE = f"deploy with {AWS} and Authorization: Bearer abcdefghijklmnop1234"


def _stored_text(url: str) -> str:
    """Every redactable column of every message, and on PostgreSQL the word index's
    generated vector, as one text."""
    with Store(url, read_only=True) as store, store.read() as conn:
        rows = conn.execute(
            text(
                "SELECT content, api_content, tool_calls, reasoning, reasoning_content, "
                "reasoning_details, codex_reasoning_items, codex_message_items, "
                "display_metadata FROM messages"
            )
        ).all()
        out = json.dumps([list(r) for r in rows])
        if conn.dialect.name == "postgresql":
            vectors = conn.execute(text("SELECT search_vector::text FROM messages")).scalars()
            out += " ".join(str(v) for v in vectors)
    return out


def _fts_hits(url: str, needle: str) -> tuple[int, int]:
    """(messages_fts hits, messages_fts_trigram hits) for `needle`, asked of the FTS tables
    themselves."""
    with Store(url, read_only=True) as store, store.read() as conn:
        words = conn.execute(
            text("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH :q"),
            {"q": f'"{needle}"'},
        ).scalar_one()
        trigrams = conn.execute(
            text("SELECT count(*) FROM messages_fts_trigram WHERE messages_fts_trigram MATCH :q"),
            {"q": f'"{needle}"'},
        ).scalar_one()
    return int(words), int(trigrams)


def _write_every_way(store: Store) -> None:
    sessions, messages = SessionRepository(store), MessageRepository(store)
    sessions.create_session("s1", "cli")
    messages.append_message(
        "s1",
        "assistant",
        SECRET_MESSAGE,
        tool_calls=json.dumps([{"function": {"arguments": json.dumps({"key": OPENAI})}}]),
        reasoning=f"the key is {GITHUB}",
        reasoning_content=f"also {SLACK}",
        reasoning_details=[{"text": f"google {GOOGLE}"}],
        codex_message_items=[{"content": [{"text": ANTHROPIC}]}],
        display_metadata={"item": {"output": [f"ran with {OPENAI}"]}},
    )
    messages.append_message("s1", "user", [{"type": "text", "text": SECRET_MESSAGE}])
    messages.append_message("s1", "user", "plain", api_content=f"ctx {AWS}")
    messages.append_messages(
        "s1",
        [
            {
                "role": "tool",
                "content": f"env: AWS_KEY={AWS}",
                "display_metadata": json.dumps({"event": {"text": f"key {GITHUB}"}}),
            }
        ],
    )
    messages.append_message("s1", "user", "tag me")
    messages.set_latest_matching_message_display_kind(
        "s1",
        role="user",
        content="tag me",
        display_kind="note",
        display_metadata={"said": f"with {SLACK}"},
    )
    MaintenanceRepository(store).import_sessions(
        [
            {
                "id": "s2",
                "source": "cli",
                "messages": [
                    {
                        "role": "user",
                        "content": SECRET_MESSAGE,
                        "display_metadata": {"raw": f"imported {GOOGLE}"},
                    }
                ],
            }
        ]
    )


def test_every_write_path_stores_no_secret(backend_url: str) -> None:
    with Store(backend_url, redaction=RedactionPolicy()) as store:
        _write_every_way(store)
        conversation = MessageRepository(store).get_messages("s1")
    stored = _stored_text(backend_url)
    for secret in (AWS, OPENAI, GITHUB, SLACK, GOOGLE, ANTHROPIC, "abcdefghijklmnop1234"):
        assert secret not in stored
    assert "[REDACTED:aws-access-key]" in stored
    # structured values stay structured: tool calls and list content decode as before
    assert conversation[0]["tool_calls"][0]["function"]["arguments"] == json.dumps(
        {"key": "[REDACTED:openai-key]"}
    )
    assert conversation[1]["content"][0]["text"].startswith("deploy with [REDACTED:")
    # display metadata is redacted string by string and stays a JSON object
    assert conversation[0]["display_metadata"] == {
        "item": {"output": ["ran with [REDACTED:openai-key]"]}
    }
    assert conversation[3]["display_metadata"] == {
        "event": {"text": "key [REDACTED:github-token]"}
    }
    assert conversation[4]["display_metadata"] == {"said": "with [REDACTED:slack-token]"}


def test_policy_off_by_default_keeps_text_as_given(fresh_db: str) -> None:
    with Store(fresh_db) as store:
        assert store.redaction.compiled == ()
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_message("s1", "user", SECRET_MESSAGE)
    assert AWS in _stored_text(fresh_db)


@pytest.mark.usefixtures("sqlite_driver")
def test_secret_never_reaches_either_fts_index(fresh_db: str) -> None:
    with Store(fresh_db, redaction=RedactionPolicy()) as store:
        _write_every_way(store)
    assert _fts_hits(fresh_db, AWS) == (0, 0)
    assert _fts_hits(fresh_db, "IOSFODNN7EX") == (0, 0)
    assert _fts_hits(fresh_db, "REDACTED")[0] > 0


def test_facade_append_message_redacts_with_the_environment_switch(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_STORE_REDACT", "on")
    db = SessionDB(url=fresh_db)
    try:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", SECRET_MESSAGE)
        assert db.store.redaction.compiled
        # the tag looks the row up by its content, redacted as it was stored
        assert db.set_latest_matching_message_display_kind(
            "s1", role="user", content=SECRET_MESSAGE, display_kind="note"
        )
    finally:
        db.close()
    assert AWS not in _stored_text(fresh_db)


def test_async_store_takes_the_policy(backend_url: str) -> None:
    import asyncio

    async def run() -> Any:
        async with await AsyncStore.open(backend_url, redaction=RedactionPolicy()) as store:
            await store.sessions.create_session("s1", "cli")
            await store.messages.append_message("s1", "user", SECRET_MESSAGE)
            return await store.redaction.redact_stored()

    found = asyncio.run(run())
    assert found.replacements == 0  # stored redacted already
    assert AWS not in _stored_text(backend_url)


def test_surrogates_and_nul_bytes_survive_redaction(backend_url: str) -> None:
    raw = f"a\x00b {AWS} \ud800 c \x00json:not-json"
    with Store(backend_url) as plain:
        SessionRepository(plain).create_session("s1", "cli")
        MessageRepository(plain).append_message("s1", "user", raw)
        unredacted = MessageRepository(plain).get_messages("s1")[0]["content"]
    with Store(backend_url, redaction=RedactionPolicy()) as store:
        MessageRepository(store).append_message("s1", "user", raw)
        redacted = MessageRepository(store).get_messages("s1")[1]["content"]
    assert redacted == unredacted.replace(AWS, "[REDACTED:aws-access-key]")
    assert "\x00" in redacted and "\ufffd" in redacted


# --------------------------------------------------------------------------- stored rows


def _store_secrets(url: str, count: int) -> None:
    with Store(url, redaction=RedactionPolicy.off()) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_messages(
            "s1",
            [
                {"role": "user", "content": f"message {i} {AWS}" if i % 3 == 0 else f"clean {i}"}
                for i in range(count)
            ],
        )


@pytest.mark.usefixtures("sqlite_driver")
def test_redact_stored_rebuilds_both_fts_indexes(fresh_db: str) -> None:
    _store_secrets(fresh_db, 30)
    assert _fts_hits(fresh_db, AWS) == (10, 10)
    with Store(fresh_db) as store:
        repo = RedactionRepository(store, RedactionPolicy())
        dry = repo.redact_stored(batch=7)
        assert (dry.counts["aws-access-key"], dry.rows_matched, dry.applied) == (10, 10, False)
        assert repo.redaction_cursor() is None  # a dry run writes nothing
        assert _fts_hits(fresh_db, AWS) == (10, 10)
        done = repo.redact_stored(batch=7, apply=True)
    assert (done.counts["aws-access-key"], done.rows_matched, done.complete) == (10, 10, True)
    assert _fts_hits(fresh_db, AWS) == (0, 0)
    assert _fts_hits(fresh_db, "IOSFODNN7EX") == (0, 0)
    assert _fts_hits(fresh_db, "REDACTED") == (10, 10)
    assert AWS not in _stored_text(fresh_db)


def test_redact_stored_on_both_backends_and_search_follows(backend_url: str) -> None:
    from hermes_store import SearchRepository

    _store_secrets(backend_url, 12)
    with Store(backend_url) as store:
        assert len(SearchRepository(store).search_messages(AWS)) == 4
        RedactionRepository(store, RedactionPolicy()).redact_stored(apply=True, batch=5)
        assert SearchRepository(store).search_messages(AWS) == []
        assert len(SearchRepository(store).search_messages("REDACTED")) == 4
    assert AWS not in _stored_text(backend_url)


class _Interrupted(Exception):
    pass


def test_an_interrupted_run_resumes_where_it_stopped(backend_url: str) -> None:
    _store_secrets(backend_url, 40)
    policy = RedactionPolicy()
    with Store(backend_url) as store:
        repo = RedactionRepository(store, policy)

        def stop_after_two(run: Any) -> None:
            if run.rows_scanned >= 10:
                raise _Interrupted

        with pytest.raises(_Interrupted):
            repo.redact_stored(apply=True, batch=5, progress=stop_after_two)
        cursor = repo.redaction_cursor()
        assert cursor is not None and cursor[0] == policy.fingerprint
        stopped_at = cursor[1]
        assert stopped_at > 0
        rest = repo.redact_stored(apply=True, batch=5)
        assert rest.resumed_after == stopped_at
        with store.read() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM messages WHERE content LIKE :s"), {"s": f"%{AWS}%"}
            ).scalar_one()
            marked = conn.execute(
                text("SELECT count(*) FROM messages WHERE content LIKE '%[REDACTED:%'")
            ).scalar_one()
        assert (left, marked) == (0, 14)
        # the rows before the cursor were not read again, and a rerun finds nothing new
        assert rest.rows_scanned == 40 - stopped_at
        again = repo.redact_stored(apply=True)
        assert (again.rows_scanned, again.replacements) == (0, 0)
        # a full walk from the start finds nothing either
        assert repo.redact_stored(restart=True).replacements == 0
        # another policy does not take this one's progress
        other = RedactionRepository(store, RedactionPolicy(patterns={"clean": r"clean \d+"}))
        assert other.redact_stored().counts["clean"] == 26
        with store.read() as conn:
            key = conn.execute(
                text("SELECT value FROM state_meta WHERE key = :k"), {"k": CURSOR_KEY}
            ).scalar_one()
        assert key.startswith(policy.fingerprint)


def test_redact_stored_refuses_an_empty_policy_and_bad_batch(fresh_db: str) -> None:
    with Store(fresh_db) as store:
        with pytest.raises(InvalidInput, match="off"):
            RedactionRepository(store).redact_stored()
        with pytest.raises(InvalidInput, match="batch"):
            RedactionRepository(store, RedactionPolicy()).redact_stored(batch=0)


def test_stored_json_that_does_not_parse_is_redacted_as_text(fresh_db: str) -> None:
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_message("s1", "user", "x")
        store.write(
            lambda c: c.execute(
                text("UPDATE messages SET content = :v, tool_calls = :t"),
                {"v": f"\x00json:[broken {AWS}", "t": f"not json {AWS}"},
            )
        )
        RedactionRepository(store, RedactionPolicy()).redact_stored(apply=True)
        with store.read() as conn:
            row = conn.execute(text("SELECT content, tool_calls FROM messages")).one()
    assert row[0] == "\x00json:[broken [REDACTED:aws-access-key]"
    assert row[1] == "not json [REDACTED:aws-access-key]"


def test_redact_stored_reaches_display_metadata_and_keeps_it_json(backend_url: str) -> None:
    item = {"type": "message", "content": [{"type": "output_text", "text": f"use {AWS}"}]}
    with Store(backend_url, redaction=RedactionPolicy.off()) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_message(
            "s1", "assistant", "said", display_metadata={"openai_agents_item": item}
        )
    assert AWS in _stored_text(backend_url)
    with Store(backend_url) as store:
        run = RedactionRepository(store, RedactionPolicy()).redact_stored(apply=True)
        stored = MessageRepository(store).get_messages("s1")[0]["display_metadata"]
    assert run.counts == {"aws-access-key": 1}
    assert stored["openai_agents_item"]["content"][0]["text"] == "use [REDACTED:aws-access-key]"
    assert AWS not in _stored_text(backend_url)


def test_the_fingerprint_covers_the_redacted_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run from before a field was added to the list does not skip that field."""
    from hermes_store import redaction

    policy = RedactionPolicy()
    before = policy.fingerprint
    monkeypatch.setattr(redaction, "REDACTED_FIELDS", redaction.REDACTED_FIELDS[:-1])
    assert policy.fingerprint != before


@pytest.mark.usefixtures("sqlite_driver")  # the limit is held differently per driver
def test_a_large_batch_binds_its_ids_a_chunk_at_a_time(fresh_db: str) -> None:
    """A batch with more hits than SQLite allows variables in one statement: the write
    re-reads them a chunk at a time (here the historic limit, 999, below the batch). Where
    the driver's connections have `setlimit` (the standard library's), SQLite itself
    refuses a statement past it; on every driver (pysqlite3 has no `setlimit`), each
    statement the store sends is held to it by its count of bound variables."""
    with Store(fresh_db, redaction=RedactionPolicy.off()) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_messages(
            "s1", [{"role": "user", "content": f"m {i} {AWS}"} for i in range(1200)]
        )
    with Store(fresh_db) as store:
        bound = variables_held_to(store)
        store.dispose()  # the connections opened so far had no limit
        run = RedactionRepository(store, RedactionPolicy()).redact_stored(apply=True, batch=1200)
    assert run.rows_matched == 1200
    assert bound and max(bound) <= 999
    assert AWS not in _stored_text(fresh_db)


@pytest.mark.parametrize("journal", ["wal", "delete"])
def test_redact_stored_beside_a_writer_loses_no_write_on_sqlite(
    fresh_db: str, journal: str, sqlite_driver: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In both journal modes (every store of the test keeps the file in it), on both
    SQLite drivers."""
    from helpers.databases import set_journal_mode

    from hermes_store.config import JOURNAL_ENV

    monkeypatch.setenv(JOURNAL_ENV, journal)
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), journal)
    _redact_beside_a_writer(fresh_db)
    with Store(fresh_db) as store:
        mode = store.read(lambda conn: conn.execute(text("PRAGMA journal_mode")).scalar_one())
    assert mode == journal


def test_redact_stored_beside_a_writer_loses_no_write_on_postgresql(pg_fresh_db: str) -> None:
    _redact_beside_a_writer(str(pg_fresh_db))


def _redact_beside_a_writer(backend_url: str) -> None:
    """A writer appending (secrets included, with no policy, as the original Hermes would)
    while a run applies in small batches: every append lands, nothing stored before the
    run started keeps a secret, and the next run redacts what the writer added."""
    import threading

    _store_secrets(backend_url, 60)
    stop = threading.Event()
    appended: list[int] = []

    def writer() -> None:
        with Store(backend_url, redaction=RedactionPolicy.off()) as store:
            messages = MessageRepository(store)
            while not stop.is_set() and len(appended) < 200:
                appended.append(messages.append_message("s1", "user", f"late {AWS}"))

    thread = threading.Thread(target=writer)
    with Store(backend_url) as store:
        repo = RedactionRepository(store, RedactionPolicy())
        thread.start()
        try:
            first = repo.redact_stored(apply=True, batch=3)
        finally:
            stop.set()
            thread.join()
        second = repo.redact_stored(apply=True, batch=50)
        with store.read() as conn:
            total = conn.execute(text("SELECT count(*) FROM messages")).scalar_one()
            left = conn.execute(
                text("SELECT count(*) FROM messages WHERE content LIKE :s"), {"s": f"%{AWS}%"}
            ).scalar_one()
    assert total == 60 + len(appended)
    assert left == 0
    assert first.counts["aws-access-key"] + second.counts["aws-access-key"] == 20 + len(appended)
    assert second.resumed_after == first.last_id
