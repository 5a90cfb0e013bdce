/* The Internet checksum (RFC 1071) of IPv4 headers (RFC 791) and UDP (RFC 768), and
 * big-endian field access: the C of emucore/wire/inet.py under the same names, for the
 * compiled modules (emucore/wire/fast/roce.c). Static inline functions: each module that
 * includes this header gets its own copy of those it uses. */
#ifndef EMU_INET_H
#define EMU_INET_H

#include <stddef.h>
#include <stdint.h>

static inline unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }
static inline uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)(v >> 8);
    p[1] = (unsigned char)v;
}
static inline void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

/* emucore.wire.inet.ones_sum, accumulated: add `len` bytes as big-endian 16-bit words
 * (an odd last byte padded with a zero byte) to `acc`. */
static inline uint64_t ones_add(uint64_t acc, const unsigned char *p, size_t len)
{
    for (; len >= 2; p += 2, len -= 2)
        acc += be16(p);
    if (len)
        acc += (uint64_t)p[0] << 8;
    return acc;
}

/* emucore.wire.inet.ones_sum: the end-around-carry fold (0xFFFF for nonzero data whose
 * sum is 0 modulo 0xFFFF, 0 only for all-zero data). */
static inline unsigned ones_sum(uint64_t acc)
{
    while (acc >> 16)
        acc = (acc & 0xFFFF) + (acc >> 16);
    return (unsigned)acc;
}

/* emucore.wire.inet.ipv4_header_sum0 */
static inline uint32_t ipv4_header_sum0(const unsigned char *ip)
{
    return (uint32_t)ones_add(0, ip, 20) - ((uint32_t)ip[0] << 8);
}

/* emucore.wire.inet.set_ipv4_tos_len */
static inline void set_ipv4_tos_len(unsigned char *hdr, size_t at, uint32_t sum0, unsigned tos,
                             unsigned ip_len)
{
    hdr[at + 1] = (unsigned char)tos;
    put16(hdr + at + 2, ip_len);
    uint32_t s = sum0 + ((unsigned)hdr[at] << 8 | tos) + ip_len;
    s = (s & 0xFFFF) + (s >> 16);
    s = (s & 0xFFFF) + (s >> 16);
    put16(hdr + at + 10, ~s & 0xFFFF);
}

#endif
