/* The fidelity guard's LagMeter.record (emucore/fidelity.py) in C, for the NIC's compiled
 * stages (traffic/fast/nictx.c: the pacer's record per data frame; traffic/fast/nicrx.c:
 * each stamped frame's "rx" wait and a CNP's): an action due at `due` happened at `done`
 * (lab seconds); lag = meter.td.model_time(done - due) = (done - due) / td.tdf; count += 1;
 * hist[0] += 1 when the lag is <= 0, else hist[1 + bisect_left(BUCKET_EDGES, lag)] += 1
 * and max_s / worst_what follow the largest lag. Inline only for a meter of exactly
 * LagMeter (a __slots__ class: read and written through its slots, as getattr / setattr
 * would) whose td is exactly a TimeDilation with a positive number as tdf
 * (`lagrec_inline`); any other meter gets its own record method called (`lagrec_call`).
 * Needs Python.h and structmember.h first. Issue 30; tests/unit/test_fast_nictx.py and
 * test_fast_nicrx.py hold the NIC stages equal to the Python with a LagMeter. */
#ifndef EMU_LAGREC_H
#define EMU_LAGREC_H

enum { LAGREC_COUNT, LAGREC_HIST, LAGREC_MAX_S, LAGREC_WORST_WHAT, LAGREC_TD, LAGREC_N };

typedef struct {
    PyObject *meter_type, *td_type, *s_tdf, *s_record; /* LagMeter, TimeDilation */
    PyObject *names[LAGREC_N];                         /* the slots' names */
    Py_ssize_t off[LAGREC_N];                          /* and their offsets */
    double *edges;                                     /* BUCKET_EDGES */
    Py_ssize_t n_edges;
} LagRec;

static PyObject *lagrec_attr_of(const char *module, const char *name)
{
    PyObject *m = PyImport_ImportModule(module), *v = m ? PyObject_GetAttrString(m, name) : NULL;
    Py_XDECREF(m);
    return v;
}

/* Binds `L` once (a module's static LagRec): 0, -1 an error. */
static int lagrec_bind(LagRec *L)
{
    static const char *const names[LAGREC_N] = {"count", "hist", "max_s", "worst_what", "td"};
    PyObject *edges = NULL;
    int rc = -1;
    if (L->meter_type != NULL)
        return 0;
    PyObject *mt = lagrec_attr_of("emucore.fidelity", "LagMeter");
    PyObject *tt = mt ? lagrec_attr_of("emucore.timedil", "TimeDilation") : NULL;
    if (tt == NULL || (edges = lagrec_attr_of("emucore.fidelity", "BUCKET_EDGES")) == NULL)
        goto out;
    if (!PyType_Check(mt) || !PyType_Check(tt) || !PyTuple_Check(edges)) {
        PyErr_SetString(PyExc_TypeError, "lagrec: LagMeter / TimeDilation classes and a "
                                         "BUCKET_EDGES tuple are required");
        goto out;
    }
    if ((L->s_tdf = PyUnicode_InternFromString("tdf")) == NULL
        || (L->s_record = PyUnicode_InternFromString("record")) == NULL)
        goto out;
    for (int i = 0; i < LAGREC_N; i++) {
        if ((L->names[i] = PyUnicode_InternFromString(names[i])) == NULL)
            goto out;
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)mt)->tp_dict, L->names[i]);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "LagMeter.%s: a __slots__ member is required", names[i]);
            goto out;
        }
        L->off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(edges);
    double *e = PyMem_Calloc((size_t)n + 1, sizeof *e);
    if (e == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyFloat_CheckExact(PyTuple_GET_ITEM(edges, i))) {
            PyMem_Free(e);
            PyErr_SetString(PyExc_TypeError, "emucore.fidelity.BUCKET_EDGES: floats required");
            goto out;
        }
        e[i] = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(edges, i));
    }
    L->edges = e;
    L->n_edges = n;
    L->meter_type = Py_NewRef(mt);
    L->td_type = Py_NewRef(tt);
    rc = 0;
out:
    Py_XDECREF(mt);
    Py_XDECREF(tt);
    Py_XDECREF(edges);
    return rc;
}

/* Slot `i` of an exact LagMeter, a new reference (an unset slot: AttributeError). */
static PyObject *lagrec_get(LagRec *L, PyObject *m, int i)
{
    PyObject *v = *(PyObject **)((char *)m + L->off[i]);
    if (v == NULL)
        PyErr_SetObject(PyExc_AttributeError, L->names[i]);
    return Py_XNewRef(v);
}

/* Slot `i` of an exact LagMeter set to `v` (borrowed). */
static void lagrec_set(LagRec *L, PyObject *m, int i, PyObject *v)
{
    Py_XSETREF(*(PyObject **)((char *)m + L->off[i]), Py_NewRef(v));
}

/* `o += 1` (o: a new reference, replaced by the sum), as the Python's += on any number. */
static int lagrec_incr(PyObject **o)
{
    static PyObject *one;
    if (one == NULL && (one = PyLong_FromLong(1)) == NULL)
        return -1;
    PyObject *y = PyNumber_InPlaceAdd(*o, one);
    if (y == NULL)
        return -1;
    Py_SETREF(*o, y);
    return 0;
}

/* Whether `meter`'s record can run inline, and its TDF into *tdf: 1 yes, 0 no (call its
 * record method), -1 an error. */
static int lagrec_inline(LagRec *L, PyObject *meter, double *tdf)
{
    if (Py_TYPE(meter) != (PyTypeObject *)L->meter_type)
        return 0;
    PyObject *td = lagrec_get(L, meter, LAGREC_TD), *t = NULL;
    int rc = -1;
    if (td == NULL)
        return -1;
    if (Py_TYPE(td) != (PyTypeObject *)L->td_type) {
        rc = 0;
        goto out;
    }
    if ((t = PyObject_GetAttr(td, L->s_tdf)) == NULL)
        goto out;
    if (PyFloat_CheckExact(t))
        *tdf = PyFloat_AS_DOUBLE(t);
    else if (PyLong_CheckExact(t)) {
        if ((*tdf = PyLong_AsDouble(t)) == -1.0 && PyErr_Occurred())
            goto out;
    } else {
        rc = 0;
        goto out;
    }
    rc = *tdf > 0.0;
out:
    Py_DECREF(td);
    Py_XDECREF(t);
    return rc;
}

/* LagMeter.record(due, done, what) inline for a meter lagrec_inline accepted (with its
 * `tdf`): 0, -1 an error. */
static int lagrec_record(LagRec *L, PyObject *m, double tdf, double due, double done, PyObject *what)
{
    double lag = (done - due) / tdf;
    Py_ssize_t i = 0;
    PyObject *x = lagrec_get(L, m, LAGREC_COUNT), *hist = NULL, *k = NULL, *v = NULL;
    int rc = -1;
    if (x == NULL || lagrec_incr(&x) < 0)
        goto out;
    lagrec_set(L, m, LAGREC_COUNT, x);
    int late = !(lag <= 0.0); /* the Python's `if lag <= 0.0` (a NaN is late) */
    if (late) { /* 1 + bisect_left(BUCKET_EDGES, lag) */
        Py_ssize_t lo = 0, hi = L->n_edges;
        while (lo < hi) {
            Py_ssize_t mid = (lo + hi) / 2;
            if (L->edges[mid] < lag)
                lo = mid + 1;
            else
                hi = mid;
        }
        i = 1 + lo;
    }
    if ((hist = lagrec_get(L, m, LAGREC_HIST)) == NULL || (k = PyLong_FromSsize_t(i)) == NULL
        || (v = PyObject_GetItem(hist, k)) == NULL || lagrec_incr(&v) < 0
        || PyObject_SetItem(hist, k, v) < 0)
        goto out;
    if (late) {
        Py_CLEAR(v);
        if ((v = lagrec_get(L, m, LAGREC_MAX_S)) == NULL)
            goto out;
        double mx = PyFloat_AsDouble(v); /* `lag > self.max_s`: a float, as the Python keeps */
        if (mx == -1.0 && PyErr_Occurred())
            goto out;
        if (lag > mx) {
            Py_SETREF(v, PyFloat_FromDouble(lag));
            if (v == NULL)
                goto out;
            lagrec_set(L, m, LAGREC_MAX_S, v);
            lagrec_set(L, m, LAGREC_WORST_WHAT, what);
        }
    }
    rc = 0;
out:
    Py_XDECREF(x);
    Py_XDECREF(hist);
    Py_XDECREF(k);
    Py_XDECREF(v);
    return rc;
}

/* meter.record(due, done, what) through its method (a meter lagrec_inline refused). */
static int lagrec_call(LagRec *L, PyObject *meter, PyObject *due, PyObject *done, PyObject *what)
{
    PyObject *a[4] = {meter, due, done, what};
    PyObject *r = PyObject_VectorcallMethod(L->s_record, a, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

#endif
