"""emu.realise.earlydrop: the classic BPF programs a switch's and a host's fabric ports
drop frames with before the IP stack - their exact bytecode, and what they decide for
each kind of frame, run by a small interpreter of the opcodes they use (linux/filter.h
semantics: loads past the frame's end return 0, i.e. drop the packet in the kernel;
none of these frames is that short)."""

from __future__ import annotations

import struct

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Raw

from emu.realise.earlydrop import (TC_ACT_OK, TC_ACT_SHOT, bytecode, drop_all_program,
                                   host_program, switch_program, tc_commands)

ROUTER_MAC, HOST_MAC = "02:00:00:00:01:01", "02:00:00:00:00:11"


def run(program, frame: bytes) -> int:
    """The verdict of a classic BPF program on an Ethernet frame."""
    a = x = pc = 0
    while True:
        code, jt, jf, k = program[pc]
        pc += 1
        if code == 0x28:
            a = struct.unpack_from("!H", frame, k)[0]
        elif code == 0x20:
            a = struct.unpack_from("!I", frame, k)[0]
        elif code == 0x30:
            a = frame[k]
        elif code == 0xB1:
            x = 4 * (frame[k] & 0xF)
        elif code == 0x48:
            a = struct.unpack_from("!H", frame, x + k)[0]
        elif code == 0x15:
            pc += jt if a == k else jf
        elif code == 0x45:
            pc += jt if a & k else jf
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"opcode {code:#x}")


def eth(payload, dst=ROUTER_MAC):
    return bytes(Ether(src=HOST_MAC, dst=dst) / payload)


SWITCH_ADDRS = ["10.0.1.1/24", "10.1.1.0/31", "10.1.2.0/31"]
ROCE = UDP(sport=49152, dport=4791) / (b"\x0a" + bytes(4171))


@pytest.mark.parametrize("frame, verdict", [
    (eth(IP(src="10.0.1.11", dst="10.0.2.11") / ROCE), TC_ACT_SHOT),  # routed RoCE
    (eth(IP(src="10.0.1.11", dst="10.0.1.12") / ROCE, dst="02:00:00:00:00:12"),
     TC_ACT_SHOT),  # switched within the rail (another host's MAC)
    (eth(IP(src="10.0.1.11", dst="10.0.2.11") / TCP()), TC_ACT_SHOT),
    (eth(IP(src="10.0.1.11", dst="10.0.1.1") / ICMP()), TC_ACT_OK),  # ping the gateway
    (eth(IP(src="10.1.1.1", dst="10.1.2.0") / UDP(dport=33434)), TC_ACT_OK),  # traceroute
    (eth(IP(src="10.0.1.11", dst="10.1.1.0", ihl=6, options=b"\x01\x01\x01\x01") / ICMP()),
     TC_ACT_OK),  # options do not move the destination
    (eth(ARP(op=1, psrc="10.0.1.11", pdst="10.0.1.1"), dst="ff:ff:ff:ff:ff:ff"), TC_ACT_OK),
    (bytes.fromhex("0180c2000001" "020000000011" "8808" "0101" "00ff") + bytes(42),
     TC_ACT_OK),  # PFC
    (bytes.fromhex("0180c200000e" "020000000011" "88cc") + bytes(50), TC_ACT_OK),  # LLDP
])
def test_switch_program_drops_ipv4_not_for_the_switch(frame, verdict):
    assert run(switch_program(SWITCH_ADDRS), frame) == verdict


@pytest.mark.parametrize("frame, verdict", [
    (eth(IP(src="10.0.2.11", dst="10.0.1.11") / ROCE), TC_ACT_SHOT),
    (eth(IP(src="10.0.2.11", dst="10.0.1.11", tos=0xC0) / UDP(sport=49153, dport=4791)
         / bytes(32)), TC_ACT_SHOT),  # a CNP
    (eth(IP(src="10.0.2.11", dst="10.0.1.11") / UDP(sport=4793, dport=4793) / bytes(64)),
     TC_ACT_SHOT),  # UET
    (eth(IP(src="10.0.2.11", dst="10.0.1.11", ihl=7, options=bytes(8)) / ROCE), TC_ACT_SHOT),
    (eth(IP(src="10.0.2.11", dst="10.0.1.11", proto=17, frag=100)
         / Raw(struct.pack("!HH", 4791, 4791) + bytes(8))), TC_ACT_OK),  # a later fragment
    (eth(IP(src="10.0.2.11", dst="10.0.1.11") / UDP(sport=4791, dport=4792)), TC_ACT_OK),
    (eth(IP(src="10.0.2.11", dst="10.0.1.11") / TCP(dport=4791)), TC_ACT_OK),
    (eth(IP(src="10.0.2.11", dst="10.0.1.11") / ICMP()), TC_ACT_OK),
    (eth(ARP(op=2, psrc="10.0.1.1", pdst="10.0.1.11")), TC_ACT_OK),
])
def test_host_program_drops_roce_and_uet_only(frame, verdict):
    assert run(host_program(), frame) == verdict


def test_switch_program_bytes():
    """10.0.1.1 = 167772417, 10.9.9.9 = 168364297: sorted, each jumping to the keep."""
    assert bytecode(switch_program(["10.9.9.9/24", "10.0.1.1", "10.0.1.1/32"])) == (
        "7,40 0 0 12,21 0 4 2048,32 0 0 30,21 2 0 167772417,21 1 0 168364297,6 0 0 2,6 0 0 0")
    assert bytecode(switch_program([])) == "5,40 0 0 12,21 0 2 2048,32 0 0 30,6 0 0 2,6 0 0 0"


def test_host_program_bytes():
    assert bytecode(host_program()) == (
        "12,40 0 0 12,21 0 9 2048,48 0 0 23,21 0 7 17,40 0 0 20,69 5 0 8191,177 0 0 14,"
        "72 0 0 16,21 1 0 4791,21 0 1 4793,6 0 0 2,6 0 0 0")


def test_tc_commands():
    assert tc_commands("s1p1", ((6, 0, 0, 0),)) == [
        "qdisc add dev s1p1 clsact",
        'filter add dev s1p1 ingress prio 1 bpf da bytecode "1,6 0 0 0"']


def test_too_many_addresses_is_refused():
    with pytest.raises(ValueError, match="addresses: at most 250"):
        switch_program([f"10.{i // 256}.{i % 256}.1" for i in range(251)])


def test_drop_all_program():
    assert bytecode(drop_all_program()) == "1,6 0 0 2"
    assert run(drop_all_program(), eth(ARP(op=1), dst="ff:ff:ff:ff:ff:ff")) == TC_ACT_SHOT


def test_a_missing_tc_is_a_clear_error(monkeypatch):
    from emu.realise import netlink
    from emu.realise.netplan import IngressFilter

    def run(*_a, **_k):
        raise FileNotFoundError("tc")
    monkeypatch.setattr(netlink.subprocess, "run", run)
    with pytest.raises(RuntimeError, match=r"tc: not found \(iproute2; ./setup.sh installs it\)"):
        netlink.install_ingress_filters((IngressFilter("eth1", drop_all_program()),))
    netlink.install_ingress_filters(())  # nothing to install: tc is not run


def test_a_refused_filter_names_its_ports(monkeypatch):
    import subprocess

    from emu.realise import netlink
    from emu.realise.netplan import IngressFilter
    seen = {}

    def run(args, input, **_k):
        seen["args"], seen["input"] = args, input
        return subprocess.CompletedProcess(args, 1, "", "Error: Unknown filter \"bpf\".\n")
    monkeypatch.setattr(netlink.subprocess, "run", run)
    with pytest.raises(RuntimeError, match=r"ports \['eth1', 'eth2'\] failed \(needs cls_bpf "
                                           r"and the clsact qdisc\): Error: Unknown filter"):
        netlink.install_ingress_filters((IngressFilter("eth1", drop_all_program()),
                                         IngressFilter("eth2", drop_all_program())))
    assert seen["args"] == ["tc", "-batch", "-"]
    assert seen["input"].splitlines() == tc_commands("eth1", drop_all_program()) + tc_commands(
        "eth2", drop_all_program())
