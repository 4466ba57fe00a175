"""Titles on real SQLite files: sanitize_title (docs/reference/behaviour.md 5.1, its verified
table), the title methods of 5.2 and their verified `my project #N` examples."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import update

from hermes_store.errors import InvalidTitle, TitleInUse
from hermes_store.repositories.sessions import SESSIONS, SessionRepository
from hermes_store.repositories.titles import TitleRepository, sanitize_title
from hermes_store.store import Store

# --------------------------------------------------------------------------- helpers


@pytest.fixture
def sessions(store: Store) -> SessionRepository:
    return SessionRepository(store)


@pytest.fixture
def titles(store: Store) -> TitleRepository:
    return TitleRepository(store)


def put(store: Store, sid: str, **values: Any) -> None:
    statement = update(SESSIONS).where(SESSIONS.c.id == sid).values(**values)
    store.write(lambda s: s.execute(statement))


def make(sessions: SessionRepository, sid: str, started_at: float, **kwargs: Any) -> str:
    sessions.create_session(sid, "cli", **kwargs)
    put(sessions.store, sid, started_at=started_at)
    return sid


def titled(sessions: SessionRepository, *pairs: tuple[str, str]) -> None:
    for i, (sid, title) in enumerate(pairs):
        make(sessions, sid, float(i + 1))
        put(sessions.store, sid, title=title)


# --------------------------------------------------------------------------- 5.1


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("  hello world  ", "hello world"),
        ("hello   world", "hello world"),
        ("hello\t\nworld", "hello world"),
        ("   \t\n  ", None),
        ("hello\x00world", "helloworld"),
        ("hello\x7fworld", "helloworld"),
        ("\x07\x08test\x1b", "test"),
        ("hello\u200bworld", "helloworld"),
        ("hello\u200dworld", "helloworld"),
        ("hello\u202eworld", "helloworld"),
        ("\ufeffhello", "hello"),
        ("\x00\x01\x02\u200b\ufeff", None),
        ("🎉 Launch 🚀", "🎉 Launch 🚀"),
        ("数据库迁移 plan", "数据库迁移 plan"),
        ("café résumé naïve", "café résumé naïve"),
        ("PR #438 — fixing the 'auth' middleware", "PR #438 — fixing the 'auth' middleware"),
    ],
)
def test_sanitize_title_verified_table(raw: str, expected: str | None) -> None:
    assert sanitize_title(raw) == expected


@pytest.mark.parametrize("raw", [None, ""])
def test_sanitize_title_falsy_is_none(raw: str | None) -> None:
    assert sanitize_title(raw) is None


def test_sanitize_title_replaces_lone_surrogates() -> None:
    assert sanitize_title("half \ud83d pair") == "half \ufffd pair"


def test_sanitize_title_removes_every_listed_invisible_character() -> None:
    invisible = (
        [chr(c) for c in range(0x200B, 0x2010)]
        + [chr(c) for c in range(0x2028, 0x202F)]
        + [chr(c) for c in range(0x2060, 0x206A)]
        + ["\ufeff", "\ufffc", "\ufff9", "\ufffa", "\ufffb"]
    )
    assert sanitize_title("a" + "".join(invisible) + "b") == "ab"


def test_sanitize_title_removes_c0_controls_but_tab_lf_cr_become_spaces() -> None:
    controls = "".join(chr(c) for c in range(0x20) if c not in (9, 10, 13)) + "\x7f"
    assert sanitize_title("a" + controls + "b") == "ab"
    assert sanitize_title("a\tb\nc\rd") == "a b c d"


def test_sanitize_title_length_limit() -> None:
    assert sanitize_title("A" * 100) == "A" * 100
    assert sanitize_title("  " + "A" * 100 + "\u200b  ") == "A" * 100  # measured after cleaning
    with pytest.raises(InvalidTitle, match=r"^Title too long \(101 chars, max 100\)$") as info:
        sanitize_title("A" * 101)
    assert isinstance(info.value, ValueError)


def test_sanitize_title_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        sanitize_title(42)


# --------------------------------------------------------------------------- 5.2 set


def test_set_session_title_stores_the_sanitized_title(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "s1", 1.0)
    assert titles.set_session_title("s1", "  my\x00 title\u200b \ud800 ") is True
    assert titles.get_session_title("s1") == "my title \ufffd"


def test_set_session_title_unknown_id_is_false(titles: TitleRepository) -> None:
    assert titles.set_session_title("missing", "anything") is False


def test_set_session_title_empty_clears_and_nulls_may_repeat(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    make(sessions, "b", 2.0)
    titles.set_session_title("a", "x")
    assert titles.set_session_title("a", "   ") is True
    assert titles.set_session_title("b", "\x00\u200b") is True
    assert titles.get_session_title("a") is None and titles.get_session_title("b") is None


def test_set_session_title_too_long_raises_and_changes_nothing(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "s1", 1.0)
    titles.set_session_title("s1", "kept")
    with pytest.raises(InvalidTitle, match="too long"):
        titles.set_session_title("s1", "A" * 101)
    assert titles.get_session_title("s1") == "kept"


def test_set_session_title_taken_raises_with_the_originals_text(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    make(sessions, "b", 2.0)
    titles.set_session_title("a", "Shared")
    with pytest.raises(TitleInUse) as info:
        titles.set_session_title("b", "  Shared ")
    assert str(info.value) == "Title 'Shared' is already in use by session a"
    assert isinstance(info.value, ValueError)
    assert titles.get_session_title("a") == "Shared" and titles.get_session_title("b") is None


def test_set_session_title_conflict_check_runs_before_the_id_check(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    titles.set_session_title("a", "Shared")
    with pytest.raises(TitleInUse):
        titles.set_session_title("missing", "Shared")


def test_set_session_title_resetting_own_title_is_fine(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    titles.set_session_title("a", "Mine")
    assert titles.set_session_title("a", "Mine") is True


def test_set_session_title_moves_from_a_compression_ancestor(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "root", 1.0)
    titles.set_session_title("root", "Project")
    sessions.end_session("root", "compression")
    make(sessions, "mid", 2.0, parent_session_id="root")
    sessions.end_session("mid", "compression")
    make(sessions, "tip", 3.0, parent_session_id="mid")
    assert titles.set_session_title("tip", "Project") is True
    assert titles.get_session_title("tip") == "Project"
    assert titles.get_session_title("root") is None


def test_set_session_title_does_not_move_from_other_relatives(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "parent", 1.0)
    titles.set_session_title("parent", "Project")
    sessions.end_session("parent", "user_exit")
    make(sessions, "child", 2.0, parent_session_id="parent")
    with pytest.raises(TitleInUse):
        titles.set_session_title("child", "Project")
    make(sessions, "root", 3.0)
    titles.set_session_title("root", "Root title")
    sessions.end_session("root", "compression")
    make(sessions, "branch", 4.0, parent_session_id="root", model_config={"_branched_from": "root"})
    with pytest.raises(TitleInUse):
        titles.set_session_title("branch", "Root title")
    # nor downwards: an ancestor cannot take its continuation's title
    make(sessions, "tip", 5.0, parent_session_id="root")
    titles.set_session_title("tip", "Tip title")
    with pytest.raises(TitleInUse):
        titles.set_session_title("root", "Tip title")


def test_set_auto_title_if_empty(sessions: SessionRepository, titles: TitleRepository) -> None:
    make(sessions, "a", 1.0)
    assert titles.set_auto_title_if_empty("a", "Generated\x1b") is True
    assert titles.get_session_title("a") == "Generated"
    assert titles.set_auto_title_if_empty("a", "Second") is False
    assert titles.get_session_title("a") == "Generated"
    assert titles.set_auto_title_if_empty("missing", "x") is False
    assert titles.set_auto_title_if_empty("a", "  ") is False


def test_set_auto_title_if_empty_respects_titles_in_use(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    make(sessions, "b", 2.0)
    titles.set_session_title("a", "Taken")
    with pytest.raises(TitleInUse):
        titles.set_auto_title_if_empty("b", "Taken")
    with pytest.raises(InvalidTitle):
        titles.set_auto_title_if_empty("b", "x" * 101)


# --------------------------------------------------------------------------- 5.2 reads


def test_get_session_title_none_for_untitled_or_unknown(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    assert titles.get_session_title("a") is None
    assert titles.get_session_title("missing") is None


def test_get_session_by_title_is_an_exact_full_row_match(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    make(sessions, "a", 1.0)
    titles.set_session_title("a", "Exact Title")
    row = titles.get_session_by_title("Exact Title")
    assert row is not None and row["id"] == "a" and len(row) == 48
    assert titles.get_session_by_title("exact title") is None
    assert titles.get_session_by_title("Exact") is None
    assert titles.get_session_by_title("") is None


def test_resolve_session_by_title_newest_numbered_wins(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    titled(sessions, ("s1", "my project"), ("s2", "my project #2"), ("s3", "my project #3"))
    assert titles.resolve_session_by_title("my project") == "s3"
    assert titles.resolve_session_by_title("my project #2") == "s2"
    assert titles.resolve_session_by_title("my project #3") == "s3"
    assert titles.resolve_session_by_title("other") is None
    assert titles.resolve_session_by_title("") is None


def test_resolve_session_by_title_orders_by_start_not_by_number(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    titled(sessions, ("s1", "plan"), ("s3", "plan #3"), ("s2", "plan #2"))  # #2 started last
    assert titles.resolve_session_by_title("plan") == "s2"


def test_resolve_session_by_title_wildcards_are_literal(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    titled(sessions, ("a", "testXproject #2"), ("b", "100X done #2"), ("c", "test_project"))
    assert titles.resolve_session_by_title("test_project") == "c"
    assert titles.resolve_session_by_title("100% done") is None
    assert titles.resolve_session_by_title("test%") is None


@pytest.mark.parametrize(
    ("existing", "base", "expected"),
    [
        ([], "other", "other"),
        (["my project"], "my project", "my project #2"),
        (["my project"], "my project #2", "my project #2"),
        (["my project", "my project #2"], "my project", "my project #3"),
        (["my project", "my project #2", "my project #3"], "my project", "my project #4"),
        (["my project", "my project #2", "my project #3"], "my project #3", "my project #4"),
        (["my project #5"], "my project", "my project #6"),
    ],
)
def test_get_next_title_in_lineage(
    sessions: SessionRepository,
    titles: TitleRepository,
    existing: list[str],
    base: str,
    expected: str,
) -> None:
    titled(sessions, *[(f"s{i}", t) for i, t in enumerate(existing)])
    assert titles.get_next_title_in_lineage(base) == expected


def test_get_next_title_in_lineage_wildcards_are_literal(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    titled(sessions, ("a", "testXproject #2"), ("b", "100X done #2"))
    assert titles.get_next_title_in_lineage("test_project") == "test_project"
    assert titles.get_next_title_in_lineage("100% done") == "100% done"


def test_get_next_title_in_lineage_ignores_non_numeric_suffixes(
    sessions: SessionRepository, titles: TitleRepository
) -> None:
    titled(sessions, ("a", "notes"), ("b", "notes #draft"), ("c", "notes #²"))
    assert titles.get_next_title_in_lineage("notes") == "notes #2"
