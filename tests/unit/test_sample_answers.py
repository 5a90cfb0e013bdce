"""What a metrics sample asks of the processes it reads (docs/PERFORMANCE.md "What a
sample costs the processes it asks"): a switch's `counters` answered a port at a time
(switch_agent.control `counters_reply`, `AgentControl.defer` / `step`; switch_agent.serve
`answer_gap`) - the same reply as the one-go answer on both data paths, one step per port,
served over a real Unix socket while other requests are answered at once - without waiting
for a slow client's line; brief counters between two full ones (the same values); the
metrics' rates from each port's own reading time (emu.observe.metrics.switch_rows); a
NIC read over one connection kept open (emu.run.workload.NicSource).
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from dataclasses import replace
from types import SimpleNamespace
from unittest import mock

import pytest

from emu.observe.metrics import Sampler, switch_rows
from emu.run.workload import NicSource
from emucore.ctlsock import LineServer, request
from emucore.timedil import TimeDilation
from switch_agent import serve
from switch_agent.arrivals import bound_lab_s
from switch_agent.control import AgentControl, counters_reply
from tests.unit.test_agent import make_agent
from tests.unit.test_fast_pipeline import CASES, trace
from tests.unit.test_fastagent import FROZEN, drive


def until(done, act) -> None:
    """`act()` until `done()`, for at most 10 s."""
    deadline = time.monotonic() + 10.0
    while not done():
        assert time.monotonic() < deadline, "not done in 10 s"
        act()


def stepped(agent) -> tuple[dict, int]:
    """The reply `counters_reply` builds from `snapshot_steps`, and its number of steps."""
    steps, n = counters_reply(agent.snapshot_steps()), 0
    while True:
        try:
            next(steps)
        except StopIteration as stop:
            return json.loads(stop.value), n
        n += 1


@pytest.mark.parametrize("case", ["book-small", "plain"])
def test_a_stepped_answer_is_the_whole_answer_on_both_paths(case):
    """After a trace, on the Python agent and on C's: one step per port, and the reply is
    the one-go `counters` (read at one frozen instant, each port's "t_lab" that instant)."""
    for agent in drive(CASES[case](), trace(7), {}):
        with mock.patch("switch_agent.state.time", FROZEN):
            whole = AgentControl.dispatch(SimpleNamespace(agent=agent), {"cmd": "counters"})
            got, n = stepped(agent)
        for reply in (whole, got):
            reply["fidelity"].pop("cpu_s")
        assert got == whole and n == len(agent.ports) > 1
        assert {p["t_lab"] for p in got["ports"].values()} == {1000.0}
        assert sum(p["tx_packets"] for p in got["ports"].values()) > 0


def test_a_stepping_socket_defers_counters_and_answers_the_rest_at_once(tmp_path):
    """Over the agent's real control socket: a `counters` request waits for its steps (one
    per port, then sent) while a `ping` behind it is answered by `handle` alone; a bad
    line is answered at once with the error; `close` abandons what is pending."""
    a = make_agent()
    ctl = AgentControl(str(tmp_path / "ctl"), a)
    ctl.ready()
    ctl.stepping = True
    replies: dict[str, dict] = {}
    failed: dict[str, Exception] = {}

    def ask(key: str, req: dict) -> None:
        try:
            replies[key] = request(ctl.path, req, timeout=10.0)
        except ValueError as exc:  # an empty reply: the connection closed unanswered
            failed[key] = exc

    try:
        first = threading.Thread(target=ask, args=("counters", {"cmd": "counters"}))
        first.start()
        until(lambda: ctl.pending, ctl.handle)
        ping = threading.Thread(target=ask, args=("ping", {"cmd": "ping"}))
        ping.start()
        until(lambda: "ping" in replies, ctl.handle)
        ping.join()
        assert replies["ping"]["ok"] and "counters" not in replies and len(ctl.pending) == 1
        for _ in range(len(a.ports)):
            ctl.step()
        assert len(ctl.pending) == 1  # the ports are read; the rest and the sending remain
        ctl.step()
        first.join(10.0)
        assert not ctl.pending
        c = replies["counters"]
        assert c["ok"] and c["switch"] == "rail1" and set(c["ports"]) == set(a.ports)
        assert all(p["t_lab"] >= c["t_lab"] for p in c["ports"].values())
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(ctl.path)
            s.sendall(b"{not json\n")
            ctl.handle()
            assert json.loads(s.recv(4096))["error"].startswith("JSONDecodeError")
        left = threading.Thread(target=ask, args=("left", {"cmd": "counters"}))
        left.start()
        until(lambda: ctl.pending, ctl.handle)
    finally:
        ctl.close()
    left.join(10.0)
    assert "left" in failed and "left" not in replies and not ctl.pending


def test_an_answer_step_gives_c_a_quarter_of_the_bound_at_most_a_millisecond():
    cfg = make_agent().cfg  # rail1 at TDF 1000, no cable delay: one 9216 B frame at 400G
    assert serve.answer_gap(cfg) == pytest.approx(0.25 * bound_lab_s(cfg))
    assert serve.answer_gap(cfg) == pytest.approx(0.25 * 9216 * 8 / 400e9 * 1000, rel=0.05)
    slow = replace(cfg, tdf=100_000.0)
    assert serve.answer_gap(slow) == serve.ANSWER_GAP_MAX_S == 1e-3


def test_rates_use_each_ports_own_reading_time():
    """A port read 10 ms after the snapshot began (and 10 ms after its previous reading
    began) has its rate over its own interval; a snapshot without port times (an older
    agent) uses the snapshot's."""
    td = TimeDilation(1000.0)

    def snap(t: float, tx: int, port_t: float | None) -> dict:
        port = {"tx_bytes": tx, "rx_bytes": 0, "drops": {}, "queues": {}}
        if port_t is not None:
            port["t_lab"] = port_t
        return {"switch": "rail1", "t_lab": t, "ports": {"eth1": port}}

    def bps(prev, cur) -> float:
        rows = switch_rows(prev, cur, td, 0.0)
        return next(r[5] for r in rows if r[4] == "tx_bps")

    # 1 MB in 0.5 s of lab by the port's clock (0.49 s between the snapshots' starts)
    assert bps(snap(1.0, 0, 1.0), snap(1.49, 1_000_000, 1.5)) == pytest.approx(
        td.model_rate(8e6 / 0.5))
    assert bps(snap(1.0, 0, None), snap(1.5, 1_000_000, None)) == pytest.approx(
        td.model_rate(8e6 / 0.5))


def within(brief, full, path: str = "") -> None:
    """Every value of `brief` is `full`'s at the same place."""
    if isinstance(brief, dict):
        for k, v in brief.items():
            assert k in full, f"{path}/{k} not in the full counters"
            within(v, full[k], f"{path}/{k}")
    else:
        assert brief == full, path


@pytest.mark.parametrize("case", ["book-small", "watchdog-drop"])
def test_brief_counters_are_values_of_the_full_ones(case):
    """On both paths after a trace with marks, pauses and drops: the brief snapshot's
    values are the full one's; a queue it leaves out never held a frame."""
    for agent in drive(CASES[case](), trace(7), {}):
        with mock.patch("switch_agent.state.time", FROZEN):
            full = agent.snapshot()
            brief = agent.snapshot(brief=True)
        assert brief.pop("brief") is True
        for s in (full, brief):
            s["fidelity"].pop("cpu_s")
        within(brief, full)
        for name, p in full["ports"].items():
            assert set(brief["ports"][name]) == {"rx_bytes", "tx_bytes", "drops", "queues", "pfc",
                                                 "t_lab"}
            for q, qc in p["queues"].items():
                if q not in brief["ports"][name]["queues"]:
                    assert not (qc["enqueued"] or qc["depth_bytes"] or qc["drops"]), (name, q)
        seen = [q for p in brief["ports"].values() for q in p["queues"].values()]
        assert seen and any(q["ecn_marks"] or q["drops"] for q in seen)
        assert len(json.dumps(brief["ports"])) < len(json.dumps(full["ports"])) / 3


def test_the_sampler_asks_brief_counters_between_full_ones_at_both_ends(tmp_path):
    """The first sample and the last (the run's last counters) are full, those between
    brief; the rows come out of either."""
    asked: list[bool] = []
    a = make_agent()

    def fetch(brief: bool) -> dict:
        asked.append(brief)
        return a.snapshot(brief=brief)

    s = Sampler(tmp_path / "m.csv", TimeDilation(1000.0), 20e-6, {"rail1": fetch},
                {"rail1": "switch"})  # 20 ms lab: the 20/s cap's 50 ms
    s.start()
    until(lambda: len(asked) >= 3, lambda: time.sleep(0.01))
    last = s.stop()
    assert asked[0] is False and asked[-1] is False and set(asked[1:-1]) == {True}
    assert "brief" not in last["rail1"] and "events" in last["rail1"]
    assert s.rows > 0


def test_a_client_slow_to_send_its_line_does_not_hold_the_loop(tmp_path):
    """With the loop's epoll set (`ep`), `handle` accepts a client that has connected
    but not sent its line without waiting for it; the line is answered when epoll says
    it came (`readable`), also when it comes in pieces; a client that closes unsent is
    let go."""
    a = make_agent()
    ctl = AgentControl(str(tmp_path / "ctl"), a)
    ctl.ready()
    ep = select.epoll()
    ctl.ep = ep
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(ctl.path)
            t = time.monotonic()
            ctl.handle()
            assert time.monotonic() - t < 0.5 and len(ctl.reading) == 1
            s.sendall(b'{"cmd": ')
            until(lambda: ep.poll(0), lambda: time.sleep(0.001))
            for fd, _ in ep.poll(0):
                ctl.readable(fd)
            assert len(ctl.reading) == 1  # half a line
            s.sendall(b'"ping"}\n')
            until(lambda: not ctl.reading,
                  lambda: [ctl.readable(fd) for fd, _ in ep.poll(0.01)])
            assert json.loads(s.recv(4096))["ok"] is True
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.connect(ctl.path)
            ctl.handle()
            assert len(ctl.reading) == 1
        until(lambda: not ctl.reading, lambda: [ctl.readable(fd) for fd, _ in ep.poll(0.01)])
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # left reading
            s.connect(ctl.path)
            ctl.handle()
            conn = next(iter(ctl.reading.values()))[0]
    finally:
        ctl.close()
        ep.close()
    assert conn.fileno() == -1 and not ctl.reading


def test_a_nic_is_sampled_over_one_connection_kept_open(tmp_path):
    """Three samples, one connection (the NIC serves each in a thread of its own); the
    NIC gone, a sample fails with OSError (the sampler skips it) and the next connects
    again; `close` (the sampler's stop) leaves no connection open."""
    conns: list[int] = []

    class Nic(LineServer):
        def reply(self, req: dict) -> dict:
            return {"ok": True, "cmd": req["cmd"], "conn": len(conns)}

        def _serve(self, conn: socket.socket) -> None:
            conns.append(conn.fileno())
            super()._serve(conn)

    nic = Nic(str(tmp_path / "nic"), backlog=4)
    nic.start()
    src = NicSource(nic.path)
    try:
        assert [src(True)["conn"] for _ in range(3)] == [1, 1, 1] and len(conns) == 1
        src.client._sock.shutdown(socket.SHUT_RD)  # as if the NIC closed it
        with pytest.raises(OSError):
            src(True)
        assert src.client is None
        assert src(False) == {"ok": True, "cmd": "counters", "conn": 2}
    finally:
        src.close()
        nic.close()
    assert src.client is None
