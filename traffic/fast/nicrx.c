/* The NIC's receive loop in C: traffic/nic/datapath.py's Nic.receive, stage by stage under
 * the same names (issue 30), the first stage of the receive path in C.
 *
 * `receive(nic, now)` does what the Python does: up to 256 frames from nic.raw into nic._buf
 * (recvmsg with one SO_TIMESTAMPNS stamp when nic.rx_stamps, else recv), each stamped
 * frame's `arrival` on the monotonic clock (the stamp + now - nic.realtime(), the same float
 * operations in the same order as traffic.nic.wakeup.arrival) recorded by nic.meter.record
 * (its "rx" lag), then the frame itself: `on_frame` below when nic.on_frame is the class's
 * Nic.on_frame, else the instance's own on_frame.
 *
 * `on_frame` mirrors Nic.on_frame stage by stage for the common frames (issue 30): a RoCEv2
 * frame that `parse` (emucore.framing, the C of emucore/wire/fast/roce.c) reads with good
 * checksums, for this NIC's address and one of its QPs with a template. Counters; a CNP:
 * q.cnp_rx, cnp_rx, the reaction point's on_cnp; a CE mark: q.ce_rx, ce_first, the
 * notification point's on_ce, the CNP's send, q.cnp_tx, cnp_tx and the meter's "cnp";
 * the RocePkt of `pkt_of` (its slots filled in C, no __init__); the endpoint: an RcEndpoint's
 * ACK to its FastRequester's C on_ack (then Requester.on_response on NotImplemented), any
 * other opcode to its FastResponder's C in_order_send / in_order_write (then
 * Responder.on_packet), as RcEndpoint.on_packet and the Fast classes do, any other
 * endpoint's own on_packet; each reply's frame (`frame_of`) sent, nak_tx for a NAK; and
 * q.blocked. Every other frame - shorter than 14 bytes, MAC control (PFC), UET, one parse
 * refuses, a bad checksum, another address, an unknown QP - goes whole to the Python
 * on_frame before anything changed (parse has no side effect), so its result is the
 * Python's by construction. A would-block read
 * ends the loop; a read interrupted by a signal runs the signal handlers and is retried
 * (PEP 475, as the socket module does); any other failed read counts c["rx_errors"] and
 * ends it. Returns the number of frames read. A call it cannot do exactly - nic.raw not a
 * socket.socket exactly or not non-blocking, nic._buf not a bytearray, `now` neither float
 * nor int - answers NotImplemented having changed nothing, and the Python runs.
 * tests/unit/test_fast_nicrx.py holds the two equal, also under ASan + UBSan.
 *
 * socket(7) SO_TIMESTAMPNS: a struct timespec of CLOCK_REALTIME per received frame. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <structmember.h>

#include "lagrec.h"
#include "pyattr.h"
#include "slots.h"

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35 /* asm-generic/socket.h, as traffic.nic.wakeup */
#endif

#define MAX_FRAMES 256 /* the Python's `while k < 256` */

static LagRec LAG; /* the fidelity meter's record (lagrec.h) */
static PyObject *s_raw, *s__buf, *s_rx_stamps, *s_realtime, *s_meter, *s_record, *s_on_frame,
    *s_c, *s_get, *s_rx_errors, *s_rx, *s_fileno, *s_gettimeout, *ZERO, *ONE;
static PyObject *SOCKET_TYPE; /* socket.socket, bound on first use */

static int bind_types(void)
{
    if (SOCKET_TYPE != NULL)
        return 0;
    PyObject *m = PyImport_ImportModule("socket");
    if (m == NULL)
        return -1;
    SOCKET_TYPE = PyObject_GetAttrString(m, "socket");
    Py_DECREF(m);
    return SOCKET_TYPE == NULL ? -1 : 0;
}

/* The file descriptor of `raw` when it is a non-blocking socket.socket exactly (its
 * recv_into / recvmsg_into are the socket module's); 0 when not, -1 on an error. */
static int socket_fd(PyObject *raw, int *fd)
{
    if ((PyObject *)Py_TYPE(raw) != SOCKET_TYPE)
        return 0;
    PyObject *to = PyObject_CallMethodNoArgs(raw, s_gettimeout);
    if (to == NULL)
        return -1;
    int nonblocking = PyFloat_CheckExact(to) && PyFloat_AS_DOUBLE(to) == 0.0;
    Py_DECREF(to);
    if (!nonblocking)
        return 0;
    PyObject *f = PyObject_CallMethodNoArgs(raw, s_fileno);
    if (f == NULL)
        return -1;
    long v = PyLong_AsLong(f);
    Py_DECREF(f);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 0 || v > INT32_MAX)
        return 0; /* a closed socket: the Python's read raises (rx_errors) */
    *fd = (int)v;
    return 1;
}

/* traffic.nic.wakeup.arrival: the frame's SO_TIMESTAMPNS stamp on the monotonic clock
 * (`mono_minus_real` added); 0 without one. */
static int arrival(struct msghdr *msg, double mono_minus_real, double *t)
{
    for (struct cmsghdr *h = CMSG_FIRSTHDR(msg); h != NULL; h = CMSG_NXTHDR(msg, h)) {
        size_t end = (size_t)((char *)h - (char *)msg->msg_control) + h->cmsg_len;
        size_t len = (end > msg->msg_controllen ? msg->msg_controllen - ((char *)h - (char *)msg->msg_control)
                                                : h->cmsg_len) - CMSG_LEN(0);
        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SO_TIMESTAMPNS
            && len >= 2 * sizeof(int64_t)) {
            int64_t ts[2]; /* the Python's struct "qq" */
            memcpy(ts, CMSG_DATA(h), sizeof ts);
            *t = (double)ts[0] + (double)ts[1] * 1e-9 + mono_minus_real;
            return 1;
        }
    }
    return 0;
}

/* self.name(x, y[, z]), its result dropped; 0, or -1 with the exception set */
static int call(PyObject *self, PyObject *name, PyObject *x, PyObject *y, PyObject *z)
{
    PyObject *a[4] = {self, x, y, z};
    size_t n = (z != NULL ? 4 : 3) | PY_VECTORCALL_ARGUMENTS_OFFSET;
    PyObject *r = PyObject_VectorcallMethod(name, a, n, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* c["rx_errors"] = c.get("rx_errors", 0) + 1 */
static int count_rx_error(PyObject *nic)
{
    PyObject *c = PyObject_GetAttr(nic, s_c), *v = NULL, *w = NULL;
    int rc = -1;
    if (c == NULL)
        return -1;
    PyObject *a[3] = {c, s_rx_errors, ZERO};
    v = PyObject_VectorcallMethod(s_get, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (v != NULL && (w = PyNumber_Add(v, ONE)) != NULL)
        rc = PyObject_SetItem(c, s_rx_errors, w);
    Py_DECREF(c);
    Py_XDECREF(v);
    Py_XDECREF(w);
    return rc;
}

/* ---- Nic.on_frame for the common frames ------------------------------------------------ */

#define OP_ACK 0x11       /* emucore.wire.ib.Op.ACK */
#define OP_CNP 0x81       /* Op.CNP (annex A17.9.2) */
#define OP_WRITE_FIRST 6  /* traffic.rc.responder._WRITE_FIRST: SEND opcodes are 0..5 */
#define ECN_CE 3          /* emucore.wire.dscp.ECN_CE */
#define NAK 3             /* AckKind.NAK: bits 6:5 of the AETH syndrome */

static PyObject *s_rx_frames, *s_rx_bytes, *s_cfg, *s_ip, *s_qps, *s_tmpl, *s_cnp_rx, *s_ev,
    *s_emit, *s_rp, *s_on_cnp, *s_td, *s_model_time, *s_ce_rx, *s_ce_first, *s_np, *s_on_ce,
    *s_send, *s_cnp, *s_cnp_tx, *s_clock, *s_qpn, *s_dqpn, *s_ep, *s_requester, *s_responder,
    *s_on_packet, *s_on_response, *s_syndrome, *s_psn, *s_nak_tx, *s_blocked, *s_ready_at,
    *KW_QP, *KW_QP_DQP, *KW_NAK, *KW_PARSE;
/* bound on first use (traffic.nic.datapath imports this module's selector) */
static PyObject *PARSE, *NIC_ON_FRAME, *FRAME_OF, *RC_ENDPOINT, *FAST_REQUESTER, *FAST_RESPONDER,
    *ON_RESPONSE, *RESP_ON_PACKET, *IN_ORDER_WRITE, *IN_ORDER_SEND, *ON_ACK;
static PyTypeObject *ROCE_FIELDS, *ROCE_PKT;
/* pkt_of: RocePkt's fields in order (slots.h), from the RoceFields fields of the same index */
static const char *const PKT_NAMES[N_ROCE_PKT] = {ROCE_PKT_FIELDS};
enum { F_OPCODE, F_DQPN, F_DST_IP = 15, F_ECN = N_ROCE_PKT, F_ICRC_OK, F_CSUM_OK, N_F };
static const char *const FIELD_NAMES[N_F] = {ROCE_PKT_HEAD, "src_ip", "dst_ip", "ecn", "icrc_ok",
                                             "csum_ok"};
static Py_ssize_t PKT_OFF[N_ROCE_PKT], FIELD_OFF[N_F];

static PyObject *attr_of(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module), *v = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    return v;
}

/* The Python objects on_frame recognises. */
static int bind_frame(void)
{
    if (NIC_ON_FRAME != NULL)
        return 0;
    PyObject *nic = attr_of("traffic.nic.datapath", "Nic"), *req = NULL, *resp = NULL,
             *pkt = NULL, *fields = NULL, *of = NULL;
    int rc = -1;
    if (nic == NULL || (PARSE = attr_of("emucore.framing", "parse")) == NULL
        || (FRAME_OF = attr_of("traffic.nic.datapath", "frame_of")) == NULL
        || (RC_ENDPOINT = attr_of("traffic.rc.endpoint", "RcEndpoint")) == NULL
        || (FAST_REQUESTER = attr_of("traffic.rc.requester", "FastRequester")) == NULL
        || (FAST_RESPONDER = attr_of("traffic.rc.responder", "FastResponder")) == NULL
        || (req = attr_of("traffic.rc.requester", "Requester")) == NULL
        || (resp = attr_of("traffic.rc.responder", "Responder")) == NULL
        || (ON_RESPONSE = PyObject_GetAttr(req, s_on_response)) == NULL
        || (RESP_ON_PACKET = PyObject_GetAttr(resp, s_on_packet)) == NULL
        || (IN_ORDER_WRITE = attr_of("traffic.fast.rc", "IN_ORDER_WRITE")) == NULL
        || (IN_ORDER_SEND = attr_of("traffic.fast.rc", "IN_ORDER_SEND")) == NULL
        || (ON_ACK = attr_of("traffic.fast.rc", "ON_ACK")) == NULL
        || (pkt = attr_of("emucore.wire.ib", "RocePkt")) == NULL
        || (fields = attr_of("emucore.wire.templates", "RoceFields")) == NULL
        || slot_offsets(pkt, PKT_NAMES, N_ROCE_PKT, PKT_OFF, "_nicrx") < 0
        || dataclass_order(pkt, PKT_NAMES, N_ROCE_PKT, "_nicrx") < 0
        || slot_offsets(fields, FIELD_NAMES, N_F, FIELD_OFF, "_nicrx") < 0
        || (of = PyObject_GetAttrString(nic, "on_frame")) == NULL)
        goto out;
    ROCE_PKT = (PyTypeObject *)Py_NewRef(pkt);
    ROCE_FIELDS = (PyTypeObject *)Py_NewRef(fields);
    NIC_ON_FRAME = Py_NewRef(of);
    rc = 0;
out:
    Py_XDECREF(nic);
    Py_XDECREF(req);
    Py_XDECREF(resp);
    Py_XDECREF(pkt);
    Py_XDECREF(fields);
    Py_XDECREF(of);
    return rc;
}

/* o[name] += by (ITEM) or o.name += by, as the Python's += */
static int add(PyObject *o, PyObject *name, Py_ssize_t by, int item)
{
    PyObject *x = item ? PyObject_GetItem(o, name) : PyObject_GetAttr(o, name);
    PyObject *b = x ? PyLong_FromSsize_t(by) : NULL, *y = b ? PyNumber_InPlaceAdd(x, b) : NULL;
    int rc = y == NULL ? -1 : item ? PyObject_SetItem(o, name, y) : PyObject_SetAttr(o, name, y);
    Py_XDECREF(x);
    Py_XDECREF(b);
    Py_XDECREF(y);
    return rc;
}

/* What one receive call reads once for on_frame: the NIC, the time, the counters. */
typedef struct {
    PyObject *nic, *now, *c;
} Rx;

/* self.ev.emit(name, now, **kw): `kw` the values of kwnames `names` */
static int emit(Rx *x, PyObject *name, PyObject *const *kw, PyObject *names)
{
    PyObject *ev = PyObject_GetAttr(x->nic, s_ev), *r = NULL;
    if (ev == NULL)
        return -1;
    PyObject *a[6] = {ev, name, x->now};
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < k; i++)
        a[3 + i] = kw[i];
    r = PyObject_VectorcallMethod(s_emit, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, names);
    Py_DECREF(ev);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

/* self.td.model_time(now), a new reference */
static PyObject *model_time(Rx *x)
{
    PyObject *td = PyObject_GetAttr(x->nic, s_td), *m = NULL;
    if (td != NULL) {
        PyObject *a[2] = {td, x->now};
        m = PyObject_VectorcallMethod(s_model_time, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(td);
    }
    return m;
}

/* self.send(frame): its truth, or -1 */
static int nic_send(Rx *x, PyObject *frame)
{
    PyObject *a[2] = {x->nic, frame};
    PyObject *r = PyObject_VectorcallMethod(s_send, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    int t = r == NULL ? -1 : PyObject_IsTrue(r);
    Py_XDECREF(r);
    return t;
}

/* The CNP stage: q.cnp_rx, cnp_rx, q.rp.on_cnp(model time). */
static int on_cnp(Rx *x, PyObject *q)
{
    PyObject *rp = NULL, *m = NULL, *r = NULL, *qpn = NULL;
    if (add(q, s_cnp_rx, 1, 0) < 0 || (qpn = PyObject_GetAttr(q, s_qpn)) == NULL
        || emit(x, s_cnp_rx, &qpn, KW_QP) < 0 || (rp = PyObject_GetAttr(q, s_rp)) == NULL) {
        Py_XDECREF(qpn);
        return -1;
    }
    Py_DECREF(qpn);
    int rc = 0;
    if (rp != Py_None) {
        rc = -1;
        if ((m = model_time(x)) != NULL) {
            PyObject *a[2] = {rp, m};
            r = PyObject_VectorcallMethod(s_on_cnp, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
            rc = r == NULL ? -1 : 0;
        }
    }
    Py_DECREF(rp);
    Py_XDECREF(m);
    Py_XDECREF(r);
    return rc;
}

/* The CE stage (notification point): q.ce_rx, ce_first, np.on_ce, the CNP's send, q.cnp_tx,
 * cnp_tx, the meter's "cnp". */
static int on_ce(Rx *x, PyObject *q)
{
    PyObject *qpn = NULL, *np = NULL, *m = NULL, *r = NULL, *cnp = NULL, *tmpl = NULL, *dqp = NULL,
             *meter = NULL, *done = NULL, *rec = NULL;
    long long ce;
    int rc = -1;
    if (add(q, s_ce_rx, 1, 0) < 0 || get_ll(q, s_ce_rx, &ce) < 0
        || (qpn = PyObject_GetAttr(q, s_qpn)) == NULL)
        return -1;
    if ((ce == 1 && emit(x, s_ce_first, &qpn, KW_QP) < 0)
        || (np = PyObject_GetAttr(x->nic, s_np)) == NULL)
        goto out;
    if (np == Py_None) {
        rc = 0;
        goto out;
    }
    if ((m = model_time(x)) == NULL)
        goto out;
    PyObject *a[3] = {np, qpn, m};
    if ((r = PyObject_VectorcallMethod(s_on_ce, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL)) == NULL)
        goto out;
    int want = PyObject_IsTrue(r), sent;
    if (want <= 0) {
        rc = want;
        goto out;
    }
    if ((cnp = PyObject_GetAttr(q, s_cnp)) == NULL || (sent = nic_send(x, cnp)) < 0)
        goto out;
    if (!sent) {
        rc = 0;
        goto out;
    }
    if (add(q, s_cnp_tx, 1, 0) < 0 || (tmpl = PyObject_GetAttr(q, s_tmpl)) == NULL
        || (dqp = PyObject_GetAttr(tmpl, s_dqpn)) == NULL)
        goto out;
    PyObject *kw[2] = {qpn, dqp};
    if (emit(x, s_cnp_tx, kw, KW_QP_DQP) < 0 || (meter = PyObject_GetAttr(x->nic, s_meter)) == NULL
        || (done = PyObject_CallMethodNoArgs(x->nic, s_clock)) == NULL)
        goto out;
    PyObject *b[4] = {meter, x->now, done, s_cnp};
    rec = PyObject_VectorcallMethod(s_record, b, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    rc = rec == NULL ? -1 : 0;
out:
    Py_XDECREF(qpn);
    Py_XDECREF(np);
    Py_XDECREF(m);
    Py_XDECREF(r);
    Py_XDECREF(cnp);
    Py_XDECREF(tmpl);
    Py_XDECREF(dqp);
    Py_XDECREF(meter);
    Py_XDECREF(done);
    Py_XDECREF(rec);
    return rc;
}

/* pkt_of(f): a RocePkt whose slots are f's (what its dataclass __init__ stores). */
static PyObject *pkt_of(PyObject *f)
{
    PyObject *v[N_ROCE_PKT];
    for (int i = 0; i < N_ROCE_PKT; i++)
        if ((v[i] = SLOT(f, FIELD_OFF[i])) == NULL) {
            PyErr_SetString(PyExc_AttributeError, FIELD_NAMES[i]);
            return NULL;
        }
    return slots_new(ROCE_PKT, v, PKT_OFF, N_ROCE_PKT);
}

/* a[0].name(a[1], a[2]) of the transport side a[0]: when it is exactly `fast_type` (a Fast
 * class), its C `fast` on the first `nfast` arguments and, on NotImplemented, the reference
 * method `slow`, as the Fast class does; else its own method. */
static PyObject *fast_first(PyObject *fast_type, PyObject *fast, Py_ssize_t nfast, PyObject *slow,
                            PyObject *name, PyObject *const *a)
{
    if (Py_TYPE(a[0]) != (PyTypeObject *)fast_type || fast == Py_None)
        return PyObject_VectorcallMethod(name, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    PyObject *r = PyObject_Vectorcall(fast, a, nfast, NULL);
    if (r == Py_NotImplemented) {
        Py_DECREF(r);
        r = PyObject_Vectorcall(slow, a, 3, NULL);
    }
    return r;
}

/* q.ep.on_packet(pkt, now): RcEndpoint.on_packet with its Fast requester / responder's C
 * first, as they call it; any other endpoint's own. A new reference to the replies. */
static PyObject *ep_on_packet(Rx *x, PyObject *q, PyObject *pkt, int opcode)
{
    PyObject *ep = PyObject_GetAttr(q, s_ep), *side = NULL, *r = NULL;
    if (ep == NULL)
        return NULL;
    if (Py_TYPE(ep) != (PyTypeObject *)RC_ENDPOINT) {
        PyObject *a[3] = {ep, pkt, x->now};
        r = PyObject_VectorcallMethod(s_on_packet, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        goto out;
    }
    if (opcode == OP_ACK) { /* requester.on_response(pkt, now); [] */
        if ((side = PyObject_GetAttr(ep, s_requester)) == NULL)
            goto out;
        PyObject *a[3] = {side, pkt, x->now};
        r = fast_first(FAST_REQUESTER, ON_ACK, 3, ON_RESPONSE, s_on_response, a);
        if (r != NULL)
            Py_SETREF(r, PyList_New(0));
        goto out;
    }
    if ((side = PyObject_GetAttr(ep, s_responder)) == NULL)
        goto out;
    PyObject *a[3] = {side, pkt, x->now};
    r = fast_first(FAST_RESPONDER, opcode < OP_WRITE_FIRST ? IN_ORDER_SEND : IN_ORDER_WRITE, 2,
                   RESP_ON_PACKET, s_on_packet, a);
out:
    Py_DECREF(ep);
    Py_XDECREF(side);
    return r;
}

/* The replies: each one's frame_of(q.tmpl, r) sent, nak_tx for a NAK. */
static int reply(Rx *x, PyObject *q, PyObject *replies)
{
    PyObject *it = PyObject_GetIter(replies), *r, *tmpl = NULL;
    int rc = -1;
    if (it == NULL)
        return -1;
    while ((r = PyIter_Next(it)) != NULL) {
        PyObject *f = NULL, *syn = NULL, *psn = NULL;
        long long s;
        int ok = -1;
        if (tmpl == NULL && (tmpl = PyObject_GetAttr(q, s_tmpl)) == NULL)
            goto next;
        PyObject *a[2] = {tmpl, r};
        if ((f = PyObject_Vectorcall(FRAME_OF, a, 2, NULL)) == NULL || nic_send(x, f) < 0
            || (syn = PyObject_GetAttr(r, s_syndrome)) == NULL)
            goto next;
        if ((s = PyLong_AsLongLong(syn)) == -1 && PyErr_Occurred())
            goto next;
        ok = 0;
        if ((s >> 5 & 3) == NAK) {
            ok = -1;
            PyObject *qpn = PyObject_GetAttr(q, s_qpn);
            if (qpn != NULL && (psn = PyObject_GetAttr(r, s_psn)) != NULL) {
                PyObject *kw[3] = {qpn, psn, syn};
                ok = emit(x, s_nak_tx, kw, KW_NAK);
            }
            Py_XDECREF(qpn);
        }
next:
        Py_DECREF(r);
        Py_XDECREF(f);
        Py_XDECREF(syn);
        Py_XDECREF(psn);
        if (ok < 0)
            goto out;
    }
    rc = PyErr_Occurred() ? -1 : 0;
out:
    Py_DECREF(it);
    Py_XDECREF(tmpl);
    return rc;
}

/* The frame's QP when it is a common one (a RoCEv2 frame parse reads, good checksums, our
 * address, a QP with a template): 1 with f and q set; 0: the Python's; -1 an error.
 * Nothing changes here. */
static int common(Rx *x, PyObject *mv, const unsigned char *b, Py_ssize_t n, PyObject **f,
                  PyObject **q)
{
    PyObject *cfg = NULL, *ip = NULL, *qps = NULL;
    int rc = 0;
    if (n < 14 || (b[12] == 0x88 && b[13] == 0x08))
        return 0; /* cut, or MAC control (PFC) */
    if (n >= 42 && b[14] == 0x45 && b[23] == 17 && b[36] == 0x12 && b[37] == 0xb9)
        return 0; /* is_uet */
    PyObject *a[3] = {mv, Py_True, Py_True};
    if ((*f = PyObject_Vectorcall(PARSE, a, 1, KW_PARSE)) == NULL)
        return -1;
    if (Py_TYPE(*f) != ROCE_FIELDS)
        goto no; /* None: malformed or not RoCE */
    PyObject *icrc = SLOT(*f, FIELD_OFF[F_ICRC_OK]), *csum = SLOT(*f, FIELD_OFF[F_CSUM_OK]);
    if (icrc != Py_True || csum != Py_True)
        goto no; /* bad_checksum (or unusual truths: the Python's) */
    if ((cfg = PyObject_GetAttr(x->nic, s_cfg)) == NULL || (ip = PyObject_GetAttr(cfg, s_ip)) == NULL
        || (qps = PyObject_GetAttr(x->nic, s_qps)) == NULL)
        goto err;
    PyObject *dst = SLOT(*f, FIELD_OFF[F_DST_IP]), *dqpn = SLOT(*f, FIELD_OFF[F_DQPN]);
    if (dst == NULL || dqpn == NULL || !PyUnicode_CheckExact(dst) || !PyUnicode_CheckExact(ip)
        || !PyDict_CheckExact(qps) || !PyLong_CheckExact(dqpn))
        goto no;
    int eq = PyUnicode_Compare(dst, ip);
    if (eq == -1 && PyErr_Occurred())
        goto err;
    if (eq != 0)
        goto no;
    PyObject *v = PyDict_GetItemWithError(qps, dqpn);
    if (v == NULL) {
        if (PyErr_Occurred())
            goto err;
        goto no;
    }
    PyObject *t = PyObject_GetAttr(v, s_tmpl);
    if (t == NULL)
        goto err;
    Py_DECREF(t);
    if (t == Py_None)
        goto no;
    *q = Py_NewRef(v);
    rc = 1;
    goto out;
err:
    rc = -1;
no:
    Py_CLEAR(*f);
out:
    Py_XDECREF(cfg);
    Py_XDECREF(ip);
    Py_XDECREF(qps);
    return rc;
}

/* Nic.on_frame(mv, now) of one frame of n bytes at b: 0, or -1 with the exception set. */
static int on_frame(Rx *x, PyObject *mv, const unsigned char *b, Py_ssize_t n)
{
    PyObject *f = NULL, *q = NULL, *pkt = NULL, *replies = NULL, *bl = NULL;
    int rc = -1, k = common(x, mv, b, n, &f, &q);
    if (k <= 0) {
        if (k == 0)
            rc = call(x->nic, s_on_frame, mv, x->now, NULL);
        return rc;
    }
    long opcode = PyLong_AsLong(SLOT(f, FIELD_OFF[F_OPCODE]));
    long ecn = PyLong_AsLong(SLOT(f, FIELD_OFF[F_ECN]));
    if ((opcode == -1 || ecn == -1) && PyErr_Occurred())
        goto out;
    if (add(x->c, s_rx_frames, 1, 1) < 0 || add(x->c, s_rx_bytes, n, 1) < 0)
        goto out;
    if (opcode == OP_CNP) {
        rc = on_cnp(x, q);
        goto out;
    }
    if (ecn == ECN_CE && opcode != OP_ACK && on_ce(x, q) < 0)
        goto out;
    if ((pkt = pkt_of(f)) == NULL || (replies = ep_on_packet(x, q, pkt, (int)opcode)) == NULL
        || reply(x, q, replies) < 0 || (bl = PyObject_GetAttr(q, s_blocked)) == NULL)
        goto out;
    int blocked = PyObject_IsTrue(bl);
    if (blocked < 0)
        goto out;
    if (blocked && (PyObject_SetAttr(q, s_blocked, Py_False) < 0
                    || PyObject_SetAttr(q, s_ready_at, x->now) < 0))
        goto out;
    rc = 0;
out:
    Py_XDECREF(f);
    Py_XDECREF(q);
    Py_XDECREF(pkt);
    Py_XDECREF(replies);
    Py_XDECREF(bl);
    return rc;
}

/* Nic.receive(now): the frames the raw socket holds (at most 256); their number, or
 * NotImplemented having changed nothing. */
static PyObject *receive(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *nic, *now, *raw = NULL, *buf = NULL, *meter = NULL, *whole = NULL, *res = NULL,
             *of = NULL;
    Rx x = {0};
    double offset = 0.0, t_now, mtdf = 0.0;
    int fd = -1, stamped, minline = 0; /* minline: the meter's record inline (lagrec.h) */
    long k = 0;
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "receive(nic, now) takes 2 arguments");
        return NULL;
    }
    nic = args[0];
    now = args[1];
    if (bind_types() < 0 || bind_frame() < 0 || lagrec_bind(&LAG) < 0)
        return NULL;
    if (PyFloat_CheckExact(now))
        t_now = PyFloat_AS_DOUBLE(now);
    else if (PyLong_CheckExact(now)) {
        if ((t_now = PyLong_AsDouble(now)) == -1.0 && PyErr_Occurred())
            return NULL;
    } else
        return Py_NewRef(Py_NotImplemented);
    if ((raw = PyObject_GetAttr(nic, s_raw)) == NULL || (buf = PyObject_GetAttr(nic, s__buf)) == NULL
        || (meter = PyObject_GetAttr(nic, s_rx_stamps)) == NULL)
        goto out;
    stamped = PyObject_IsTrue(meter);
    Py_CLEAR(meter);
    if (stamped < 0)
        goto out;
    {
        int r = socket_fd(raw, &fd);
        if (r < 0)
            goto out;
        if (r == 0 || !PyByteArray_CheckExact(buf)) {
            res = Py_NewRef(Py_NotImplemented);
            goto out;
        }
    }
    if (stamped) { /* offset = now - self.realtime(): the stamps' clock */
        PyObject *rt = PyObject_CallMethodNoArgs(nic, s_realtime);
        if (rt == NULL)
            goto out;
        double r = PyFloat_AsDouble(rt);
        Py_DECREF(rt);
        if (r == -1.0 && PyErr_Occurred())
            goto out;
        offset = t_now - r;
        if ((meter = PyObject_GetAttr(nic, s_meter)) == NULL /* self.meter, once a call */
            || (minline = lagrec_inline(&LAG, meter, &mtdf)) < 0)
            goto out;
    }
    if ((whole = PyMemoryView_FromObject(buf)) == NULL) /* memoryview(buf), once a call */
        goto out;
    /* the C on_frame when nic.on_frame is Nic.on_frame, bound to nic */
    if ((of = PyObject_GetAttr(nic, s_on_frame)) == NULL)
        goto out;
    if (PyMethod_Check(of) && PyMethod_GET_FUNCTION(of) == NIC_ON_FRAME
        && PyMethod_GET_SELF(of) == nic && (x.c = PyObject_GetAttr(nic, s_c)) == NULL)
        goto out;
    x.nic = nic;
    x.now = now;
    while (k < MAX_FRAMES) {
        char anc[CMSG_SPACE(2 * sizeof(int64_t))];
        struct iovec iov = {PyByteArray_AS_STRING(buf), (size_t)PyByteArray_GET_SIZE(buf)};
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = anc,
                             .msg_controllen = sizeof anc};
        ssize_t n = stamped ? recvmsg(fd, &msg, 0) : recv(fd, iov.iov_base, iov.iov_len, 0);
        if (n < 0) {
            if (errno == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    goto out;
                continue;
            }
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EALREADY || errno == EINPROGRESS)
                break; /* BlockingIOError */
            if (count_rx_error(nic) < 0) /* ENETDOWN once after the port lost carrier */
                goto out;
            break;
        }
        k++;
        double t;
        if (stamped && arrival(&msg, offset, &t)) { /* self.meter.record(t, now, "rx") */
            int rc;
            if (minline)
                rc = lagrec_record(&LAG, meter, mtdf, t, t_now, s_rx);
            else {
                PyObject *tt = PyFloat_FromDouble(t);
                rc = tt == NULL ? -1 : lagrec_call(&LAG, meter, tt, now, s_rx);
                Py_XDECREF(tt);
            }
            if (rc < 0)
                goto out;
        }
        /* self.on_frame(memoryview(buf)[:n], now) */
        PyObject *mv = PySequence_GetSlice(whole, 0, n);
        int rc = mv == NULL ? -1
                 : x.c != NULL ? on_frame(&x, mv, (const unsigned char *)PyByteArray_AS_STRING(buf), n)
                               : call(nic, s_on_frame, mv, now, NULL);
        Py_XDECREF(mv);
        if (rc < 0)
            goto out;
    }
    res = PyLong_FromLong(k);
out:
    Py_XDECREF(of);
    Py_XDECREF(x.c);
    Py_XDECREF(whole);
    Py_XDECREF(raw);
    Py_XDECREF(buf);
    Py_XDECREF(meter);
    return res;
}

/* lag_record(meter, due, done, what): meter.record(due, done, what) as receive records a
 * frame's "rx" wait (lagrec.h: LagMeter.record inline, else the meter's own); None. */
static PyObject *lag_record(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    double tdf = 0.0, due, done;
    (void)mod;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "lag_record(meter, due, done, what) takes 4 arguments");
        return NULL;
    }
    if (lagrec_bind(&LAG) < 0)
        return NULL;
    int inl = lagrec_inline(&LAG, args[0], &tdf);
    if (inl < 0)
        return NULL;
    if (inl && PyFloat_CheckExact(args[1]) && PyFloat_CheckExact(args[2])) {
        due = PyFloat_AS_DOUBLE(args[1]);
        done = PyFloat_AS_DOUBLE(args[2]);
        if (lagrec_record(&LAG, args[0], tdf, due, done, args[3]) < 0)
            return NULL;
    } else if (lagrec_call(&LAG, args[0], args[1], args[2], args[3]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"receive", (PyCFunction)(void (*)(void))receive, METH_FASTCALL,
     "Nic.receive(now) of traffic/nic/datapath.py; the frames read, or NotImplemented having "
     "changed nothing."},
    {"lag_record", (PyCFunction)(void (*)(void))lag_record, METH_FASTCALL,
     "meter.record(due, done, what) as receive records a frame's rx wait: LagMeter.record "
     "inline for an exact LagMeter with a TimeDilation and float times, else the meter's "
     "own; None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nicrx",
                                    "The NIC's receive loop in C (traffic.fast.nicrx).",
                                    -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(v, s) ((v = PyUnicode_InternFromString(s)) == NULL)

PyMODINIT_FUNC PyInit__nicrx(void)
{
    if (INTERN(s_raw, "raw") || INTERN(s__buf, "_buf") || INTERN(s_rx_stamps, "rx_stamps")
        || INTERN(s_realtime, "realtime") || INTERN(s_meter, "meter") || INTERN(s_record, "record")
        || INTERN(s_on_frame, "on_frame") || INTERN(s_c, "c") || INTERN(s_get, "get")
        || INTERN(s_rx_errors, "rx_errors") || INTERN(s_rx, "rx") || INTERN(s_fileno, "fileno")
        || INTERN(s_gettimeout, "gettimeout"))
        return NULL;
    if (INTERN(s_rx_frames, "rx_frames") || INTERN(s_rx_bytes, "rx_bytes") || INTERN(s_cfg, "cfg")
        || INTERN(s_ip, "ip") || INTERN(s_qps, "qps") || INTERN(s_tmpl, "tmpl")
        || INTERN(s_cnp_rx, "cnp_rx") || INTERN(s_ev, "ev") || INTERN(s_emit, "emit")
        || INTERN(s_rp, "rp") || INTERN(s_on_cnp, "on_cnp") || INTERN(s_td, "td")
        || INTERN(s_model_time, "model_time") || INTERN(s_ce_rx, "ce_rx")
        || INTERN(s_ce_first, "ce_first") || INTERN(s_np, "np") || INTERN(s_on_ce, "on_ce")
        || INTERN(s_send, "send") || INTERN(s_cnp, "cnp") || INTERN(s_cnp_tx, "cnp_tx")
        || INTERN(s_clock, "clock") || INTERN(s_qpn, "qpn") || INTERN(s_dqpn, "dqpn")
        || INTERN(s_ep, "ep") || INTERN(s_requester, "requester")
        || INTERN(s_responder, "responder") || INTERN(s_on_packet, "on_packet")
        || INTERN(s_on_response, "on_response") || INTERN(s_syndrome, "syndrome")
        || INTERN(s_psn, "psn") || INTERN(s_nak_tx, "nak_tx") || INTERN(s_blocked, "blocked")
        || INTERN(s_ready_at, "ready_at"))
        return NULL;
    if ((KW_QP = Py_BuildValue("(s)", "qp")) == NULL
        || (KW_QP_DQP = Py_BuildValue("(ss)", "qp", "dqp")) == NULL
        || (KW_NAK = Py_BuildValue("(sss)", "qp", "psn", "syndrome")) == NULL
        || (KW_PARSE = Py_BuildValue("(ss)", "verify_icrc", "verify_csum")) == NULL)
        return NULL;
    if ((ZERO = PyLong_FromLong(0)) == NULL || (ONE = PyLong_FromLong(1)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
