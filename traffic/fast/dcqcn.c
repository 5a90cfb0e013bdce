/* DCQCN's notification and reaction points in C: the NIC's per-frame congestion control.
 *
 * Mirrors, under the same names, traffic/dcqcn.py (NotificationPoint.on_ce / forget;
 * ReactionPoint.on_cnp, on_bytes_sent, tick, pace_interval, next_deadline, snapshot,
 * _clamp, _increase); the Python stays the reference and tests/unit/test_fast_dcqcn.py
 * holds the two bit-identical, also under ASan + UBSan. Algorithm: Zhu et al.,
 * "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015 (Rc, Rt, alpha, the
 * timer and byte counter, fast recovery / additive / hyper increase); book ch.11
 * (Figure 11-3); parameters docs/DCQCN_PARAMS.md.
 *
 * Every float operation is the Python's, in its order and with its operands (an int
 * counter times a float rate is the counter converted, then multiplied; `//` is CPython's
 * float floor division; `**` is libm pow, as float_pow), and the build is C11 without
 * FP contraction, so no fused multiply-add changes a rounding. Times are model seconds,
 * rates bit/s, as in the Python. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>
#include <stdint.h>

#define TIME_EPS 1e-12 /* traffic.dcqcn.TIME_EPS */

enum stage { IDLE, FAST_RECOVERY, ADDITIVE, HYPER };
static PyObject *stage_name[4]; /* traffic.dcqcn.Stage's values */
static PyObject *s_cut, *s_increase, *paper; /* "cut", "increase", DcqcnProfile.paper */

/* CPython's float floor division (floatobject.c _float_div_mod), for a positive divisor. */
static double py_floordiv(double vx, double wx)
{
    double mod = fmod(vx, wx), div = (vx - mod) / wx, fd;
    if (mod != 0.0 && ((wx < 0) != (mod < 0)))
        div -= 1.0;
    if (div != 0.0) {
        fd = floor(div);
        if (div - fd > 0.5)
            fd += 1.0;
    } else {
        fd = copysign(0.0, vx / wx);
    }
    return fd;
}

/* int(d) for the event counts of tick; the Python's errors for NaN and infinity, and
 * OverflowError past 2^62 events (where the Python would go on with a big int). */
static int to_count(double d, long long *k)
{
    if (isnan(d)) {
        PyErr_SetString(PyExc_ValueError, "cannot convert float NaN to integer");
        return -1;
    }
    if (!(fabs(d) < 4611686018427387904.0)) {
        PyErr_SetString(PyExc_OverflowError, "tick: more than 2**62 timer events at once");
        return -1;
    }
    *k = (long long)d;
    return 0;
}

/* ---- ReactionPoint ------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    double line_rate, rc, rt, alpha, next_alpha, next_increase;
    long long t, bc, bytes_acc, cnps, cuts, increases;
    char active;
    int stage;
    PyObject *p, *on_rate;
    /* the profile's fields, read once */
    double g, alpha_period, rate_increase_timer, rai, rhai, min_rate;
    long long byte_counter, fast_recovery_steps;
} RP;

static double rp_clamp(RP *s, double rate) /* ReactionPoint._clamp */
{
    double r = rate;
    if (s->min_rate > r)
        r = s->min_rate;
    if (s->line_rate < r)
        r = s->line_rate;
    return r;
}

/* on_rate(at, rc, why) if it is set and rc changed from `old`; `at` the caller's object
 * when it has one (the Python passes its `now` through), else the float `at_f`. */
static int rp_report(RP *s, double old, PyObject *at, double at_f, PyObject *why)
{
    if (s->on_rate == NULL || s->on_rate == Py_None || s->rc == old)
        return 0;
    PyObject *a = at != NULL ? Py_NewRef(at) : PyFloat_FromDouble(at_f);
    PyObject *rc = PyFloat_FromDouble(s->rc), *r = NULL;
    if (a != NULL && rc != NULL)
        r = PyObject_CallFunctionObjArgs(s->on_rate, a, rc, why, NULL);
    Py_XDECREF(a);
    Py_XDECREF(rc);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* ReactionPoint._increase: one rate-increase event that happened at model time `at`. */
static int rp_increase(RP *s, PyObject *at, double at_f)
{
    double old = s->rc;
    long long f = s->fast_recovery_steps;
    long long hi = s->t > s->bc ? s->t : s->bc, lo = s->t < s->bc ? s->t : s->bc;
    s->increases += 1;
    if (hi < f) {
        s->stage = FAST_RECOVERY;
    } else if (lo >= f) {
        s->stage = HYPER;
        s->rt = rp_clamp(s, s->rt + (double)(lo - f + 1) * s->rhai);
    } else {
        s->stage = ADDITIVE;
        s->rt = rp_clamp(s, s->rt + s->rai);
    }
    s->rc = rp_clamp(s, (s->rt + s->rc) / 2);
    return rp_report(s, old, at, at_f, s_increase);
}

/* ReactionPoint.tick: the alpha and rate-increase timers up to `now`. */
static int rp_tick(RP *s, double now)
{
    long long k;
    if (!s->active)
        return 0;
    now += TIME_EPS;
    if (now >= s->next_alpha) {
        if (to_count(py_floordiv(now - s->next_alpha, s->alpha_period), &k) < 0)
            return -1;
        k += 1;
        s->alpha *= pow(1 - s->g, (double)k);
        s->next_alpha += (double)k * s->alpha_period;
    }
    while (now >= s->next_increase) {
        double due = s->next_increase;
        s->next_increase += s->rate_increase_timer;
        s->t += 1;
        if (rp_increase(s, NULL, due) < 0)
            return -1;
        int at_line = s->rc >= s->line_rate && s->rt >= s->line_rate;
        if (at_line && now >= s->next_increase) {
            /* at line rate more events change nothing but the counter: skip them */
            if (to_count(py_floordiv(now - s->next_increase, s->rate_increase_timer), &k) < 0)
                return -1;
            k += 1;
            s->t += k;
            s->increases += k;
            s->next_increase += (double)k * s->rate_increase_timer;
        }
    }
    return 0;
}

static int as_double(PyObject *o, double *d)
{
    *d = PyFloat_AsDouble(o);
    return *d == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static PyObject *RP_tick(RP *s, PyObject *now)
{
    double n;
    if (as_double(now, &n) < 0 || rp_tick(s, n) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *RP_on_cnp(RP *s, PyObject *now)
{
    double n, old;
    if (as_double(now, &n) < 0 || rp_tick(s, n) < 0)
        return NULL;
    s->cnps += 1;
    s->cuts += 1;
    old = s->rt = s->rc;
    s->rc = rp_clamp(s, s->rc * (1 - s->alpha / 2));
    if (rp_report(s, old, now, n, s_cut) < 0)
        return NULL;
    s->alpha = (1 - s->g) * s->alpha + s->g;
    s->t = s->bc = 0;
    s->bytes_acc = 0;
    s->active = 1;
    s->next_alpha = n + s->alpha_period;
    s->next_increase = n + s->rate_increase_timer;
    s->stage = FAST_RECOVERY;
    Py_RETURN_NONE;
}

static PyObject *RP_on_bytes_sent(RP *s, PyObject *const *args, Py_ssize_t nargs)
{
    double n;
    long long nb;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "on_bytes_sent(n, now) takes 2 arguments");
        return NULL;
    }
    nb = PyLong_AsLongLong(args[0]);
    if ((nb == -1 && PyErr_Occurred()) || as_double(args[1], &n) < 0 || rp_tick(s, n) < 0)
        return NULL;
    if (!s->active)
        Py_RETURN_NONE;
    s->bytes_acc += nb;
    while (s->bytes_acc >= s->byte_counter) {
        s->bytes_acc -= s->byte_counter;
        s->bc += 1;
        if (rp_increase(s, args[1], n) < 0)
            return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *RP_pace_interval(RP *s, PyObject *frame_bytes)
{
    if (PyLong_Check(frame_bytes)) {
        long long n = PyLong_AsLongLong(frame_bytes);
        if ((n == -1 && PyErr_Occurred()) || n > (1LL << 50) || n < -(1LL << 50)) {
            PyErr_SetString(PyExc_OverflowError, "pace_interval: frame_bytes out of range");
            return NULL;
        }
        return PyFloat_FromDouble((double)(n * 8) / s->rc);
    }
    double d;
    if (as_double(frame_bytes, &d) < 0)
        return NULL;
    return PyFloat_FromDouble(d * 8 / s->rc);
}

static PyObject *RP_next_deadline(RP *s, PyObject *unused)
{
    (void)unused;
    return PyFloat_FromDouble(s->next_increase < s->next_alpha ? s->next_increase
                                                               : s->next_alpha);
}

static PyObject *RP_snapshot(RP *s, PyObject *unused)
{
    (void)unused;
    return Py_BuildValue("{s:d,s:d,s:d,s:L,s:L,s:O,s:L,s:L}", "rc", s->rc, "rt", s->rt,
                         "alpha", s->alpha, "t", s->t, "bc", s->bc, "stage",
                         stage_name[s->stage], "cnps", s->cnps, "increases", s->increases);
}

/* A profile field as a double / an integer (the Python validated it already). */
static int field_d(PyObject *p, const char *name, double *out)
{
    PyObject *v = PyObject_GetAttrString(p, name);
    int rc = v == NULL ? -1 : as_double(v, out);
    Py_XDECREF(v);
    return rc;
}

static int field_ll(PyObject *p, const char *name, long long *out)
{
    PyObject *v = PyObject_GetAttrString(p, name);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The profile argument, or DcqcnProfile.paper() (the Python's `profile or ...`). */
static PyObject *profile_or_paper(PyObject *profile)
{
    int t = profile == NULL ? 0 : PyObject_IsTrue(profile);
    if (t < 0)
        return NULL;
    return t ? Py_NewRef(profile) : PyObject_CallNoArgs(paper);
}

static PyObject *RP_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *a[2] = {NULL, NULL};
    static char *kwl[] = {"line_rate", "profile", NULL};
    double lr, init;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|O:ReactionPoint", kwl, &a[0], &a[1]))
        return NULL;
    if (as_double(a[0], &lr) < 0)
        return NULL;
    if (!(lr > 0 && isfinite(lr))) {
        PyErr_Format(PyExc_ValueError, "line_rate: must be a positive rate in bit/s, got %R",
                     a[0]);
        return NULL;
    }
    RP *s = (RP *)type->tp_alloc(type, 0);
    if (s == NULL)
        return NULL;
    if ((s->p = profile_or_paper(a[1])) == NULL || field_d(s->p, "g", &s->g) < 0
        || field_d(s->p, "alpha_init", &init) < 0
        || field_d(s->p, "alpha_period", &s->alpha_period) < 0
        || field_d(s->p, "rate_increase_timer", &s->rate_increase_timer) < 0
        || field_d(s->p, "rai", &s->rai) < 0 || field_d(s->p, "rhai", &s->rhai) < 0
        || field_d(s->p, "min_rate", &s->min_rate) < 0
        || field_ll(s->p, "byte_counter", &s->byte_counter) < 0
        || field_ll(s->p, "fast_recovery_steps", &s->fast_recovery_steps) < 0)
        goto fail;
    if (s->min_rate > lr) {
        PyObject *m = PyObject_GetAttrString(s->p, "min_rate");
        if (m != NULL)
            PyErr_Format(PyExc_ValueError, "min_rate: %R is above line_rate %R", m, a[0]);
        Py_XDECREF(m);
        goto fail;
    }
    s->line_rate = s->rc = s->rt = lr;
    s->alpha = init;
    s->next_alpha = s->next_increase = INFINITY;
    s->stage = IDLE;
    s->on_rate = Py_NewRef(Py_None);
    return (PyObject *)s;
fail:
    Py_DECREF(s);
    return NULL;
}

static int RP_traverse(RP *s, visitproc visit, void *arg)
{
    Py_VISIT(s->p);
    Py_VISIT(s->on_rate);
    return 0;
}

static int RP_clear(RP *s)
{
    Py_CLEAR(s->p);
    Py_CLEAR(s->on_rate);
    return 0;
}

static void RP_dealloc(RP *s)
{
    PyObject_GC_UnTrack(s);
    RP_clear(s);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyObject *RP_get_stage(RP *s, void *c)
{
    (void)c;
    return Py_NewRef(stage_name[s->stage]);
}

static PyObject *RP_get_active(RP *s, void *c)
{
    (void)c;
    return PyBool_FromLong(s->active);
}

static int RP_set_active(RP *s, PyObject *v, void *c)
{
    int t = v == NULL ? -1 : PyObject_IsTrue(v);
    (void)c;
    if (t < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "active cannot be deleted");
        return -1;
    }
    s->active = (char)t;
    return 0;
}

static PyGetSetDef RP_getset[] = {
    {"stage", (getter)RP_get_stage, NULL, "the increase stage (traffic.dcqcn.Stage)", NULL},
    {"active", (getter)RP_get_active, (setter)RP_set_active, "timers run (from 1st CNP)",
     NULL},
    {NULL, NULL, NULL, NULL, NULL}};

#define D(f, flags) {#f, T_DOUBLE, offsetof(RP, f), flags, NULL}
#define L(f) {#f, T_LONGLONG, offsetof(RP, f), 0, NULL}
static PyMemberDef RP_members[] = {
    D(line_rate, READONLY), D(rc, 0), D(rt, 0), D(alpha, 0), D(next_alpha, 0),
    D(next_increase, 0), L(t), L(bc), L(bytes_acc), L(cnps), L(cuts), L(increases),
    {"p", T_OBJECT, offsetof(RP, p), READONLY, "the DcqcnProfile"},
    {"on_rate", T_OBJECT, offsetof(RP, on_rate), 0, "on_rate(model time, rc, why) or None"},
    {NULL, 0, 0, 0, NULL}};

static PyMethodDef RP_methods[] = {
    {"on_cnp", (PyCFunction)RP_on_cnp, METH_O, "A CNP arrived at model time now."},
    {"on_bytes_sent", (PyCFunction)(void (*)(void))RP_on_bytes_sent, METH_FASTCALL,
     "on_bytes_sent(n, now): n bytes left on this QP."},
    {"tick", (PyCFunction)RP_tick, METH_O, "Run the timers up to now."},
    {"pace_interval", (PyCFunction)RP_pace_interval, METH_O,
     "Model seconds between two frames of frame_bytes at Rc."},
    {"next_deadline", (PyCFunction)RP_next_deadline, METH_NOARGS, "The next timer event."},
    {"snapshot", (PyCFunction)RP_snapshot, METH_NOARGS, "State for counters and plots."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject RPType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traffic.fast._dcqcn.ReactionPoint",
    .tp_doc = "traffic.dcqcn.ReactionPoint in C: the rate controller of one QP.",
    .tp_basicsize = sizeof(RP),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = RP_new,
    .tp_dealloc = (destructor)RP_dealloc,
    .tp_traverse = (traverseproc)RP_traverse,
    .tp_clear = (inquiry)RP_clear,
    .tp_methods = RP_methods,
    .tp_members = RP_members,
    .tp_getset = RP_getset,
};

/* ---- NotificationPoint -------------------------------------------------------------- */

/* `_last`, QPN -> model time of its last CNP: open addressing, linear probing. */
typedef struct {
    uint64_t key;
    double last;
    char used;
} Slot;

typedef struct {
    PyObject_HEAD
    double cnp_interval;
    long long ce_seen, cnps;
    Slot *tab;
    size_t cap, n; /* cap a power of two, n < cap / 2 */
} NP;

static size_t slot_of(uint64_t key, size_t cap)
{
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static size_t np_find(NP *s, uint64_t key) /* the key's slot, or the empty one it goes in */
{
    size_t i = slot_of(key, s->cap);
    while (s->tab[i].used && s->tab[i].key != key)
        i = (i + 1) & (s->cap - 1);
    return i;
}

static int np_grow(NP *s)
{
    Slot *old = s->tab;
    size_t oc = s->cap;
    s->cap = oc ? oc * 2 : 16;
    s->tab = PyMem_Calloc(s->cap, sizeof(Slot));
    if (s->tab == NULL) {
        s->tab = old;
        s->cap = oc;
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < oc; i++)
        if (old[i].used)
            s->tab[np_find(s, old[i].key)] = old[i];
    PyMem_Free(old);
    return 0;
}

static int as_key(PyObject *o, uint64_t *k)
{
    *k = (uint64_t)PyLong_AsUnsignedLongLong(o);
    return *k == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/* NotificationPoint.on_ce(qpn, now_model): send a CNP? */
static PyObject *NP_on_ce(NP *s, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t q;
    double now;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "on_ce(qpn, now_model) takes 2 arguments");
        return NULL;
    }
    if (as_key(args[0], &q) < 0 || as_double(args[1], &now) < 0)
        return NULL;
    s->ce_seen += 1;
    if (s->cap == 0 && np_grow(s) < 0)
        return NULL;
    size_t i = np_find(s, q);
    if (s->tab[i].used && now - s->tab[i].last < s->cnp_interval - TIME_EPS)
        Py_RETURN_FALSE;
    if (!s->tab[i].used) {
        if (2 * (s->n + 1) > s->cap) {
            if (np_grow(s) < 0)
                return NULL;
            i = np_find(s, q);
        }
        s->tab[i].used = 1;
        s->tab[i].key = q;
        s->n += 1;
    }
    s->tab[i].last = now;
    s->cnps += 1;
    Py_RETURN_TRUE;
}

/* NotificationPoint.forget(qpn): drop it, shifting back the run after it. */
static PyObject *NP_forget(NP *s, PyObject *qpn)
{
    uint64_t q;
    if (as_key(qpn, &q) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return NULL;
        PyErr_Clear(); /* no such QP: the Python's dict.pop(qpn, None) */
        Py_RETURN_NONE;
    }
    if (s->cap == 0)
        Py_RETURN_NONE;
    size_t m = s->cap - 1, i = np_find(s, q), j = i;
    if (!s->tab[i].used)
        Py_RETURN_NONE;
    s->tab[i].used = 0;
    s->n -= 1;
    for (;;) {
        j = (j + 1) & m;
        if (!s->tab[j].used)
            break;
        size_t h = slot_of(s->tab[j].key, s->cap);
        /* move j back into the hole at i unless its home h lies cyclically in (i, j] */
        if (i <= j ? (h <= i || h > j) : (h <= i && h > j)) {
            s->tab[i] = s->tab[j];
            s->tab[j].used = 0;
            i = j;
        }
    }
    Py_RETURN_NONE;
}

/* `_last` as the Python's dict (for tests and debugging). */
static PyObject *NP_get_last(NP *s, void *c)
{
    PyObject *d = PyDict_New();
    (void)c;
    for (size_t i = 0; d != NULL && i < s->cap; i++) {
        if (!s->tab[i].used)
            continue;
        PyObject *k = PyLong_FromUnsignedLongLong(s->tab[i].key);
        PyObject *v = PyFloat_FromDouble(s->tab[i].last);
        if (k == NULL || v == NULL || PyDict_SetItem(d, k, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *NP_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *prof = NULL, *interval = NULL, *p;
    static char *kwl[] = {"profile", "cnp_interval", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:NotificationPoint", kwl, &prof, &interval))
        return NULL;
    if ((p = profile_or_paper(prof)) == NULL)
        return NULL;
    NP *s = (NP *)type->tp_alloc(type, 0);
    int bad = s == NULL
              || (interval != NULL && interval != Py_None ? as_double(interval, &s->cnp_interval)
                                                          : field_d(p, "cnp_interval",
                                                                    &s->cnp_interval)) < 0;
    Py_DECREF(p);
    if (bad) {
        Py_XDECREF(s);
        return NULL;
    }
    return (PyObject *)s;
}

static void NP_dealloc(NP *s)
{
    PyMem_Free(s->tab);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static PyMemberDef NP_members[] = {
    {"cnp_interval", T_DOUBLE, offsetof(NP, cnp_interval), 0, "model s between two CNPs"},
    {"ce_seen", T_LONGLONG, offsetof(NP, ce_seen), 0, "CE-marked packets seen"},
    {"cnps", T_LONGLONG, offsetof(NP, cnps), 0, "CNPs asked for"},
    {NULL, 0, 0, 0, NULL}};

static PyGetSetDef NP_getset[] = {
    {"_last", (getter)NP_get_last, NULL, "QPN -> model time of its last CNP", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyMethodDef NP_methods[] = {
    {"on_ce", (PyCFunction)(void (*)(void))NP_on_ce, METH_FASTCALL,
     "on_ce(qpn, now_model): a CE-marked packet arrived; send a CNP?"},
    {"forget", (PyCFunction)NP_forget, METH_O, "Drop the state of a destroyed QP."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject NPType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "traffic.fast._dcqcn.NotificationPoint",
    .tp_doc = "traffic.dcqcn.NotificationPoint in C: one CNP per QP per cnp_interval.",
    .tp_basicsize = sizeof(NP),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = NP_new,
    .tp_dealloc = (destructor)NP_dealloc,
    .tp_members = NP_members,
    .tp_getset = NP_getset,
    .tp_methods = NP_methods,
};

/* ---- module ------------------------------------------------------------------------- */

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dcqcn",
                                    "DCQCN's reaction and notification points in C "
                                    "(traffic.fast.dcqcn).",
                                    -1, NULL, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__dcqcn(void)
{
    static const char *const names[4] = {"idle", "fast_recovery", "additive", "hyper"};
    PyObject *ref = PyImport_ImportModule("traffic.dcqcn"), *cls = NULL, *m = NULL;
    if (ref == NULL || (cls = PyObject_GetAttrString(ref, "DcqcnProfile")) == NULL
        || (paper = PyObject_GetAttrString(cls, "paper")) == NULL)
        goto out;
    for (int i = 0; i < 4; i++)
        if ((stage_name[i] = PyUnicode_InternFromString(names[i])) == NULL)
            goto out;
    if ((s_cut = PyUnicode_InternFromString("cut")) == NULL
        || (s_increase = PyUnicode_InternFromString("increase")) == NULL
        || PyType_Ready(&RPType) < 0 || PyType_Ready(&NPType) < 0
        || (m = PyModule_Create(&module)) == NULL)
        goto out;
    if (PyModule_AddObjectRef(m, "ReactionPoint", (PyObject *)&RPType) < 0
        || PyModule_AddObjectRef(m, "NotificationPoint", (PyObject *)&NPType) < 0
        || PyModule_AddObject(m, "TIME_EPS", PyFloat_FromDouble(TIME_EPS)) < 0)
        Py_CLEAR(m);
out:
    Py_XDECREF(ref);
    Py_XDECREF(cls);
    return m;
}
