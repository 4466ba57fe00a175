"""`hermes-store redact` and `hermes-store stats --space` (issue 39, items 3 and 5): the
command never prints a matched secret, is a dry run unless --apply, refuses a bad pattern
with its name; the space report's three output forms."""

from __future__ import annotations

import csv
import io
import json

import pytest

from hermes_store import MessageRepository, SessionRepository, Store
from hermes_store.cli import main
from hermes_store.redaction import RedactionPolicy
from hermes_store.repositories.space import DEFAULT_SCAN_SECONDS

AWS = "AKIAIOSFODNN7EXAMPLE"
TICKET = "TICKET-424242"


def _seed(url: str) -> None:
    with Store(url, redaction=RedactionPolicy.off()) as store:
        SessionRepository(store).create_session("s1", "cli")
        MessageRepository(store).append_messages(
            "s1",
            [
                {"role": "user", "content": f"key {AWS} for {TICKET}"},
                {"role": "tool", "tool_name": "shell", "content": "out " * 50},
            ],
        )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_redact_dry_run_then_apply_never_prints_a_secret(
    backend_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(backend_url)
    own = ["--pattern", r"ticket=TICKET-\d+"]
    status, out = _run(capsys, "redact", "--url", backend_url, *own)
    assert status == 0 and "dry run" in out
    assert AWS not in out and TICKET not in out
    assert "aws-access-key" in out and "ticket" in out
    status, out = _run(capsys, "redact", "--url", backend_url, *own, "--apply", "--json")
    report = json.loads(out)
    assert report["applied"] and report["counts"]["aws-access-key"] == 1
    assert report["counts"]["ticket"] == 1 and report["rows_matched"] == 1
    with Store(backend_url) as store:
        content = MessageRepository(store).get_messages("s1")[0]["content"]
    assert content == "key [REDACTED:aws-access-key] for [REDACTED:ticket]"
    status, out = _run(capsys, "redact", "--url", backend_url, *own, "--restart", "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert {r["pattern"]: r["count"] for r in rows}["aws-access-key"] == "0"


def test_redact_refuses_a_bad_pattern_by_name(
    fresh_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    secretish = "sk-proj-" + "Z" * 30
    with pytest.raises(SystemExit) as caught:
        main(["redact", "--url", fresh_db, "--pattern", f"leaky=({secretish}"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "'leaky'" in err and "does not compile" in err and secretish not in err


def test_redact_pattern_without_a_name_is_not_echoed(
    fresh_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    secretish = "sk-proj-" + "Y" * 30
    with pytest.raises(SystemExit) as caught:
        main(["redact", "--url", fresh_db, "--pattern", secretish])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "expected name=regular expression" in err
    assert secretish[:8] not in err and "YYYY" not in err


def test_redact_with_no_patterns_is_an_error(
    fresh_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out = _run(capsys, "redact", "--url", fresh_db, "--no-builtin")
    assert status == 2 and "policy is off" in out


def test_stats_space_table_json_and_csv(
    backend_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(backend_url)
    status, out = _run(capsys, "stats", "--space", "--url", backend_url)
    assert status == 0
    assert "space by object" in out and "largest sessions" in out and "largest tool outputs" in out
    assert "messages" in out and "s1" in out
    status, out = _run(capsys, "stats", "--space", "--url", backend_url, "--json", "--top", "1")
    report = json.loads(out)
    assert report["largest_sessions"][0]["session_id"] == "s1"
    assert report["largest_tool_outputs"][0]["tool_name"] == "shell"
    assert report["scan"]["complete"]
    status, out = _run(capsys, "stats", "--space", "--url", backend_url, "--csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    sections = {r["section"] for r in rows}
    assert sections == {"object", "session", "tool_output"}
    assert any(r["section"] == "object" and r["name"] == "messages" for r in rows)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["stats", "--top", "3"], "go with --space"),
        (["stats", "--full-scan"], "go with --space"),
        (["stats", "--space", "--by", "model"], "not --space"),
    ],
)
def test_stats_options_of_the_other_view_are_refused(
    fresh_db: str, capsys: pytest.CaptureFixture[str], argv: list[str], says: str
) -> None:
    status, out = _run(capsys, *argv, "--url", fresh_db)
    assert status == 2 and says in out


def test_stats_space_scan_limit_reaches_the_report(
    fresh_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _seed(fresh_db)
    status, out = _run(capsys, "stats", "--space", "--url", fresh_db, "--json", "--full-scan")
    assert status == 0 and json.loads(out)["scan"]["complete"]
    assert json.loads(out)["scan"]["limit_seconds"] is None
    # neither flag: the scan is bounded by the default limit
    status, out = _run(capsys, "stats", "--space", "--url", fresh_db, "--json")
    assert status == 0 and json.loads(out)["scan"]["limit_seconds"] == DEFAULT_SCAN_SECONDS
    status, out = _run(
        capsys, "stats", "--space", "--url", fresh_db, "--full-scan", "--scan-seconds", "5"
    )
    assert status == 2 and "give one" in out
    status, out = _run(capsys, "stats", "--space", "--url", fresh_db, "--scan-seconds", "0")
    assert status == 0 and "largest sessions" in out
