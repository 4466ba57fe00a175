"""The facade as type checkers and IDEs see it (issue 12, item 4): every public method of
the original v23 SessionDB is declared in the class body, and mypy checks calls on it."""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import hermes_store.compat as compat
from hermes_store.compat import SessionDB

REPO = Path(__file__).resolve().parents[2]

#: The public methods of the original v23 `SessionDB` (docs/reference/behaviour.md sections 1-15).
ORIGINAL_PUBLIC_METHODS = """
append_message apply_telegram_topic_migration archive_and_compact archive_sessions
archive_stale_sessions backfill_repo_roots bind_telegram_topic claim_handoff
clear_compression_failure_cooldown clear_messages close complete_handoff count_empty_sessions
create_session delete_empty_sessions delete_gateway_routing_entries delete_session
delete_session_if_empty delete_sessions delete_telegram_topic_binding disable_telegram_topic_mode
distinct_session_cwds enable_telegram_topic_mode end_session ensure_session export_all
export_session export_session_lineage fail_handoff finalize_orphaned_compression_sessions
find_latest_gateway_session_for_peer find_live_compression_child find_session_by_origin
flush_token_counts fts_cjk_rebuild_status fts_cjk_rebuild_step fts_optimize_available
fts_rebuild_status fts_rebuild_step get_ancestor_display_prefix get_anchored_view
get_compression_failure_cooldown get_compression_fallback_streak
get_compression_ineffective_count get_compression_lineage get_compression_lock_holder
get_compression_tip get_conversation_root get_first_assistant_text get_handoff_state
get_messages get_messages_around get_messages_as_conversation get_meta
get_next_title_in_lineage get_resume_conversations get_session get_session_by_title
get_session_delete_targets get_session_rich_row get_session_title get_telegram_topic_binding
get_telegram_topic_binding_by_session has_archived_messages has_platform_message_id
import_sessions is_telegram_session_linked_to_topic is_telegram_topic_mode_enabled
list_cron_job_runs list_gateway_sessions list_pending_handoffs list_prune_candidates
list_recent_user_messages list_sessions_rich list_skill_scaffolded_sessions
list_telegram_topic_bindings_for_chat list_unlinked_telegram_sessions_for_user
load_gateway_routing_entries logical_size_bytes maybe_auto_archive maybe_auto_prune_and_vacuum
message_count optimize_fts optimize_fts_storage promote_to_session_reset
prune_empty_ghost_sessions prune_sessions publish_compression_child queue_token_counts
rebuild_fts record_auxiliary_usage record_compression_failure_cooldown
record_gateway_session_peer refresh_compression_lock release_compression_lock reopen_session
replace_gateway_routing_entries replace_messages request_handoff resolve_resume_session_id
resolve_session_by_title resolve_session_id restore_rewound rewind_to_message sanitize_title
save_gateway_routing_entry search_messages search_sessions search_sessions_by_id session_count
session_count_by_source set_auto_title_if_empty set_compression_fallback_streak
set_compression_ineffective_count set_expiry_finalized set_latest_matching_message_display_kind
set_latest_user_api_content set_meta set_session_archived set_session_pinned
set_session_title try_acquire_compression_lock update_session_billing_route
update_session_cwd update_session_meta update_session_model update_session_runtime_lock
update_system_prompt update_token_counts vacuum
""".split()


def _declared_in_class_body() -> set[str]:
    tree = ast.parse(Path(compat.__file__).read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SessionDB"]
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, ast.FunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_original_method_is_declared_in_the_class_body() -> None:
    missing = sorted(set(ORIGINAL_PUBLIC_METHODS) - _declared_in_class_body())
    assert missing == [], f"not declared statically on SessionDB: {missing}"


def test_forwarded_methods_carry_their_facade_names_and_signatures() -> None:
    method = SessionDB.try_acquire_compression_lock
    assert method.__name__ == "try_acquire_compression_lock"
    assert method.__qualname__ == "SessionDB.try_acquire_compression_lock"
    params = list(inspect.signature(method).parameters)
    assert params[1:4] == ["session_id", "holder", "ttl_seconds"]


def test_mypy_checks_calls_on_the_facade(tmp_path: Path) -> None:
    snippet = tmp_path / "gateway_service.py"
    snippet.write_text(
        textwrap.dedent(
            """\
            from hermes_store.compat import SessionDB

            db = SessionDB("state.db")
            db.create_session(1, "cli")
            count: str = db.message_count("s1")
            db.search_sessions_by_id("abc", limit="3")
            db.append_message("s1", "user", "hi", observed="yes")
            db.no_such_method()
            db.try_acquire_compression_lock("s1", "pid=1", ttl_seconds=30.0)
            streak: int = db.get_compression_fallback_streak("s1")
            """
        ),
        encoding="utf-8",
    )
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            f"--config-file={REPO / 'pyproject.toml'}",
            "--follow-imports=silent",
            f"--cache-dir={tmp_path / 'cache'}",
            str(snippet),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(REPO)},
        timeout=300,
    )
    found = set(re.findall(r"gateway_service\.py:(\d+): error: .*\[([a-z-]+)\]", run.stdout))
    assert found == {
        ("4", "arg-type"),
        ("5", "assignment"),
        ("6", "arg-type"),
        ("7", "arg-type"),
        ("8", "attr-defined"),
    }, run.stdout + run.stderr
