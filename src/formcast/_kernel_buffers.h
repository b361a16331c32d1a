/* What formcast's C kernels (the compiled build: formcast._native.NATIVE_KERNELS) share: taking
 * numpy arrays as checked buffers.
 *
 * Include it first, after defining KERNEL_NAME (a string naming the kernel in error messages).
 * get_buffer() takes a C-contiguous buffer of `obj` whose items are `itemsize` bytes (writable
 * if asked), or raises ValueError naming `what`; GET() does that inside a function that keeps
 * the buffers it took in a `held` array counted by `n_held` and releases them at a `done:`
 * label, which GET jumps to on failure.  `restrict` is spelled for MSVC too.
 */
#ifndef FORMCAST_KERNEL_BUFFERS_H
#define FORMCAST_KERNEL_BUFFERS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if defined(_MSC_VER) && !defined(restrict)
#define restrict __restrict
#endif

static int
get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize || view->len % itemsize != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s must have %zd-byte items, not %zd", KERNEL_NAME,
                     what, itemsize, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

#define GET(obj, view, size, w, what)                                                  \
    do {                                                                               \
        if (get_buffer(obj, &view, size, w, what) < 0)                                 \
            goto done;                                                                 \
        held[n_held++] = &view;                                                        \
    } while (0)

#endif
