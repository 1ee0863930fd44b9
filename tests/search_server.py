"""Test helpers for the search backends: a real osmem-server process and a fault-injecting TCP proxy.

* :func:`start_osmem` starts ``osmem-server -addr 127.0.0.1:0 -no-stdin-watch`` (the binary bundled
  with the ``osmem-server`` wheel, or ``OSMEM_SERVER_BIN``), parses the URL from its first JSON
  line, yields it and kills the process.
* :class:`TcpProxy` forwards ``127.0.0.1:<port>`` to the server and can be switched to ``refuse``
  (the listening socket is closed: connection refused) or ``blackhole`` (connections are accepted,
  nothing is ever answered) and back to ``forward``. Switching modes drops every open connection,
  so pooled keep-alive connections cannot bypass the fault.
* :func:`allow_es_client_against_osmem` makes the official ``elasticsearch`` client send plain
  ``application/json`` (osmem answers 406 to ``application/vnd.elasticsearch+json``). Tests only.

Fixtures: ``search_url`` (session, in ``tests/conftest.py``) is the URL of one server started with
:func:`start_osmem`; ``search_proxy`` (in ``tests/test_search_backend.py``) a :class:`TcpProxy` to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import socket
import subprocess
import threading
import time
from collections.abc import Iterator


def osmem_binary() -> str:
    """Path of the osmem-server binary (``OSMEM_SERVER_BIN``, else the one bundled in the wheel)."""
    from osmem_server import resolve_binary

    return resolve_binary(os.environ.get("OSMEM_SERVER_BIN"))


@contextlib.contextmanager
def start_osmem(startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Run an osmem-server process for the ``with`` block; yields its base URL (``http://127.0.0.1:N``).

    Raises:
        RuntimeError: the server did not print its URL within ``startup_timeout_s``.
    """
    proc = subprocess.Popen([osmem_binary(), "-addr", "127.0.0.1:0", "-no-stdin-watch"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    found: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with contextlib.suppress(ValueError):
                msg = json.loads(line)
                if isinstance(msg, dict) and "url" in msg:
                    found.append(msg["url"])
                    break
        for _ in proc.stdout:  # keep draining so the server never blocks on a full pipe
            pass

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + startup_timeout_s
    while not found and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        if not found:
            raise RuntimeError(f"osmem-server did not start (exit code {proc.poll()})")
        yield found[0]
    finally:
        proc.kill()
        proc.wait(timeout=10)


def allow_es_client_against_osmem() -> None:
    """Tests only: make ``elasticsearch`` send ``application/json`` instead of the compat mimetype.

    Sets ``_COMPAT_MIMETYPE_SUB`` in ``elasticsearch._sync.client._base`` and
    ``elasticsearch._async.client._base`` to ``r"application/\\g<1>"``.
    """
    import elasticsearch._async.client._base as abase
    import elasticsearch._sync.client._base as sbase

    for mod in (abase, sbase):
        mod._COMPAT_MIMETYPE_SUB = r"application/\g<1>"  # type: ignore[attr-defined]


class TcpProxy:
    """A threaded TCP forwarder ``127.0.0.1:port`` -> ``target`` with fault modes.

    Args:
        target_host / target_port: where to forward.

    Attributes:
        port: the local port (fixed for the proxy's life, also across ``refuse`` and back).
        url: ``http://127.0.0.1:<port>``.
        mode: ``"forward"``, ``"refuse"`` or ``"blackhole"``.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.mode = "forward"
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self._stop = threading.Event()
        self.port = self._listen(0)
        self.url = f"http://127.0.0.1:{self.port}"

    @classmethod
    def to_url(cls, url: str) -> TcpProxy:
        """A proxy to ``http://host:port`` (the URL's host and port)."""
        hostport = url.split("://", 1)[1].split("/", 1)[0]
        host, port = hostport.rsplit(":", 1)
        return cls(host, int(port))

    def _listen(self, port: int) -> int:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", port))
        s.listen(64)
        self._listener = s
        threading.Thread(target=self._accept_loop, args=(s,), daemon=True).start()
        return int(s.getsockname()[1])

    def _accept_loop(self, listener: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                return
            with self._lock:
                self._conns.add(client)
                mode = self.mode
            threading.Thread(target=self._serve, args=(client, mode), daemon=True).start()

    def _serve(self, client: socket.socket, mode: str) -> None:
        upstream: socket.socket | None = None
        try:
            if mode == "blackhole":
                while client.recv(65536):
                    pass
                return
            upstream = socket.create_connection(self.target, timeout=10)
            upstream.settimeout(None)
            with self._lock:
                self._conns.add(upstream)
            sel = selectors.DefaultSelector()
            sel.register(client, selectors.EVENT_READ, upstream)
            sel.register(upstream, selectors.EVENT_READ, client)
            while True:
                for key, _ in sel.select():
                    data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            for s in (client, upstream):
                if s is not None:
                    with self._lock:
                        self._conns.discard(s)
                    with contextlib.suppress(OSError):
                        s.close()

    def _drop_connections(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def set_mode(self, mode: str) -> None:
        """Switch to ``forward``, ``refuse`` or ``blackhole``; open connections are dropped."""
        if mode not in ("forward", "refuse", "blackhole"):
            raise ValueError(f"unknown proxy mode {mode!r}")
        with self._lock:
            old, self.mode = self.mode, mode
        self._drop_connections()
        if mode == "refuse":
            self._close_listener()
        elif old == "refuse" and mode != "refuse":
            self._listen(self.port)

    def close(self) -> None:
        """Stop accepting and drop every connection."""
        self._stop.set()
        self._close_listener()
        self._drop_connections()

    def _close_listener(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            self._listener.close()
            self._listener = None
