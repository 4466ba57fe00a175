"""Processes the change-feed and turn tests start (multiprocessing, spawn): writers that
append through the Store and report what they committed, and turn holders that race for
one session's turn."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from hermes_store.errors import StaleTurn, TurnHeld
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.repositories.turns import TurnRepository
from hermes_store.runtime.retry import RetryPolicy
from hermes_store.store import Store

# lock waits of eight writers on two cores can be long; the tests judge order, not speed
PATIENT = RetryPolicy(attempts=10_000, min_sleep=0.005, max_sleep=0.1, budget_seconds=120.0)


def write(url: str, writer: int, appends: int, seed: int, report: str) -> None:
    """Create session w<writer>, then append `appends` times (one or a few messages per
    transaction, now and then a title change), pausing at random; write the message ids
    of every committed append, in commit order, to `report` (JSON)."""
    rng = random.Random(seed)
    sid = f"w{writer}"
    committed: list[int] = []
    with Store(url, retry=PATIENT) as store:
        SessionRepository(store).create_session(sid, "cli")
        messages, titles = MessageRepository(store), TitleRepository(store)
        for i in range(appends):
            if rng.random() < 0.3:
                batch = [{"role": "user", "content": f"{sid} {i}.{k}"} for k in range(3)]
                committed += messages.append_messages(sid, batch)
            else:
                committed.append(messages.append_message(sid, "user", f"{sid} {i}"))
            if rng.random() < 0.1:
                titles.set_session_title(sid, f"{sid} title {i}")
            if rng.random() < 0.5:
                time.sleep(rng.random() * 0.01)
    Path(report).write_text(json.dumps(committed), encoding="utf-8")


def hold_turns(
    url: str, holder: str, session_id: str, seconds: float, seed: int, report: str
) -> None:
    """For `seconds`: take the session's turn (short leases), append with its token
    with random pauses, some longer than the lease, so the other holder takes over in
    the middle; write what happened to `report`: every grant, every append that landed
    (id, token) and every one refused as stale."""
    rng = random.Random(seed)
    grants: list[int] = []
    landed: list[list[int]] = []
    refused: list[int] = []
    held = 0
    ttl = 0.15
    with Store(url, retry=PATIENT) as store:
        turns, messages = TurnRepository(store), MessageRepository(store)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                token = turns.acquire_turn(session_id, holder, ttl)
            except TurnHeld:
                held += 1
                time.sleep(rng.random() * 0.05)
                continue
            grants.append(token)
            for n in range(rng.randint(1, 6)):
                try:
                    mid = messages.append_message(
                        session_id, "assistant", f"{holder} {token} {n}", turn_token=token
                    )
                except StaleTurn:
                    refused.append(token)
                    break
                landed.append([mid, token])
                # now and then past the lease: the other holder may take the turn over
                time.sleep(rng.random() * (ttl * 2 if rng.random() < 0.3 else ttl / 4))
            if rng.random() < 0.5:
                turns.release_turn(session_id, token)
            time.sleep(rng.random() * 0.05)
    Path(report).write_text(
        json.dumps({"grants": grants, "landed": landed, "refused": refused, "held": held}),
        encoding="utf-8",
    )


def follow(url: str, log: str, seed: int, idle_timeout: float | None) -> None:
    """A follower as a tool would run it: its cursor is the last complete line of `log`
    (a line is written, and flushed, per change handled), so a kill at any point loses
    at most a partial line, which the next start drops. With `idle_timeout`, it ends
    once nothing new came for that long; else it runs until killed."""
    from hermes_store.repositories.changes import ChangeFeed

    rng = random.Random(seed)
    path = Path(log)
    cursor = 0
    if path.exists():
        data = path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            path.write_bytes(complete)
        lines = complete.decode("utf-8").splitlines()
        if lines:
            cursor = int(lines[-1].split()[0])
    with Store(url, retry=PATIENT) as store, path.open("a", encoding="utf-8") as out:
        feed = ChangeFeed(store)
        for change in feed.follow(
            cursor, poll_interval=0.02, batch=rng.randint(1, 50), idle_timeout=idle_timeout
        ):
            out.write(f"{change.position} {change.kind} {change.session_id} {change.message_id}\n")
            out.flush()
