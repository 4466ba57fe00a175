"""The OpenAI Agents SDK's `Session` protocol on a hermes-store database.

`HermesSession(session_id, store)` keeps an agent's conversation items as the messages
of the hermes-store session `session_id` (created with the first write): Hermes' own
tools list, search, export and copy them, and the change feed reports them, on SQLite and
PostgreSQL alike. Needs the SDK: `pip install 'hermes-store[openai-agents]'`.

How an item is stored: the item itself, exactly, under the key `openai_agents_item` of
the message's `display_metadata` (a JSON-object column the messages table keeps for every
role; `codex_message_items` would fit the Responses-API shape but is kept for assistant
rows only, and `api_content` replaces `content` when Hermes resumes a session), so
`get_items` returns what `add_items` was given. No `display_kind` is set, so Hermes'
clients show the row as a plain message. The item's text goes into `content`
(searchable), its role into `role` (`developer` as `system`; calls and reasoning as
`assistant`, call outputs as `tool`), a tool call's name into `tool_name` and a call id
into `tool_call_id`. A row the adapter did not write (a message Hermes appended) is read
back as a plain `{"role", "content"}` item, or a `function_call_output` for a tool answer.

Every call runs off the event loop: on an `AsyncStore`'s worker threads, or for a `Store`
in a thread of the loop's default executor. A call cancelled while it runs still commits
or rolls back as a whole.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

try:
    from agents.memory import SessionSettings
except ImportError as exc:  # pragma: no cover (the extra is missing)
    raise ImportError(
        "hermes_store.integrations.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'hermes-store[openai-agents]'"
    ) from exc

from ..aio import AsyncStore
from ..errors import InvalidInput, SessionNotFound
from ..repositories.messages import MessageRepository
from ..repositories.rows import MessageRow
from ..repositories.sessions import SessionRepository
from ..store import Store

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["HermesSession"]

T = TypeVar("T")

#: The hermes-store `sessions.source` of a session this adapter creates.
DEFAULT_SOURCE = "openai-agents"

#: The `display_metadata` key the exact item is kept under.
ITEM_KEY = "openai_agents_item"
#: What `_item` reads of a row: the stored item, and for a row Hermes wrote itself the
#: fields an item is made from (a load reads these, not the whole row).
ITEM_COLUMNS = ("role", "content", "tool_call_id", "display_metadata")

#: Item roles Hermes has no name for, and the role they are stored under.
_ROLE_ALIASES = {"developer": "system"}


def _texts(parts: Any) -> list[str]:
    """The text of a content value: a string, or a list of parts with `text` (input and
    output text), `refusal` or a reasoning summary's text."""
    if isinstance(parts, str):
        return [parts]
    found: list[str] = []
    if isinstance(parts, list):
        for part in parts:
            if isinstance(part, Mapping):
                for key in ("text", "refusal"):
                    value = part.get(key)
                    if isinstance(value, str):
                        found.append(value)
    return found


def _message(item: Any) -> dict[str, Any]:
    """The hermes-store message that stores `item` (InvalidInput when it is not a JSON
    object that reads back equal)."""
    if not isinstance(item, Mapping):
        raise InvalidInput(f"a session item must be a dict, got {type(item).__name__}")
    try:
        text = json.dumps(item, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"a session item must be JSON-serialisable: {exc}") from exc
    if json.loads(text) != item:
        # Tuples, non-string keys: JSON would hand back something else than was given.
        raise InvalidInput("a session item must read back equal from JSON (lists, str keys)")
    kind = item.get("type")
    role = item.get("role")
    if not isinstance(role, str):
        is_output = isinstance(kind, str) and kind.endswith("_output")
        role = "tool" if is_output else "assistant"
    texts = _texts(item.get("content"))
    if kind == "function_call":
        texts += [str(item.get("name") or ""), str(item.get("arguments") or "")]
    texts += _texts(item.get("output")) + _texts(item.get("summary"))
    call_id = item.get("call_id")
    name = item.get("name")
    return {
        "role": _ROLE_ALIASES.get(role, role),
        "content": "\n".join(t for t in texts if t) or None,
        "tool_name": name if isinstance(name, str) else None,
        "tool_call_id": call_id if isinstance(call_id, str) else None,
        "display_metadata": {ITEM_KEY: item},
    }


def _item(row: Mapping[str, Any]) -> Any:
    """The item a stored row holds; for a row written by Hermes itself, the item that
    says the same."""
    metadata = row.get("display_metadata")
    if isinstance(metadata, dict) and isinstance(metadata.get(ITEM_KEY), dict):
        return metadata[ITEM_KEY]
    content = row.get("content")
    text = content if isinstance(content, str) else "\n".join(_texts(content))
    if row.get("role") == "tool" and row.get("tool_call_id"):
        return {"type": "function_call_output", "call_id": row["tool_call_id"], "output": text}
    return {"role": row.get("role"), "content": text}


class HermesSession:
    """An OpenAI Agents SDK session (`agents.memory.Session`) whose items are the messages
    of one hermes-store session. Pass it as `Runner.run(..., session=...)`.

    Args:
        session_id: the hermes-store session id (created on the first `add_items`).
        store: the open `Store` or `AsyncStore` to keep the items in (the caller closes it).
        source: the `sessions.source` of a session this adapter creates.
        session_settings: the SDK's settings; its `limit` is `get_items`' default.
    """

    def __init__(
        self,
        session_id: str,
        store: Store | AsyncStore,
        *,
        source: str = DEFAULT_SOURCE,
        session_settings: SessionSettings | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidInput("a session id must be a non-empty string")
        self.session_id = session_id
        self.store = store
        sync = store.sync if isinstance(store, AsyncStore) else store
        self._messages = MessageRepository(sync)
        self._sessions = SessionRepository(sync)
        self.source = source
        self.session_settings: SessionSettings | None = (
            SessionSettings() if session_settings is None else session_settings
        )

    async def _run(self, work: Callable[[], T]) -> T:
        if isinstance(self.store, AsyncStore):
            return await self.store.run(work)
        return await asyncio.to_thread(work)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items in the order they were added; with `limit` (or the
        settings' limit), the newest `limit` of them, still oldest first (0: none; a
        negative limit: all).

        Args:
            limit: at most this many items, the newest.
        """
        if limit is None and self.session_settings is not None:
            limit = self.session_settings.limit
        if limit is not None and not isinstance(limit, int):
            raise InvalidInput(f"limit must be an int or None, got {type(limit).__name__}")
        if limit == 0:
            return []
        session_id, messages = self.session_id, self._messages

        def read() -> list[MessageRow]:
            newest = -1 if limit is None or limit < 0 else limit
            return messages.get_newest_messages(session_id, newest, columns=ITEM_COLUMNS)

        rows = await self._run(read)
        return [cast("TResponseInputItem", _item(row)) for row in rows]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, in order, in one transaction (the hermes-store session is
        created first when it does not exist yet).

        Args:
            items: the SDK's input items (JSON objects).
        """
        if not isinstance(items, Sequence) or isinstance(items, str | bytes):
            raise InvalidInput(f"items must be a list, got {type(items).__name__}")
        messages = [_message(item) for item in items]
        if not messages:
            return
        session_id, source, repository = self.session_id, self.source, self._messages

        def write() -> None:
            try:
                repository.append_messages(session_id, messages)
            except SessionNotFound:
                self._sessions.ensure_session(session_id, source)
                repository.append_messages(session_id, messages)

        await self._run(write)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; None when the session has none."""
        session_id, messages = self.session_id, self._messages
        row = await self._run(lambda: messages.pop_newest_message(session_id))
        return None if row is None else cast("TResponseInputItem", _item(row))

    async def clear_session(self) -> None:
        """Delete every item of the session (the hermes-store session itself stays)."""
        session_id, messages = self.session_id, self._messages
        await self._run(lambda: messages.clear_messages(session_id))
