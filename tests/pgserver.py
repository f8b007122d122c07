"""A real PostgreSQL server for the tests: initdb in a directory of its own, started
on 127.0.0.1 at a free port, stopped at the end. The server refuses to run as root,
so as root it runs as the postgres user (runuser), in a directory that user owns
(pytest's temporary directories are closed to other users).

A database per test is made from a template that already holds agentctl's schema
(CREATE DATABASE ... TEMPLATE: about 40 ms, against 0.6 s for a server), and dropped
after it. The tests' server keeps its files in memory where the machine has room for
them (memory()): on a disk, making a database (some 300 files) took 130-400 ms, each
test's wait, on a machine whose disk was busy; in memory 20 ms."""

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile

from .localhttp import free_port

TEMPLATE = "agentctl_template"
SHM = "/dev/shm"            # (Linux's tmpfs, for POSIX shared memory: files in memory)
ROOM = 1 << 30              # bytes free there that make it the place, for four servers


def binaries():
    """The directory of initdb and pg_ctl, or None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found:
        return os.path.dirname(found)
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return os.path.dirname(candidates[0]) if candidates else None


def memory():
    """A directory whose files are in memory, with room for the tests' servers, or None
    (the temporary directory's default)."""
    try:
        free = os.statvfs(SHM)
    except OSError:
        return None
    return SHM if free.f_bavail * free.f_frsize >= ROOM and os.access(SHM, os.W_OK) else None


class Server:
    def __init__(self, where=None):
        """A server whose files are in a new directory under `where` (by default the
        temporary directory)."""
        self.bindir = binaries()
        if self.bindir is None:
            raise RuntimeError("PostgreSQL's server binaries (initdb, pg_ctl) are not installed")
        self.root = os.geteuid() == 0
        self.dir = tempfile.mkdtemp(prefix="agentctl-pg-", dir=where)
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.counter = itertools.count()
        if self.root:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        os.chmod(self.dir, 0o700)
        self._run("initdb", "-D", self.data, "-A", "trust", "-U", "postgres", "--no-sync",
                  "-E", "UTF8", "--locale=C.UTF-8")
        self._run("pg_ctl", "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w",
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
                        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                        "-c max_connections=200", "start")
        self._template()

    def _run(self, program, *args):
        command = [os.path.join(self.bindir, program), *args]
        if self.root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, cwd=self.dir, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def url(self, database):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def sql(self, statement, database="postgres"):
        import psycopg
        with psycopg.connect(self.url(database), autocommit=True) as conn:
            conn.execute(statement)

    def _template(self):
        from agentctl.store.db import connect
        self.sql(f"CREATE DATABASE {TEMPLATE}")
        connect(self.url(TEMPLATE)).close()        # agentctl's schema, init's row

    def database(self, empty=False):
        """A new database's URL: agentctl's schema in it unless `empty`."""
        name = f"t{os.getpid()}_{next(self.counter)}"
        self.sql(f"CREATE DATABASE {name} TEMPLATE {'template0' if empty else TEMPLATE}")
        return self.url(name)

    def drop(self, url):
        """Drop the database at `url`, ending what is still connected to it (a test's
        that is over): what a server holds stays the size of a few."""
        self.sql(f"DROP DATABASE IF EXISTS {url.rsplit('/', 1)[1]} WITH (FORCE)")

    def stop(self):
        try:
            self._run("pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
