"""The knobs of emu's UET transport (issue 16), one validated config for both halves of
an endpoint; model seconds where a time is meant (the NIC converts with emucore.timedil).

Defaults: 4096-byte packets (emu's path MTU); RUD (reliable unordered: every packet
placed on arrival, ROD = ordered); an ACK every 4 packets, at the end of a message and
when asked (AR), with the SACK bitmap and the ECN echo (UET_FACTS "RUD"); the RTO and
retry budget of the RoCE NIC (1.05 ms model, 7 retries) so a dead peer fails alike; the
entropy value per packet from the UDP source port range 49152-65535 (`ev`), REPS with 8
remembered EVs, frozen for 10 ms after a timeout on a trimming fabric and exploring 16
random EVs after it (uet-htsim's REPS, `ev.Entropy`); NSCC with its target queueing
delay, window cap 1.5 BDP and the rules of uet-htsim (`nscc.NsccConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from traffic.uet.nscc import NsccConfig

EV_MODES = ("fixed", "oblivious", "reps")  #: entropy per PDC, random per packet, recycled
MODES = ("rud", "rod")


@dataclass
class UetConfig:
    """Transport knobs of one UET endpoint."""

    mtu: int = 4096                 #: payload bytes per packet
    mode: str = "rud"               #: rud (unordered, placed on arrival) or rod (ordered)
    ack_every: int = 4              #: the target ACKs every N packets (and EOM, AR)
    rto_s: float = 4.096e-6 * 2 ** 8  #: retransmission timeout, model s
    retries: int = 7                #: retransmissions of one packet before the WR fails
    rnr_s: float = 0.64e-3          #: NACK NO_RESOURCE (no receive posted): resend after, model s
    rnr_retries: int = 7            #: ... at most this often per packet (then RNR_RETRY_EXC_ERR)
    ev: str = "oblivious"           #: entropy: fixed, oblivious or reps
    ev_range: tuple[int, int] = (49152, 65535)
    reps_slots: int = 8             #: REPS: EVs remembered from unmarked ACKs
    reps_freeze_s: float = 10e-3    #: REPS: frozen after a timeout (trimming only), model s; 0: never
    reps_explore: int = 16          #: REPS: random EVs after a freeze
    reps_lifetime: int = 1          #: REPS: uses of one remembered EV
    nscc: NsccConfig = field(default_factory=NsccConfig)
    syn_window: int = 4095          #: packets sent with SYN before the first ACK (12-bit offset)

    def __post_init__(self) -> None:
        """Validate, naming the bad field."""
        if not 64 <= self.mtu <= 16383:
            raise ValueError(f"mtu: must be 64..16383 (14-bit payload length), got {self.mtu}")
        if self.mode not in MODES:
            raise ValueError(f"mode: rud or rod, got {self.mode!r}")
        if self.ev not in EV_MODES:
            raise ValueError(f"ev: one of {', '.join(EV_MODES)}, got {self.ev!r}")
        lo, hi = self.ev_range
        if not 1 <= lo <= hi <= 0xFFFF:
            raise ValueError(f"ev_range: 1 <= low <= high <= 65535, got {self.ev_range!r}")
        for name in ("ack_every", "retries", "reps_slots", "rnr_retries", "reps_explore",
                     "reps_lifetime"):
            low = 0 if name in ("retries", "rnr_retries", "reps_explore") else 1
            if getattr(self, name) < low:
                raise ValueError(f"{name}: must be >= {low}, got {getattr(self, name)!r}")
        for name in ("rto_s", "rnr_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        if self.reps_freeze_s < 0:
            raise ValueError(f"reps_freeze_s: must be >= 0, got {self.reps_freeze_s!r}")
        if not 1 <= self.syn_window <= 4095:
            raise ValueError(f"syn_window: 1..4095, got {self.syn_window!r}")

    def dilated(self, tdf: float) -> "UetConfig":
        """The same transport on a lab clock `tdf` times slower (emucore.timedil): every
        time x tdf. NSCC is dimensionally consistent - its window is a BDP (base RTT x
        rate, the rate / tdf) and its gains multiply times by 1/time - so the window
        evolves exactly as in model time when the link rate is given / tdf too."""
        n = self.nscc
        return replace(self, rto_s=self.rto_s * tdf, rnr_s=self.rnr_s * tdf,
                       reps_freeze_s=self.reps_freeze_s * tdf,
                       nscc=replace(n, base_rtt_s=n.base_rtt_s * tdf,
                                    fast_delay_s=n.fast_delay_s * tdf,
                                    ref_rtt_s=n.ref_rtt_s * tdf))
