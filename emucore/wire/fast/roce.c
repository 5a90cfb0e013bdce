/* RoCEv2 frames in C: the NIC's per-frame build and parse, byte for byte the Python's.
 *
 * Mirrors, under the same names, emucore/wire/templates.py (FrameTemplate.build, parse,
 * malformed), emucore/wire/roce.py (icrc_reference, icrc_of) and emucore/wire/inet.py
 * (ones_sum, ipv4_header_sum0, set_ipv4_tos_len); the Python stays the reference and
 * tests/unit/test_fast_roce.py holds the two equal. Formats: InfiniBand Architecture
 * Specification Vol. 1 ch.9 (BTH, RETH, ImmDt, AETH) and annex A17 (RoCEv2: UDP 4791,
 * the ICRC over the masked headers, A17.3.3; the CNP, A17.9.2); RFC 791 / 768 / 1071
 * (IPv4, UDP, the Internet checksum); book ch.9 Figure 9-5 and ch.12 Figures 12-1..12-7.
 *
 * Frames come in and go out through the buffer protocol: `build` writes the frame into
 * the bytes object it returns (one copy of the payload, as the Python's join), `parse`
 * returns the Python's RoceFields with the payload a memoryview of the frame. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include "crc32.h"
#include "inet.h"
#include "pyargs.h"

enum { HDR_LEN = 54, OP_CNP = 0x81, ROCE_UDP_PORT = 4791, NFIELDS = 24 };

static PyTypeObject *RoceFields;  /* emucore.wire.templates.RoceFields */
static Py_ssize_t field_at[NFIELDS];  /* where its slots are, in field order */
static PyObject *FrameTemplate;  /* emucore.wire.templates.FrameTemplate */
static PyObject *StructError;  /* struct.error: what the Python's struct packing raises */
static PyObject *s_hdr, *s_dscp, *s_ecn;

static const unsigned char CNP_PAYLOAD[16];  /* templates._CNP_PAYLOAD */
static const unsigned char PADS[3];          /* templates._PADS */

/* An integer 0..hi for a struct field; struct.error otherwise, as struct.pack. */
static int pack_uint(PyObject *o, unsigned long long hi, unsigned long long *v)
{
    if (!PyLong_Check(o)) {
        PyErr_SetString(StructError, "required argument is not an integer");
        return -1;
    }
    *v = PyLong_AsUnsignedLongLong(o);
    if (PyErr_Occurred() || *v > hi) {
        PyErr_Clear();
        PyErr_SetString(StructError, "argument out of range");
        return -1;
    }
    return 0;
}

/* The CRC of the ICRC's masked pseudo-header (annex A17.3.3, as Linux rxe_icrc.c and
 * templates.FrameTemplate._ps): 8 bytes of 1s for the LRH, then the first `hl` bytes
 * from the IPv4 header `ip` (IHL `ihl` bytes) with TOS, TTL and header checksum set to
 * 1s, the UDP checksum set to 1s and the BTH's FECN/BECN/resv6 byte set to 1s. */
static uint32_t icrc_headers(const unsigned char *ip, size_t hl, size_t ihl)
{
    unsigned char ps[8 + 60 + 8 + 12];
    size_t n = 8 + hl, u = 8 + ihl;
    memset(ps, 0xFF, 8);
    memcpy(ps + 8, ip, hl);
    ps[9] = ps[16] = ps[18] = ps[19] = 0xFF;
    if (u + 12 < n)
        ps[u + 6] = ps[u + 7] = ps[u + 12] = 0xFF;
    return crc32_update(0, ps, n);
}

/* emucore.wire.roce.icrc_reference */
static PyObject *icrc_reference(PyObject *mod, PyObject *frame)
{
    Py_buffer v;
    (void)mod;
    if (PyObject_GetBuffer(frame, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *f = v.buf;
    size_t n = (size_t)v.len;
    if (n < 51) {  /* the Python's masks then index past its pseudo-header */
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_IndexError, "bytearray index out of range");
        return NULL;
    }
    size_t hl = n - 18 < 40 ? n - 18 : 40;
    uint32_t crc = icrc_headers(f + 14, hl, 20);
    crc = crc32_update(crc, f + 14 + hl, n - 18 - hl);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(crc);
}

/* emucore.wire.roce.icrc_of */
static PyObject *icrc_of(PyObject *mod, PyObject *frame)
{
    Py_buffer v;
    uint32_t crc;
    (void)mod;
    if (PyObject_GetBuffer(frame, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    if (v.len < 4) {
        PyBuffer_Release(&v);
        PyErr_SetString(StructError, "unpack_from requires a buffer of at least 4 bytes");
        return NULL;
    }
    memcpy(&crc, (const char *)v.buf + v.len - 4, 4);  /* little-endian on the wire */
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(crc);
}

/* The extension headers of FrameTemplate.build: RETH(va, rkey, dlen), ImmDt, AETH. */
static Py_ssize_t build_ext(unsigned char *ext, PyObject *reth, PyObject *imm, PyObject *aeth)
{
    Py_ssize_t n = 0;
    unsigned long long va, rkey, dlen, x, syn, msn;
    if (reth != NULL && reth != Py_None) {
        PyObject *t = PySequence_Tuple(reth);
        if (t == NULL)
            return -1;
        if (PyTuple_GET_SIZE(t) != 3) {
            PyErr_Format(StructError, "pack expected 3 items for packing (got %zd)",
                         PyTuple_GET_SIZE(t));
            Py_DECREF(t);
            return -1;
        }
        int bad = pack_uint(PyTuple_GET_ITEM(t, 0), UINT64_MAX, &va) < 0
                  || pack_uint(PyTuple_GET_ITEM(t, 1), 0xFFFFFFFFu, &rkey) < 0
                  || pack_uint(PyTuple_GET_ITEM(t, 2), 0xFFFFFFFFu, &dlen) < 0;
        Py_DECREF(t);
        if (bad)
            return -1;
        put32(ext, (uint32_t)(va >> 32));
        put32(ext + 4, (uint32_t)va);
        put32(ext + 8, (uint32_t)rkey);
        put32(ext + 12, (uint32_t)dlen);
        n = 16;
    }
    if (imm != NULL && imm != Py_None) {
        if (pack_uint(imm, 0xFFFFFFFFu, &x) < 0)
            return -1;
        put32(ext + n, (uint32_t)x);
        n += 4;
    }
    if (aeth != NULL && aeth != Py_None) {  /* (syndrome << 24) | msn as one '!I' */
        PyObject *a0 = PySequence_GetItem(aeth, 0), *a1 = a0 ? PySequence_GetItem(aeth, 1) : NULL;
        int bad = a1 == NULL || pack_uint(a0, 0xFF, &syn) < 0
                  || pack_uint(a1, 0xFFFFFFFFu, &msn) < 0;
        Py_XDECREF(a0);
        Py_XDECREF(a1);
        if (bad)
            return -1;
        put32(ext + n, (uint32_t)(syn << 24 | msn));
        n += 4;
    }
    return n;
}

/* The TOS of FrameTemplate.build: (dscp << 2) | ecn, each the template's when None. */
static int build_tos(PyObject *self, PyObject *dscp, PyObject *ecn, unsigned *tos)
{
    PyObject *d = dscp != NULL && dscp != Py_None ? (Py_INCREF(dscp), dscp)
                                                  : PyObject_GetAttr(self, s_dscp);
    PyObject *e = ecn != NULL && ecn != Py_None ? (Py_INCREF(ecn), ecn)
                                                : PyObject_GetAttr(self, s_ecn);
    unsigned long long dv = 0, ev = 0;
    int rc = d == NULL || e == NULL || pack_uint(d, 0xFF, &dv) < 0 || pack_uint(e, 0xFF, &ev) < 0
             ? -1 : 0;
    Py_XDECREF(d);
    Py_XDECREF(e);
    if (rc == 0 && (dv << 2 | ev) > 0xFF) {
        PyErr_SetString(StructError, "ubyte format requires 0 <= number <= 255");
        rc = -1;
    }
    *tos = (unsigned)(dv << 2 | ev);
    return rc;
}

static const char *const BUILD_KW[] = {"self", "opcode", "psn", "ackreq", "reth", "imm", "aeth",
                                       "payload", "ecn", "becn", "dscp"};

/* FrameTemplate.build(self, opcode, psn, ackreq=False, reth=None, imm=None, aeth=None,
 * payload=b"", ecn=None, becn=False, dscp=None) of emucore/wire/templates.py. */
static PyObject *build(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[11], *hdr = NULL, *out = NULL;
    unsigned char ext[24];
    unsigned long long opcode, psnv;
    unsigned tos;
    Py_buffer pv = {0};
    a[0] = self;
    if (bind_args("build", BUILD_KW + 1, 10, 2, args, nargs, kwnames, a + 1) < 0)
        return NULL;
    Py_ssize_t next = build_ext(ext, a[4], a[5], a[6]);
    if (next < 0)
        return NULL;
    if (!PyLong_Check(a[2])) {
        PyErr_SetString(PyExc_TypeError, "psn: an integer is required");
        return NULL;
    }
    psnv = PyLong_AsUnsignedLongLongMask(a[2]) & 0xFFFFFF;
    int ackreq = truth(a[3]), becn = truth(a[9]);
    if (psnv == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (ackreq < 0 || becn < 0 || pack_uint(a[1], 0xFF, &opcode) < 0)
        return NULL;
    if (a[7] != NULL && PyObject_GetBuffer(a[7], &pv, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *pl = a[7] != NULL ? pv.buf : NULL;
    size_t plen = a[7] != NULL ? (size_t)pv.len : 0, pad;
    if (opcode == OP_CNP) {
        pad = 0;
        if (plen == 0) {
            pl = CNP_PAYLOAD;
            plen = sizeof CNP_PAYLOAD;
        }
    } else {
        pad = -plen & 3;
    }
    size_t ip_len = 40 + (size_t)next + plen + pad + 4;
    if (ip_len > 0xFFFF) {
        PyErr_SetString(StructError, "'H' format requires 0 <= number <= 65535");
        goto done;
    }
    if (build_tos(a[0], a[10], a[8], &tos) < 0 || (hdr = PyObject_GetAttr(a[0], s_hdr)) == NULL)
        goto done;
    if (!PyBytes_Check(hdr) || PyBytes_GET_SIZE(hdr) != HDR_LEN) {
        PyErr_SetString(PyExc_TypeError, "build: the template's _hdr must be 54 bytes");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(14 + ip_len));
    if (out == NULL)
        goto done;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    memcpy(o, PyBytes_AS_STRING(hdr), HDR_LEN);
    set_ipv4_tos_len(o, 14, ipv4_header_sum0(o + 14), tos, (unsigned)ip_len);
    put16(o + 38, (unsigned)ip_len - 20);
    o[42] = (unsigned char)opcode;
    o[43] = (unsigned char)(pad << 4);
    o[46] = becn ? 0x40 : 0;
    put32(o + 50, (uint32_t)psnv | (ackreq ? 0x80000000u : 0));
    unsigned char *p = o + HDR_LEN;
    memcpy(p, ext, (size_t)next);
    p += next;
    if (plen)
        memcpy(p, pl, plen);
    p += plen;
    memcpy(p, PADS, pad);
    p += pad;
    uint32_t crc = icrc_headers(o + 14, 40, 20);
    crc = crc32_update(crc, o + HDR_LEN, (size_t)(p - o) - HDR_LEN);
    memcpy(p, &crc, 4);  /* little-endian on the wire */
done:
    if (a[7] != NULL)
        PyBuffer_Release(&pv);
    Py_XDECREF(hdr);
    return out;
}

/* socket.inet_ntoa: the dotted quad, from a 64-entry cache of the last addresses seen
 * (a NIC sees few; snprintf cost 1,700 instructions an address) */
static PyObject *ip_cache[64];
static uint32_t ip_key[64];

static PyObject *ipv4_str(const unsigned char *a)
{
    uint32_t k = be32(a);
    unsigned h = (k * 2654435761u) >> 26;  /* Fibonacci hashing, 6 bits */
    char s[16];
    size_t n = 0;
    if (ip_cache[h] != NULL && ip_key[h] == k)
        return Py_NewRef(ip_cache[h]);
    for (int i = 0; i < 4; i++) {
        unsigned v = a[i];
        if (v >= 100)
            s[n++] = (char)('0' + v / 100);
        if (v >= 10)
            s[n++] = (char)('0' + v / 10 % 10);
        s[n++] = (char)('0' + v % 10);
        if (i < 3)
            s[n++] = '.';
    }
    PyObject *o = PyUnicode_DecodeASCII(s, (Py_ssize_t)n, NULL);
    if (o != NULL) {
        Py_XSETREF(ip_cache[h], Py_NewRef(o));
        ip_key[h] = k;
    }
    return o;
}

static PyObject *u32_or_none(int present, uint32_t v)
{
    if (!present)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(v);
}

static PyObject *bool_or_none(int verified, int ok)
{
    if (!verified)
        Py_RETURN_NONE;
    return PyBool_FromLong(ok);
}

/* RoceFields(*f), its references stolen: the dataclass's __init__ only stores each
 * argument in its slot, so the slots are filled directly (1.5 us less per frame). */
static PyObject *new_fields(PyObject **f)
{
    PyObject *o = RoceFields->tp_alloc(RoceFields, 0);
    if (o == NULL) {
        for (int i = 0; i < NFIELDS; i++)
            Py_DECREF(f[i]);
        return NULL;
    }
    for (int i = 0; i < NFIELDS; i++)
        *(PyObject **)((char *)o + field_at[i]) = f[i];
    return o;
}

/* Finds RoceFields' slots: its fields, in order, each a plain object slot; anything
 * else (a __post_init__, a field added in Python only) is an ImportError here. */
static int find_fields(PyObject *cls)
{
    PyObject *names = PyObject_GetAttrString(cls, "__match_args__");
    int rc = -1;
    if (names == NULL)
        return -1;
    if (!PyType_Check(cls) || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) != NFIELDS
        || PyObject_HasAttrString(cls, "__post_init__")) {
        PyErr_SetString(PyExc_ImportError, "_roce: RoceFields is not the one this C mirrors");
        goto out;
    }
    for (int i = 0; i < NFIELDS; i++) {
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)cls)->tp_dict,
                                              PyTuple_GET_ITEM(names, i));
        if (d == NULL || !PyObject_TypeCheck(d, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            PyErr_Format(PyExc_ImportError, "_roce: RoceFields.%U is not a slot",
                         PyTuple_GET_ITEM(names, i));
            goto out;
        }
        field_at[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    RoceFields = (PyTypeObject *)cls;
    rc = 0;
out:
    Py_DECREF(names);
    return rc;
}

static const char *const PARSE_KW[] = {"frame", "verify_icrc", "verify_csum"};

/* emucore.wire.templates.parse(frame, verify_icrc=False, verify_csum=False) */
static PyObject *parse(PyObject *mod, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *a[3], *res = NULL;
    Py_buffer v;
    (void)mod;
    if (bind_args("parse", PARSE_KW, 3, 1, args, nargs, kwnames, a) < 0)
        return NULL;
    int vicrc = truth(a[1]), vcsum = truth(a[2]);
    if (vicrc < 0 || vcsum < 0 || PyObject_GetBuffer(a[0], &v, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *m = v.buf;
    size_t n = (size_t)v.len, l3 = 14;
    unsigned etype = n >= 14 ? be16(m + 12) : 0;
    if (etype == 0x8100 && n >= 18) {
        etype = be16(m + 16);
        l3 = 18;
    }
    if (etype != 0x0800 || n < l3 + 20 || m[l3] >> 4 != 4 || m[l3 + 9] != 17)
        goto none;
    size_t ihl = (size_t)(m[l3] & 0xF) * 4, l4 = l3 + ihl, end = l3 + be16(m + l3 + 2);
    if (ihl < 20 || end > n || l4 + 8 + 12 + 4 > end)
        goto none;
    if (be16(m + l4 + 2) != ROCE_UDP_PORT || be16(m + l4 + 4) != end - l4)
        goto none;
    size_t b = l4 + 8, off = b + 12;
    unsigned op = m[b];
    int is_reth = op == 0x06 || op == 0x0A || op == 0x0B || op == 0x0C;  /* ib.RETH_OPS */
    int is_imm = op == 0x03 || op == 0x05 || op == 0x09 || op == 0x0B;   /* ib.IMM_OPS */
    int is_aeth = op == 0x11 || op == 0x51;                              /* ib.AETH_OPS */
    size_t reth_at = off, imm_at = off + (is_reth ? 16 : 0);
    size_t aeth_at = imm_at + (is_imm ? 4 : 0);
    off = aeth_at + (is_aeth ? 4 : 0);
    if (off > n)  /* struct.error in the Python: the headers run past the frame */
        goto none;
    unsigned padcount = (m[b + 1] >> 4) & 3;
    if (end - 4 - (op == OP_CNP ? 0 : padcount) < off)
        goto none;
    size_t pend = end - 4 - (op == OP_CNP ? 0 : padcount);
    uint32_t aw = be32(m + b + 8), ae = is_aeth ? be32(m + aeth_at) : 0;
    unsigned tos = m[l3 + 1], fb = m[b + 4];
    int icrc_ok = 0, csum_ok = 0;
    if (vicrc) {
        uint32_t crc = icrc_headers(m + l3, ihl + 20, ihl), want;
        crc = crc32_update(crc, m + b + 12, end - 4 - (b + 12));
        memcpy(&want, m + end - 4, 4);
        icrc_ok = crc == want;
    }
    if (vcsum) {
        csum_ok = ones_sum(ones_add(0, m + l3, ihl)) == 0xFFFF;
        if (csum_ok && (m[l4 + 6] || m[l4 + 7])) {  /* inet.udp4_ok */
            unsigned char ph[12];
            memcpy(ph, m + l3 + 12, 8);
            ph[8] = 0;
            ph[9] = 17;
            put16(ph + 10, (unsigned)(end - l4));
            csum_ok = ones_sum(ones_add(ones_add(0, ph, 12), m + l4, end - l4)) == 0xFFFF;
        }
    }
    PyObject *mv = PyMemoryView_FromObject(a[0]);
    PyObject *f[NFIELDS] = {
        PyLong_FromUnsignedLong(op), PyLong_FromUnsignedLong(be32(m + b + 4) & 0xFFFFFF),
        PyLong_FromUnsignedLong(aw & 0xFFFFFF), PyBool_FromLong(aw >> 31),
        PyBool_FromLong(fb & 0x40), PyBool_FromLong(fb & 0x80),
        PyLong_FromUnsignedLong(be16(m + b + 2)), PyLong_FromUnsignedLong(padcount),
        is_reth ? PyLong_FromUnsignedLongLong((unsigned long long)be32(m + reth_at) << 32
                                              | be32(m + reth_at + 4))
                : Py_NewRef(Py_None),
        u32_or_none(is_reth, is_reth ? be32(m + reth_at + 8) : 0),
        u32_or_none(is_reth, is_reth ? be32(m + reth_at + 12) : 0),
        u32_or_none(is_imm, is_imm ? be32(m + imm_at) : 0),
        u32_or_none(is_aeth, ae >> 24), u32_or_none(is_aeth, ae & 0xFFFFFF),
        mv ? PySequence_GetSlice(mv, (Py_ssize_t)off, (Py_ssize_t)pend) : NULL,
        ipv4_str(m + l3 + 12), ipv4_str(m + l3 + 16), PyLong_FromUnsignedLong(be16(m + l4)),
        PyLong_FromUnsignedLong(tos >> 2), PyLong_FromUnsignedLong(tos & 3),
        PyBytes_FromStringAndSize((const char *)m + 6, 6),
        PyBytes_FromStringAndSize((const char *)m, 6),
        bool_or_none(vicrc, icrc_ok), bool_or_none(vcsum, csum_ok)};
    Py_XDECREF(mv);
    int ok = 1;
    for (int i = 0; i < NFIELDS; i++)
        ok &= f[i] != NULL;
    if (ok)
        res = new_fields(f);
    else
        for (int i = 0; i < NFIELDS; i++)
            Py_XDECREF(f[i]);
    PyBuffer_Release(&v);
    return res;
none:
    PyBuffer_Release(&v);
    Py_RETURN_NONE;
}

/* emucore.wire.templates.malformed */
static PyObject *malformed(PyObject *mod, PyObject *frame)
{
    Py_buffer v;
    int r;
    (void)mod;
    if (PyObject_GetBuffer(frame, &v, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *m = v.buf;
    size_t n = (size_t)v.len, l3 = 14, ihl, ip_len;
    unsigned etype = n >= 14 ? be16(m + 12) : 0;
    if (n < 14) {
        r = 1;
    } else if (etype == 0x8100 && n < 18) {
        r = 1;
    } else {
        if (etype == 0x8100) {
            etype = be16(m + 16);
            l3 = 18;
        }
        if (etype != 0x0800)
            r = 0;
        else if (n < l3 + 20 || m[l3] >> 4 != 4)
            r = 1;
        else if ((ihl = (size_t)(m[l3] & 0xF) * 4) < 20
                 || (ip_len = be16(m + l3 + 2)) < ihl || l3 + ip_len > n)
            r = 1;
        else if (m[l3 + 9] != 17)
            r = 0;
        else if (l3 + ihl + 4 > l3 + ip_len)
            r = 1;  /* UDP ports cut */
        else
            r = be16(m + l3 + ihl + 2) == ROCE_UDP_PORT;
    }
    PyBuffer_Release(&v);
    return PyBool_FromLong(r);
}

static PyMethodDef build_def = {
    "build", (PyCFunction)(void (*)(void))build, METH_FASTCALL | METH_KEYWORDS,
    "FrameTemplate.build(self, opcode, psn, ackreq=False, reth=None, imm=None, aeth=None, "
    "payload=b'', ecn=None, becn=False, dscp=None) of emucore.wire.templates, in C."};

/* `build` as a method descriptor of class `cls` (a FrameTemplate subclass): bound as
 * the interpreter binds a Python method, without a bound-method object per call. */
static PyObject *method_of(PyObject *mod, PyObject *cls)
{
    (void)mod;
    if (!PyType_Check(cls) || !PyObject_IsSubclass(cls, (PyObject *)FrameTemplate)) {
        PyErr_SetString(PyExc_TypeError, "method_of: a FrameTemplate subclass is needed");
        return NULL;
    }
    return PyDescr_NewMethod((PyTypeObject *)cls, &build_def);
}

static PyMethodDef methods[] = {
    {"method_of", method_of, METH_O, "FrameTemplate.build, in C, as a method of class cls."},
    {"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL | METH_KEYWORDS,
     "emucore.wire.templates.parse(frame, verify_icrc=False, verify_csum=False), in C."},
    {"malformed", malformed, METH_O, "emucore.wire.templates.malformed(frame), in C."},
    {"icrc_reference", icrc_reference, METH_O, "emucore.wire.roce.icrc_reference, in C."},
    {"icrc_of", icrc_of, METH_O, "emucore.wire.roce.icrc_of, in C."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_roce",
                                    "RoCEv2 frame build and parse in C (emucore.wire.fast).",
                                    -1, methods, NULL, NULL, NULL, NULL};

static PyObject *attr_of(const char *modname, const char *name)
{
    PyObject *m = PyImport_ImportModule(modname), *a;
    if (m == NULL)
        return NULL;
    a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

PyMODINIT_FUNC PyInit__roce(void)
{
    PyObject *fields = NULL;  /* kept: RoceFields */
    crc32_init();
    if ((StructError = attr_of("struct", "error")) == NULL
        || (FrameTemplate = attr_of("emucore.wire.templates", "FrameTemplate")) == NULL
        || (fields = attr_of("emucore.wire.templates", "RoceFields")) == NULL
        || find_fields(fields) < 0
        || (s_hdr = PyUnicode_InternFromString("_hdr")) == NULL
        || (s_dscp = PyUnicode_InternFromString("dscp")) == NULL
        || (s_ecn = PyUnicode_InternFromString("ecn")) == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "CLMUL", crc32_clmul) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
