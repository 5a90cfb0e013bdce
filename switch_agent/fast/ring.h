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

/* The next received frame's slot, or NULL when the kernel has not filled it yet. */
static struct tpacket2_hdr *ring_rx(Ring *r) {
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)(r->map + (size_t)r->rx_head * RING_FRAME);
    return __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER ? h : NULL;
}

/* The slot is read: back to the kernel. */
static void ring_rx_done(Ring *r, struct tpacket2_hdr *h) {
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    r->rx_head = (r->rx_head + 1) % RING_RX;
}

/* Write one frame into the next TX slot; 0, or -1 when the ring is full (the kernel has
 * not sent the frames of the last kicks: as a socket buffer that is full). */
static int ring_tx(Ring *r, const unsigned char *f, size_t n) {
    struct tpacket2_hdr *h = (struct tpacket2_hdr *)(r->map + (size_t)(RING_RX + r->tx_head) * RING_FRAME);
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

/* Send what was written since the last kick (one syscall for them all). */
static void ring_kick(Ring *r, int fd) {
    if (!r->pending) return;
    r->pending = 0;
    (void)send(fd, NULL, 0, MSG_DONTWAIT);
}

/* ring_tx, kicking the ring once when it is full of frames not yet kicked (QDISC_BYPASS:
 * the kick hands them to the driver at once, their slots come back) */
static int ring_put(Ring *r, int fd, const unsigned char *f, size_t n) {
    if (ring_tx(r, f, n) == 0) return 0;
    if (!r->pending) return -1;
    ring_kick(r, fd);
    return ring_tx(r, f, n);
}
