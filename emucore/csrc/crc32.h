/* CRC-32 of IEEE 802.3 (reflected polynomial 0xEDB88320), the same function as zlib's
 * crc32() and Python's zlib.crc32(): crc32_update(crc, buf, len) continues a running CRC
 * the way zlib.crc32(data, crc) does (start from 0).
 *
 * Two implementations, chosen once at run time: slicing-by-8 tables (Kounavis and Berry,
 * "A Systematic Approach to Building High Performance Software-based CRC Generators",
 * 2005), and on x86-64 with PCLMULQDQ the carry-less multiplication folding of Gopal et
 * al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel
 * white paper 323102, 2009), with the paper's bit-reflected constants k1..k5, mu and P'
 * as Linux's crc32-pclmul and Chromium's zlib use them. crc32_init() must run once
 * before use (module init); EMU_CRC32_TABLES set in the environment then keeps to the
 * tables (the tests run both). */
#ifndef EMU_CRC32_H
#define EMU_CRC32_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "crc32.h: the slicing tables assume a little-endian host"
#endif

static uint32_t crc32_table[8][256];
static int crc32_clmul;

#if defined(__x86_64__)
#include <immintrin.h>

/* Folds len bytes (len >= 64, a multiple of 16) into the inverted running CRC `crc`
 * (Intel 323102 sections 4-5: fold by 4 x 128 bits, then by 128, then Barrett). */
__attribute__((target("pclmul,sse4.1")))
static inline uint32_t crc32_fold(const unsigned char *buf, size_t len, uint32_t crc)
{
    _Alignas(16) static const uint64_t k1k2[] = {0x0154442bd4, 0x01c6e41596};
    _Alignas(16) static const uint64_t k3k4[] = {0x01751997d0, 0x00ccaa009e};
    _Alignas(16) static const uint64_t k5k0[] = {0x0163cd6124, 0x0000000000};
    _Alignas(16) static const uint64_t poly[] = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), _mm_loadu_si128((const __m128i *)(buf + 0x00)));
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), _mm_loadu_si128((const __m128i *)(buf + 0x10)));
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), _mm_loadu_si128((const __m128i *)(buf + 0x20)));
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), _mm_loadu_si128((const __m128i *)(buf + 0x30)));
        buf += 64;
        len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, x0, 0x11), x2), x5);
        buf += 16;
        len -= 16;
    }
    /* 128 -> 64 bits */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, x3), x0, 0x00), x2);
    /* Barrett reduction to 32 bits */
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, x3), x0, 0x10);
    x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, x3), x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static inline void crc32_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        crc32_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32_table[t][i] = (crc32_table[t - 1][i] >> 8)
                                ^ crc32_table[0][crc32_table[t - 1][i] & 0xFF];
#if defined(__x86_64__)
    __builtin_cpu_init();
    crc32_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    if (getenv("EMU_CRC32_TABLES") != NULL)  /* tests: the tables on long data too */
        crc32_clmul = 0;
#endif
}

/* The running CRC after `len` more bytes, as zlib.crc32(buf, crc). */
static inline uint32_t crc32_update(uint32_t crc, const unsigned char *p, size_t len)
{
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (crc32_clmul && len >= 64) {
        size_t chunk = len & ~(size_t)15;
        c = crc32_fold(p, chunk, c);
        p += chunk;
        len -= chunk;
    }
#endif
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);  /* little-endian host: x86-64, aarch64 */
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc32_table[7][lo & 0xFF] ^ crc32_table[6][(lo >> 8) & 0xFF]
            ^ crc32_table[5][(lo >> 16) & 0xFF] ^ crc32_table[4][lo >> 24]
            ^ crc32_table[3][hi & 0xFF] ^ crc32_table[2][(hi >> 8) & 0xFF]
            ^ crc32_table[1][(hi >> 16) & 0xFF] ^ crc32_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = (c >> 8) ^ crc32_table[0][(c ^ *p++) & 0xFF];
    return ~c;
}

#endif
