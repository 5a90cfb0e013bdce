"""What one run of the DCQCN discrete-event model saw (`emu.bench.dcqcnsim.simulate`),
per sample interval, and its averages: each sender's share of C/N, when the shares are
within a tolerance, a window's shares, CNP rate, CE fraction and depth (issue 31,
docs/DCQCN_PARAMS.md "The discrete-event model")."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Run:
    """What one run saw, per sample interval of `sample` model seconds (index k covers
    [k sample, (k+1) sample)): bytes delivered per sender, CNPs per sender, arrivals and CE marks at the port, the summed depth arrivals saw."""

    senders: int
    link_bps: float
    sample: float
    profile: str
    qos: str
    delivered: list[list[int]] = field(default_factory=list)
    cnps: list[list[int]] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    marks: list[int] = field(default_factory=list)
    depth_sum: list[float] = field(default_factory=list)
    max_depth: int = 0
    #: PFC (`simulate(pfc=True)`), per sender: pauses sent (xOFF and refreshes), resumes
    #: sent, the (start, end) model times each was paused at its NIC, its most bytes held
    pauses: list[int] = field(default_factory=list)
    resumes: list[int] = field(default_factory=list)
    paused: list[list[tuple[float, float]]] = field(default_factory=list)
    max_held: list[int] = field(default_factory=list)
    headroom_over: int = 0
    #: bytes each sender's NIC sent per interval (by the time its frame started)
    sent: list[list[int]] = field(default_factory=list)

    def shares(self, k: int, span: int = 1) -> list[float]:
        """Each sender's delivered rate over intervals k .. k+span-1 as a fraction of C/N."""
        fair = self.link_bps / self.senders
        rows = self.delivered[k:k + span]
        return [sum(r[i] for r in rows) * 8 / (len(rows) * self.sample) / fair
                for i in range(self.senders)]

    def converged_at(self, tol: float, span: int = 5) -> float | None:
        """The model time from which every block of `span` intervals to the end has every
        sender within `tol` of C/N (None: the last block is not)."""
        starts = range(0, len(self.delivered) - span + 1, span)
        k = len(starts)
        while k > 0 and all(abs(s - 1) <= tol for s in self.shares(starts[k - 1], span)):
            k -= 1
        return None if k == len(starts) else starts[k] * self.sample

    def window(self, lo: float, hi: float) -> dict:
        """Averages over intervals [lo, hi) (model seconds): shares, CNPs/s per sender,
        the port's CE fraction, the mean depth an arrival saw (bytes)."""
        ks = range(int(round(lo / self.sample)), int(round(hi / self.sample)))
        if not ks or ks.stop > len(self.delivered):
            raise ValueError(f"window: [{lo}, {hi}) is not inside the run")
        n, span = len(ks), len(ks) * self.sample
        arr = sum(self.arrivals[k] for k in ks)
        return {"shares": [sum(self.shares(k)[i] for k in ks) / n for i in range(self.senders)],
                "cnp_per_s": [sum(self.cnps[k][i] for k in ks) / span
                              for i in range(self.senders)],
                "mark_fraction": sum(self.marks[k] for k in ks) / arr if arr else 0.0,
                "mean_depth": sum(self.depth_sum[k] for k in ks) / arr if arr else 0.0}
