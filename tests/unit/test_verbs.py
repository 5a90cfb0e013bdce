"""Verbs objects (traffic/verbs.py): keys, MR bounds/access, shared memory, CQ, QP states."""

from __future__ import annotations

import random

import pytest

from traffic.verbs import (Access, Context, QPState, VerbsError, attach_shared_buffer,
                           create_shared_buffer, ib_timeout_s)
from traffic.workreq import WC, WR, WCOpcode, WCStatus, WROpcode


def _ctx(seed: int = 1) -> Context:
    return Context(random.Random(seed))


def test_keys_random_unique_and_seeded() -> None:
    c1, c2 = _ctx(5), _ctx(5)
    k1 = [(m.lkey, m.rkey) for m in (c1.alloc_pd().reg_mr(bytearray(64), Access.REMOTE_WRITE)
                                     for _ in range(50))]
    k2 = [(m.lkey, m.rkey) for m in (c2.alloc_pd().reg_mr(bytearray(64), Access.REMOTE_WRITE)
                                     for _ in range(50))]
    assert k1 == k2  # deterministic from the injected RNG
    flat = [k for pair in k1 for k in pair]
    assert len(set(flat)) == 100 and all(0 < k < 1 << 32 for k in flat)
    assert len({k & 0xFF for k in flat}) > 20  # not a counter


def test_local_only_mr_has_no_rkey() -> None:
    mr = _ctx().alloc_pd().reg_mr(bytearray(8), Access.LOCAL_WRITE)
    assert mr.rkey == 0 and mr.lkey != 0


@pytest.mark.parametrize("off, length, access, ok", [
    (0, 100, Access.REMOTE_WRITE, True),
    (0, 0, Access.REMOTE_WRITE, True),
    (99, 1, Access.REMOTE_WRITE, True),
    (99, 2, Access.REMOTE_WRITE, False),
    (-1, 1, Access.REMOTE_WRITE, False),
    (100, 0, Access.REMOTE_WRITE, True),
    (0, 1, Access.REMOTE_READ, False),
    (0, 1, Access.REMOTE_WRITE | Access.LOCAL_WRITE, True),
])
def test_mr_bounds_and_access(off: int, length: int, access: Access, ok: bool) -> None:
    mr = _ctx().alloc_pd().reg_mr(bytearray(100), Access.REMOTE_WRITE | Access.LOCAL_WRITE,
                                  addr=0x10000)
    assert mr.allows(0x10000 + off, length, access) is ok


def test_rkey_of_other_pd_is_invalid() -> None:
    ctx = _ctx()
    pd1, pd2 = ctx.alloc_pd(), ctx.alloc_pd()
    mr = pd1.reg_mr(bytearray(8), Access.REMOTE_WRITE)
    assert ctx.lookup_rkey(pd1, mr.rkey) is mr and ctx.lookup_rkey(pd2, mr.rkey) is None
    ctx.dereg_mr(mr)
    assert ctx.lookup_rkey(pd1, mr.rkey) is None


def test_mr_over_shared_memory_seen_by_other_process_view() -> None:
    shm = create_shared_buffer(4096)
    try:
        ctx = _ctx()
        mr = ctx.alloc_pd().reg_mr(shm.buf, Access.REMOTE_WRITE, shm_name=shm.name)
        other = attach_shared_buffer(mr.describe()["shm_name"])
        nic = _ctx(2)
        imported = nic.import_mr(nic.alloc_pd(), mr.describe(), other.buf)
        assert (imported.rkey, imported.addr, imported.length) == (mr.rkey, mr.addr, 4096)
        imported.view(mr.addr + 10, 3)[:] = b"abc"
        assert bytes(shm.buf[10:13]) == b"abc"
        nic.dereg_mr(imported)
        other.close()  # would raise BufferError if dereg_mr left a view exported
        ctx.dereg_mr(mr)
    finally:
        shm.close()
        shm.unlink()


def test_cq_bounded_poll_in_order() -> None:
    cq = _ctx().create_cq(3)
    for i in range(4):
        cq.push(WC(i, WCStatus.SUCCESS, WCOpcode.RDMA_WRITE))
    assert cq.overrun and len(cq) == 3
    assert [w.wr_id for w in cq.poll(2)] == [0, 1]
    assert [w.wr_id for w in cq.poll(5)] == [2] and cq.poll() == []


def test_cq_stamps_each_completion_with_its_push_time(monkeypatch) -> None:
    """The completion timestamp (ibv_wc_read_completion_ts): when the NIC pushed it, on
    the lab clock; a WC the CQ dropped (overrun) leaves no stamp behind."""
    import traffic.verbs as verbs
    now = iter([10.0, 10.5, 11.0])
    monkeypatch.setattr(verbs.time, "monotonic", lambda: next(now))
    cq = _ctx().create_cq(2)
    for i in range(3):
        cq.push(WC(i, WCStatus.SUCCESS, WCOpcode.RDMA_WRITE))
    assert [(w.wr_id, t) for w, t in cq.poll_stamped(1)] == [(0, 10.0)]
    cq.push(WC(3, WCStatus.SUCCESS, WCOpcode.RDMA_WRITE))
    assert [(w.wr_id, t) for w, t in cq.poll_stamped(5)] == [(1, 10.5), (3, 11.0)]


def _qp():  # type: ignore[no-untyped-def]
    ctx = _ctx()
    pd = ctx.alloc_pd()
    return pd.create_qp(ctx.create_cq(), max_send_wr=2)


STEPS = {
    "init": lambda q: q.modify_to_init(0x8012, Access.REMOTE_WRITE),
    "rtr": lambda q: q.modify_to_rtr(0x123456, 0xABC, 1024, "10.0.1.12"),
    "rts": lambda q: q.modify_to_rts(0xABC, 1e-3, 7),
}


@pytest.mark.parametrize("path, ok", [
    (["init", "rtr", "rts"], True),
    (["init", "init", "rtr", "rts", "rts"], True),
    (["rtr"], False), (["rts"], False), (["init", "rts"], False),
    (["init", "rtr", "init"], False), (["init", "rtr", "rtr"], False),
])
def test_qp_transitions(path: list[str], ok: bool) -> None:
    qp = _qp()
    if ok:
        for s in path:
            STEPS[s](qp)
        assert qp.state is QPState.RTS and qp.pkey == 0x8012 and qp.dest_qpn == 0x123456
        assert qp.path_mtu == 1024 and qp.sq_psn == 0xABC
    else:
        with pytest.raises(VerbsError, match="illegal"):
            for s in path:
                STEPS[s](qp)


def test_error_and_reset() -> None:
    qp = _qp()
    for s in ("init", "rtr", "rts"):
        STEPS[s](qp)
    qp.to_error()
    with pytest.raises(VerbsError, match="illegal"):
        STEPS["rts"](qp)
    qp.reset()
    STEPS["init"](qp)
    assert qp.state is QPState.INIT


@pytest.mark.parametrize("step, args, field", [
    ("modify_to_init", (0x10000,), "pkey"),
    ("modify_to_rtr", (1 << 24, 0), "dest_qpn"),
    ("modify_to_rtr", (5, 0, 1500), "path_mtu"),
])
def test_attribute_errors_name_field(step: str, args: tuple, field: str) -> None:
    qp = _qp()
    if step == "modify_to_rtr":
        STEPS["init"](qp)
    with pytest.raises(VerbsError, match=field):
        getattr(qp, step)(*args)


def test_post_send_rules() -> None:
    qp = _qp()
    wr = WR(1, WROpcode.WRITE, 0, 8, 1, 0, 2)
    with pytest.raises(VerbsError, match="RTS"):
        qp.post_send(wr)
    for s in ("init", "rtr", "rts"):
        STEPS[s](qp)
    with pytest.raises(VerbsError, match="imm"):
        qp.post_send(WR(1, WROpcode.WRITE_WITH_IMM, 0, 8, 1, 0, 2))
    qp.post_send(wr)
    qp.post_send(wr)
    with pytest.raises(VerbsError, match="max_send_wr"):
        qp.post_send(wr)


def test_ib_timeout() -> None:
    assert ib_timeout_s(0) == pytest.approx(4.096e-6)
    assert ib_timeout_s(14) == pytest.approx(0.0671, rel=1e-3)
    with pytest.raises(VerbsError, match="timeout"):
        ib_timeout_s(32)
