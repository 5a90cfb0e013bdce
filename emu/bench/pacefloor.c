/* The floor of a paced sender's CPU per frame (emu.bench.niccpu, issue 30).
 *
 * What a NIC loop entirely in C must do at least: sleep to an absolute deadline every
 * P us, then send one frame on an AF_PACKET socket (ETH_P_ALL, PACKET_IGNORE_OUTGOING,
 * as emucore/rawsock.py opens the NIC's and the agents' ports) over a veth into another
 * namespace. Modes:
 *
 *   send IFNAME PERIOD_US FRAMES LEN WAIT TOUCH_MB
 *       WAIT: "sleep" (clock_nanosleep, TIMER_ABSTIME) or "poll" (ppoll on the socket
 *       with the time left to the deadline, reading what came meanwhile, as a NIC must
 *       watch the wire); TOUCH_MB > 0 copies each frame's payload from the next 4 KB of a
 *       buffer of that size (a WRITE's payload read from the MR), 0 sends one buffer.
 *       Prints one line: "frames F cpu_us_per_frame C late_mean_us L late_p99_us P
 *       nvcsw V nivcsw I rx R" - the loop thread's CPU (CLOCK_THREAD_CPUTIME_ID) per
 *       frame, the wake-ups' lateness past the deadline, context switches
 *       (getrusage RUSAGE_THREAD), frames read (poll mode).
 *   sink IFNAME SECONDS ECHO
 *       reads frames on IFNAME (the peer's port, as a switch agent's); ECHO 1 sends
 *       each back (the sender then receives one frame per frame sent). Exits after
 *       SECONDS.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

static int64_t ns_of(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000LL + t->tv_nsec; }

static struct timespec ts_of(int64_t ns) {
    struct timespec t = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    return t;
}

static int64_t now_ns(clockid_t c) {
    struct timespec t;
    clock_gettime(c, &t);
    return ns_of(&t);
}

static int open_port(const char *ifname) {
    int s = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (s < 0) { perror("socket"); exit(1); }
    int one = 1;
    setsockopt(s, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    struct sockaddr_ll a;
    memset(&a, 0, sizeof a);
    a.sll_family = AF_PACKET;
    a.sll_protocol = htons(ETH_P_ALL);
    a.sll_ifindex = (int)if_nametoindex(ifname);
    if (a.sll_ifindex == 0 || bind(s, (struct sockaddr *)&a, sizeof a) < 0) { perror("bind"); exit(1); }
    return s;
}

/* A RoCEv2-shaped frame: Ethernet, IPv4, UDP 4791, then LEN - 42 bytes of payload. */
static void frame_init(uint8_t *f, size_t len) {
    memset(f, 0, len);
    static const uint8_t dst[6] = {0x02, 0, 0, 0, 0, 2}, src[6] = {0x02, 0, 0, 0, 0, 1};
    memcpy(f, dst, 6);
    memcpy(f + 6, src, 6);
    f[12] = 0x08; f[13] = 0x00;
    uint8_t *ip = f + 14;
    ip[0] = 0x45;
    uint16_t tl = htons((uint16_t)(len - 14));
    memcpy(ip + 2, &tl, 2);
    ip[8] = 64; ip[9] = 17;
    ip[12] = 10; ip[15] = 1; ip[16] = 10; ip[19] = 2;
    uint8_t *udp = ip + 20;
    uint16_t dp = htons(4791), ul = htons((uint16_t)(len - 34));
    memcpy(udp + 2, &dp, 2);
    memcpy(udp + 4, &ul, 2);
}

static int cmp64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int do_send(const char *ifname, double period_us, long frames, size_t len, const char *wait,
                   long touch_mb) {
    int s = open_port(ifname);
    int poll_mode = strcmp(wait, "poll") == 0;
    uint8_t *f = malloc(len), rx[9216];
    size_t mr_len = (size_t)touch_mb << 20;
    uint8_t *mr = mr_len ? malloc(mr_len) : NULL;
    int64_t *late = calloc((size_t)frames, sizeof *late);
    if (!f || !late || (mr_len && !mr)) { perror("malloc"); return 1; }
    if (mr) memset(mr, 1, mr_len);
    frame_init(f, len);
    size_t off = 0, pay = len - 42;
    long nrx = 0;
    int64_t period = (int64_t)(period_us * 1000.0), t = now_ns(CLOCK_MONOTONIC) + period;
    struct rusage r0, r1;
    getrusage(RUSAGE_THREAD, &r0);
    int64_t c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < frames; i++, t += period) {
        if (poll_mode) {
            struct pollfd p = {.fd = s, .events = POLLIN};
            for (;;) {
                int64_t left = t - now_ns(CLOCK_MONOTONIC);
                if (left <= 0) break;
                struct timespec to = ts_of(left);
                if (ppoll(&p, 1, &to, NULL) > 0)
                    while (recv(s, rx, sizeof rx, MSG_DONTWAIT) > 0) nrx++;
            }
        } else {
            struct timespec d = ts_of(t);
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL) == EINTR) {}
        }
        late[i] = now_ns(CLOCK_MONOTONIC) - t;
        if (mr) {
            if (off + pay > mr_len) off = 0;
            memcpy(f + 42, mr + off, pay);
            off += 4096;
        }
        if (send(s, f, len, 0) != (ssize_t)len) { perror("send"); return 1; }
    }
    int64_t c1 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    getrusage(RUSAGE_THREAD, &r1);
    double mean = 0;
    for (long i = 0; i < frames; i++) mean += (double)late[i];
    mean /= (double)frames;
    qsort(late, (size_t)frames, sizeof *late, cmp64);
    printf("frames %ld cpu_us_per_frame %.2f late_mean_us %.1f late_p99_us %.1f nvcsw %ld nivcsw %ld rx %ld\n",
           frames, (double)(c1 - c0) / 1000.0 / (double)frames, mean / 1000.0,
           (double)late[(size_t)((double)frames * 0.99)] / 1000.0, r1.ru_nvcsw - r0.ru_nvcsw,
           r1.ru_nivcsw - r0.ru_nivcsw, nrx);
    free(f); free(mr); free(late);
    close(s);
    return 0;
}

static int do_sink(const char *ifname, double seconds, int echo) {
    int s = open_port(ifname);
    uint8_t b[9216];
    int64_t end = now_ns(CLOCK_MONOTONIC) + (int64_t)(seconds * 1e9);
    long n = 0;
    struct pollfd p = {.fd = s, .events = POLLIN};
    while (now_ns(CLOCK_MONOTONIC) < end) {
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t k;
        while ((k = recv(s, b, sizeof b, MSG_DONTWAIT)) > 0) {
            n++;
            if (echo && send(s, b, (size_t)k, 0) < 0) { perror("send"); return 1; }
        }
    }
    printf("sink %ld\n", n);
    close(s);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 8 && strcmp(argv[1], "send") == 0)
        return do_send(argv[2], atof(argv[3]), atol(argv[4]), (size_t)atol(argv[5]), argv[6], atol(argv[7]));
    if (argc == 5 && strcmp(argv[1], "sink") == 0) return do_sink(argv[2], atof(argv[3]), atoi(argv[4]));
    fprintf(stderr, "usage: %s send IFNAME PERIOD_US FRAMES LEN sleep|poll TOUCH_MB | sink IFNAME SECONDS ECHO\n",
            argv[0]);
    return 2;
}
