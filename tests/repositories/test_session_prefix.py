"""The one session-id prefix lookup: the repository's `session_ids_with_prefix` and
`resolve_session_id`, and the CLI's ambiguous-prefix error built from them, all in id
order (never start-time order), on both backends."""

from __future__ import annotations

import pytest

from hermes_store.cli import main
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

# started_at runs against id order, so a lookup ordered by start time would differ
IDS_AND_STARTS = [("p_a", 30.0), ("p_b", 20.0), ("p_c", 10.0), ("q_z", 5.0)]


@pytest.fixture
def sessions(store: Store) -> SessionRepository:
    repo = SessionRepository(store)
    for sid, started in IDS_AND_STARTS:
        repo.create_session(sid, "cli")
        repo._update(sid, started_at=started)
    return repo


def test_prefix_matches_come_in_id_order_up_to_the_limit(sessions: SessionRepository) -> None:
    assert sessions.session_ids_with_prefix("p_", 10) == ["p_a", "p_b", "p_c"]
    assert sessions.session_ids_with_prefix("p_", 2) == ["p_a", "p_b"]
    assert sessions.session_ids_with_prefix("p%", 10) == []  # wildcards are literal
    assert sessions.session_ids_with_prefix("", 10) == ["p_a", "p_b", "p_c", "q_z"]


def test_resolve_takes_an_exact_id_or_a_unique_prefix(sessions: SessionRepository) -> None:
    assert sessions.resolve_session_id("p_b") == "p_b"
    assert sessions.resolve_session_id("q") == "q_z"
    assert sessions.resolve_session_id("p_") is None


def test_the_cli_names_an_ambiguous_prefix_s_sessions_in_id_order(
    sessions: SessionRepository, backend_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sessions", "show", "p", "--url", backend_url]) == 2
    error = capsys.readouterr().err
    assert "prefix 'p' matches 3 sessions: p_a, p_b, p_c;" in error, error
