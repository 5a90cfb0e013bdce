"""A raw-frame traffic generator for labs and tests (until the RNIC drives the fabric).

Sends Ethernet/IPv4/UDP frames of a given size out of one interface (AF_PACKET), at a
paced rate or as fast as possible, with chosen DSCP and ECN bits (book ch.11: DSCP 24
+ ECT for RoCE-class traffic). Usage, inside a host namespace:

    python -m traffic.tools.rawgen --iface nic1 --src-ip 10.0.1.11 --dst-ip 10.0.1.12 \
        --dst-mac 02:00:00:00:02:01 --size 9000 --rate 400M --duration 3

Prints one JSON line of statistics. The frame is built once (UDP checksum 0, legal for
IPv4) and only a sequence number in the payload changes.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import socket
import struct
import sys
import time

from emucore.qos.classify import ROCE_PRIORITY, Classifier
from emucore.qos.pfc import EgressPause
from emucore.timedil import DEFAULT_TDF, TimeDilation, parse_rate


def build_frame(src_mac: bytes, dst_mac: bytes, src_ip: str, dst_ip: str, size: int,
                sport: int = 49152, dport: int = 9, dscp: int = 0, ecn: int = 0,
                ttl: int = 64) -> bytearray:
    """An Ethernet frame of `size` bytes (without FCS) carrying IPv4/UDP."""
    if size < 14 + 20 + 8 + 8:
        raise ValueError(f"size: at least 50 bytes, got {size}")
    ip_len = size - 14
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, (dscp << 2) | ecn, ip_len, 0, 0x4000, ttl, 17, 0,
                      socket.inet_aton(src_ip), socket.inet_aton(dst_ip))
    s = sum(struct.unpack("!10H", hdr))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    hdr = hdr[:10] + struct.pack("!H", ~s & 0xFFFF) + hdr[12:]
    udp = struct.pack("!HHHH", sport, dport, ip_len - 20, 0)
    frame = bytearray(dst_mac + src_mac + b"\x08\x00" + hdr + udp)
    frame += bytes(size - len(frame))
    return frame


def send(iface: str, frame: bytearray, rate_bps: float | None, duration: float,
         count: int | None = None, pause: EgressPause | None = None,
         priority: int = ROCE_PRIORITY) -> dict:
    """Send copies of `frame` (with a sequence number) for `duration` s or `count` frames.

    With `pause` (a `emucore.qos.pfc.EgressPause`), PFC frames received on the
    interface stop the generator while its `priority` is paused (ch.11: the host NIC
    honours pauses too)."""
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x8808))
    s.bind((iface, 0x8808))  # receive only MAC control (PFC) frames
    s.setblocking(False)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    paused_s = 0.0
    pfc_rx = 0
    gap = len(frame) * 8 / rate_bps if rate_bps else 0.0
    seq_off = 14 + 20 + 8
    sent = errors = 0
    start = time.monotonic()
    next_t = start
    end = start + duration
    while True:
        now = time.monotonic()
        if now >= end or (count is not None and sent >= count):
            break
        if pause is not None:
            while True:
                try:
                    ctl = s.recv(128)
                except BlockingIOError:
                    break
                if pause.on_frame(ctl, now):
                    pfc_rx += 1
            if pause.paused_mask(now) >> priority & 1:
                wait = min(pause.next_expiry - now, 0.0005, end - now)
                time.sleep(max(wait, 0.0))
                paused_s += time.monotonic() - now
                next_t = time.monotonic()
                continue
        if gap:
            if now < next_t:
                time.sleep(min(next_t - now, 0.001))
                continue
            next_t += gap
            if next_t < now - 0.01:  # don't burst to catch up after a stall
                next_t = now
        struct.pack_into("!Q", frame, seq_off, sent)
        try:
            s.send(frame)
            sent += 1
        except OSError:
            errors += 1
            time.sleep(0.0002)
    elapsed = time.monotonic() - start
    s.close()
    return {"frames": sent, "bytes": sent * len(frame), "errors": errors,
            "seconds": elapsed, "rate_bps": sent * len(frame) * 8 / elapsed if elapsed else 0.0,
            "pfc_rx": pfc_rx, "paused_s": paused_s}


def iface_mac(ifname: str) -> bytes:
    """MAC address of an interface of the current namespace (SIOCGIFHWADDR; /sys may
    belong to another namespace under Mininet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        info = fcntl.ioctl(s.fileno(), 0x8927, struct.pack("256s", ifname.encode()[:15]))
    return info[18:24]


def main(argv: list[str] | None = None) -> int:
    """CLI entry point."""
    ap = argparse.ArgumentParser(prog="python -m traffic.tools.rawgen", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iface", required=True)
    ap.add_argument("--src-ip", required=True)
    ap.add_argument("--dst-ip", required=True)
    ap.add_argument("--dst-mac", required=True)
    ap.add_argument("--size", type=int, default=1500, help="frame size in bytes (no FCS)")
    ap.add_argument("--rate", default=None, help="paced rate, e.g. 400M (default: flat out)")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--count", type=int, default=None)
    ap.add_argument("--dscp", type=int, default=0)
    ap.add_argument("--ecn", type=int, default=0, choices=range(4))
    ap.add_argument("--sport", type=int, default=49152)
    ap.add_argument("--dport", type=int, default=9)
    ap.add_argument("--honor-pfc", action="store_true",
                    help="stop while the traffic's priority is paused by PFC frames")
    ap.add_argument("--model-rate", default="200G",
                    help="model link rate, for pause durations (default 200G)")
    ap.add_argument("--tdf", type=float, default=None, help="time-dilation factor (default emu's)")
    ap.add_argument("--priority", type=int, default=None,
                    help="PFC priority of the traffic (default: from the DSCP, book mapping)")
    a = ap.parse_args(argv)
    src_mac = iface_mac(a.iface)
    frame = build_frame(src_mac, bytes.fromhex(a.dst_mac.replace(":", "")), a.src_ip,
                        a.dst_ip, a.size, a.sport, a.dport, a.dscp, a.ecn)
    rate = parse_rate(a.rate) if a.rate else None
    pause, prio = None, 0
    if a.honor_pfc:
        pause = EgressPause(parse_rate(a.model_rate), TimeDilation(a.tdf or DEFAULT_TDF))
        prio = a.priority if a.priority is not None else Classifier.book().classify(a.dscp << 2)[1]
    print(json.dumps(send(a.iface, frame, rate, a.duration, a.count, pause, prio)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
