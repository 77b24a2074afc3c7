"""A real PostgreSQL server for the store tests (Debian's ``postgresql`` package, which CI's
``.ci/run`` installs): ``initdb`` into a temporary folder, ``pg_ctl start`` on 127.0.0.1 (a free
port, scram-sha-256 password auth) and a unix socket in the same folder (trust), stopped and
removed afterwards. The password reaches libpq through a pgpass file (``PGPASSFILE``), never a
URL. As root the server runs as the ``postgres`` system user (initdb refuses root).

Fixtures: ``pg_server`` (one per session), ``pg_url`` (a fresh database on it per test),
``any_db`` (a SQLite path, then a PostgreSQL database: one test on both back ends),
``own_pg_server`` (a private server a test may stop and restart).
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import List, Optional

import pytest

USER = "geocon"
PASSWORD = "s3cret-" + uuid.uuid4().hex[:8]  # must never appear in any output


def pg_bin() -> Optional[Path]:
    """The newest ``/usr/lib/postgresql/<v>/bin`` holding initdb, pg_ctl and postgres."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name)
                   if Path(p).parent.parent.name.isdigit() else 0)
    if found:
        return Path(found[-1]).parent
    exe = shutil.which("initdb")
    return Path(exe).parent if exe else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: the system temporary folder, read at import (before the suite points TMPDIR at pytest's own
#: folder, which only root may enter): the server runs as the 'postgres' user under root
SERVER_TMP = tempfile.gettempdir()


class PgServer:
    """One throw-away server (module doc); ``url(db)`` names a database on it."""

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="geocon-pg-", dir=SERVER_TMP))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: List[str] = []
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and no 'postgres' user to run the server as")
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.root.chmod(0o700)
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self.as_user:
            os.chown(pwfile, pwd.getpwnam("postgres").pw_uid, -1)
        self._run("initdb", "-D", str(self.data), "-U", USER, "--pwfile", str(pwfile),
                  "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync")
        pwfile.unlink()
        self.pgpass = Path(tempfile.mkdtemp(prefix="geocon-pgpass-", dir=SERVER_TMP)) / "pgpass"
        self.pgpass.write_text(f"127.0.0.1:{self.port}:*:{USER}:{PASSWORD}\n")
        self.pgpass.chmod(0o600)
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        out = subprocess.run([*self.as_user, str(self.bindir / tool), *args],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{tool} failed: {out.stdout[-2000:]} {out.stderr[-2000:]}")

    def start(self) -> None:
        opts = (f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._run("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "log"),
                  "-w", "-t", "60", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def url(self, dbname: str = "postgres", password: bool = False) -> str:
        auth = f"{USER}:{PASSWORD}" if password else USER
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{dbname}"

    def create_db(self) -> str:
        import psycopg
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(host=str(self.root), port=self.port, user=USER, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name

    def close(self) -> None:
        try:
            self.stop("immediate")
        except RuntimeError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.pgpass.parent, ignore_errors=True)


def start_server() -> PgServer:
    """A started server, or a skip with the one-line reason."""
    pytest.importorskip("psycopg", reason="psycopg 3 not installed (pip install "
                                          "'geocon_torch[postgres]')")
    bindir = pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries not found under /usr/lib/postgresql/*/bin "
                    "(apt-get install postgresql)")
    try:
        return PgServer(bindir)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"PostgreSQL server could not be started: {' '.join(str(exc).split())[:200]}")


@pytest.fixture(scope="session")
def pg_server():
    server = start_server()
    old = os.environ.get("PGPASSFILE")
    os.environ["PGPASSFILE"] = str(server.pgpass)
    yield server
    if old is None:
        os.environ.pop("PGPASSFILE", None)
    else:
        os.environ["PGPASSFILE"] = old
    server.close()


@pytest.fixture
def pg_url(pg_server) -> str:
    """A fresh, empty database on the session's server (no password in the URL)."""
    return pg_server.url(pg_server.create_db())


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request, tmp_path) -> str:
    """The same test on both back ends: a SQLite path, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "r.sqlite")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def own_pg_server(monkeypatch):
    """A private server (stop / start it freely), with its pgpass in the environment."""
    server = start_server()
    monkeypatch.setenv("PGPASSFILE", str(server.pgpass))
    yield server
    server.close()
