"""Credentials in a database URL are never shown (issue 28, item 3): not the userinfo
password, not a `password=` or `sslpassword=` query parameter, not the part of a password
after an unencoded `@`, in any output, error or progress line of the real command, run
against the real PostgreSQL server (trust authentication, so any password connects)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.processes import run_cli_here
from sqlalchemy.engine import make_url

from hermes_store.config import resolve_url, shown_url
from hermes_store.errors import InvalidURL
from hermes_store.repositories.sessions import SessionRepository
from hermes_store.store import Store

USERINFO = "Pw1uSerInfo"
QUERY = "Pw2QuEry"
SSL = "Pw3SsLkEy"
SECRETS = (USERINFO, QUERY, SSL)


def with_secrets(url: str) -> str:
    """`url` (a PostgreSQL URL without password or query) with all three credentials."""
    parsed = make_url(url)
    return parsed.set(
        password=USERINFO, query={"password": QUERY, "sslpassword": SSL}
    ).render_as_string(hide_password=False)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # the command's main in this process: what it prints does not depend on being a process
    return run_cli_here(*args, env=env)


def nothing_secret(result: subprocess.CompletedProcess[str], *extra: str) -> str:
    shown = result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    for secret in (*SECRETS, *extra):
        assert secret not in shown, f"{secret} is shown: {shown}"
    return shown


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hermes-store: error: "), lines
    return lines[0]


# --------------------------------------------------------------------------- the renderer


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://me:pw@db.example:5433/hermes?password=q&sslmode=require",
            "postgresql+psycopg://me:***@db.example:5433/hermes?password=***&sslmode=require",
        ),
        (
            "postgresql+psycopg://me@db/hermes?sslpassword=k&password=a&password=b",
            "postgresql+psycopg://me@db/hermes?password=***&password=***&sslpassword=***",
        ),
        (
            "postgresql+psycopg://me@/hermes?host=/run/postgresql&application_name=a%20b",
            "postgresql+psycopg://me@/hermes?application_name=a+b&host=%2Frun%2Fpostgresql",
        ),
        ("sqlite:////var/lib/hermes/state.db", "sqlite:////var/lib/hermes/state.db"),
    ],
)
def test_shown_url_masks_every_credential(url: str, shown: str) -> None:
    assert shown_url(make_url(url)) == shown


@pytest.mark.parametrize(
    "text",
    [
        "postgres ql://me:Pw1uSerInfo@h/db?password=Pw2QuEry",  # does not parse
        "postgresql://me:Pw1uSerInfo@h:port/db?sslpassword=Pw3SsLkEy",  # port not a number
        "postgresql://me:p@ss@[::1]/db?x=1&password=Pw2QuEry",
    ],
)
def test_a_url_that_does_not_parse_is_refused_masked(text: str) -> None:
    with pytest.raises(InvalidURL) as caught:
        resolve_url(text)
    for secret in (*SECRETS, "ss@"):
        assert secret not in str(caught.value), str(caught.value)


def test_an_unencoded_at_sign_in_a_password_is_refused_before_connecting() -> None:
    with pytest.raises(InvalidURL) as caught:
        resolve_url("postgresql://me:p@ssFrAgMeNt@127.0.0.1/db")
    message = str(caught.value)
    assert "ssFrAgMeNt" not in message and "%40" in message, message
    assert "postgresql+psycopg://me:***@127.0.0.1/db" in message, message
    # percent-encoded, it is an ordinary password
    assert resolve_url("postgresql://me:p%40ssFrAgMeNt@127.0.0.1/db").password == "p@ssFrAgMeNt"


def test_a_libpq_connection_string_is_refused_masked() -> None:
    with pytest.raises(InvalidURL) as caught:
        resolve_url(f"host=db dbname=hermes user=me password={QUERY}")
    assert QUERY not in str(caught.value) and "postgresql://" in str(caught.value)
    # a file whose name merely holds '=' is still a file
    assert resolve_url("./a=b.db").get_backend_name() == "sqlite"


# --------------------------------------------------------------------------- the command


def test_commands_never_show_a_password(pg_url: str, tmp_path: Path) -> None:
    url = with_secrets(pg_url)
    naming_the_url = [
        ("search", "x"),  # not at head yet: the error names the URL
        ("sessions", "list"),
        ("upgrade",),
        ("current",),
        ("current", "--json"),
        ("check", "--json"),
    ]
    for args in naming_the_url:
        shown = nothing_secret(run_cli(*args, "--url", url))
        assert "***" in shown, (args, shown)  # named, with the credentials masked
    for args in (("check",), ("sessions", "list"), ("stats",), ("search", "x", "--json")):
        nothing_secret(run_cli(*args, "--url", url))
    # the URL from the environment, as a deployment sets it
    nothing_secret(run_cli("current", "--json", env={"HERMES_STORE_URL": url}))

    source = tmp_path / "source.db"
    assert run_cli("upgrade", "--url", str(source)).returncode == 0
    copied = run_cli("copy", "--from", str(source), "--to", url, "--json")
    nothing_secret(copied)
    assert copied.returncode == 0, copied.stderr
    user = make_url(pg_url).username
    for extra in ((), ("--json",)):
        back = tmp_path / f"back{len(extra)}.db"
        done = run_cli("copy", "--from", url, "--to", str(back), *extra)
        shown = nothing_secret(done)
        assert done.returncode == 0, done.stderr
        assert f"postgresql+psycopg://{user}:***@" in shown, shown


def test_copy_refusals_never_show_a_password(pg_fresh_db: str, tmp_path: Path) -> None:
    url = with_secrets(pg_fresh_db)
    source = tmp_path / "source.db"
    assert run_cli("upgrade", "--url", str(source)).returncode == 0
    store = Store(str(source))
    SessionRepository(store).create_session("s1", "cli")
    store.close()
    assert run_cli("copy", "--from", str(source), "--to", url).returncode == 0
    again = run_cli("copy", "--from", str(source), "--to", url)  # the target holds data now
    assert "already holds data" in one_line_error(again)
    nothing_secret(again)
    nothing_secret(run_cli("copy", "--from", url, "--to", url))


def test_an_unencoded_at_sign_never_reaches_the_resolver(pg_fresh_db: str) -> None:
    parsed = make_url(pg_fresh_db)
    url = f"postgresql://{parsed.username}:p@ssFrAgMeNt@{parsed.host}:{parsed.port}/x"
    for args in (("current", "--url", url), ("upgrade", "--url", url)):
        result = run_cli(*args)
        line = one_line_error(result)
        nothing_secret(result, "ssFrAgMeNt")
        assert "%40" in line and "resolve" not in line, line


def test_refused_urls_never_show_a_password() -> None:
    for url in (
        f"postgresql+psycopg2://me:{USERINFO}@h/db?password={QUERY}",
        f"mysql://me:{USERINFO}@h/db?sslpassword={SSL}",
        f"postgresql://me:{USERINFO}@h:port/db?password={QUERY}",
        f"postgres ql://me:{USERINFO}@h/db?password={QUERY}&sslpassword={SSL}",
        f"host=h dbname=d password={QUERY}",
    ):
        nothing_secret(run_cli("current", "--url", url))
        one_line_error(run_cli("current", "--url", url))
