/* The compiled poll loop (included by pipeline.c, after its stages): switch_agent.serve's
 * loop for the data ports, on their rings (ring.h), until Python has something to do.
 *
 * One wait per wake-up (epoll_pwait2 on Python's own epoll set, a nanosecond timeout);
 * on waking, every ready RX slot of every readable port is run through on_frame; then
 * the timers and service run, the frames written into the TX rings, each ring kicked once.
 * Returns to Python (SERVE_*) for: one of Python's descriptors readable (control socket,
 * netlink, a port without a ring), Python's own deadline (LLDP, its control frames, a
 * route reload), events to write or watchdog events to note, frames left for Python to
 * send, a signal. A frame C does not handle (MISS_*: a flow to decide, an expired TTL,
 * LLDP) goes to `punt(port, frame, now, miss)` at once, as serve hands it to on_frame.
 *
 * Deadlines on a grid: the next wake-up is rounded up to a multiple of `grid` seconds of
 * the monotonic clock (set_grid; switch_agent.fastagent.GRID_FRACTION of the fidelity
 * guard's bound), so deadlines close together share one wake-up.
 */
#include <sys/epoll.h>

enum { SERVE_PYTHON, SERVE_DEADLINE, SERVE_EVENTS, SERVE_SENT, SERVE_SIGNAL };
#define SERVE_EVENTS_MAX 32
#define RX_BUDGET 64 /* frames read from one ring per wake-up (serve.RX_BUDGET) */

/* open_ring(i): PACKET_MMAP rings on port i's socket (set_fd); OSError if refused */
static PyObject *Pipeline_open_ring(Pipeline *P, PyObject *args) {
    int i;
    if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    if (p->fd < 0 || p->ring.map != NULL) {
        PyErr_SetString(PyExc_ValueError, "open_ring: no socket, or a ring already");
        return NULL;
    }
    if (ring_open(&p->ring, p->fd) < 0) return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* ring_send(i, frame): one frame of Python's (LLDP) into port i's TX ring, kicked at once
 * on its own (a socket with a TX ring sends only from it; C's frames not yet kicked go
 * first, port_kick); OSError as the socket's send: ENOBUFS when the ring is full or the
 * driver refused it, the errno of a failed kick (EAGAIN: a partial one); Python counts
 * it (Agent.flush), so it is taken back out of the ring uncounted here */
static PyObject *Pipeline_ring_send(Pipeline *P, PyObject *args) {
    int i;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "iy*", &i, &b)) return NULL;
    Port *p = port_arg(P, i);
    int err = p == NULL ? -2 : p->ring.map == NULL ? -3 : ENOBUFS;
    if (err == ENOBUFS) {
        EVP = P;
        port_kick(P, p, i, P->monotonic ? monotonic_s() : EVNOW);
        if (ring_tx(&p->ring, b.buf, (size_t)b.len) == 0) {
            err = ring_kick(&p->ring, p->fd);
            if (ring_unsent(&p->ring)) {
                ring_unwrite(&p->ring, 1);
                if (!err) err = EAGAIN;
            } else err = 0;
        }
    }
    Py_ssize_t n = b.len;
    PyBuffer_Release(&b);
    if (err == -2) return NULL;
    if (err == -3) { PyErr_SetString(PyExc_ValueError, "ring_send: no ring"); return NULL; }
    if (err) { errno = err; return PyErr_SetFromErrno(PyExc_OSError); }
    return PyLong_FromSsize_t(n);
}

/* set_grid(seconds): the step next wake-ups are rounded up to (0: none) */
static PyObject *Pipeline_set_grid(Pipeline *P, PyObject *args) {
    double g;
    if (!PyArg_ParseTuple(args, "d", &g)) return NULL;
    P->grid = g > 0 ? g : 0.0;
    Py_RETURN_NONE;
}

/* serve.discard: a switch that is down drops what still arrives */
static void discard(Port *p, Py_ssize_t n) {
    p->rx_packets++;
    p->rx_bytes += n;
    port_drop(p, D_SWITCH_DOWN);
}

/* Up to RX_BUDGET frames from port i's RX ring through on_frame (or discard); -1: error */
static int ring_drain(Pipeline *P, int i, double now, int up, PyObject *punt) {
    Port *p = &P->ports[i];
    for (int k = 0; k < RX_BUDGET; k++) {
        struct tpacket2_hdr *h = ring_rx(&p->ring);
        if (h == NULL) break;
        Py_ssize_t n = h->tp_snaplen;
        P->ring_frames++;
        if (!up) { discard(p, n); ring_rx_done(&p->ring, h); continue; }
        PyObject *frame = PyBytes_FromStringAndSize((const char *)h + h->tp_mac, n);
        ring_rx_done(&p->ring, h);
        if (frame == NULL) return -1;
        EVP = P; EVNOW = now;
        int r = on_frame(P, i, frame, now);
        if (r > 0) { /* a MISS_*: the Python half takes it */
            PyObject *x = PyObject_CallFunction(punt, "iOdi", i, frame, now, r);
            Py_XDECREF(x);
            if (x == NULL) r = -1;
        }
        Py_DECREF(frame);
        if (r < 0) return -1;
    }
    return 0;
}

/* loop_stats() -> (wake-ups of serve, frames its RX rings gave) */
static PyObject *Pipeline_loop_stats(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    return Py_BuildValue("(LL)", P->wakeups, P->ring_frames);
}

/* serve's recv error: the port went down (ENETDOWN, reported once: it may come back) is
 * counted; reading the error clears it (else the descriptor stays ready) */
static void port_error(Port *p) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == ENETDOWN)
        port_drop(p, D_RX_NETDOWN);
}

static int port_of_fd(Pipeline *P, int fd) {
    for (int i = 0; i < P->nports; i++)
        if (P->ports[i].fd == fd && P->ports[i].ring.map != NULL) return i;
    return -1;
}

#define SERVED(why) Py_BuildValue("(id)", (why), now)

/* serve(epfd, py_deadline, admin_up, punt, wd_events, sent) -> (a SERVE_* reason, the
 * time of its last step) */
static PyObject *Pipeline_serve(Pipeline *P, PyObject *args) {
    int epfd, up;
    double py_deadline;
    PyObject *punt, *wd, *sent;
    if (!PyArg_ParseTuple(args, "idpOO!O!", &epfd, &py_deadline, &up, &punt, &PyList_Type, &wd,
                          &PyList_Type, &sent))
        return NULL;
    struct epoll_event evs[SERVE_EVENTS_MAX];
    for (;;) {
        double now = monotonic_s(), wake = py_deadline, t;
        if (now >= py_deadline) return SERVED(SERVE_DEADLINE);
        EVP = P; EVNOW = now;
        if (up) {
            if (timers(P, now, wd, &t) < 0) return NULL;
            if (t < wake) wake = t;
            if (PyList_GET_SIZE(wd)) return SERVED(SERVE_EVENTS);
        }
        if (service(P, now, sent, &t) < 0) return NULL;
        if (!isnan(t) && t < wake) wake = t;
        for (int i = 0; i < P->nports; i++) port_kick(P, &P->ports[i], i, now);
        if (PyList_GET_SIZE(sent)) return SERVED(SERVE_SENT);
        if (P->ev.len) return SERVED(SERVE_EVENTS);
        struct timespec ts, *tp = NULL;
        if (wake < INFINITY) {
            if (P->grid > 0 && wake < py_deadline) {
                double g = ceil(wake / P->grid) * P->grid;
                wake = g < py_deadline ? g : py_deadline;
            }
            double dt = wake - monotonic_s();
            if (dt < 0) dt = 0;
            ts.tv_sec = (time_t)dt;
            ts.tv_nsec = (long)((dt - (double)ts.tv_sec) * 1e9);
            tp = &ts;
        }
        int n;
        Py_BEGIN_ALLOW_THREADS
        n = epoll_pwait2(epfd, evs, SERVE_EVENTS_MAX, tp, NULL);
        Py_END_ALLOW_THREADS
        if (n < 0) {
            if (errno != EINTR) return PyErr_SetFromErrno(PyExc_OSError);
            if (PyErr_CheckSignals() < 0) return NULL;
            return SERVED(SERVE_SIGNAL);
        }
        now = monotonic_s();
        P->wakeups++;
        int py = 0;
        for (int k = 0; k < n; k++) {
            int i = port_of_fd(P, evs[k].data.fd);
            if (i < 0) { py = 1; continue; }
            if (evs[k].events & EPOLLERR) port_error(&P->ports[i]);
            if (ring_drain(P, i, now, up, punt) < 0) return NULL;
        }
        if (py) return SERVED(SERVE_PYTHON);
        if (P->ev.len) return SERVED(SERVE_EVENTS);
    }
}
