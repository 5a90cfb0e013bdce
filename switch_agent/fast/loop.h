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
 *
 * Arrivals (switch_agent.arrivals, the rules and their reasons): each frame runs at its
 * RX slot's stamp, in arrival order over the ports one wake-up read (`arrival_order`),
 * and after a wake-up that read frames the loop sleeps until `poll_until` (set_poll)
 * without watching any descriptor, then takes what is ready.
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

/* set_poll(seconds): arrivals.poll_step (0: no polling) */
static PyObject *Pipeline_set_poll(Pipeline *P, PyObject *args) {
    double s;
    if (!PyArg_ParseTuple(args, "d", &s)) return NULL;
    P->poll = s > 0 ? s : 0.0;
    Py_RETURN_NONE;
}

/* serve.discard: a switch that is down drops what still arrives */
static void discard(Port *p, Py_ssize_t n) {
    p->rx_packets++;
    p->rx_bytes += n;
    port_drop(p, D_SWITCH_DOWN);
}

typedef struct {
    double t; /* the stamp on the monotonic clock */
    int seq, port;
    struct tpacket2_hdr *h;
} Arrival;

static int arrival_cmp(const void *a, const void *b) {
    const Arrival *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->seq - y->seq;
}

/* Up to RX_BUDGET frames from each ready port's RX ring through on_frame (or discard), as
 * arrivals.arrival_order: by stamp (realtime less `offset`, realtime - monotonic), ties
 * in the order read, each at its stamp clamped into [lo, now]; their slots back to the
 * kernel afterwards. The number of frames, or -1: error. */
static int ring_drain(Pipeline *P, const int *ready, int nready, double lo, double now,
                      double offset, int up, PyObject *punt) {
    Arrival a[nready * RX_BUDGET > 0 ? nready * RX_BUDGET : 1];
    int n = 0;
    for (int r = 0; r < nready; r++) {
        Ring *ring = &P->ports[ready[r]].ring;
        for (unsigned k = 0; k < RX_BUDGET; k++) {
            struct tpacket2_hdr *h = ring_rx_at(ring, k);
            if (h == NULL) break;
            double t = h->tp_sec || h->tp_nsec ? (double)h->tp_sec + h->tp_nsec * 1e-9 - offset : now;
            a[n] = (Arrival){t, n, ready[r], h};
            n++;
        }
    }
    Arrival order[n > 0 ? n : 1];
    memcpy(order, a, sizeof(Arrival) * n);
    qsort(order, n, sizeof(Arrival), arrival_cmp);
    int err = 0;
    for (int k = 0; k < n && !err; k++) {
        Port *p = &P->ports[order[k].port];
        struct tpacket2_hdr *h = order[k].h;
        Py_ssize_t len = h->tp_snaplen;
        double t = order[k].t < lo ? lo : order[k].t > now ? now : order[k].t;
        P->ring_frames++;
        if (!up) { discard(p, len); continue; }
        PyObject *frame = PyBytes_FromStringAndSize((const char *)h + h->tp_mac, len);
        if (frame == NULL) { err = 1; break; }
        EVP = P; EVNOW = t;
        int r = on_frame(P, order[k].port, frame, t);
        if (r > 0) { /* a MISS_*: the Python half takes it */
            PyObject *x = PyObject_CallFunction(punt, "iOdi", order[k].port, frame, t, r);
            Py_XDECREF(x);
            if (x == NULL) r = -1;
        }
        Py_DECREF(frame);
        if (r < 0) err = 1;
    }
    for (int k = 0; k < n; k++) /* each port's slots in their order */
        ring_rx_done(&P->ports[a[k].port].ring, a[k].h);
    return err ? -1 : n;
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
        if (P->poll > 0 && P->polling) { /* arrivals.poll_until, then what is ready */
            double until = now + P->poll < wake ? now + P->poll : wake;
            struct timespec at = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
            static const struct timespec zero = {0, 0};
            Py_BEGIN_ALLOW_THREADS
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
            n = epoll_pwait2(epfd, evs, SERVE_EVENTS_MAX, &zero, NULL);
            Py_END_ALLOW_THREADS
        } else {
            Py_BEGIN_ALLOW_THREADS
            n = epoll_pwait2(epfd, evs, SERVE_EVENTS_MAX, tp, NULL);
            Py_END_ALLOW_THREADS
        }
        P->polling = 0;
        if (n < 0) {
            if (errno != EINTR) return PyErr_SetFromErrno(PyExc_OSError);
            if (PyErr_CheckSignals() < 0) return NULL;
            return SERVED(SERVE_SIGNAL);
        }
        double lo = now; /* the time of the last step (timers, service) */
        now = monotonic_s();
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        double offset = (double)rt.tv_sec + rt.tv_nsec * 1e-9 - now; /* the stamps' clock */
        P->wakeups++;
        int py = 0, ready[SERVE_EVENTS_MAX], nready = 0;
        for (int k = 0; k < n; k++) {
            int i = port_of_fd(P, evs[k].data.fd);
            if (i < 0) { py = 1; continue; }
            if (evs[k].events & EPOLLERR) port_error(&P->ports[i]);
            ready[nready++] = i;
        }
        int got = ring_drain(P, ready, nready, lo, now, offset, up, punt);
        if (got < 0) return NULL;
        P->polling = got > 0;
        if (py) return SERVED(SERVE_PYTHON);
        if (P->ev.len) return SERVED(SERVE_EVENTS);
    }
}
