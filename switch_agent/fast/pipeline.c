/* The switch agent's per-frame pipeline in C: the pure stages of switch_agent.agent.Agent
 * (on_frame, admit, enqueue, service, flush) and the state they run on, mirrored stage by
 * stage under the Python names; the Python stays the reference (docs/DATAPATH.md,
 * tests/unit/test_fast_pipeline.py holds the two equal). No sockets: `service` appends the
 * frames it sends to a list. Configuration and tables come from Python
 * (switch_agent.fast), which refuses anything this file does not implement.
 *
 * Stages (book ch.11, ch.12; Python reference in brackets):
 *   flow cache hit + routed rewrite, switched forwarding  [Agent.on_frame, forward.route_rewrite]
 *   classification by TOS byte                           [Classifier.queue_by_tos / priority_by_tos]
 *   ingress PFC accounting, xOFF / xON                   [pfc.IngressPfc.admit / release, ingress.IngressBuffers]
 *   WRED-ECN with CPython's own Mersenne Twister draws   [wred.wred_decide, ewma_depth, classify.mark_ce]
 *   8 queues strict + DWRR                                [queues.PortQueues, queues.Drr]
 *   shaper and delay line                                 [shaper.Shaper, Agent.service / flush]
 *   received PFC pauses and their expiry                  [maccontrol.MacControl.on_frame, pfc.EgressPause]
 *   pause refresh and the PFC watchdog's poll             [timers.AgentTimers.timers, IngressPfc.tick, PfcWatchdog]
 * Times are lab seconds in doubles, computed in the Python's order (same IEEE results).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ring.h"

#define NQ 8
#define WRED_BIN_BYTES 150000
#define NSOJ 10
static const double SOJOURN_EDGES_US[NSOJ] = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000};
#ifndef FLOW_CACHE_MAX /* a test build may bound it lower (-D, emucore.cbuild defines) */
#define FLOW_CACHE_MAX 65536
#endif

/* on_frame's answers */
enum { HANDLED = 0, MISS_FLOW = 1, MISS_TTL = 2, MISS_LINK_LOCAL = 3 };
/* port drop reasons (Port.drop) */
enum { D_MALFORMED, D_NOT_FOR_US, D_TTL_EXPIRED, D_HEADROOM, D_NO_ROUTE, D_NO_NEIGHBOR,
       D_NO_L2_ENTRY, D_LOSS, D_CORRUPT, D_TEST_HOOK, D_TX_ERROR, D_TX_NOBUFS, D_SWITCH_DOWN, D_RX_NETDOWN, ND_PORT };
static const char *PORT_DROPS[ND_PORT] = {"malformed", "not_for_us", "ttl_expired",
    "headroom_overflow", "no_route", "no_neighbor", "no_l2_entry", "degrade_loss",
    "degrade_corrupt", "test_hook", "tx_error", "tx_nobufs", "switch_down", "rx_netdown"};
/* queue drop reasons (PortQueues.drop) */
enum { QD_FULL, QD_WRED, QD_WATCHDOG, QD_LINK_DOWN, QD_SWITCH_DOWN, ND_QUEUE };
static const char *QUEUE_DROPS[ND_QUEUE] = {"queue_full", "wred", "pfc_watchdog", "link_down",
    "switch_down"};
enum { FORWARD = 0, MARK = 1, DROP = 2 }; /* wred.WredVerdict */
enum { METER_TX, METER_CTRL, METER_REFRESH, METER_WATCHDOG }; /* Port.tx_what, ... */

/* -- CPython's random.Random (MT19937, Modules/_randommodule.c), state handed over ---- */
typedef struct { uint32_t mt[624]; int mti; } Mt;

static uint32_t genrand_uint32(Mt *r) {
    static const uint32_t mag01[2] = {0x0U, 0x9908b0dfU};
    uint32_t y;
    if (r->mti >= 624) {
        int kk;
        for (kk = 0; kk < 624 - 397; kk++) {
            y = (r->mt[kk] & 0x80000000U) | (r->mt[kk + 1] & 0x7fffffffU);
            r->mt[kk] = r->mt[kk + 397] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        for (; kk < 623; kk++) {
            y = (r->mt[kk] & 0x80000000U) | (r->mt[kk + 1] & 0x7fffffffU);
            r->mt[kk] = r->mt[kk + (397 - 624)] ^ (y >> 1) ^ mag01[y & 0x1U];
        }
        y = (r->mt[623] & 0x80000000U) | (r->mt[0] & 0x7fffffffU);
        r->mt[623] = r->mt[396] ^ (y >> 1) ^ mag01[y & 0x1U];
        r->mti = 0;
    }
    y = r->mt[r->mti++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

/* random.Random.random */
static double random_random(Mt *r) {
    uint32_t a = genrand_uint32(r) >> 5, b = genrand_uint32(r) >> 6;
    return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

/* -- queues: a FIFO of entries and a delay line, both ring buffers ------------------ */
typedef struct { PyObject *frame; int ingress; int prio; double queued; } Entry; /* queues.Entry */
typedef struct { Entry *buf; size_t cap, head, len; } Fifo;
typedef struct { double due; PyObject *frame; double model_due; } Line; /* Port.inflight item */
typedef struct { Line *buf; size_t cap, head, len; } LineQ;

static int grow(void **buf, size_t *cap, size_t head, size_t len, size_t size) {
    size_t ncap = *cap ? *cap * 2 : 64;
    char *nb = PyMem_Malloc(ncap * size);
    if (nb == NULL) { PyErr_NoMemory(); return -1; }
    for (size_t i = 0; i < len; i++)
        memcpy(nb + i * size, (char *)*buf + ((head + i) % *cap) * size, size);
    PyMem_Free(*buf);
    *buf = nb;
    *cap = ncap;
    return 0;
}

static int fifo_push(Fifo *f, Entry e) {
    if (f->len == f->cap) {
        if (grow((void **)&f->buf, &f->cap, f->head, f->len, sizeof(Entry)) < 0) return -1;
        f->head = 0;
    }
    f->buf[(f->head + f->len++) % f->cap] = e;
    return 0;
}
static Entry *fifo_head(Fifo *f) { return &f->buf[f->head]; }
static Entry fifo_pop(Fifo *f) {
    Entry e = f->buf[f->head];
    f->head = (f->head + 1) % f->cap;
    f->len--;
    return e;
}
static int line_push(LineQ *l, Line x) {
    if (l->len == l->cap) {
        if (grow((void **)&l->buf, &l->cap, l->head, l->len, sizeof(Line)) < 0) return -1;
        l->head = 0;
    }
    l->buf[(l->head + l->len++) % l->cap] = x;
    return 0;
}

/* queues.Drr: deficit round robin, its active list a ring of at most 8 */
typedef struct {
    long long quantum[NQ], deficit[NQ];
    int topped[NQ];
    int active[NQ], ahead, alen;
} Drr;

/* Drr.activate */
static void drr_activate(Drr *d, int q) { d->active[(d->ahead + d->alen++) % NQ] = q; }
static void drr_rotate(Drr *d) {  /* active.rotate(-1) */
    d->active[(d->ahead + d->alen) % NQ] = d->active[d->ahead];
    d->ahead = (d->ahead + 1) % NQ;
}

/* Drr.pick: charge and return the queue whose head goes next, or -1 if all paused */
static int drr_pick(Drr *d, Fifo *fifo, int paused_mask) {
    int paused_run = 0;
    while (d->alen) {
        int q = d->active[d->ahead];
        if (paused_mask >> q & 1) {
            if (++paused_run >= d->alen) return -1;
            drr_rotate(d);
            continue;
        }
        paused_run = 0;
        if (!d->topped[q]) { d->deficit[q] += d->quantum[q]; d->topped[q] = 1; }
        long long size = PyBytes_GET_SIZE(fifo_head(&fifo[q])->frame);
        if (size <= d->deficit[q]) {
            if (fifo[q].len == 1) {
                d->ahead = (d->ahead + 1) % NQ;
                d->alen--;
                d->deficit[q] = 0;
                d->topped[q] = 0;
            } else {
                d->deficit[q] -= size;
            }
            return q;
        }
        d->topped[q] = 0;
        drr_rotate(d);
    }
    return -1;
}

/* one event for the log (switch_agent.events.EventSink; drained by pipeline.py) */
enum { EV_QDROP, EV_CE_FIRST, EV_WRED, EV_HEADROOM, EV_XOFF, EV_XON, EV_REFRESH, EV_PFC_RX,
       EV_PAUSE_START, EV_PAUSE_END, EV_WD, EV_CNP, EV_WIRE_DROP, EV_TEST_HOOK };
typedef struct { int kind, port, a, b; long long v; double t, x; } Ev;
typedef struct { Ev *buf; size_t len, cap; int failed; } EvList;

static void ev_push(EvList *l, Ev e) {
    if (l->len == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        Ev *n = PyMem_Realloc(l->buf, cap * sizeof(Ev));
        if (n == NULL) { l->failed = 1; return; }
        l->buf = n;
        l->cap = cap;
    }
    l->buf[l->len++] = e;
}

/* queues.PortQueues */
typedef struct {
    Fifo fifo[NQ];
    long long qbytes[NQ], limit[NQ], packets, bytes;
    double avg[NQ];
    int has_wred[NQ], wweight[NQ], wecn[NQ];
    long long wmin[NQ], wmax[NQ];
    double wmax_prob[NQ];
    long long *bin_seen[NQ], *bin_marked[NQ], *bin_dropped[NQ];
    int nbins[NQ];
    int strict[NQ], nstrict, tier_of[NQ]; /* tier: 0 none, 1 weighted, 2 scavenger */
    Drr weighted, scavenger;
    long long enq_packets[NQ], enq_bytes[NQ], deq_packets[NQ], deq_bytes[NQ], marks[NQ],
        max_qbytes[NQ], drops[NQ][ND_QUEUE], sojourn_hist[NQ][NSOJ + 1];
    double sojourn_max[NQ];
    Mt rng;
    int idx; /* its port */
    int noting; EvList events; /* PortQueues.events (noting: note_events was called) */
    long long up_at[NQ], down_at[NQ]; /* the WRED levels watched (LLONG_MAX / -1: none) */
} PortQueues;

typedef struct {
    unsigned char mac[6];
    int vlan; /* -1: none (routed port) */
    double rate_Bps, burst_s, free_at, lost_s; /* shaper.Shaper */
    double delay, eligible_at, pause_next_expiry; /* the last: EgressPause.next_expiry */
    LineQ inflight, ctrl;
    long long rx_packets, rx_bytes, tx_packets, tx_bytes, drops[ND_PORT];
    PortQueues q;
    /* pfc.IngressPfc of this port as an ingress */
    int enabled[NQ], paused[NQ];
    long long held[NQ], max_held[NQ], xoff, xon, drop_above, xoff_sent[NQ], xon_sent[NQ],
        headroom_drops[NQ];
    double refresh_at[NQ], next_refresh, refresh_s;
    PyObject *pause_frames[NQ], *resume_frames[NQ];
    long long pause_tx[NQ], resume_tx[NQ];
    /* pfc.EgressPause: the pauses the peer sent us */
    double model_bps, until[NQ], since[NQ], last_rx[NQ], resumed_at[NQ], paused_s[NQ];
    long long pauses_rx[NQ], resumes_rx[NQ], pfc_rx_frames;
    int pause_mask;
    /* port.Impair: a degraded link's loss and corruption (Port.degrade) */
    int impair;
    double loss, corrupt;
    Mt impair_rng;
    /* watchdog.PfcWatchdog */
    int has_wd, wd_drop_mask, wd_ignore_mask, wd_watched, wd_stormed, wd_action_drop;
    double wd_detect_s, wd_restore_s, wd_cond_since[NQ];
    long long wd_dropped[NQ], wd_storms_detected[NQ], wd_storms_restored[NQ];
    long long refreshes[NQ];
    /* events.EventSink.pauses: Port.paused_logged, EgressPause.expired (prio, time) */
    int paused_logged, nexpired, exp_prio[2 * NQ];
    double exp_t[2 * NQ];
    int fd; /* the port's socket (set_fd): C sends on it itself; -1: frames go to `sent` */
    Ring ring; /* its PACKET_MMAP rings (loop.h's open_ring), when set up */
} Port;



/* flow cache (switch_agent.flowcache): open addressing, key = up to 20 bytes + length */
typedef struct {
    unsigned char key[20], klen, used;
    int port; /* -1: a drop route */
    int drop; /* its PORT_DROPS reason */
    unsigned char l2[14];
    long long packets, bytes;
} Flow;
typedef struct { Flow *slot; size_t cap, count; } FlowTable;

typedef struct {
    PyObject_HEAD
    int nports;
    Port *ports;
    double tdf;
    int qos_on; /* MacControl.qos_on: PFC frames are obeyed */
    unsigned char q_by_tos[256], p_by_tos[256];
    unsigned char (*router_macs)[6]; int nrouter;
    unsigned char (*dlb_macs)[6]; int ndlb;
    uint32_t *local; int nlocal;
    unsigned char (*l2_mac)[6]; int *l2_port; int nl2;
    FlowTable flows[3]; /* FlowCache.fast[6], fast[17], flows */
    long long flushes;
    double wd_period, next_wd; /* Agent.wd_period, next_wd */
    /* fidelity.LagMeter (Agent.meter): lags in model seconds */
    double *edges; int nedges; long long meter_count, *hist; double meter_max;
    int worst_port, worst_kind; /* the worst action's label: port, METER_* (-1: none) */
    int monotonic; /* sent_at = the clock (Agent.clock, time.monotonic), else `now` */
    int *backlog; int nbacklog; int *in_backlog; /* Agent.backlog, insertion-ordered */
    int events_on; EvList ev; /* the events not yet drained */
    double drop_rate; Mt drop_rng; /* testhook.DropHook: its rate and its die */
    double grid; /* loop.h: next wake-ups rounded up to a multiple of it (0: none) */
    double poll; int polling; /* loop.h: arrivals.poll_step (0: none); the last wake-up read frames */
    long long wakeups, ring_frames; /* loop.h: its wake-ups, the frames its RX rings gave */
} Pipeline;

static Pipeline *EVP; /* the pipeline whose stage runs now (stages are not reentrant) */
static double EVNOW; /* and its `now`: the time of its events */

static void emit(int kind, int port, int a, int b, long long v, double t, double x) {
    if (EVP != NULL && EVP->events_on) ev_push(&EVP->ev, (Ev){kind, port, a, b, v, t, x});
}

/* a queue event noted in PortQueues.events */
static void qnote(PortQueues *pq, int kind, int q, int b, long long v, double x) {
    if (pq->noting) ev_push(&pq->events, (Ev){kind, pq->idx, q, b, v, 0.0, x});
}

/* EventSink.queues: write and forget what the port's queues noted, at `now` */
static void sink_queues(PortQueues *pq, double now) {
    for (size_t k = 0; k < pq->events.len; k++) {
        Ev e = pq->events.buf[k];
        emit(e.kind, e.port, e.a, e.b, e.v, now, e.x);
    }
    if (pq->events.failed && EVP != NULL) EVP->ev.failed = 1;
    pq->events.len = 0;
    pq->events.failed = 0;
}

static void backlog_add(Pipeline *P, int i) {
    if (!P->in_backlog[i]) { P->in_backlog[i] = 1; P->backlog[P->nbacklog++] = i; }
}
static void backlog_discard(Pipeline *P, int i) {
    if (!P->in_backlog[i]) return;
    P->in_backlog[i] = 0;
    int k = 0;
    for (int j = 0; j < P->nbacklog; j++) if (P->backlog[j] != i) P->backlog[k++] = P->backlog[j];
    P->nbacklog = k;
}

static uint64_t fnv(const unsigned char *k, int n) {
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < n; i++) { h ^= k[i]; h *= 1099511628211ULL; }
    return h;
}

static Flow *flow_find(FlowTable *t, const unsigned char *key, int klen) {
    if (!t->cap) return NULL;
    size_t i = fnv(key, klen) & (t->cap - 1);
    while (t->slot[i].used) {
        Flow *f = &t->slot[i];
        if (f->klen == klen && memcmp(f->key, key, klen) == 0) return f;
        i = (i + 1) & (t->cap - 1);
    }
    return NULL;
}

/* FlowCache.fast / forward.flow_key: which cache and key a routed frame uses */
static int flow_key(const unsigned char *fr, Py_ssize_t n, unsigned char *key, int *klen) {
    if (fr[14] == 0x45 && (fr[23] == 6 || fr[23] == 17)) {
        int k = (int)(n < 38 ? n - 26 : 12); /* frame[26:38] */
        memcpy(key, fr + 26, k);
        *klen = k;
        return fr[23] == 6 ? 0 : 1;
    }
    int ihl = (fr[14] & 0x0F) * 4, proto = fr[23];
    memcpy(key, fr + 26, 8);
    key[8] = (unsigned char)proto;
    *klen = 9;
    if ((proto == 6 || proto == 17) && n >= 14 + ihl + 4) {
        memcpy(key + 9, fr + 14 + ihl, 4);
        *klen = 13;
    }
    return 2;
}

/* -- the stages -------------------------------------------------------------------- */
static void port_drop(Port *p, int reason) { p->drops[reason]++; } /* Port.drop */

static void queues_drop(PortQueues *pq, int q, int reason, long long n) { /* PortQueues.drop */
    pq->drops[q][reason] += n;
    for (long long k = 0; k < n; k++) qnote(pq, EV_QDROP, q, reason, 0, 0.0);
}

/* PortQueues._levels */
static void queues_levels(PortQueues *pq, int q, long long depth) {
    long long lo = pq->wmin[q], hi = pq->wmax[q];
    pq->up_at[q] = depth < lo ? lo : depth < hi ? hi : LLONG_MAX;
    pq->down_at[q] = depth >= hi ? hi : depth >= lo ? lo : -1;
}

/* PortQueues._crossed: the WRED levels (b: 0 min, 1 max; x: 1 up, 0 down) crossed */
static void queues_crossed(PortQueues *pq, int q, long long before, long long after) {
    long long lv[2] = {pq->wmin[q], pq->wmax[q]};
    for (int j = 0; j < 2; j++) {
        int k = after > before ? j : 1 - j;
        if (before < lv[k] && lv[k] <= after) qnote(pq, EV_WRED, q, k, after, 1.0);
        else if (after < lv[k] && lv[k] <= before) qnote(pq, EV_WRED, q, k, after, 0.0);
    }
    queues_levels(pq, q, after);
}

static int send_ctrl(Port *p, PyObject *frame, double now) { /* Port.send_ctrl */
    double due = now + p->delay;
    Py_INCREF(frame);
    return line_push(&p->ctrl, (Line){due, frame, due});
}

/* pfc.IngressPfc.release + ingress.IngressBuffers.release */
static int release(Pipeline *P, int inp, int prio, long long nbytes, double now) {
    Port *p = &P->ports[inp];
    (void)now;
    if (!p->enabled[prio]) return 0;
    long long h = p->held[prio] - nbytes;
    p->held[prio] = h;
    if (h < p->xon && p->paused[prio]) {
        p->paused[prio] = 0;
        p->xon_sent[prio]++;
        emit(EV_XON, inp, prio, 0, h, now, 0.0);
        p->refresh_at[prio] = INFINITY;
        double m = INFINITY;
        for (int i = 0; i < NQ; i++) if (p->refresh_at[i] < m) m = p->refresh_at[i];
        p->next_refresh = m;
        if (send_ctrl(p, p->resume_frames[prio], now) < 0) return -1;
        p->resume_tx[prio]++;
        backlog_add(P, inp);
    }
    return 0;
}

/* classify.mark_ce: a copy with CE set and the checksum patched (RFC 1624 eqn. 3) */
static PyObject *mark_ce(PyObject *frame) {
    const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(frame);
    int tos = f[15];
    if ((tos & 3) == 0 || (tos & 3) == 3) { Py_INCREF(frame); return frame; }
    int hc = (f[24] << 8) | f[25], m = (f[14] << 8) | tos;
    int s = (~hc & 0xFFFF) + (~m & 0xFFFF) + (m | 3);
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    hc = ~s & 0xFFFF;
    PyObject *out = PyBytes_FromStringAndSize((const char *)f, PyBytes_GET_SIZE(frame));
    if (out == NULL) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    o[15] = (unsigned char)(tos | 3);
    o[24] = (unsigned char)(hc >> 8);
    o[25] = (unsigned char)(hc & 0xFF);
    return out;
}

/* wred.wred_decide */
static int wred_decide(double depth, int ecn, PortQueues *pq, int q, double rand, long long limit) {
    if (depth < (double)pq->wmin[q]) return FORWARD;
    if (depth > (double)limit) return DROP;
    if (depth < (double)pq->wmax[q]) {
        double p = pq->wmax_prob[q] * (depth - (double)pq->wmin[q]) /
                   (double)(pq->wmax[q] - pq->wmin[q]);
        if (rand >= p) return FORWARD;
    }
    return ecn && pq->wecn[q] ? MARK : DROP;
}

/* PortQueues.enqueue: tail drop, WRED, append; steals the caller's reference to *frame
 * only when queued (returns the verdict, -1 on error) */
static int queues_enqueue(PortQueues *pq, int q, PyObject *frame, int ingress, int tos,
                          double now, int prio) {
    long long depth = pq->qbytes[q], n = PyBytes_GET_SIZE(frame), limit = pq->limit[q], b = 0;
    int verdict = FORWARD;
    if (pq->has_wred[q]) {
        b = depth / WRED_BIN_BYTES;
        pq->bin_seen[q][b]++;
    }
    if (depth + n > limit) {
        queues_drop(pq, q, QD_FULL, 1);
        if (pq->has_wred[q]) pq->bin_dropped[q][b]++;
        return DROP;
    }
    Py_INCREF(frame);
    if (pq->has_wred[q]) {
        double seen = (double)depth;
        if (pq->wweight[q]) /* wred.ewma_depth */
            seen = pq->avg[q] = pq->avg[q] + ((double)depth - pq->avg[q]) / (double)(1 << pq->wweight[q]);
        if (seen >= (double)pq->wmin[q]) {
            verdict = wred_decide(seen, tos & 3, pq, q, random_random(&pq->rng), limit);
            if (verdict == DROP) {
                queues_drop(pq, q, QD_WRED, 1);
                pq->bin_dropped[q][b]++;
                Py_DECREF(frame);
                return verdict;
            }
            if (verdict == MARK) {
                PyObject *marked = mark_ce(frame);
                Py_DECREF(frame);
                if (marked == NULL) return -1;
                frame = marked;
                pq->bin_marked[q][b]++;
                if (++pq->marks[q] == 1) qnote(pq, EV_CE_FIRST, q, 0, depth, 0.0);
            }
        }
    }
    Fifo *entries = &pq->fifo[q];
    if (!entries->len) {
        if (pq->tier_of[q] == 1) drr_activate(&pq->weighted, q);
        else if (pq->tier_of[q] == 2) drr_activate(&pq->scavenger, q);
    }
    if (fifo_push(entries, (Entry){frame, ingress, prio, now}) < 0) { Py_DECREF(frame); return -1; }
    long long after = depth + n;
    pq->qbytes[q] = after;
    if (after > pq->max_qbytes[q]) pq->max_qbytes[q] = after;
    pq->packets++;
    pq->bytes += n;
    pq->enq_packets[q]++;
    pq->enq_bytes[q] += n;
    if (after >= pq->up_at[q]) queues_crossed(pq, q, depth, after);
    return verdict;
}

/* Agent.enqueue: WRED + enqueue; a dropped frame releases its ingress bytes. With the
 * test hook's rate above 0, testhook.DropHook first: one draw per frame, before WRED. */
static int agent_enqueue(Pipeline *P, int out, int q, PyObject *frame, int ingress, int tos,
                         double now, int prio) {
    Port *o = &P->ports[out];
    if (P->drop_rate > 0 && random_random(&P->drop_rng) < P->drop_rate) {
        port_drop(o, D_TEST_HOOK);
        emit(EV_TEST_HOOK, out, q, 0, 0, now, 0.0);
        return ingress >= 0 ? release(P, ingress, prio, PyBytes_GET_SIZE(frame), now) : 0;
    }
    int verdict = queues_enqueue(&o->q, q, frame, ingress, tos, now, prio);
    if (verdict < 0) return -1;
    if (o->q.events.len) sink_queues(&o->q, now);
    if (verdict == DROP) {
        if (ingress >= 0) return release(P, ingress, prio, PyBytes_GET_SIZE(frame), now);
        return 0;
    }
    if (o->q.packets == 1) o->eligible_at = now;
    backlog_add(P, out);
    return 0;
}

/* Agent.admit: classify, account at the ingress (PFC), then WRED + enqueue */
static int admit(Pipeline *P, int inp, int out, PyObject *frame, double now) {
    const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(frame);
    Py_ssize_t n = PyBytes_GET_SIZE(frame);
    if (!(f[12] == 8 && f[13] == 0)) return agent_enqueue(P, out, 0, frame, -1, 0, now, 0);
    int tos = f[15], q = P->q_by_tos[tos], prio = P->p_by_tos[tos];
    Port *o = &P->ports[out], *ip = &P->ports[inp];
    if (o->has_wd && (o->wd_drop_mask >> q & 1)) {
        o->wd_dropped[q]++;
        queues_drop(&o->q, q, QD_WATCHDOG, 1);
        if (o->q.events.len) sink_queues(&o->q, now);
        return 0;
    }
    if (ip->enabled[prio]) { /* IngressPfc.admit */
        long long h = ip->held[prio] + n;
        if (h > ip->drop_above) {
            ip->headroom_drops[prio]++;
            port_drop(ip, D_HEADROOM);
            emit(EV_HEADROOM, inp, q, 0, 0, now, 0.0);
            return 0;
        }
        ip->held[prio] = h;
        if (h > ip->max_held[prio]) ip->max_held[prio] = h;
        if (h > ip->xoff && !ip->paused[prio]) { /* XOFF: IngressBuffers.xoff */
            ip->paused[prio] = 1;
            ip->xoff_sent[prio]++;
            emit(EV_XOFF, inp, prio, 0, h, now, 0.0);
            double t = now + ip->refresh_s;
            ip->refresh_at[prio] = t;
            if (t < ip->next_refresh) ip->next_refresh = t;
            if (send_ctrl(ip, ip->pause_frames[prio], now) < 0) return -1;
            ip->pause_tx[prio]++;
            backlog_add(P, inp);
        }
        return agent_enqueue(P, out, q, frame, inp, tos, now, prio);
    }
    return agent_enqueue(P, out, q, frame, -1, tos, now, prio);
}

static int mac_in(unsigned char (*macs)[6], int n, const unsigned char *m) {
    for (int i = 0; i < n; i++) if (memcmp(macs[i], m, 6) == 0) return 1;
    return 0;
}

/* forward.route_rewrite: the routed copy (caller checked TTL > 1) */
static PyObject *route_rewrite(const unsigned char *fr, Py_ssize_t n, const unsigned char *l2) {
    int s = (~((fr[24] << 8) | fr[25]) & 0xFFFF) + 0xFEFF;
    s = (s & 0xFFFF) + (s >> 16);
    PyObject *out = PyBytes_FromStringAndSize((const char *)fr, n);
    if (out == NULL) return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(o, l2, 14);
    o[22] = (unsigned char)(fr[22] - 1);
    o[24] = (unsigned char)((~s >> 8) & 0xFF);
    o[25] = (unsigned char)(~s & 0xFF);
    return out;
}

/* EgressPause._expire */
static void pause_expire(Port *p, double now) {
    for (int k = 0; k < NQ; k++)
        if (p->since[k] >= 0 && p->until[k] <= now) {
            if (EVP != NULL && EVP->events_on && p->nexpired < 2 * NQ) {
                p->exp_prio[p->nexpired] = k;
                p->exp_t[p->nexpired++] = p->until[k];
            }
            p->paused_s[k] += p->until[k] - p->since[k];
            p->resumed_at[k] = p->until[k];
            p->since[k] = -1.0;
            p->until[k] = 0.0;
        }
}

/* EgressPause._recompute */
static void pause_recompute(Port *p) {
    int mask = 0;
    double nxt = INFINITY;
    for (int k = 0; k < NQ; k++)
        if (p->since[k] >= 0) {
            mask |= 1 << k;
            if (p->until[k] < nxt) nxt = p->until[k];
        }
    p->pause_mask = mask;
    p->pause_next_expiry = nxt;
}

/* EgressPause.on_pfc: q > 0 pauses for q x 512 bit times at the model rate (dilated,
 * TimeDilation.pause_lab_s), q = 0 resumes */
static void on_pfc(Pipeline *P, Port *p, int class_enable, const unsigned char *quanta, double now) {
    pause_expire(p, now);
    for (int k = 0; k < NQ; k++) {
        if (!(class_enable >> k & 1)) continue;
        int q = quanta[2 * k] << 8 | quanta[2 * k + 1];
        if (q) {
            p->pauses_rx[k]++;
            p->last_rx[k] = now;
            if (p->since[k] < 0) p->since[k] = now;
            p->until[k] = now + (double)(q * 512) / p->model_bps * P->tdf;
        } else {
            p->resumes_rx[k]++;
            if (p->since[k] >= 0) {
                p->paused_s[k] += now - p->since[k];
                p->since[k] = -1.0;
                p->resumed_at[k] = now;
            }
            p->until[k] = 0.0;
        }
    }
    pause_recompute(p);
}

/* EgressPause.paused_mask (cached until the next expiry) */
static int paused_mask_raw(Port *p, double now) {
    if (!(now < p->pause_next_expiry)) {
        pause_expire(p, now);
        pause_recompute(p);
    }
    return p->pause_mask;
}

/* Port.paused_mask: EgressPause.paused_mask, then what the watchdog ignores */
static int paused_mask(Port *p, double now) {
    int m = paused_mask_raw(p, now);
    return p->has_wd ? m & ~p->wd_ignore_mask : m;
}

/* EventSink.pauses: the log's view of port i's paused egress priorities brought up to date */
static void sink_pauses(Port *p, int i, double now) {
    int mask = paused_mask_raw(p, now), logged = p->paused_logged;
    for (int e = 0; e < p->nexpired; e++) {
        int bit = 1 << p->exp_prio[e];
        if (logged & bit) {
            emit(EV_PAUSE_END, i, p->exp_prio[e], 0, 0, p->exp_t[e], 0.0);
            logged &= ~bit;
        }
    }
    p->nexpired = 0;
    int ignored = p->has_wd ? p->wd_ignore_mask : 0;
    mask &= ~ignored;
    for (int k = 0; mask != logged && k < NQ; k++) {
        int bit = 1 << k;
        if ((mask & bit) && !(logged & bit)) emit(EV_PAUSE_START, i, k, 0, 0, now, p->until[k]);
        else if ((logged & bit) && !(mask & bit))
            emit(EV_PAUSE_END, i, k, ignored & bit ? 2 : 1, 0, now, 0.0);
    }
    p->paused_logged = mask;
}

/* MacControl.on_frame for PFC (0x8808); other link-local frames go back to Python */
static int mac_control(Pipeline *P, int i, const unsigned char *fr, Py_ssize_t n, double now) {
    Port *p = &P->ports[i];
    if (!(fr[12] == 0x88 && fr[13] == 0x08)) return MISS_LINK_LOCAL;
    p->pfc_rx_frames++;
    if (n < 34 || fr[14] != 0x01 || fr[15] != 0x01) return HANDLED; /* pause.parse_pfc */
    for (int k = 0; P->events_on && k < NQ; k++) /* EventSink.pfc_rx */
        if (fr[17] >> k & 1)
            emit(EV_PFC_RX, i, k, 0, fr[18 + 2 * k] << 8 | fr[19 + 2 * k], now, 0.0);
    if (P->qos_on) {
        on_pfc(P, p, fr[17], fr + 18, now);
        if (P->events_on) sink_pauses(p, i, now);
        backlog_add(P, i); /* the paused set changed: re-evaluate the scheduler */
        if (now < p->eligible_at) p->eligible_at = now;
    }
    return HANDLED;
}

/* Agent.on_frame: one received frame (the hot path); HANDLED or a MISS_* for Python */
static int on_frame(Pipeline *P, int i, PyObject *frame, double now) {
    Port *port = &P->ports[i];
    const unsigned char *fr = (const unsigned char *)PyBytes_AS_STRING(frame);
    Py_ssize_t n = PyBytes_GET_SIZE(frame);
    int ipv4 = n >= 14 && fr[12] == 8 && fr[13] == 0;
    if (n < 34 && (n < 14 || ipv4)) {
        port->rx_packets++; port->rx_bytes += n;
        port_drop(port, D_MALFORMED);
        return HANDLED;
    }
    if (mac_in(P->router_macs, P->nrouter, fr)) {
        int dlb = mac_in(P->dlb_macs, P->ndlb, fr);
        if ((memcmp(fr, port->mac, 6) != 0 && !dlb) || !ipv4) {
            port->rx_packets++; port->rx_bytes += n;
            return HANDLED; /* not routed here: the kernel's */
        }
        uint32_t dst;
        memcpy(&dst, fr + 30, 4);
        for (int k = 0; k < P->nlocal; k++)
            if (P->local[k] == dst) { port->rx_packets++; port->rx_bytes += n; return HANDLED; }
        unsigned char key[20];
        int klen, c = flow_key(fr, n, key, &klen);
        Flow *route = flow_find(&P->flows[c], key, klen);
        if (route == NULL) return MISS_FLOW; /* nothing counted: Python decides, then again */
        port->rx_packets++; port->rx_bytes += n;
        if (route->port < 0) { port_drop(port, route->drop); return HANDLED; }
        if (fr[22] <= 1) { port_drop(port, D_TTL_EXPIRED); return MISS_TTL; }
        PyObject *out = route_rewrite(fr, n, route->l2);
        if (out == NULL) return -1;
        route->packets++;
        route->bytes += n;
        int r = admit(P, i, route->port, out, now);
        Py_DECREF(out);
        return r < 0 ? -1 : HANDLED;
    }
    port->rx_packets++; port->rx_bytes += n;
    if (fr[0] == 0x01 && fr[1] == 0x80 && fr[2] == 0xc2) return mac_control(P, i, fr, n, now);
    if (port->vlan < 0) {
        if ((fr[0] & 1) == 0) port_drop(port, D_NOT_FOR_US);
        return HANDLED;
    }
    for (int k = 0; k < P->nl2; k++) {
        if (memcmp(P->l2_mac[k], fr, 6) == 0) {
            int o = P->l2_port[k];
            if (o != i && admit(P, i, o, frame, now) < 0) return -1;
            return HANDLED;
        }
    }
    int prio = ipv4 ? P->p_by_tos[fr[15]] : 0; /* Agent.prio_of */
    for (int k = 0; k < P->nports; k++) /* flood in the VLAN */
        if (k != i && P->ports[k].vlan == port->vlan &&
            agent_enqueue(P, k, 0, frame, -1, 0, now, prio) < 0) return -1;
    return HANDLED;
}

/* PortQueues._pop */
static Entry queues_pop(PortQueues *pq, int q) {
    Entry e = fifo_pop(&pq->fifo[q]);
    long long n = PyBytes_GET_SIZE(e.frame);
    pq->qbytes[q] -= n;
    pq->packets--;
    pq->bytes -= n;
    pq->deq_packets[q]++;
    pq->deq_bytes[q] += n;
    if (pq->qbytes[q] < pq->down_at[q]) queues_crossed(pq, q, pq->qbytes[q] + n, pq->qbytes[q]);
    return e;
}

/* PortQueues.dequeue (no trimmed class: the wrapper refuses trimming); q = -1: none */
static int queues_dequeue(PortQueues *pq, int paused_mask, Entry *e) {
    if (!pq->packets) return -1;
    for (int k = 0; k < pq->nstrict; k++) {
        int q = pq->strict[k];
        if (pq->fifo[q].len && !(paused_mask >> q & 1)) { *e = queues_pop(pq, q); return q; }
    }
    int q = pq->weighted.alen ? drr_pick(&pq->weighted, pq->fifo, paused_mask) : -1;
    if (q < 0 && pq->scavenger.alen) q = drr_pick(&pq->scavenger, pq->fifo, paused_mask);
    if (q < 0) return -1;
    *e = queues_pop(pq, q);
    return q;
}

/* roce.is_cnp: a RoCEv2 CNP (IPv4 without options, UDP 4791, BTH opcode 0x81) */
static int is_cnp(const unsigned char *f, Py_ssize_t n) {
    return 72 <= n && n < 100 && f[42] == 0x81 && f[12] == 8 && f[13] == 0 && f[14] == 0x45 &&
           f[23] == 17 && f[36] == 0x12 && f[37] == 0xB7;
}

/* PortQueues.note_sojourn */
static void note_sojourn(PortQueues *pq, int q, double us) {
    if (us > pq->sojourn_max[q]) pq->sojourn_max[q] = us;
    int b = 0;
    while (b < NSOJ && SOJOURN_EDGES_US[b] <= us) b++; /* bisect_right */
    pq->sojourn_hist[q][b]++;
}

/* LagMeter.record: an action due at `due` done at `done` (lab s) */
static void record(Pipeline *P, double due, double done, int port, int kind) {
    if (P->hist == NULL) return; /* no meter set */
    double lag = (done - due) / P->tdf; /* TimeDilation.model_time */
    P->meter_count++;
    if (lag <= 0.0) { P->hist[0]++; return; }
    int lo = 0, hi = P->nedges; /* bisect.bisect_left(BUCKET_EDGES, lag) */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (P->edges[mid] < lag) lo = mid + 1;
        else hi = mid;
    }
    P->hist[1 + lo]++;
    if (lag > P->meter_max) { P->meter_max = lag; P->worst_port = port; P->worst_kind = kind; }
}

static double monotonic_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Agent.queue_of: the egress queue the event log names for a frame lost on the wire */
static int queue_of(Pipeline *P, const unsigned char *f, Py_ssize_t n) {
    return n > 15 && f[12] == 8 && f[13] == 0 ? P->q_by_tos[f[15]] : 0;
}

/* Kick port idx's TX ring. The frames the kernel left in it (ring_unsent) are taken out
 * and dropped as the per-frame send drops a frame the kernel refuses (Agent.flush,
 * FastAgent.send): tx_nobufs for ENOBUFS, tx_error for any other errno (a partial send:
 * EAGAIN, the send buffer), no longer counted sent, logged if data (not MAC control:
 * PFC). Dropped, not kept to retry: what refused them (no carrier, the peer's backlog
 * full, the port down) holds for the frames behind too, a retry would wake the loop on
 * its own until the link is back and then send stale frames, and the reference drops. */
static void port_kick(Pipeline *P, Port *p, int idx, double now) {
    if (!p->ring.pending) return;
    int err = ring_kick(&p->ring, p->fd);
    unsigned n = ring_unsent(&p->ring);
    int reason = err == ENOBUFS ? D_TX_NOBUFS : D_TX_ERROR;
    for (unsigned k = n; k > 0; k--) { /* oldest first */
        struct tpacket2_hdr *h = ring_tx_slot(&p->ring, p->ring.tx_head + RING_TX - k);
        const unsigned char *f = (const unsigned char *)h + RING_TX_DATA;
        Py_ssize_t len = h->tp_len;
        port_drop(p, reason);
        p->tx_packets--;
        p->tx_bytes -= len;
        if (len < 3 || f[0] != 0x01 || f[1] != 0x80 || f[2] != 0xc2)
            emit(EV_WIRE_DROP, idx, queue_of(P, f, len), reason, 0, now, 0.0);
    }
    ring_unwrite(&p->ring, n);
}

/* ring_tx, kicking the ring once when it is full of frames not yet kicked (QDISC_BYPASS:
 * the kick hands them to the driver at once, their slots come back) */
static int port_put(Pipeline *P, Port *p, int idx, const unsigned char *f, size_t n, double now) {
    if (ring_tx(&p->ring, f, n) == 0) return 0;
    if (!p->ring.pending) return -1;
    port_kick(P, p, idx, now);
    return ring_tx(&p->ring, f, n);
}

static int line_flush(Pipeline *P, Port *p, LineQ *line, PyObject *sent, int idx, double now,
                      double *nxt, int kind) {
    double sent_at = NAN;
    while (line->len) {
        Line *x = &line->buf[line->head];
        if (x->due > now) {
            if (isnan(*nxt) || x->due < *nxt) *nxt = x->due;
            break;
        }
        PyObject *frame = x->frame;
        double model_due = x->model_due;
        line->head = (line->head + 1) % line->cap;
        line->len--;
        if (p->impair && kind == METER_TX) { /* Impair.verdict (no LLR: refused) */
            double r = random_random(&p->impair_rng);
            if (r < p->loss || r < p->loss + p->corrupt) {
                port_drop(p, r < p->loss ? D_LOSS : D_CORRUPT);
                const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(frame);
                int ip = PyBytes_GET_SIZE(frame) > 15 && f[12] == 8 && f[13] == 0;
                emit(EV_WIRE_DROP, idx, ip ? P->q_by_tos[f[15]] : 0, /* Agent.queue_of */
                     r < p->loss ? D_LOSS : D_CORRUPT, 0, now, 0.0);
                Py_DECREF(frame);
                continue;
            }
        }
        Py_ssize_t n = PyBytes_GET_SIZE(frame);
        if (p->fd >= 0) { /* Agent.flush's send: an error drops the frame (logged if data) */
            const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(frame);
            int failed = p->ring.map != NULL ? port_put(P, p, idx, f, (size_t)n, now) < 0
                                             : send(p->fd, f, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0;
            if (failed) {
                int reason = p->ring.map != NULL || errno == ENOBUFS ? D_TX_NOBUFS : D_TX_ERROR;
                port_drop(p, reason);
                if (kind == METER_TX)
                    emit(EV_WIRE_DROP, idx, queue_of(P, f, n), reason, 0, now, 0.0);
            }
            Py_DECREF(frame);
            if (failed) continue;
        } else {
            PyObject *t = PyTuple_New(2), *port = PyLong_FromLong(idx);
            if (t == NULL || port == NULL) { Py_XDECREF(t); Py_XDECREF(port); Py_DECREF(frame); return -1; }
            PyTuple_SET_ITEM(t, 0, port);
            PyTuple_SET_ITEM(t, 1, frame); /* the line's reference */
            int r = PyList_Append(sent, t);
            Py_DECREF(t);
            if (r < 0) return -1;
        }
        p->tx_packets++;
        p->tx_bytes += n;
        if (isnan(sent_at)) sent_at = P->monotonic ? monotonic_s() : now;
        record(P, model_due, sent_at, idx, kind);
    }
    return 0;
}

/* Agent.flush: control frames, then frames whose arrival time has come; next due (NAN: none) */
static int flush(Pipeline *P, Port *p, PyObject *sent, int idx, double now, double *nxt) {
    *nxt = NAN;
    if (line_flush(P, p, &p->ctrl, sent, idx, now, nxt, METER_CTRL) < 0) return -1;
    return line_flush(P, p, &p->inflight, sent, idx, now, nxt, METER_TX);
}

/* Shaper.book: book n bytes at now for a port eligible since eligible_at; the booked
 * start (returned) and the model start (*model): max(free_at, eligible_at) when both are
 * before now, else max(free_at, now); the booking starts there too unless that is more
 * than burst_s before now (then at now, and now - model start is lost: lost_s) */
static double shaper_book(Port *p, Py_ssize_t n, double now, double *model) {
    double free = p->free_at, start;
    if (now > free && now > p->eligible_at) { /* booked late: the wire sat idle */
        *model = free > p->eligible_at ? free : p->eligible_at;
        if (now - *model <= p->burst_s) {
            start = *model;
        } else {
            start = now;
            p->lost_s += now - *model;
        }
    } else {
        *model = start = free > now ? free : now;
    }
    p->free_at = start + (double)n / p->rate_Bps;
    return start;
}

/* Agent.service: queue -> shaper -> delay line -> wire; next wake (NAN: none) */
static int service(Pipeline *P, double now, PyObject *sent, double *wake) {
    *wake = NAN;
    double us = 1e6 / P->tdf;
    int snap[P->nbacklog > 0 ? P->nbacklog : 1], nsnap = P->nbacklog;
    int done[P->nbacklog > 0 ? P->nbacklog : 1], ndone = 0;
    memcpy(snap, P->backlog, sizeof(int) * nsnap);
    for (int s = 0; s < nsnap; s++) {
        Port *p = &P->ports[snap[s]];
        PortQueues *pq = &p->q;
        int blocked = 0;
        if (pq->packets) {
            int mask = paused_mask(p, now);
            if (p->nexpired) sink_pauses(p, snap[s], now); /* in the log at its expiry */
            while (pq->packets && p->free_at - now <= p->burst_s) { /* Shaper.can_send */
                Entry e;
                int q = queues_dequeue(pq, mask, &e);
                if (q < 0) { blocked = 1; break; }
                if (pq->events.len) sink_queues(pq, now);
                Py_ssize_t n = PyBytes_GET_SIZE(e.frame);
                if (e.ingress >= 0 && release(P, e.ingress, e.prio, n, now) < 0) {
                    Py_DECREF(e.frame);
                    return -1;
                }
                double start;
                double booked = shaper_book(p, n, now, &start);
                double due = p->free_at + p->delay;
                double model_due = booked != start ? due - booked + start : due;
                if (line_push(&p->inflight, (Line){due, e.frame, model_due}) < 0) {
                    Py_DECREF(e.frame);
                    return -1;
                }
                double wait = start > e.queued ? (start - e.queued) * us : 0.0;
                note_sojourn(pq, q, wait);
                const unsigned char *f = (const unsigned char *)PyBytes_AS_STRING(e.frame);
                if (n < 100 && is_cnp(f, n)) emit(EV_CNP, snap[s], q, 0, 0, now, wait);
            }
        }
        double t;
        if (flush(P, p, sent, snap[s], now, &t) < 0) return -1;
        if (pq->packets) {
            double r;
            if (blocked) r = p->eligible_at = p->pause_next_expiry;
            else r = p->free_at - p->burst_s; /* Shaper.ready_at */
            if (isnan(t) || r < t) t = r;
        }
        if (isnan(t)) done[ndone++] = snap[s];
        else if (isnan(*wake) || t < *wake) *wake = t;
    }
    for (int k = 0; k < ndone; k++) backlog_discard(P, done[k]);
    return 0;
}

/* Drr.deactivate: queue q was emptied from outside (flush) */
static void drr_deactivate(Drr *d, int q) {
    int k = 0, kept[NQ];
    for (int j = 0; j < d->alen; j++) {
        int x = d->active[(d->ahead + j) % NQ];
        if (x != q) kept[k++] = x;
    }
    for (int j = 0; j < k; j++) d->active[j] = kept[j];
    d->ahead = 0;
    d->alen = k;
    d->deficit[q] = 0;
    d->topped[q] = 0;
}

/* PortQueues.flush + IngressBuffers.release_entries: drop every frame queued in q
 * (the PFC watchdog, a link or the switch down) and release their ingress accounting;
 * how many */
static long long queues_flush(Pipeline *P, Port *p, int q, int reason, double now, int log) {
    PortQueues *pq = &p->q;
    Fifo *f = &pq->fifo[q];
    long long n = (long long)f->len;
    if (!n) return 0;
    if (pq->tier_of[q] == 1) drr_deactivate(&pq->weighted, q);
    else if (pq->tier_of[q] == 2) drr_deactivate(&pq->scavenger, q);
    pq->packets -= n;
    pq->bytes -= pq->qbytes[q];
    long long before = pq->qbytes[q];
    pq->qbytes[q] = 0;
    queues_drop(pq, q, reason, n);
    if (pq->noting && pq->has_wred[q]) queues_crossed(pq, q, before, 0);
    if (log && pq->events.len) sink_queues(pq, now); /* Python's timers do; AgentAdmin's do not */
    int err = 0;
    while (f->len) {
        Entry e = fifo_pop(f);
        if (!err && e.ingress >= 0 && release(P, e.ingress, e.prio, PyBytes_GET_SIZE(e.frame), now) < 0)
            err = 1;
        Py_DECREF(e.frame);
    }
    return err ? -1 : n;
}

/* PortQueues.backlog_mask */
static int backlog_mask(PortQueues *pq) {
    int m = 0;
    for (int q = 0; q < NQ; q++) if (pq->fifo[q].len) m |= 1 << q;
    return m;
}

/* PfcWatchdog.check: detection and restoration at `now`; the events (kind 1 storm,
 * 0 restore, and the priority) in ev, how many */
static int wd_check(Port *p, double now, int paused, int backlog, int *ev_kind, int *ev_prio) {
    int cond = paused & backlog & p->wd_watched & ~p->wd_stormed, n = 0, any = 0;
    for (int k = 0; k < NQ; k++) if (p->wd_cond_since[k] >= 0) any = 1;
    if (!(cond || p->wd_stormed || any)) return 0;
    for (int k = 0; k < NQ; k++) {
        int bit = 1 << k;
        if (p->wd_stormed & bit) {
            if (now - p->last_rx[k] >= p->wd_restore_s) {
                p->wd_stormed &= ~bit;
                p->wd_drop_mask &= ~bit;
                p->wd_ignore_mask &= ~bit;
                p->wd_storms_restored[k]++;
                ev_kind[n] = 0; ev_prio[n++] = k;
            }
        } else if (cond & bit) {
            if (p->wd_cond_since[k] < 0) {
                p->wd_cond_since[k] = now;
            } else if (now - p->wd_cond_since[k] >= p->wd_detect_s) {
                p->wd_cond_since[k] = -1.0;
                p->wd_stormed |= bit;
                if (p->wd_action_drop) p->wd_drop_mask |= bit;
                else p->wd_ignore_mask |= bit;
                p->wd_storms_detected[k]++;
                ev_kind[n] = 1; ev_prio[n++] = k;
            }
        } else {
            p->wd_cond_since[k] = -1.0;
        }
    }
    return n;
}

/* IngressPfc.tick: the priorities whose pause is re-sent now (bit mask) */
static int ingress_tick(Port *p, double now) {
    if (now < p->next_refresh) return 0;
    int out = 0;
    double m = INFINITY;
    for (int k = 0; k < NQ; k++) {
        if (p->refresh_at[k] <= now) {
            p->refresh_at[k] = now + p->refresh_s;
            p->refreshes[k]++;
            out |= 1 << k;
        }
        if (p->refresh_at[k] < m) m = p->refresh_at[k];
    }
    p->next_refresh = m;
    return out;
}

/* AgentTimers.timers without LLDP (the caller's) and the lag meter: pause refreshes and
 * the watchdog's poll; the watchdog events go to `events` as (storm?, port, prio);
 * the next deadline */
static int timers(Pipeline *P, double now, PyObject *events, double *deadline) {
    double nxt = INFINITY;
    for (int i = 0; i < P->nports; i++) {
        Port *p = &P->ports[i];
        if (now >= p->next_refresh) {
            for (int k = 0; k < NQ; k++)
                if (p->refresh_at[k] <= now) record(P, p->refresh_at[k], now, i, METER_REFRESH);
            int prios = ingress_tick(p, now);
            for (int k = 0; k < NQ; k++) {
                if (!(prios >> k & 1)) continue;
                if (send_ctrl(p, p->pause_frames[k], now) < 0) return -1;
                p->pause_tx[k]++;
                backlog_add(P, i);
                emit(EV_REFRESH, i, k, 0, 0, now, 0.0);
            }
        }
        if (p->next_refresh < nxt) nxt = p->next_refresh;
    }
    if (now >= P->next_wd) {
        if (P->next_wd > -INFINITY) record(P, P->next_wd, now, -1, METER_WATCHDOG);
        P->next_wd = now + P->wd_period;
        for (int i = 0; i < P->nports; i++) {
            Port *p = &P->ports[i];
            if (!p->has_wd) continue;
            int kind[NQ * 2], prio[NQ * 2];
            int paused = paused_mask_raw(p, now);
            int n = wd_check(p, now, paused, backlog_mask(&p->q), kind, prio);
            for (int e = 0; e < n; e++) {
                PyObject *t = Py_BuildValue("(iii)", kind[e], i, prio[e]);
                if (t == NULL || PyList_Append(events, t) < 0) { Py_XDECREF(t); return -1; }
                Py_DECREF(t);
                emit(EV_WD, i, prio[e], kind[e], 0, now, 0.0);
                if (now < p->eligible_at) p->eligible_at = now;
                if (kind[e] == 1 && p->wd_action_drop) {
                    long long dropped = queues_flush(P, p, prio[e], QD_WATCHDOG, now, 1);
                    if (dropped < 0) return -1;
                    p->wd_dropped[prio[e]] += dropped;
                }
                backlog_add(P, i);
            }
            if ((n || p->nexpired) && P->events_on) sink_pauses(p, i, now);
        }
    }
    *deadline = nxt < P->next_wd ? nxt : P->next_wd;
    return 0;
}

/* -- the Python object: tables pushed in by switch_agent.fast, state read back out ---- */
static PyObject *ll_list(const long long *v, int n);

static Port *port_arg(Pipeline *P, int i) {
    if (i < 0 || i >= P->nports) { PyErr_Format(PyExc_IndexError, "port %d", i); return NULL; }
    return &P->ports[i];
}

static int bytes_arg(PyObject *o, Py_ssize_t n, const char *what) {
    if (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != n) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd bytes", what, n);
        return -1;
    }
    return 0;
}

static void flows_free(FlowTable *t) { PyMem_Free(t->slot); t->slot = NULL; t->cap = t->count = 0; }

static void Pipeline_dealloc(Pipeline *P) {
    for (int i = 0; i < P->nports; i++) {
        Port *p = &P->ports[i];
        ring_close(&p->ring);
        for (int q = 0; q < NQ; q++) {
            Fifo *f = &p->q.fifo[q];
            for (size_t k = 0; k < f->len; k++) Py_DECREF(f->buf[(f->head + k) % f->cap].frame);
            PyMem_Free(f->buf);
            PyMem_Free(p->q.bin_seen[q]);
            PyMem_Free(p->q.bin_marked[q]);
            PyMem_Free(p->q.bin_dropped[q]);
            Py_XDECREF(p->pause_frames[q]);
            Py_XDECREF(p->resume_frames[q]);
        }
        PyMem_Free(p->q.events.buf);
        LineQ *lines[2] = {&p->inflight, &p->ctrl};
        for (int l = 0; l < 2; l++) {
            for (size_t k = 0; k < lines[l]->len; k++)
                Py_DECREF(lines[l]->buf[(lines[l]->head + k) % lines[l]->cap].frame);
            PyMem_Free(lines[l]->buf);
        }
    }
    for (int c = 0; c < 3; c++) flows_free(&P->flows[c]);
    PyMem_Free(P->ports);
    PyMem_Free(P->router_macs);
    PyMem_Free(P->dlb_macs);
    PyMem_Free(P->local);
    PyMem_Free(P->l2_mac);
    PyMem_Free(P->l2_port);
    PyMem_Free(P->backlog);
    PyMem_Free(P->in_backlog);
    PyMem_Free(P->edges);
    PyMem_Free(P->hist);
    PyMem_Free(P->ev.buf);
    if (EVP == P) EVP = NULL;
    Py_TYPE(P)->tp_free((PyObject *)P);
}

static PyObject *Pipeline_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    int nports, qos_on;
    double tdf;
    Py_buffer qt, pt;
    (void)kw;
    if (!PyArg_ParseTuple(args, "idy*y*p", &nports, &tdf, &qt, &pt, &qos_on)) return NULL;
    if (nports < 1 || qt.len != 256 || pt.len != 256 || !(tdf > 0)) {
        PyBuffer_Release(&qt);
        PyBuffer_Release(&pt);
        PyErr_SetString(PyExc_ValueError, "Pipeline(nports >= 1, tdf > 0, 256-byte tables)");
        return NULL;
    }
    Pipeline *P = (Pipeline *)type->tp_alloc(type, 0);
    if (P == NULL) { PyBuffer_Release(&qt); PyBuffer_Release(&pt); return NULL; }
    memcpy(P->q_by_tos, qt.buf, 256);
    memcpy(P->p_by_tos, pt.buf, 256);
    PyBuffer_Release(&qt);
    PyBuffer_Release(&pt);
    P->tdf = tdf;
    P->qos_on = qos_on;
    P->wd_period = INFINITY;
    P->next_wd = -INFINITY; /* at once */
    P->worst_port = P->worst_kind = -1;
    P->ports = PyMem_Calloc(nports, sizeof(Port));
    P->backlog = PyMem_Calloc(nports, sizeof(int));
    P->in_backlog = PyMem_Calloc(nports, sizeof(int));
    if (!P->ports || !P->backlog || !P->in_backlog) { Py_DECREF(P); return PyErr_NoMemory(); }
    P->nports = nports;
    for (int i = 0; i < nports; i++) {
        Port *p = &P->ports[i];
        p->vlan = -1;
        p->next_refresh = INFINITY;
        p->pause_next_expiry = INFINITY;
        p->q.idx = i;
        p->fd = -1;
        for (int q = 0; q < NQ; q++) {
            p->q.up_at[q] = LLONG_MAX;
            p->q.down_at[q] = -1;
            p->refresh_at[q] = INFINITY;
            p->since[q] = -1.0;
            p->last_rx[q] = -INFINITY;
            p->wd_cond_since[q] = -1.0;
        }
    }
    return (PyObject *)P;
}

/* set_port(i, mac, vlan or -1, rate_Bps, burst_s, delay, model_bps) */
static PyObject *Pipeline_set_port(Pipeline *P, PyObject *args) {
    int i, vlan;
    PyObject *mac;
    double rate, burst, delay, model;
    if (!PyArg_ParseTuple(args, "iSidddd", &i, &mac, &vlan, &rate, &burst, &delay, &model))
        return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL || bytes_arg(mac, 6, "mac") < 0) return NULL;
    memcpy(p->mac, PyBytes_AS_STRING(mac), 6);
    p->vlan = vlan;
    p->rate_Bps = rate;
    p->burst_s = burst;
    p->delay = delay;
    p->model_bps = model;
    Py_RETURN_NONE;
}

/* set_queue(i, q, limit, tier, quantum, wred: None or (min, max, max_prob, weight, ecn)) */
static PyObject *Pipeline_set_queue(Pipeline *P, PyObject *args) {
    int i, q, tier;
    long long limit, quantum;
    PyObject *wred;
    if (!PyArg_ParseTuple(args, "iiLiLO", &i, &q, &limit, &tier, &quantum, &wred)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    if (q < 0 || q >= NQ || tier < 0 || tier > 2 || limit <= 0) {
        PyErr_SetString(PyExc_ValueError, "set_queue: bad queue, tier or limit");
        return NULL;
    }
    PortQueues *pq = &p->q;
    pq->limit[q] = limit;
    pq->tier_of[q] = tier;
    if (tier == 1) pq->weighted.quantum[q] = quantum;
    if (tier == 2) pq->scavenger.quantum[q] = quantum;
    if (wred != Py_None) {
        if (!PyArg_ParseTuple(wred, "LLdip", &pq->wmin[q], &pq->wmax[q], &pq->wmax_prob[q],
                              &pq->wweight[q], &pq->wecn[q])) return NULL;
        if (pq->wweight[q] < 0 || pq->wweight[q] > 15 || pq->wmin[q] > pq->wmax[q]) {
            PyErr_SetString(PyExc_ValueError, "set_queue: bad WRED");
            return NULL;
        }
        int n = (int)(limit / WRED_BIN_BYTES + 1);
        PyMem_Free(pq->bin_seen[q]);
        PyMem_Free(pq->bin_marked[q]);
        PyMem_Free(pq->bin_dropped[q]);
        pq->has_wred[q] = 1;
        pq->nbins[q] = n;
        pq->bin_seen[q] = PyMem_Calloc(n, sizeof(long long));
        pq->bin_marked[q] = PyMem_Calloc(n, sizeof(long long));
        pq->bin_dropped[q] = PyMem_Calloc(n, sizeof(long long));
        if (!pq->bin_seen[q] || !pq->bin_marked[q] || !pq->bin_dropped[q]) return PyErr_NoMemory();
    }
    Py_RETURN_NONE;
}

/* set_strict(i, queues highest first) */
static PyObject *Pipeline_set_strict(Pipeline *P, PyObject *args) {
    int i;
    PyObject *t;
    if (!PyArg_ParseTuple(args, "iO!", &i, &PyTuple_Type, &t)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    if (n > NQ) { PyErr_SetString(PyExc_ValueError, "set_strict: at most 8"); return NULL; }
    for (Py_ssize_t k = 0; k < n; k++) {
        long q = PyLong_AsLong(PyTuple_GET_ITEM(t, k));
        if (q < 0 || q >= NQ) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "set_strict: bad queue");
            return NULL;
        }
        p->q.strict[k] = (int)q;
    }
    p->q.nstrict = (int)n;
    Py_RETURN_NONE;
}

/* a random.Random.getstate()[1] (the 624 words and the index) into `m` */
static int mt_arg(PyObject *t, Mt *m) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 625) {
        PyErr_SetString(PyExc_ValueError, "a generator state: 625 ints");
        return -1;
    }
    Mt out;
    for (int k = 0; k < 624; k++) {
        unsigned long w = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, k));
        if (w == (unsigned long)-1 && PyErr_Occurred()) return -1;
        out.mt[k] = (uint32_t)w;
    }
    long idx = PyLong_AsLong(PyTuple_GET_ITEM(t, 624));
    if (idx < 0 || idx > 624) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a generator state: bad index");
        return -1;
    }
    out.mti = (int)idx;
    *m = out;
    return 0;
}

/* set_rng(i, random.Random.getstate()[1]): port i's WRED draws */
static PyObject *Pipeline_set_rng(Pipeline *P, PyObject *args) {
    int i;
    PyObject *t;
    if (!PyArg_ParseTuple(args, "iO", &i, &t)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL || mt_arg(t, &p->q.rng) < 0) return NULL;
    Py_RETURN_NONE;
}

/* set_fd(i, fd): port i's socket, C sends on it (-1: frames go to service's `sent`) */
static PyObject *Pipeline_set_fd(Pipeline *P, PyObject *args) {
    int i, fd;
    if (!PyArg_ParseTuple(args, "ii", &i, &fd)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    p->fd = fd;
    Py_RETURN_NONE;
}

/* set_test_drop(rate, state or None): the test hook's rate (0: off) and, when given,
 * its die's random.Random state (testhook.DropHook: set once, kept while the rate is 0) */
static PyObject *Pipeline_set_test_drop(Pipeline *P, PyObject *args) {
    double rate;
    PyObject *t;
    if (!PyArg_ParseTuple(args, "dO", &rate, &t)) return NULL;
    if (t != Py_None && mt_arg(t, &P->drop_rng) < 0) return NULL;
    P->drop_rate = rate;
    Py_RETURN_NONE;
}

/* set_ingress(i, enabled mask, xoff, xon, drop_above, refresh_s, pause frames, resume
 * frames) */
static PyObject *Pipeline_set_ingress(Pipeline *P, PyObject *args) {
    int i, mask;
    long long xoff, xon, above;
    double refresh_s;
    PyObject *pf, *rf;
    if (!PyArg_ParseTuple(args, "iiLLLdO!O!", &i, &mask, &xoff, &xon, &above, &refresh_s,
                          &PyTuple_Type, &pf, &PyTuple_Type, &rf)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    if (PyTuple_GET_SIZE(pf) != NQ || PyTuple_GET_SIZE(rf) != NQ) {
        PyErr_SetString(PyExc_ValueError, "set_ingress: 8 pause and 8 resume frames");
        return NULL;
    }
    for (int q = 0; q < NQ; q++) {
        PyObject *a = PyTuple_GET_ITEM(pf, q), *b = PyTuple_GET_ITEM(rf, q);
        if (!PyBytes_CheckExact(a) || !PyBytes_CheckExact(b)) {
            PyErr_SetString(PyExc_TypeError, "set_ingress: frames must be bytes");
            return NULL;
        }
        Py_INCREF(a); Py_XSETREF(p->pause_frames[q], a);
        Py_INCREF(b); Py_XSETREF(p->resume_frames[q], b);
        p->enabled[q] = mask >> q & 1;
    }
    p->xoff = xoff; p->xon = xon; p->drop_above = above; p->refresh_s = refresh_s;
    Py_RETURN_NONE;
}

/* set_watchdog(i, watched mask, detect_s, restore_s (lab), action drop?, period): the
 * port's PfcWatchdog and the agent's poll period (Agent.wd_period) */
static PyObject *Pipeline_set_watchdog(Pipeline *P, PyObject *args) {
    int i, watched, drop;
    double detect, restore, period;
    if (!PyArg_ParseTuple(args, "iiddpd", &i, &watched, &detect, &restore, &drop, &period))
        return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    p->has_wd = 1;
    p->wd_watched = watched;
    p->wd_detect_s = detect;
    p->wd_restore_s = restore;
    p->wd_action_drop = drop;
    P->wd_period = period;
    Py_RETURN_NONE;
}

/* set_meter(bucket edges (fidelity.BUCKET_EDGES, model s), monotonic clock?) */
static PyObject *Pipeline_set_meter(Pipeline *P, PyObject *args) {
    PyObject *t;
    int mono;
    if (!PyArg_ParseTuple(args, "O!p", &PyTuple_Type, &t, &mono)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(t);
    double *edges = PyMem_Calloc(n ? n : 1, sizeof(double));
    long long *hist = PyMem_Calloc(n + 2, sizeof(long long));
    if (!edges || !hist) { PyMem_Free(edges); PyMem_Free(hist); return PyErr_NoMemory(); }
    for (Py_ssize_t k = 0; k < n; k++) {
        edges[k] = PyFloat_AsDouble(PyTuple_GET_ITEM(t, k));
        if (PyErr_Occurred()) { PyMem_Free(edges); PyMem_Free(hist); return NULL; }
    }
    PyMem_Free(P->edges);
    PyMem_Free(P->hist);
    P->edges = edges;
    P->hist = hist;
    P->nedges = (int)n;
    P->meter_count = 0;
    P->meter_max = 0.0;
    P->worst_port = P->worst_kind = -1;
    P->monotonic = mono;
    Py_RETURN_NONE;
}

/* meter() -> (count, max_s, hist, worst port or -1, worst METER_* or -1) */
static PyObject *Pipeline_meter(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    return Py_BuildValue("(LdNii)", P->meter_count, P->meter_max, ll_list(P->hist, P->nedges + 2),
                         P->worst_port, P->worst_kind);
}

/* set_degrade(i, rate_Bps, delay, loss, corrupt, impair generator state or None):
 * Port.degrade / restore as the control plane computed them */
static PyObject *Pipeline_set_degrade(Pipeline *P, PyObject *args) {
    int i;
    double rate, delay, loss, corrupt;
    PyObject *state;
    if (!PyArg_ParseTuple(args, "iddddO", &i, &rate, &delay, &loss, &corrupt, &state)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    if (state != Py_None && mt_arg(state, &p->impair_rng) < 0) return NULL;
    p->impair = state != Py_None;
    p->rate_Bps = rate;
    p->delay = delay;
    p->loss = loss;
    p->corrupt = corrupt;
    Py_RETURN_NONE;
}

static int macs_arg(PyObject *t, unsigned char (**out)[6], int *n) {
    Py_ssize_t k = PyTuple_GET_SIZE(t);
    unsigned char (*m)[6] = PyMem_Calloc(k ? k : 1, 6);
    if (m == NULL) { PyErr_NoMemory(); return -1; }
    for (Py_ssize_t j = 0; j < k; j++) {
        if (bytes_arg(PyTuple_GET_ITEM(t, j), 6, "mac") < 0) { PyMem_Free(m); return -1; }
        memcpy(m[j], PyBytes_AS_STRING(PyTuple_GET_ITEM(t, j)), 6);
    }
    PyMem_Free(*out);
    *out = m;
    *n = (int)k;
    return 0;
}

/* set_tables(router macs, dlb macs, local addresses (4 bytes each), l2 ((mac, port), ...)) */
static PyObject *Pipeline_set_tables(Pipeline *P, PyObject *args) {
    PyObject *rm, *dm, *loc, *l2;
    if (!PyArg_ParseTuple(args, "O!O!O!O!", &PyTuple_Type, &rm, &PyTuple_Type, &dm,
                          &PyTuple_Type, &loc, &PyTuple_Type, &l2)) return NULL;
    if (macs_arg(rm, &P->router_macs, &P->nrouter) < 0 || macs_arg(dm, &P->dlb_macs, &P->ndlb) < 0)
        return NULL;
    Py_ssize_t nl = PyTuple_GET_SIZE(loc), n2 = PyTuple_GET_SIZE(l2);
    uint32_t *local = PyMem_Calloc(nl ? nl : 1, 4);
    unsigned char (*l2m)[6] = PyMem_Calloc(n2 ? n2 : 1, 6);
    int *l2p = PyMem_Calloc(n2 ? n2 : 1, sizeof(int));
    if (!local || !l2m || !l2p) goto fail;
    for (Py_ssize_t j = 0; j < nl; j++) {
        if (bytes_arg(PyTuple_GET_ITEM(loc, j), 4, "local") < 0) goto fail;
        memcpy(&local[j], PyBytes_AS_STRING(PyTuple_GET_ITEM(loc, j)), 4);
    }
    for (Py_ssize_t j = 0; j < n2; j++) {
        PyObject *mac;
        int port;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(l2, j), "Si", &mac, &port) ||
            bytes_arg(mac, 6, "l2 mac") < 0 || port_arg(P, port) == NULL) goto fail;
        memcpy(l2m[j], PyBytes_AS_STRING(mac), 6);
        l2p[j] = port;
    }
    PyMem_Free(P->local); PyMem_Free(P->l2_mac); PyMem_Free(P->l2_port);
    P->local = local; P->nlocal = (int)nl;
    P->l2_mac = l2m; P->l2_port = l2p; P->nl2 = (int)n2;
    Py_RETURN_NONE;
fail:
    PyMem_Free(local); PyMem_Free(l2m); PyMem_Free(l2p);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return NULL;
}

static int flows_grow(FlowTable *t) {
    size_t ncap = t->cap ? t->cap * 2 : 1024;
    Flow *ns = PyMem_Calloc(ncap, sizeof(Flow));
    if (ns == NULL) { PyErr_NoMemory(); return -1; }
    for (size_t k = 0; k < t->cap; k++) {
        if (!t->slot[k].used) continue;
        size_t j = fnv(t->slot[k].key, t->slot[k].klen) & (ncap - 1);
        while (ns[j].used) j = (j + 1) & (ncap - 1);
        ns[j] = t->slot[k];
    }
    PyMem_Free(t->slot);
    t->slot = ns;
    t->cap = ncap;
    return 0;
}

/* FlowCache.add: install(frame) after Python decided route (port or -1, l2, drop reason) */
static PyObject *Pipeline_install(Pipeline *P, PyObject *args) {
    Py_buffer fb;
    int port, drop;
    PyObject *l2;
    if (!PyArg_ParseTuple(args, "y*iSi", &fb, &port, &l2, &drop)) return NULL;
    const unsigned char *fr = fb.buf;
    if (fb.len < 34 || (port >= 0 && (port_arg(P, port) == NULL || bytes_arg(l2, 14, "l2") < 0)) ||
        (port < 0 && (drop < 0 || drop >= ND_PORT))) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "install: bad frame or route");
        PyBuffer_Release(&fb);
        return NULL;
    }
    unsigned char key[20];
    int klen, c = flow_key(fr, fb.len, key, &klen);
    PyBuffer_Release(&fb);
    FlowTable *t = &P->flows[c];
    if (t->count >= FLOW_CACHE_MAX) { /* bounded: UET sprays a flow per EV */
        memset(t->slot, 0, t->cap * sizeof(Flow));
        t->count = 0;
        P->flushes++;
    }
    if (flow_find(t, key, klen) != NULL) {
        PyErr_SetString(PyExc_ValueError, "install: flow already cached");
        return NULL;
    }
    if ((t->count + 1) * 2 > t->cap && flows_grow(t) < 0) return NULL;
    size_t j = fnv(key, klen) & (t->cap - 1);
    while (t->slot[j].used) j = (j + 1) & (t->cap - 1);
    Flow *f = &t->slot[j];
    memset(f, 0, sizeof(Flow));
    memcpy(f->key, key, klen);
    f->klen = (unsigned char)klen;
    f->used = 1;
    f->port = port;
    f->drop = drop;
    if (port >= 0) memcpy(f->l2, PyBytes_AS_STRING(l2), 14);
    t->count++;
    Py_RETURN_NONE;
}

static PyObject *Pipeline_clear_flows(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    for (int c = 0; c < 3; c++) if (P->flows[c].cap) {
        memset(P->flows[c].slot, 0, P->flows[c].cap * sizeof(Flow));
        P->flows[c].count = 0;
    }
    Py_RETURN_NONE;
}

static void line_clear(LineQ *l) { /* deque.clear */
    while (l->len) {
        Py_DECREF(l->buf[l->head].frame);
        l->head = (l->head + 1) % l->cap;
        l->len--;
    }
}

/* flush_port(i, reason, now): AgentAdmin.flush_port - drop every frame queued on (counted
 * as `reason`, "link_down" or "switch_down") or in flight from port i; how many */
static PyObject *Pipeline_flush_port(Pipeline *P, PyObject *args) {
    int i;
    const char *why;
    double now;
    if (!PyArg_ParseTuple(args, "isd", &i, &why, &now)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    int reason = strcmp(why, "link_down") == 0 ? QD_LINK_DOWN
                 : strcmp(why, "switch_down") == 0 ? QD_SWITCH_DOWN : -1;
    if (reason < 0) {
        PyErr_Format(PyExc_ValueError, "flush_port: reason link_down or switch_down, got %s", why);
        return NULL;
    }
    long long n = 0;
    EVP = P; EVNOW = now;
    for (int q = 0; q < NQ; q++) {
        long long k = queues_flush(P, p, q, reason, now, 0);
        if (k < 0) return NULL;
        n += k;
    }
    n += (long long)p->inflight.len;
    line_clear(&p->inflight);
    return PyLong_FromLongLong(n);
}

/* switch_down(): AgentAdmin.set_admin's end for a switch going down - no control frame
 * left to send (after the flushes' releases), no port to serve */
static PyObject *Pipeline_switch_down(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    for (int i = 0; i < P->nports; i++) {
        line_clear(&P->ports[i].ctrl);
        P->in_backlog[i] = 0;
    }
    P->nbacklog = 0;
    Py_RETURN_NONE;
}

/* switch_up(): the watchdog polls at once again, its missed polls not lateness */
static PyObject *Pipeline_switch_up(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    P->next_wd = -INFINITY;
    Py_RETURN_NONE;
}

/* set_events(on): note events from now on (Agent: the sink's log is open; the WRED levels
 * to watch, PortQueues.note_events) */
static PyObject *Pipeline_set_events(Pipeline *P, PyObject *args) {
    int on;
    if (!PyArg_ParseTuple(args, "p", &on)) return NULL;
    P->events_on = on;
    for (int i = 0; on && i < P->nports; i++) {
        P->ports[i].q.noting = 1;
        for (int q = 0; q < NQ; q++)
            if (P->ports[i].q.has_wred[q])
                queues_levels(&P->ports[i].q, q, P->ports[i].q.qbytes[q]);
    }
    Py_RETURN_NONE;
}

/* events(): the events noted since the last call, oldest first, as (kind, port, a, b, v, t, x)
 * (the EV_* kinds; pipeline.py `drain` writes them through the EventSink) */
static PyObject *Pipeline_events(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    if (P->ev.failed) { P->ev.failed = 0; P->ev.len = 0; return PyErr_NoMemory(); }
    PyObject *out = PyList_New((Py_ssize_t)P->ev.len);
    for (size_t k = 0; out && k < P->ev.len; k++) {
        Ev *e = &P->ev.buf[k];
        PyObject *t = Py_BuildValue("(iiiiLdd)", e->kind, e->port, e->a, e->b, e->v, e->t, e->x);
        if (t == NULL) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, t);
    }
    P->ev.len = 0;
    return out;
}

/* flows(): [(cache 0 tcp / 1 udp / 2 other, key, port or -1, packets, bytes), ...] */
static PyObject *Pipeline_flows(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    PyObject *out = PyList_New(0);
    for (int c = 0; out && c < 3; c++)
        for (size_t k = 0; k < P->flows[c].cap; k++) {
            Flow *f = &P->flows[c].slot[k];
            if (!f->used) continue;
            PyObject *t = Py_BuildValue("(iy#iLL)", c, (const char *)f->key, (Py_ssize_t)f->klen,
                                        f->port, f->packets, f->bytes);
            if (t == NULL || PyList_Append(out, t) < 0) { Py_XDECREF(t); Py_CLEAR(out); break; }
            Py_DECREF(t);
        }
    return out;
}

static PyObject *frame_arg(PyObject *o) {  /* a new reference to the frame as bytes */
    if (PyBytes_CheckExact(o)) { Py_INCREF(o); return o; }
    return PyBytes_FromObject(o);
}

/* on_frame(i, frame, now) -> HANDLED or a MISS_* */
static PyObject *Pipeline_on_frame(Pipeline *P, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) { PyErr_SetString(PyExc_TypeError, "on_frame(port, frame, now)"); return NULL; }
    int i = (int)PyLong_AsLong(args[0]);
    double now = PyFloat_AsDouble(args[2]);
    if (PyErr_Occurred() || port_arg(P, i) == NULL) return NULL;
    PyObject *frame = frame_arg(args[1]);
    if (frame == NULL) return NULL;
    EVP = P; EVNOW = now;
    int r = on_frame(P, i, frame, now);
    Py_DECREF(frame);
    return r < 0 ? NULL : PyLong_FromLong(r);
}

/* enqueue(out, q, frame, now, prio): Agent.enqueue of a frame not accounted at an ingress
 * (an ICMP reply from the Python path) */
static PyObject *Pipeline_enqueue(Pipeline *P, PyObject *args) {
    int out, q, prio;
    PyObject *f;
    double now;
    if (!PyArg_ParseTuple(args, "iiOdi", &out, &q, &f, &now, &prio)) return NULL;
    if (port_arg(P, out) == NULL) return NULL;
    if (q < 0 || q >= NQ || prio < 0 || prio >= NQ) {
        PyErr_SetString(PyExc_ValueError, "enqueue: bad queue or priority");
        return NULL;
    }
    PyObject *frame = frame_arg(f);
    if (frame == NULL) return NULL;
    EVP = P; EVNOW = now;
    int r = agent_enqueue(P, out, q, frame, -1, 0, now, prio);
    Py_DECREF(frame);
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* the (now, list) arguments of timers and service */
static int now_and_list(PyObject *const *args, Py_ssize_t nargs, const char *usage, double *now) {
    if (nargs != 2 || !PyList_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *now = PyFloat_AsDouble(args[0]);
    EVNOW = *now;
    return PyErr_Occurred() ? -1 : 0;
}

/* timers(now, events) -> the next timer deadline; watchdog events appended as
 * (1 storm / 0 restore, port, priority) */
static PyObject *Pipeline_timers(Pipeline *P, PyObject *const *args, Py_ssize_t nargs) {
    double now, deadline;
    EVP = P;
    if (now_and_list(args, nargs, "timers(now, events: list)", &now) < 0 ||
        timers(P, now, args[1], &deadline) < 0) return NULL;
    return PyFloat_FromDouble(deadline);
}

/* service(now, sent) -> next wake or None; appends (port, frame) to the list `sent` */
static PyObject *Pipeline_service(Pipeline *P, PyObject *const *args, Py_ssize_t nargs) {
    double now, wake;
    EVP = P;
    if (now_and_list(args, nargs, "service(now, sent: list)", &now) < 0 ||
        service(P, now, args[1], &wake) < 0) return NULL;
    if (isnan(wake)) Py_RETURN_NONE;
    return PyFloat_FromDouble(wake);
}

static PyObject *ll_list(const long long *v, int n) {
    PyObject *l = PyList_New(n);
    for (int k = 0; l && k < n; k++) {
        PyObject *x = PyLong_FromLongLong(v[k]);
        if (x == NULL) { Py_CLEAR(l); break; }
        PyList_SET_ITEM(l, k, x);
    }
    return l;
}

static PyObject *d_list(const double *v, int n) {
    PyObject *l = PyList_New(n);
    for (int k = 0; l && k < n; k++) {
        PyObject *x = PyFloat_FromDouble(v[k]);
        if (x == NULL) { Py_CLEAR(l); break; }
        PyList_SET_ITEM(l, k, x);
    }
    return l;
}

static PyObject *reasons(const long long *v, const char **names, int n) {
    PyObject *d = PyDict_New();
    for (int k = 0; d && k < n; k++) {
        if (!v[k]) continue;
        PyObject *x = PyLong_FromLongLong(v[k]);
        if (x == NULL || PyDict_SetItemString(d, names[k], x) < 0) { Py_XDECREF(x); Py_CLEAR(d); break; }
        Py_DECREF(x);
    }
    return d;
}

static PyObject *line_list(LineQ *l) {
    PyObject *out = PyList_New((Py_ssize_t)l->len);
    for (size_t k = 0; out && k < l->len; k++) {
        Line *x = &l->buf[(l->head + k) % l->cap];
        PyObject *t = Py_BuildValue("(dOd)", x->due, x->frame, x->model_due);
        if (t == NULL) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, t);
    }
    return out;
}

/* state(i): the port's state under the Python attribute names (Port, PortQueues,
 * IngressPfc, Shaper) for the differential test and the wrapper's counters */
static PyObject *Pipeline_state(Pipeline *P, PyObject *args) {
    int i;
    if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    PortQueues *pq = &p->q;
    PyObject *qdrops = PyList_New(NQ), *hist = PyList_New(NQ), *bins[3], *fifo = PyList_New(NQ);
    long long **src[3] = {pq->bin_seen, pq->bin_marked, pq->bin_dropped};
    for (int b = 0; b < 3; b++) bins[b] = PyList_New(NQ);
    long long paused[NQ], enabled[NQ];
    for (int q = 0; q < NQ; q++) {
        paused[q] = p->paused[q];
        enabled[q] = p->enabled[q];
        if (qdrops) PyList_SET_ITEM(qdrops, q, reasons(pq->drops[q], QUEUE_DROPS, ND_QUEUE));
        if (hist) PyList_SET_ITEM(hist, q, ll_list(pq->sojourn_hist[q], NSOJ + 1));
        if (fifo) PyList_SET_ITEM(fifo, q, PyLong_FromSize_t(pq->fifo[q].len));
        for (int b = 0; b < 3; b++) {
            if (bins[b] == NULL) continue;
            PyObject *x = pq->has_wred[q] ? ll_list(src[b][q], pq->nbins[q]) : Py_NewRef(Py_None);
            PyList_SET_ITEM(bins[b], q, x);
        }
    }
    return Py_BuildValue(
        "{s:L,s:L,s:L,s:L,s:N,s:d,s:d,s:d,s:d,s:N,s:N,s:N,s:N,s:N,"
        "s:{s:N,s:N,s:L,s:L,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N},"
        "s:{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:d,s:N},"
        "s:{s:N,s:N,s:N,s:N,s:N,s:N,s:N,s:i,s:d},s:L,"
        "s:{s:N,s:i,s:i,s:i,s:N,s:N}}",
        "rx_packets", p->rx_packets, "rx_bytes", p->rx_bytes, "tx_packets", p->tx_packets,
        "tx_bytes", p->tx_bytes, "drops", reasons(p->drops, PORT_DROPS, ND_PORT),
        "free_at", p->free_at, "eligible_at", p->eligible_at, "delay", p->delay,
        "lost_s", p->lost_s, "inflight", line_list(&p->inflight), "ctrl", line_list(&p->ctrl),
        "pause_tx", ll_list(p->pause_tx, NQ), "resume_tx", ll_list(p->resume_tx, NQ),
        "wd_dropped", ll_list(p->wd_dropped, NQ),
        "queues",
        "fifo", fifo, "qbytes", ll_list(pq->qbytes, NQ), "packets", pq->packets, "bytes", pq->bytes,
        "avg", d_list(pq->avg, NQ), "enq_packets", ll_list(pq->enq_packets, NQ),
        "enq_bytes", ll_list(pq->enq_bytes, NQ), "deq_packets", ll_list(pq->deq_packets, NQ),
        "deq_bytes", ll_list(pq->deq_bytes, NQ), "marks", ll_list(pq->marks, NQ),
        "max_qbytes", ll_list(pq->max_qbytes, NQ), "drops", qdrops,
        "sojourn_max", d_list(pq->sojourn_max, NQ), "sojourn_hist", hist,
        "bin_seen", bins[0], "bin_marked", bins[1], "bin_dropped", bins[2],
        "ingress",
        "enabled", ll_list(enabled, NQ), "held", ll_list(p->held, NQ),
        "max_held", ll_list(p->max_held, NQ), "paused", ll_list(paused, NQ),
        "xoff_sent", ll_list(p->xoff_sent, NQ), "xon_sent", ll_list(p->xon_sent, NQ),
        "headroom_drops", ll_list(p->headroom_drops, NQ),
        "refresh_at", d_list(p->refresh_at, NQ), "next_refresh", p->next_refresh,
        "refreshes", ll_list(p->refreshes, NQ),
        "pause",
        "until", d_list(p->until, NQ), "since", d_list(p->since, NQ),
        "last_rx", d_list(p->last_rx, NQ), "resumed_at", d_list(p->resumed_at, NQ),
        "paused_s", d_list(p->paused_s, NQ), "pauses_rx", ll_list(p->pauses_rx, NQ),
        "resumes_rx", ll_list(p->resumes_rx, NQ), "mask", p->pause_mask,
        "next_expiry", p->pause_next_expiry, "pfc_rx_frames", p->pfc_rx_frames,
        "watchdog", "cond_since", d_list(p->wd_cond_since, NQ), "stormed", p->wd_stormed,
        "drop_mask", p->wd_drop_mask, "ignore_mask", p->wd_ignore_mask,
        "storms_detected", ll_list(p->wd_storms_detected, NQ),
        "storms_restored", ll_list(p->wd_storms_restored, NQ));
}

/* draw(i): the next WRED draw of port i (random.Random.random) */
static PyObject *Pipeline_draw(Pipeline *P, PyObject *args) {
    int i;
    if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
    Port *p = port_arg(P, i);
    return p == NULL ? NULL : PyFloat_FromDouble(random_random(&p->q.rng));
}

/* rng_state(i): port i's generator as random.Random.getstate()[1] has it */
static PyObject *Pipeline_rng_state(Pipeline *P, PyObject *args) {
    int i;
    if (!PyArg_ParseTuple(args, "i", &i)) return NULL;
    Port *p = port_arg(P, i);
    if (p == NULL) return NULL;
    PyObject *t = PyTuple_New(625);
    for (int k = 0; t && k < 625; k++) {
        PyObject *x = k < 624 ? PyLong_FromUnsignedLong(p->q.rng.mt[k]) : PyLong_FromLong(p->q.rng.mti);
        if (x == NULL) { Py_CLEAR(t); break; }
        PyTuple_SET_ITEM(t, k, x);
    }
    return t;
}

/* run_frames(i, frame, n): calibrate.time_frames' loop in C - n frames on port i at time 0,
 * a service every 16 - for the bench; the frames sent are discarded; how many were sent */
static PyObject *Pipeline_run_frames(Pipeline *P, PyObject *args) {
    int i;
    long long n, sent_total = 0;
    PyObject *f;
    if (!PyArg_ParseTuple(args, "iOL", &i, &f, &n)) return NULL;
    if (port_arg(P, i) == NULL) return NULL;
    PyObject *frame = frame_arg(f), *sent = PyList_New(0);
    double wake;
    int r = 0;
    EVP = P;
    EVNOW = 0.0;
    for (long long k = 0; frame && sent && r == 0 && k < n; k++) {
        r = on_frame(P, i, frame, 0.0);
        if (r > 0) {
            PyErr_Format(PyExc_ValueError, "run_frames: frame %lld missed (%d)", k, r);
            r = -1;
        }
        if (r == 0 && (k & 15) == 15) {
            r = service(P, 0.0, sent, &wake);
            sent_total += PyList_GET_SIZE(sent);
            if (r == 0) r = PyList_SetSlice(sent, 0, PyList_GET_SIZE(sent), NULL);
        }
    }
    if (frame && sent && r == 0) {
        r = service(P, 0.0, sent, &wake);
        sent_total += PyList_GET_SIZE(sent);
    }
    Py_XDECREF(frame);
    Py_XDECREF(sent);
    if (frame == NULL || sent == NULL || r < 0) return NULL;
    return PyLong_FromLongLong(sent_total);
}

/* clocks(): per port (eligible_at, Shaper.free_at, PortQueues.bytes), cheap enough to
 * compare after every step of a trace */
static PyObject *Pipeline_clocks(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    PyObject *out = PyList_New(P->nports);
    for (int i = 0; out && i < P->nports; i++) {
        Port *p = &P->ports[i];
        PyObject *t = Py_BuildValue("(ddL)", p->eligible_at, p->free_at, p->q.bytes);
        if (t == NULL) { Py_CLEAR(out); break; }
        PyList_SET_ITEM(out, i, t);
    }
    return out;
}

static PyObject *Pipeline_flushes(Pipeline *P, PyObject *noargs) {
    (void)noargs;
    return PyLong_FromLongLong(P->flushes);
}

#include "loop.h"

static PyMethodDef Pipeline_methods[] = {
    {"set_port", (PyCFunction)Pipeline_set_port, METH_VARARGS, "set_port(i, mac, vlan, rate_Bps, burst_s, delay)"},
    {"set_queue", (PyCFunction)Pipeline_set_queue, METH_VARARGS, "set_queue(i, q, limit, tier, quantum, wred)"},
    {"set_strict", (PyCFunction)Pipeline_set_strict, METH_VARARGS, "set_strict(i, queues)"},
    {"set_rng", (PyCFunction)Pipeline_set_rng, METH_VARARGS, "set_rng(i, mt state)"},
    {"open_ring", (PyCFunction)Pipeline_open_ring, METH_VARARGS, "open_ring(i): TPACKET_V2 rings on port i's socket"},
    {"ring_send", (PyCFunction)Pipeline_ring_send, METH_VARARGS, "ring_send(i, frame): send through the TX ring"},
    {"set_grid", (PyCFunction)Pipeline_set_grid, METH_VARARGS, "set_grid(seconds): the wake-up grid"},
    {"set_poll", (PyCFunction)Pipeline_set_poll, METH_VARARGS, "set_poll(seconds): the poll step after a wake-up that read frames"},
    {"loop_stats", (PyCFunction)Pipeline_loop_stats, METH_NOARGS, "(wake-ups, frames received) of serve"},
    {"serve", (PyCFunction)Pipeline_serve, METH_VARARGS, "serve(epfd, py_deadline, admin_up, punt, wd_events, sent)"},
    {"set_fd", (PyCFunction)Pipeline_set_fd, METH_VARARGS, "set_fd(i, fd): C sends on it"},
    {"set_test_drop", (PyCFunction)Pipeline_set_test_drop, METH_VARARGS, "set_test_drop(rate, mt state or None)"},
    {"set_ingress", (PyCFunction)Pipeline_set_ingress, METH_VARARGS, "set_ingress(i, ...)"},
    {"set_tables", (PyCFunction)Pipeline_set_tables, METH_VARARGS, "set_tables(router, dlb, local, l2)"},
    {"install", (PyCFunction)Pipeline_install, METH_VARARGS, "install(frame, port, l2, drop)"},
    {"clear_flows", (PyCFunction)Pipeline_clear_flows, METH_NOARGS, "forget every flow"},
    {"flush_port", (PyCFunction)Pipeline_flush_port, METH_VARARGS, "flush_port(i, reason, now)"},
    {"switch_down", (PyCFunction)Pipeline_switch_down, METH_NOARGS, "control frames and backlog emptied"},
    {"switch_up", (PyCFunction)Pipeline_switch_up, METH_NOARGS, "the watchdog polls at once"},
    {"set_events", (PyCFunction)Pipeline_set_events, METH_VARARGS, "set_events(on): note events"},
    {"events", (PyCFunction)Pipeline_events, METH_NOARGS, "the events noted since the last call"},
    {"flows", (PyCFunction)Pipeline_flows, METH_NOARGS, "the cached flows"},
    {"flushes", (PyCFunction)Pipeline_flushes, METH_NOARGS, "caches emptied when full"},
    {"on_frame", (PyCFunction)(void (*)(void))Pipeline_on_frame, METH_FASTCALL, "on_frame(i, frame, now)"},
    {"enqueue", (PyCFunction)Pipeline_enqueue, METH_VARARGS, "enqueue(out, q, frame, now, prio)"},
    {"service", (PyCFunction)(void (*)(void))Pipeline_service, METH_FASTCALL, "service(now, sent)"},
    {"timers", (PyCFunction)(void (*)(void))Pipeline_timers, METH_FASTCALL, "timers(now, events)"},
    {"set_meter", (PyCFunction)Pipeline_set_meter, METH_VARARGS, "set_meter(edges, monotonic)"},
    {"meter", (PyCFunction)Pipeline_meter, METH_NOARGS, "meter(): the lag meter"},
    {"set_degrade", (PyCFunction)Pipeline_set_degrade, METH_VARARGS, "set_degrade(i, ...)"},
    {"set_watchdog", (PyCFunction)Pipeline_set_watchdog, METH_VARARGS, "set_watchdog(i, ...)"},
    {"state", (PyCFunction)Pipeline_state, METH_VARARGS, "state(i)"},
    {"clocks", (PyCFunction)Pipeline_clocks, METH_NOARGS, "clocks(): (eligible_at, free_at, bytes) per port"},
    {"run_frames", (PyCFunction)Pipeline_run_frames, METH_VARARGS, "run_frames(i, frame, n)"},
    {"draw", (PyCFunction)Pipeline_draw, METH_VARARGS, "draw(i): port i's next WRED draw"},
    {"rng_state", (PyCFunction)Pipeline_rng_state, METH_VARARGS, "rng_state(i)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PipelineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "switch_agent.fast._pipeline.Pipeline",
    .tp_basicsize = sizeof(Pipeline),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The switch agent's per-frame pipeline (switch_agent.fast builds it).",
    .tp_new = Pipeline_new,
    .tp_dealloc = (destructor)Pipeline_dealloc,
    .tp_methods = Pipeline_methods,
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_pipeline", "The switch agent's per-frame pipeline in C.", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__pipeline(void) {
    if (PyType_Ready(&PipelineType) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    PyObject *pd = PyTuple_New(ND_PORT), *qd = PyTuple_New(ND_QUEUE);
    for (int k = 0; pd && k < ND_PORT; k++) PyTuple_SET_ITEM(pd, k, PyUnicode_FromString(PORT_DROPS[k]));
    for (int k = 0; qd && k < ND_QUEUE; k++) PyTuple_SET_ITEM(qd, k, PyUnicode_FromString(QUEUE_DROPS[k]));
    if (PyModule_AddObject(m, "PORT_DROPS", pd) < 0 || PyModule_AddObject(m, "QUEUE_DROPS", qd) < 0 ||
        PyModule_AddIntConstant(m, "HANDLED", HANDLED) < 0 ||
        PyModule_AddIntConstant(m, "MISS_FLOW", MISS_FLOW) < 0 ||
        PyModule_AddIntConstant(m, "MISS_TTL", MISS_TTL) < 0 ||
        PyModule_AddIntConstant(m, "MISS_LINK_LOCAL", MISS_LINK_LOCAL) < 0 ||
        PyModule_AddIntConstant(m, "FLOW_CACHE_MAX", FLOW_CACHE_MAX) < 0 ||
        PyModule_AddIntConstant(m, "SERVE_PYTHON", SERVE_PYTHON) < 0 ||
        PyModule_AddIntConstant(m, "SERVE_DEADLINE", SERVE_DEADLINE) < 0 ||
        PyModule_AddIntConstant(m, "SERVE_EVENTS", SERVE_EVENTS) < 0 ||
        PyModule_AddIntConstant(m, "SERVE_SENT", SERVE_SENT) < 0 ||
        PyModule_AddIntConstant(m, "SERVE_SIGNAL", SERVE_SIGNAL) < 0 ||
        PyModule_AddIntConstant(m, "RING_RX", RING_RX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&PipelineType);
    if (PyModule_AddObject(m, "Pipeline", (PyObject *)&PipelineType) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
