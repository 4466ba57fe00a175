"""`sessions delete` (to the trash), `restore`, `trash`, `tag`, and `--tag` on `sessions
list` and `search`, run as the installed command against real databases."""

from __future__ import annotations

import json
from pathlib import Path

from cli.test_cli_sessions import ids, ok, one_line_error, rows, run

from hermes_store.cli.sessions import DEFAULT_KEEP_DAYS as CLI_KEEP_DAYS
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.repositories.trash import DEFAULT_KEEP_DAYS
from hermes_store.store import Store


def test_the_command_s_default_keep_is_the_repository_s() -> None:
    assert CLI_KEEP_DAYS == DEFAULT_KEEP_DAYS


def test_delete_to_the_trash_list_restore_and_empty(backend_url: str, hermes_home: Path) -> None:
    url = backend_url
    with Store(url) as store:
        sessions, messages = SessionRepository(store), MessageRepository(store)
        sessions.create_session("parent", "cli")
        sessions.create_session("kid", "cli", parent_session_id="parent")
        for sid in ("parent", "kid"):
            messages.append_message(sid, "user", f"okapi from {sid}")
        TitleRepository(store).set_session_title("parent", "Okapi")

    line = one_line_error(run("sessions", "delete", "parent", "--url", url, home=hermes_home))
    assert "to the trash for 30 day(s)" in line and "add --yes" in line
    assert ids(url) == {"parent", "kid"}
    line = one_line_error(
        run("sessions", "delete", "nope", "--yes", "--url", url, home=hermes_home)
    )
    assert "session 'nope' does not exist" in line

    out = ok(run("sessions", "delete", "parent", "--yes", "--url", url, home=hermes_home))
    assert "moved session parent and 1 descendant session(s) (2 message(s)) to the trash" in out
    assert ids(url) == set() and rows(url, "SELECT id FROM messages") == []
    assert "no matches" in ok(run("search", "okapi", "--url", url, home=hermes_home))

    listed = json.loads(ok(run("sessions", "trash", "--json", "--url", url, home=hermes_home)))
    assert [(e["session_id"], e["sessions"], e["messages"], e["title"]) for e in listed] == [
        ("parent", 2, 2, "Okapi")
    ]
    assert listed[0]["trashed_at"].endswith("+00:00")
    table = ok(run("sessions", "trash", "--url", url, home=hermes_home))
    assert "parent" in table and "Okapi" in table

    # the title was taken meanwhile
    with Store(url) as store:
        SessionRepository(store).create_session("usurper", "cli")
        TitleRepository(store).set_session_title("usurper", "Okapi")
    restored = json.loads(
        ok(run("sessions", "restore", "parent", "--json", "--url", url, home=hermes_home))
    )
    assert restored["sessions"] == ["parent", "kid"] and restored["messages"] == 2
    assert restored["retitled"] == {"parent": "Okapi (restored)"}
    assert ids(url) == {"parent", "kid", "usurper"}
    hits = json.loads(ok(run("search", "okapi", "--json", "--url", url, home=hermes_home)))
    assert {h["session_id"] for h in hits} == {"parent", "kid"}
    line = one_line_error(run("sessions", "restore", "parent", "--url", url, home=hermes_home))
    assert "session 'parent' does not exist" in line

    # emptying: refused without --yes, then only what is past its time, then all
    ok(
        run(
            "sessions", "delete", "kid", "--yes", "--keep-days", "0", "--url", url, home=hermes_home
        )
    )
    ok(run("sessions", "delete", "usurper", "--yes", "--url", url, home=hermes_home))
    line = one_line_error(run("sessions", "trash", "--empty", "--url", url, home=hermes_home))
    assert "add --yes" in line
    expired = ("sessions", "trash", "--expired", "--yes", "--json", "--url", url)
    assert json.loads(ok(run(*expired, home=hermes_home))) == {"emptied": 1}
    assert "emptied 1 trash entry" in ok(
        run("sessions", "trash", "--empty", "--yes", "--url", url, home=hermes_home)
    )
    assert "the trash is empty" in ok(run("sessions", "trash", "--url", url, home=hermes_home))
    assert rows(url, "SELECT COUNT(*) FROM hermes_store_trash_rows") == [(0,)]


def test_prune_empties_the_trash_past_its_time(fresh_db: str, hermes_home: Path) -> None:
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("a", "cli")
        SessionRepository(store).create_session("b", "cli")
    ok(
        run(
            "sessions",
            "delete",
            "a",
            "--yes",
            "--keep-days",
            "0",
            "--url",
            fresh_db,
            home=hermes_home,
        )
    )
    ok(run("sessions", "delete", "b", "--yes", "--url", fresh_db, home=hermes_home))
    # the dry run says what the trash would lose
    dry = ("sessions", "prune", "--older-than", "1", "--dry-run", "--url", fresh_db)
    assert "1 trash entry past their time would be emptied" in ok(run(*dry, home=hermes_home))
    # a prune of one source's sessions leaves the trash alone
    by_source = ("sessions", "prune", "--older-than", "1", "--source", "cli", "--yes", "--json")
    assert json.loads(ok(run(*by_source, "--url", fresh_db, home=hermes_home))) == {
        "deleted": 0,
        "trash_emptied": 0,
    }
    prune = ("sessions", "prune", "--older-than", "1", "--yes", "--json", "--url", fresh_db)
    assert json.loads(ok(run(*prune, home=hermes_home))) == {"deleted": 0, "trash_emptied": 1}
    listed = json.loads(ok(run("sessions", "trash", "--json", "--url", fresh_db, home=hermes_home)))
    assert [e["session_id"] for e in listed] == ["b"]


def test_tag_command_and_tag_filters(backend_url: str, hermes_home: Path) -> None:
    url = backend_url
    with Store(url) as store:
        for sid in ("a", "b"):
            SessionRepository(store).create_session(sid, "cli")
            MessageRepository(store).append_message(sid, "user", f"narwhal {sid}")
    tag = ("sessions", "tag")
    assert ok(run(*tag, "a", "add", "work", "urgent", "--url", url, home=hermes_home)) == (
        "urgent\nwork\n"
    )
    ok(run(*tag, "b", "set", "work", "--url", url, home=hermes_home))
    shown = json.loads(ok(run(*tag, "a", "--json", "--url", url, home=hermes_home)))
    assert shown == {"session_id": "a", "tags": ["urgent", "work"]}
    assert ok(run(*tag, "b", "remove", "work", "--url", url, home=hermes_home)) == "no tags\n"

    listed = ("sessions", "list", "--json", "--url", url, "--tag")
    assert [r["id"] for r in json.loads(ok(run(*listed, "work", home=hermes_home)))] == ["a"]
    assert json.loads(ok(run(*listed, "none", home=hermes_home))) == []
    hits = json.loads(
        ok(run("search", "narwhal", "--tag", "urgent", "--json", "--url", url, home=hermes_home))
    )
    assert [h["session_id"] for h in hits] == ["a"]

    for bad, why in (
        (("a", "add", ""), "a tag cannot be empty"),
        (("a", "add", "x" * 101), "at most 100 characters"),
        (("a", "add"), "needs at least one TAG"),
        (("a", "list", "x"), "takes no TAG"),
        (("missing", "add", "x"), "session 'missing' does not exist"),
    ):
        assert why in one_line_error(run(*tag, *bad, "--url", url, home=hermes_home))
    assert "a tag cannot be empty" in one_line_error(
        run("sessions", "list", "--tag", " ", "--url", url, home=hermes_home)
    )
