/* Argument binding for METH_FASTCALL | METH_KEYWORDS functions of the compiled modules:
 * positional arguments, then keywords, by name, as a Python def binds them (a missing
 * required one, an unknown or repeated keyword is a TypeError). Needs Python.h first. */
#ifndef EMU_PYARGS_H
#define EMU_PYARGS_H

#include <string.h>

/* Binds fast-call arguments to `names` (positional, then by keyword); the first
 * `nreq` are required, absent ones stay NULL. */
static inline int bind_args(const char *fn, const char *const *names, int nmax, int nreq,
                     PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **out)
{
    for (int i = 0; i < nmax; i++)
        out[i] = i < nargs ? args[i] : NULL;
    if (nargs > nmax) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments", fn, nmax);
        return -1;
    }
    Py_ssize_t nk = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nk; k++) {
        const char *key = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, k));
        int j = 0;
        if (key == NULL)
            return -1;
        while (j < nmax && strcmp(names[j], key) != 0)
            j++;
        if (j == nmax || out[j] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got %s argument '%s'", fn,
                         j == nmax ? "an unexpected keyword" : "multiple values for", key);
            return -1;
        }
        out[j] = args[nargs + k];
    }
    for (int i = 0; i < nreq; i++)
        if (out[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "%s() missing argument '%s'", fn, names[i]);
            return -1;
        }
    return 0;
}

static inline int truth(PyObject *o) { return o == NULL ? 0 : PyObject_IsTrue(o); }

#endif
