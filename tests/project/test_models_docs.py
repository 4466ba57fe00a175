"""The models explain themselves: every mapped class and every column has a description
(taken from docs/reference/schema.md), none of it reaches the DDL, and the model of `sessions` has a
name that does not shadow `sqlalchemy.orm.Session`."""

from __future__ import annotations

from sqlalchemy import orm
from sqlalchemy.schema import CreateTable

from hermes_store import models
from hermes_store.models import Base, HermesSession, metadata


def test_every_model_and_column_is_documented() -> None:
    undocumented = [
        mapper.class_.__name__
        for mapper in Base.registry.mappers
        if not (mapper.class_.__doc__ or "").strip()
    ]
    assert undocumented == []
    columns = [f"{t.name}.{c.name}" for t in metadata.tables.values() for c in t.columns]
    # docs/reference/schema.md section 2, then the project's own tables (hermes_store_*)
    assert len(columns) == (
        48 + 23 + 18 + 2 + 4 + 4 + 18 + 1 + 4 + 5 + 2 + 4 + 2 + 1 + 2 + 8 + 4 + 8 + 3 + 4
    )
    assert [name for name in columns if not _doc(name)] == []
    # the attribute a notebook user inspects carries it too
    assert HermesSession.started_at.__doc__ == _doc("sessions.started_at")
    assert "epoch seconds" in (HermesSession.started_at.__doc__ or "")


def _doc(qualified: str) -> str:
    table, column = qualified.split(".")
    return (metadata.tables[table].c[column].doc or "").strip()


def test_the_descriptions_stay_out_of_the_ddl() -> None:
    for table in metadata.tables.values():
        assert table.comment is None
        assert all(c.comment is None for c in table.columns)
        assert "COMMENT" not in str(CreateTable(table)).upper()


def test_hermes_session_does_not_shadow_the_orm_session() -> None:
    assert models.Session is HermesSession  # the old name keeps working
    assert "HermesSession" in models.__all__ and "Session" not in models.__all__
    namespace: dict[str, object] = {"Session": orm.Session}
    exec("from hermes_store.models import *", namespace)  # noqa: S102
    assert namespace["Session"] is orm.Session
    assert namespace["HermesSession"] is HermesSession
    assert HermesSession.__tablename__ == "sessions"
