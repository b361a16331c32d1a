/* The Moore refinement of the compiled build: formcast.automata._moore.
 *
 * One function for formcast.automata.equivalence.equivalence_classes, whose numpy code is the
 * fallback and the reference (tests/automata/test_native_moore.py compares them); the
 * distinct columns it refines over come from formcast.columns.column_classes (itself a C
 * kernel in the compiled build, formcast._columns):
 *
 * refine(cols, k, part, n_blocks, depth, budget, weights, has_work, fuel, threshold)
 *   -> (status, charged): Moore refinement of the partition `part` (int64, n entries, numbers
 * 0 .. n_blocks - 1, compact; updated in place) over the distinct columns `cols` (int32,
 * n x k), at most `depth` rounds, each over the "touched" blocks only (round one: all of
 * them; then the blocks holding a predecessor of a state whose number changed), exactly as
 * the numpy path does:
 * - a round over blocks of `size` states first adds size * k to the work done and stops
 *   (status 1: the caller returns the identity) past `budget`; with has_work it then costs
 *   size * k / 64 + 1 units of `fuel` (status 1 when they are not left, or when the monotonic
 *   clock of time.monotonic() is past `threshold`, +inf without a deadline); `charged` is the
 *   sum of the units of the rounds run, which the caller charges to the compile;
 * - a block splits by its states' (own block, successor blocks) rows, grouped exactly (a hash
 *   table on the numpy path's 64-bit row hash with `weights`, rows compared on a hash hit);
 *   the group of the block's lowest state keeps its number, the other groups get n_blocks, ...
 *   in ascending hash order (lexicographic row order where two distinct rows of the round
 *   share a hash), so `part` ends with the very numbers of the numpy path;
 * - status 0 when a round splits nothing or every state is its own block (stable), 2 after
 *   `depth` rounds that kept splitting.
 * Blocks are kept as contiguous ranges of a permutation of the states (each range ascending),
 * and after round one only the rows of the states with a successor that moved are read (the
 * other states of a block share one row), so a round costs O(size + k x changed rows +
 * predecessors of the moved states), not O(size x k) (the work charged is still size x k, as
 * numpy's).  The next round's blocks come from one scan of every row while a quarter of the
 * states or more moved and no predecessor lists exist (round one, typically); from the
 * (deduplicated) predecessor lists, built once, after that.
 *
 * Safety: every array is a C-contiguous buffer of the stated item size (checked); every
 * table entry and block number is checked against n before it is used as an index (a corrupt
 * table raises ValueError from refine, never reads out of bounds).  No Python object is touched
 * while refining (the GIL is released).
 */
#define KERNEL_NAME "_moore"
#include "_kernel_args.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- sorting of int32 ids with a context (merge sort, stable) ---- */

typedef struct {
    const int64_t *key;  /* signed keys (hashes), or NULL: rows compared */
    const int32_t *own;  /* per id: own block (lexicographic order) */
    const int32_t *rows; /* per id: k successor blocks */
    int64_t k;
} order_ctx;

static int
id_less(const order_ctx *c, int32_t a, int32_t b)
{
    if (c->key != NULL)
        return c->key[a] < c->key[b];
    if (c->own[a] != c->own[b])
        return c->own[a] < c->own[b];
    {
        const int32_t *ra = c->rows + (int64_t)a * c->k, *rb = c->rows + (int64_t)b * c->k;
        int64_t j;
        for (j = 0; j < c->k; j++)
            if (ra[j] != rb[j])
                return ra[j] < rb[j];
    }
    return 0;
}

/* sorts ids[0..m) (tmp: m scratch entries) */
static void
sort_ids(int32_t *ids, int32_t *tmp, int64_t m, const order_ctx *c)
{
    int64_t width, i;
    int32_t *src = ids, *dst = tmp;
    for (width = 1; width < m; width *= 2) {
        for (i = 0; i < m; i += 2 * width) {
            int64_t lo = i, mid = i + width < m ? i + width : m;
            int64_t hi = i + 2 * width < m ? i + 2 * width : m;
            int64_t a = lo, b = mid, o = lo;
            while (a < mid && b < hi)
                dst[o++] = id_less(c, src[b], src[a]) ? src[b++] : src[a++];
            while (a < mid)
                dst[o++] = src[a++];
            while (b < hi)
                dst[o++] = src[b++];
        }
        {
            int32_t *t = src;
            src = dst;
            dst = t;
        }
    }
    if (src != ids)
        memcpy(ids, src, sizeof(int32_t) * (size_t)m);
}

/* ---- refine ---- */

/* a slot of the groups' hash table: empty unless gen is the table's generation */
typedef struct {
    uint64_t h;
    int32_t g;
    uint32_t gen;
} slot_t;

typedef struct {
    /* inputs */
    const int32_t *cols;
    int64_t n, k;
    const uint64_t *w; /* k + 1 weights: own, then each column */
    /* partition */
    int32_t *part;   /* block of each state */
    int32_t *elems;  /* states, block by block (each block's range ascending) */
    int32_t *bstart; /* per block: its range in elems */
    int32_t *bsize;
    /* predecessors (deduplicated), built after round one */
    int64_t *pindptr;
    int32_t *psrc;
    /* per round */
    int32_t *touched;   /* blocks of the round */
    int32_t *next;      /* blocks of the next round */
    uint32_t *bstamp;   /* per block: round that listed it in next */
    uint32_t *dstamp;   /* per state: the round for which a successor moved (its row changed) */
    uint8_t *moved;     /* per state: moved this round (while the next round is found) */
    int32_t *mstate;    /* members of the round, block after block */
    int32_t *mgroup;    /* their groups */
    uint64_t *gh;       /* per group: hash, own block, row, number */
    int64_t *ghs;       /* the hash as a signed key */
    int32_t *gown;
    int32_t *grow;
    int32_t *gnum;
    int32_t *fresh;     /* the groups that take new numbers */
    int32_t *scratch;
    slot_t *slots;      /* hash table of the round's groups (cap entries at most) */
    uint32_t gen;       /* the current table's generation (older slots are empty) */
    int64_t cap;        /* slots (a power of two) */
} moore;

static void
moore_free(moore *m)
{
    free(m->part);
    free(m->elems);
    free(m->bstart);
    free(m->bsize);
    free(m->pindptr);
    free(m->psrc);
    free(m->touched);
    free(m->next);
    free(m->bstamp);
    free(m->dstamp);
    free(m->moved);
    free(m->mstate);
    free(m->mgroup);
    free(m->gh);
    free(m->ghs);
    free(m->gown);
    free(m->grow);
    free(m->gnum);
    free(m->fresh);
    free(m->scratch);
    free(m->slots);
}

/* predecessor lists, deduplicated: 0 or -1 (out of memory) */
static int
build_preds(moore *m)
{
    const int64_t n = m->n, k = m->k;
    int64_t s, j, e, n_edges = 0;
    int32_t *seen = m->scratch; /* per target: last source + 1 */
    int32_t *target;            /* each state's distinct successors, state after state */
    int64_t *start, *at;        /* where each state's successors start; fill positions */
    m->pindptr = (int64_t *)calloc((size_t)n + 1, sizeof(int64_t));
    target = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k));
    start = (int64_t *)malloc(sizeof(int64_t) * ((size_t)n + 1));
    at = (int64_t *)malloc(sizeof(int64_t) * ((size_t)n + 1));
    if (!m->pindptr || !target || !start || !at) {
        free(target);
        free(start);
        free(at);
        return -1;
    }
    for (s = 0; s < n; s++)
        seen[s] = 0;
    for (s = 0; s < n; s++) {
        const int32_t *row = m->cols + s * k;
        start[s] = n_edges;
        for (j = 0; j < k; j++) {
            const int32_t t = row[j];
            if (seen[t] != (int32_t)(s + 1)) {
                seen[t] = (int32_t)(s + 1);
                m->pindptr[t + 1]++;
                target[n_edges++] = t;
            }
        }
    }
    start[n] = n_edges;
    for (s = 0; s < n; s++)
        m->pindptr[s + 1] += m->pindptr[s];
    m->psrc = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_edges > 0 ? n_edges : 1));
    if (!m->psrc) {
        free(target);
        free(start);
        free(at);
        return -1;
    }
    /* the edges by target, sources ascending */
    memcpy(at, m->pindptr, sizeof(int64_t) * (size_t)n);
    for (s = 0; s < n; s++)
        for (e = start[s]; e < start[s + 1]; e++)
            m->psrc[at[target[e]]++] = (int32_t)s;
    free(target);
    free(start);
    free(at);
    return 0;
}

/* a state's row of successor blocks, written to row, and its hash (from h): the numpy
   path's, sum of block * weight (mod 2^64).  Scalar code: the 64-bit products are one
   instruction each, where SSE2 vectors take several */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-vectorize")))
#endif
static uint64_t
hash_row(const int32_t *restrict part, const int32_t *restrict crow, int32_t *restrict row,
         const uint64_t *restrict w, int64_t k, uint64_t h)
{
    int64_t j;
    for (j = 0; j < k; j++) {
        const int32_t v = part[crow[j]];
        row[j] = v;
        h += (uint64_t)(int64_t)v * w[j];
    }
    return h;
}

/* (no early exit: rows of one hash are nearly always equal, and this loop vectorizes) */
static inline int
rows_equal(const int32_t *restrict a, const int32_t *restrict b, int64_t k)
{
    int64_t j;
    uint32_t diff = 0;
    for (j = 0; j < k; j++)
        diff |= (uint32_t)a[j] ^ (uint32_t)b[j];
    return diff == 0;
}

static inline int64_t
slot_of(uint64_t h, int bits)
{
    return (int64_t)((h * 0x9E3779B97F4A7C15ULL) >> (64 - bits));
}

/* status: 0 stable, 1 stopped (identity), 2 depth reached, -1 out of memory */
static int
moore_run(moore *m, int64_t n_blocks, int64_t depth, int64_t budget, int has_work,
          int64_t fuel, double threshold, int64_t *charged)
{
    const int64_t n = m->n, k = m->k;
    /* (a cancelled compile's deadline is -inf: always late) */
    const int has_deadline = !(isinf(threshold) && threshold > 0);
    int64_t n_touched = n_blocks, done = 0, round;
    int64_t b;
    for (b = 0; b < n_blocks; b++)
        m->touched[b] = (int32_t)b;
    for (round = 0; round < depth; round++) {
        const uint32_t stamp = (uint32_t)(round + 1);
        int64_t size = 0, t, i, n_groups = 0, n_fresh = 0, n_next = 0, n_moved, bits = 4;
        int64_t mask;
        uint32_t gen;
        int collided = 0;
        for (t = 0; t < n_touched; t++)
            size += m->bsize[m->touched[t]];
        done += size * k;
        if (done > budget)
            return 1;
        if (has_work) {
            int64_t units = size * k / 64 + 1;
            if ((has_deadline && monotonic_now() > threshold) || units > fuel)
                return 1;
            fuel -= units;
            *charged += units;
        }
        /* the table starts small (a round usually has few groups) and doubles at half full */
        while (((int64_t)1 << bits) < 4 * n_touched && ((int64_t)1 << bits) < m->cap)
            bits++;
        mask = ((int64_t)1 << bits) - 1;
        gen = ++m->gen;
        /* group the members by (own block, successor blocks).  After round one, the states
           of a block none of whose successors moved last round share one row (the block's
           states had equal rows under the partition before, and those successors kept their
           numbers): that row is hashed once, only the others' rows are read */
        i = 0;
        for (t = 0; t < n_touched; t++) {
            const int32_t blk = m->touched[t];
            const int32_t *range = m->elems + m->bstart[blk];
            const int64_t len = m->bsize[blk];
            int64_t e;
            int32_t same = -1; /* the group of the block's states whose row did not change */
            for (e = 0; e < len; e++, i++) {
                const int32_t s = range[e];
                const int kept = round > 0 && m->dstamp[s] != stamp;
                const int32_t *crow = m->cols + (int64_t)s * k;
                int32_t *row = m->grow + n_groups * k; /* a candidate new group's row */
                uint64_t h = (uint64_t)(int64_t)blk * m->w[0];
                int64_t pos;
                int32_t g = -1;
                if (kept && same >= 0) {
                    m->mstate[i] = s;
                    m->mgroup[i] = same;
                    continue;
                }
                h = hash_row(m->part, crow, row, m->w + 1, k, h);
                pos = slot_of(h, (int)bits);
                for (;;) {
                    slot_t *sl = m->slots + pos;
                    if (sl->gen != gen) {
                        sl->gen = gen;
                        sl->h = h;
                        sl->g = (int32_t)n_groups;
                        break;
                    }
                    if (sl->h == h) {
                        int32_t c = sl->g;
                        if (m->gown[c] == blk &&
                            rows_equal(m->grow + (int64_t)c * k, row, k)) {
                            g = c;
                            break;
                        }
                        collided = 1; /* two distinct rows of one hash */
                    }
                    pos = (pos + 1) & mask;
                }
                if (g < 0) {
                    g = (int32_t)n_groups++;
                    m->gh[g] = h;
                    m->ghs[g] = (int64_t)h;
                    m->gown[g] = blk;
                    m->gnum[g] = -1;
                    if (2 * n_groups > mask + 1 && mask + 1 < m->cap) {
                        /* half full: a table twice as large, the groups inserted again */
                        int64_t q;
                        bits++;
                        mask = mask * 2 + 1;
                        gen = ++m->gen;
                        for (q = 0; q < n_groups; q++) {
                            int64_t at = slot_of(m->gh[q], (int)bits);
                            while (m->slots[at].gen == gen)
                                at = (at + 1) & mask;
                            m->slots[at].gen = gen;
                            m->slots[at].h = m->gh[q];
                            m->slots[at].g = (int32_t)q;
                        }
                    }
                }
                if (kept)
                    same = g;
                m->mstate[i] = s;
                m->mgroup[i] = g;
            }
        }
        /* the group of each block's lowest state (its range's first) keeps the number */
        i = 0;
        for (t = 0; t < n_touched; t++) {
            const int32_t blk = m->touched[t];
            m->gnum[m->mgroup[i]] = blk;
            i += m->bsize[blk];
        }
        for (i = 0; i < n_groups; i++)
            if (m->gnum[i] < 0)
                m->fresh[n_fresh++] = (int32_t)i;
        if (n_fresh == 0)
            return 0;
        {
            order_ctx ctx = {collided ? NULL : m->ghs, m->gown, m->grow, k};
            sort_ids(m->fresh, m->scratch, n_fresh, &ctx);
        }
        for (i = 0; i < n_fresh; i++)
            m->gnum[m->fresh[i]] = (int32_t)(n_blocks + i);
        /* new numbers, and each split block's range regrouped (stably) by them */
        i = 0;
        for (t = 0; t < n_touched; t++) {
            const int32_t blk = m->touched[t];
            const int64_t start = m->bstart[blk], len = m->bsize[blk];
            const int32_t g0 = m->mgroup[i];
            int64_t e, split = 0;
            for (e = 0; e < len; e++)
                if (m->mgroup[i + e] != g0) {
                    split = 1;
                    break;
                }
            if (split) {
                /* the groups of one block are numbered consecutively from g0 (own is part
                   of the row): count, place, scatter */
                int64_t g, off = start, g_hi = g0;
                for (e = 0; e < len; e++)
                    if (m->mgroup[i + e] > g_hi)
                        g_hi = m->mgroup[i + e];
                for (g = g0; g <= g_hi; g++)
                    m->bsize[m->gnum[g]] = 0;
                for (e = 0; e < len; e++)
                    m->bsize[m->gnum[m->mgroup[i + e]]]++;
                for (g = g0; g <= g_hi; g++) {
                    m->bstart[m->gnum[g]] = (int32_t)off;
                    off += m->bsize[m->gnum[g]];
                    m->bsize[m->gnum[g]] = 0;
                }
                for (e = 0; e < len; e++) {
                    const int32_t nb = m->gnum[m->mgroup[i + e]];
                    const int32_t s = m->mstate[i + e];
                    m->elems[m->bstart[nb] + m->bsize[nb]++] = s;
                    m->part[s] = nb;
                }
            }
            i += len;
        }
        n_blocks += n_fresh;
        if (n_blocks == n)
            return 0;
        if (round + 1 >= depth)
            break; /* no next round to prepare */
        /* the next round: the blocks holding a predecessor of a state that moved (the
           states of the new blocks) */
        n_moved = 0;
        for (i = 0; i < n_fresh; i++)
            n_moved += m->bsize[n_blocks - n_fresh + i];
        if (m->pindptr == NULL && 4 * n_moved > n) {
            /* many moved (round one, typically): one scan of every row is cheaper than
               building the predecessor lists */
            int64_t q, j;
            for (i = 0; i < n_fresh; i++) {
                const int32_t nb = (int32_t)(n_blocks - n_fresh + i);
                for (q = 0; q < m->bsize[nb]; q++)
                    m->moved[m->elems[m->bstart[nb] + q]] = 1;
            }
            for (q = 0; q < n; q++) {
                const int32_t *crow = m->cols + q * k;
                int any = 0;
                for (j = 0; j < k; j++)
                    any |= m->moved[crow[j]];
                if (any) {
                    const int32_t pb = m->part[q];
                    m->dstamp[q] = stamp + 1;
                    if (m->bstamp[pb] != stamp) {
                        m->bstamp[pb] = stamp;
                        m->next[n_next++] = pb;
                    }
                }
            }
            for (i = 0; i < n_fresh; i++) {
                const int32_t nb = (int32_t)(n_blocks - n_fresh + i);
                for (q = 0; q < m->bsize[nb]; q++)
                    m->moved[m->elems[m->bstart[nb] + q]] = 0;
            }
        } else if (m->pindptr == NULL && build_preds(m) < 0)
            return -1;
        for (i = 0; m->pindptr != NULL && i < n_fresh; i++) {
            const int32_t nb = (int32_t)(n_blocks - n_fresh + i);
            const int32_t *range = m->elems + m->bstart[nb];
            const int64_t len = m->bsize[nb];
            int64_t e;
            for (e = 0; e < len; e++) {
                const int32_t s = range[e];
                int64_t p;
                for (p = m->pindptr[s]; p < m->pindptr[s + 1]; p++) {
                    const int32_t pb = m->part[m->psrc[p]];
                    m->dstamp[m->psrc[p]] = stamp + 1;
                    if (m->bstamp[pb] != stamp) {
                        m->bstamp[pb] = stamp;
                        m->next[n_next++] = pb;
                    }
                }
            }
        }
        {
            int32_t *tmp = m->touched;
            m->touched = m->next;
            m->next = tmp;
            n_touched = n_next;
        }
    }
    return 2;
}

static PyObject *
moore_refine(PyObject *self, PyObject *args)
{
    PyObject *o_cols, *o_part, *o_weights;
    long long n_blocks, depth, budget, fuel, n_cols_arg;
    int has_work;
    double threshold;
    Py_buffer b_cols, b_part, b_weights;
    HELD_BUFFERS(3);
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "OLOLLLOpLd", &o_cols, &n_cols_arg, &o_part, &n_blocks, &depth,
                          &budget, &o_weights, &has_work, &fuel, &threshold))
        return NULL;
    GET(o_cols, b_cols, 4, 0, "cols (int32)");
    GET(o_part, b_part, 8, 1, "part (int64)");
    GET(o_weights, b_weights, 8, 0, "weights (int64)");
    {
        const int64_t n = b_part.len / 8, k = n_cols_arg;
        int64_t *part64 = (int64_t *)b_part.buf;
        const int32_t *cols = (const int32_t *)b_cols.buf;
        moore m;
        int64_t i, charged = 0, cap = 16;
        int status = 0, bad = 0;
        memset(&m, 0, sizeof m);
        if (k <= 0 || n <= 0 || n >= INT32_MAX || b_cols.len / 4 < n * k ||
            b_weights.len / 8 < k + 1) {
            PyErr_SetString(PyExc_ValueError, "_moore: array lengths disagree");
            goto done;
        }
        if (n_blocks <= 0 || n_blocks > n) {
            PyErr_SetString(PyExc_ValueError, "_moore: block count out of range");
            goto done;
        }
        while (cap < 2 * n)
            cap *= 2;
        m.cols = cols;
        m.n = n;
        m.k = k;
        m.w = (const uint64_t *)b_weights.buf;
        m.cap = cap;
        m.part = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.elems = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.bstart = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.bsize = (int32_t *)calloc((size_t)n, sizeof(int32_t));
        m.touched = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.next = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.bstamp = (uint32_t *)calloc((size_t)n, sizeof(uint32_t));
        m.dstamp = (uint32_t *)calloc((size_t)n, sizeof(uint32_t));
        m.moved = (uint8_t *)calloc((size_t)n, 1);
        m.mstate = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.mgroup = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.gh = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)n);
        m.ghs = (int64_t *)malloc(sizeof(int64_t) * (size_t)n);
        m.gown = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.grow = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1) * (size_t)k);
        m.gnum = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.fresh = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.scratch = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        m.slots = (slot_t *)calloc((size_t)cap, sizeof(slot_t));
        if (!m.part || !m.elems || !m.bstart || !m.bsize || !m.touched || !m.next || !m.bstamp || !m.dstamp || !m.moved ||
            !m.mstate || !m.mgroup || !m.gh || !m.ghs || !m.gown || !m.grow || !m.gnum ||
            !m.fresh || !m.scratch || !m.slots) {
            moore_free(&m);
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n && !bad; i++) {
            if (part64[i] < 0 || part64[i] >= n_blocks)
                bad = 1;
            else
                m.part[i] = (int32_t)part64[i];
        }
        if (!bad) {
            /* every entry a state (a negative one wraps past n) */
            if (table_out_of_range(cols, n * k, n))
                bad = 2;
        }
        if (!bad) {
            /* blocks as ranges of states, ascending within each (a counting sort) */
            int64_t off = 0;
            for (i = 0; i < n; i++)
                m.bsize[m.part[i]]++;
            for (i = 0; i < n_blocks; i++) {
                m.bstart[i] = (int32_t)off;
                off += m.bsize[i];
                if (m.bsize[i] == 0)
                    bad = 3;
                m.bsize[i] = 0;
            }
            for (i = 0; i < n && !bad; i++) {
                const int32_t blk = m.part[i];
                m.elems[m.bstart[blk] + m.bsize[blk]++] = (int32_t)i;
            }
        }
        if (!bad)
            status = moore_run(&m, n_blocks, depth, budget, has_work, fuel, threshold, &charged);
        if (!bad && status != -1)
            for (i = 0; i < n; i++)
                part64[i] = m.part[i];
        Py_END_ALLOW_THREADS
        moore_free(&m);
        if (bad == 1)
            PyErr_SetString(PyExc_ValueError, "_moore: a block number is out of range");
        else if (bad == 2)
            PyErr_SetString(PyExc_ValueError, "_moore: the table leads to a state it lacks");
        else if (bad == 3)
            PyErr_SetString(PyExc_ValueError, "_moore: the block numbers are not compact");
        else if (status == -1)
            PyErr_NoMemory();
        else
            result = Py_BuildValue("(iL)", status, (long long)charged);
    }
done:
    RELEASE_HELD();
    return result;
}

static PyMethodDef methods[] = {
    {"refine", moore_refine, METH_VARARGS,
     "refine(cols, k, part, n_blocks, depth, budget, weights, has_work, fuel, threshold) -> "
     "(status, charged) (see the module's source)."},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE(_moore,
              "formcast's compiled Moore refinement (the compiled build only).")
