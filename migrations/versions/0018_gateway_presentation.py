"""v18: display_name, origin_json, expiry_finalized, backfilled from the gateway's
`$HERMES_HOME/sessions/sessions.json` when it exists.

Best effort, as in the original: only NULL columns are filled, nothing is overwritten,
and an unreadable file changes nothing.
"""

import json
import logging
from typing import Any

from hermes_store._migrations import _ops

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

log = logging.getLogger("hermes_store.migrations")

COLUMNS = (
    ("display_name", "TEXT"),
    ("origin_json", "TEXT"),
    ("expiry_finalized", "INTEGER DEFAULT 0"),
)

FILL_FROM_ENTRY = """
UPDATE sessions SET
    session_key = COALESCE(session_key, :session_key),
    chat_id = COALESCE(chat_id, :chat_id),
    thread_id = COALESCE(thread_id, :thread_id),
    chat_type = COALESCE(chat_type, :chat_type),
    display_name = COALESCE(display_name, :display_name),
    origin_json = COALESCE(origin_json, :origin_json),
    expiry_finalized = CASE WHEN COALESCE(expiry_finalized, 0) = 0 AND :finalized
                            THEN 1 ELSE expiry_finalized END
WHERE id = :session_id
"""


def _scalar(value: Any) -> Any:
    return value if isinstance(value, str | int | float) and not isinstance(value, bool) else None


def _backfill_from_sessions_json() -> None:
    path = _ops.hermes_home() / "sessions" / "sessions.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        log.debug("no gateway metadata backfill from %s: %s", path, exc)
        return
    if not isinstance(data, dict):
        return
    for key, entry in data.items():
        if str(key).startswith("_") or not isinstance(entry, dict):
            continue
        session_id = _scalar(entry.get("session_id"))
        if not session_id:
            continue
        origin = entry.get("origin") if isinstance(entry.get("origin"), dict) else None
        _ops.execute(
            FILL_FROM_ENTRY,
            {
                "session_id": session_id,
                "session_key": _scalar(entry.get("session_key")) or str(key),
                "chat_id": _scalar((origin or {}).get("chat_id")),
                "thread_id": _scalar((origin or {}).get("thread_id")),
                "chat_type": _scalar(entry.get("chat_type")),
                "display_name": _scalar(entry.get("display_name")),
                "origin_json": json.dumps(origin) if origin is not None else None,
                "finalized": bool(entry.get("expiry_finalized") or entry.get("memory_flushed")),
            },
        )


def upgrade() -> None:
    _ops.add_columns("sessions", COLUMNS)
    if _ops.data_migration_due(18):
        _backfill_from_sessions_json()
    _ops.set_version(18)


def downgrade() -> None:
    _ops.drop_columns(
        "sessions", {"display_name": None, "origin_json": None, "expiry_finalized": "0"}
    )
    _ops.lower_version(17)
