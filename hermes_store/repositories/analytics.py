"""SQL expressions for analysing a Hermes database, written once for SQLite and PostgreSQL
(docs/analytics.md shows them in use).

Times are stored as epoch seconds (UTC). `utc_day` turns one into its `YYYY-MM-DD` in
UTC, `local_day` into its date in a named time zone (IANA, as `zoneinfo` knows them:
`Europe/Berlin`, `America/New_York`), daylight saving time included. SQLite has no time
zone database, so the zone's UTC offsets are looked up here, once per zone, and written
into the statement as a search over the instants where the offset changes (from 1970 to
2100; times outside that span take the nearest known offset): the same expression gives
the same days on both databases.
"""

from __future__ import annotations

from bisect import bisect_right
from datetime import UTC, datetime
from functools import cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy import ColumnElement, case, literal_column

from ..errors import InvalidInput
from ._dialect import utc_day

__all__ = ["local_day", "local_epoch", "time_zone", "utc_day", "utc_offset"]

_FIRST = int(datetime(1970, 1, 1, tzinfo=UTC).timestamp())
_LAST = int(datetime(2100, 1, 1, tzinfo=UTC).timestamp())
_DAY = 86_400
_UTC_NAMES = frozenset({"UTC", "Etc/UTC", "Etc/UCT", "UCT", "Zulu", "Etc/Zulu", "GMT"})


def time_zone(name: str) -> ZoneInfo:
    """The zone of that IANA name, or InvalidInput naming it."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"unknown time zone {name!r}: give an IANA name such as UTC, Europe/Berlin or "
            "America/New_York"
        ) from None


def _offset(zone: ZoneInfo, instant: int) -> int:
    delta = datetime.fromtimestamp(instant, zone).utcoffset()
    return 0 if delta is None else int(delta.total_seconds())


@cache
def transitions(name: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The instants (epoch seconds) from 1970 to 2100 at which the UTC offset of the zone
    `name` changes, and its offsets: `offsets[i]` holds before `instants[i]`, the last one
    after the last instant. Found day by day, each change pinned to the second."""
    zone = time_zone(name)
    instants: list[int] = []
    offsets = [_offset(zone, _FIRST)]
    day = _FIRST
    while day < _LAST:
        following = day + _DAY
        now = _offset(zone, following)
        if now != offsets[-1]:
            low, high = day, following  # offset(low) is the old one, offset(high) the new
            while high - low > 1:
                middle = (low + high) // 2
                if _offset(zone, middle) == offsets[-1]:
                    low = middle
                else:
                    high = middle
            instants.append(high)
            offsets.append(now)
        day = following
    return tuple(instants), tuple(offsets)


def utc_offset(name: str, instant: float) -> int:
    """The UTC offset in seconds of the zone `name` at `instant`, as `local_epoch` uses it."""
    instants, offsets = transitions(name)
    return offsets[bisect_right(instants, instant)]


def _number(value: int) -> ColumnElement[Any]:
    # constants written into the statement: a zone's table is the same for every call
    return literal_column(str(value))


def _offset_at(
    epoch: ColumnElement[Any], instants: tuple[int, ...], offsets: tuple[int, ...], lo: int, hi: int
) -> ColumnElement[Any]:
    """The offset among offsets[lo..hi] that holds at `epoch`, by halving the range: a
    statement evaluates about log2(transitions) comparisons per row."""
    if lo == hi:
        return _number(offsets[lo])
    middle = (lo + hi) // 2
    return case(
        (epoch < _number(instants[middle]), _offset_at(epoch, instants, offsets, lo, middle)),
        else_=_offset_at(epoch, instants, offsets, middle + 1, hi),
    )


def local_epoch(epoch: ColumnElement[Any], zone: str) -> ColumnElement[Any]:
    """`epoch` (seconds, UTC) shifted by the UTC offset the zone `zone` had at that moment:
    what `utc_day` of it gives is the date on a wall calendar there."""
    if zone in _UTC_NAMES:
        time_zone(zone)
        return epoch
    instants, offsets = transitions(zone)
    return epoch + _offset_at(epoch, instants, offsets, 0, len(offsets) - 1)


def local_day(epoch: ColumnElement[Any], zone: str = "UTC") -> ColumnElement[str]:
    """`YYYY-MM-DD` of an epoch-seconds expression in the time zone `zone` (default UTC),
    on SQLite and PostgreSQL alike."""
    return utc_day(local_epoch(epoch, zone))
