/* The NIC's transmit loop in C: traffic/nic/datapath.py's Nic.transmit, stage by stage
 * under the same names (issue 30).
 *
 * `transmit(nic, now)` does what the Python does, on the Python objects' own state: the
 * pauses that ran out (the Python's own `expire_pauses`, when `now` reached
 * pause.next_expiry), the round robin over nic.order from nic.rr, each QP's blocked /
 * pacer / paused checks, its next packet (an RcEndpoint whose requester is a
 * FastRequester: traffic.fast._rc's next_write, then the Python Requester.next_packet
 * when it answers NotImplemented, as FastRequester.next_packet; any other endpoint: its
 * own next_packet), the frame (q.build, else `frame_of`: the template's build), the send
 * (Nic.send inline when it is the instance's: raw.send and the tx counters; else the
 * instance's send), the fidelity meter's "pacer" record with its due time (LagMeter.record
 * inline when the meter is a LagMeter; else its record), the QP's counters, DCQCN's
 * on_bytes_sent and rate, and the two `pace` updates - the same float operations in the
 * same order, so every time and counter is bit-identical. A call it cannot do exactly (a
 * time that is not a float or an int, a TimeDilation that is not one or whose TDF is not
 * a float) answers NotImplemented before it changes anything, and the Python runs.
 * tests/unit/test_fast_nictx.py holds the two equal, also under ASan + UBSan.
 *
 * Book ch.11 (DCQCN: the sender's rate after a CNP; PFC pauses stop the RoCE priority),
 * ch.9 Figure 9-5 (a work request becomes BTH/RETH frames), docs/ARCHITECTURE.md "Time:
 * model world and lab world" (lab rate = model rate / TDF) and emucore/fidelity.py (the
 * lag of each action against its due time). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "lagrec.h"
#include "pyattr.h"

static PyObject *s_pause, *s_next_expiry, *s_expire_pauses, *s_mask, *s_resumed_at, *s_order,
    *s_rr, *s_port_next, *s_slack, *s_link_lab_bps, *s_meter, *s_clock, *s_td, *s_tdf,
    *s_send, *s_raw, *s_c, *s_blocked, *s_next_t, *s_prio, *s_ep, *s_requester,
    *s_next_packet, *s_build, *s_tmpl, *s_ready_at, *s_tx_frames, *s_tx_wire_bytes, *s_rp,
    *s_on_bytes_sent, *s_rc,
    *s_tx_errors, *s_tx_bytes, *s_pacer, *s_opcode, *s_psn, *s_ackreq, *s_va, *s_rkey,
    *s_dlen, *s_syndrome, *s_msn, *s_imm, *s_payload, *s_becn, *KW_BECN, *ZERO;
/* bound on first use (traffic.nic.datapath imports this module's selector) */
static PyObject *NIC_TYPE, *NIC_SEND, *RC_ENDPOINT, *FAST_REQUESTER, *REQUESTER_NEXT, *NEXT_WRITE,
    *TIME_DILATION;
static LagRec LAG; /* the fidelity meter's record (lagrec.h) */
static PyObject *ROCE_PKT; /* emucore.wire.ib.RocePkt */
enum { P_OPCODE, P_PSN, P_ACKREQ, P_IMM, P_PAYLOAD, P_BECN, P_VA, P_RKEY, P_DLEN, P_SYNDROME,
       P_MSN, N_P };
static Py_ssize_t PKT_OFF[N_P]; /* its fields' slots, in frame_of's order */
static int NIC_PLAIN; /* no name transmit reads of a Nic is a data descriptor of its class */

static PyObject *attr_of(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module), *v = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    return v;
}

/* Slots of the __slots__ classes transmit reads per frame (RocePkt, LagMeter): their
 * member descriptors' offsets, so that an object of exactly that class is read and written
 * as getattr / setattr would (an unset slot is an AttributeError) without the lookup. */
static int slot_offsets(PyObject *type, PyObject *const *names, int n, Py_ssize_t *off)
{
    for (int i = 0; i < n; i++) {
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, names[i]);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%R.%U: a __slots__ member is required", type, names[i]);
            return -1;
        }
        off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    return 0;
}

/* getattr(o, name) through slot offset `off` (ATTR, -1: the plain getattr); a new reference. */
static PyObject *slot_get(PyObject *o, PyObject *name, Py_ssize_t off)
{
    if (off < 0)
        return PyObject_GetAttr(o, name);
    PyObject *v = *(PyObject **)((char *)o + off);
    if (v == NULL)
        PyErr_SetObject(PyExc_AttributeError, name);
    return Py_XNewRef(v);
}

/* setattr(o, name, v) through slot offset `off` (-1: the plain setattr); v borrowed. */
static int slot_set(PyObject *o, PyObject *name, Py_ssize_t off, PyObject *v)
{
    if (off < 0)
        return PyObject_SetAttr(o, name, v);
    Py_XSETREF(*(PyObject **)((char *)o + off), Py_NewRef(v));
    return 0;
}

enum { ATTR = -1, ITEM = -2 };

/* o.name += by (how ATTR: getattr / setattr; a slot offset: the same through the slot) or
 * o[name] += by (how ITEM: the Python's c["tx_frames"] += 1, hist[i] += 1): any number
 * type, as the Python's += */
static int add(PyObject *o, PyObject *name, Py_ssize_t by, Py_ssize_t how)
{
    PyObject *x = how == ITEM ? PyObject_GetItem(o, name) : slot_get(o, name, how);
    PyObject *b = x ? PyLong_FromSsize_t(by) : NULL, *y = b ? PyNumber_InPlaceAdd(x, b) : NULL;
    int rc = y == NULL ? -1 : how == ITEM ? PyObject_SetItem(o, name, y) : slot_set(o, name, how, y);
    Py_XDECREF(x);
    Py_XDECREF(b);
    Py_XDECREF(y);
    return rc;
}

/* The Python classes and functions transmit recognises, and the meter's bucket edges. */
static int bind(void)
{
    if (NIC_SEND != NULL)
        return 0;
    PyObject *nic = attr_of("traffic.nic.datapath", "Nic");
    PyObject *req = attr_of("traffic.rc.requester", "Requester");
    RC_ENDPOINT = attr_of("traffic.rc.endpoint", "RcEndpoint");
    FAST_REQUESTER = attr_of("traffic.rc.requester", "FastRequester");
    NEXT_WRITE = attr_of("traffic.rc.requester", "NEXT_WRITE");
    TIME_DILATION = attr_of("emucore.timedil", "TimeDilation");
    ROCE_PKT = attr_of("emucore.wire.ib", "RocePkt");
    REQUESTER_NEXT = req ? PyObject_GetAttr(req, s_next_packet) : NULL;
    PyObject *send = nic ? PyObject_GetAttr(nic, s_send) : NULL;
    Py_XDECREF(req);
    int rc = -1;
    if (send == NULL || RC_ENDPOINT == NULL || FAST_REQUESTER == NULL || NEXT_WRITE == NULL
        || TIME_DILATION == NULL || REQUESTER_NEXT == NULL || lagrec_bind(&LAG) < 0
        || ROCE_PKT == NULL)
        goto out;
    PyObject *const pkt_names[N_P] = {s_opcode, s_psn, s_ackreq, s_imm, s_payload, s_becn,
                                      s_va, s_rkey, s_dlen, s_syndrome, s_msn};
    if (!PyType_Check(ROCE_PKT)) {
        PyErr_SetString(PyExc_TypeError, "RocePkt: a class is required");
        goto out;
    }
    if (slot_offsets(ROCE_PKT, pkt_names, N_P, PKT_OFF) < 0)
        goto out;
    PyObject *const nic_names[] = {s_slack, s_pause, s_port_next, s_order, s_rr, s_td,
                                   s_link_lab_bps, s_meter, s_clock, s_raw, s_c};
    NIC_PLAIN = 1;
    for (size_t i = 0; i < sizeof nic_names / sizeof *nic_names; i++) {
        PyObject *d = _PyType_Lookup((PyTypeObject *)nic, nic_names[i]);
        if (d != NULL && Py_TYPE(d)->tp_descr_set != NULL)
            NIC_PLAIN = 0;
    }
    NIC_TYPE = Py_NewRef(nic);
    NIC_SEND = Py_NewRef(send);
    rc = 0;
out:
    Py_XDECREF(nic);
    Py_XDECREF(send);
    return rc;
}

/* What one call reads once (the Python reads them per frame; nothing it calls changes
 * them): the NIC, its time, its port's numbers, the TDF, how to send and record. */
typedef struct {
    PyObject *nic, *now, *send, *meter, *clock; /* send: NULL = Nic.send inline */
    PyObject *dict;                           /* the Nic's __dict__ (NULL: getattr) */
    double t, slack, link, tdf, mtdf;         /* mtdf: the meter's TDF, if minline */
    int minline;                              /* the meter's record inline (lagrec.h) */
    int loaded;                               /* load() ran: send .. mtdf are set */
} Tx;

/* getattr(nic, name), a new reference: an exact Nic's own __dict__ first, as getattr
 * looks there when its class has no data descriptor of that name (NIC_PLAIN), else getattr. */
static PyObject *nic_get(Tx *x, PyObject *name)
{
    if (x->dict != NULL) {
        PyObject *v = PyDict_GetItemWithError(x->dict, name);
        if (v != NULL)
            return Py_NewRef(v);
        if (PyErr_Occurred())
            return NULL;
    }
    return PyObject_GetAttr(x->nic, name);
}

/* setattr(nic, name, v): into an exact Nic's __dict__ (NIC_PLAIN), else setattr. */
static int nic_set(Tx *x, PyObject *name, PyObject *v)
{
    return x->dict != NULL ? PyDict_SetItem(x->dict, name, v) : PyObject_SetAttr(x->nic, name, v);
}

static int nic_d(Tx *x, PyObject *name, double *v)
{
    PyObject *o = nic_get(x, name);
    if (o == NULL)
        return -1;
    *v = PyFloat_AsDouble(o);
    Py_DECREF(o);
    return *v == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* A float, or an int a double holds exactly (the Python's arithmetic on it is then the
 * same): 1 and its value; 0 anything else; -1 an error. */
static int as_double(PyObject *o, double *v)
{
    if (PyFloat_CheckExact(o)) {
        *v = PyFloat_AS_DOUBLE(o);
        return 1;
    }
    if (!PyLong_CheckExact(o))
        return 0;
    int over = 0;
    long long i = PyLong_AsLongLongAndOverflow(o, &over);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (over || i > (1LL << 53) || i < -(1LL << 53))
        return 0;
    *v = (double)i;
    return 1;
}

/* pace of traffic/nic/datapath.py */
static double pace(double next_t, double now, long long nbytes, double rate, double slack)
{
    double base = next_t >= now - slack ? next_t : now, lo = now - slack;
    return (lo > base ? lo : base) + (double)(nbytes * 8) / rate;
}

/* Nic.send: raw.send(frame), tx_errors on an OSError, else tx_frames and tx_bytes. */
static int send(Tx *x, PyObject *frame)
{
    if (x->send != NULL) {
        PyObject *r = PyObject_CallOneArg(x->send, frame);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    PyObject *raw = nic_get(x, s_raw), *c = NULL, *r = NULL;
    int rc = -1;
    if (raw == NULL)
        return -1;
    PyObject *a[2] = {raw, frame};
    r = PyObject_VectorcallMethod(s_send, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (r == NULL && !PyErr_ExceptionMatches(PyExc_OSError))
        goto out;
    PyErr_Clear();
    if ((c = nic_get(x, s_c)) == NULL)
        goto out;
    if (r == NULL)
        rc = add(c, s_tx_errors, 1, ITEM);
    else
        rc = add(c, s_tx_frames, 1, ITEM) < 0 ? -1 : add(c, s_tx_bytes, PyBytes_GET_SIZE(frame), ITEM);
out:
    Py_DECREF(raw);
    Py_XDECREF(c);
    Py_XDECREF(r);
    return rc;
}

/* self.meter.record(due, done, "pacer"): LagMeter.record inline (lagrec.h) or its own. */
static int record(Tx *x, double due, PyObject *done_o)
{
    double done = PyFloat_AsDouble(done_o);
    if (done == -1.0 && PyErr_Occurred())
        return -1;
    if (x->minline)
        return lagrec_record(&LAG, x->meter, x->mtdf, due, done, s_pacer);
    PyObject *d = PyFloat_FromDouble(due);
    int rc = d == NULL ? -1 : lagrec_call(&LAG, x->meter, d, done_o, s_pacer);
    Py_XDECREF(d);
    return rc;
}

/* q.ep.next_packet(now): FastRequester.next_packet's C next_write, then the Python. */
static PyObject *next_packet(Tx *x, PyObject *q)
{
    PyObject *ep = PyObject_GetAttr(q, s_ep), *req = NULL, *p = NULL;
    if (ep == NULL)
        return NULL;
    if (Py_TYPE(ep) != (PyTypeObject *)RC_ENDPOINT || NEXT_WRITE == Py_None) {
        PyObject *a[2] = {ep, x->now};
        p = PyObject_VectorcallMethod(s_next_packet, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        goto out;
    }
    if ((req = PyObject_GetAttr(ep, s_requester)) == NULL)
        goto out;
    PyObject *a[2] = {req, x->now};
    if (Py_TYPE(req) != (PyTypeObject *)FAST_REQUESTER) {
        p = PyObject_VectorcallMethod(s_next_packet, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        goto out;
    }
    p = PyObject_Vectorcall(NEXT_WRITE, a, 2, NULL);
    if (p == Py_NotImplemented) {
        Py_DECREF(p);
        p = PyObject_Vectorcall(REQUESTER_NEXT, a, 2, NULL);
    }
out:
    Py_DECREF(ep);
    Py_XDECREF(req);
    return p;
}

/* frame_of(q.tmpl, pkt) of traffic/nic/datapath.py: the template's build. */
static PyObject *frame_of(PyObject *t, PyObject *p)
{
    PyObject *v[N_P] = {NULL}, *reth = NULL, *aeth = NULL, *f = NULL;
    PyObject *const names[N_P] = {s_opcode, s_psn, s_ackreq, s_imm, s_payload, s_becn,
                                  s_va, s_rkey, s_dlen, s_syndrome, s_msn};
    int exact = Py_TYPE(p) == (PyTypeObject *)ROCE_PKT;
    for (int i = 0; i < N_P; i++)
        if ((v[i] = slot_get(p, names[i], exact ? PKT_OFF[i] : -1)) == NULL)
            goto out;
    reth = v[6] != Py_None ? PyTuple_Pack(3, v[6], v[7], v[8]) : Py_NewRef(Py_None);
    if (reth == NULL)
        goto out;
    if (v[9] != Py_None) {
        int truth = PyObject_IsTrue(v[10]);
        if (truth < 0)
            goto out;
        aeth = PyTuple_Pack(2, v[9], truth ? v[10] : ZERO);
    } else {
        aeth = Py_NewRef(Py_None);
    }
    if (aeth == NULL)
        goto out;
    PyObject *a[9] = {t, v[0], v[1], v[2], reth, v[3], aeth, v[4], v[5]};
    f = PyObject_VectorcallMethod(s_build, a, 8 | PY_VECTORCALL_ARGUMENTS_OFFSET, KW_BECN);
out:
    for (int i = 0; i < N_P; i++)
        Py_XDECREF(v[i]);
    Py_XDECREF(reth);
    Py_XDECREF(aeth);
    return f;
}

/* The frame of one packet: q.build(pkt) if the QP has one, else frame_of. */
static PyObject *build(PyObject *q, PyObject *pkt)
{
    PyObject *b = PyObject_GetAttr(q, s_build), *t = NULL, *f = NULL;
    if (b == NULL)
        return NULL;
    if (b != Py_None)
        f = PyObject_CallOneArg(b, pkt);
    else if ((t = PyObject_GetAttr(q, s_tmpl)) != NULL)
        f = frame_of(t, pkt);
    Py_DECREF(b);
    Py_XDECREF(t);
    if (f != NULL && !PyBytes_Check(f)) { /* len(frame) of anything else: the Python's */
        PyErr_SetString(PyExc_TypeError, "transmit: a frame must be bytes");
        Py_CLEAR(f);
    }
    return f;
}

/* After q's frame of `size` bytes: its counters, DCQCN's bytes and rate, the two paces. */
static int account(Tx *x, PyObject *q, long long size, double next_t)
{
    PyObject *rp = NULL, *m = NULL, *r = NULL, *pn = NULL;
    double rate = x->link, rc_v, port;
    int rc = -1;
    if (add(q, s_tx_frames, 1, ATTR) < 0 || add(q, s_tx_wire_bytes, (Py_ssize_t)size, ATTR) < 0
        || (rp = PyObject_GetAttr(q, s_rp)) == NULL)
        goto out;
    if (rp != Py_None) {
        PyObject *sz = PyLong_FromLongLong(size);
        if (sz == NULL || (m = PyFloat_FromDouble(x->t / x->tdf)) == NULL) {
            Py_XDECREF(sz);
            goto out;
        }
        PyObject *a[3] = {rp, sz, m};
        r = PyObject_VectorcallMethod(s_on_bytes_sent, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        Py_DECREF(sz);
        if (r == NULL || get_d(rp, s_rc, &rc_v) < 0)
            goto out;
        double lab = rc_v / x->tdf; /* td.lab_rate(rp.rc) */
        if (lab < rate)             /* min(rate, lab) */
            rate = lab;
    }
    if (rate == 0.0) {
        PyErr_SetString(PyExc_ZeroDivisionError, "float division by zero");
        goto out;
    }
    if (set_d(q, s_next_t, pace(next_t, x->t, size, rate, x->slack)) < 0
        || nic_d(x, s_port_next, &port) < 0
        || (pn = PyFloat_FromDouble(pace(port, x->t, size, x->link, x->slack))) == NULL
        || nic_set(x, s_port_next, pn) < 0)
        goto out;
    rc = 0;
out:
    Py_XDECREF(rp);
    Py_XDECREF(m);
    Py_XDECREF(r);
    Py_XDECREF(pn);
    return rc;
}

/* What a frame needs beyond the checks, read once per call before the first state change:
 * the TDF (a TimeDilation's, else 0: NotImplemented), the link's lab rate, the meter (its
 * record inline if a LagMeter with a TimeDilation), the clock, the send (inline if
 * Nic.send). 1 loaded, 0 NotImplemented, -1 an error. */
static int load(Tx *x)
{
    PyObject *td = NULL, *tdf = NULL;
    int rc = -1;
    if ((td = nic_get(x, s_td)) == NULL)
        goto out;
    if (Py_TYPE(td) != (PyTypeObject *)TIME_DILATION) {
        rc = 0;
        goto out;
    }
    if ((tdf = PyObject_GetAttr(td, s_tdf)) == NULL || (rc = as_double(tdf, &x->tdf)) <= 0)
        goto out;
    rc = -1;
    if (nic_d(x, s_link_lab_bps, &x->link) < 0 || (x->meter = nic_get(x, s_meter)) == NULL
        || (x->clock = nic_get(x, s_clock)) == NULL
        || (x->send = PyObject_GetAttr(x->nic, s_send)) == NULL)
        goto out;
    if ((x->minline = lagrec_inline(&LAG, x->meter, &x->mtdf)) < 0)
        goto out;
    if (PyMethod_Check(x->send) && PyMethod_GET_FUNCTION(x->send) == NIC_SEND
        && PyMethod_GET_SELF(x->send) == x->nic)
        Py_CLEAR(x->send); /* Nic.send, inline */
    x->loaded = rc = 1;
out:
    Py_XDECREF(td);
    Py_XDECREF(tdf);
    return rc;
}

/* One pass of the round robin over `order` from nic.rr: 1 a frame went, 0 none could
 * (the Python's for-else: return), 2 load() refused (nothing changed), -1 an error. */
static int one_frame(Tx *x, PyObject *order, long long paused, PyObject *resumed_at)
{
    Py_ssize_t n = PyList_GET_SIZE(order);
    long long rr;
    PyObject *rr_o = nic_get(x, s_rr);
    if (rr_o == NULL)
        return -1;
    rr = PyLong_AsLongLong(rr_o);
    Py_DECREF(rr_o);
    if (rr == -1 && PyErr_Occurred())
        return -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyList_GET_SIZE(order) != n) {
            PyErr_SetString(PyExc_RuntimeError, "transmit: nic.order changed during the loop");
            return -1;
        }
        Py_ssize_t j = (Py_ssize_t)(((rr + i) % n + n) % n);
        PyObject *q = Py_NewRef(PyList_GET_ITEM(order, j)), *b = NULL, *pkt = NULL,
                 *frame = NULL, *done = NULL, *ra = NULL;
        double next_t, port, ready, resumed;
        long long prio;
        int rc = -1;
        if ((b = PyObject_GetAttr(q, s_blocked)) == NULL)
            goto next;
        int blocked = PyObject_IsTrue(b);
        if (blocked < 0)
            goto next;
        if (blocked) {
            rc = 0;
            goto next;
        }
        if (get_d(q, s_next_t, &next_t) < 0)
            goto next;
        if (x->t < next_t) {
            rc = 0;
            goto next;
        }
        if (get_ll(q, s_prio, &prio) < 0)
            goto next;
        if (prio < 0 || prio > 7) {
            PyErr_SetString(PyExc_ValueError, "transmit: a QP's priority must be 0..7");
            goto next;
        }
        if (paused >> prio & 1) {
            rc = 0;
            goto next;
        }
        if (!x->loaded && (rc = load(x)) <= 0) {
            rc = rc == 0 ? 2 : -1;
            goto next;
        }
        rc = -1;
        if ((pkt = next_packet(x, q)) == NULL)
            goto next;
        if (pkt == Py_None) {
            rc = PyObject_SetAttr(q, s_blocked, Py_True);
            goto next;
        }
        if ((frame = build(q, pkt)) == NULL || nic_d(x, s_port_next, &port) < 0
            || get_d(q, s_ready_at, &ready) < 0
            || (ra = PySequence_GetItem(resumed_at, (Py_ssize_t)prio)) == NULL)
            goto next;
        if ((resumed = PyFloat_AsDouble(ra)) == -1.0 && PyErr_Occurred())
            goto next;
        double due = next_t; /* max(q.next_t, port_next - slack, q.ready_at, resumed_at) */
        if (port - x->slack > due)
            due = port - x->slack;
        if (ready > due)
            due = ready;
        if (resumed > due)
            due = resumed;
        if (send(x, frame) < 0 || (done = PyObject_CallNoArgs(x->clock)) == NULL
            || record(x, due, done) < 0 || account(x, q, PyBytes_GET_SIZE(frame), next_t) < 0)
            goto next;
        PyObject *r = PyLong_FromLongLong((rr + (long long)i + 1) % (long long)n);
        rc = r == NULL ? -1 : nic_set(x, s_rr, r);
        Py_XDECREF(r);
        if (rc == 0)
            rc = 1;
next:
        Py_DECREF(q);
        Py_XDECREF(b);
        Py_XDECREF(pkt);
        Py_XDECREF(frame);
        Py_XDECREF(done);
        Py_XDECREF(ra);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* Nic.transmit(now): data frames while the port and some QP's pacer allow (round robin);
 * None, or NotImplemented having changed nothing. */
static PyObject *transmit(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    Tx x = {0};
    PyObject *pause = NULL, *ra = NULL, *order = NULL, *res = NULL, *r = NULL;
    double expiry, port;
    long long paused = 0;
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "transmit(nic, now) takes 2 arguments");
        return NULL;
    }
    x.nic = args[0];
    x.now = args[1];
    if (bind() < 0)
        return NULL;
    if (as_double(x.now, &x.t) <= 0)
        goto no_or_err;
    if (Py_TYPE(x.nic) == (PyTypeObject *)NIC_TYPE && NIC_PLAIN
        && (x.dict = PyObject_GenericGetDict(x.nic, NULL)) == NULL)
        goto out;
    if (nic_d(&x, s_slack, &x.slack) < 0 || (pause = nic_get(&x, s_pause)) == NULL
        || get_d(pause, s_next_expiry, &expiry) < 0)
        goto out;
    /* from here on state changes, as the Python's, each after load() */
    if (x.t >= expiry) {
        int l = load(&x);
        if (l <= 0)
            goto no_or_err;
        PyObject *a[2] = {x.nic, x.now};
        r = PyObject_VectorcallMethod(s_expire_pauses, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
        if (r == NULL)
            goto out;
    }
    for (;;) {
        if (nic_d(&x, s_port_next, &port) < 0)
            goto out;
        if (!(x.t >= port - x.slack))
            break;
        Py_XDECREF(order);
        if ((order = nic_get(&x, s_order)) == NULL)
            goto out;
        if (!PyList_Check(order)) {
            PyErr_SetString(PyExc_TypeError, "transmit: nic.order must be a list");
            goto out;
        }
        if (PyList_GET_SIZE(order) == 0)
            break;
        /* pause.mask and pause.resumed_at, which the Python reads before the loop (no
         * side effect, and nothing in the loop changes them) */
        if (ra == NULL && (get_ll(pause, s_mask, &paused) < 0
                           || (ra = PyObject_GetAttr(pause, s_resumed_at)) == NULL))
            goto out;
        int k = one_frame(&x, order, paused, ra);
        if (k < 0)
            goto out;
        if (k == 2) /* load() refused: nothing changed yet */
            goto no;
        if (k == 0)
            break;
    }
    res = Py_NewRef(Py_None);
    goto out;
no_or_err:
    if (PyErr_Occurred())
        goto out;
no:
    res = Py_NewRef(Py_NotImplemented);
out:
    Py_XDECREF(x.dict);
    Py_XDECREF(x.meter);
    Py_XDECREF(x.clock);
    Py_XDECREF(x.send);
    Py_XDECREF(pause);
    Py_XDECREF(ra);
    Py_XDECREF(order);
    Py_XDECREF(r);
    return res;
}

static PyMethodDef methods[] = {
    {"transmit", (PyCFunction)(void (*)(void))transmit, METH_FASTCALL,
     "Nic.transmit(now) of traffic/nic/datapath.py; None, or NotImplemented having changed nothing."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nictx",
                                    "The NIC's transmit loop in C (traffic.fast.nictx).",
                                    -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(v, s) ((v = PyUnicode_InternFromString(s)) == NULL)

PyMODINIT_FUNC PyInit__nictx(void)
{
    if (INTERN(s_pause, "pause") || INTERN(s_next_expiry, "next_expiry")
        || INTERN(s_expire_pauses, "expire_pauses") || INTERN(s_mask, "mask")
        || INTERN(s_resumed_at, "resumed_at") || INTERN(s_order, "order") || INTERN(s_rr, "rr")
        || INTERN(s_port_next, "port_next") || INTERN(s_slack, "slack")
        || INTERN(s_link_lab_bps, "link_lab_bps") || INTERN(s_meter, "meter")
        || INTERN(s_clock, "clock") || INTERN(s_td, "td") || INTERN(s_tdf, "tdf")
        || INTERN(s_send, "send") || INTERN(s_raw, "raw") || INTERN(s_c, "c")
        || INTERN(s_blocked, "blocked") || INTERN(s_next_t, "next_t") || INTERN(s_prio, "prio")
        || INTERN(s_ep, "ep") || INTERN(s_requester, "requester")
        || INTERN(s_next_packet, "next_packet") || INTERN(s_build, "build")
        || INTERN(s_tmpl, "tmpl") || INTERN(s_ready_at, "ready_at")
        || INTERN(s_tx_frames, "tx_frames") || INTERN(s_tx_wire_bytes, "tx_wire_bytes")
        || INTERN(s_rp, "rp") || INTERN(s_on_bytes_sent, "on_bytes_sent") || INTERN(s_rc, "rc"))
        return NULL;
    if (INTERN(s_tx_errors, "tx_errors") || INTERN(s_tx_bytes, "tx_bytes")
        || INTERN(s_pacer, "pacer") || INTERN(s_opcode, "opcode") || INTERN(s_psn, "psn")
        || INTERN(s_ackreq, "ackreq") || INTERN(s_va, "va") || INTERN(s_rkey, "rkey")
        || INTERN(s_dlen, "dlen") || INTERN(s_syndrome, "syndrome") || INTERN(s_msn, "msn")
        || INTERN(s_imm, "imm") || INTERN(s_payload, "payload") || INTERN(s_becn, "becn"))
        return NULL;
    if ((KW_BECN = PyTuple_Pack(1, s_becn)) == NULL || (ZERO = PyLong_FromLong(0)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
