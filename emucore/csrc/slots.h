/* The slots of a slotted class (a dataclass(slots=True), a __slots__ class) read and
 * written from C through its member descriptors' offsets, as getattr / setattr would (an
 * unset slot reads NULL: the caller raises the AttributeError), for the compiled modules
 * that build or read emucore.wire.ib.RocePkt (traffic/fast/rc.c, traffic/fast/nicrx.c).
 * Checks at bind time raise ImportError naming the module `who`. Needs Python.h and
 * structmember.h first. Issue 30. */
#ifndef EMU_SLOTS_H
#define EMU_SLOTS_H

/* emucore.wire.ib.RocePkt's fields in its dataclass order: the first 14, then its two
 * addresses (emucore.wire.templates.RoceFields names the first 14 alike). */
#define ROCE_PKT_HEAD                                                                        \
    "opcode", "dqpn", "psn", "ackreq", "becn", "fecn", "pkey", "va", "rkey", "dlen",       \
        "syndrome", "msn", "imm", "payload"
#define ROCE_PKT_FIELDS ROCE_PKT_HEAD, "src", "dst"
#define N_ROCE_PKT 16
_Static_assert(sizeof((const char *[]){ROCE_PKT_FIELDS}) / sizeof(const char *) == N_ROCE_PKT,
               "N_ROCE_PKT counts ROCE_PKT_FIELDS");

/* The slot at offset `off` of object `o` (an lvalue: a borrowed reference or NULL). */
#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* off[i]: the offset of `names[i]`, a plain object slot (T_OBJECT_EX member descriptor) in
 * `type`'s own dict: 0, -1 an error (ImportError when `type` is not a class or a name is no
 * such slot). */
static inline int slot_offsets(PyObject *type, const char *const *names, int n,
                               Py_ssize_t *off, const char *who)
{
    if (!PyType_Check(type)) {
        PyErr_Format(PyExc_ImportError, "%s: %R is not a class", who, type);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        PyObject *key = PyUnicode_FromString(names[i]);
        if (key == NULL)
            return -1;
        PyObject *d = PyDict_GetItemWithError(((PyTypeObject *)type)->tp_dict, key);
        Py_DECREF(key);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ImportError, "%s: %R.%s is not a slot", who, type, names[i]);
            return -1;
        }
        off[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    return 0;
}

/* Whether `type`'s __dataclass_fields__ are exactly `names`, in that order (the order of
 * its __init__'s arguments): 0, -1 an error (ImportError when they are not). */
static inline int dataclass_order(PyObject *type, const char *const *names, int n, const char *who)
{
    PyObject *fields = PyObject_GetAttrString(type, "__dataclass_fields__"), *key, *val;
    if (fields == NULL)
        return -1;
    int ok = PyDict_Check(fields) && PyDict_GET_SIZE(fields) == n;
    Py_ssize_t pos = 0;
    for (int i = 0; ok && PyDict_Next(fields, &pos, &key, &val); i++)
        ok = PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, names[i]) == 0;
    Py_DECREF(fields);
    if (!ok)
        PyErr_Format(PyExc_ImportError, "%s: %R's dataclass fields are not the %d it fills, "
                                        "in that order", who, type, n);
    return ok ? 0 : -1;
}

/* A new `type` object (no __init__ runs) whose slot off[i] holds v[i] (borrowed, none
 * NULL) for i < n, as a dataclass __init__ of those n fields stores them. */
static inline PyObject *slots_new(PyTypeObject *type, PyObject *const *v, const Py_ssize_t *off,
                                  int n)
{
    PyObject *p = type->tp_alloc(type, 0);
    if (p == NULL)
        return NULL;
    for (int i = 0; i < n; i++)
        SLOT(p, off[i]) = Py_NewRef(v[i]);
    return p;
}

#endif
