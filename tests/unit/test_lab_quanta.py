"""labs/L11.3.yaml's quanta variant, judged on the event log a switch agent writes for it
(book ch.11 L2534-2541: 0xFFFF quanta of 512 bit times at 400 Gbps, 83.9 us; L2553: a
quanta-0 frame resumes). An in-memory agent (TDF 1000) with the variant's host-port rate
receives the PFC frames of the variant's `faults` at their times, with priority 3 frames
queued on that port; the lab's event checks of the variant pass on that log, and fail
where the switch or the injection would be wrong: the pause time of a 200 G port, a
refreshed pause, a resume lost, a resume ignored."""

import pytest

from emu.lab import checks as C
from emu.lab import schema as S
from emu.lab.evidence import Evidence
from emucore.eventlog import read_events
from emucore.qos.pfc import EgressPause
from emucore.wire.pause import pause_frame
from switch_agent.agent import Agent
from switch_agent.agentconfig import AgentConfig, PortConfig
from switch_agent.forward import FibRoute

from .fakes import FakeSock, mac
from .test_agent_qos import H, ROUTER, frame, qos

TDF = 1000.0
LAB = S.load("L11.3")
[QUANTA] = [v for v in LAB.variants if v.name == "quanta"]
#: (model s, priority, quanta) of the frames the variant injects from h3g3's NIC port
INJECTED = [(st.fault.at_s, int(st.fault.param("prio")), int(st.fault.param("quanta")))
            for st in QUANTA.faults if st.fault.kind == "pause"]
HOST_BPS = next(lk.model_bps for lk in QUANTA.fabric.links
                if {lk.a.node, lk.b.node} == {"rail3", "h3"})
CHECKS = {c["name"]: c for c in LAB.checks
          if c.get("variant") == "quanta" and c["kind"] in ("span", "count")}
INTERVAL = "quanta: one 0xFFFF pause, not refreshed, holds priority 3 on rail3 -> h3 (us)"
RESUME = "quanta: a quanta-0 frame ends the second pause within one frame time (us)"
COUNT = "quanta: PFC frames rail3 received from h3g3 (the three injected, no refresh)"


def replay(tmp_path, model_bps: float, frames) -> Evidence:
    """The agent's log for PFC `frames` (model s, prio, quanta) received on its port
    towards h3 (eth4, `model_bps`), priority 3 frames from eth1 queued there."""
    ports = tuple(PortConfig(f"eth{i + 1}", ROUTER, model_bps, 8e6, 0.0, 101, f"h{i + 1}:nic1")
                  for i in range(4))
    path = tmp_path / "rail3.jsonl"
    a = Agent(AgentConfig("rail3", TDF, "/nonexistent", ports,
                          svi={"vlan101": {m: f"eth{i + 1}" for i, m in enumerate(H)}},
                          qos=qos(), events_path=str(path)), open_sockets=False)
    for p in a.ports.values():
        p.sock = FakeSock()
    a.install_fib([FibRoute("10.0.1.0/24", ((None, "vlan101"),))], {}, {"10.0.1.1": "vlan101"})
    a.next_lldp = float("inf")
    p4 = a.ports["eth4"]
    for _ in range(50):  # 450 KB at 1 MB/s lab: still queued when the last frame arrives
        a.on_frame(a.ports["eth1"], frame(0, 3, dscp=24), 0.0)
    for at_s, prio, quanta in sorted(frames):
        now = at_s * TDF
        a.service(now)
        a.on_frame(p4, pause_frame(mac(H[3]), prio, quanta), now)
    assert p4.queues.packets > 0  # frames of priority 3 were waiting all along
    a.service(1.0)  # past every pause: expiries noticed
    a.snapshot()  # flushes the log
    return Evidence(read_events([path]), links={"rail3->h3": ("rail3", "eth4")},
                    link_bps={"rail3->h3": model_bps})


def failing(ev: Evidence) -> dict:
    """The lab's quanta event checks that fail on `ev`, with what they measured."""
    out = {}
    for name, c in CHECKS.items():
        measured, held = C.measure(ev, c)
        if not C.judge(measured, held, c)[0]:
            out[name] = measured
    return out


def test_the_variant_injects_three_frames_on_a_400g_host_link():
    assert HOST_BPS == 400e9
    assert [(p, q) for _, p, q in INJECTED] == [(3, 0xFFFF), (3, 0xFFFF), (3, 0)]
    assert set(CHECKS) == {INTERVAL, RESUME, COUNT}


def test_the_agent_s_pauses_meet_the_lab_s_bounds(tmp_path):
    ev = replay(tmp_path, HOST_BPS, INJECTED)
    assert failing(ev) == {}
    interval, _ = C.measure(ev, CHECKS[INTERVAL])
    assert interval == pytest.approx(65535 * 512 / HOST_BPS * 1e6, abs=0.011)
    assert C.measure(ev, CHECKS[RESUME]) == (0.0, None)


def _ignore_resumes(monkeypatch):
    """A switch that does not act on quanta 0 (keeps the pause until its timer)."""
    real = EgressPause.on_pfc

    def on_pfc(self, class_enable, quanta, now):
        if any(quanta[p] for p in range(8) if class_enable >> p & 1):
            real(self, class_enable, quanta, now)

    monkeypatch.setattr(EgressPause, "on_pfc", on_pfc)


PAUSE_400G_US = 65535 * 512 / 400e9 * 1e6
PAUSE_200G_US = 65535 * 512 / 200e9 * 1e6


@pytest.mark.parametrize("case, bps, frames, want", [
    # the book's 200 G host port: 0xFFFF lasts 167.8 us
    ("200G", 200e9, INJECTED, {INTERVAL: PAUSE_200G_US}),
    # a refresh 40 us into the first pause: one pause of 40 + 83.9 us, four frames
    ("refreshed", 400e9, INJECTED + [(INJECTED[0][0] + 40e-6, 3, 0xFFFF)],
     {INTERVAL: 40 + PAUSE_400G_US, COUNT: 4}),
    # the quanta-0 frame never arrives: nothing to measure the resume from
    ("lost", 400e9, INJECTED[:2], {RESUME: None, COUNT: 2}),
    # ignored: the second pause runs to its expiry, 83.9 - 30 us after the resume
    ("ignored", 400e9, INJECTED, {RESUME: PAUSE_400G_US - 30}),
])
def test_a_wrong_pause_fails_the_check_that_names_it(tmp_path, monkeypatch, case, bps,
                                                     frames, want):
    if case == "ignored":
        _ignore_resumes(monkeypatch)
    got = failing(replay(tmp_path, bps, frames))
    assert set(got) == set(want)
    for name, v in want.items():
        assert got[name] == (None if v is None else pytest.approx(v, abs=0.011))
