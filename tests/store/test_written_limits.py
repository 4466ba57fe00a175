"""A small LIMIT is written into the SQL of the reads that page (`_paging.written`): SQLite
prepares a statement holding a bound LIMIT again on every execution. The statement is
built once per limit and kept in a bounded cache; a large or no limit stays bound; a
limit is an int before it is written, so a value that is not a number is refused as it
was when it was bound. On both SQLite drivers and in both journal modes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from helpers.statements import built, sent

from hermes_store.config import JOURNAL_ENV
from hermes_store.repositories import messages as messages_module
from hermes_store.repositories._paging import MAX_WRITTEN, limit_of, written
from hermes_store.repositories._preview import SKILL_INVOCATION_PREFIX
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

pytestmark = pytest.mark.usefixtures("sqlite_driver")


@pytest.fixture
def filled(journal_db: str, journal: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    """A store on a file in the `journal` mode of the run, with session s1 of 12 messages."""
    monkeypatch.setenv(JOURNAL_ENV, journal)
    store = Store(journal_db)
    SessionRepository(store).create_session("s1", "cli")
    MessageRepository(store).append_messages(
        "s1", [{"role": "user", "content": f"m{n}"} for n in range(12)]
    )
    yield store
    store.close()


def _reads(statements: list[str]) -> list[str]:
    return [s for s in statements if "FROM messages" in s]


def test_newest_messages_send_their_limit_written_in(filled: Store) -> None:
    repo = MessageRepository(filled)
    everything = repo.get_newest_messages("s1", -1)
    with sent(filled) as statements:
        three = repo.get_newest_messages("s1", 3)
        as_text = repo.get_newest_messages("s1", "4")  # type: ignore[arg-type]
        none = repo.get_newest_messages("s1", 0)
    reads = _reads(statements)
    assert len(reads) == 3
    assert reads[0].endswith("LIMIT 3 OFFSET 0"), reads[0]
    assert reads[1].endswith("LIMIT 4 OFFSET 0"), reads[1]
    assert reads[2].endswith("LIMIT 0 OFFSET 0"), reads[2]
    assert three == everything[-3:] and len(as_text) == 4 and none == []


def test_a_large_or_no_limit_stays_bound(filled: Store) -> None:
    repo = MessageRepository(filled)
    with sent(filled) as statements:
        large = repo.get_newest_messages("s1", MAX_WRITTEN + 1)
        unlimited = repo.get_newest_messages("s1", -1)
        written_largest = repo.get_newest_messages("s1", MAX_WRITTEN)
    reads = _reads(statements)
    assert "LIMIT ?" in reads[0] and "LIMIT ?" in reads[1], reads
    assert f"LIMIT {MAX_WRITTEN} " in reads[2], reads[2]
    assert large == unlimited == written_largest and len(large) == 12


def test_statements_per_limit_are_built_once_in_a_bounded_cache(
    filled: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = MessageRepository(filled)
    repo.get_newest_messages("s1", 7)
    with built(monkeypatch) as names:
        repo.get_newest_messages("s1", 7)
    assert names == []  # the statement of limit 7 was kept
    cache = messages_module._newest_page
    maxsize = cache.cache_info().maxsize
    assert maxsize is not None
    for limit in range(1, maxsize + 21):
        repo.get_newest_messages("s1", limit)
    # the cache is bounded: the most recent limit's statement is kept, and the first
    # one's was let go, so it is built again
    with built(monkeypatch) as kept:
        repo.get_newest_messages("s1", maxsize + 20)
    assert kept == []
    with built(monkeypatch) as rebuilt:
        repo.get_newest_messages("s1", 1)
    assert rebuilt != []


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        ("3; DROP TABLE messages", ValueError),
        ("3 OFFSET 1", ValueError),
        (object(), TypeError),
        ([3], TypeError),
    ],
)
def test_a_limit_that_is_not_a_number_is_refused_as_before(
    filled: Store, bad: Any, error: type[Exception]
) -> None:
    repo = MessageRepository(filled)
    with sent(filled) as statements, pytest.raises(error):
        repo.get_newest_messages("s1", bad)
    assert _reads(statements) == []
    assert len(repo.get_newest_messages("s1", -1)) == 12  # the table is still there


def test_only_an_int_is_written_into_sql() -> None:
    for value in ("3", 3.0, True):
        with pytest.raises((TypeError, ValueError)):
            limit_of(value)  # type: ignore[arg-type]
    for value in (-1, MAX_WRITTEN + 1):
        with pytest.raises(ValueError):
            limit_of(value)
    with pytest.raises(TypeError):
        written("3")  # type: ignore[arg-type]
    assert written(3) == 3 and written(MAX_WRITTEN + 1) is None


def test_the_other_paging_reads_send_small_limits_written_in(filled: Store) -> None:
    """get_messages' page (its offset stays bound: a bound OFFSET costs nothing more), the
    recent user messages, the window around a message, a cron job's runs and the /skill
    sessions: each small limit in the SQL, the same rows as with the limit bound."""
    repo = MessageRepository(filled)
    sessions = SessionRepository(filled)
    for n in range(3):
        sessions.create_session(f"cron_job1_{n}", "cron")
        sessions.create_session(f"k{n}", "cli")
        filled.titles.set_session_title(f"k{n}", f"skill {n}")
        repo.append_message(f"k{n}", "user", f'{SKILL_INVOCATION_PREFIX}"x" skill')
    everything = repo.get_messages("s1")
    ids = [m["id"] for m in everything]
    large = MAX_WRITTEN + 1
    with sent(filled) as statements:
        page = repo.get_messages("s1", limit=5, offset=3)
        recent = repo.list_recent_user_messages("s1", limit=3)
        around = repo.get_messages_around("s1", ids[6], window=2)
        runs = sessions.list_cron_job_runs("job1", limit=2)
        skills = sessions.list_skill_scaffolded_sessions(limit=2)
    limits = [s for s in statements if " LIMIT " in s]
    assert any(s.endswith("LIMIT 5 OFFSET ?") for s in limits), limits
    assert sum(" LIMIT 3" in s for s in limits) == 1, limits
    assert sum(" LIMIT 2" in s for s in limits) == 4, limits  # two sides, runs, skills
    # (a `.limit(1)` inside a statement is SQLAlchemy's own bound 1, not a page's)
    assert not any(s.endswith(("LIMIT ?", "LIMIT ? OFFSET ?")) for s in limits), limits
    assert page == everything[3:8]
    assert recent == repo.list_recent_user_messages("s1", limit=large)[:3]
    assert [m["id"] for m in around["window"]] == ids[4:9]
    assert runs == sessions.list_cron_job_runs("job1", limit=large)[:2] and len(runs) == 2
    assert skills == sessions.list_skill_scaffolded_sessions(limit=large)[:2]
    assert len(skills) == 2
