/* The RC transport's commonest frames in C: the responder's in-order RDMA WRITE and SEND
 * packets (WRITE MIDDLE the NIC's commonest received frame), the requester's next WRITE
 * packet and its in-order ACK.
 *
 * Mirrors traffic/rc/responder.py's Responder.on_packet (with _admit, _check_reth and
 * _place) for an RDMA WRITE packet that is taken as it comes: for this QP, in its
 * partition, at the expected PSN, not in write-only mode and not inside a SEND; a WRITE
 * MIDDLE / LAST / LAST with immediate inside a message whose WRITE FIRST was accepted, of
 * a size the message allows, or a WRITE FIRST / ONLY / ONLY with immediate with no
 * message open whose RETH length suits its opcode and whose R_Key, the QP's remote write
 * access and the whole message's bounds pass (the Python's own MR lookup_rkey / allows).
 * `in_order_write(responder, pkt)` does what the Python does for it (counters, payload
 * into the MR, the message state, MSN, the immediate's receive WC by the Python's own
 * `_recv_imm`, expected PSN, the AckReq / every-ack_every-th ACK by its `_ack`) and
 * returns the replies. `in_order_send(responder, pkt)` is the same for a SEND FIRST /
 * MIDDLE / LAST / ONLY (with immediate too) in sequence (Responder._on_send): a FIRST /
 * ONLY takes the oldest posted receive WR (QP.take_recv), the payload goes into its
 * buffer if it has room and local write access, the last packet completes RECV (WC by
 * the Python's own class, pushed on the receive CQ). For every other packet both return
 * NotImplemented having changed nothing, and the caller runs the Python
 * (traffic.rc.responder.FastResponder): NAKs, RNR NAKs (no receive posted), a SEND longer
 * than its buffer, duplicates, out of order, write-only spraying. The state stays the Python object's, so
 * the two never hold different copies. `next_write(requester, now)` is, in the same way,
 * traffic/rc/requester.py's Requester.next_packet (with _find and traffic/rc/segment.py's
 * segment_at) for a packet of an RDMA WRITE already in the PSN space, in RTS, the window
 * open and no RNR hold, and `on_ack(requester, pkt, now)` its on_response (with on_ack
 * and _ack_through) for an ACK of PSNs in flight (traffic.rc.requester.FastRequester).
 * tests/unit/test_fast_rc.py holds them equal on a fake wire with loss and reordering,
 * also under ASan + UBSan.
 *
 * IBA Vol. 1 ch.9.7 (expected PSN, 9.7.1 24-bit PSNs; an ACK acknowledges every PSN up
 * to its own), 9.7.5.1 (AETH syndrome, Tables 43-45), 9.4.3 (WRITE FIRST / MIDDLE / LAST
 * / ONLY sizes, RETH in FIRST and ONLY), 9.7.4.1.5 (R_Key and bounds: else a remote
 * access NAK, the Python's), 9.7.4.1.4 (a SEND longer than its receive buffer: the
 * Python's NAK), 9.7.5.2.8 (no receive: the Python's RNR NAK), 10.9.3 (P_Key match);
 * book ch.9 Figure 9-6 (R_Key check, placement, WRITE with immediate and SEND completing
 * a receive), ch.12 Figures 12-1..12-3. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>

#include <structmember.h>

#include "pyattr.h"
#include "slots.h"

enum {
    OP_SEND_FIRST = 0x00, OP_SEND_MIDDLE = 0x01, OP_SEND_LAST = 0x02, OP_SEND_LAST_IMM = 0x03,
    OP_SEND_ONLY = 0x04, OP_SEND_ONLY_IMM = 0x05, OP_WRITE_FIRST = 0x06, OP_WRITE_MIDDLE = 0x07, OP_WRITE_LAST = 0x08, OP_WRITE_LAST_IMM = 0x09,
    OP_WRITE_ONLY = 0x0A, OP_WRITE_ONLY_IMM = 0x0B, OP_ACK = 0x11, PSN_MASK = 0xFFFFFF,
    ACCESS_REMOTE_WRITE = 2 /* traffic.verbs.Access.REMOTE_WRITE */
};
#define RETH_OP(op) ((op) == OP_WRITE_FIRST || (op) == OP_WRITE_ONLY || (op) == OP_WRITE_ONLY_IMM)

static PyObject *RTR, *RTS, *ERROR; /* traffic.verbs.QPState */
static PyObject *REMOTE_WRITE, *LOCAL_WRITE, *SUCCESS; /* traffic.verbs.Access, .workreq.WCStatus */
static PyObject *WC, *WC_RECV; /* traffic.workreq.WC, WCOpcode.RECV */
static PyObject *s_rq, *s_lkey, *s_lookup_lkey, *s_take_recv, *s_wr_id, *s_recv_cq, *s_push;
static PyObject *s_dlen, *s_rkey, *s_va, *s_access, *s_pd, *s_ctx, *s_lookup_rkey, *s_allows,
    *s_rq_psn, *s_imm, *s_recv_imm;
static PyObject *s_qp, *s_cfg, *s_state, *s_dqpn, *s_qpn, *s_pkey, *s_opcode, *s_epsn,
    *s_psn, *s_write_only, *s_payload, *s_mtu, *s_path_mtu, *s_recv, *s_msg, *s_buf,
    *s_addr, *s_length, *s_counters, *s_packets, *s_bytes_placed, *s_nak_sent,
    *s_dup_acked, *s_msn, *s_since_ack, *s_ackreq, *s_ack_every, *s_ack;

static int incr(PyObject *o, PyObject *name, long long by)
{
    long long v;
    return get_ll(o, name, &v) < 0 ? -1 : set_ll(o, name, v + by);
}

/* 1 if getattr(o, name) is `v` (True, False, None, an enum member), 0 if not, -1 on error. */
static int attr_is(PyObject *o, PyObject *name, PyObject *v)
{
    PyObject *x = PyObject_GetAttr(o, name);
    int r = x == NULL ? -1 : x == v;
    Py_XDECREF(x);
    return r;
}

/* pkey_match of emucore.wire.ib */
static int pkey_match(long long a, long long b)
{
    return (a & 0x7FFF) == (b & 0x7FFF) && ((a | b) & 0x8000);
}

/* The checks of the fast case, reading only; 1: it is the case, 0: it is not, -1: error.
 * Fills the MR (NULL: nothing to place), the payload, its offset in the MR's buffer, its
 * size and the message it is in (Responder.on_packet's checks). */
typedef struct {
    PyObject *qp, *cfg, *msg, *mr, *payload, *wqe; /* wqe: a SEND's receive WR */
    long long op, epsn, size, va, left, total, off, got; /* got: bytes of the SEND so far */
    int start;                                       /* a SEND FIRST / ONLY: take a WR */
} Case;

/* WRITE FIRST / ONLY / ONLY with immediate with no message open and no SEND: its RETH's
 * length for the opcode and, before a byte is placed, the R_Key, the QP's remote write
 * access and the whole message's bounds (Responder._check_reth; IBA 9.4.3, 9.7.4.1.5);
 * 1, 0 or -1 as is_case. */
static int reth_case(PyObject *pkt, Case *c, long long mtu)
{
    PyObject *x = NULL, *va = NULL, *rkey = NULL, *pd = NULL, *ctx = NULL, *ok_o = NULL;
    long long access;
    int ok = -1;
    if (c->msg != Py_None || (x = PyObject_GetAttr(pkt, s_dlen)) == NULL)
        return c->msg != Py_None ? 0 : -1;
    if (x == Py_None) {
        ok = 0;
        goto out;
    }
    int over = 0; /* a 64-bit VA or a length beyond C's long long: the Python's to refuse */
    if ((c->total = PyLong_AsLongLongAndOverflow(x, &over)) == -1 && PyErr_Occurred())
        goto out;
    if (over || (c->op != OP_WRITE_FIRST ? c->size != c->total
                                         : (c->size != mtu || c->total <= c->size))) {
        ok = 0;
        goto out;
    }
    c->left = c->total;
    if (c->total == 0) { /* _check_reth's True: nothing to place */
        ok = 1;
        goto out;
    }
    if ((rkey = PyObject_GetAttr(pkt, s_rkey)) == NULL || (va = PyObject_GetAttr(pkt, s_va)) == NULL
        || get_ll(c->qp, s_access, &access) < 0)
        goto out;
    if (rkey == Py_None || va == Py_None || !(access & ACCESS_REMOTE_WRITE)) {
        ok = 0;
        goto out;
    }
    if ((c->va = PyLong_AsLongLongAndOverflow(va, &over)) == -1 && PyErr_Occurred())
        goto out;
    if (over || c->va < 0 || c->va > LLONG_MAX / 2 || c->total > LLONG_MAX / 4) {
        ok = 0;
        goto out;
    }
    if ((pd = PyObject_GetAttr(c->qp, s_pd)) == NULL || (ctx = PyObject_GetAttr(pd, s_ctx)) == NULL
        || (c->mr = PyObject_CallMethodObjArgs(ctx, s_lookup_rkey, pd, rkey, NULL)) == NULL)
        goto out;
    if (c->mr == Py_None) {
        ok = 0;
        goto out;
    }
    if ((ok_o = PyObject_CallMethodObjArgs(c->mr, s_allows, va, x, REMOTE_WRITE, NULL)) == NULL
        || (ok = PyObject_IsTrue(ok_o)) < 0)
        goto out;
out:
    Py_XDECREF(x);
    Py_XDECREF(va);
    Py_XDECREF(rkey);
    Py_XDECREF(pd);
    Py_XDECREF(ctx);
    Py_XDECREF(ok_o);
    return ok;
}

/* WRITE MIDDLE / LAST / LAST with immediate inside the message its WRITE FIRST opened:
 * the size the message allows (IBA 9.4.3); 1, 0 or -1 as is_case. */
static int msg_case(Case *c, long long mtu)
{
    if (!PyTuple_Check(c->msg) || PyTuple_GET_SIZE(c->msg) != 4)
        return 0;
    c->mr = Py_NewRef(PyTuple_GET_ITEM(c->msg, 0));
    c->va = PyLong_AsLongLong(PyTuple_GET_ITEM(c->msg, 1));
    c->left = PyLong_AsLongLong(PyTuple_GET_ITEM(c->msg, 2));
    c->total = PyLong_AsLongLong(PyTuple_GET_ITEM(c->msg, 3));
    if (PyErr_Occurred())
        return -1;
    return !(c->size > c->left
             || (c->op == OP_WRITE_MIDDLE ? (c->size != mtu || c->size == c->left)
                                          : c->size != c->left));
}

/* SEND FIRST / MIDDLE / LAST / ONLY (with immediate too) in sequence, no WRITE open: a
 * SEND FIRST / ONLY takes the oldest posted receive WR (peeked here: with none posted
 * the Python answers an RNR NAK), a later one goes on in the WR its FIRST took; the
 * size the opcode allows and the buffer's room and local write access (Responder._on_send;
 * IBA 9.4.3, 9.7.4.1.4; book ch.9 Figure 9-6). 1, 0 or -1 as is_case; c->va is where the
 * payload goes. */
static int send_case(PyObject *self, Case *c, long long mtu)
{
    PyObject *recv = NULL, *rq = NULL, *pd = NULL, *ctx = NULL, *lkey = NULL, *x = NULL;
    long long addr, length;
    int ok = -1;
    if (c->msg != Py_None)
        return 0;
    if ((recv = PyObject_GetAttr(self, s_recv)) == NULL)
        return -1;
    c->start = c->op == OP_SEND_FIRST || c->op == OP_SEND_ONLY || c->op == OP_SEND_ONLY_IMM;
    if (c->start != (recv == Py_None)) {
        ok = 0;
        goto out;
    }
    if (c->start) {
        if ((rq = PyObject_GetAttr(c->qp, s_rq)) == NULL)
            goto out;
        Py_ssize_t n = PyObject_Length(rq);
        if (n <= 0) {
            ok = n < 0 ? -1 : 0;
            goto out;
        }
        if ((c->wqe = PySequence_GetItem(rq, 0)) == NULL || get_ll(c->wqe, s_length, &length) < 0)
            goto out;
        if (length == 0) {
            c->mr = Py_NewRef(Py_None);
        } else if ((pd = PyObject_GetAttr(c->qp, s_pd)) == NULL
                   || (ctx = PyObject_GetAttr(pd, s_ctx)) == NULL
                   || (lkey = PyObject_GetAttr(c->wqe, s_lkey)) == NULL
                   || (c->mr = PyObject_CallMethodObjArgs(ctx, s_lookup_lkey, pd, lkey, NULL)) == NULL) {
            goto out;
        }
        c->got = 0;
    } else {
        if (!PyTuple_Check(recv) || PyTuple_GET_SIZE(recv) != 3) {
            ok = 0;
            goto out;
        }
        c->wqe = Py_NewRef(PyTuple_GET_ITEM(recv, 0));
        c->mr = Py_NewRef(PyTuple_GET_ITEM(recv, 1));
        if ((c->got = PyLong_AsLongLong(PyTuple_GET_ITEM(recv, 2))) == -1 && PyErr_Occurred())
            goto out;
        if (get_ll(c->wqe, s_length, &length) < 0)
            goto out;
    }
    if (get_ll(c->wqe, s_addr, &addr) < 0)
        goto out;
    if (((c->op == OP_SEND_FIRST || c->op == OP_SEND_MIDDLE) && c->size != mtu)
        || c->got + c->size > length) {
        ok = 0;
        goto out;
    }
    c->va = addr + c->got;
    if (c->size) {
        if (c->mr == Py_None) {
            ok = 0;
            goto out;
        }
        PyObject *va = PyLong_FromLongLong(c->va), *sz = PyLong_FromLongLong(c->size);
        x = va && sz ? PyObject_CallMethodObjArgs(c->mr, s_allows, va, sz, LOCAL_WRITE, NULL) : NULL;
        Py_XDECREF(va);
        Py_XDECREF(sz);
        if (x == NULL || (ok = PyObject_IsTrue(x)) < 0)
            goto out;
    } else {
        ok = 1;
    }
out:
    Py_XDECREF(recv);
    Py_XDECREF(rq);
    Py_XDECREF(pd);
    Py_XDECREF(ctx);
    Py_XDECREF(lkey);
    Py_XDECREF(x);
    return ok;
}

/* Responder.on_packet's checks for an in-order SEND (send) or RDMA WRITE packet. */
static int is_case(PyObject *self, PyObject *pkt, Case *c, int send)
{
    long long dqpn, qpn, pk, qpk, psn, mtu, mr_addr, mr_len;
    PyObject *st = NULL, *x = NULL;
    int ok = 0;
    if ((c->qp = PyObject_GetAttr(self, s_qp)) == NULL
        || (c->cfg = PyObject_GetAttr(self, s_cfg)) == NULL
        || (st = PyObject_GetAttr(c->qp, s_state)) == NULL)
        return -1;
    if (st != RTR && st != RTS)
        goto out;
    if (get_ll(pkt, s_dqpn, &dqpn) < 0 || get_ll(c->qp, s_qpn, &qpn) < 0)
        goto err;
    if (dqpn != qpn)
        goto out;
    if (get_ll(pkt, s_pkey, &pk) < 0 || get_ll(c->qp, s_pkey, &qpk) < 0)
        goto err;
    if (!pkey_match(pk, qpk))
        goto out;
    if (get_ll(pkt, s_opcode, &c->op) < 0)
        goto err;
    if (send ? c->op < OP_SEND_FIRST || c->op > OP_SEND_ONLY_IMM /* a SEND opcode */
             : c->op < OP_WRITE_FIRST || c->op > OP_WRITE_ONLY_IMM) /* an RDMA WRITE opcode */
        goto out;
    if ((x = PyObject_GetAttr(self, s_epsn)) == NULL)
        goto err;
    if (x == Py_None) { /* the QP's first packet: Responder._admit takes its rq_psn */
        Py_CLEAR(x);
        if ((x = PyObject_GetAttr(c->qp, s_rq_psn)) == NULL)
            goto err;
    }
    c->epsn = PyLong_AsLongLong(x);
    if ((c->epsn == -1 && PyErr_Occurred()) || get_ll(pkt, s_psn, &psn) < 0)
        goto err;
    if (((psn - c->epsn) & PSN_MASK) != 0)
        goto out;
    Py_CLEAR(x);
    if ((ok = attr_is(c->cfg, s_write_only, Py_False)) <= 0)
        goto out;
    ok = 0;
    if ((c->payload = PyObject_GetAttr(pkt, s_payload)) == NULL)
        goto err;
    if ((c->size = PyObject_Length(c->payload)) < 0)
        goto err;
    if ((x = PyObject_GetAttr(c->cfg, s_mtu)) == NULL)
        goto err;
    if (x == Py_None || (PyLong_Check(x) && PyLong_AsLongLong(x) == 0)) { /* cfg.mtu or qp.path_mtu */
        Py_CLEAR(x);
        if ((x = PyObject_GetAttr(c->qp, s_path_mtu)) == NULL)
            goto err;
    }
    mtu = PyLong_AsLongLong(x);
    if (mtu == -1 && PyErr_Occurred())
        goto err;
    Py_CLEAR(x);
    if (c->size > mtu)
        goto out;
    if ((c->msg = PyObject_GetAttr(self, s_msg)) == NULL)
        goto err;
    if (send)
        ok = send_case(self, c, mtu);
    else if ((ok = attr_is(self, s_recv, Py_None)) > 0) /* not inside a SEND */
        ok = RETH_OP(c->op) ? reth_case(pkt, c, mtu) : msg_case(c, mtu);
    if (ok <= 0 || c->size == 0)
        goto out;
    if (get_ll(c->mr, s_addr, &mr_addr) < 0 || get_ll(c->mr, s_length, &mr_len) < 0)
        goto err;
    /* MR.view's bounds (MR.contains): otherwise the Python raises VerbsError */
    if (!(mr_addr <= c->va && c->va + c->size <= mr_addr + mr_len && c->size >= 0)) {
        ok = 0;
        goto out;
    }
    c->off = c->va - mr_addr;
out:
    Py_XDECREF(st);
    Py_XDECREF(x);
    return ok;
err:
    ok = -1;
    goto out;
}

/* The payload into the MR's buffer at c->off (Responder._place). */
static int place(Case *c)
{
    Py_buffer dst, src;
    PyObject *buf;
    int rc = -1;
    if (c->size == 0)
        return 0;
    if ((buf = PyObject_GetAttr(c->mr, s_buf)) == NULL)
        return -1;
    if (PyObject_GetBuffer(buf, &dst, PyBUF_WRITABLE) == 0) {
        if (PyObject_GetBuffer(c->payload, &src, PyBUF_SIMPLE) == 0) {
            if (src.len == c->size && c->off + c->size <= dst.len) {
                memmove((char *)dst.buf + c->off, src.buf, (size_t)c->size);
                rc = 0;
            } else {
                PyErr_SetString(PyExc_ValueError, "in_order_write: payload and MR disagree");
            }
            PyBuffer_Release(&src);
        }
        PyBuffer_Release(&dst);
    }
    Py_DECREF(buf);
    return rc;
}

/* The SEND's part of Responder._on_send after placing: the receive WR taken (its FIRST /
 * ONLY), the bytes in it, and at its end the RECV completion and the MSN. */
static int send_act(PyObject *self, PyObject *pkt, Case *c)
{
    PyObject *x = NULL, *wc = NULL, *cq = NULL, *r = NULL;
    long long msn, got = c->got + c->size;
    int rc = -1;
    if (c->start) { /* QP.take_recv: the WR send_case peeked */
        if ((x = PyObject_CallMethodNoArgs(c->qp, s_take_recv)) == NULL)
            return -1;
        if (x != c->wqe) {
            PyErr_SetString(PyExc_RuntimeError, "in_order_send: the receive queue changed");
            goto out;
        }
        Py_CLEAR(x);
    }
    if (c->op == OP_SEND_FIRST || c->op == OP_SEND_MIDDLE) {
        x = Py_BuildValue("(OOL)", c->wqe, c->mr, got);
        rc = x == NULL ? -1 : PyObject_SetAttr(self, s_recv, x);
        goto out;
    }
    PyObject *imm = c->op == OP_SEND_LAST_IMM || c->op == OP_SEND_ONLY_IMM
                        ? PyObject_GetAttr(pkt, s_imm) : Py_NewRef(Py_None);
    PyObject *wr_id = PyObject_GetAttr(c->wqe, s_wr_id), *qpn = PyObject_GetAttr(c->qp, s_qpn),
             *n = PyLong_FromLongLong(got);
    if (imm && wr_id && qpn && n) {
        PyObject *a[6] = {wr_id, SUCCESS, WC_RECV, n, qpn, imm};
        wc = PyObject_Vectorcall(WC, a, 6, NULL);
    }
    Py_XDECREF(imm);
    Py_XDECREF(wr_id);
    Py_XDECREF(qpn);
    Py_XDECREF(n);
    if (wc == NULL || PyObject_SetAttr(self, s_recv, Py_None) < 0
        || (cq = PyObject_GetAttr(c->qp, s_recv_cq)) == NULL
        || (r = PyObject_CallMethodOneArg(cq, s_push, wc)) == NULL || get_ll(self, s_msn, &msn) < 0
        || set_ll(self, s_msn, (msn + 1) & PSN_MASK) < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(x);
    Py_XDECREF(wc);
    Py_XDECREF(cq);
    Py_XDECREF(r);
    return rc;
}

static PyObject *act(PyObject *self, PyObject *pkt, Case *c)
{
    PyObject *counters = PyObject_GetAttr(self, s_counters), *x = NULL, *res = NULL;
    long long since, every, msn;
    int ackreq;
    if (counters == NULL || incr(counters, s_packets, 1) < 0
        || PyObject_SetAttr(self, s_nak_sent, Py_False) < 0
        || PyObject_SetAttr(self, s_dup_acked, Py_False) < 0 || place(c) < 0
        || (c->size && incr(counters, s_bytes_placed, c->size) < 0))
        goto out;
    if (c->wqe != NULL) { /* a SEND */
        if (send_act(self, pkt, c) < 0)
            goto out;
    } else if (c->op == OP_WRITE_FIRST || c->op == OP_WRITE_MIDDLE) { /* the message goes on */
        x = Py_BuildValue("(OLLL)", c->mr, c->va + c->size, c->left - c->size, c->total);
        if (x == NULL || PyObject_SetAttr(self, s_msg, x) < 0)
            goto out;
    } else { /* it ends here: END_OPS */
        if (PyObject_SetAttr(self, s_msg, Py_None) < 0 || get_ll(self, s_msn, &msn) < 0
            || set_ll(self, s_msn, (msn + 1) & PSN_MASK) < 0)
            goto out;
        if (c->op == OP_WRITE_LAST_IMM || c->op == OP_WRITE_ONLY_IMM) { /* Responder._recv_imm */
            PyObject *imm = PyObject_GetAttr(pkt, s_imm), *t = PyLong_FromLongLong(c->total), *r;
            r = imm && t ? PyObject_CallMethodObjArgs(self, s_recv_imm, imm, t, NULL) : NULL;
            Py_XDECREF(imm);
            Py_XDECREF(t);
            if (r == NULL)
                goto out;
            Py_DECREF(r);
        }
    }
    if (set_ll(self, s_epsn, (c->epsn + 1) & PSN_MASK) < 0 || get_ll(self, s_since_ack, &since) < 0
        || set_ll(self, s_since_ack, since + 1) < 0 || get_ll(c->cfg, s_ack_every, &every) < 0)
        goto out;
    Py_CLEAR(x);
    if ((x = PyObject_GetAttr(pkt, s_ackreq)) == NULL || (ackreq = PyObject_IsTrue(x)) < 0)
        goto out;
    if (ackreq || (every && since + 1 >= every))
        res = PyObject_CallMethodOneArg(self, s_ack, pkt);
    else
        res = PyList_New(0);
out:
    Py_XDECREF(counters);
    Py_XDECREF(x);
    return res;
}

/* in_order_write / in_order_send (responder, pkt): the replies, or NotImplemented
 * (nothing changed). */
static PyObject *in_order(PyObject *const *args, Py_ssize_t nargs, int send)
{
    Case c = {0};
    PyObject *res = NULL;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "in_order_write / in_order_send(responder, pkt) "
                                         "takes 2 arguments");
        return NULL;
    }
    int k = is_case(args[0], args[1], &c, send);
    if (k > 0)
        res = act(args[0], args[1], &c);
    else if (k == 0)
        res = Py_NewRef(Py_NotImplemented);
    Py_XDECREF(c.qp);
    Py_XDECREF(c.cfg);
    Py_XDECREF(c.msg);
    Py_XDECREF(c.mr);
    Py_XDECREF(c.payload);
    Py_XDECREF(c.wqe);
    return res;
}

static PyObject *in_order_write(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    return in_order(args, nargs, 0);
}

static PyObject *in_order_send(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    return in_order(args, nargs, 1);
}


/* ---- the requester's next_packet ---------------------------------------------------- */

static PyObject *IMM_WR_OPS, *SEND_WR_OPS, *RocePkt, *OpEnum, *op_obj[256];
static PyObject *s_started, *s_rnr_hold, *s_nxt, *s_una, *s_window, *s_tail, *s_msgs,
    *s_first_psn, *s_npkts, *s_wr, *s_mr, *s_opcode_wr, *s_view, *s_local_addr,
    *s_remote_addr, *s_dest_qpn, *s_ackreq_every, *s_sq_psn, *s_bytes,
    *s_retransmitted, *s_max_sent, *s_deadline, *s_timeout_s, *s_local_addr_wr,
    *s_remote_addr_wr;

static long long psn_diff(long long a, long long b) /* emucore.wire.ib.psn_diff */
{
    return ((a - b + 0x800000) & PSN_MASK) - 0x800000;
}

/* The retransmission timer from now: requester.deadline = now + qp.timeout_s. */
static int arm(PyObject *self, PyObject *qp, PyObject *now)
{
    PyObject *t = PyObject_GetAttr(qp, s_timeout_s), *d = t ? PyNumber_Add(now, t) : NULL;
    int rc = d == NULL ? -1 : PyObject_SetAttr(self, s_deadline, d);
    Py_XDECREF(t);
    Py_XDECREF(d);
    return rc;
}

/* traffic.workreq.WROpcode, its members in IMM_WR_OPS / SEND_WR_OPS, and traffic.verbs.MR
 * with its own view / contains (module init). */
static PyObject *WROPCODE, *MR_TYPE, *MR_VIEW, *MR_CONTAINS, *s_contains;
static PyObject *imm_ops[8], *send_ops[8];
static int n_imm_ops = -1, n_send_ops = -1; /* -1: always PySet_Contains */

/* `wop in ops` as the Python's set membership: 1, 0, -1 an error. A WROpcode member (an
 * Enum with object's identity equality, so a member equals only itself) is looked up by
 * identity among the set's members, which skips Enum.__hash__'s Python call; anything
 * else goes to PySet_Contains. */
static int op_in(PyObject *ops, PyObject *const *members, int n, PyObject *wop)
{
    if (n < 0 || Py_TYPE(wop) != (PyTypeObject *)WROPCODE)
        return PySet_Contains(ops, wop);
    for (int k = 0; k < n; k++)
        if (members[k] == wop)
            return 1;
    return 0;
}

/* The members of frozenset `ops` into `out` (at most 8), or -1 when one is not a WROpcode
 * or WROpcode compares otherwise than by identity (then op_in asks the set). */
static int op_members(PyObject *ops, PyObject **out)
{
    Py_ssize_t pos = 0;
    PyObject *key;
    Py_hash_t h;
    int n = 0;
    if (((PyTypeObject *)WROPCODE)->tp_richcompare != PyBaseObject_Type.tp_richcompare)
        return -1;
    while (_PySet_NextEntry(ops, &pos, &key, &h)) {
        if (n == 8 || Py_TYPE(key) != (PyTypeObject *)WROPCODE)
            return -1;
        out[n++] = key; /* borrowed: the set is held for the module's life */
    }
    return n;
}

/* mr.view(va, size) (traffic.verbs.MR.view: the bounds of MR.contains, then
 * self.buf[off:off + length]). For an instance of MR itself (a slotted dataclass: no
 * instance attribute can shadow a method; module init checks it has no __dict__) while
 * the class's view and contains are the ones it had at import, in C when the bounds hold;
 * otherwise (out of bounds: the Python raises VerbsError; a subclass) the Python method.
 * A new reference, NULL on an error. */
static PyObject *mr_view(PyObject *mr, long long va, long long size)
{
    PyTypeObject *t = Py_TYPE(mr);
    if (t == (PyTypeObject *)MR_TYPE && _PyType_Lookup(t, s_view) == MR_VIEW
        && _PyType_Lookup(t, s_contains) == MR_CONTAINS) {
        long long addr, length, end, mend;
        if (get_ll(mr, s_addr, &addr) < 0 || get_ll(mr, s_length, &length) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return NULL;
            PyErr_Clear(); /* beyond a long long: the Python's arbitrary integers */
        } else if (!__builtin_add_overflow(va, size, &end) && !__builtin_add_overflow(addr, length, &mend)
                   && addr <= va && end <= mend && size >= 0) {
            PyObject *buf = PyObject_GetAttr(mr, s_buf);
            if (buf == NULL)
                return NULL;
            PyObject *r = PySequence_GetSlice(buf, (Py_ssize_t)(va - addr), (Py_ssize_t)(va - addr + size));
            Py_DECREF(buf);
            return r;
        }
    }
    PyObject *v = PyLong_FromLongLong(va), *n = PyLong_FromLongLong(size), *r = NULL;
    if (v != NULL && n != NULL)
        r = PyObject_CallMethodObjArgs(mr, s_view, v, n, NULL);
    Py_XDECREF(v);
    Py_XDECREF(n);
    return r;
}

/* emucore.wire.ib.RocePkt's fields (slots.h's ROCE_PKT_FIELDS, checked against its
 * __dataclass_fields__ at import) and their __slots__ offsets: next_write fills a new
 * RocePkt's slots as its dataclass __init__ stores them (as traffic/fast/nicrx.c's pkt_of). */
static const char *const PKT_NAMES[N_ROCE_PKT] = {ROCE_PKT_FIELDS};
static Py_ssize_t PKT_OFF[N_ROCE_PKT];

static PyObject *op_of(int code) /* the Op member of a BTH opcode */
{
    if (op_obj[code] == NULL)
        op_obj[code] = PyObject_CallFunction(OpEnum, "i", code);
    return op_obj[code];
}

/* Requester.next_packet(now) for a packet of a message already in the PSN space, of an
 * RDMA WRITE (with or without immediate) in RTS with the window open; NotImplemented,
 * nothing changed, otherwise (the Python then decides: None, _pull, SEND, RNR hold). */
static PyObject *next_write(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *self, *now, *qp = NULL, *cfg = NULL, *x = NULL, *msgs = NULL, *m = NULL,
             *wr = NULL, *wop = NULL, *payload = NULL, *pkt = NULL, *res = NULL, *c = NULL;
    long long nxt, una, window, tail, first, npkts, length, mtu, i, every, sq_psn, max_sent;
    int wo, imm, send;
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "next_write(requester, now) takes 2 arguments");
        return NULL;
    }
    self = args[0];
    now = args[1];
    if ((qp = PyObject_GetAttr(self, s_qp)) == NULL || (cfg = PyObject_GetAttr(self, s_cfg)) == NULL)
        goto out;
    if (attr_is(qp, s_state, RTS) <= 0 || attr_is(self, s_started, Py_True) <= 0
        || attr_is(self, s_rnr_hold, Py_False) <= 0)
        goto no_or_err;
    if (get_ll(self, s_nxt, &nxt) < 0 || get_ll(self, s_una, &una) < 0
        || get_ll(cfg, s_window, &window) < 0 || get_ll(self, s_tail, &tail) < 0)
        goto out;
    if (psn_diff(nxt, una) >= window || nxt == tail)
        goto no;
    if ((msgs = PyObject_GetAttr(self, s_msgs)) == NULL)
        goto out;
    if (!PyList_Check(msgs))
        goto no;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(msgs); k++) { /* Requester._find */
        PyObject *mk = PyList_GET_ITEM(msgs, k);
        if (get_ll(mk, s_first_psn, &first) < 0 || get_ll(mk, s_npkts, &npkts) < 0)
            goto out;
        long long d = psn_diff(nxt, first);
        if (0 <= d && d < npkts) {
            m = Py_NewRef(mk);
            break;
        }
    }
    if (m == NULL)
        goto no;
    if ((wr = PyObject_GetAttr(m, s_wr)) == NULL || (wop = PyObject_GetAttr(wr, s_opcode)) == NULL
        || (imm = op_in(IMM_WR_OPS, imm_ops, n_imm_ops, wop)) < 0
        || (send = op_in(SEND_WR_OPS, send_ops, n_send_ops, wop)) < 0)
        goto out;
    if (send)
        goto no;
    if (get_ll(wr, s_length, &length) < 0 || (x = PyObject_GetAttr(cfg, s_mtu)) == NULL)
        goto out;
    if (x == Py_None || (PyLong_Check(x) && PyLong_AsLongLong(x) == 0)) { /* Requester.mtu */
        Py_CLEAR(x);
        if ((x = PyObject_GetAttr(qp, s_path_mtu)) == NULL)
            goto out;
    }
    mtu = PyLong_AsLongLong(x);
    Py_CLEAR(x);
    if ((mtu == -1 && PyErr_Occurred()) || (x = PyObject_GetAttr(cfg, s_write_only)) == NULL
        || (wo = PyObject_IsTrue(x)) < 0)
        goto out;
    Py_CLEAR(x);
    if (mtu <= 0)
        goto no;
    /* traffic.rc.segment.segment_at */
    i = psn_diff(nxt, first);
    long long n = length <= 0 ? 1 : (length + mtu - 1) / mtu, off = i * mtu;
    long long size = mtu < length - off ? mtu : length - off;
    int last = i == n - 1, op;
    if (n == 1 || wo)
        op = imm && last ? 0x0B : 0x0A;  /* WRITE_ONLY_IMM, WRITE_ONLY */
    else if (i == 0)
        op = 0x06;                       /* WRITE_FIRST */
    else if (last)
        op = imm ? 0x09 : 0x08;          /* WRITE_LAST_IMM, WRITE_LAST */
    else
        op = 0x07;                       /* WRITE_MIDDLE */
    int reth = op == 0x06 || op == 0x0A || op == 0x0B, has_imm = op == 0x09 || op == 0x0B;
    if (size) {
        PyObject *mr = PyObject_GetAttr(m, s_mr);
        long long la;
        if (mr == NULL || get_ll(wr, s_local_addr_wr, &la) < 0) {
            Py_XDECREF(mr);
            goto out;
        }
        payload = mr_view(mr, la + off, size);
        Py_DECREF(mr);
        if (payload == NULL)
            goto out;
    } else {
        payload = PyBytes_FromStringAndSize(NULL, 0);
    }
    PyObject *va = Py_None, *rkey = Py_None, *dlen = Py_None, *immv = Py_None, *o;
    PyObject *dqpn = NULL, *pkey = NULL, *src = NULL, *dst = NULL, *psn = NULL;
    if (reth) {
        long long ra;
        if (get_ll(wr, s_remote_addr_wr, &ra) < 0 || (rkey = PyObject_GetAttr(wr, s_rkey)) == NULL)
            goto out;
        va = PyLong_FromLongLong(ra + (wo ? off : 0));
        dlen = PyLong_FromLongLong(wo ? size : length);
    } else {
        Py_INCREF(va);
        Py_INCREF(rkey);
        Py_INCREF(dlen);
    }
    if (has_imm)
        immv = PyObject_GetAttr(wr, s_imm);
    else
        Py_INCREF(immv);
    /* AckReq: the message's last packet, every ackreq_every-th PSN, the window's last */
    int ackreq = 0;
    if (get_ll(cfg, s_ackreq_every, &every) < 0 || get_ll(qp, s_sq_psn, &sq_psn) < 0)
        goto pkt_out;
    if (i == npkts - 1)
        ackreq = 1;
    else if (every > 0 && ((psn_diff(nxt, sq_psn) % every) + every) % every == every - 1)
        ackreq = 1;
    else if (psn_diff(nxt, una) == window - 1)
        ackreq = 1;
    o = op_of(op);
    dqpn = PyObject_GetAttr(qp, s_dest_qpn);
    pkey = PyObject_GetAttr(qp, s_pkey);
    src = PyObject_GetAttr(qp, s_local_addr);
    dst = PyObject_GetAttr(qp, s_remote_addr);
    psn = PyLong_FromLongLong(nxt);
    if (o == NULL || va == NULL || dlen == NULL || immv == NULL || dqpn == NULL || pkey == NULL
        || src == NULL || dst == NULL || psn == NULL)
        goto pkt_out;
    {
        PyObject *a[N_ROCE_PKT] = {o, dqpn, psn, ackreq ? Py_True : Py_False, Py_False, Py_False,
                                   pkey, va, rkey, dlen, Py_None, Py_None, immv, payload, src, dst};
        pkt = slots_new((PyTypeObject *)RocePkt, a, PKT_OFF, N_ROCE_PKT);
    }
pkt_out:
    Py_XDECREF(va);
    Py_XDECREF(rkey);
    Py_XDECREF(dlen);
    Py_XDECREF(immv);
    Py_XDECREF(dqpn);
    Py_XDECREF(pkey);
    Py_XDECREF(src);
    Py_XDECREF(dst);
    Py_XDECREF(psn);
    if (pkt == NULL)
        goto out;
    /* counters, max_sent, the timer, nxt */
    if ((c = PyObject_GetAttr(self, s_counters)) == NULL || incr(c, s_packets, 1) < 0
        || incr(c, s_bytes, size) < 0 || get_ll(self, s_max_sent, &max_sent) < 0)
        goto out;
    if (psn_diff(nxt, max_sent) < 0) {
        if (incr(c, s_retransmitted, 1) < 0)
            goto out;
    } else if (set_ll(self, s_max_sent, (nxt + 1) & PSN_MASK) < 0) {
        goto out;
    }
    if ((x = PyObject_GetAttr(self, s_deadline)) == NULL)
        goto out;
    if (x == Py_None) {
        if (arm(self, qp, now) < 0)
            goto out;
    }
    if (set_ll(self, s_nxt, (nxt + 1) & PSN_MASK) < 0)
        goto out;
    res = Py_NewRef(pkt);
    goto out;
no_or_err:
    if (PyErr_Occurred())
        goto out;
no:
    res = Py_NewRef(Py_NotImplemented);
out:
    Py_XDECREF(qp);
    Py_XDECREF(cfg);
    Py_XDECREF(x);
    Py_XDECREF(msgs);
    Py_XDECREF(m);
    Py_XDECREF(wr);
    Py_XDECREF(wop);
    Py_XDECREF(payload);
    Py_XDECREF(pkt);
    Py_XDECREF(c);
    return res;
}

/* ---- the requester's in-order ACK --------------------------------------------------- */

static PyObject *s_syndrome, *s_acks, *s_retries_left, *s_retry_cnt, *s_rnr_left,
    *s_rnr_retry, *s_signaled, *s_complete;

/* Requester.on_response(pkt, now) for an ACK (AETH syndrome kind 00, IBA 9.7.5.1, Tables
 * 43-44) to this QP that acknowledges PSNs sent and not yet acknowledged (Requester.on_ack,
 * _ack_through: una past the PSN, nxt not behind it, the retry counters reset, the WRs
 * whose last PSN is acknowledged completed in order by the Python's own _complete, the
 * timer stopped or restarted; IBA ch.9.7); None. For anything else (a NAK, an
 * RNR NAK, a stale or duplicate ACK, an ACK before the first packet or in ERROR, another
 * QP's) NotImplemented, nothing changed: the Python decides (FastRequester). */
static PyObject *on_ack(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *self, *pkt, *now, *qp = NULL, *x = NULL, *c = NULL, *m = NULL, *res = NULL;
    long long op, dqpn, qpn, syn, psn, una, max_sent, nxt, first, npkts;
    (void)mod;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "on_ack(requester, pkt, now) takes 3 arguments");
        return NULL;
    }
    self = args[0];
    pkt = args[1];
    now = args[2];
    if (get_ll(pkt, s_opcode, &op) < 0 || (qp = PyObject_GetAttr(self, s_qp)) == NULL)
        goto out;
    if (op != OP_ACK)
        goto no;
    if (get_ll(pkt, s_dqpn, &dqpn) < 0 || get_ll(qp, s_qpn, &qpn) < 0)
        goto out;
    if (dqpn != qpn || (x = PyObject_GetAttr(pkt, s_syndrome)) == NULL)
        goto no_or_err;
    if (x == Py_None)
        goto no;
    int over = 0;
    if ((syn = PyLong_AsLongLongAndOverflow(x, &over)) == -1 && PyErr_Occurred())
        goto out;
    if (over || syn < 0 || syn > 0xFF || (syn >> 5 & 3) != 0) /* decode_syndrome: not an ACK */
        goto no;
    Py_CLEAR(x);
    if (attr_is(self, s_started, Py_True) <= 0 || attr_is(qp, s_state, ERROR) != 0)
        goto no_or_err;
    if (get_ll(pkt, s_psn, &psn) < 0 || get_ll(self, s_una, &una) < 0
        || get_ll(self, s_max_sent, &max_sent) < 0 || get_ll(self, s_nxt, &nxt) < 0)
        goto out;
    if (!(0 <= psn_diff(psn, una) && psn_diff(psn, una) < psn_diff(max_sent, una)))
        goto no; /* stale (already acked) or for a PSN never sent */
    /* Requester.on_ack, _ack_through */
    if ((c = PyObject_GetAttr(self, s_counters)) == NULL || incr(c, s_acks, 1) < 0)
        goto out;
    una = (psn + 1) & PSN_MASK;
    if (set_ll(self, s_una, una) < 0 || (psn_diff(nxt, una) < 0 && set_ll(self, s_nxt, una) < 0))
        goto out;
    Py_CLEAR(x);
    if ((x = PyObject_GetAttr(qp, s_retry_cnt)) == NULL || PyObject_SetAttr(self, s_retries_left, x) < 0)
        goto out;
    Py_CLEAR(x);
    if ((x = PyObject_GetAttr(qp, s_rnr_retry)) == NULL || PyObject_SetAttr(self, s_rnr_left, x) < 0)
        goto out;
    for (;;) { /* the WRs whose last PSN is acknowledged, in order */
        Py_CLEAR(x);
        if ((x = PyObject_GetAttr(self, s_msgs)) == NULL)
            goto out;
        if (!PyList_Check(x)) {
            PyErr_SetString(PyExc_TypeError, "on_ack: Requester._msgs is not a list");
            goto out;
        }
        if (PyList_GET_SIZE(x) == 0)
            break;
        m = Py_NewRef(PyList_GET_ITEM(x, 0));
        if (get_ll(m, s_first_psn, &first) < 0 || get_ll(m, s_npkts, &npkts) < 0)
            goto out;
        if (psn_diff((first + npkts - 1) & PSN_MASK, una) >= 0)
            break;
        if (PyList_SetSlice(x, 0, 1, NULL) < 0)
            goto out;
        PyObject *wr = PyObject_GetAttr(m, s_wr), *sig = wr ? PyObject_GetAttr(wr, s_signaled) : NULL;
        int on = sig == NULL ? -1 : PyObject_IsTrue(sig);
        Py_XDECREF(wr);
        Py_XDECREF(sig);
        if (on < 0)
            goto out;
        if (on) {
            PyObject *r = PyObject_CallMethodObjArgs(self, s_complete, m, SUCCESS, now, NULL);
            if (r == NULL)
                goto out;
            Py_DECREF(r);
        }
        Py_CLEAR(m);
    }
    Py_CLEAR(x);
    if (una == max_sent ? PyObject_SetAttr(self, s_deadline, Py_None) < 0 : arm(self, qp, now) < 0)
        goto out; /* the timer stopped: all acknowledged; else restarted */
    res = Py_NewRef(Py_None);
    goto out;
no_or_err:
    if (PyErr_Occurred())
        goto out;
no:
    res = Py_NewRef(Py_NotImplemented);
out:
    Py_XDECREF(qp);
    Py_XDECREF(x);
    Py_XDECREF(c);
    Py_XDECREF(m);
    return res;
}

static PyMethodDef methods[] = {
    {"on_ack", (PyCFunction)(void (*)(void))on_ack, METH_FASTCALL,
     "Requester.on_response for an ACK of new PSNs, else NotImplemented."},
    {"next_write", (PyCFunction)(void (*)(void))next_write, METH_FASTCALL,
     "Requester.next_packet for a WRITE packet already in the PSN space, else NotImplemented."},
    {"in_order_write", (PyCFunction)(void (*)(void))in_order_write, METH_FASTCALL,
     "Responder.on_packet for an in-order RDMA WRITE packet, else NotImplemented."},
    {"in_order_send", (PyCFunction)(void (*)(void))in_order_send, METH_FASTCALL,
     "Responder.on_packet for an in-order SEND packet, else NotImplemented."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_rc",
                                    "The RC responder's in-order WRITE in C (traffic.fast.rc).",
                                    -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(v, s) ((v = PyUnicode_InternFromString(s)) == NULL)

PyMODINIT_FUNC PyInit__rc(void)
{
    PyObject *verbs = PyImport_ImportModule("traffic.verbs"), *st = NULL, *m = NULL;
    if (verbs == NULL || (st = PyObject_GetAttrString(verbs, "QPState")) == NULL
        || (RTR = PyObject_GetAttrString(st, "RTR")) == NULL
        || (RTS = PyObject_GetAttrString(st, "RTS")) == NULL
        || (ERROR = PyObject_GetAttrString(st, "ERROR")) == NULL)
        goto out;
    PyObject *acc = PyObject_GetAttrString(verbs, "Access");
    REMOTE_WRITE = acc ? PyObject_GetAttrString(acc, "REMOTE_WRITE") : NULL;
    LOCAL_WRITE = acc ? PyObject_GetAttrString(acc, "LOCAL_WRITE") : NULL;
    Py_XDECREF(acc);
    if (REMOTE_WRITE == NULL || LOCAL_WRITE == NULL
        || PyLong_AsLong(REMOTE_WRITE) != ACCESS_REMOTE_WRITE)
        goto out;
    if (INTERN(s_rq, "rq") || INTERN(s_lkey, "lkey") || INTERN(s_lookup_lkey, "lookup_lkey")
        || INTERN(s_take_recv, "take_recv") || INTERN(s_wr_id, "wr_id")
        || INTERN(s_recv_cq, "recv_cq") || INTERN(s_push, "push"))
        goto out;
    if (INTERN(s_dlen, "dlen") || INTERN(s_rkey, "rkey") || INTERN(s_va, "va")
        || INTERN(s_access, "access") || INTERN(s_pd, "pd") || INTERN(s_ctx, "ctx")
        || INTERN(s_lookup_rkey, "lookup_rkey") || INTERN(s_allows, "allows")
        || INTERN(s_rq_psn, "rq_psn") || INTERN(s_imm, "imm") || INTERN(s_recv_imm, "_recv_imm")
        || INTERN(s_syndrome, "syndrome") || INTERN(s_acks, "acks")
        || INTERN(s_retries_left, "retries_left") || INTERN(s_retry_cnt, "retry_cnt")
        || INTERN(s_rnr_left, "rnr_left") || INTERN(s_rnr_retry, "rnr_retry")
        || INTERN(s_signaled, "signaled") || INTERN(s_complete, "_complete"))
        goto out;
    if (INTERN(s_qp, "qp") || INTERN(s_cfg, "cfg") || INTERN(s_state, "state")
        || INTERN(s_dqpn, "dqpn") || INTERN(s_qpn, "qpn") || INTERN(s_pkey, "pkey")
        || INTERN(s_opcode, "opcode") || INTERN(s_epsn, "epsn") || INTERN(s_psn, "psn")
        || INTERN(s_write_only, "write_only") || INTERN(s_payload, "payload")
        || INTERN(s_mtu, "mtu") || INTERN(s_path_mtu, "path_mtu") || INTERN(s_recv, "_recv")
        || INTERN(s_msg, "_msg") || INTERN(s_buf, "buf") || INTERN(s_addr, "addr")
        || INTERN(s_length, "length") || INTERN(s_counters, "counters")
        || INTERN(s_packets, "packets") || INTERN(s_bytes_placed, "bytes_placed")
        || INTERN(s_nak_sent, "_nak_sent") || INTERN(s_dup_acked, "_dup_acked")
        || INTERN(s_msn, "msn") || INTERN(s_since_ack, "_since_ack")
        || INTERN(s_ackreq, "ackreq") || INTERN(s_ack_every, "ack_every")
        || INTERN(s_ack, "_ack"))
        goto out;
    if (INTERN(s_started, "_started") || INTERN(s_rnr_hold, "rnr_hold") || INTERN(s_nxt, "nxt")
        || INTERN(s_una, "una") || INTERN(s_window, "window") || INTERN(s_tail, "tail")
        || INTERN(s_msgs, "_msgs") || INTERN(s_first_psn, "first_psn")
        || INTERN(s_npkts, "npkts") || INTERN(s_wr, "wr") || INTERN(s_mr, "mr")
        || INTERN(s_opcode_wr, "opcode") || INTERN(s_view, "view")
        || INTERN(s_local_addr, "local_addr") || INTERN(s_remote_addr, "remote_addr")
        || INTERN(s_dest_qpn, "dest_qpn")
        || INTERN(s_ackreq_every, "ackreq_every") || INTERN(s_sq_psn, "sq_psn")
        || INTERN(s_bytes, "bytes") || INTERN(s_retransmitted, "retransmitted")
        || INTERN(s_max_sent, "max_sent") || INTERN(s_deadline, "deadline")
        || INTERN(s_timeout_s, "timeout_s") || INTERN(s_local_addr_wr, "local_addr")
        || INTERN(s_remote_addr_wr, "remote_addr"))
        goto out;
    PyObject *wq = PyImport_ImportModule("traffic.workreq"), *ib = PyImport_ImportModule(
                                                                 "emucore.wire.ib");
    if (wq != NULL && ib != NULL) {
        IMM_WR_OPS = PyObject_GetAttrString(wq, "IMM_WR_OPS");
        SEND_WR_OPS = PyObject_GetAttrString(wq, "SEND_WR_OPS");
        RocePkt = PyObject_GetAttrString(ib, "RocePkt");
        OpEnum = PyObject_GetAttrString(ib, "Op");
        PyObject *st2 = PyObject_GetAttrString(wq, "WCStatus"),
                 *wop = PyObject_GetAttrString(wq, "WCOpcode");
        SUCCESS = st2 ? PyObject_GetAttrString(st2, "SUCCESS") : NULL;
        WC_RECV = wop ? PyObject_GetAttrString(wop, "RECV") : NULL;
        WC = PyObject_GetAttrString(wq, "WC");
        Py_XDECREF(st2);
        Py_XDECREF(wop);
    }
    Py_XDECREF(wq);
    Py_XDECREF(ib);
    if (IMM_WR_OPS == NULL || SEND_WR_OPS == NULL || RocePkt == NULL || OpEnum == NULL
        || SUCCESS == NULL || WC_RECV == NULL || WC == NULL
        || slot_offsets(RocePkt, PKT_NAMES, N_ROCE_PKT, PKT_OFF, "_rc") < 0
        || dataclass_order(RocePkt, PKT_NAMES, N_ROCE_PKT, "_rc") < 0)
        goto out;
    PyObject *wq2 = PyImport_ImportModule("traffic.workreq");
    WROPCODE = wq2 ? PyObject_GetAttrString(wq2, "WROpcode") : NULL;
    Py_XDECREF(wq2);
    if (WROPCODE == NULL || !PyType_Check(WROPCODE) || !PyFrozenSet_Check(IMM_WR_OPS)
        || !PyFrozenSet_Check(SEND_WR_OPS))
        goto out;
    n_imm_ops = op_members(IMM_WR_OPS, imm_ops);
    n_send_ops = op_members(SEND_WR_OPS, send_ops);
    if (INTERN(s_contains, "contains") || (MR_TYPE = PyObject_GetAttrString(verbs, "MR")) == NULL
        || !PyType_Check(MR_TYPE)
        || (MR_VIEW = _PyType_Lookup((PyTypeObject *)MR_TYPE, s_view)) == NULL
        || (MR_CONTAINS = _PyType_Lookup((PyTypeObject *)MR_TYPE, s_contains)) == NULL
        || ((PyTypeObject *)MR_TYPE)->tp_dictoffset != 0
        || ((PyTypeObject *)MR_TYPE)->tp_flags & Py_TPFLAGS_MANAGED_DICT) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ImportError,
                            "_rc: traffic.verbs.MR with an instance __dict__ or without view / contains");
        goto out;
    }
    Py_INCREF(MR_VIEW); /* _PyType_Lookup's are borrowed */
    Py_INCREF(MR_CONTAINS);
    m = PyModule_Create(&module);
out:
    Py_XDECREF(verbs);
    Py_XDECREF(st);
    return m;
}
