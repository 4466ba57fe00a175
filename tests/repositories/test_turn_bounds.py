"""Turn leases at their edges (issue 35, items 8 and 16): a lease granted by a process
whose clock runs ahead lasts no longer than its ttl once another process sees it (SQLite,
both journal modes; the driver is the run's, HERMES_STORE_SQLITE_DRIVER); input past the
bounds is a typed error, the same on both backends; TurnHeld and StaleTurn say what
happened in words."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.databases import JOURNAL_MODES, set_journal_mode

from hermes_store.errors import InvalidInput, StaleTurn, TurnHeld
from hermes_store.repositories.messages import MessageRepository
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.repositories.turns import MAX_HOLDER_LENGTH, TurnRepository
from hermes_store.store import Store

TEN_YEARS = 10 * 365 * 86_400

SKEWED = """
import time
_real = time.time
time.time = lambda: _real() + {skew}  # this process's clock runs ahead
"""

GRANT = """
import sys
from hermes_store.repositories.turns import TurnRepository
from hermes_store.store import Store

with Store(sys.argv[1]) as store:
    print(TurnRepository(store).acquire_turn("s1", "ahead", float(sys.argv[2])))
"""


def _grant_from_a_clock_ahead(url: str, tmp_path: Path, ttl: float) -> int:
    shim = tmp_path / "skewed"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SKEWED.format(skew=TEN_YEARS))
    path = os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(GRANT), url, str(ttl)],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.parametrize("mode", JOURNAL_MODES)
def test_a_lease_from_a_clock_ahead_ends_within_its_ttl(
    fresh_db: str, tmp_path: Path, mode: str
) -> None:
    set_journal_mode(fresh_db.removeprefix("sqlite:///"), mode)
    with Store(fresh_db) as store:
        SessionRepository(store).create_session("s1", "cli")
        turns = TurnRepository(store)
        ahead = _grant_from_a_clock_ahead(fresh_db, tmp_path, ttl=1.0)
        current = turns.current_turn("s1")
        assert current is not None and current.live
        # read by this clock, the lease ends within its ttl, not ten years on
        assert current.expires_at <= time.time() + 1.0
        with pytest.raises(TurnHeld) as held:
            turns.acquire_turn("s1", "behind", 30)
        assert held.value.expires_at <= time.time() + 1.0
        assert held.value.remaining is not None and 0 < held.value.remaining <= 1.0
        # the bound the contender saw was written: the lease ends then, for everyone
        deadline = time.monotonic() + 30
        while True:
            try:
                token = turns.acquire_turn("s1", "behind", 30)
                break
            except TurnHeld:
                assert time.monotonic() < deadline, "the skewed lease never ended"
                time.sleep(0.1)
        assert token == ahead + 1
        with pytest.raises(StaleTurn):
            MessageRepository(store).append_message("s1", "user", "late", turn_token=ahead)


def test_out_of_range_turn_input_is_a_typed_error(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("s1", "cli")
        turns = TurnRepository(store)
        for ttl in (10**400, -(10**400), float("inf")):
            with pytest.raises(InvalidInput, match="ttl"):
                turns.acquire_turn("s1", "a", ttl)
        big_id = "x" * 1_000_000
        for call in (
            lambda: turns.acquire_turn(big_id, "a", 30),
            lambda: turns.current_turn(big_id),
            lambda: turns.renew_turn(big_id, 1, 30),
            lambda: turns.release_turn(big_id, 1),
        ):
            with pytest.raises(InvalidInput, match="session id may be at most"):
                call()
        with pytest.raises(InvalidInput, match="holder may be at most"):
            turns.acquire_turn("s1", "h" * (MAX_HOLDER_LENGTH + 1), 30)
        assert turns.current_turn("s1") is None  # nothing was granted
        token = turns.acquire_turn("s1", "h" * MAX_HOLDER_LENGTH, 30)
        assert token == 1


def test_turn_errors_say_what_happened_in_words(backend_url: str) -> None:
    with Store(backend_url) as store:
        SessionRepository(store).create_session("s1", "cli")
        turns = TurnRepository(store)
        token = turns.acquire_turn("s1", "gateway-1", 60)
        with pytest.raises(TurnHeld) as held:
            turns.acquire_turn("s1", "gateway-2", 60)
        message = str(held.value)
        assert "epoch seconds" not in message
        assert " UTC" in message and "s from now" in message
        assert 55 < (held.value.remaining or 0) <= 60
        for call in (lambda: turns.renew_turn("s1", token + 1, 30),):
            with pytest.raises(StaleTurn, match="unknown") as stale:
                call()
            assert "newer turn" not in str(stale.value)
        with pytest.raises(StaleTurn, match="unknown"):
            MessageRepository(store).append_message("s1", "user", "x", turn_token=token + 5)
        # an older token still says a newer turn was granted
        newer = turns.acquire_turn("s1", "gateway-1", 60)
        with pytest.raises(StaleTurn, match="a newer turn \\(token 2\\) was granted"):
            turns.renew_turn("s1", token, 30)
        assert newer == 2
