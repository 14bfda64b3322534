"""The suite's own hygiene: no test writes to the user's home (tests/conftest.py).

The session runs with a HOME of its own, so a store opened at its default
place lands there and fails the run; PostgreSQL key files go to the test's
folder (tests/pgtest.py), never to a broker folder of the user's. The check
that fails the run is tested here on folders made for it.
"""

from __future__ import annotations

import os
import pwd
import tempfile
from pathlib import Path

import conftest
import pgtest
import pytest

from broker.store import postgres
from broker.store.settings import broker_home


def test_hygiene_the_suite_runs_with_a_home_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(os.environ["HOME"])
    assert home.parent == Path(tempfile.gettempdir())  # the session's own folder
    assert home != Path(pwd.getpwuid(os.getuid()).pw_dir)
    assert not [v for v in conftest.XDG_VARS if os.environ.get(v)]
    monkeypatch.delenv("BROKER_HOME", raising=False)
    assert broker_home() == home / ".local" / "share" / "broker"


def test_hygiene_a_store_in_the_home_folder_fails_the_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".local" / "share" / "broker").mkdir(parents=True)
    (home / ".local" / "share" / "broker" / "broker.db").write_bytes(b"")
    problems = conftest.home_problems(home, [], "broker_t_1_abc")
    assert len(problems) == 1
    assert problems[0].endswith("~/.local/share/broker/broker.db"), (
        problems
    )  # names what was written
    assert "instead of its own temp folder" in problems[0]


def test_hygiene_a_file_of_this_session_in_the_real_broker_folder_fails_the_run(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    ours = "pg-127.0.0.1-5432-broker_t_1_abc_0a1b2c3d.operator-key"
    (real / ours).write_text("k\n")
    (real / "pg-127.0.0.1-5432-broker_t_2_def_00000000.operator-key").write_text("k\n")
    (real / "broker.db").write_bytes(b"")  # another run's (a user's own store): not ours
    problems = conftest.home_problems(tmp_path / "home", [real], "broker_t_1_abc")
    assert problems == [f"this session wrote into the real {real}: {ours}"]


def test_hygiene_a_clean_home_is_no_problem(tmp_path: Path) -> None:
    (tmp_path / "home" / ".config").mkdir(parents=True)  # a tool's own folder: not the broker's
    assert conftest.home_problems(tmp_path / "home", [tmp_path / "missing"], "x") == []


def test_hygiene_a_postgresql_key_file_lives_in_the_tests_folder(tmp_path: Path) -> None:
    with pgtest.database(home=tmp_path / "home") as url:
        key = postgres.key_path(postgres.conninfo(url))
        assert key.parent == tmp_path / "home" and key.read_text().strip()
    assert not key.exists()
    with pgtest.database() as url:  # no home given: a temp folder of its own, removed after
        key = postgres.key_path(postgres.conninfo(url))
        assert key.parent.parent == Path(tempfile.gettempdir()) and key.exists()
    assert not key.parent.exists()


def test_hygiene_a_reused_postgresql_clone_comes_back_as_the_template_left_it(
    tmp_path: Path,
) -> None:
    """The contract fixtures take a used clone back (tests/pgtest.py): the next
    test finds it under a new name, with the template's rows only; a clone
    whose schema a test changed is dropped, never handed on."""
    import psycopg

    from broker import Operator, Store

    def rows(url: str, sql: str) -> list[tuple[object, ...]]:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    with pgtest.database(home=tmp_path / "a", reuse=True) as first:
        store = Store(first)
        try:
            Operator(store).create_space("workflow")
        finally:
            store.close()
        template_rows = rows(first, "SELECT * FROM operator_key")
        assert rows(first, "SELECT count(*) FROM spaces") == [(1,)]
        rows(first, "UPDATE operator_key SET key_hash = 'changed'")  # as a key rotation would
    kept = pgtest._pool[-1]  # taken back, under a new name
    assert pgtest.url_of(kept) != first
    with pgtest.database(home=tmp_path / "b", reuse=True) as second:
        assert second == pgtest.url_of(kept)  # the next test gets it
        assert rows(second, "SELECT count(*) FROM spaces") == [(0,)]
        assert rows(second, "SELECT * FROM operator_key") == template_rows
        with pytest.raises(psycopg.OperationalError):  # a straggler of the first test
            rows(first, "SELECT 1")
        rows(second, "CREATE TABLE junk (a int)")
        pooled = list(pgtest._pool)
    assert pgtest._pool == pooled  # the changed clone was not kept
    assert rows(pgtest.url_of(pgtest._template()), "SELECT 1") == [(1,)]
    with pgtest.database(home=tmp_path / "c", reuse=True) as third:
        found = rows(third, "SELECT count(*) FROM pg_class WHERE relname = 'junk'")
        assert found == [(0,)]
