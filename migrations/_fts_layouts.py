"""FTS5 DDL of each upstream layout, frozen as it was released. Never edit a released
layout: a fix is a new revision.

Trigger and table names are contracts (hermes_store/contract.py): the original counts
the six triggers by name and tells the v23 layout by the literal `tool_name` in the
`messages_fts` DDL. The statements below spell those names out, as released.
"""

from __future__ import annotations

from collections.abc import Callable

from hermes_store.contract import (
    FTS_BASE_TRIGGERS,
    FTS_TABLE,
    FTS_TRIGGERS,
    FTS_TRIGRAM_TABLE,
    FTS_TRIGRAM_TRIGGERS,
    FTS_TRIGRAM_VIEW,
    META_FTS_HIGH_WATER,
    META_FTS_PROGRESS,
)

BASE_TRIGGERS = FTS_BASE_TRIGGERS
TRIGRAM_TRIGGERS = FTS_TRIGRAM_TRIGGERS
ALL_TRIGGERS = FTS_TRIGGERS
TRIGRAM_VIEW = FTS_TRIGRAM_VIEW

# --- L1: v1 to v9, external content over messages.content ---------------------------------
L1_BASE = (
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    content=messages,
    content_rowid=id
)""",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END""",
)

# --- v10 bump build: an external-content trigram index beside L1 --------------------------
L1_TRIGRAM = (
    """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content,
    content=messages,
    content_rowid=id,
    tokenize='trigram'
)""",
    """CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END""",
    """CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
    VALUES('delete', old.id, old.content);
END""",
    """CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE ON messages BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content)
    VALUES('delete', old.id, old.content);
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (new.id, new.content);
END""",
)

# --- L3: v11 to v22, inline tables over the concatenated text ------------------------------
L3_TEXT = (
    "COALESCE({p}.content, '') || ' ' || COALESCE({p}.tool_name, '') || ' ' || "
    "COALESCE({p}.tool_calls, '')"
)
L3 = (
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content
)""",
    f"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (
        new.id,
        {L3_TEXT.format(p="new")}
    );
END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
END""",
    f"""CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages BEGIN
    DELETE FROM messages_fts WHERE rowid = old.id;
    INSERT INTO messages_fts(rowid, content) VALUES (
        new.id,
        {L3_TEXT.format(p="new")}
    );
END""",
    """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content,
    tokenize='trigram'
)""",
    f"""CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (
        new.id,
        {L3_TEXT.format(p="new")}
    );
END""",
    """CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages BEGIN
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
END""",
    f"""CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE ON messages BEGIN
    DELETE FROM messages_fts_trigram WHERE rowid = old.id;
    INSERT INTO messages_fts_trigram(rowid, content) VALUES (
        new.id,
        {L3_TEXT.format(p="new")}
    );
END""",
)
L3_BACKFILL = (
    f"INSERT INTO messages_fts(rowid, content) SELECT id, {L3_TEXT.format(p='messages')} "
    "FROM messages",
    f"INSERT INTO messages_fts_trigram(rowid, content) SELECT id, "
    f"{L3_TEXT.format(p='messages')} FROM messages",
)

# --- v23, "FTS storage layout 1": external content, tool-row-free trigram view, -----------
# --- triggers gated by the fts_rebuild_high_water / fts_rebuild_progress markers -----------
_GATE = f"""({{x}}.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = '{META_FTS_HIGH_WATER}'), -1)
   OR {{x}}.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = '{META_FTS_PROGRESS}'), -1))"""

V23 = (
    """CREATE VIRTUAL TABLE messages_fts USING fts5(
    content,
    tool_name,
    tool_calls,
    content='messages',
    content_rowid='id'
)""",
    f"""CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN {_GATE.format(x="new")}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END""",
    f"""CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN {_GATE.format(x="old")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END""",
    f"""CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls)
   AND {_GATE.format(x="old")}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END""",
    """CREATE VIEW messages_fts_trigram_src AS
    SELECT id, role, content, tool_name, tool_calls
    FROM messages
    WHERE role <> 'tool'""",
    """CREATE VIRTUAL TABLE messages_fts_trigram USING fts5(
    content,
    tool_name,
    tool_calls,
    content='messages_fts_trigram_src',
    content_rowid='id',
    tokenize='trigram'
)""",
    f"""CREATE TRIGGER messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
   AND {_GATE.format(x="new")}
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END""",
    f"""CREATE TRIGGER messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
   AND {_GATE.format(x="old")}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END""",
    f"""CREATE TRIGGER messages_fts_trigram_update AFTER UPDATE ON messages
WHEN (old.content IS NOT new.content
    OR old.tool_name IS NOT new.tool_name
    OR old.tool_calls IS NOT new.tool_calls
    OR old.role IS NOT new.role)
   AND {_GATE.format(x="old")}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name, tool_calls)
    SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls
    WHERE old.role <> 'tool';
    INSERT INTO messages_fts_trigram(rowid, content, tool_name, tool_calls)
    SELECT new.id, new.content, new.tool_name, new.tool_calls
    WHERE new.role <> 'tool';
END""",
)


# --- which layout a file has ----------------------------------------------------------------
# A frozen copy of hermes_store.search.layout.classify (docs/reference/schema.md 6.2), so
# that what a released revision decides never follows later changes of the runtime. A test
# (tests/search/test_fts_layout_detector.py) fails when the two disagree on any fixture or
# generated layout: change both together, or add a revision.


def layout(sql_of: Callable[[str], str | None]) -> str:
    """"none", "L1", "L1+trigram", "L2", "L3", "hybrid" or "v23", given `sql_of(name)`:
    the CREATE statement sqlite_master keeps for `name`, None when there is none."""
    base = sql_of(FTS_TABLE)
    if base is None:
        return "none"
    trigram = sql_of(FTS_TRIGRAM_TABLE)
    squeezed = "".join(base.split())
    external = "content=messages" in squeezed or "content='messages'" in squeezed
    if "tool_name" in base:
        view_backed = trigram is not None and TRIGRAM_VIEW in trigram
        complete = view_backed and sql_of(TRIGRAM_VIEW) is not None
        return "v23" if external and complete else "hybrid"
    if external:
        if trigram is None:
            return "L1"
        return "L1+trigram" if "content=" in "".join(trigram.split()) else "hybrid"
    if "content=" in squeezed:
        return "hybrid"
    delete = sql_of("messages_fts_delete") or ""
    if "'delete'" in delete:
        return "L2"
    return "L3" if "DELETE FROM messages_fts" in delete else "hybrid"
