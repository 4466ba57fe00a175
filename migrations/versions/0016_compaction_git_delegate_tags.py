"""v16: (16L) messages.compacted, sessions.git_branch / git_repo_root, and the data
migration that tags delegate (sub-agent) sessions with `_delegate_from`.

The tagging replays the original's two rules, including its heuristic for untitled
root sessions with tool rows (they become `__orphaned__` delegates). One deliberate
difference: a row whose model_config is not valid JSON is skipped; the original's
statement failed as a whole on such a row and tagged nothing.
"""

from hermes_store._migrations import _ops, _pg_search

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

MC = "COALESCE(model_config, '{}')"
VALID = f"json_valid({MC})"


def _key(name: str) -> str:
    return f"(CASE WHEN {VALID} THEN json_extract({MC}, '$.{name}') END)"


TAG_EPHEMERAL_CHILDREN = f"""
UPDATE sessions
SET model_config = json_set({MC}, '$._delegate_from', parent_session_id)
WHERE parent_session_id IS NOT NULL
  AND {VALID}
  AND {_key("_delegate_from")} IS NULL
  AND {_key("_branched_from")} IS NULL
  AND NOT EXISTS (SELECT 1 FROM sessions AS p
                  WHERE p.id = sessions.parent_session_id
                    AND p.end_reason = 'branched'
                    AND sessions.started_at >= p.ended_at)
  AND NOT EXISTS (SELECT 1 FROM sessions AS p
                  WHERE p.id = sessions.parent_session_id
                    AND p.end_reason = 'compression')
"""

TAG_ORPHANED_ROOTS = f"""
UPDATE sessions
SET model_config = json_set({MC}, '$._delegate_from', '__orphaned__')
WHERE parent_session_id IS NULL
  AND {VALID}
  AND {_key("_delegate_from")} IS NULL
  AND {_key("_branched_from")} IS NULL
  AND title IS NULL
  AND message_count <= 25
  AND EXISTS (SELECT 1 FROM messages AS m WHERE m.session_id = sessions.id AND m.role = 'tool')
  AND NOT EXISTS (SELECT 1 FROM sessions AS c WHERE c.parent_session_id = sessions.id)
"""


# PostgreSQL: the same two rules, reading model_config through hermes_json_object (NULL
# unless it is a JSON object); jsonb re-serialises the document it tags.
PG_DOC = "hermes_json_object(COALESCE(model_config, '{}'))"


def _pg_tag(sql: str) -> str:
    for name in ("_delegate_from", "_branched_from"):
        sql = sql.replace(_key(name), f"({PG_DOC} ->> '{name}')")
    sql = sql.replace(VALID, f"{PG_DOC} IS NOT NULL")
    return sql.replace(
        f"json_set({MC}, '$._delegate_from', parent_session_id)",
        f"jsonb_set({PG_DOC}, '{{_delegate_from}}', to_jsonb(parent_session_id))::text",
    ).replace(
        f"json_set({MC}, '$._delegate_from', '__orphaned__')",
        f"jsonb_set({PG_DOC}, '{{_delegate_from}}', '\"__orphaned__\"'::jsonb)::text",
    )


def upgrade() -> None:
    _ops.add_column("messages", "compacted", "INTEGER NOT NULL DEFAULT 0")
    _ops.add_columns("sessions", (("git_branch", "TEXT"), ("git_repo_root", "TEXT")))
    if _ops.is_postgresql():
        _ops.execute(_pg_search.JSON_OBJECT_FUNCTION)
    if _ops.data_migration_due(16):
        for statement in (TAG_EPHEMERAL_CHILDREN, TAG_ORPHANED_ROOTS):
            _ops.execute(_pg_tag(statement) if _ops.is_postgresql() else statement)
    _ops.set_version(16)


def downgrade() -> None:
    # The delegate tags stay: they are ordinary model_config keys older code ignores.
    _ops.drop_columns("sessions", {"git_branch": None, "git_repo_root": None})
    _ops.drop_columns("messages", {"compacted": "0"})
    if _ops.is_postgresql():
        _ops.execute(_pg_search.JSON_OBJECT_FUNCTION_DOWN)
    _ops.lower_version(15)
