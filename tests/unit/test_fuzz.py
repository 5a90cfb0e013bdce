"""Issue 14: fuzzed frames. The malformed-frame generator (emu.bench.malformed) is deterministic
and covers its categories; fed in-process to the pure parsers, the switch agent's
on_frame and the NIC's on_frame, no frame raises, each is dropped and counted, and
legitimate traffic after the garbage still flows. No root: in-memory ports and wires.
`python -m emu bench fuzz` (emu.bench.fuzz) does the same on a real fabric."""

import collections
import random
import traceback

import pytest

from emu.bench.malformed import CATEGORIES, base_frames, malformed_frames
from emucore.wire.inet import ones_sum, udp4_ok
from emucore.wire.lldp import parse_lldp_frame
from emucore.wire.pause import pause_frame, parse_pfc
from emucore.wire.roce import icrc_of, icrc_reference
from emucore.wire.templates import malformed, parse
from switch_agent.forward import FibRoute
from traffic.verbs import QPState
from traffic.workreq import WCStatus

from .fakes import mac
from .test_agent_qos import H, ROUTER, frame as data_frame, make_agent, qos
from .test_nic import _pair, _qp

N = 24_000  #: frames fed to each of agent, NIC and parsers (issue 14: >= 20,000)
BASE = base_frames()
ROCE = BASE["roce"]


def per_cat(cat, n=N):
    """Frames of category `cat` among n (the categories in turn)."""
    return n // len(CATEGORIES) + (CATEGORIES.index(cat) < n % len(CATEGORIES))


def cats(frames, cat):
    """The frames of one category, in order."""
    return [f for c, f in frames if c == cat]


# -- (a) the generator -------------------------------------------------------------
def test_same_seed_same_frames_each_category_in_turn():
    a = list(malformed_frames(7, 900, BASE))
    assert a == list(malformed_frames(7, 900, BASE))
    assert a != list(malformed_frames(8, 900, BASE))
    assert [c for c, _ in a[:9]] == list(CATEGORIES)
    assert collections.Counter(c for c, _ in a) == {c: 100 for c in CATEGORIES}
    assert collections.Counter(c for c, _ in malformed_frames(1, 20, BASE)) == {
        c: 3 if c in CATEGORIES[:2] else 2 for c in CATEGORIES}


def test_truncated_cuts_the_roce_frame_at_its_header_boundaries_first():
    t = cats(malformed_frames(1, 9 * 28, BASE), "truncated")
    n = len(ROCE)
    assert [len(f) for f in t] == [0, 1, 6, 12, 13, 14, 15, 20, 24, 33, 34, 36, 38, 41, 42,
                                   43, 46, 50, 53, 54, 60, 62, 66, 69, 70, n - 5, n - 4, n - 1]
    assert all(f == ROCE[:len(f)] for f in t)


def test_bad_length_and_bad_checksum_change_only_their_field():
    fr = list(malformed_frames(1, 9 * 5, BASE))
    ip_len = len(ROCE) - 14
    first = cats(fr, "bad_length")[0]  # IPv4 total length one too big, checksum fixed
    assert first[16:18] == (ip_len + 1).to_bytes(2, "big") and ones_sum(first[14:34]) == 0xFFFF
    assert {i for i in range(len(ROCE)) if first[i] != ROCE[i]} <= {16, 17, 24, 25}
    ip, udp, icrc, payload, bth = cats(fr, "bad_checksum")
    assert [i for i in range(len(ROCE)) if ip[i] != ROCE[i]] == [24]
    assert udp[40:42] != b"\0\0" and not udp4_ok(udp[26:30], udp[30:34], udp[34:])
    assert udp[:40] == ROCE[:40] and udp[42:] == ROCE[42:]
    assert [i for i in range(len(ROCE)) if icrc[i] != ROCE[i]] == [len(ROCE) - 4]
    for f in (payload, bth):
        assert len(f) == len(ROCE) and icrc_reference(f) != icrc_of(f)
    for f, ok in ((ip, (False, True)), (udp, (False, True)), (icrc, (True, False))):
        r = parse(f, verify_icrc=True, verify_csum=True)
        assert (r.csum_ok, r.icrc_ok) == ok


def test_transport_categories_keep_a_valid_icrc_and_the_aim():
    fr = list(malformed_frames(3, 9 * 40, BASE, dst_mac="02:00:00:00:09:09", dst_ip="10.9.9.9"))
    ops = [f[42] for f in cats(fr, "bad_opcode")]
    assert ops[:5] == [0x00, 0x01, 0x02, 0x03, 0x04] and 0x51 in ops and 0x81 in ops
    for f in cats(fr, "bad_opcode") + cats(fr, "bad_psn") + cats(fr, "bad_rkey"):
        assert icrc_reference(f) == icrc_of(f) and ones_sum(f[14:34]) == 0xFFFF
        assert f[0:6] == mac("02:00:00:00:09:09") and f[30:34] == bytes((10, 9, 9, 9))


def test_base_must_hold_every_template():
    with pytest.raises(ValueError, match="lldp"):
        next(malformed_frames(1, 1, {"roce": ROCE, "pfc": BASE["pfc"]}))
    with pytest.raises(ValueError, match="RETH"):
        next(malformed_frames(1, 1, {**BASE, "roce": BASE["pfc"]}))


@pytest.fixture(scope="module")
def frames():
    """N frames aimed at h4's NIC (the RoCE template's own addresses)."""
    return list(malformed_frames(14, N, BASE))


# -- (b iii) the pure parsers ------------------------------------------------------
def test_pure_parsers_never_raise_and_reject_what_is_broken(frames):
    outcome = collections.Counter()
    for cat, f in frames:
        parse_pfc(f)
        try:
            parse_lldp_frame(f)
        except ValueError:  # the parser's one error
            pass
        r = parse(f, verify_icrc=True, verify_csum=True)
        bad = malformed(f) if r is None else None
        outcome[cat, "none" if r is None else "ok" if r.icrc_ok and r.csum_ok else "sum"] += 1
        if cat == "bad_checksum":
            assert r is not None and not (r.icrc_ok and r.csum_ok), f.hex()
        elif cat == "truncated" and f == ROCE[:len(f)]:
            assert r is None and bad, f.hex()
        elif cat == "bad_length":
            assert r is None, f.hex()
        elif cat in ("bad_opcode", "bad_psn", "bad_rkey"):
            assert (r is None and bad) or (r.icrc_ok and r.csum_ok), f.hex()
    for cat in ("bad_checksum", "bad_psn", "bad_rkey"):  # every one decodes
        assert outcome[cat, "sum" if cat == "bad_checksum" else "ok"] == per_cat(cat)


# -- (b i) the switch agent ----------------------------------------------------------
# AGENT CRASH REPRODUCERS (issue 14). The six tests below and the fuzz test after them
# fail today: switch_agent/agent.py reads IPv4 header bytes of frames too short to have
# them and the IndexError escapes (in a real run it kills the agent process:
# switch_agent/serve.py does not catch it). Sites: on_frame `frame[14]` / `frame[23]`
# (router MAC, IPv4, 14..23 bytes), admit `tos = frame[15]` (switched, 14 bytes),
# fabric/qos/classify.mark_ce `frame[24]` (switched, 15..25 bytes, WRED marking),
# time_exceeded `frame[34]` (TTL 1, ICMP, 34 bytes), flush `q_by_tos[frame[15]]` (a
# flooded 14-byte IPv4 frame that fails to send or is lost on a degraded link).
# agent.py is another engineer's to fix: a frame with EtherType IPv4 shorter than its
# IPv4 header is dropped on ingress under the port drop reason "malformed", which these
# tests expect. The fuzz test collects every crash site with its first frame.
def short_ipv4(dst: str, n: int) -> bytes:
    """The first n bytes of an IPv4 frame h1 -> h4 (DSCP 24, ECT(0))."""
    return data_frame(0, 3, size=100)[:n].replace(mac(H[3]), mac(dst), 1)


def routed_agent():
    """make_agent with h4 (10.0.1.14) resolvable and the switch's address on its ports,
    so that frames to the router MAC are routed and expired ones answered."""
    a = make_agent(qos("auto"))
    a.install_fib([FibRoute("10.0.1.0/24", ((None, "vlan101"),))],
                  {("vlan101", "10.0.1.14"): H[3]}, {"10.0.1.1": "vlan101"})
    return a


@pytest.mark.parametrize("dst,n,site", [
    (ROUTER, 14, "agent.py on_frame: frame[14] (IHL test)"),
    (ROUTER, 20, "agent.py on_frame: frame[23] (protocol)"),
    (H[3], 14, "agent.py admit: frame[15] (TOS)"),
])
def test_agent_drops_ipv4_frames_cut_in_their_header(dst, n, site):
    a = routed_agent()
    a.on_frame(a.ports["eth1"], short_ipv4(dst, n), 0.0)  # raised IndexError at `site`
    assert a.ports["eth1"].drops.get("malformed") == 1


def test_agent_drops_a_cut_ipv4_header_instead_of_marking_it():
    # queue 3 of eth4 above WRED min (150 KB), then a 17-byte ECT(0) IPv4 frame to h4:
    # WRED marks it, emucore.qos.classify.mark_ce reads frame[24] and raises IndexError
    a = routed_agent()
    a.ports["eth4"].queues.rng = lambda: 0.0  # WRED marks every frame above min
    for _ in range(40):
        a.on_frame(a.ports["eth1"], data_frame(0, 3), 0.0)
    a.on_frame(a.ports["eth1"], short_ipv4(H[3], 17), 0.0)
    assert a.ports["eth1"].drops.get("malformed") == 1


def test_agent_expires_an_icmp_packet_without_icmp_header():
    # a valid IPv4 header alone (total length 20), TTL 1, protocol ICMP, to the router
    # MAC: time_exceeded reads frame[34] (never answer an ICMP error): IndexError
    f = bytearray(short_ipv4(ROUTER, 34))
    f[16:18] = (20).to_bytes(2, "big")
    f[22], f[23] = 1, 1
    f[24:26] = b"\0\0"
    f[24:26] = (~ones_sum(f[14:34]) & 0xFFFF).to_bytes(2, "big")
    a = routed_agent()
    a.on_frame(a.ports["eth1"], bytes(f), 0.0)
    assert a.ports["eth1"].drops == {"ttl_expired": 1}


def test_agent_drops_a_runt_ipv4_broadcast_instead_of_flooding_it():
    # a 14-byte IPv4 broadcast is flooded in the VLAN; when a port cannot send it (tx
    # error, or lost on a degraded link) Agent.flush logs its queue from frame[15]:
    # IndexError in service(), not in on_frame
    class Failing:
        def send(self, frame):
            raise OSError(105, "No buffer space available")  # ENOBUFS

    a = routed_agent()
    a.ports["eth2"].sock = Failing()
    a.on_frame(a.ports["eth1"], b"\xff" * 6 + mac(H[0]) + b"\x08\x00", 0.0)
    a.service(0.0)
    a.service(0.01)
    assert a.ports["eth1"].drops.get("malformed") == 1


def crash_site(exc: BaseException) -> str:
    """file:line of the innermost frame of a traceback."""
    last = traceback.extract_tb(exc.__traceback__)[-1]
    return f"{type(exc).__name__} at {last.filename.rsplit('/', 1)[-1]}:{last.lineno}"


def test_agent_survives_fuzzed_frames_and_forwards_afterwards():
    """N frames into eth1 (half aimed at the router MAC: routed to h4; half at h4's MAC:
    switched), QoS on with PFC mode auto so PFC and LLDP/DCBX run, service and timers
    between batches; then a legitimate LLDPDU, data frame and pause still work."""
    a = routed_agent()
    p1 = a.ports["eth1"]
    base = base_frames(src_mac=H[0], dst_mac=H[3], src_ip="10.0.1.11", dst_ip="10.0.1.14")
    fr = list(malformed_frames(21, N // 2, base, dst_mac=ROUTER)) + list(
        malformed_frames(22, N // 2, base, dst_mac=H[3]))
    crashes: dict[str, tuple] = {}
    t = 0.0

    def guard(fn, *args, what=""):
        try:
            fn(*args)
        except Exception as exc:  # collected: every crash site with its first frame
            site = crash_site(exc)
            n = crashes.get(site, (0,))[0]
            crashes[site] = (n + 1,) + (crashes[site][1:] if n else (what,))

    for i, (cat, f) in enumerate(fr):
        guard(a.on_frame, p1, f, t, what=f"{cat} {f.hex()}")
        if i % 200 == 199:
            t += 0.002
            guard(a.service, t, what="service")
            guard(a.timers, t, what="timers")
    # drain: queues, delay lines and pauses (1 MB/s lab per port: ~10 s lab at most)
    for _ in range(20_000):
        if not any(p.queues.packets or p.inflight or p.ctrl for p in a.ports.values()):
            break
        t += 0.005
        guard(a.service, t, what="drain")
        guard(a.timers, t, what="drain")
    t += 1.0  # every pause received (0xFFFF quanta = 0.17 s lab at TDF 1000) has expired
    assert p1.rx_packets == len(fr)
    a.on_frame(p1, base["lldp"], t)  # the book's DCBX TLVs: PFC on priority 3
    assert p1.pfc_active == frozenset({3}) and p1.neighbor.system_name == "fuzz"
    legit = data_frame(0, 3)
    sent = a.ports["eth4"].sock.sent
    n0 = len(sent)
    a.on_frame(p1, legit, t)
    for _ in range(1000):
        a.service(t)
        if len(sent) > n0:
            break
        t += 0.001
    assert sent[n0:] == [legit]  # switched unchanged, the next frame eth4 sends
    a.on_frame(p1, pause_frame(mac(H[0]), 3, 0xFFFF), t)
    assert p1.pause.paused_mask(t) == 1 << 3
    assert not crashes, "agent crashes (site: count, first frame):\n" + "\n".join(
        f"{site}: {v[0]}, first {v[1]}" for site, v in crashes.items())


# -- (b ii) the NIC ----------------------------------------------------------------
TQPN, PEER_QPN, PSN = 0x123456, 0x654321, 0xABC  #: the fuzzed QP (Fig 9-5's numbers)
RX = ("rx_other", "rx_malformed", "rx_bad_checksum", "rx_unknown_qp", "pfc_rx")


def test_nic_survives_fuzzed_frames_counts_each_and_writes_afterwards():
    """N frames into NIC b (h4g2), aimed at its QP TQPN expecting PSN 0xABC (the RoCE
    template's numbers), so that they reach the responder's PSN, opcode, R_Key and
    length checks and the requester's ACK handling. A QP a frame moves to ERROR (a
    fatal NAK, IBA 9.7.5.1) or past PSN 0xABC (either half) is recreated with the same
    number. Every frame is counted
    in exactly one of RX or reached a QP; then a legitimate 12 KB write on another QP
    pair is byte-exact."""
    _, a, b = _pair(dcqcn="paper")
    made = []
    try:
        made += [_qp(b, 8192, bytes(8192)), _qp(a, 12388, random.Random(5).randbytes(12388)),
                 _qp(b, 12388, bytes(12388))]
        (_, mt, ct, _q), (_, ma, ca, la), (sb, mb, cb, lb) = made
        pd = b.qps[_q.qpn].ep.qp.pd.handle
        b.destroy_qp(_q.qpn)

        def target():
            """QP TQPN expecting PSN 0xABC, its requester with PSNs 0xABB..0xABC in flight
            (so that ACK/NAK frames for PSN 0xABC act on it)."""
            q = b.qps[b.create_qp(pd, ct, ct, qpn=TQPN, start_psn=PSN - 1)]
            b.to_rtr(q, PEER_QPN, PSN, a.cfg.ip, 4096)
            b.to_rts(q)
            b.post_send(TQPN, [{"wr_id": 1, "local_addr": mt["addr"], "length": 8192,
                                "lkey": mt["lkey"], "remote_addr": 0, "rkey": 1}])
            assert [q.ep.next_packet(now).psn for _ in range(2)] == [PSN - 1, PSN]
            return q

        now, deaths = 100.0, 0
        tq = target()
        base = base_frames(a.cfg.mac, b.cfg.mac, a.cfg.ip, b.cfg.ip, TQPN, PSN, mt["addr"],
                           mt["rkey"])
        fr = list(malformed_frames(14, N, base))
        for i, (cat, f) in enumerate(fr):
            before = [b.c[k] for k in RX]
            b.on_frame(memoryview(bytearray(f)), now)
            d = dict(zip(RX, (b.c[k] - v for k, v in zip(RX, before))))
            assert sum(d.values()) <= 1 and min(d.values()) >= 0, (cat, f.hex(), d)
            if not any(d.values()):  # reached a QP: a valid RoCEv2 frame for one of ours
                r = parse(f, verify_icrc=True, verify_csum=True)
                assert r and r.icrc_ok and r.csum_ok and r.dqpn in b.qps, (cat, f.hex())
            if cat == "bad_checksum":
                assert d["rx_bad_checksum"] == 1, f.hex()
            elif cat == "bad_length" or (cat == "truncated" and f == base["roce"][:len(f)]):
                assert d["rx_malformed"] + d["rx_other"] == 1, (cat, f.hex())
            elif cat == "bad_lldp":
                assert d["rx_other"] == 1, f.hex()
            if tq.ep.qp.state is QPState.ERROR:  # a fatal NAK or the requester gave up
                rs = tq.ep.responder.counters
                wcs = b.cqs[ct].poll(16)
                assert rs.nak_inv_req + rs.nak_access == 1 or any(
                    w.status is not WCStatus.SUCCESS for w in wcs), (cat, f.hex())
                deaths += 1
            rq = tq.ep.requester
            if tq.ep.qp.state is QPState.ERROR or tq.ep.responder.epsn not in (None, PSN) \
                    or rq.una != PSN - 1:
                b.destroy_qp(TQPN)  # a fresh QP expecting PSN again: every frame meets
                tq = target()  # the checks at the expected PSN, not the duplicate path
            if i % 50 == 49:
                now += 0.001
                b.step(now)
        assert b.c["rx_frames"] == N and b.c["rx_bad_checksum"] >= per_cat("bad_checksum")
        assert deaths > 0  # the R_Key and opcode checks ran at the expected PSN
        b.to_rtr(lb, la.qpn, la.start_psn, a.cfg.ip, 4096)
        b.to_rts(lb)
        a.to_rtr(la, lb.qpn, lb.start_psn, b.cfg.ip, 4096)
        a.to_rts(la)
        a.post_send(la.qpn, [{"wr_id": 7, "local_addr": ma["addr"], "length": 12388,
                               "lkey": ma["lkey"], "remote_addr": mb["addr"],
                               "rkey": mb["rkey"]}])
        b.raw.frames.clear()
        for _ in range(4):
            now = max(now, a.port_next)
            a.transmit(now)
        for f in a.raw.frames:
            b.on_frame(memoryview(bytearray(f)), now)
        for f in b.raw.frames:
            a.on_frame(memoryview(bytearray(f)), now)
        assert [w.status for w in a.cqs[ca].poll(4)] == [WCStatus.SUCCESS]
        assert bytes(sb.buf[:12388]) == bytes(made[1][0].buf[:12388])
    finally:
        for nic, (shm, mr, _, _) in zip((b, a, b), made):
            if mr["lkey"] in nic.shms:
                nic.dereg_mr(mr["lkey"])
            shm.close()
            shm.unlink()


# -- emu bench fuzz: its pure parts (the bench itself needs root) ---------------------
def test_bench_interleaves_injects_and_reports(capsys):
    from emu.bench import fuzz as bench_fuzz

    class Sock:  # as AF_PACKET on a veth with MTU 9216
        def send(self, f):
            if len(f) < 14:
                raise OSError(22, "Invalid argument")
            if len(f) > 9230:
                raise OSError(90, "Message too long")
            return len(f)

    streams = {s: list(malformed_frames(i, 90, BASE)) for i, s in enumerate(bench_fuzz.STREAMS)}
    todo = bench_fuzz.interleave(streams)
    assert [s for s, _, _ in todo[:6]] == list(bench_fuzz.STREAMS) * 2 and len(todo) == 270
    sent = bench_fuzz.inject({s: Sock() for s in bench_fuzz.STREAMS}, todo, rate=1e9)
    assert sum(r["sent"] + sum(r["errors"].values()) for r in sent.values()) == 270
    assert sent["router", "truncated"]["errors"] == {"EINVAL": 5}  # cuts 0, 1, 6, 12, 13
    port = {"rx_packets": 10, "drops": {"malformed": 3, "bad_lldp": 2}}
    nic = {k: 5 for k in bench_fuzz.NIC_COUNTERS}
    before = {"rail1": {"eth1": {"rx_packets": 0, "drops": {}}, "eth2": port},
              "h1g1": dict.fromkeys(nic, 0), "h2g1": None}
    after = {"rail1": {"eth1": port, "eth2": port}, "h1g1": nic, "h2g1": None}
    up = {"rail1": True, "h1g1": True, "h2g1": False}
    flow = {"error": "NicError: counters: the NIC closed the connection"}
    assert bench_fuzz.report(sent, before, after, {"eth1": "h1", "eth2": "h2"}, up, flow) == 1
    out = capsys.readouterr().out
    assert "truncated" in out and "EINVAL 5" in out and "bad_lldp 2" in out
    assert "NicError" in out


def test_bench_sends_only_frames_a_wire_can_carry():
    from emu.bench import fuzz as bench_fuzz
    frames = bench_fuzz.sendable(1, 500, BASE)
    assert len(frames) == 500 and min(len(f) for _, f in frames) >= 14
    assert frames == bench_fuzz.sendable(1, 500, BASE)
    cut = [f for c, f in malformed_frames(1, 600, BASE)]
    assert [f for f in cut if len(f) >= 14][:500] == [f for _, f in frames]
