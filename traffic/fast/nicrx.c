/* The NIC's receive loop in C: traffic/nic/datapath.py's Nic.receive, stage by stage under
 * the same names (issue 30), the first stage of the receive path in C.
 *
 * `receive(nic, now)` does what the Python does: up to 256 frames from nic.raw into nic._buf
 * (recvmsg with one SO_TIMESTAMPNS stamp when nic.rx_stamps, else recv), each stamped
 * frame's `arrival` on the monotonic clock (the stamp + now - nic.realtime(), the same float
 * operations in the same order as traffic.nic.wakeup.arrival) recorded by nic.meter.record
 * (its "rx" lag), then nic.on_frame(memoryview(nic._buf)[:n], now) - the Python's on_frame,
 * which does the rest of the frame (counters, PFC, CNP, data, ACK). A would-block read
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

#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35 /* asm-generic/socket.h, as traffic.nic.wakeup */
#endif

#define MAX_FRAMES 256 /* the Python's `while k < 256` */

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

/* Nic.receive(now): the frames the raw socket holds (at most 256); their number, or
 * NotImplemented having changed nothing. */
static PyObject *receive(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *nic, *now, *raw = NULL, *buf = NULL, *meter = NULL, *whole = NULL, *res = NULL;
    double offset = 0.0, t_now;
    int fd = -1, stamped;
    long k = 0;
    (void)mod;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "receive(nic, now) takes 2 arguments");
        return NULL;
    }
    nic = args[0];
    now = args[1];
    if (bind_types() < 0)
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
        if ((meter = PyObject_GetAttr(nic, s_meter)) == NULL) /* self.meter, once a call */
            goto out;
    }
    if ((whole = PyMemoryView_FromObject(buf)) == NULL) /* memoryview(buf), once a call */
        goto out;
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
            PyObject *tt = PyFloat_FromDouble(t);
            int rc = tt == NULL ? -1 : call(meter, s_record, tt, now, s_rx);
            Py_XDECREF(tt);
            if (rc < 0)
                goto out;
        }
        /* self.on_frame(memoryview(buf)[:n], now) */
        PyObject *mv = PySequence_GetSlice(whole, 0, n);
        int rc = mv == NULL ? -1 : call(nic, s_on_frame, mv, now, NULL);
        Py_XDECREF(mv);
        if (rc < 0)
            goto out;
    }
    res = PyLong_FromLong(k);
out:
    Py_XDECREF(whole);
    Py_XDECREF(raw);
    Py_XDECREF(buf);
    Py_XDECREF(meter);
    return res;
}

static PyMethodDef methods[] = {
    {"receive", (PyCFunction)(void (*)(void))receive, METH_FASTCALL,
     "Nic.receive(now) of traffic/nic/datapath.py; the frames read, or NotImplemented having "
     "changed nothing."},
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
    if ((ZERO = PyLong_FromLong(0)) == NULL || (ONE = PyLong_FromLong(1)) == NULL)
        return NULL;
    return PyModule_Create(&module);
}
