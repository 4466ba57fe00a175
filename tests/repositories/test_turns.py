"""Turn leases with fencing tokens (issue 26): tokens grow with every grant, a live lease
of another holder is refused, an expired one is taken over, and writes made with a token
that is no longer current are refused inside their transaction, on both backends and
between processes racing for one session."""

from __future__ import annotations

import json
import multiprocessing
import random
import time
from pathlib import Path

import pytest
from helpers import feed_workers

from hermes_store.errors import InvalidInput, StaleTurn, TurnHeld
from hermes_store.repositories.changes import ChangeFeed
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.titles import TitleRepository
from hermes_store.repositories.turns import TurnRepository
from hermes_store.store import Store


def test_tokens_grow_and_leases_fence(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("s1", "cli")
        turns, messages = TurnRepository(store), MessageRepository(store)
        assert turns.current_turn("s1") is None
        first = turns.acquire_turn("s1", "worker-a", 30)
        assert first == 1
        with pytest.raises(TurnHeld) as held:
            turns.acquire_turn("s1", "worker-b", 30)
        assert held.value.holder == "worker-a" and held.value.expires_at > time.time()
        messages.append_message("s1", "user", "a", turn_token=first)
        # the same holder acquiring again (a retry) fences its own older token
        second = turns.acquire_turn("s1", "worker-a", 30)
        assert second == 2
        with pytest.raises(StaleTurn) as stale:
            messages.append_message("s1", "user", "late", turn_token=first)
        assert stale.value.token == 1 and stale.value.current == 2
        with pytest.raises(StaleTurn):
            messages.append_messages("s1", [{"role": "user", "content": "x"}], turn_token=first)
        with pytest.raises(StaleTurn):
            SessionRepository(store).update_system_prompt("s1", "p", turn_token=first)
        with pytest.raises(StaleTurn):
            SessionRepository(store).update_session_meta("s1", "{}", turn_token=first)
        with pytest.raises(StaleTurn):
            TitleRepository(store).set_session_title("s1", "t", turn_token=first)
        assert messages.message_count("s1") == 1  # nothing of the stale calls landed
        SessionRepository(store).update_system_prompt("s1", "p", turn_token=second)
        TitleRepository(store).set_session_title("s1", "t", turn_token=second)
        messages.append_messages("s1", [{"role": "user", "content": "x"}], turn_token=second)
        # a token the session never reached is refused too
        with pytest.raises(StaleTurn, match="only reached token 2"):
            messages.append_message("s1", "user", "x", turn_token=7)
        assert messages.message_count("s1") == 2


def test_a_session_without_turns_refuses_a_token(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("s2", "cli")
        with pytest.raises(StaleTurn, match="no turn was ever granted"):
            MessageRepository(store).append_message("s2", "user", "x", turn_token=1)
        assert MessageRepository(store).message_count("s2") == 0


def test_expiry_renewal_and_release(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("s1", "cli")
        turns, messages = TurnRepository(store), MessageRepository(store)
        a = turns.acquire_turn("s1", "a", 0.2)
        expiry = turns.renew_turn("s1", a, 0.3)
        current = turns.current_turn("s1")
        assert current is not None and current.live and current.expires_at == pytest.approx(expiry)
        time.sleep(0.4)
        current = turns.current_turn("s1")
        assert current is not None and not current.live
        # expired and not taken over: the token is still the current one
        messages.append_message("s1", "user", "still mine", turn_token=a)
        b = turns.acquire_turn("s1", "b", 30)  # takes the expired lease over
        assert b == a + 1
        with pytest.raises(StaleTurn):
            turns.renew_turn("s1", a, 30)
        assert turns.release_turn("s1", a) is False
        assert turns.release_turn("s1", b) is True
        assert turns.release_turn("s1", b) is False
        with pytest.raises(StaleTurn, match="released"):
            messages.append_message("s1", "user", "after release", turn_token=b)
        c = turns.acquire_turn("s1", "a", 30)  # free again: anyone may take it
        assert c == b + 1
        current = turns.current_turn("s1")
        assert current is not None and (current.holder, current.token) == ("a", c)


def test_bad_turn_input_is_refused(backend_url: str) -> None:
    with Store(backend_url) as store:
        turns, messages = TurnRepository(store), MessageRepository(store)
        SessionRepository(store).create_session("s1", "cli")
        for args in (("", "a", 1), ("s1", "", 1), ("s1", "a", 0), ("s1", "a", float("nan"))):
            with pytest.raises(InvalidInput):
                turns.acquire_turn(*args)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            turns.acquire_turn("s1", "a", 10**7)
        for token in (0, -1, "1", True):
            with pytest.raises(InvalidInput):
                messages.append_message("s1", "user", "x", turn_token=token)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            turns.release_turn("s1", None)  # type: ignore[arg-type]


def test_two_holders_racing_never_land_a_stale_write(backend_url: str, tmp_path: Path) -> None:
    """Two processes take one session's turn in turn, with short leases, random pauses
    (some past the lease) and releases. In commit order (the feed's), the tokens of the
    appends that landed never go down: no append with an older token committed after a
    newer grant's first append, and every refused append wrote nothing."""
    with Store(backend_url) as store:
        SessionRepository(store).create_session("race", "cli")
        start = ChangeFeed(store).latest()
    spawn = multiprocessing.get_context("spawn")
    rng = random.Random(2626)
    reports = [tmp_path / f"holder{i}.json" for i in range(2)]
    holders = [
        spawn.Process(
            target=feed_workers.hold_turns,
            args=(backend_url, f"holder-{i}", "race", 6.0, rng.randint(0, 10**6), str(r)),
        )
        for i, r in enumerate(reports)
    ]
    for h in holders:
        h.start()
    for h in holders:
        h.join(timeout=120)
        assert h.exitcode == 0
    results = [json.loads(r.read_text(encoding="utf-8")) for r in reports]
    token_of = {mid: token for res in results for mid, token in res["landed"]}
    with Store(backend_url) as store:
        appended = [
            c.message_id
            for c in ChangeFeed(store).changes(start, limit=10_000)
            if c.kind == "message.appended"
        ]
        assert MessageRepository(store).message_count("race") == len(token_of)
    assert sorted(appended) == sorted(token_of)  # exactly the appends reported as landed
    tokens = [token_of[mid] for mid in appended]
    assert tokens == sorted(tokens), "an append with an older token landed after a newer one"
    grants = sorted(g for res in results for g in res["grants"])
    assert grants == list(range(1, len(grants) + 1))  # every grant a new, larger token
    # the race happened: both held the turn, leases were taken over mid-turn, stale
    # appends were tried and refused
    assert all(res["landed"] for res in results)
    assert sum(len(res["refused"]) for res in results) > 0
    assert sum(res["held"] for res in results) > 0
