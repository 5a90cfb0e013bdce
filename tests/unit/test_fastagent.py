"""switch_agent.fastagent: which data path a running agent takes, what it refuses, and the
control socket's answers (`counters`, `show`, `reset`, `degrade`, `fidelity_reset`) in the
same shapes and values on the C path as on the Python agent, run on the same timed trace
with faults in it (a link and the switch down, a degraded link, a FIB change, DCBX
turning PFC on), also against the ASan + UBSan build (issue 30; the trace and the
reference agent are tests/unit/test_fast_pipeline.py's).
"""

from __future__ import annotations

import errno
import math
import socket
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import pytest

from emucore.qos.qosconfig import InterfaceQos
from emu.realise.net import refusal
from switch_agent import fastagent
from switch_agent.__main__ import main as switch_agent_main
from switch_agent.agent import Agent
from switch_agent.control import AgentControl
from switch_agent.fast.pipeline import Unsupported
from switch_agent.serve import discard
from switch_agent.show import COMMANDS
from switch_agent.forward import FibRoute
from traffic.tools.rawgen import build_frame
from tests.unit import test_fast_pipeline
from tests.unit.test_fast_pipeline import CASES, FIB, config, records, reference, small_qos, trace

#: one uplink for 10.0.2.0/24 and a host route on the other (a reconvergence)
FIB2 = ([FIB[0][0], FibRoute("10.0.2.0/24", (("172.16.2.1", "eth6"),)),
         FibRoute("10.0.2.12/32", (("172.16.1.1", "eth5"),))], FIB[1], FIB[2])
#: the clock `counters` and `show` read (switch_agent.state), stopped after every trace
FROZEN = SimpleNamespace(monotonic=lambda: 1000.0, process_time=time.process_time)
#: the counters that differ between two processes and say nothing of the data path
TIMING = ("t_lab", "uptime_s")


def ask(agent, req: dict) -> dict:
    """The control socket's reply to `req` (AgentControl.dispatch, without the socket)."""
    return AgentControl.dispatch(SimpleNamespace(agent=agent), req)


def test_the_data_path_chosen_by_mode(monkeypatch):
    assert fastagent.choose("fast") == fastagent.choose("auto") == "c"
    assert fastagent.choose("python") == "python"
    monkeypatch.setenv("EMU_DATAPATH", "fast")
    assert fastagent.choose(None) == "c"
    cfg = config(small_qos())
    a = fastagent.build(cfg, open_sockets=False)
    assert isinstance(a, fastagent.FastAgent) and a.snapshot()["datapath"] == "c"
    a = fastagent.build(cfg, "auto", open_sockets=False)
    assert isinstance(a, fastagent.FastAgent) and a.snapshot()["datapath"] == "c"
    a = fastagent.build(cfg, "python", open_sockets=False)
    assert type(a) is Agent and a.snapshot()["datapath"] == "python"
    with pytest.raises(ValueError, match="EMU_DATAPATH: must be one of"):
        fastagent.build(cfg, "quick", open_sockets=False)


def test_fast_refuses_what_c_does_not_implement(tmp_path):
    """`fast` never falls back: the refusal names the field (the agent exits with it).
    An event log is no refusal: C notes the events, the agent writes them."""
    cfg = config(small_qos())
    fa = fastagent.build(replace(cfg, events_path=str(tmp_path / "rail1.jsonl")), "fast",
                         open_sockets=False)
    assert type(fa) is fastagent.FastAgent and fa.fast.logging
    with pytest.raises(Unsupported, match="lb.mode"):
        fastagent.build(replace(cfg, lb={"mode": "spray"}), "fast", open_sockets=False)


def test_auto_runs_python_where_c_refuses(caplog):
    """`auto` takes the Python agent for a configuration C does not implement, and says why."""
    cfg = replace(config(small_qos()), lb={"mode": "spray"})
    with caplog.at_level("INFO", logger="switch_agent"):
        a = fastagent.build(cfg, "auto", open_sockets=False)
    assert type(a) is Agent and a.snapshot()["datapath"] == "python"
    assert "data path python (auto): lb.mode: 'spray' not implemented" in caplog.text


def test_fast_runs_the_test_hook():
    """The test drop hook is set on the C path (the control request), from the config too."""
    fa = fastagent.build(config(small_qos()), "fast", open_sockets=False)
    assert ask(fa, {"cmd": "set", "test_drop_rate": 0.1}) == {"ok": True}
    assert fa.drop_rate == 0.1 == fa.fast.drop_rate
    fa = fastagent.build(replace(config(small_qos()), test_drop_rate=0.2), "fast",
                         open_sockets=False)
    assert fa.drop_rate == 0.2


def fast_agent(cfg, now: list[float], sent: list) -> fastagent.FastAgent:
    """A FastAgent on a control agent like the reference's (fake clock, recording sockets)."""
    return fastagent.FastAgent(reference(cfg, now, sent), monotonic=False)


def answers(agent) -> dict:
    """What the control socket answers: counters (but timing) and every show command,
    read at one frozen instant of the lab clock (LLDP ages, pauses running)."""
    with mock.patch("switch_agent.state.time", FROZEN):
        return answered(agent)


def answered(agent) -> dict:
    c = ask(agent, {"cmd": "counters"})
    for k in TIMING:
        c.pop(k)
    c.pop("datapath")
    c["fidelity"].pop("cpu_s")
    show = {" ".join(cmd): ask(agent, {"cmd": "show", "text": " ".join(cmd) + (
        " eth5" if cmd[-1] == "interface" else "")}) for cmd in COMMANDS}
    return {"counters": c, "show": show}


def drive(cfg, frames, actions: dict[float, dict], failing: dict | None = None) -> tuple:
    """The reference agent and a FastAgent on `frames`, serving at every arrival and wake
    time, sending the control request `actions[t]` to both (or calling it on both) at the
    first step from t; each writes its event log, and the two hold the same records.
    `failing`: port -> a function giving a socket whose sends fail, one for each agent."""
    with tempfile.TemporaryDirectory() as d:
        return drive_logged(cfg, frames, actions, Path(d), failing or {})


def drive_logged(cfg, frames, actions: dict[float, dict], logs: Path,
                 failing: dict | None = None) -> tuple:
    now, py_sent, c_sent = [0.0], [], []
    ref = reference(replace(cfg, events_path=str(logs / "py.jsonl")), now, py_sent)
    control = reference(replace(cfg, events_path=str(logs / "c.jsonl")), now, c_sent)
    for port, sock in (failing or {}).items():
        ref.ports[port].sock, control.ports[port].sock = sock(), sock()
    fa = fastagent.FastAgent(control, monotonic=False)
    i, wake = 0, None
    while i < len(frames) or wake is not None:
        t = min(frames[i][0] if i < len(frames) else math.inf,
                wake if wake is not None else math.inf)
        now[0] = t
        for at in sorted(k for k in actions if k <= t):
            req = actions.pop(at)
            if callable(req):
                req(ref), req(fa)
            else:  # `admin` stamps its flushes with the clock: the trace's, for both
                with mock.patch("switch_agent.control.time", SimpleNamespace(monotonic=lambda: t)):
                    assert ask(ref, req) == ask(fa, req), req
        while i < len(frames) and frames[i][0] == t:  # as serve: discarded while down
            _, port, frame = frames[i]
            (ref.on_frame if ref.admin_up else discard)(ref.ports[port], frame, t)
            (fa.on_frame if fa.admin_up else discard)(fa.ports[port], frame, t)
            i += 1
        if ref.admin_up:
            assert fa.timers(t) == ref.timers(t)
        w = ref.service(t)
        assert fa.service(t) == w, t
        wake = w if w is None or w > t else math.nextafter(t, math.inf)
    assert per_port(c_sent) == per_port(py_sent)  # each wire's frames, in order and time
    ref.log.close(now[0])
    fa.agent.log.close(now[0])
    events = records(logs / "py.jsonl")
    assert records(logs / "c.jsonl") == events
    ref.logged = [dict(e) for e in events]  # for the tests' own checks
    ref.sent = py_sent
    return ref, fa


def per_port(sent: list) -> dict[str, list]:
    """(port, time, frame)s by port: frames on different wires at one instant may leave in
    either order (C's before the Python agent's LLDP)."""
    out: dict[str, list] = {}
    for port, t, frame in sent:
        out.setdefault(port, []).append((t, frame))
    return out


def test_the_kernels_frames_into_its_vlan_are_switched_as_the_pythons():
    """`from_kernel`: what the switch's kernel sends through an SVI's CPU port (a ping
    reply to a host, a broadcast) is queued at the host's access port, or at every
    port of the VLAN; C sends the same frames at the same times as the Python agent (the
    drive's per-port check), and queues nothing while the switch is down."""
    frames = trace(9)
    t = [frames[k][0] for k in (5, 15, 25, 35)]
    h1_mac, h1_ip = test_fast_pipeline.HOSTS["eth1"]
    reply = bytes(build_frame(bytes.fromhex(test_fast_pipeline.ROUTER.replace(":", "")),
                              bytes.fromhex(h1_mac.replace(":", "")), "10.0.1.1", h1_ip, 64))
    bcast = b"\xff" * 6 + bytes.fromhex(test_fast_pipeline.ROUTER.replace(":", "")) \
        + b"\x08\x06" + bytes(46)
    ref, fa = drive(config(small_qos()), frames, {
        t[0]: lambda agent: agent.from_kernel("vlan101", reply, t[0]),
        t[1]: lambda agent: agent.from_kernel("vlan101", bcast, t[1])})
    got = [(port, bytes(frame)) for port, _, frame in ref.sent if bytes(frame) in (reply, bcast)]
    vlan = sorted(test_fast_pipeline.HOSTS)
    assert sorted(got) == sorted([("eth1", reply)] + [(port, bcast) for port in vlan])
    assert answers(ref) == answers(fa)
    down = {"cmd": "admin", "state": "down"}
    with mock.patch("switch_agent.control.time", SimpleNamespace(monotonic=lambda: t[3])):
        assert ask(ref, down) == ask(fa, down)
    for agent in (ref, fa):
        agent.from_kernel("vlan101", reply, t[3])
    assert ref.ports["eth1"].queues.packets == 0
    assert answers(ref) == answers(fa)


@pytest.mark.parametrize("case", ["book-small", "watchdog-drop"])
def test_switch_and_link_down(case):
    """A link down (carrier lost) and up, then the switch down and up, mid-trace: the
    same frames flushed (queued and in flight, C's and Python's), the same answers (the
    watchdog polling at once on the way up)."""
    frames = trace(9)
    t = [frames[len(frames) * k // 6][0] for k in range(1, 6)]
    ref, fa = drive(CASES[case](), frames, {
        t[0]: lambda agent: agent.link_states({"eth5": False}, t[0]),
        t[1]: lambda agent: agent.link_states({"eth5": True}, t[1]),
        t[2]: {"cmd": "admin", "state": "down"}, t[4]: {"cmd": "admin", "state": "up"}})
    a, b = answers(ref), answers(fa)
    assert a == b
    c = a["counters"]
    drops = {k for p in c["ports"].values() for k, n in p["drops"].items() if n}
    assert {"link_down", "switch_down"} <= drops
    logged = {(e["ev"], e.get("reason") or e.get("state") or e.get("up")) for e in ref.logged}
    assert {("link", "down"), ("link", "up"), ("switch_admin", False),
            ("switch_admin", True)} <= logged
    assert sum(p["tx_packets"] for p in c["ports"].values()) > 0  # forwarding again


@pytest.mark.parametrize("case", ["book-small", "watchdog-drop", "plain"])
def test_control_answers_are_the_pythons(case):
    """counters and show, after a trace with a reset, a degraded and restored uplink and
    a fidelity reset and a FIB change in it, equal on both paths."""
    frames = trace(7)
    t = [frames[len(frames) * k // 6][0] for k in range(1, 6)]
    degrade = {"cmd": "degrade", "port": "eth5", "rate_model_bps": 50e9, "loss": 0.2,
               "corrupt": 0.1, "delay_model_s": 0.5e-6}
    ref, fa = drive(CASES[case](), frames, {
        t[0]: {"cmd": "reset"}, t[1]: degrade, t[2]: {"cmd": "fidelity_reset"},
        t[3]: {"cmd": "degrade", "port": "eth5", "restore": True},
        t[4]: lambda agent: agent.install_fib(*FIB2)})
    a, b = answers(ref), answers(fa)
    assert a == b
    c = a["counters"]
    assert sum(p["rx_packets"] for p in c["ports"].values()) < len(frames)  # reset mid-way
    assert c["ports"]["eth5"]["drops"].get("degrade_loss", 0) > 0
    assert c["fidelity"]["count"] > 0 and c["lb"]["paths"]
    if case == "book-small":
        assert any(q["ecn_marks"] for p in c["ports"].values() for q in p["queues"].values())
        assert any(sum(p["pfc"]["pause_tx"]) for p in c["ports"].values())


class Refusing:
    """A socket object (no descriptor: the FastAgent sends from Python) whose sends fail."""

    def send(self, frame) -> int:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def broken_socket() -> socket.socket:
    """A real socket (C sends on its descriptor) whose peer is gone: sends fail (EPIPE)."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    b.close()
    a.setblocking(False)
    return a


@pytest.mark.parametrize("sock", [broken_socket, Refusing])
def test_a_failed_send_is_logged(sock):
    """An uplink whose socket refuses every send: its frames are dropped ("tx_error"),
    counted as the Python agent counts them and logged (`drop` events, the same records);
    the data frames only, not the pause frames. From C's send and from Python's."""
    ref, fa = drive(CASES["book-small"](), trace(9), {}, failing={"eth5": sock})
    failed = [e for e in ref.logged if e["ev"] == "drop" and e["reason"] == "tx_error"]
    assert failed and {e["port"] for e in failed} == {"eth5"}
    a, b = answers(ref), answers(fa)
    if sock is broken_socket:  # Python's send: C has counted the frame's lag already
        assert a == b
    eth5 = a["counters"]["ports"]["eth5"]
    assert eth5["drops"]["tx_error"] >= len(failed) and eth5["tx_packets"] == 0
    assert b["counters"]["ports"]["eth5"]["drops"] == eth5["drops"]


def test_pfc_mode_auto_follows_dcbx():
    """`pfc_mode auto`: PFC goes active on a port when its neighbour's LLDP/DCBX agrees
    (the Python control plane decides, C is told); the same pauses and counters follow."""
    cfg = config(replace(small_qos(), default_interface=InterfaceQos(pfc_mode="auto")))
    peer = Agent(cfg, open_sockets=False)
    peer.dcbx.announce(peer.ports["eth1"], 0.0)
    lldp = peer.ports["eth1"].ctrl[-1][1]
    frames = trace(8)
    t0 = frames[len(frames) // 3][0]
    frames = sorted(frames + [(t0, port, lldp) for port in ("eth1", "eth2", "eth3", "eth5")],
                    key=lambda f: f[0])
    ref, fa = drive(cfg, frames, {})
    a, b = answers(ref), answers(fa)
    assert a == b
    ports = a["counters"]["ports"]
    assert ports["eth2"]["pfc"]["active"] == [3] and ports["eth6"]["pfc"]["active"] == []
    assert any(sum(p["pfc"]["pause_tx"]) for p in ports.values())


#: test_fast_pipeline's child's loading of the sanitized build, then these tests
LOAD_SANITIZED = test_fast_pipeline.SANITIZED_CHILD[
    :test_fast_pipeline.SANITIZED_CHILD.index("from tests.unit")]
SANITIZED_CHILD = LOAD_SANITIZED + """
from tests.unit import test_fastagent as t
t.test_switch_and_link_down("watchdog-drop")
t.test_control_answers_are_the_pythons("book-small")
t.test_pfc_mode_auto_follows_dcbx()
print("sanitized ok")
"""


def test_sanitized(asan_dir: Path, monkeypatch) -> None:
    """The flushes, the syncs and the DCBX pushes against an ASan + UBSan build (run as
    test_fast_pipeline runs its own, with this child)."""
    monkeypatch.setattr(test_fast_pipeline, "SANITIZED_CHILD", SANITIZED_CHILD)
    test_fast_pipeline.test_sanitized(asan_dir)


def test_a_refusal_reaches_emu(tmp_path, monkeypatch, capsys, caplog):
    """`python -m switch_agent` under EMU_DATAPATH=fast exits 2 at start on a configuration
    C does not implement, logging why; emu's wait_agents reads that reason from the log
    (emu.realise.net.refusal) into its error."""
    monkeypatch.setenv("EMU_DATAPATH", "fast")
    path, log = tmp_path / "rail1.json", tmp_path / "agent-rail1.log"
    path.write_text(replace(config(small_qos()), lb={"mode": "spray"}).to_json())
    assert switch_agent_main([str(path), "--log", str(log)]) == 2
    why = "lb.mode: 'spray' not implemented by the C pipeline (flow ECMP only)"
    assert why in capsys.readouterr().err
    line = next(r for r in caplog.records if r.levelname == "ERROR")  # as the log file has it
    log.write_text(f"2026-11-27 08:00:00,000 switch_agent INFO rail1: starting\n"
                   f"2026-11-27 08:00:00,001 {line.name} ERROR {line.getMessage()}\n")
    assert refusal(str(log)) == why
    assert refusal(str(tmp_path / "none.log")) == ""
