"""Early drop: the frames a node's kernel would only throw away, dropped before its IP
stack (pure, no root; issue 30, docs/ARCHITECTURE.md "The data path").

Every frame on a fabric port reaches two readers in the receiving namespace: the
agent's or NIC's packet socket, and the namespace's own IP stack. The packet socket is
a tap (ptype_all), served in `__netif_receive_skb_core` *before* the port's tc ingress
hook; the IP stack comes after it. A routed frame's kernel work at a switch is pure
waste (the kernel never forwards, `ip_forward` 0: a route lookup, a dst allocated, the
frame counted as InAddrErrors and freed), and so is a RoCE or UET frame's at a host
(IP, UDP, the socket of traffic.nic.datapath that exists only so that no ICMP
port-unreachable answers, its full receive buffer). That work runs in the *sender's*
system call (a veth hands its frame to the peer's receive path on the sending CPU):
the agent or NIC that transmits pays it.

So each such port gets a classic BPF program on a clsact ingress hook in direct-action
mode (cls_bpf; this kernel has no gact or matchall actions, only the classifier's own
verdict): TC_ACT_SHOT for a frame the kernel would discard, TC_ACT_OK for the rest.

* `switch_program(addresses)`: a switch keeps every non-IPv4 frame (ARP, LLDP and PFC
  frames go on as before) and the IPv4 packets addressed to the switch itself (ping,
  traceroute to its addresses: the kernel answers them, switch_agent.agent); it drops
  every other IPv4 packet (the agent routes or switches it from its tap).
* `drop_all_program()`: the agent's end of a rail switch's SVI CPU port
  (emu.realise.netplan `Bridge.cpu`) drops everything: the switch's own frames.
* `host_program()`: a host drops the unfragmented IPv4 UDP datagrams to RoCEv2's port
  4791 (RoCEv2 Annex A17.4.5.1) and UET's 4793 (the NIC reads them from its tap); its
  kernel keeps everything else (ping, TCP, other UDP).

`tc_commands(ifname, program)` gives the `tc -batch` lines that install a program
(emu.realise.netlink.install_ingress_filters runs them). A program is a tuple of
(code, jt, jf, k) instructions, as `tc ... bpf bytecode` and `struct sock_filter` have
them (linux/filter.h); at the tc ingress hook a classic program's loads are offsets
from the start of the Ethernet header.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Insn = tuple[int, int, int, int]  #: (code, jt, jf, k) of struct sock_filter

# linux/bpf_common.h, linux/filter.h
LDH_ABS = 0x28  # A = half-word at [k]
LD_ABS = 0x20  # A = word at [k]
LDB_ABS = 0x30  # A = byte at [k]
LDX_MSH = 0xB1  # X = 4 * ([k] & 0xf): the IPv4 header's length
LDH_IND = 0x48  # A = half-word at [X + k]
JEQ = 0x15  # pc += (A == k) ? jt : jf
JSET = 0x45  # pc += (A & k) ? jt : jf
RET = 0x06  # return k
# linux/pkt_cls.h: the verdicts of a direct-action classifier
TC_ACT_OK = 0
TC_ACT_SHOT = 2

ETH_P_IP = 0x0800
IPPROTO_UDP = 17
ROCE_UDP_PORT = 4791  # RoCEv2 (IBTA Annex A17.4.5.1)
UET_UDP_PORT = 4793  # Ultra Ethernet (UEC 1.0)
MAX_ADDRESSES = 250  #: a jump offset is one byte: jt / jf <= 255
OFF_ETHERTYPE, OFF_IP, OFF_PROTO, OFF_FRAG, OFF_DST = 12, 14, 23, 20, 30
OFF_UDP_DPORT = OFF_IP + 2  # from X = the IPv4 header's length
FRAGMENT = 0x1FFF  # the fragment offset's 13 bits (a later fragment has no UDP header)


def switch_program(addresses: Iterable[str]) -> tuple[Insn, ...]:
    """Drop IPv4 packets not addressed to one of `addresses` (dotted quads, a "/len"
    suffix is ignored); keep everything else."""
    ips = sorted({int(ipaddress.IPv4Interface(a).ip) for a in addresses})
    if len(ips) > MAX_ADDRESSES:
        raise ValueError(f"addresses: at most {MAX_ADDRESSES} for one program, got {len(ips)}")
    n = len(ips)
    prog: list[Insn] = [(LDH_ABS, 0, 0, OFF_ETHERTYPE),
                        (JEQ, 0, n + 2, ETH_P_IP),  # not IPv4: to the last (keep)
                        (LD_ABS, 0, 0, OFF_DST)]
    for i, ip in enumerate(ips):  # instruction 3 + i; keep is at 3 + n + 1
        prog.append((JEQ, n - i, 0, ip))
    prog += [(RET, 0, 0, TC_ACT_SHOT), (RET, 0, 0, TC_ACT_OK)]
    return tuple(prog)


def host_program() -> tuple[Insn, ...]:
    """Drop unfragmented IPv4 UDP to port 4791 (RoCEv2) or 4793 (UET); keep the rest."""
    return ((LDH_ABS, 0, 0, OFF_ETHERTYPE),
            (JEQ, 0, 9, ETH_P_IP),  # 1: not IPv4 -> keep (11)
            (LDB_ABS, 0, 0, OFF_PROTO),
            (JEQ, 0, 7, IPPROTO_UDP),  # 3: not UDP -> keep
            (LDH_ABS, 0, 0, OFF_FRAG),
            (JSET, 5, 0, FRAGMENT),  # 5: a later fragment -> keep
            (LDX_MSH, 0, 0, OFF_IP),
            (LDH_IND, 0, 0, OFF_UDP_DPORT),
            (JEQ, 1, 0, ROCE_UDP_PORT),  # 8: -> drop (10)
            (JEQ, 0, 1, UET_UDP_PORT),  # 9: -> drop (10) or keep (11)
            (RET, 0, 0, TC_ACT_SHOT),
            (RET, 0, 0, TC_ACT_OK))


def drop_all_program() -> tuple[Insn, ...]:
    """Drop every frame: the agent's end of an SVI's CPU port, where only the switch
    kernel's own frames arrive (for the agent's tap, never for the kernel again)."""
    return ((RET, 0, 0, TC_ACT_SHOT),)


def bytecode(program: tuple[Insn, ...]) -> str:
    """`tc ... bpf bytecode` text: "N,code jt jf k,..." (as `nfbpf_compile` prints it)."""
    return ",".join([str(len(program))] + [" ".join(map(str, i)) for i in program])


def tc_commands(ifname: str, program: tuple[Insn, ...]) -> list[str]:
    """The `tc -batch` lines that put `program` on `ifname`'s ingress (clsact qdisc,
    cls_bpf in direct-action mode)."""
    return [f"qdisc add dev {ifname} clsact",
            f'filter add dev {ifname} ingress prio 1 bpf da bytecode "{bytecode(program)}"']
