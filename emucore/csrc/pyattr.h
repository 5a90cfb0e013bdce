/* Attribute access of the compiled modules that work on Python objects' own state
 * (traffic/fast/rc.c, traffic/fast/nictx.c): getattr as a C long long or double, setattr
 * from one. Each returns 0, or -1 with the Python exception set (a missing attribute, or
 * one that is not a number). Needs Python.h first. */
#ifndef EMU_PYATTR_H
#define EMU_PYATTR_H

static inline int get_ll(PyObject *o, PyObject *name, long long *v)
{
    PyObject *x = PyObject_GetAttr(o, name);
    if (x == NULL)
        return -1;
    *v = PyLong_AsLongLong(x);
    Py_DECREF(x);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

static inline int set_ll(PyObject *o, PyObject *name, long long v)
{
    PyObject *x = PyLong_FromLongLong(v);
    int rc = x == NULL ? -1 : PyObject_SetAttr(o, name, x);
    Py_XDECREF(x);
    return rc;
}

static inline int get_d(PyObject *o, PyObject *name, double *v)
{
    PyObject *x = PyObject_GetAttr(o, name);
    if (x == NULL)
        return -1;
    *v = PyFloat_AsDouble(x);
    Py_DECREF(x);
    return *v == -1.0 && PyErr_Occurred() ? -1 : 0;
}

static inline int set_d(PyObject *o, PyObject *name, double v)
{
    PyObject *x = PyFloat_FromDouble(v);
    int rc = x == NULL ? -1 : PyObject_SetAttr(o, name, x);
    Py_XDECREF(x);
    return rc;
}

#endif
