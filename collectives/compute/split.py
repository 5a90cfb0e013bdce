"""Where an iteration's time went: compute, communication, their overlap (issue 15).

Intervals are (start, end) model seconds on the job's clock. Over a window (one
iteration): compute = the union of the compute intervals in it; communication = the
union of the collective operations' intervals; overlap = their intersection; exposed
communication = communication - overlap (what the step waits for); other = the rest of
the window (Python, the optimizer, waiting on a peer). Pure interval arithmetic.
"""

from __future__ import annotations

Interval = tuple[float, float]


def union(xs: list[Interval]) -> list[Interval]:
    """Sorted, merged intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted(x for x in xs if x[1] > x[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(xs: list[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of merged intervals inside [lo, hi]."""
    return [(max(a, lo), min(b, hi)) for a, b in xs if min(b, hi) > max(a, lo)]


def length(xs: list[Interval]) -> float:
    """Total length of merged intervals."""
    return sum(b - a for a, b in xs)


def intersect(xs: list[Interval], ys: list[Interval]) -> list[Interval]:
    """Intersection of two merged interval lists."""
    out, i, j = [], 0, 0
    while i < len(xs) and j < len(ys):
        a, b = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if b > a:
            out.append((a, b))
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return out


def split(window: Interval, compute: list[Interval], comm: list[Interval]) -> dict:
    """The window's time as compute, communication, overlap, exposed communication, other."""
    lo, hi = window
    c, m = clip(union(compute), lo, hi), clip(union(comm), lo, hi)
    both = intersect(c, m)
    total = max(0.0, hi - lo)
    cs, ms, os_ = length(c), length(m), length(both)
    return {"window_s": total, "compute_s": cs, "comm_s": ms, "overlap_s": os_,
            "exposed_comm_s": ms - os_, "other_s": max(0.0, total - cs - ms + os_)}
