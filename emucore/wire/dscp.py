"""DSCP and ECN code points of the RoCEv2 fabric (RFC 2474, RFC 3168; book ch.11).

The book's classes (Example 11-1): DSCP 24 is RoCEv2 data, DSCP 48 is CNP. ECN is the two
low bits of the IPv4 TOS byte: 00 Not-ECT, 01 ECT(1), 10 ECT(0), 11 CE (Congestion
Experienced). Which queue and PFC priority a code point maps to is configuration:
`emucore.qos.classify` (docs/FABRIC_FACTS.md "Switch QoS for RoCEv2").
"""

DSCP_ROCEV2 = 24  #: RoCEv2 data (class-map ROCEv2)
DSCP_CNP = 48  #: congestion notification packets (class-map CNP)

ECN_NOT_ECT = 0b00
ECN_ECT1 = 0b01
ECN_ECT0 = 0b10
ECN_CE = 0b11
