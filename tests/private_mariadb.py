"""A MariaDB server of one test's own, on a spare port, that the test may stop and start again.

The MariaDB twin of ``PrivatePostgres`` (tests/scheduling/test_worker_crashes.py): a restart
under running workers and schedulers cannot be tried on the machine's shared server, which
other tests and people use. The server's data directory is made by ``mariadb-install-db``
(root may log in over TCP without a password), and ``mariadbd`` runs with ``--no-defaults`` so
that nothing of the machine's own configuration (its port, socket, data directory) applies;
its socket and pid file stay in the test's directory, which goes with the server.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Processes, free_port, wait_for

#: Seconds a server may take to be made, to start or to stop on a loaded machine.
SLOW = 60.0


def _program(name: str) -> str:
    """Where Debian keeps a MariaDB program: ``mariadbd`` is in /usr/sbin, off most PATHs."""
    found = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.fail(f"a private MariaDB needs {name} (apt-get install mariadb-server)")
    return found


def _driver() -> Any:
    """mysqlclient, imported when a server is used, not with the module: a run on PostgreSQL
    collects the tests that name this server without needing it installed."""
    import MySQLdb

    return MySQLdb


def _account() -> str:
    """The server runs as ``mysql`` where that account exists (mariadbd refuses root unless
    told so), as root elsewhere."""
    try:
        pwd.getpwnam("mysql")
    except KeyError:
        return "root"
    return "mysql"


class PrivateMariaDB:
    """A MariaDB server of this test's own, on a spare port, that the test may stop."""

    def __init__(self, processes: Processes, root: Path, env: dict[str, str]) -> None:
        self.processes = processes
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.env = {**env, "LC_ALL": "C"}
        self.user = _account()
        self.server: Any = None

    def url(self, name: str) -> str:
        return f"mysql://root@127.0.0.1:{self.port}/{name}"

    def install(self) -> None:
        """The system tables, as ``mariadb-install-db`` makes them for a new server."""
        command = [
            _program("mariadb-install-db"),
            "--no-defaults",
            f"--datadir={self.data}",
            f"--user={self.user}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ]
        child = self.processes.start(command, env=self.env, name="mariadb-install-db")
        assert child.wait(timeout=SLOW) == 0, self.processes.log_of(child)

    def start(self) -> None:
        """Start the server on its port; the durability settings are a test's, not a
        production server's (the log written at each commit, flushed once a second)."""
        command = [
            _program("mariadbd"),
            "--no-defaults",
            f"--datadir={self.data}",
            f"--user={self.user}",
            f"--port={self.port}",
            "--bind-address=127.0.0.1",
            f"--socket={self.root / 'mariadbd.sock'}",
            f"--pid-file={self.root / 'mariadbd.pid'}",
            "--skip-name-resolve",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=2",
            "--max-connections=200",
        ]
        self.server = self.processes.start(command, env=self.env, name="mariadbd")
        wait_for(self.accepts, timeout=SLOW, message="the private MariaDB accepts connections")

    def connect(self, name: str = "") -> Any:
        """A connection as root, its session in UTC as the project's own sessions are."""
        return _driver().connect(
            host="127.0.0.1",
            port=self.port,
            user="root",
            database=name,
            connect_timeout=2,
            autocommit=True,
            init_command="SET time_zone = '+00:00'",
        )

    def accepts(self) -> bool:
        if self.server is not None and self.server.poll() is not None:
            raise AssertionError(f"mariadbd ended: {self.processes.log_of(self.server)[-3000:]}")
        try:
            self.connect().close()
        except _driver().OperationalError:
            return False
        return True

    def create_database(self, name: str) -> None:
        """A database in the character set and collation the project's test databases use."""
        self.query("", f"CREATE DATABASE {name} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")

    def stop(self) -> None:
        """A normal shutdown (SIGTERM): every session is cut, as in a database restart in
        production, and the server ends once its buffers are written."""
        if self.server is not None and self.server.poll() is None:
            os.kill(self.server.pid, signal.SIGTERM)
            self.server.wait(timeout=SLOW)
        self.server = None

    def query(self, name: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        connection = self.connect(name)
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, params or None)
                return list(cursor.fetchall())
        finally:
            connection.close()


@pytest.fixture
def private_mariadb(processes: Processes, process_env: dict[str, str]) -> Iterator[PrivateMariaDB]:
    """A private MariaDB, started; stopped and its directory removed after the test."""
    root = Path(tempfile.mkdtemp(prefix="duecourse-mariadb-"))
    account = pwd.getpwnam(_account())
    os.chown(root, account.pw_uid, account.pw_gid)
    server = PrivateMariaDB(processes, root, process_env)
    try:
        server.install()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)
