"""What a new user meets first: `space create` without --kind, a mistyped store
URL, the log without its receipts, the message ids of quarantine, and a board
key to wait for."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from broker import Store, errors
from broker.frontends.cli import main

Cli = Callable[..., Any]


# --- space create ---------------------------------------------------------------------------
def test_S1_space_create_without_kind_makes_a_run_and_its_help_says_when_to_pick_another(
    cli: Cli,
) -> None:
    made = cli("space", "create", "--json")
    assert made.code == 0, made.err
    assert made.json()["kind"] == "run" and made.json()["id"].startswith("run_")
    shown = cli("space", "show", made.json()["id"], "--json").json()
    assert shown["kind"] == "run"
    # (not through ``cli``: it reads every `space create` output as a join key)
    shown_help = CliRunner().invoke(main, ["space", "create", "--help"])
    assert shown_help.exit_code == 0
    help_text = " ".join(shown_help.output.split())
    for hint in (
        "run (a standalone run; pick it when unsure)",
        "agentiflow (a lead and its workers",
        "workflow (a run of steps",
        "session (a chat session",
        "[default: run]",
    ):
        assert hint in help_text, hint
    assert cli("space", "create", "--kind", "session", "--json").json()["kind"] == "session"


# --- a mistyped URL -------------------------------------------------------------------------
STORE_FORMS = ("sqlite:///PATH", "postgresql+psycopg://USER@HOST:PORT/DB")
SERVER_FORMS = ("http(s)://HOST:PORT", "unix:///PATH/broker.sock")


@pytest.mark.parametrize(
    "url", ["foo://x", "mysql://h/db", "sqlite:/relative.db", "postgres-ish://u:pw@h/x", "x.db"]
)
def test_S33_a_bad_store_url_names_both_store_forms_and_the_servers_in_the_cli(
    cli: Cli, tmp_path: Path, url: str
) -> None:
    for argv in (["space", "list"], ["space", "create"], ["--url", url, "dir", "list", "x"]):
        res = cli(*argv, env={"BROKER_URL": url})
        assert res.code == 2, (argv, res.err)
        line = res.err.strip()
        assert "\n" not in line and line.startswith("broker: invalid_input: bad database URL ")
        for form in STORE_FORMS + SERVER_FORMS:
            assert form in line, (form, line)
        assert "pw" not in line  # a password is never echoed
    assert not (tmp_path / "home").exists()  # nothing made


def test_S33_the_librarys_bad_url_names_both_store_forms_and_no_server(tmp_path: Path) -> None:
    for url in ("foo://x", "postgresx://u:secret@h/x"):
        with pytest.raises(errors.InvalidInput) as refused:
            Store(url)
        for form in STORE_FORMS:
            assert form in refused.value.message
        assert "http" not in refused.value.message and "secret" not in refused.value.message
        assert refused.value.fields == {"field": "url"}
