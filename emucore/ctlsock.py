"""Control sockets: one JSON object per line over a Unix stream socket, each way.

The switch agent (`switch_agent.control.AgentControl`) and the emulated NIC
(`traffic.nic.ctl.NicControl`) are driven this way by `emu`, the workers and the tests:
``{"cmd": "counters", ...}\\n`` in, ``{"ok": true, ...}\\n`` or
``{"ok": false, "error": "<Exception>: <text>"}\\n`` out.

* `LineServer`: binds ``<path>.tmp`` and publishes it under ``<path>`` once the owner is
  ready (`ready`), so a client that can connect is answered. Two ways to serve: `handle`
  from an event loop (non-blocking listener, one request per connection, answered
  inline or, when the subclass `defer`s it, later: the agent's epoll loop) or `start`
  (a thread per connection, any number of lines on it: the NIC, whose verbs calls
  block). A subclass answers in `reply`.
* `request`: one request on a fresh connection; `exchange` returns the raw reply line.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading

__all__ = ["LineServer", "encode", "error_reply", "recv_line", "send", "exchange", "request"]


def encode(msg: dict) -> bytes:
    """One message as it travels: JSON as json.dumps writes it, then a newline."""
    return json.dumps(msg).encode() + b"\n"


def error_reply(exc: BaseException) -> dict:
    """The reply to a request that failed with `exc`."""
    return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def recv_line(s: socket.socket, chunk: int = 65536) -> bytes:
    """Bytes received until one ends with a newline or the peer closes (b"" if at once)."""
    data = b""
    while not data.endswith(b"\n"):
        got = s.recv(chunk)
        if not got:
            break
        data += got
    return data


def send(conn: socket.socket, out: bytes) -> None:
    """Send one reply and close the connection (a client gone away is not an error)."""
    with conn:
        try:
            conn.sendall(out)
        except OSError:
            pass


class LineServer:
    """A Unix stream listener at `path` answering JSON lines with `reply`."""

    def __init__(self, path: str, backlog: int, blocking: bool = True) -> None:
        """Bind ``path.tmp`` (a stale socket file of either name is removed first);
        `blocking` False for an event loop's `handle`."""
        self.path = path
        for p in (path, path + ".tmp"):
            if os.path.exists(p):
                os.unlink(p)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path + ".tmp")
        self.sock.listen(backlog)
        self.sock.setblocking(blocking)
        #: an event loop's epoll set (`handle`): connections still sending their line
        #: wait in it, {descriptor: (connection, what came)}
        self.ep: select.epoll | None = None
        self.reading: dict[int, tuple[socket.socket, bytes]] = {}

    def reply(self, req: dict) -> dict:
        """The reply to one request (an exception becomes an error reply)."""
        raise NotImplementedError

    def answer(self, data: bytes) -> bytes:
        """The encoded reply to one received line (an empty one is the request {})."""
        try:
            out = self.reply(json.loads(data or b"{}"))
        except Exception as exc:  # a bad request must not kill the process it controls
            out = error_reply(exc)
        return encode(out)

    def ready(self) -> None:
        """Publish the socket under its final name: clients may now connect."""
        os.replace(self.path + ".tmp", self.path)

    def fileno(self) -> int:
        """For epoll."""
        return self.sock.fileno()

    # -- from an event loop ------------------------------------------------------------
    def handle(self) -> None:
        """Accept and answer pending requests (non-blocking listener). With `ep` (the
        event loop's epoll set) a connection whose line has not all come yet waits in it
        (`readable` reads on when it is), the loop does not; without, it is read at once
        (up to 1 s). A request `defer` takes is answered later by the subclass (`send`)."""
        while True:
            try:
                conn, _ = self.sock.accept()
            except BlockingIOError:
                return
            if self.ep is None:
                conn.settimeout(1.0)
                try:
                    data = recv_line(conn)
                except OSError as exc:  # a client too slow to send its line
                    send(conn, encode(error_reply(exc)))
                    continue
                self.received(conn, data)
            else:
                conn.setblocking(False)
                self.reading[conn.fileno()] = (conn, b"")
                self.ep.register(conn.fileno(), select.EPOLLIN)
                self.readable(conn.fileno())  # what came with the connection

    def readable(self, fd: int) -> None:
        """Read on a connection of `reading` (its descriptor was ready in `ep`); once
        its line is complete (or the client closed), answer it."""
        conn, data = self.reading[fd]
        try:
            while not data.endswith(b"\n"):
                got = conn.recv(65536)
                if not got:  # the client closed: the line is what came
                    break
                data += got
        except BlockingIOError:
            self.reading[fd] = (conn, data)
            return
        except OSError:  # the client went away
            self.ep.unregister(fd)
            del self.reading[fd]
            conn.close()
            return
        self.ep.unregister(fd)
        del self.reading[fd]
        conn.settimeout(1.0)
        self.received(conn, data)

    def received(self, conn: socket.socket, data: bytes) -> None:
        """A whole request line: answered now, or by the subclass if it `defer`s it."""
        if not self.defer(conn, data):
            send(conn, self.answer(data))

    def defer(self, conn: socket.socket, data: bytes) -> bool:
        """Whether the request line `data` is answered later (`handle`); here never."""
        return False

    # -- a thread per connection ---------------------------------------------------------
    def start(self) -> None:
        """Serve in background threads, then publish: clients may connect from now on."""
        threading.Thread(target=self._accept_loop, daemon=True).start()
        self.ready()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            with conn, conn.makefile("rb") as rf:
                for line in rf:
                    conn.sendall(self.answer(line))
        except OSError:  # the client went away (a worker killed mid-request): not an error
            pass

    def close(self) -> None:
        """Stop listening and remove the socket file (connections still sending their
        line are closed)."""
        for conn, _ in self.reading.values():
            conn.close()
        self.reading.clear()
        self.sock.close()
        for p in (self.path, self.path + ".tmp"):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass


def exchange(path: str, payload: dict, timeout: float) -> bytes:
    """Send one request on a fresh connection; the reply line (b"" if the server closed
    the connection without one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(encode(payload))
        return recv_line(s, 1 << 20)


def request(path: str, payload: dict, timeout: float = 5.0) -> dict:
    """Send one request and return the decoded reply."""
    return json.loads(exchange(path, payload, timeout))
