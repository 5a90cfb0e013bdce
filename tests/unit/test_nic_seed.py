"""`--seed` reaches the NICs (issue 31; docs/RUNNING.md "--seed"): a NIC's QPNs, start PSNs,
keys and UET entropy come from `NicConfig.rng`, Random(f"{seed}:{gpu}"), so the same run
seed draws the same in every process, two NICs of a run draw differently, and the seed
travels from FabricNet (the run's `--seed`) into every NIC's config, here and on the other
servers of a spread fabric; the CM's TCP connection leaves from a source port drawn from
the QP's CM stream (so its packets' ECMP path is the seed's too)."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import socket
import subprocess
import sys
import threading
from dataclasses import replace
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import pytest

import emu.realise.nics
import topologies
from emu.realise.net import FabricNet
from emucore.wire.roce_codes import udp_sport
from traffic.nic import cm
from traffic.nic.cm import CmListener, CmRep, CmReq, cm_connect
from traffic.nic.ctl import NicControl
from traffic.nic.datapath import Nic
from traffic.nic.nicconfig import NicConfig

FAB = topologies.load("rail2x4", tdf=1000)
ROOT = Path(__file__).resolve().parents[2]


def config(gpu: str = "h1g1", seed: int | None = 5, **kw) -> NicConfig:
    return NicConfig.for_gpu(FAB, gpu, "/nonexistent", seed=seed, **kw)


def draws(cfg: NicConfig, qps: int = 3) -> dict:
    """What a fresh NIC of `cfg` draws for `qps` QPs and one MR (its keys and address),
    and the CM's first communication id."""
    n = Nic(cfg, open_sockets=False)
    pd, cq = n.alloc_pd(), n.create_cq()
    shm = shared_memory.SharedMemory(create=True, size=4096)
    try:
        mr = n.reg_mr(pd, shm.name, 4096, 3)
        resource_tracker.register(shm._name, "shared_memory")  # the NIC untracked it
        qpns = [n.create_qp(pd, cq, cq) for _ in range(qps)]
        out = {"qpn": qpns, "psn": [n.qps[q].start_psn for q in qpns],
               "mr": (mr["lkey"], mr["rkey"], mr["addr"]), "cm": n.cm_rng.getrandbits(32)}
        n.dereg_mr(mr["lkey"])
    finally:
        n.shms.clear()
        shm.close()
        shm.unlink()
    return out


def test_the_nic_generator_is_the_documented_one():
    """Random(f"{seed}:{gpu}") and Random(f"{seed}:{gpu}:cm") (docs/RUNNING.md)."""
    assert config().rng().getrandbits(64) == random.Random("5:h1g1").getrandbits(64)
    assert config().rng("cm").getrandbits(64) == random.Random("5:h1g1:cm").getrandbits(64)


def test_the_same_seed_draws_the_same_in_two_nics():
    a, b = draws(config()), draws(config())
    assert a == b
    assert len(set(a["qpn"])) == 3 and len(set(a["psn"])) == 3


def test_the_same_seed_draws_the_same_in_other_processes_whatever_their_hash_seed():
    """A str seed goes through SHA-512, not hash(): the same in a child process under
    PYTHONHASHSEED 0 and 12345 (a process each) as here."""
    code = ("import json; from traffic.nic.nicconfig import NicConfig; "
            "c = NicConfig(gpu='h1g1', ifname='i', ip='10.0.0.1', mac='02:00:00:00:00:01', "
            "gateway_mac='02:00:00:00:00:02', control='/c', seed=5); "
            "print(json.dumps([c.rng().getrandbits(64), c.rng('cm').getrandbits(64)]))")
    here = [config().rng().getrandbits(64), config().rng("cm").getrandbits(64)]
    for hash_seed in ("0", "12345"):
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, text=True,
                             capture_output=True, env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert json.loads(out.stdout) == here


def test_two_nics_of_a_run_draw_differently():
    """Every GPU NIC of rail2x4 under one seed: no two share a first QPN or PSN."""
    first = {g: draws(config(g), qps=1) for g in FAB.gpus}
    qpns = [d["qpn"][0] for d in first.values()]
    assert len(set(qpns)) == len(qpns)
    assert len({d["psn"][0] for d in first.values()}) == len(qpns)
    # the QP pairs h1gK <-> h4gK and h2gK <-> h3gK: each its own UDP source port (with
    # one draw for all, every pair would have udp_sport(q, q), one port and one path)
    ports = {udp_sport(first[f"h{a}g{k}"]["qpn"][0], first[f"h{b}g{k}"]["qpn"][0])
             for a, b in ((1, 4), (2, 3)) for k in (1, 2)}
    assert len(ports) == 4


def test_two_seeds_draw_differently():
    a, b = draws(config(seed=5)), draws(config(seed=6))
    assert not set(a["qpn"]) & set(b["qpn"])
    assert a["psn"] != b["psn"] and a["mr"] != b["mr"] and a["cm"] != b["cm"]


def test_without_a_seed_each_nic_draws_from_the_os():
    assert draws(config(seed=None))["qpn"] != draws(config(seed=None))["qpn"]


def test_cm_ids_do_not_move_the_verbs_draws():
    """The passive side's CM answers on its own thread: its ids come from `cm_rng`, so
    the QPNs a worker gets do not depend on when a peer connected."""
    n, m = Nic(config(), open_sockets=False), Nic(config(), open_sockets=False)
    for _ in range(5):
        n.cm_rng.getrandbits(32)
    pd, cq, pd2, cq2 = n.alloc_pd(), n.create_cq(), m.alloc_pd(), m.create_cq()
    q = n.create_qp(pd, cq, cq)
    assert (q, n.qps[q].start_psn) == ((r := m.create_qp(pd2, cq2, cq2)), m.qps[r].start_psn)


def test_a_uet_qps_packets_do_not_move_the_next_qps_draws():
    """Each UET QP draws its entropy values from its own generator: however many packets
    the first QP sprays, the second QP's QPN, PSNs and first EV are the same."""
    def second_qp(sprayed: int) -> tuple:
        n = Nic(config(transport="uet", uet={"ev": "oblivious"}), open_sockets=False)
        pd, cq = n.alloc_pd(), n.create_cq()
        first = n.qps[n.create_qp(pd, cq, cq)].ep.requester.entropy
        for _ in range(sprayed):
            first.next()
        q = n.qps[n.create_qp(pd, cq, cq)]
        r = q.ep.requester
        return q.ep.qp.qpn, q.start_psn, r.start_psn, r.message_id, r.entropy.next()

    assert second_qp(0) == second_qp(100)


def test_config_validates_and_keeps_the_seed():
    c = config(seed=7)
    assert NicConfig.from_json(c.to_json()).seed == 7
    assert NicConfig.from_json(config(seed=None).to_json()).seed is None
    for bad in (-1, True, 1.5, "5"):
        with pytest.raises(ValueError, match="seed: an integer >= 0 or None"):
            replace(c, seed=bad)


def test_the_fabrics_seed_reaches_every_nic_config(tmp_path, monkeypatch):
    """FabricNet(seed=) (emu run's `--seed`, emu.run.build) -> nic_defaults ->
    NicProcesses.start -> each NIC's JSON file, which then draws as a NIC of that seed."""
    monkeypatch.setattr(emu.realise.nics, "run_module", lambda *a, **kw: None)
    monkeypatch.setattr(emu.realise.nics, "wait_ready", lambda *a, **kw: None)
    fnet = FabricNet(FAB, seed=7)
    assert fnet.nic_defaults({})["seed"] == 7
    assert fnet.nic_defaults({"seed": 3})["seed"] == 3  # a caller's own stays
    assert FabricNet(FAB).nic_defaults({})["seed"] == 1  # --seed's default
    procs = emu.realise.nics.NicProcesses({h.name: None for h in FAB.hosts()}, FAB, tmp_path,
                                          None)
    procs.start(["h1g1", "h4g2"], "paper", 4096, 1.0, **fnet.nic_defaults({}))
    for gpu in ("h1g1", "h4g2"):
        cfg = NicConfig.from_json((tmp_path / f"nic-{gpu}.json").read_text())
        assert cfg.seed == 7
        assert draws(cfg) == draws(config(gpu, seed=7))


def test_a_spread_fabric_sends_the_seed_to_the_other_servers_nics(tmp_path):
    """ClusterNet.start_nics: the NICs of another server are started by its part with the
    same options, the seed among them; the part's own FabricNet has it too (its options)."""
    from emu.cluster.net import ClusterNet

    asked = []

    class Part:
        def request(self, req, timeout):
            asked.append(req)
            return {"sockets": {g: f"/there/nic-{g}.sock" for g in req["gpus"]}}

        def forwards(self, *a):
            pass

    net = ClusterNet.__new__(ClusterNet)
    net.fabric, net.seed, net.qos, net.state_dir = FAB, 9, None, tmp_path
    net.here = type("S", (), {"name": "a"})()
    net.plan, net.placement = {}, type("P", (), {"server_of": {h.name: "b"
                                                               for h in FAB.hosts()}})()
    net.parts, net.worker_sockets, net._remote_nics = {"b": Part()}, {}, {}
    net.start_nics(gpus=["h1g1", "h4g2"], timeout=1.0)
    assert [r["options"]["seed"] for r in asked] == [9]
    part_net = FabricNet(FAB, **{"seed": 9})  # emu.cluster.part: FabricNet(..., **options)
    assert part_net.nic_defaults(asked[0]["options"])["seed"] == 9


# -- the CM's TCP source port (traffic.nic.cm.bind_source): drawn, so its ECMP path is the seed's
class Recording:
    """A listening socket that notes each accepted peer's (ip, port)."""

    def __init__(self, sock):
        self.sock, self.peers = sock, []

    def accept(self):
        conn, addr = self.sock.accept()
        self.peers.append(addr)
        return conn, addr

    def __getattr__(self, name):
        return getattr(self.sock, name)


def serve_one(reply=None):
    """A CM listener on 127.0.0.1 answering one REQ in a thread (REP to QP 0x77 of 10.0.2.14);
    returns the listener (`.sock.peers`: who connected) and the thread."""
    lst = CmListener(("127.0.0.1", 0))
    lst.sock = Recording(lst.sock)
    rep = reply or (lambda req: CmRep(9, req.comm_id, 0x77, 5, 0xFFFF, 4096, "10.0.2.14",
                                      udp_sport(0x77, req.local_qpn), 0, 0, 0))
    t = threading.Thread(target=lst.accept, args=(rep,), kwargs={"timeout": 5.0}, daemon=True)
    t.start()
    return lst, t


def fresh_seed() -> int:
    """A seed no earlier run of these tests used (likely): a completed handshake leaves
    the client's port in TIME_WAIT for 60 s, so the same seed again within a minute
    would find its first draw in use and rightly take the next (a fabric's NICs each
    start in a new network namespace, with no TIME_WAIT of an earlier run)."""
    return random.SystemRandom().randrange(1 << 40)


def test_the_cm_connection_leaves_from_the_port_its_stream_draws():
    """cm_connect with a source generator: the listener sees the first draw in Linux's
    ephemeral range (the kernel's own choice before), and the handshake completes."""
    seed = fresh_seed()
    lst, t = serve_one()
    with lst:
        req = CmReq(1, 0x66, 3, 0xFFFF, 4096, "10.0.1.11", 50000)
        rep = cm_connect(lst.address, req, timeout=5,
                         source=("127.0.0.1", random.Random(f"{seed}:h1g1:cm:0x66")))
        t.join(5)
    want = random.Random(f"{seed}:h1g1:cm:0x66").randint(32768, 60999)
    assert cm.SOURCE_PORTS == (32768, 60999)
    assert rep.local_qpn == 0x77 and lst.sock.peers == [("127.0.0.1", want)]


def test_the_nic_connects_from_its_qps_stream(tmp_path):
    """NicControl.connect (the fabric's active side): the port is the first draw of
    `NicConfig.rng(f"cm:{qpn:#x}")`, Random(f"{seed}:{gpu}:cm:{qpn:#x}") - a stream per QP,
    so neither the order of a NIC's connects nor its passive side's ids move it."""
    seed = fresh_seed()
    cfg = replace(config(seed=seed), ip="127.0.0.1", control=str(tmp_path / "n.sock"))
    n = Nic(cfg, open_sockets=False)
    ctl = NicControl(n)
    lst, t = serve_one()
    try:
        pd, cq = n.alloc_pd(), n.create_cq()
        qpn = n.create_qp(pd, cq, cq)
        with lst:
            peer = ctl.connect(qpn, "127.0.0.1", lst.address[1], None, timeout=5)
            t.join(5)
    finally:
        ctl.close()
    want = random.Random(f"{seed}:h1g1:cm:{qpn:#x}").randint(32768, 60999)
    assert peer["remote_qpn"] == 0x77 and lst.sock.peers == [("127.0.0.1", want)]


def test_a_drawn_port_in_use_draws_again_then_the_kernel_picks(caplog):
    first, second = (lambda r: (r.randint(32768, 60999), r.randint(32768, 60999)))(
        random.Random("busy"))
    with socket.socket() as held:
        held.bind(("127.0.0.1", first))  # in use: the next draw
        with socket.socket() as s:
            assert cm.bind_source(s, "127.0.0.1", random.Random("busy")) is True
            assert s.getsockname() == ("127.0.0.1", second)
        always = random.Random()
        always.randint = lambda a, b: first  # every draw in use: the kernel's port, logged
        with socket.socket() as s, caplog.at_level(logging.WARNING, "traffic.nic.cm"):
            assert cm.bind_source(s, "127.0.0.1", always) is False
            assert s.getsockname()[1] not in (0, first)
        assert f"{cm.BIND_TRIES} drawn ports on 127.0.0.1 in use, the kernel's choice" \
            in caplog.text
    with socket.socket() as s:  # no generator: the kernel's, as before
        assert cm.bind_source(s, "127.0.0.1", None) is False
    with socket.socket() as s, pytest.raises(OSError) as e:  # another error is raised
        cm.bind_source(s, "192.0.2.1", random.Random(1))  # (TEST-NET-1: not ours)
    assert e.value.errno == errno.EADDRNOTAVAIL


def test_a_failed_attempt_leaves_no_time_wait_on_the_drawn_port():
    """The client closes an attempt that failed on the network (what ctl retries) with an
    RST: the retry binds the same port at once (a FIN first would hold it in TIME_WAIT
    for 60 s, and the retry draw another)."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        with pytest.raises(TimeoutError):
            with cm.client_socket("127.0.0.1", random.Random("rst"), 5.0) as s:
                s.connect(srv.getsockname())
                port = s.getsockname()[1]
                conn, _ = srv.accept()
                raise TimeoutError("the attempt timed out")
        with conn, pytest.raises(ConnectionResetError):
            conn.recv(1)
    with socket.socket() as again:
        assert cm.bind_source(again, "127.0.0.1", random.Random("rst")) is True
        assert again.getsockname()[1] == port
