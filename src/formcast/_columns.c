/* The column classes of the compiled build: formcast._columns.
 *
 * One function for formcast.columns.column_classes, whose numpy code is the fallback and the
 * reference (tests/automata/test_native_columns.py compares them):
 *
 * classes(table, n_rows, n_cols, itemsize, weights, has_most, most, probe_step, class_of,
 *         first) -> k: the classes of equal columns of `table` (n_rows x n_cols, C-contiguous,
 * items of `itemsize` bytes: 1 unsigned (bool, uint8), 4 (int32) or 8 (int64), signed) as
 * column_classes numbers them: ascending 64-bit hash sum_i weights[i] * table[i, col]
 * (wrapping, compared signed), each class's first column its lowest.  class_of (int64, n_cols
 * entries) gets every column's class and first[0..k) (int64, n_cols entries) every class's
 * first column.  Returns
 * -1 where two different columns share a hash (column_classes then sorts them out exactly: the
 *    outputs are garbage), and
 * -2 where has_most and there are more than `most` classes: decided on the number of distinct
 *    hashes (equal columns hash equal, so that number is at most the number of classes), first
 *    on the rows 0, probe_step, 2 probe_step, ... when probe_step > 0 (a table with many
 *    classes usually shows them there), then on the whole table.
 * One pass over the table hashes every column and finds the runs of equal adjacent columns
 * exactly (byte classes are mostly byte ranges: a column equal to its left neighbour is in its
 * class); the runs' first columns (heads) are sorted by hash (stable, so the lowest column
 * comes first), and where several heads share a hash a second pass checks them equal to the
 * first (else -1).  O(n_rows x n_cols) plus a sort of the heads.
 *
 * Safety: every array is a C-contiguous buffer of the stated item size and length (checked);
 * no Python object is touched while hashing (the GIL is released).
 */
#define KERNEL_NAME "_columns"
#include "_kernel_buffers.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- the row passes, one per item type ---- */

/* the hashes (acc) and which columns differ from their left neighbour (diff) over rows
   0, step, 2 step, ... < n (diff NULL: hashes only): four rows at a time (the accumulators
   are read and written once per four rows), in blocks of COLUMN_BLOCK columns (a wide table's
   accumulators stay in the cache while its rows go by) */
#define COLUMN_BLOCK 1024
#define HASH_ROWS(NAME, T, U)                                                          \
    static void NAME(const T *restrict table, int64_t n, int64_t c, int64_t step,      \
                     const int64_t *restrict weights, uint64_t *restrict acc,          \
                     uint64_t *restrict diff)                                          \
    {                                                                                  \
        int64_t i, j, r, j0;                                                           \
        for (j0 = 0; j0 < c; j0 += COLUMN_BLOCK) {                                     \
            const int64_t j1 = j0 + COLUMN_BLOCK < c ? j0 + COLUMN_BLOCK : c;          \
            const int64_t jd = j0 > 0 ? j0 : 1;                                        \
            for (i = 0, r = 0; i + 3 * step < n; i += 4 * step, r += 4) {              \
                const T *restrict a = table + i * c, *restrict b = a + step * c;       \
                const T *restrict e = b + step * c, *restrict f = e + step * c;        \
                const uint64_t wa = (uint64_t)weights[r], wb = (uint64_t)weights[r + 1]; \
                const uint64_t we = (uint64_t)weights[r + 2];                          \
                const uint64_t wf = (uint64_t)weights[r + 3];                          \
                for (j = j0; j < j1; j++)                                              \
                    acc[j] += wa * (uint64_t)(int64_t)a[j] + wb * (uint64_t)(int64_t)b[j] \
                              + we * (uint64_t)(int64_t)e[j]                           \
                              + wf * (uint64_t)(int64_t)f[j];                          \
                if (diff != NULL)                                                      \
                    for (j = jd; j < j1; j++)                                          \
                        diff[j] |= (uint64_t)(U)(((U)a[j] ^ (U)a[j - 1])               \
                                                 | ((U)b[j] ^ (U)b[j - 1])             \
                                                 | ((U)e[j] ^ (U)e[j - 1])             \
                                                 | ((U)f[j] ^ (U)f[j - 1]));           \
            }                                                                          \
            for (; i < n; i += step, r++) {                                            \
                const T *restrict row = table + i * c;                                 \
                const uint64_t w = (uint64_t)weights[r];                               \
                for (j = j0; j < j1; j++)                                              \
                    acc[j] += w * (uint64_t)(int64_t)row[j];                           \
                if (diff != NULL)                                                      \
                    for (j = jd; j < j1; j++)                                          \
                        diff[j] |= (uint64_t)((U)row[j] ^ (U)row[j - 1]);              \
            }                                                                          \
        }                                                                              \
    }

HASH_ROWS(hash_u8, uint8_t, uint8_t)
HASH_ROWS(hash_i32, int32_t, uint32_t)
HASH_ROWS(hash_i64, int64_t, uint64_t)

static void
hash_rows(const void *table, int itemsize, int64_t n, int64_t c, int64_t step,
          const int64_t *weights, uint64_t *acc, uint64_t *diff)
{
    if (itemsize == 1)
        hash_u8((const uint8_t *)table, n, c, step, weights, acc, diff);
    else if (itemsize == 4)
        hash_i32((const int32_t *)table, n, c, step, weights, acc, diff);
    else
        hash_i64((const int64_t *)table, n, c, step, weights, acc, diff);
}

/* whether table[i, a[e]] == table[i, b[e]] for every row i and every e < m */
static int
columns_equal(const void *table, int itemsize, int64_t n, int64_t c, const int64_t *a,
              const int64_t *b, int64_t m)
{
    int64_t i, e;
    uint64_t bad = 0;
    for (i = 0; i < n && !bad; i++) {
        if (itemsize == 1) {
            const uint8_t *row = (const uint8_t *)table + i * c;
            for (e = 0; e < m; e++)
                bad |= (uint64_t)(row[a[e]] ^ row[b[e]]);
        } else if (itemsize == 4) {
            const int32_t *row = (const int32_t *)table + i * c;
            for (e = 0; e < m; e++)
                bad |= (uint64_t)(uint32_t)(row[a[e]] ^ row[b[e]]);
        } else {
            const int64_t *row = (const int64_t *)table + i * c;
            for (e = 0; e < m; e++)
                bad |= (uint64_t)(row[a[e]] ^ row[b[e]]);
        }
    }
    return bad == 0;
}

/* ---- sorting ---- */

/* sorts ids[0..m) by key[id], signed, stable (tmp: m scratch entries) */
static void
sort_by_key(int64_t *ids, int64_t *tmp, int64_t m, const int64_t *key)
{
    int64_t width, i;
    int64_t *src = ids, *dst = tmp;
    for (width = 1; width < m; width *= 2) {
        for (i = 0; i < m; i += 2 * width) {
            int64_t lo = i, mid = i + width < m ? i + width : m;
            int64_t hi = i + 2 * width < m ? i + 2 * width : m;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                dst[o++] = key[src[b]] < key[src[a]] ? src[b++] : src[a++];
            while (a < mid)
                dst[o++] = src[a++];
            while (b < hi)
                dst[o++] = src[b++];
        }
        {
            int64_t *t = src;
            src = dst;
            dst = t;
        }
    }
    if (src != ids)
        memcpy(ids, src, sizeof(int64_t) * (size_t)m);
}

/* the number of distinct values of key[0..m) (ids, tmp: m scratch entries each) */
static int64_t
distinct(const int64_t *key, int64_t m, int64_t *ids, int64_t *tmp)
{
    int64_t e, count = 0;
    for (e = 0; e < m; e++)
        ids[e] = e;
    sort_by_key(ids, tmp, m, key);
    for (e = 0; e < m; e++)
        count += e == 0 || key[ids[e]] != key[ids[e - 1]];
    return count;
}

/* ---- classes ---- */

/* the work of classes() without the GIL: k, -1, -2, or -3 (out of memory) */
static int64_t
classes_run(const void *table, int itemsize, int64_t n, int64_t c, const int64_t *weights,
            int has_most, int64_t most, int64_t probe_step, int64_t *class_of, int64_t *first)
{
    uint64_t *acc = (uint64_t *)calloc((size_t)c, sizeof(uint64_t));
    uint64_t *diff = (uint64_t *)calloc((size_t)c, sizeof(uint64_t));
    int64_t *key = (int64_t *)calloc((size_t)c, sizeof(int64_t));
    int64_t *heads = (int64_t *)malloc(sizeof(int64_t) * (size_t)c);
    int64_t *ids = (int64_t *)malloc(sizeof(int64_t) * (size_t)c);
    int64_t *tmp = (int64_t *)malloc(sizeof(int64_t) * (size_t)c);
    int64_t *check = (int64_t *)malloc(sizeof(int64_t) * (size_t)c);
    int64_t *check_first = (int64_t *)malloc(sizeof(int64_t) * (size_t)c);
    int64_t result = -3;
    if (!acc || !diff || !key || !heads || !ids || !tmp || !check || !check_first)
        goto out;
    if (has_most && probe_step > 0) {
        /* columns that differ on some rows differ on the whole table */
        int64_t j;
        hash_rows(table, itemsize, n, c, probe_step, weights, acc, NULL);
        for (j = 0; j < c; j++)
            key[j] = (int64_t)acc[j];
        if (distinct(key, c, ids, tmp) > most) {
            result = -2;
            goto out;
        }
        memset(acc, 0, sizeof(uint64_t) * (size_t)c);
    }
    hash_rows(table, itemsize, n, c, 1, weights, acc, diff);
    {
        int64_t j, h, n_heads = 0, k = 0, n_check = 0;
        /* the runs' first columns, ordered by hash (stable: a class's first is its lowest) */
        for (j = 0; j < c; j++)
            if (j == 0 || diff[j] != 0) {
                key[n_heads] = (int64_t)acc[j];
                ids[n_heads] = n_heads;
                heads[n_heads++] = j;
            }
        sort_by_key(ids, tmp, n_heads, key);
        /* heads' classes (kept in acc, which is no longer needed) */
        for (h = 0; h < n_heads; h++) {
            const int64_t col = heads[ids[h]];
            if (h == 0 || key[ids[h]] != key[ids[h - 1]])
                first[k++] = col;
            else {
                /* a head with the hash of an earlier one: checked equal to its first */
                check_first[n_check] = first[k - 1];
                check[n_check++] = col;
            }
            class_of[col] = k - 1;
        }
        if (has_most && k > most) {
            result = -2; /* more distinct hashes than `most`: more classes */
            goto out;
        }
        if (n_check > 0 && !columns_equal(table, itemsize, n, c, check, check_first, n_check)) {
            result = -1;
            goto out;
        }
        /* a column equal to its left neighbour is in its class */
        for (j = 1; j < c; j++)
            if (diff[j] == 0)
                class_of[j] = class_of[j - 1];
        result = k;
    }
out:
    free(acc);
    free(diff);
    free(key);
    free(heads);
    free(ids);
    free(tmp);
    free(check);
    free(check_first);
    return result;
}

static PyObject *
columns_classes(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_weights, *o_class_of, *o_first;
    long long n_rows, n_cols, most, probe_step;
    int itemsize, has_most;
    Py_buffer b_table, b_weights, b_class_of, b_first;
    Py_buffer *held[4];
    int n_held = 0;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "OLLiOpLLOO", &o_table, &n_rows, &n_cols, &itemsize,
                          &o_weights, &has_most, &most, &probe_step, &o_class_of, &o_first))
        return NULL;
    if (itemsize != 1 && itemsize != 4 && itemsize != 8) {
        PyErr_SetString(PyExc_ValueError, "_columns: items must have 1, 4 or 8 bytes");
        return NULL;
    }
    GET(o_table, b_table, itemsize, 0, "table");
    GET(o_weights, b_weights, 8, 0, "weights (int64)");
    GET(o_class_of, b_class_of, 8, 1, "class_of (int64)");
    GET(o_first, b_first, 8, 1, "first (int64)");
    {
        int64_t got;
        if (n_rows < 0 || n_cols <= 0 || n_cols > INT32_MAX || n_rows > PY_SSIZE_T_MAX / n_cols ||
            b_table.len / itemsize != n_rows * n_cols || b_class_of.len / 8 != n_cols ||
            b_first.len / 8 != n_cols) {
            PyErr_SetString(PyExc_ValueError, "_columns: array lengths disagree");
            goto done;
        }
        if (b_weights.len / 8 < n_rows) {
            PyErr_SetString(PyExc_ValueError, "_columns: fewer weights than rows");
            goto done;
        }
        if (probe_step < 0) {
            PyErr_SetString(PyExc_ValueError, "_columns: negative probe step");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        got = classes_run(b_table.buf, itemsize, n_rows, n_cols, (const int64_t *)b_weights.buf,
                          has_most, most, probe_step, (int64_t *)b_class_of.buf,
                          (int64_t *)b_first.buf);
        Py_END_ALLOW_THREADS
        if (got == -3)
            PyErr_NoMemory();
        else
            result = PyLong_FromLongLong((long long)got);
    }
done:
    while (n_held > 0)
        PyBuffer_Release(held[--n_held]);
    return result;
}

static PyMethodDef methods[] = {
    {"classes", columns_classes, METH_VARARGS,
     "classes(table, n_rows, n_cols, itemsize, weights, has_most, most, probe_step, class_of, "
     "first) -> number of column classes, -1 (a hash collision) or -2 (more than most) (see "
     "the module's source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns",
    "formcast's compiled column classes (the compiled build only).", -1, methods,
};

PyMODINIT_FUNC
PyInit__columns(void)
{
    return PyModule_Create(&module);
}
