/* The NIC's data-path loop in C: traffic/nic/datapath.py's Nic.run and its iteration
 * Nic.step, stage by stage under the same names (issue 30).
 *
 * `step(nic, now, rx)` does what the Python does, in the same order:
 *   receive   nic.rx_read = the receive's count if rx and nic.raw is not None, else 0. When
 *             nic.receive is the class's Nic.receive and traffic.nic.datapath.RECEIVE is set
 *             (the C of traffic/fast/nicrx.c), RECEIVE(nic, now) directly, C to C without
 *             the Python frame; if it answers NotImplemented (having changed nothing),
 *             nic.receive(now), which then runs the Python;
 *   timers    for each QP of nic.order: its endpoint's deadline (an exact RcEndpoint's
 *             `deadline` property read as its requester's deadline), ep.on_timer(now) when
 *             due (Python: the RC timers have no C), the meter's "rto" record if the
 *             deadline changed, q.blocked / q.ready_at;
 *   transmit  as receive: TRANSMIT(nic, now) directly (traffic/fast/nictx.c), else / on
 *             NotImplemented nic.transmit(now);
 *   notify    with CQ waiters (nic.waiters), the sum of the CQs' `pushed` (an exact dict's
 *             values walked by PyDict_Next, their order); if it is not
 *             nic.notified, nic.notified = it and nic.cond.notify_all();
 *   timeout   the next wake-up: now + 0.05, pause.paused_mask(now) (an EgressPause's
 *             cached mask read in C while now < its next_expiry), each sending QP's
 *             max(q.next_t, port_next - slack), each armed deadline after now, a pause's
 *             expiry; max(0.0, wake - now).
 * The arithmetic and comparisons are the Python's own number protocol and rich comparisons
 * (min / max as the builtins compare: `b < a`, `b > a`), so every value, type and object is
 * the Python's; the Requester's idle() (`not self._msgs and not self.qp.sq`) is read in C
 * when the requester's class is Requester or FastRequester and its idle is Requester.idle.
 * `now` neither float nor int answers NotImplemented having changed nothing, and the Python
 * runs. tests/unit/test_fast_nicstep.py holds the two equal, also under ASan + UBSan.
 *
 * `run(nic)` is Nic.run's loop (what the Python's bytecode and select's list wrapping cost
 * per wake-up: a few % of a NIC's CPU, docs/PERFORMANCE.md): while nic.running (signal
 * handlers run first, as the eval loop would), with nic.lock (a threading.Lock: its acquire
 * and release) the monotonic clock as time.monotonic reads and rounds it, then nic.step(now,
 * rx) - this module's step directly when nic.step is the class's and datapath's STEP is it;
 * with a timeout > 0: nic.wakeups += 1, polling (rx_read > 0 and rx_stamps and grid > 0),
 * next_wake (traffic.nic.wakeup's, in C: `next_wake`), select(2) on the raw socket and
 * wake_r (only wake_r while polling) with the GIL released and select.select's rounding
 * (up to ns, then to us; EINTR: the signal handlers, then the rest of the wait), one recv
 * of wake_r; with none, the GIL offered to a thread that asked for it. nic.raw, wake_r,
 * lock and grid are read once. It answers NotImplemented before the first iteration, having
 * changed nothing, where that would not be the Python's loop exactly: no raw socket or an
 * fd past FD_SETSIZE, a grid not a float, a lock not a threading.Lock, or datapath's
 * select.select, time.monotonic or next_wake not the originals (emu.bench.nicloop --split
 * patches select). tests/unit/test_fast_nicrun.py, also under ASan + UBSan. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>

static PyObject *s_receive, *s_transmit, *s_RECEIVE, *s_TRANSMIT, *s_rx_read, *s_raw,
    *s_order, *s_ep, *s_deadline, *s_on_timer, *s_meter, *s_record, *s_rto, *s_blocked,
    *s_ready_at, *s_waiters, *s_cqs, *s_pushed, *s_notified, *s_cond, *s_notify_all,
    *s_pause, *s_paused_mask, *s_prio, *s_requester, *s_idle, *s__msgs, *s_qp, *s_sq,
    *s_next_t, *s_port_next, *s_slack, *s_mask, *s_next_expiry, *s_values, *s_step, *s_STEP,
    *s_running, *s_lock, *s_acquire, *s_release, *s_wakeups, *s_rx_stamps, *s_grid, *s_wake_r,
    *s_select, *s_monotonic;
static PyObject *ZERO, *ONE, *F_ZERO, *F_WAKE; /* 0, 1, 0.0, 0.05 */
/* bound on first use: traffic.nic.datapath's globals, Nic.receive, Nic.transmit,
 * RcEndpoint, its `deadline` property, Requester, FastRequester, Requester.idle */
static PyObject *DP_GLOBALS, *NIC_RECEIVE, *NIC_TRANSMIT, *RC_ENDPOINT, *EP_DEADLINE,
    *REQUESTER, *FAST_REQUESTER, *REQ_IDLE;
/* emucore.qos.pfc.EgressPause (a __slots__ class: no instance attribute shadows a method)
 * and its paused_mask */
static PyObject *EGRESS_PAUSE, *PAUSED_MASK;

static PyObject *attr_of(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module);
    PyObject *v = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    return v;
}

static int bind_step(void)
{
    if (DP_GLOBALS != NULL)
        return 0;
    PyObject *dp = PyImport_ImportModule("traffic.nic.datapath");
    PyObject *nic = dp ? PyObject_GetAttrString(dp, "Nic") : NULL;
    PyObject *glob = dp ? PyModule_GetDict(dp) : NULL; /* borrowed */
    NIC_RECEIVE = nic ? PyObject_GetAttr(nic, s_receive) : NULL;
    NIC_TRANSMIT = nic ? PyObject_GetAttr(nic, s_transmit) : NULL;
    RC_ENDPOINT = attr_of("traffic.rc.endpoint", "RcEndpoint");
    REQUESTER = attr_of("traffic.rc.requester", "Requester");
    FAST_REQUESTER = attr_of("traffic.rc.requester", "FastRequester");
    EGRESS_PAUSE = attr_of("emucore.qos.pfc", "EgressPause");
    int rc = -1;
    if (glob == NULL || NIC_RECEIVE == NULL || NIC_TRANSMIT == NULL || RC_ENDPOINT == NULL
        || REQUESTER == NULL || FAST_REQUESTER == NULL || EGRESS_PAUSE == NULL)
        goto out;
    if (!PyType_Check(EGRESS_PAUSE) || ((PyTypeObject *)EGRESS_PAUSE)->tp_dictoffset != 0
        || ((PyTypeObject *)EGRESS_PAUSE)->tp_flags & Py_TPFLAGS_MANAGED_DICT
        || (PAUSED_MASK = Py_XNewRef(_PyType_Lookup((PyTypeObject *)EGRESS_PAUSE, s_paused_mask))) == NULL) {
        PyErr_SetString(PyExc_TypeError, "EgressPause: a __slots__ class with paused_mask required");
        goto out;
    }
    if (!PyType_Check(RC_ENDPOINT) || !PyType_Check(REQUESTER) || !PyType_Check(FAST_REQUESTER)) {
        PyErr_SetString(PyExc_TypeError, "RcEndpoint, Requester, FastRequester: classes required");
        goto out;
    }
    EP_DEADLINE = Py_XNewRef(_PyType_Lookup((PyTypeObject *)RC_ENDPOINT, s_deadline));
    REQ_IDLE = Py_XNewRef(_PyType_Lookup((PyTypeObject *)REQUESTER, s_idle));
    if (EP_DEADLINE == NULL || REQ_IDLE == NULL) {
        PyErr_SetString(PyExc_TypeError, "RcEndpoint.deadline and Requester.idle required");
        goto out;
    }
    DP_GLOBALS = Py_NewRef(glob);
    rc = 0;
out:
    Py_XDECREF(dp);
    Py_XDECREF(nic);
    return rc;
}

/* Whether `o`'s attribute `name` is its class's function `fn` (not overridden in a subclass
 * or in the instance's __dict__, as a patch does): getattr gives a method of `o` and `fn`.
 * 1, 0, -1 an error. */
static int is_class_attr(PyObject *o, PyObject *name, PyObject *fn)
{
    if (_PyType_Lookup(Py_TYPE(o), name) != fn)
        return 0;
    PyObject *m = PyObject_GetAttr(o, name);
    if (m == NULL)
        return -1;
    int rc = PyMethod_Check(m) && PyMethod_GET_FUNCTION(m) == fn && PyMethod_GET_SELF(m) == o;
    Py_DECREF(m);
    return rc;
}

/* `a != b` as the Python's operator (no identity shortcut: a NaN is not equal to itself):
 * 1, 0, -1 an error. */
static int differ(PyObject *a, PyObject *b)
{
    PyObject *r = PyObject_RichCompare(a, b, Py_NE);
    int rc = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
    return rc;
}

/* nic.NAME(now) (receive / transmit), through datapath's C STAGE directly when NAME is the
 * class's: a new reference, NULL on an error. */
static PyObject *stage(PyObject *nic, PyObject *now, PyObject *name, PyObject *fn,
                       PyObject *stage_name)
{
    int plain = is_class_attr(nic, name, fn);
    if (plain < 0)
        return NULL;
    if (plain) {
        PyObject *c = PyDict_GetItemWithError(DP_GLOBALS, stage_name); /* borrowed */
        if (c == NULL && PyErr_Occurred())
            return NULL;
        if (c != NULL && c != Py_None) {
            PyObject *a[2] = {nic, now};
            Py_INCREF(c);
            PyObject *r = PyObject_Vectorcall(c, a, 2, NULL);
            Py_DECREF(c);
            if (r != Py_NotImplemented)
                return r;
            Py_DECREF(r); /* nothing changed: the Python method */
        }
    }
    PyObject *a[2] = {nic, now};
    return PyObject_VectorcallMethod(name, a, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* q.ep.deadline: an exact RcEndpoint's property is `self.requester.deadline`. */
static PyObject *deadline(PyObject *ep)
{
    if (Py_TYPE(ep) == (PyTypeObject *)RC_ENDPOINT
        && _PyType_Lookup(Py_TYPE(ep), s_deadline) == EP_DEADLINE) {
        PyObject *req = PyObject_GetAttr(ep, s_requester);
        PyObject *d = req ? PyObject_GetAttr(req, s_deadline) : NULL;
        Py_XDECREF(req);
        return d;
    }
    return PyObject_GetAttr(ep, s_deadline);
}

/* q.ep.requester.idle(): 1, 0, -1 an error. */
static int idle(PyObject *ep)
{
    PyObject *req = PyObject_GetAttr(ep, s_requester), *r = NULL, *x = NULL, *qp = NULL;
    int rc = -1;
    if (req == NULL)
        return -1;
    PyTypeObject *t = Py_TYPE(req);
    int plain = (t == (PyTypeObject *)REQUESTER || t == (PyTypeObject *)FAST_REQUESTER)
        ? is_class_attr(req, s_idle, REQ_IDLE) : 0;
    if (plain < 0)
        goto out;
    if (!plain) {
        if ((r = PyObject_CallMethodNoArgs(req, s_idle)) != NULL)
            rc = PyObject_IsTrue(r);
        goto out;
    }
    /* Requester.idle: not self._msgs and not self.qp.sq */
    if ((x = PyObject_GetAttr(req, s__msgs)) == NULL || (rc = PyObject_IsTrue(x)) < 0)
        goto out;
    if (rc) {
        rc = 0;
        goto out;
    }
    Py_CLEAR(x);
    if ((qp = PyObject_GetAttr(req, s_qp)) == NULL || (x = PyObject_GetAttr(qp, s_sq)) == NULL
        || (rc = PyObject_IsTrue(x)) < 0)
        goto out;
    rc = !rc;
out:
    Py_XDECREF(req);
    Py_XDECREF(r);
    Py_XDECREF(x);
    Py_XDECREF(qp);
    return rc;
}

/* min(*w, v) into *w as the builtin: v if v < *w. Steals nothing; 0, -1 an error. */
static int to_min(PyObject **w, PyObject *v)
{
    int lt = PyObject_RichCompareBool(v, *w, Py_LT);
    if (lt > 0)
        Py_SETREF(*w, Py_NewRef(v));
    return lt < 0 ? -1 : 0;
}

/* max(a, b) as the builtin: b if b > a; a new reference, NULL on an error. */
static PyObject *max2(PyObject *a, PyObject *b)
{
    int gt = PyObject_RichCompareBool(b, a, Py_GT);
    return gt < 0 ? NULL : Py_NewRef(gt ? b : a);
}

/* `x >> prio & 1`, true: 1, 0, -1 an error. */
static int bit(PyObject *x, PyObject *prio)
{
    PyObject *s = PyNumber_Rshift(x, prio), *b = s ? PyNumber_And(s, ONE) : NULL;
    int rc = b ? PyObject_IsTrue(b) : -1;
    Py_XDECREF(s);
    Py_XDECREF(b);
    return rc;
}

/* The timers: each QP's due retransmission timer. 0, -1 an error. */
static int timers(PyObject *nic, PyObject *now)
{
    PyObject *order = PyObject_GetAttr(nic, s_order), *q = NULL, *ep = NULL, *d = NULL,
             *d2 = NULL, *r = NULL;
    int rc = -1;
    if (order == NULL)
        return -1;
    if (!PyList_Check(order)) {
        PyErr_SetString(PyExc_TypeError, "step: nic.order must be a list");
        goto out;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order); i++) { /* as the list's iterator */
        q = Py_NewRef(PyList_GET_ITEM(order, i));
        if ((ep = PyObject_GetAttr(q, s_ep)) == NULL || (d = deadline(ep)) == NULL)
            goto out;
        int due = d == Py_None ? 0 : PyObject_RichCompareBool(now, d, Py_GE);
        if (due < 0)
            goto out;
        if (due) {
            if ((r = PyObject_CallMethodOneArg(ep, s_on_timer, now)) == NULL)
                goto out;
            Py_CLEAR(r);
            Py_CLEAR(ep);
            if ((ep = PyObject_GetAttr(q, s_ep)) == NULL || (d2 = deadline(ep)) == NULL)
                goto out;
            int ne = differ(d2, d);
            if (ne < 0)
                goto out;
            if (ne) {
                PyObject *meter = PyObject_GetAttr(nic, s_meter);
                if (meter == NULL)
                    goto out;
                PyObject *a[4] = {meter, d, now, s_rto};
                r = PyObject_VectorcallMethod(s_record, a, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
                Py_DECREF(meter);
                if (r == NULL)
                    goto out;
                Py_CLEAR(r);
            }
            PyObject *b = PyObject_GetAttr(q, s_blocked);
            int blocked = b ? PyObject_IsTrue(b) : -1;
            Py_XDECREF(b);
            if (blocked < 0)
                goto out;
            if (blocked && (PyObject_SetAttr(q, s_blocked, Py_False) < 0
                            || PyObject_SetAttr(q, s_ready_at, now) < 0))
                goto out;
        }
        Py_CLEAR(q);
        Py_CLEAR(ep);
        Py_CLEAR(d);
        Py_CLEAR(d2);
    }
    rc = 0;
out:
    Py_DECREF(order);
    Py_XDECREF(q);
    Py_XDECREF(ep);
    Py_XDECREF(d);
    Py_XDECREF(d2);
    Py_XDECREF(r);
    return rc;
}

/* *sum = *sum + cq.pushed (the Python's sum, left to right). 0, -1 an error. */
static int add_pushed(PyObject **sum, PyObject *cq)
{
    PyObject *p = PyObject_GetAttr(cq, s_pushed);
    if (p == NULL)
        return -1;
    PyObject *s = PyNumber_Add(*sum, p);
    Py_DECREF(p);
    if (s == NULL)
        return -1;
    Py_SETREF(*sum, s);
    return 0;
}

/* The CQ waiters woken after a completion. 0, -1 an error. */
static int notify(PyObject *nic)
{
    PyObject *w = PyObject_GetAttr(nic, s_waiters), *cqs = NULL, *vals = NULL, *it = NULL,
             *c = NULL, *pushed = NULL, *notified = NULL, *r = NULL;
    int rc = -1, waiting = w ? PyObject_IsTrue(w) : -1;
    Py_XDECREF(w);
    if (waiting <= 0)
        return waiting;
    if ((cqs = PyObject_GetAttr(nic, s_cqs)) == NULL)
        goto out;
    pushed = Py_NewRef(ZERO); /* sum(c.pushed for c in ...): start 0, left to right */
    Py_ssize_t pos = 0;
    PyObject *cv;
    if (PyDict_CheckExact(cqs)) { /* dict.values() iterates in PyDict_Next's order */
        while (PyDict_Next(cqs, &pos, NULL, &cv)) {
            Py_INCREF(cv);
            int rc2 = add_pushed(&pushed, cv);
            Py_DECREF(cv);
            if (rc2 < 0)
                goto out;
        }
    } else if ((vals = PyObject_CallMethodNoArgs(cqs, s_values)) == NULL
               || (it = PyObject_GetIter(vals)) == NULL)
        goto out;
    while (it != NULL && (c = PyIter_Next(it)) != NULL) {
        int rc2 = add_pushed(&pushed, c);
        Py_CLEAR(c);
        if (rc2 < 0)
            goto out;
    }
    if (PyErr_Occurred() || (notified = PyObject_GetAttr(nic, s_notified)) == NULL)
        goto out;
    int ne = differ(pushed, notified);
    if (ne < 0)
        goto out;
    if (ne) {
        PyObject *cond;
        if (PyObject_SetAttr(nic, s_notified, pushed) < 0
            || (cond = PyObject_GetAttr(nic, s_cond)) == NULL)
            goto out;
        r = PyObject_CallMethodNoArgs(cond, s_notify_all);
        Py_DECREF(cond);
        if (r == NULL)
            goto out;
    }
    rc = 0;
out:
    Py_XDECREF(cqs);
    Py_XDECREF(vals);
    Py_XDECREF(it);
    Py_XDECREF(pushed);
    Py_XDECREF(notified);
    Py_XDECREF(r);
    return rc;
}

/* pause.paused_mask(now): for an EgressPause whose paused_mask is the class's, its cached
 * answer in C while `now < pause.next_expiry` (the Python's first branch: self.mask);
 * otherwise, and for any other pause, the method. A new reference, NULL on an error. */
static PyObject *paused_mask(PyObject *pause, PyObject *now)
{
    PyTypeObject *t = Py_TYPE(pause);
    if (t == (PyTypeObject *)EGRESS_PAUSE && _PyType_Lookup(t, s_paused_mask) == PAUSED_MASK) {
        PyObject *ne = PyObject_GetAttr(pause, s_next_expiry);
        int lt = ne ? PyObject_RichCompareBool(now, ne, Py_LT) : -1;
        Py_XDECREF(ne);
        if (lt < 0)
            return NULL;
        if (lt)
            return PyObject_GetAttr(pause, s_mask);
    }
    return PyObject_CallMethodOneArg(pause, s_paused_mask, now);
}

/* The seconds to sleep: max(0.0, next wake-up - now). A new reference, NULL on an error. */
static PyObject *timeout(PyObject *nic, PyObject *now)
{
    PyObject *wake = PyNumber_Add(now, F_WAKE), *pause = NULL, *paused = NULL, *order = NULL,
             *q = NULL, *ep = NULL, *v = NULL, *port = NULL, *slack = NULL, *lo = NULL,
             *d = NULL, *res = NULL;
    if (wake == NULL || (pause = PyObject_GetAttr(nic, s_pause)) == NULL
        || (paused = paused_mask(pause, now)) == NULL
        || (order = PyObject_GetAttr(nic, s_order)) == NULL)
        goto out;
    if (!PyList_Check(order)) {
        PyErr_SetString(PyExc_TypeError, "step: nic.order must be a list");
        goto out;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(order); i++) {
        q = Py_NewRef(PyList_GET_ITEM(order, i));
        if ((v = PyObject_GetAttr(q, s_prio)) == NULL)
            goto out;
        int sending = bit(paused, v);
        Py_CLEAR(v);
        if (sending < 0)
            goto out;
        sending = !sending;
        if ((ep = PyObject_GetAttr(q, s_ep)) == NULL)
            goto out;
        if (sending) {
            if ((v = PyObject_GetAttr(q, s_blocked)) == NULL || (sending = PyObject_IsTrue(v)) < 0)
                goto out;
            Py_CLEAR(v);
            sending = !sending;
        }
        if (sending) {
            if ((sending = idle(ep)) < 0)
                goto out;
            sending = !sending;
        }
        if (sending) {
            PyObject *m;
            if ((v = PyObject_GetAttr(q, s_next_t)) == NULL
                || (port = PyObject_GetAttr(nic, s_port_next)) == NULL
                || (slack = PyObject_GetAttr(nic, s_slack)) == NULL
                || (lo = PyNumber_Subtract(port, slack)) == NULL || (m = max2(v, lo)) == NULL)
                goto out;
            int e = to_min(&wake, m);
            Py_DECREF(m);
            if (e < 0)
                goto out;
            Py_CLEAR(v);
            Py_CLEAR(port);
            Py_CLEAR(slack);
            Py_CLEAR(lo);
        }
        if ((d = deadline(ep)) == NULL)
            goto out;
        if (d != Py_None) {
            int after = PyObject_RichCompareBool(d, now, Py_GT);
            if (after < 0 || (after && to_min(&wake, d) < 0))
                goto out;
        }
        Py_CLEAR(q);
        Py_CLEAR(ep);
        Py_CLEAR(d);
    }
    if ((v = PyObject_GetAttr(pause, s_mask)) == NULL)
        goto out;
    int masked = PyObject_IsTrue(v);
    Py_CLEAR(v);
    if (masked < 0)
        goto out;
    if (masked && ((v = PyObject_GetAttr(pause, s_next_expiry)) == NULL || to_min(&wake, v) < 0))
        goto out;
    Py_CLEAR(v);
    if ((v = PyNumber_Subtract(wake, now)) == NULL)
        goto out;
    res = max2(F_ZERO, v);
out:
    Py_XDECREF(wake);
    Py_XDECREF(pause);
    Py_XDECREF(paused);
    Py_XDECREF(order);
    Py_XDECREF(q);
    Py_XDECREF(ep);
    Py_XDECREF(v);
    Py_XDECREF(port);
    Py_XDECREF(slack);
    Py_XDECREF(lo);
    Py_XDECREF(d);
    return res;
}

/* Nic.step(now, rx): one loop iteration; the seconds to sleep, or NotImplemented having
 * changed nothing. */
static PyObject *step(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "step(nic, now, rx) takes 3 arguments");
        return NULL;
    }
    PyObject *nic = args[0], *now = args[1], *k = NULL, *raw = NULL, *r = NULL;
    if (!PyFloat_CheckExact(now) && !PyLong_CheckExact(now))
        Py_RETURN_NOTIMPLEMENTED;
    if (bind_step() < 0)
        return NULL;
    int rx = PyObject_IsTrue(args[2]);
    if (rx < 0)
        return NULL;
    if (rx) {
        if ((raw = PyObject_GetAttr(nic, s_raw)) == NULL)
            return NULL;
        rx = raw != Py_None;
        Py_DECREF(raw);
    }
    k = rx ? stage(nic, now, s_receive, NIC_RECEIVE, s_RECEIVE) : Py_NewRef(ZERO);
    if (k == NULL)
        return NULL;
    int e = PyObject_SetAttr(nic, s_rx_read, k);
    Py_DECREF(k);
    if (e < 0 || timers(nic, now) < 0
        || (r = stage(nic, now, s_transmit, NIC_TRANSMIT, s_TRANSMIT)) == NULL)
        return NULL;
    Py_DECREF(r);
    if (notify(nic) < 0)
        return NULL;
    return timeout(nic, now);
}

/* ---- The loop: Nic.run ------------------------------------------------------------ */

/* bound on first use: Nic.step, the originals of select.select, time.monotonic and
 * traffic.nic.wakeup.next_wake (run checks that datapath uses them), _thread.LockType */
static PyObject *NIC_STEP, *SELECT_SELECT, *TIME_MONOTONIC, *NEXT_WAKE, *LOCK_TYPE;

static int bind_run(void)
{
    if (NIC_STEP != NULL)
        return 0;
    PyObject *nic = attr_of("traffic.nic.datapath", "Nic");
    NIC_STEP = nic ? PyObject_GetAttr(nic, s_step) : NULL;
    Py_XDECREF(nic);
    if (NIC_STEP == NULL || (SELECT_SELECT = attr_of("select", "select")) == NULL
        || (TIME_MONOTONIC = attr_of("time", "monotonic")) == NULL
        || (NEXT_WAKE = attr_of("traffic.nic.wakeup", "next_wake")) == NULL
        || (LOCK_TYPE = attr_of("_thread", "LockType")) == NULL) {
        Py_CLEAR(NIC_STEP);
        return -1;
    }
    return 0;
}

/* time.monotonic()'s clock and rounding (CPython's _PyTime_AsSecondsDouble): ns, seconds. */
static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double seconds(int64_t t)
{
    return t % 1000000000 == 0 ? (double)(t / 1000000000) : (double)t / 1e9;
}

/* traffic.nic.wakeup.next_wake: the deadline now + timeout; while polling and the deadline
 * more than one grid step away, no later than the next grid point after now
 * ((floor(now / grid) + 1) * grid: the Python's int is exact in a double below 2**53). */
static double next_wake_of(double now, double timeout, double grid, int polling)
{
    double wake = now + timeout;
    if (polling && grid > 0 && timeout > grid) {
        double g = (floor(now / grid) + 1) * grid;
        if (g < wake)
            wake = g;
    }
    return wake;
}

static PyObject *next_wake(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    (void)mod;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "next_wake(now, timeout, grid, polling) takes 4 arguments");
        return NULL;
    }
    double now = PyFloat_AsDouble(args[0]), timeout = PyFloat_AsDouble(args[1]),
           grid = PyFloat_AsDouble(args[2]);
    int polling = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || polling < 0)
        return NULL;
    return PyFloat_FromDouble(next_wake_of(now, timeout, grid, polling));
}

/* select.select([raw, wake_r] or, while polling, [wake_r], [], [], secs) as the Python's:
 * the timeout rounded up to ns, then to us, the GIL released; on EINTR the signal handlers
 * run and the wait resumes until the same deadline (past it: nothing ready, no select, as
 * CPython's select does). 0 (*raw_in, *wake_in: which are readable), -1 an error. */
static int wait_readable(int raw, int wake, int polling, double secs, int *raw_in, int *wake_in)
{
    int64_t left = (int64_t)ceil(secs * 1e9), deadline = mono_ns() + left;
    for (;;) {
        int64_t us = (left + 999) / 1000;
        struct timeval tv = {.tv_sec = us / 1000000, .tv_usec = us % 1000000};
        fd_set rd;
        FD_ZERO(&rd);
        if (!polling)
            FD_SET(raw, &rd);
        FD_SET(wake, &rd);
        int n, err;
        Py_BEGIN_ALLOW_THREADS
        n = select((polling || wake > raw ? wake : raw) + 1, &rd, NULL, NULL, &tv);
        err = errno;
        Py_END_ALLOW_THREADS
        if (n >= 0) {
            *raw_in = !polling && FD_ISSET(raw, &rd);
            *wake_in = FD_ISSET(wake, &rd);
            return 0;
        }
        if (err != EINTR) {
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        left = deadline - mono_ns();
        if (left < 0) { /* as select.select: past the deadline, nothing is ready */
            *raw_in = *wake_in = 0;
            return 0;
        }
    }
}

/* self.wake_r.recv(4096) of a non-blocking socket, BlockingIOError ignored: 0, -1 an error. */
static int drain_wake(int fd)
{
    char buf[4096];
    for (;;) {
        if (recv(fd, buf, sizeof buf, 0) >= 0 || errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (errno != EINTR) {
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

/* self.step(now, rx): this module's C step directly when nic.step is the class's and
 * datapath's STEP is that C step, else (or on NotImplemented) the method. */
static PyObject *step_of(PyObject *mod, PyObject *mystep, PyObject *nic, PyObject *now, int rx)
{
    PyObject *a[3] = {nic, now, rx ? Py_True : Py_False};
    int plain = is_class_attr(nic, s_step, NIC_STEP);
    if (plain < 0)
        return NULL;
    if (plain) {
        PyObject *c = PyDict_GetItemWithError(DP_GLOBALS, s_STEP); /* borrowed */
        if (c == NULL && PyErr_Occurred())
            return NULL;
        if (c == mystep) {
            PyObject *r = step(mod, a, 3);
            if (r != Py_NotImplemented)
                return r;
            Py_DECREF(r);
        }
    }
    return PyObject_VectorcallMethod(s_step, a, 3 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* getattr(o, name) is `want` (o's attribute of the module global `global`): 1, 0, -1. */
static int global_attr_is(const char *global, PyObject *name, PyObject *want)
{
    PyObject *g = PyDict_GetItemString(DP_GLOBALS, global); /* borrowed */
    if (g == NULL)
        return 0;
    if (name == NULL)
        return g == want;
    PyObject *v = PyObject_GetAttr(g, name);
    if (v == NULL) {
        PyErr_Clear();
        return 0;
    }
    int rc = v == want;
    Py_DECREF(v);
    return rc;
}

/* The fds of nic.raw and nic.wake_r (sockets: their fileno()), each below FD_SETSIZE as
 * select.select requires: 1, 0 not so, -1 an error. */
static int fds_of(PyObject *nic, int *raw, int *wake)
{
    PyObject *r = PyObject_GetAttr(nic, s_raw), *w = r ? PyObject_GetAttr(nic, s_wake_r) : NULL;
    int rc = -1;
    if (w == NULL)
        goto out;
    rc = 0;
    if (r == Py_None || w == Py_None)
        goto out;
    if ((*raw = PyObject_AsFileDescriptor(r)) < 0 || (*wake = PyObject_AsFileDescriptor(w)) < 0) {
        rc = -1;
        goto out;
    }
    rc = *raw < FD_SETSIZE && *wake < FD_SETSIZE;
out:
    Py_XDECREF(r);
    Py_XDECREF(w);
    return rc;
}

/* Nic.run: the loop until nic.running is false; None, or NotImplemented having changed
 * nothing when it is not the Python's loop exactly (see the module docstring). */
static PyObject *run(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "run(nic) takes 1 argument");
        return NULL;
    }
    PyObject *nic = args[0], *lock = NULL, *mystep = NULL, *g = NULL, *now = NULL, *t = NULL,
             *v = NULL, *res = NULL;
    int raw = -1, wake = -1, ok;
    if (bind_step() < 0 || bind_run() < 0)
        return NULL;
    if ((ok = fds_of(nic, &raw, &wake)) <= 0)
        return ok < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    if ((lock = PyObject_GetAttr(nic, s_lock)) == NULL || (g = PyObject_GetAttr(nic, s_grid)) == NULL
        || (mystep = PyObject_GetAttr(mod, s_step)) == NULL)
        goto out;
    if (Py_TYPE(lock) != (PyTypeObject *)LOCK_TYPE || !PyFloat_CheckExact(g)
        || global_attr_is("select", s_select, SELECT_SELECT) != 1
        || global_attr_is("time", s_monotonic, TIME_MONOTONIC) != 1
        || global_attr_is("next_wake", NULL, NEXT_WAKE) != 1) {
        res = Py_NewRef(Py_NotImplemented);
        goto out;
    }
    double grid = PyFloat_AS_DOUBLE(g);
    int rx = 1;
    for (;;) {
        if (PyErr_CheckSignals() < 0 || (v = PyObject_GetAttr(nic, s_running)) == NULL
            || (ok = PyObject_IsTrue(v)) < 0)
            goto out;
        Py_CLEAR(v);
        if (!ok)
            break;
        /* with self.lock: */
        if ((v = PyObject_CallMethodNoArgs(lock, s_acquire)) == NULL)
            goto out;
        Py_CLEAR(v);
        double now_s = seconds(mono_ns());
        if ((now = PyFloat_FromDouble(now_s)) != NULL)
            t = step_of(mod, mystep, nic, now, rx);
        PyObject *et, *ev, *tb;
        PyErr_Fetch(&et, &ev, &tb);
        v = PyObject_CallMethodNoArgs(lock, s_release);
        if (et != NULL) {
            if (v == NULL)
                _PyErr_ChainExceptions(et, ev, tb);
            else
                PyErr_Restore(et, ev, tb);
        }
        if (v == NULL || t == NULL)
            goto out;
        Py_CLEAR(v);
        Py_CLEAR(now);
        rx = 1;
        ok = PyObject_RichCompareBool(t, ZERO, Py_GT);
        double timeout = ok > 0 ? PyFloat_AsDouble(t) : 0.0;
        Py_CLEAR(t);
        if (ok < 0 || (timeout == -1.0 && PyErr_Occurred()))
            goto out;
        if (!ok) { /* no wait: let a thread that asked for the GIL have it, as the eval loop does */
            Py_BEGIN_ALLOW_THREADS
            Py_END_ALLOW_THREADS
            continue;
        }
        /* self.wakeups += 1 */
        if ((v = PyObject_GetAttr(nic, s_wakeups)) == NULL || (t = PyNumber_InPlaceAdd(v, ONE)) == NULL
            || PyObject_SetAttr(nic, s_wakeups, t) < 0)
            goto out;
        Py_CLEAR(v);
        Py_CLEAR(t);
        /* polling = self.rx_read > 0 and self.rx_stamps and grid > 0 */
        int polling;
        if ((v = PyObject_GetAttr(nic, s_rx_read)) == NULL
            || (polling = PyObject_RichCompareBool(v, ZERO, Py_GT)) < 0)
            goto out;
        Py_CLEAR(v);
        if (polling && ((v = PyObject_GetAttr(nic, s_rx_stamps)) == NULL
                        || (polling = PyObject_IsTrue(v)) < 0))
            goto out;
        Py_CLEAR(v);
        polling = polling && grid > 0;
        double wake_at = next_wake_of(now_s, timeout, grid, polling), left = wake_at - seconds(mono_ns());
        int raw_in = 0, wake_in = 0;
        if (wait_readable(raw, wake, polling, left > 0.0 ? left : 0.0, &raw_in, &wake_in) < 0)
            goto out;
        rx = polling || raw_in;
        if (wake_in && drain_wake(wake) < 0)
            goto out;
    }
    res = Py_NewRef(Py_None);
out:
    Py_XDECREF(lock);
    Py_XDECREF(mystep);
    Py_XDECREF(g);
    Py_XDECREF(now);
    Py_XDECREF(t);
    Py_XDECREF(v);
    return res;
}

static PyMethodDef methods[] = {
    {"step", (PyCFunction)(void (*)(void))step, METH_FASTCALL,
     "Nic.step(now, rx) of traffic/nic/datapath.py: the seconds to sleep, or NotImplemented "
     "having changed nothing."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "Nic.run() of traffic/nic/datapath.py: the loop until nic.running is false; None, or "
     "NotImplemented having changed nothing."},
    {"next_wake", (PyCFunction)(void (*)(void))next_wake, METH_FASTCALL,
     "traffic.nic.wakeup.next_wake(now, timeout, grid, polling) as run computes it."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nicstep",
                                    "One iteration of the NIC's loop in C (traffic.fast.nicstep).",
                                    -1, methods, NULL, NULL, NULL, NULL};

#define INTERN(v, s) ((v = PyUnicode_InternFromString(s)) == NULL)

PyMODINIT_FUNC PyInit__nicstep(void)
{
    if (INTERN(s_receive, "receive") || INTERN(s_transmit, "transmit")
        || INTERN(s_RECEIVE, "RECEIVE") || INTERN(s_TRANSMIT, "TRANSMIT")
        || INTERN(s_rx_read, "rx_read") || INTERN(s_raw, "raw") || INTERN(s_order, "order")
        || INTERN(s_ep, "ep") || INTERN(s_deadline, "deadline") || INTERN(s_on_timer, "on_timer")
        || INTERN(s_meter, "meter") || INTERN(s_record, "record") || INTERN(s_rto, "rto")
        || INTERN(s_blocked, "blocked") || INTERN(s_ready_at, "ready_at")
        || INTERN(s_waiters, "waiters") || INTERN(s_cqs, "cqs") || INTERN(s_pushed, "pushed")
        || INTERN(s_notified, "notified") || INTERN(s_cond, "cond")
        || INTERN(s_notify_all, "notify_all") || INTERN(s_pause, "pause")
        || INTERN(s_paused_mask, "paused_mask") || INTERN(s_prio, "prio")
        || INTERN(s_requester, "requester") || INTERN(s_idle, "idle") || INTERN(s__msgs, "_msgs")
        || INTERN(s_qp, "qp") || INTERN(s_sq, "sq") || INTERN(s_next_t, "next_t")
        || INTERN(s_port_next, "port_next") || INTERN(s_slack, "slack")
        || INTERN(s_mask, "mask") || INTERN(s_next_expiry, "next_expiry")
        || INTERN(s_values, "values") || INTERN(s_step, "step") || INTERN(s_STEP, "STEP")
        || INTERN(s_running, "running") || INTERN(s_lock, "lock") || INTERN(s_acquire, "acquire")
        || INTERN(s_release, "release") || INTERN(s_wakeups, "wakeups")
        || INTERN(s_rx_stamps, "rx_stamps") || INTERN(s_grid, "grid") || INTERN(s_wake_r, "wake_r")
        || INTERN(s_select, "select") || INTERN(s_monotonic, "monotonic"))
        return NULL;
    if ((ZERO = PyLong_FromLong(0)) == NULL || (ONE = PyLong_FromLong(1)) == NULL
        || (F_ZERO = PyFloat_FromDouble(0.0)) == NULL || (F_WAKE = PyFloat_FromDouble(0.05)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
