"""emucore.ctlsock: one JSON line each way, and how long each command's last answer took
(what emu.observe.metrics paces its sampling by). No root."""

import json
import threading
import time

from emucore import ctlsock


class Slow(ctlsock.LineServer):
    """Answers any request with a sum of 20,000 numbers (some time to measure); fails
    {"cmd": "boom"}."""

    def reply(self, req: dict) -> dict:
        if req.get("cmd") == "boom":
            raise ValueError("cmd: boom")
        return {"ok": True, "n": sum(range(20000))}


def test_answered_times_each_commands_last_answer(tmp_path):
    srv = Slow(str(tmp_path / "s.sock"), backlog=4, blocking=False)
    try:
        assert srv.answered == {}
        line = srv.answer(b'{"cmd": "counters"}')
        assert json.loads(line) == {"ok": True, "n": sum(range(20000))}
        assert set(srv.answered) == {"counters"} and srv.answered["counters"] > 0
        assert json.loads(srv.answer(b'{"cmd": "boom"}')) == {
            "ok": False, "error": "ValueError: cmd: boom"}
        assert set(srv.answered) == {"counters", "boom"}  # a failed answer took time too
        srv.answer(b"[1, 2]")  # not a request object: no command to time
        srv.answer(b"not json")
        assert set(srv.answered) == {"counters", "boom"}
    finally:
        srv.close()


def test_a_request_over_the_socket(tmp_path):
    srv = Slow(str(tmp_path / "s.sock"), backlog=4, blocking=False)
    srv.ready()
    try:
        t = threading.Thread(target=lambda: ctlsock.request(srv.path, {"cmd": "counters"}))
        t.start()
        deadline = time.monotonic() + 5
        while "counters" not in srv.answered and time.monotonic() < deadline:
            srv.handle()
        t.join(5)
        assert not t.is_alive() and srv.answered["counters"] > 0
    finally:
        srv.close()
