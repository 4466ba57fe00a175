"""The repositories a store offers, declared once (`Repositories`, below).

Each attribute of `Repositories` is one repository: `Store` inherits them, so
`store.sessions`, `store.messages`, ... are that store's repositories, each built on first
use and kept for the store's life. The other faces take theirs from this declaration:

- `AsyncStore` offers each one under the same name (`async_name` where the Store's name is
  taken) with its methods as coroutines: hermes_store/aio_repositories.py, generated from
  this declaration by `python -m hermes_store._generate` and checked by a test that
  regenerates it, so that type checkers see every method with its signature;
- the `SessionDB` facade (compat.py) forwards each of the original's methods to the
  repository of the store it holds that defines the method (`name_of`).

Adding a repository is one line here and a regeneration.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, Generic, ParamSpec, Protocol, TypeVar
from typing import overload as _overload

from .repositories.changes import ChangeFeed
from .repositories.coordination import (
    AsyncDelegationRepository,
    CompressionLockRepository,
    GatewayRoutingRepository,
)
from .repositories.housekeeping import HousekeepingRepository
from .repositories.maintenance import MaintenanceRepository
from .repositories.messages import MessageRepository
from .repositories.meta import MetaRepository
from .repositories.redaction import RedactionRepository
from .repositories.search import SearchRepository
from .repositories.sessions import SessionRepository
from .repositories.space import SpaceRepository
from .repositories.tags import TagRepository
from .repositories.telegram import TelegramTopicRepository
from .repositories.titles import TitleRepository
from .repositories.trash import TrashRepository
from .repositories.turns import TurnRepository
from .repositories.usage import UsageRepository

if TYPE_CHECKING:
    from .store import Store

S = TypeVar("S")
R = TypeVar("R")
T = TypeVar("T")
P = ParamSpec("P")


class repository(Generic[S, R]):  # noqa: N801 (used like `property`)
    """A repository of the object it is read from: `build(obj)` on the first read, kept in
    the object's `__dict__`, where later reads find it without calling here.

    Args:
        build: makes the repository from the object (a repository class taking the store).
        async_name: the AsyncStore's name for it, where the Store's name differs.
    """

    def __init__(self, build: Callable[[S], R], *, async_name: str | None = None) -> None:
        self.build = build
        self.async_name = async_name
        self.name = ""

    def __set_name__(self, owner: type[Any], name: str) -> None:
        self.name = name

    @_overload
    def __get__(self, instance: None, owner: type[Any]) -> repository[S, R]: ...

    @_overload
    def __get__(self, instance: S, owner: type[Any]) -> R: ...

    def __get__(self, instance: S | None, owner: type[Any]) -> repository[S, R] | R:
        if instance is None:
            return self
        # two threads reading it first may both build one; every reader gets the first kept
        kept: R = instance.__dict__.setdefault(self.name, self.build(instance))
        return kept


class Repositories:
    """The repositories of a `Store`, each built on first use and kept: read one as
    `store.sessions`, `store.messages`, ... (`Store` inherits them)."""

    sessions = repository(SessionRepository)
    """Sessions: create, end, look up, list, compression lineage (`SessionRepository`)."""
    titles = repository(TitleRepository)
    """Session titles (`TitleRepository`)."""
    messages = repository(MessageRepository)
    """Messages: append, replace, read, rewind (`MessageRepository`)."""
    usage = repository(UsageRepository)
    """Token counts and usage reports (`UsageRepository`)."""
    meta = repository(MetaRepository)
    """The `state_meta` key-value pairs (`MetaRepository`)."""
    search = repository(SearchRepository)
    """Message search (`SearchRepository`)."""
    maintenance = repository(MaintenanceRepository)
    """Export, import, delete, prune and archive (`MaintenanceRepository`)."""
    housekeeping = repository(HousekeepingRepository)
    """Search index upkeep, size, VACUUM, auto-prune (`HousekeepingRepository`)."""
    compression_locks = repository(CompressionLockRepository)
    """Compression leases (`CompressionLockRepository`)."""
    gateway_routing = repository(GatewayRoutingRepository)
    """Gateway routing entries and handoffs (`GatewayRoutingRepository`)."""
    delegations = repository(AsyncDelegationRepository)
    """Async delegations (`AsyncDelegationRepository`)."""
    telegram_topics = repository(TelegramTopicRepository)
    """Telegram topic mode (`TelegramTopicRepository`)."""
    feed = repository(ChangeFeed)
    """The change feed (`ChangeFeed`)."""
    turns = repository(TurnRepository)
    """Turn leases with fencing tokens (`TurnRepository`)."""
    trash = repository(TrashRepository)
    """Trash and restore (`TrashRepository`)."""
    tags = repository(TagRepository)
    """Session tags (`TagRepository`)."""
    # `Store.redaction` is the store's redaction policy
    redactor = repository(RedactionRepository, async_name="redaction")
    """Redacting what is already stored, with the store's policy (`RedactionRepository`)."""
    space = repository(SpaceRepository)
    """Where the space goes (`SpaceRepository`)."""


#: Each repository of a Store by its attribute name, in declaration order.
REPOSITORIES: dict[str, repository[Store, Any]] = {
    name: value for name, value in vars(Repositories).items() if isinstance(value, repository)
}


def name_of(method: Callable[..., Any]) -> str:
    """The attribute of a Store holding the repository whose class defines `method`.

    Args:
        method: a function from a repository class's body (`SessionRepository.get_session`).
    """
    found = [
        name
        for name, declared in REPOSITORIES.items()
        if isinstance(declared.build, type)
        and any(value is method for value in vars(declared.build).values())
    ]
    if len(found) != 1:
        raise LookupError(f"{method.__qualname__} is not defined by one declared repository")
    return found[0]


class AsyncRunner(Protocol):
    """What an async repository runs on: a Store and a way to run blocking calls on it
    (`AsyncStore`)."""

    @property
    def sync(self) -> Store: ...

    async def run(self, call: Callable[[], T]) -> T: ...


class AsyncRepository(Generic[R]):
    """A repository of a Store (the one named `_name` there) whose methods are offered as
    coroutines (`awaitable`) run by an `AsyncRunner`.

    Args:
        store: the AsyncStore the calls run on.
    """

    _name: ClassVar[str]

    def __init__(self, store: AsyncRunner) -> None:
        self._store = store
        self._sync: R = getattr(store.sync, self._name)


class awaitable(Generic[P, T]):  # noqa: N801 (used like a decorator, as `property` is)
    """A synchronous repository method, offered as a coroutine method of an async
    repository; it runs in the store's worker threads, and its signature is the
    repository method's.

    Args:
        method: the repository method (`SessionRepository.get_session`).
    """

    def __init__(self, method: Callable[Concatenate[Any, P], T]) -> None:
        self.method = method
        functools.update_wrapper(self, method)  # type: ignore[arg-type]
        self._signature: inspect.Signature | None = None

    def _coroutine_signature(self) -> inspect.Signature:
        """The coroutine's: the repository method's without its `self` (worked out on
        first use, not for every method at import)."""
        if self._signature is None:
            signature = inspect.signature(self.method)
            parameters = list(signature.parameters.values())[1:]
            self._signature = signature.replace(parameters=parameters)
        return self._signature

    @_overload
    def __get__(self, instance: None, owner: type[Any]) -> awaitable[P, T]: ...

    @_overload
    def __get__(
        self, instance: AsyncRepository[Any], owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...

    def __get__(self, instance: AsyncRepository[Any] | None, owner: type[Any]) -> Any:
        if instance is None:
            return self
        method = self.method
        bound = instance._sync
        store = instance._store

        @functools.wraps(method)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            return await store.run(functools.partial(method, bound, *args, **kwargs))

        call.__signature__ = self._coroutine_signature()  # type: ignore[attr-defined]
        return call
