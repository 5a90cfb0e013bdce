/* PACKET_MMAP rings on a switch port's AF_PACKET socket (included by pipeline.c).
 *
 * TPACKET_V2 RX and TX rings (the kernel's Documentation/networking/packet_mmap.rst):
 * the kernel writes each received frame into the next RX slot and hands it over with
 * TP_STATUS_USER; we hand it back with TP_STATUS_KERNEL. Frames to send are written into
 * TX slots marked TP_STATUS_SEND_REQUEST and leave on one send() that kicks the ring,
 * with PACKET_QDISC_BYPASS straight to the driver. V2, not V3: V3 hands frames over a
 * block at a time, held back up to its block-retire timeout (~1 ms), which at TDF 1000 is
 * the fidelity guard's whole bound (docs/PERFORMANCE.md "The compiled data path").
 *
 * A slot holds RING_FRAME bytes: the header and a frame up to the agent's MTU (9216)
 * with room to spare; 1024 RX slots (a little more than the 4 KB frames the 8 MB socket
 * buffer of emucore.rawsock.open_port held: a burst the socket took, the ring takes) and
 * 256 TX slots per port: 15 MB of kernel memory per port.
 *
 * Nothing is lost without a count. A frame arriving at a full RX ring the kernel drops
 * and counts (PACKET_STATISTICS tp_drops): the agent reads the count at each counters()
 * and on exit (switch_agent.port.Port.rx_overflow: drops `rx_ring_full`). A frame that
 * finds no free TX slot, or that a kick's send() leaves in the ring (ring_unsent), is
 * dropped and counted as the per-frame send drops one (pipeline.c port_put, port_kick).
 */
#include <linux/if_packet.h>
#include <sys/mman.h>

#define RING_FRAME 12288 /* tp_frame_size: 3 pages, > TPACKET2_HDRLEN + 9216 + a VLAN tag */
#define RING_BLOCK (RING_FRAME * 8)
#define RING_RX 1024
#define RING_TX 256
#define RING_TX_DATA (TPACKET2_HDRLEN - sizeof(struct sockaddr_ll)) /* where a TX frame starts */

typedef struct {
    unsigned char *map; /* NULL: no ring (the socket is read and written by Python) */
    unsigned rx_head, tx_head, pending; /* pending: TX slots written since the last kick */
} Ring;

/* Set up both rings on socket fd (its version first: it cannot change once a ring is
 * there); 0, or -1 with errno set and nothing mapped. */
static int ring_open(Ring *r, int fd) {
    int v = TPACKET_V2, one = 1;
    struct tpacket_req rx = {RING_BLOCK, RING_RX * RING_FRAME / RING_BLOCK, RING_FRAME, RING_RX};
    struct tpacket_req tx = {RING_BLOCK, RING_TX * RING_FRAME / RING_BLOCK, RING_FRAME, RING_TX};
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &rx, sizeof rx) < 0 ||
        setsockopt(fd, SOL_PACKET, PACKET_TX_RING, &tx, sizeof tx) < 0)
        return -1;
    void *m = mmap(NULL, (size_t)RING_FRAME * (RING_RX + RING_TX), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return -1;
    r->map = m;
    r->rx_head = r->tx_head = r->pending = 0;
    return 0;
}

static void ring_close(Ring *r) {
    if (r->map != NULL) munmap(r->map, (size_t)RING_FRAME * (RING_RX + RING_TX));
    r->map = NULL;
}

/* The slot of the k-th received frame from the next one (k = 0: the next), or NULL when
 * the kernel has not filled it yet (k < RING_RX; the frames before it are filled). */
static struct tpacket2_hdr *ring_rx_at(Ring *r, unsigned k) {
    size_t slot = (r->rx_head + k) % RING_RX;
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)(r->map + slot * RING_FRAME);
    return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER ? h : NULL;
}

/* The next slot (ring_rx_at's k = 0) is read: back to the kernel. */
static void ring_rx_done(Ring *r, struct tpacket2_hdr *h) {
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    r->rx_head = (r->rx_head + 1) % RING_RX;
}

static struct tpacket2_hdr *ring_tx_slot(Ring *r, unsigned k) {
    return (struct tpacket2_hdr *)(r->map + (size_t)(RING_RX + k % RING_TX) * RING_FRAME);
}

/* Write one frame into the next TX slot; 0, or -1 when the ring is full (the kernel has
 * not sent the frames of the last kicks: as a socket buffer that is full). */
static int ring_tx(Ring *r, const unsigned char *f, size_t n) {
    struct tpacket2_hdr *h = ring_tx_slot(r, r->tx_head);
    if (__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) != TP_STATUS_AVAILABLE ||
        n > RING_FRAME - RING_TX_DATA)
        return -1;
    memcpy((unsigned char *)h + RING_TX_DATA, f, n);
    h->tp_len = (unsigned)n;
    __atomic_store_n(&h->tp_status, TP_STATUS_SEND_REQUEST, __ATOMIC_RELEASE);
    r->tx_head = (r->tx_head + 1) % RING_TX;
    r->pending++;
    return 0;
}

/* Send what was written since the last kick (one syscall for them all): 0, or the errno
 * of a send() that failed (0 too for one that sent only some: see ring_unsent). */
static int ring_kick(Ring *r, int fd) {
    if (!r->pending) return 0;
    r->pending = 0;
    return send(fd, NULL, 0, MSG_DONTWAIT) < 0 ? errno : 0;
}

/* After a kick: how many of the frames written last the kernel left in the ring. It
 * takes the TP_STATUS_SEND_REQUEST slots in order and stops at the first it cannot send
 * - the driver refused it (ENOBUFS: no carrier, a veth peer's backlog full; the kernel
 * marks it SEND_REQUEST again), no send buffer for it (EAGAIN, or a partial send), the
 * device down (ENETDOWN) - so those left are the newest ones, in a row. No one else
 * marks a slot SEND_REQUEST and the kernel reads the ring only inside send(), so
 * after it returns this count is exact. */
static unsigned ring_unsent(Ring *r) {
    unsigned k = 0;
    while (k < RING_TX && __atomic_load_n(&ring_tx_slot(r, r->tx_head + RING_TX - 1 - k)->tp_status,
                                          __ATOMIC_ACQUIRE) == TP_STATUS_SEND_REQUEST)
        k++;
    return k;
}

/* The n newest frames out of the ring, unsent: their slots back to us, and the next
 * frame written goes where the kernel looks next (the oldest of them). */
static void ring_unwrite(Ring *r, unsigned n) {
    for (unsigned k = 0; k < n; k++) {
        r->tx_head = (r->tx_head + RING_TX - 1) % RING_TX;
        __atomic_store_n(&ring_tx_slot(r, r->tx_head)->tp_status, TP_STATUS_AVAILABLE,
                         __ATOMIC_RELEASE);
    }
}
