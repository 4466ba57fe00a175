"""The test helper that runs SQLite-style SQL on PostgreSQL translates placeholders only
where they are placeholders."""

from __future__ import annotations

from helpers.raw_sql import to_pyformat


def test_positional_placeholders_outside_literals() -> None:
    sql = "SELECT '?', \"a?\" FROM t WHERE a = ? AND b LIKE '50%' AND c::text = ?"
    assert to_pyformat(sql, named=False) == (
        "SELECT '?', \"a?\" FROM t WHERE a = %s AND b LIKE '50%%' AND c::text = %s"
    )


def test_named_placeholders_and_casts() -> None:
    sql = "SELECT ':no', :yes, a::int FROM t WHERE k = :k_2 AND p = '%'"
    assert to_pyformat(sql, named=True) == (
        "SELECT ':no', %(yes)s, a::int FROM t WHERE k = %(k_2)s AND p = '%%'"
    )
