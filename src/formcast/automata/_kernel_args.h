/* What the automata layer's C kernels (formcast.automata._moore, formcast.automata._subset)
 * and formcast.vocab._trie_walk share besides ../_kernel_buffers.h: the argument handling of
 * a function that takes numpy arrays, the clock of their deadlines, the range check of a
 * transition table and the module definition (the helpers are static inline: a kernel that
 * uses neither gets no unused-function warning).
 *
 * Include it first, after defining KERNEL_NAME (it includes ../_kernel_buffers.h).  A kernel
 * function that takes buffers declares them with HELD_BUFFERS(n) (the `held` array and the
 * `n_held` count that GET() fills), parses its tuple with PyArg_ParseTuple, takes each array
 * with GET() (which jumps to `done:` on failure) and ends with
 *
 *     done:
 *         RELEASE_HELD();
 *         return result;
 *
 * KERNEL_MODULE(name, doc) defines the module `name` over the file's `methods` table and its
 * PyInit function.  Everything here is static: each kernel gets its own copy.
 */
#ifndef FORMCAST_KERNEL_ARGS_H
#define FORMCAST_KERNEL_ARGS_H

#include "../_kernel_buffers.h"

#include <stdint.h>

/* the buffers a kernel function takes with GET(), at most n */
#define HELD_BUFFERS(n)                                                                \
    Py_buffer *held[n];                                                                \
    int n_held = 0

/* releases the buffers GET() took, last first */
#define RELEASE_HELD()                                                                 \
    do {                                                                               \
        while (n_held > 0)                                                             \
            PyBuffer_Release(held[--n_held]);                                          \
    } while (0)

/* the module `name` (a bare identifier: _moore) over the file's `methods`, and its init */
#define KERNEL_MODULE(name, doc)                                                       \
    static struct PyModuleDef module = {                                               \
        PyModuleDef_HEAD_INIT, #name, doc, -1, methods, NULL, NULL, NULL, NULL,        \
    };                                                                                 \
    PyMODINIT_FUNC PyInit_##name(void) { return PyModule_Create(&module); }

/* the monotonic clock of time.monotonic(), in seconds (no GIL needed) */
static inline double
monotonic_now(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyTime_t t = 0;
    (void)PyTime_MonotonicRaw(&t);
    return PyTime_AsSecondsDouble(t);
#else
    return _PyTime_AsSecondsDouble(_PyTime_GetMonotonicClock());
#endif
}

/* nonzero when an entry of table[0 .. len) is not a state 0 .. n - 1 (a negative one wraps
 * past n); reads every entry (no early exit: the loop vectorizes); no GIL needed */
static inline int
table_out_of_range(const int32_t *table, int64_t len, int64_t n)
{
    int bad = 0;
    int64_t i;
    for (i = 0; i < len; i++)
        bad |= (uint32_t)table[i] >= (uint32_t)n;
    return bad;
}

#endif
