"""Beyond one machine (issue 17), the pure parts: placement of a fabric on servers (cut
size against an exhaustive search, balance, pins), the servers file schema, and the
rule that subtracts a tunnel's latency from a link's dilated delay."""

import copy
import itertools
import json
import subprocess

import pytest

import topologies
from emu.cluster import remote
from emu.cluster import servers as srv
from emu.cluster.placer import SLACK, cut_links, place, work_of
from emu.realise.tunnel import check_mtu, compensated_delay, min_tdf
from topologies.model import Link, Port


def exhaustive_min_cut(fab, names):
    w = work_of(fab)
    nodes = list(w)
    total = sum(w.values())
    cap = max(max(w.values()), int(SLACK * total / len(names) + 0.999))
    best = None
    for combo in itertools.product(names, repeat=len(nodes) - 1):
        so = dict(zip(nodes, (names[0],) + combo))  # the first node's server is a symmetry
        loads = [sum(w[n] for n in nodes if so[n] == s) for s in names]
        if max(loads) > cap:
            continue
        c = len(cut_links(fab, so))
        best = c if best is None else min(best, c)
    return best


@pytest.mark.parametrize("topo", ["rail2x4", "rail1x4", "rail2x2", "multipod2", "railonly2x4", "rail8x4"])
def test_placement_finds_the_smallest_balanced_cut(topo):
    fab = topologies.load(topo)
    p = place(fab, ["a", "b"])
    assert len(p.cut) == exhaustive_min_cut(fab, ["a", "b"])
    w = work_of(fab)
    assert set(p.server_of) == set(w) and "frontend" not in p.server_of
    cap = SLACK * sum(w.values()) / 2
    assert all(v <= cap + 1 for v in p.load.values()) and min(p.load.values()) > 0
    assert p.load == {s: sum(w[n] for n in p.nodes_on(s)) for s in ("a", "b")}


def test_placement_of_rail2x4_and_rail8x4():
    p = place(topologies.load("rail2x4"), ["a", "b"])
    # two hosts move with all their NIC links cut; the switches stay together
    assert len(p.cut) == 4 and all(l.kind == "host-rail" for l in p.cut)
    assert "4 links cross servers" in p.describe()
    p8 = place(topologies.load("rail8x4"), ["a", "b"])
    assert len(p8.cut) == 16 and p8.load == {"a": 42, "b": 32}
    assert len(place(topologies.load("rail2x4"), ["solo"]).cut) == 0


def test_pins_are_kept_and_bad_ones_named():
    fab = topologies.load("rail2x4")
    p = place(fab, ["a", "b"], pins={"rail1": "a", "rail2": "b"})
    assert p.server_of["rail1"] == "a" and p.server_of["rail2"] == "b"
    assert len(p.cut) >= 4
    with pytest.raises(ValueError, match="placement.h9: no such"):
        place(fab, ["a", "b"], pins={"h9": "a"})
    with pytest.raises(ValueError, match="placement.h1: no server 'c'"):
        place(fab, ["a", "b"], pins={"h1": "c"})
    with pytest.raises(ValueError, match="servers: distinct"):
        place(fab, ["a", "a"])
    with pytest.raises(ValueError, match="pins put more"):
        place(fab, ["a", "b"], pins={h: "a" for h in ("h1", "h2", "h3", "h4")})


GOOD = {"servers": [{"name": "a", "address": "localhost"},
                    {"name": "b", "address": "192.0.2.12", "user": "emu", "port": 2222}],
        "placement": {"rail1": "a"}, "underlay_mtu": 9300}


def test_servers_file_reads_and_defaults(tmp_path):
    f = tmp_path / "servers.yaml"
    f.write_text("servers:\n  - {name: a, address: localhost}\n  - {name: b, address: node2}\n")
    s = srv.load(f)
    assert s.names() == ["a", "b"] and s.servers[0].local and not s.servers[1].local
    assert (s.servers[1].user, s.servers[1].port, s.underlay_mtu, s.placement) == (
        "root", 22, 9300, {})
    full = srv.from_dict(GOOD)
    assert full.servers[1] == srv.Server("b", "192.0.2.12", "emu", 2222)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.update(servers=[]), "servers: a list"),
    (lambda d: d["servers"][1].update(name="B!"), r"servers\[1\].name"),
    (lambda d: d["servers"][1].update(name="a"), r"servers\[1\].name: 'a' already"),
    (lambda d: d["servers"][1].update(address="no such host!"), r"servers\[1\].address"),
    (lambda d: d["servers"][1].pop("address"), r"servers\[1\].address: missing"),
    (lambda d: d["servers"][1].update(port=0), r"servers\[1\].port"),
    (lambda d: d["servers"][1].update(user="Root User"), r"servers\[1\].user"),
    (lambda d: d["servers"][1].update(ssh="x"), r"servers\[1\].ssh: unknown"),
    (lambda d: d["servers"][1].update(address="127.0.0.1"), "one local server"),
    (lambda d: d.update(placement={"h1": "z"}), "placement.h1: no server 'z'"),
    (lambda d: d.update(underlay_mtu=1000), "underlay_mtu"),
    (lambda d: d.update(tdf=5), "tdf: unknown field")])
def test_servers_file_errors_name_the_field(mutate, field):
    d = copy.deepcopy(GOOD)
    mutate(d)
    with pytest.raises(ValueError, match=field):
        srv.from_dict(d)


def test_a_missing_or_broken_servers_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="--servers: cannot read"):
        srv.load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("servers: [\n")
    with pytest.raises(ValueError, match="is not YAML"):
        srv.load(bad)


def link(delay_s):
    return Link(Port("rail1", "eth5", "02:00:00:00:05:05"),
                Port("spine1", "eth1", "02:00:00:00:07:01"), 400e9, delay_s, "rail-spine")


@pytest.mark.parametrize("delay_ns, latency_us, tdf, extra_us", [
    (1000, 0, 10_000, 10_000.0),        # no tunnel: the whole 10 ms lab
    (1000, 120, 10_000, 9_880.0),       # 120 us of tunnel taken off
    (50, 120, 10_000, 380.0),           # 50 ns model = 500 us lab
    (12, 120, 10_000, 0.0)])            # exactly the tunnel
def test_compensated_delay(delay_ns, latency_us, tdf, extra_us):
    got = compensated_delay(link(delay_ns * 1e-9), latency_us * 1e-6, tdf)
    assert got * 1e6 == pytest.approx(extra_us, abs=1e-6)


def test_a_link_too_short_for_its_tunnel_names_itself_and_the_tdf():
    with pytest.raises(ValueError, match=r"link rail1:eth5-spine1:eth1: .* TDF 24000 or more"):
        compensated_delay(link(5e-9), 120e-6, 10_000)
    assert min_tdf(link(5e-9), 120e-6) == pytest.approx(24_000)
    with pytest.raises(ValueError, match="model delay of 0 cannot cross servers"):
        compensated_delay(link(0.0), 120e-6, 10_000)
    check_mtu(9300, 9216)
    with pytest.raises(ValueError, match=r"underlay_mtu: 9250 .*needs 9266"):
        check_mtu(9250, 9216)


def test_emu_show_places_the_fabric_on_the_servers(tmp_path, capsys):
    from emu.cli import main
    f = tmp_path / "servers.yaml"
    f.write_text("servers:\n  - {name: a, address: localhost}\n  - {name: b, address: 192.0.2.12}\n"
                 "placement: {h1: b}\n")
    assert main(["show", "rail2x4", "--servers", str(f)]) == 0
    out = capsys.readouterr().out
    line_b = next(x for x in out.splitlines() if x.startswith("b: "))
    assert "h1" in line_b[3:line_b.index(" (work")].split(", ")   # the pin
    assert "links cross servers" in out
    assert main(["show", "rail2x4", "--servers", str(f), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["placement"]
    assert d["server_of"]["h1"] == "b" and len(d["cut"]) >= 4
    f.write_text("servers:\n  - {name: a, address: localhost}\nunderlay_mtu: 1500\n")
    assert main(["show", "rail2x4", "--servers", str(f)]) == 2
    assert "underlay_mtu: 1500 is too small" in capsys.readouterr().err


@pytest.mark.parametrize("latency_us, tdf, code, verdict", [
    (20.0, 1, 2, "need TDF >= 20 (TDF 1 too low: rerun with --tdf"),  # a veth away, most days
    (20.0, 20, 0, "need TDF >= 20 (TDF 20 fits)"),
    (0.8, 1, 0, "need TDF >= 1 (TDF 1 fits)"),  # a ping round trip under 2 us: rail2x4's 1 us links cover it
])
def test_emu_show_check_judges_the_crossing_links_by_the_measured_latency(
        tmp_path, capsys, monkeypatch, latency_us, tdf, code, verdict):
    """`emu show --servers F --check`: each server's one-way latency against its crossing
    links' model delay x TDF (emu.realise.tunnel.min_tdf); exit 2 when the TDF is too low."""
    from emu.cli import main
    monkeypatch.setattr(remote, "check_all", lambda servers: [])
    monkeypatch.setattr(remote, "one_way_latency",
                        lambda s: 0.0 if s.local else latency_us * 1e-6)
    f = tmp_path / "servers.yaml"
    f.write_text("servers:\n  - {name: a, address: localhost}\n  - {name: b, address: 192.0.2.12}\n")
    assert main(["show", "rail2x4", "--servers", str(f), "--check", "--tdf", str(tdf)]) == code
    err = capsys.readouterr().err
    assert f"server b: one-way latency {latency_us:.0f} us lab; its 4 crossing links {verdict}" in err


class FakeRemote(remote.Remote):
    """Answers from a table: command word -> (returncode, stdout, stderr)."""

    def __init__(self, server, answers):
        super().__init__(server)
        object.__setattr__(self, "answers", answers)

    def run(self, cmd, timeout=30.0):
        key = "emu" if "emu" in cmd else cmd[0]
        rc, out, err = self.answers.get(key, (0, "", ""))
        return subprocess.CompletedProcess(cmd, rc, out, err)


B = srv.Server("b", "192.0.2.12", "emu", 2222, identity="/k/id", known_hosts="/k/kh")


def test_ssh_command_line():
    argv = remote.Remote(B).argv(["id", "-u"])
    assert argv[:2] == ["ssh", "-o"] and "emu@192.0.2.12" in argv and argv[-2:] == ["--", "id -u"]
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-i") + 1] == "/k/id"
    assert "UserKnownHostsFile=/k/kh" in argv and "BatchMode=yes" in argv
    assert remote.Remote(srv.Server("a", "localhost")).argv(["id", "-u"]) == ["id", "-u"]


@pytest.mark.parametrize("answers, problem", [
    ({"id": (255, "", "ssh: connect to host 192.0.2.12 port 2222: No route to host")},
     "server b (emu@192.0.2.12): unreachable over SSH: ssh: connect to host"),
    ({"id": (0, "1000\n", "")}, "server b (emu@192.0.2.12): logged in as uid 1000, emu needs root"),
    ({"id": (0, "0\n", ""), "emu": (1, "", "No module named emu")}, "no emu at "),
    ({"id": (0, "0\n", ""), "emu": (0, "emu 0.0.9 (abc)\n", "")}, "emu 0.0.9 (abc), here emu "),
    ({"id": (0, "0\n", ""), "unshare": (2, "", "Error: Unknown device type.")},
     "cannot make VXLAN devices (Error: Unknown device type.)")])
def test_server_checks_name_the_server_and_the_cause(answers, problem):
    answers.setdefault("emu", (0, remote.version() + "\n", ""))
    got = remote.check(FakeRemote(B, answers))
    assert len(got) == 1 and problem in got[0], got


def test_a_ready_server_has_no_problem():
    assert remote.check(FakeRemote(B, {"id": (0, "0\n", ""),
                                       "emu": (0, remote.version() + "\n", "")})) == []


def test_a_servers_questions_are_asked_at_once():
    """emu.cluster.remote.check asks its three SSH questions (uid, emu --version, VXLAN)
    together: each answer here waits until all three were asked (a barrier), so asking
    one after another breaks the barrier (after 30 s) and the check fails instead of
    passing. A failed login still comes back alone (the table above)."""
    import threading

    gate = threading.Barrier(3, timeout=30)

    class Together(FakeRemote):
        def run(self, cmd, timeout=30.0):
            gate.wait()
            return super().run(cmd, timeout)

    answers = {"id": (0, "0\n", ""), "emu": (0, remote.version() + "\n", "")}
    assert remote.check(Together(B, answers)) == []
    assert not gate.broken


def test_ping_summary_is_read():
    out = ("--- 10.98.0.2 ping statistics ---\n10 packets transmitted, 10 received, 0% packet "
           "loss, time 1810ms\nrtt min/avg/max/mdev = 0.041/0.062/0.090/0.014 ms\n")
    assert remote.parse_ping(out) == pytest.approx(41e-6)
    assert remote.parse_ping("100% packet loss\n") is None
    assert remote.one_way_latency(srv.Server("a", "localhost")) == 0.0


def test_latency_pings_come_back_as_half_the_smallest_round_trip():
    """latency_from runs ping on the source server (its -i at or above the 2 ms that
    ping(8) allows any user, iputils >= 20210202) and halves the smallest round trip."""
    summary = ("10 packets transmitted, 10 received, 0% packet loss, time 185ms\n"
               "rtt min/avg/max/mdev = 0.041/0.062/0.090/0.014 ms\n")
    fake = FakeRemote(B, {"ping": (0, summary, "")})
    sent = []
    fake_run = fake.run
    object.__setattr__(fake, "run", lambda cmd, timeout=30.0: sent.append(cmd) or
                       fake_run(cmd, timeout))
    assert remote.latency_from(fake, "10.98.0.1") == pytest.approx(20.5e-6)
    [argv] = sent
    assert argv[0] == "ping" and argv[-1] == "10.98.0.1"
    assert argv[argv.index("-c") + 1] == "10" and float(argv[argv.index("-i") + 1]) >= 0.002
    assert remote.latency_from(FakeRemote(B, {"ping": (1, "100% packet loss\n", "")}),
                               "10.98.0.1") is None


def test_cluster_plan_of_rail2x4_on_two_servers():
    from emu.cluster import plan as clusterplan

    fab = topologies.load("rail2x4", tdf=10000)
    p = place(fab, ["a", "b"])
    parts = clusterplan.plan(fab, p, ["a", "b"], {"a": "10.98.0.1", "b": "10.98.0.2"},
                             {("a", "b"): 40e-6}, "25a6", frontend="a")
    assert parts["a"].nodes == ("h1", "h2", "rail1", "rail2", "spine1", "spine2", "fe")
    assert parts["b"].nodes == ("h3", "h4")
    base = 0x25a6 * 256
    # both ends of every crossing link: same VNI, the other server's address
    got_b = sorted((t.node, t.ifname, t.vni, t.remote, t.frontend) for t in parts["b"].tunnels)
    got_a = sorted((t.node, t.ifname, t.vni, t.remote, t.frontend) for t in parts["a"].tunnels)
    vni = {t.link: t.vni for t in parts["a"].tunnels}
    assert sorted(vni.values()) == [base + i for i in range(1, 7)]
    assert got_b == sorted([("h3", "nic1", vni["h3:nic1-rail1:eth3"], "10.98.0.1", False),
                            ("h3", "nic2", vni["h3:nic2-rail2:eth3"], "10.98.0.1", False),
                            ("h4", "nic1", vni["h4:nic1-rail1:eth4"], "10.98.0.1", False),
                            ("h4", "nic2", vni["h4:nic2-rail2:eth4"], "10.98.0.1", False),
                            ("h3", "fe0", vni["h3:fe0-fe:eth3"], "10.98.0.1", True),
                            ("h4", "fe0", vni["h4:fe0-fe:eth4"], "10.98.0.1", True)])
    assert [t[3] for t in got_a] == ["10.98.0.2"] * 6
    macs = {(e.node, e.ifname): e.mac for lk in fab.links for e in (lk.a, lk.b)}
    assert all(t.mac == macs[(t.node, t.ifname)] for t in parts["a"].tunnels + parts["b"].tunnels)
    # the rail ports of crossing links add 1 us x 10000 less the tunnel's 40 us; hosts
    # and the frontend add nothing (no agent)
    assert parts["a"].delays == pytest.approx({"rail1:eth3": 9.96e-3, "rail1:eth4": 9.96e-3,
                                               "rail2:eth3": 9.96e-3, "rail2:eth4": 9.96e-3})
    assert parts["b"].delays == {}
    again = clusterplan.ServerPart.from_dict(json.loads(json.dumps(parts["b"].to_dict())))
    assert again == parts["b"]


def test_cluster_plan_refuses_a_link_shorter_than_its_tunnel_and_too_many_tunnels():
    from emu.cluster import plan as clusterplan

    fab = topologies.load("rail2x4", tdf=10)
    p = place(fab, ["a", "b"])
    with pytest.raises(ValueError, match=r"link h3:nic1-rail1:eth3: .* TDF 40 or more"):
        clusterplan.plan(fab, p, ["a", "b"], {"a": "10.0.0.1", "b": "10.0.0.2"},
                         {("a", "b"): 40e-6}, "0001")
    assert clusterplan.vni("ffff", 255) == (1 << 24) - 1
    with pytest.raises(ValueError, match="at most 255 links may cross servers"):
        clusterplan.vni("0001", 256)


def test_reachability_runs_one_shell_per_host_and_sorts_the_lines(tmp_path, monkeypatch):
    """emu.observe.reach.check_all: every pair's ping output comes back tagged with its number
    from one shell per source host; a fake `ping` answers with the TTL its target's last
    octet names, and loses the pings to 10.0.2.14."""
    from emu.observe import reach

    fake = tmp_path / "ping"
    fake.write_text('#!/bin/sh\nfor a; do dst=$a; done\n'
                    'if [ "$dst" = 10.0.2.14 ]; then echo "3 packets transmitted, 0 received"; '
                    'exit 1; fi\nttl=$((64 - ${dst##*.} % 4))\n'
                    'echo "64 bytes from $dst: icmp_seq=1 ttl=$ttl time=0.5 ms"\n'
                    'echo "3 packets transmitted, 3 received, 0% packet loss"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    started = []

    class Host:
        def __init__(self, name):
            self.name = name

        def popen(self, argv, **kw):
            started.append(self.name)
            scripts.append(argv[-1])
            return subprocess.Popen(argv, **kw)

    class Net:
        fabric = topologies.load("rail2x4")

        def host(self, name):
            return Host(name)

    scripts = []
    out = reach.check_all(Net())
    assert sorted(started) == ["h1", "h2", "h3", "h4"]
    assert all(" -W 2 " in s for s in scripts)  # each ping waits 2 s for its last reply
    scripts.clear()
    reach.check_all(Net(), wait_s=29.5)  # a slow machine's wait (emu.realise.procs.slowness)
    assert len(scripts) == 4 and all(" -W 30 " in s and " -W 2 " not in s for s in scripts)
    fab = Net.fabric
    assert [(r.src, r.dst) for r in out] == [(a.name, b.name) for a in fab.gpu_list()
                                             for b in fab.gpu_list() if a is not b]
    for r in out:
        ip = fab.gpus[r.dst].ip
        if ip == "10.0.2.14":
            assert (r.sent, r.received, r.ttl) == (3, 0, None)
        else:
            assert (r.sent, r.received, r.ttl, r.rtt_ms) == (3, 3, 64 - int(ip.split(".")[-1]) % 4,
                                                            0.5)


def test_each_pair_of_servers_compensates_its_own_latency():
    """rail2x4 on three servers, pinned: rail1 and spine1 on a, rail2 and spine2 on b,
    the hosts on c. Every pair is joined by links; each tunnel subtracts its own pair's
    latency (a-b 10 us, a-c 20 us, b-c 30 us) from the 10 ms lab of 1 us at TDF 10000."""
    from emu.cluster import plan as clusterplan

    fab = topologies.load("rail2x4", tdf=10000)
    pins = {"rail1": "a", "spine1": "a", "rail2": "b", "spine2": "b",
            **{h: "c" for h in ("h1", "h2", "h3", "h4")}}
    p = place(fab, ["a", "b", "c"], pins, slack=3)
    assert clusterplan.server_pairs(fab, p, "a") == [("a", "b"), ("a", "c"), ("b", "c")]
    lat = {("a", "b"): 10e-6, ("a", "c"): 20e-6, ("b", "c"): 30e-6}
    parts = clusterplan.plan(fab, p, ["a", "b", "c"], {"a": "10.0.0.1", "b": "10.0.0.2",
                                                       "c": "10.0.0.3"}, lat, "0001")
    assert parts["a"].delays == pytest.approx({
        "rail1:eth1": 9.98e-3, "rail1:eth2": 9.98e-3, "rail1:eth3": 9.98e-3,
        "rail1:eth4": 9.98e-3, "rail1:eth6": 9.99e-3, "spine1:eth2": 9.99e-3})
    assert parts["b"].delays == pytest.approx({
        "rail2:eth1": 9.97e-3, "rail2:eth2": 9.97e-3, "rail2:eth3": 9.97e-3,
        "rail2:eth4": 9.97e-3, "rail2:eth5": 9.99e-3, "spine2:eth1": 9.99e-3})
    assert {t.remote for t in parts["c"].tunnels} == {"10.0.0.1", "10.0.0.2"}
    assert clusterplan.pair("b", "a") == ("a", "b")


def test_a_capture_from_a_server_whose_clock_is_off_is_put_on_ours(tmp_path):
    """emu.observe.capture: a pcap streamed from another server whose clock was measured 2.5 s
    ahead of ours has every timestamp moved 2.5 s back at stop (editcap), so all pcaps
    of a run share one lab-time axis; a capture without a shift is left as it is."""
    import shutil

    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap, wrpcap

    from emu.observe.capture import Captures

    if shutil.which("editcap") is None:
        pytest.skip("needs editcap (wireshark-common: ./setup.sh installs it)")
    caps = Captures(tmp_path)
    stamps = [1000.25, 1000.5, 1001.0]
    for node in ("h3", "h1"):
        frames = [Ether(dst="02:00:00:00:00:01") for _ in stamps]
        for f, t in zip(frames, stamps):
            f.time = t
        wrpcap(str(caps.path(node, "nic1")), frames)
        caps.procs[(node, "nic1")] = subprocess.Popen(["true"])
    caps.shifts[("h3", "nic1")] = 2.5
    out = caps.stop()
    assert set(out) == {"h3-nic1.pcap", "h1-nic1.pcap"}
    got = {n: [float(p.time) for p in rdpcap(str(caps.path(n, "nic1")))] for n in ("h3", "h1")}
    assert got["h3"] == pytest.approx([t - 2.5 for t in stamps], abs=1e-6)
    assert got["h1"] == pytest.approx(stamps, abs=1e-6)


def test_a_clock_shift_is_applied_only_beyond_its_uncertainty():
    from emu.cluster.net import ClusterNet

    net = ClusterNet.__new__(ClusterNet)
    net.plan, net.placement = {}, type("P", (), {"server_of": {"h3": "b", "h4": "c"}})()
    net.clocks = {"b": (0.004, 0.001), "c": (0.0005, 0.001)}
    assert net.clock_shift("h3") == 0.004   # 4 ms off, known within 1 ms: corrected
    assert net.clock_shift("h4") == 0.0     # within the measurement's uncertainty: left


def test_bench_cluster_reads_a_summary_and_refuses_a_bad_size():
    from emu.bench.cluster import row

    s = {"build_s": 3.5, "workload_lab_s": 17.1,
         "fidelity": {"kept_up": True, "p99_lag_model_us": 0.042},
         "workload": {"rank0": {"rows": [{"seconds_model": 571.4e-6, "busbw_model_bps": 195.7e9,
                                          "correct": True}]}}}
    assert row(s) == pytest.approx({"time_us": 571.4, "busbw_gbps": 195.7, "exact": True,
                                    "build_s": 3.5, "lab_s": 17.1, "kept_up": True,
                                    "p99_us": 0.042})
    empty = row({})
    assert not empty["exact"] and not empty["kept_up"]
    import sys
    r = subprocess.run([sys.executable, "-m", "emu", "bench", "cluster", "--size", "banana"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--size" in r.stderr


def test_a_parts_files_land_in_the_run_directory_on_our_clock(tmp_path):
    """emu.cluster.net.keep_files: a log as it is; an event file with every "t" (model us of
    the server's CLOCK_MONOTONIC) moved by its clock's lead: 2 s ahead at TDF 10000 is
    200 us model earlier here; lines that are not JSON are dropped."""
    from emu.cluster.net import keep_files

    keep_files(tmp_path, {"nic-h3g1.log": "started\n",
                          "events/h3g1.jsonl": '{"t":4526204.36,"node":"h3g1","ev":"wr_post"}\n'
                                               'torn li\n{"t":4526300.0,"ev":"x"}\n'},
               2.0, 10000.0)
    assert (tmp_path / "nic-h3g1.log").read_text() == "started\n"
    got = [json.loads(x) for x in (tmp_path / "events" / "h3g1.jsonl").read_text().splitlines()]
    assert [e["t"] for e in got] == [4526004.36, 4526100.0]
    assert got[0] == {"t": 4526004.36, "node": "h3g1", "ev": "wr_post"}


def test_a_faults_actions_go_to_the_server_of_each_node(tmp_path):
    """emu.faults.inject over servers: `nic h3g1 down/up` and `pause h3g1` act on h3 (server
    b) through b's part and on rail1 (here) in this process; every switch's routes are
    pushed where the switch is; the part answers an `ops` request with the same call on
    its own NodeOps and refuses any other."""
    from emu.cluster import part as partmod
    from emu.cluster.net import ClusterNet
    from emu.faults.plan import resolve
    from emu.faults.schedule import parse_schedule
    from emucore.timedil import TimeDilation
    from emucore.wire.pause import pause_frame

    fab = topologies.load("rail2x4")
    calls = []

    class Ops:  # a NodeOps that records
        def __init__(self, where):
            self.where = where

        def __getattr__(self, fn):
            return lambda *args: calls.append((self.where, fn, args))

    class Part:
        def request(self, req, timeout):
            assert req["cmd"] == "ops" and timeout > 0
            getattr(Ops("b"), req["fn"])(*req["args"])
            assert req["node"] in ("h3", "h4")
            return {"ok": True}

    net = ClusterNet.__new__(ClusterNet)
    net.fabric, net.td, net.run_dir = fab, TimeDilation(fab.tdf), tmp_path
    net.local = {n for n in fab.nodes if n not in ("h3", "h4")}
    net.plan, net.placement = {}, type("P", (), {"server_of": {"h3": "b", "h4": "b"}})()
    net.parts, net._ops = {"b": Part()}, Ops("a")
    from emu.faults.inject import FaultRunner

    steps = resolve(fab, parse_schedule(["10us nic h3g1 down; 20us nic h3g1 up; "
                                         "30us pause h3g1 prio=3 quanta=100"]))
    runner = FaultRunner(net, steps)
    for st in steps:
        runner.apply(st)
    runner.log.close(0.0)
    on_b = [c for c in calls if c[0] == "b"]
    assert on_b == [("b", "set_link", ("h3", "nic1", False)),
                    ("b", "set_link", ("h3", "nic1", True)),
                    ("b", "restore_port", ("h3", "nic1")),
                    ("b", "send_frame", ("h3g1", pause_frame(bytes.fromhex("020000000301"), 3,
                                                             100)))]
    here = [c for c in calls if c[0] == "a"]
    assert here[0] == ("a", "set_link", ("rail1", "eth3", False))
    assert ("a", "restore_port", ("rail1", "eth3")) in here
    pushed = [c[2][0] for c in here if c[1] == "set_routes"]
    assert sorted(pushed) == sorted([s.name for s in fab.switches()] * 2)

    # the part's side: the same call on its own NodeOps, nothing else
    got = []

    class PartNet:
        def node_ops(self, node):
            got.append(node)
            return Ops("part")

    calls.clear()
    ok = partmod.answer(PartNet(), partmod.encode({"cmd": "ops", "fn": "set_link", "node": "h3",
                                                   "args": ("h3", "nic1", False)}))
    assert ok == {"ok": True} and got == ["h3"]
    assert calls == [("part", "set_link", ("h3", "nic1", False))]
    bad = partmod.answer(PartNet(), partmod.encode({"cmd": "ops", "fn": "close", "node": "h3",
                                                    "args": ()}))
    assert bad == {"error": "unknown call 'close'"} and len(calls) == 1


def test_rdma_memory_of_a_nic_elsewhere_is_made_filled_and_checked_there():
    """--workload write/incast over servers: a NIC on another server registers a block
    its part made (emu.cluster.part.Blocks, emu.cluster.net.RemoteShm); the region is filled there
    and compared by SHA-256, and dropping it unlinks it there."""
    import hashlib
    import os

    from emu.cluster.proxies import RemoteShm
    from emu.cluster.part import Blocks
    from traffic.nic.client import MemoryRegion, new_shm

    blocks = Blocks("beef")

    class Part:  # the session to the part, in-process
        def request(self, req):
            reply = blocks.answer(req)
            if "error" in reply:
                raise RuntimeError(reply["error"])
            return reply

    far = RemoteShm(Part(), 10000)
    assert far.name.startswith("emu-beef-mr-") and os.path.exists(f"/dev/shm/{far.name}")
    mr = MemoryRegion(far, 1, 2, 0, 10000, owner=True)
    assert not mr.here and mr.is_zero()
    mr.fill_random()
    there = bytes(blocks.made[far.name].buf[:10000])
    assert not mr.is_zero() and mr.digest() == hashlib.sha256(there).hexdigest()
    here = MemoryRegion(new_shm("beef", 10000), 3, 4, 0, 10000)  # the same bytes here
    here.buf[:] = there
    assert here.here and here.digest() == mr.digest() and not here.is_zero()
    here.buf[9999] ^= 1
    assert here.digest() != mr.digest()
    here.close()
    mr.close()
    assert not os.path.exists(f"/dev/shm/{far.name}") and blocks.made == {}
    with pytest.raises(RuntimeError, match="no block"):
        far.digest(10)
    left = RemoteShm(Part(), 64)  # a block the controller never dropped: gone at the end
    blocks.close()
    assert not os.path.exists(f"/dev/shm/{left.name}")
    assert blocks.answer({"op": "melt", "name": "x"}) == {"error": "no block 'x'"}


def test_servers_are_checked_at_once_and_named_in_order(monkeypatch):
    """emu.cluster.remote.check_all: one thread per server (three checks of 0.3 s take about
    0.3 s), the problems in the servers file's order whatever finishes first."""
    import time

    delay = {"a": 0.3, "b": 0.2, "c": 0.1}

    def slow(r):
        time.sleep(delay[r.server.name])
        return [] if r.server.name == "a" else [f"server {r.server.name}: bad", "again"]

    monkeypatch.setattr(remote, "check", slow)
    t = time.monotonic()
    got = remote.check_all([srv.Server(n, f"10.0.0.{i}") for i, n in enumerate("abc", 1)])
    assert time.monotonic() - t < 0.55
    assert got == ["server b: bad", "again", "server c: bad", "again"]
