"""How a `/skill` turn is previewed: the original's rule, in listings and in the recent
user messages, on both backends (issue 14, the drifted copy of issue 12)."""

from __future__ import annotations

from typing import Any

import pytest

from hermes_store.repositories._preview import describe_skill_invocation
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository

HEADER = (
    '[IMPORTANT: The user has invoked the "{name}" skill, indicating they want you to follow '
    "its instructions. The full skill content is loaded below.]"
)
ASKED = "The user has provided the following instruction alongside the skill invocation: "


def single(name: str, instruction: str = "", body: str = "Skill body.", note: bool = True) -> str:
    parts = [HEADER.format(name=name), "", body]
    if instruction:
        parts += ["", ASKED + instruction]
    if note:
        parts += ["", "[Runtime note: loaded from the skills directory]"]
    return "\n".join(parts)


def bundle(names: str, instruction: str) -> str:
    return (
        f'[IMPORTANT: The user has invoked the "{names}" skill bundle, loading 2 skills '
        "together. Treat every skill below as active guidance for this turn.]\n\n"
        f"Skills loaded: clean, work\n\nUser instruction: {instruction}\n\n"
        "[Loaded as part of the bundle]\n\nFirst skill body. User instruction: not this"
    )


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (single("work", "fix the title leak"), "/work — fix the title leak"),
        (single("work"), "/work"),
        (single("work", "  spread \n over   lines "), "/work — spread over lines"),
        # the body may quote the marker: the last one is what the user typed
        (single("work", "the real one", body=ASKED + "quoted"), "/work — the real one"),
        (single("", "only the instruction"), "only the instruction"),
        (single(""), None),
        (bundle("/clean /work", "tidy up"), "/clean /work — tidy up"),
        ("[IMPORTANT: The user has invoked the skill without a quoted name]", None),
        ("an ordinary message", None),
    ],
)
def test_the_rule(content: str, expected: str | None) -> None:
    assert describe_skill_invocation(content) == expected


def test_an_excerpt_keeps_the_side_of_the_marker() -> None:
    content = single("work", "fix it") + "\x1e" + "tail of the skill body"
    assert describe_skill_invocation(content) == "/work — fix it"


def _session_with(store: Any, sid: str, content: str) -> None:
    SessionRepository(store).create_session(sid, "cli")
    MessageRepository(store).append_message(sid, "user", content)


def _preview(store: Any, sid: str) -> str:
    row = SessionRepository(store).get_session_rich_row(sid)
    assert row is not None
    return str(row["preview"])


def test_listing_previews(store: Any) -> None:
    long_body = "A long skill body. " * 200  # longer than both excerpt windows
    _session_with(store, "short", single("work", "fix the title leak", note=False))
    _session_with(store, "long", single("work", "fix the title leak", body=long_body, note=False))
    _session_with(store, "bare", single("deploy"))
    _session_with(store, "unnamed", single("", "just this", note=False))
    # A listing reads the text with CR/LF made spaces (in SQL, as the original does), so
    # the runtime note's blank-line marker is gone and the note shows after the text.
    _session_with(store, "noted", single("work", "fix it"))
    # a header without a name or an instruction is not described: the text itself shows
    _session_with(store, "nothing", single(""))
    listed = {r["id"]: r["preview"] for r in SessionRepository(store).list_sessions_rich()}
    assert listed["short"] == _preview(store, "short") == "/work — fix the title leak"
    assert listed["long"] == "/work — fix the title leak"
    assert listed["bare"] == "/deploy"
    assert listed["unnamed"] == "just this"
    noted = "/work — fix it [Runtime note: loaded from the skills directory]"
    assert listed["noted"] == noted[:60] + "..."
    assert listed["nothing"] == single("")[:60] + "..."


def test_recent_user_message_previews(store: Any) -> None:
    messages = MessageRepository(store)
    SessionRepository(store).create_session("s", "cli")
    ids = [
        messages.append_message("s", "user", content)
        for content in (
            single("work", "fix the title leak"),
            single("deploy"),
            bundle("/clean /work", "tidy up"),
            single("", ""),
        )
    ]
    previews = {r["id"]: r["preview"] for r in messages.list_recent_user_messages("s")}
    assert previews[ids[0]] == "/work — fix the title leak"
    assert previews[ids[1]] == "/deploy"
    assert previews[ids[2]] == "/clean /work — tidy up"
    # not describable: the text itself, whitespace collapsed and cut at 80
    flat = " ".join(single("", "").split())
    assert previews[ids[3]] == flat[:77] + "..."
