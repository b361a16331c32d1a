/* Subset construction and Hopcroft minimization of the compiled build: formcast.automata._subset.
 *
 * Four functions for formcast.automata.dfa, whose Python code is the fallback and the reference
 * (tests/automata/test_native_subset.py compares them on random and real NFAs):
 *
 * determinize(eps, edges, refs, start, accept, max_states, state_cost, units_left, threshold)
 *   -> ((status, units, n_built, table, accepting, m), class_of, ref_rules)
 * The subset construction of dfa._SubsetConstruction.determinize, then dfa._live_states and
 * dfa._live_table, over a formcast.automata.nfa.NFA's own lists (read here, with the GIL:
 * `eps[s]` the epsilon targets of state s, `edges[s]` its (lo, hi, target) byte ranges,
 * `refs[s]` its (rule id, target) calls).  The bytes are cut into classes at every range
 * boundary (`class_of`, a bytearray of int32[256], as dfa._byte_classes); the symbols are the
 * classes, then one per referenced rule (`ref_rules`, the rule ids ascending).  Exactly as the
 * Python path:
 * - a DFA state is the set of NFA states of the epsilon closures of its targets, kept to the
 *   states with symbol edges and the accepting one (pure epsilon states are left out); the
 *   start state is the closure of `start`; states are numbered in the order the construction
 *   meets them (state by state, each state's moves in symbol order);
 * - each state built costs `state_cost + |set| + width` units (width: the symbols it has a move
 *   on), summed into `units`; past `units_left` the construction stops with status 1 (the
 *   caller charges `units`, which raises as the Python path's per-state charge does); a new
 *   state numbered `max_states` or more stops it with status 2 (the caller charges `units`
 *   and raises max_dfa_states); the monotonic clock of time.monotonic() past `threshold` (+inf
 *   without a deadline; checked every 32 states) stops it with status 3;
 * - status 4: the start state cannot reach an accepting one (the empty language);
 * - status 0: `table` (a bytearray of int32[m, n_sym]) and `accepting` (a bytearray of m
 *   bools) are the live states renumbered breadth-first from the start in symbol order (dead
 *   0, start 1), as dfa._live_table makes them.  `n_built` is the number of DFA states built.
 *
 * determinize_flat(n, e_src, e_lo, e_hi, e_tgt, x_src, x_tgt, r_src, r_rule, r_tgt, start, accept,
 *                  max_states, state_cost, units_left, threshold) -> as determinize()
 * The same construction for an NFA of n states given as flat lists of ints
 * (formcast.automata.nfa.FlatNFA, what the Thompson construction builds): byte edge k is
 * e_src[k] --[e_lo[k], e_hi[k]]--> e_tgt[k], epsilon edge k x_src[k] -> x_tgt[k], rule call k
 * from r_src[k] to rule r_rule[k] returning to r_tgt[k].  Its result is determinize()'s on the
 * per-state lists FlatNFA.to_lists() makes (tests/automata/test_flat_nfa.py).
 *
 * hopcroft(table, k, accepting, start, out) -> None: dfa._hopcroft_partition, then the block
 * numbering of dfa._quotient: the coarsest partition of the states of `table` (int32, n x k,
 * state 0 dead: every row of it 0) that is stable under
 * every symbol and separates `accepting` (uint8/bool, n entries) from the rest and the dead
 * state from every other (the coarsest one is unique: the Python path's partition), written
 * to `out` (int64, n entries) as block numbers given breadth-first from the start's block in
 * symbol order (the dead state's block 0, the start's 1): the states of the minimal DFA as
 * dfa._quotient numbers them (blocks the start does not reach, which nfa_to_dfa's tables lack,
 * are numbered after those, in the order of their first states).
 *
 * widen(table, k, n_classes, class_of) -> (wide, refs): the 256-column byte table and the
 * rule columns of a class table, as nfa_to_dfa makes them with numpy (see subset_widen).
 *
 * sub_edges(table, accepting) -> (edges, accepting_states): a byte DFA's edges as maximal byte
 * ranges and its accepting states, as nfa.SubAutomaton.of makes them with numpy (see
 * subset_sub_edges).
 *
 * rule_flags(table, accepting, ref_table, ref_rules, counted) -> (boundary, tail, refs): a rule
 * automaton's boundary and tail flags and its call edges per state, as rules._rule_flags makes
 * them with numpy (see subset_rule_flags).
 *
 * rule_moves(table, ref_table) -> (b_off, b_tgt, r_off, r_col, r_tgt): a rule automaton's moves
 * as CSR lists, as rules._moves makes them with numpy (see subset_rule_moves).
 *
 * quotient(table, k, part, accepting) -> None or (table, accepting, n_blocks): a class table's
 * quotient by hopcroft's partition, as dfa._minimize_native makes it with numpy (see
 * subset_quotient).
 *
 * Safety: the NFA's lists are type-checked item by item (TypeError) and every state, byte and
 * rule id read from them is checked against its range (ValueError) before anything is built;
 * hopcroft's arrays are C-contiguous buffers of the stated item size (checked) and every table
 * entry is checked against n: a corrupt input raises, never reads out of bounds (valgrind-clean
 * on the differential tests' random NFAs).  No Python object is touched while the automata are
 * built (the GIL is released).
 */
#define KERNEL_NAME "_subset"
#include "_kernel_args.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- growable int32 arrays ---- */

typedef struct {
    int32_t *a;
    int64_t n, cap;
} vec32;

static int
vreserve(vec32 *v, int64_t extra)
{
    if (v->n + extra > v->cap) {
        int64_t cap = v->cap ? v->cap : 64;
        int32_t *p;
        while (cap < v->n + extra)
            cap *= 2;
        p = (int32_t *)realloc(v->a, sizeof(int32_t) * (size_t)cap);
        if (!p)
            return -1;
        v->a = p;
        v->cap = cap;
    }
    return 0;
}

static int
cmp32(const void *x, const void *y)
{
    const int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

static void
sort32(int32_t *a, int64_t n)
{
    /* insertion sort for the short sets (most of them), qsort above */
    int64_t i, j;
    if (n >= 24) {
        qsort(a, (size_t)n, sizeof(int32_t), cmp32);
        return;
    }
    for (i = 1; i < n; i++) {
        int32_t x = a[i];
        for (j = i; j > 0 && a[j - 1] > x; j--)
            a[j] = a[j - 1];
        a[j] = x;
    }
}

static uint64_t
hash_set(const int32_t *a, int64_t n)
{
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    int64_t i;
    for (i = 0; i < n; i++) {
        h ^= (uint32_t)a[i];
        h *= 1099511628211ULL;
        h ^= h >> 29;
    }
    return h;
}

/* ---- the subset construction ---- */

typedef struct {
    int32_t n_nfa, n_sym, accept;
    int32_t *e_off, *e_lo, *e_hi, *e_tgt; /* symbol edges by source (CSR) */
    int32_t *x_off, *x_tgt;               /* epsilon edges by source (CSR) */
    uint8_t *useful;                      /* has symbol edges, or is the accepting state */
    int64_t *c_off;                       /* closure of each NFA state in cpool, -1: not yet */
    int32_t *c_len;
    vec32 cpool;
    uint32_t *cmark, cstamp; /* DFS marks of the closures */
    uint32_t *umark, ustamp; /* marks of the unions */
    vec32 stack, tmp;
    /* DFA states: their NFA sets in spool */
    vec32 spool;
    int64_t *s_off;
    int32_t *s_len;
    uint64_t *s_hash;
    uint8_t *s_acc;
    int64_t n_states, s_cap;
    int32_t *slots; /* open addressing: DFA state or -1 */
    int64_t n_slots;
    vec32 rows; /* n_sym targets per state built, -1: no move */
    int32_t *count, *b_off, *b_fill;
    vec32 items;
} subset;

static void
subset_free(subset *S)
{
    free(S->e_off);
    free(S->e_lo);
    free(S->e_hi);
    free(S->e_tgt);
    free(S->x_off);
    free(S->x_tgt);
    free(S->useful);
    free(S->c_off);
    free(S->c_len);
    free(S->cpool.a);
    free(S->cmark);
    free(S->umark);
    free(S->stack.a);
    free(S->tmp.a);
    free(S->spool.a);
    free(S->s_off);
    free(S->s_len);
    free(S->s_hash);
    free(S->s_acc);
    free(S->slots);
    free(S->rows.a);
    free(S->count);
    free(S->b_off);
    free(S->b_fill);
    free(S->items.a);
}

/* the (kept) epsilon closure of NFA state s, computed once: 0, or -1 out of memory */
static int
closure_of(subset *S, int32_t s)
{
    int64_t base, k;
    if (S->c_off[s] >= 0)
        return 0;
    if (++S->cstamp == 0) {
        memset(S->cmark, 0, sizeof(uint32_t) * (size_t)S->n_nfa);
        S->cstamp = 1;
    }
    base = S->cpool.n;
    S->stack.n = 0;
    if (vreserve(&S->stack, 1) < 0)
        return -1;
    S->stack.a[S->stack.n++] = s;
    S->cmark[s] = S->cstamp;
    while (S->stack.n > 0) {
        int32_t u = S->stack.a[--S->stack.n];
        if (S->useful[u]) {
            if (vreserve(&S->cpool, 1) < 0)
                return -1;
            S->cpool.a[S->cpool.n++] = u;
        }
        for (k = S->x_off[u]; k < S->x_off[u + 1]; k++) {
            int32_t v = S->x_tgt[k];
            if (S->cmark[v] != S->cstamp) {
                S->cmark[v] = S->cstamp;
                if (vreserve(&S->stack, 1) < 0)
                    return -1;
                S->stack.a[S->stack.n++] = v;
            }
        }
    }
    sort32(S->cpool.a + base, S->cpool.n - base);
    S->c_off[s] = base;
    S->c_len[s] = (int32_t)(S->cpool.n - base);
    return 0;
}

/* the DFA state of the sorted set tmp (added when new): its number, -1 out of memory, -2 past
 * max_states */
static int64_t
state_of(subset *S, int64_t max_states)
{
    const int32_t *set = S->tmp.a;
    const int64_t n = S->tmp.n;
    const uint64_t h = hash_set(set, n);
    int64_t slot = (int64_t)(h & (uint64_t)(S->n_slots - 1)), id, i;
    while ((id = S->slots[slot]) >= 0) {
        if (S->s_hash[id] == h && S->s_len[id] == n &&
            (n == 0 || memcmp(S->spool.a + S->s_off[id], set, sizeof(int32_t) * (size_t)n) == 0))
            return id;
        slot = (slot + 1) & (S->n_slots - 1);
    }
    id = S->n_states;
    if (id >= max_states)
        return -2;
    if (id == S->s_cap) {
        int64_t cap = S->s_cap * 2;
        int64_t *o = (int64_t *)realloc(S->s_off, sizeof(int64_t) * (size_t)cap);
        if (!o)
            return -1;
        S->s_off = o;
        {
            int32_t *l = (int32_t *)realloc(S->s_len, sizeof(int32_t) * (size_t)cap);
            if (!l)
                return -1;
            S->s_len = l;
        }
        {
            uint64_t *hh = (uint64_t *)realloc(S->s_hash, sizeof(uint64_t) * (size_t)cap);
            if (!hh)
                return -1;
            S->s_hash = hh;
        }
        {
            uint8_t *a = (uint8_t *)realloc(S->s_acc, (size_t)cap);
            if (!a)
                return -1;
            S->s_acc = a;
        }
        S->s_cap = cap;
    }
    if (vreserve(&S->spool, n) < 0)
        return -1;
    S->s_off[id] = S->spool.n;
    S->s_len[id] = (int32_t)n;
    S->s_hash[id] = h;
    S->s_acc[id] = 0;
    for (i = 0; i < n; i++)
        if (set[i] == S->accept)
            S->s_acc[id] = 1;
    if (n > 0)
        memcpy(S->spool.a + S->spool.n, set, sizeof(int32_t) * (size_t)n);
    S->spool.n += n;
    S->slots[slot] = (int32_t)id;
    S->n_states = id + 1;
    if (2 * S->n_states > S->n_slots) { /* grow the table: rehash every state */
        int64_t ns = S->n_slots * 2, j;
        int32_t *sl = (int32_t *)malloc(sizeof(int32_t) * (size_t)ns);
        if (!sl)
            return -1;
        for (j = 0; j < ns; j++)
            sl[j] = -1;
        for (j = 0; j < S->n_states; j++) {
            int64_t p = (int64_t)(S->s_hash[j] & (uint64_t)(ns - 1));
            while (sl[p] >= 0)
                p = (p + 1) & (ns - 1);
            sl[p] = (int32_t)j;
        }
        free(S->slots);
        S->slots = sl;
        S->n_slots = ns;
    }
    return id;
}

/* the union of the closures of the targets items[a .. b) into tmp, sorted: 0 or -1 */
static int
union_closures(subset *S, int64_t a, int64_t b)
{
    int64_t q, k;
    if (++S->ustamp == 0) {
        memset(S->umark, 0, sizeof(uint32_t) * (size_t)S->n_nfa);
        S->ustamp = 1;
    }
    S->tmp.n = 0;
    for (q = a; q < b; q++) {
        const int32_t t = S->items.a[q];
        const int32_t *cl;
        int32_t len;
        if (closure_of(S, t) < 0)
            return -1;
        cl = S->cpool.a + S->c_off[t];
        len = S->c_len[t];
        if (vreserve(&S->tmp, len) < 0)
            return -1;
        for (k = 0; k < len; k++) {
            const int32_t u = cl[k];
            if (S->umark[u] != S->ustamp) {
                S->umark[u] = S->ustamp;
                S->tmp.a[S->tmp.n++] = u;
            }
        }
    }
    if (b - a > 1)
        sort32(S->tmp.a, S->tmp.n);
    return 0;
}

/* builds every DFA state: 0 done, 1 budget, 2 max_states, 3 deadline, -1 out of memory */
static int
subset_run(subset *S, int32_t start, int64_t max_states, int64_t state_cost, int64_t units_left,
           double threshold, int64_t *units)
{
    const int32_t n_sym = S->n_sym;
    int64_t i, id;
    int check_time = !isinf(threshold);
    if (closure_of(S, start) < 0)
        return -1;
    S->tmp.n = 0;
    if (vreserve(&S->tmp, S->c_len[start]) < 0)
        return -1;
    memcpy(S->tmp.a, S->cpool.a + S->c_off[start], sizeof(int32_t) * (size_t)S->c_len[start]);
    S->tmp.n = S->c_len[start];
    id = state_of(S, max_states > 0 ? max_states : 1);
    if (id < 0)
        return -1;
    for (i = 0; i < S->n_states; i++) {
        const int64_t off = S->s_off[i];
        const int32_t m = S->s_len[i];
        int64_t width = 0, total = 0, q, k;
        int32_t c, *row;
        if (check_time && (i & 31) == 31 && monotonic_now() > threshold)
            return 3;
        /* the targets of every member, by symbol (a counting sort) */
        memset(S->count, 0, sizeof(int32_t) * (size_t)n_sym);
        for (q = 0; q < m; q++) {
            const int32_t s = S->spool.a[off + q];
            for (k = S->e_off[s]; k < S->e_off[s + 1]; k++)
                for (c = S->e_lo[k]; c <= S->e_hi[k]; c++)
                    S->count[c]++;
        }
        for (c = 0; c < n_sym; c++) {
            S->b_off[c] = (int32_t)total;
            S->b_fill[c] = (int32_t)total;
            total += S->count[c];
            width += S->count[c] > 0;
        }
        S->b_off[n_sym] = (int32_t)total;
        *units += state_cost + m + width;
        if (*units > units_left)
            return 1;
        S->items.n = 0;
        if (vreserve(&S->items, total) < 0)
            return -1;
        for (q = 0; q < m; q++) {
            const int32_t s = S->spool.a[off + q];
            for (k = S->e_off[s]; k < S->e_off[s + 1]; k++)
                for (c = S->e_lo[k]; c <= S->e_hi[k]; c++)
                    S->items.a[S->b_fill[c]++] = S->e_tgt[k];
        }
        S->items.n = total;
        if (vreserve(&S->rows, n_sym) < 0)
            return -1;
        row = S->rows.a + S->rows.n;
        for (c = 0; c < n_sym; c++) {
            const int64_t a = S->b_off[c], b = S->b_off[c + 1];
            if (a == b) {
                row[c] = -1;
                continue;
            }
            /* the same targets as the symbol before (a range of classes): the same state */
            if (c > 0 && S->b_off[c - 1] < a && b - a == a - S->b_off[c - 1] &&
                memcmp(S->items.a + S->b_off[c - 1], S->items.a + a,
                       sizeof(int32_t) * (size_t)(b - a)) == 0) {
                row[c] = row[c - 1];
                continue;
            }
            if (union_closures(S, a, b) < 0)
                return -1;
            id = state_of(S, max_states);
            if (id == -1)
                return -1;
            if (id == -2)
                return 2;
            row[c] = (int32_t)id;
        }
        S->rows.n += n_sym;
    }
    return 0;
}

/* the construction over the flat arrays (checked here), as determinize() returns it */
static PyObject *
determinize_arrays(int64_t n_nfa, int64_t start_arg, int64_t accept_arg, int64_t n_sym,
                   const int32_t *src, const int32_t *lo, const int32_t *hi, const int32_t *tgt,
                   int64_t n_e, const int32_t *esrc, const int32_t *etgt, int64_t n_x,
                   int64_t max_states, int64_t state_cost, int64_t units_left, double threshold)
{
    PyObject *result = NULL;
    {
        subset S;
        int64_t units = 0, i, m = 0;
        int status = 0, bad = 0;
        int32_t *table = NULL, *order = NULL, *new_id = NULL, *r_off = NULL, *r_src = NULL;
        uint8_t *acc = NULL, *live = NULL;
        memset(&S, 0, sizeof S);
        if (n_nfa <= 0 || n_nfa >= INT32_MAX || n_sym <= 0 || n_sym >= INT32_MAX ||
            start_arg < 0 || start_arg >= n_nfa || accept_arg < 0 || accept_arg >= n_nfa) {
            PyErr_SetString(PyExc_ValueError, "_subset: the start or accepting state is not one");
            return NULL;
        }
        for (i = 0; i < n_e && !bad; i++)
            if ((uint32_t)src[i] >= (uint32_t)n_nfa || (uint32_t)tgt[i] >= (uint32_t)n_nfa ||
                lo[i] < 0 || hi[i] < lo[i] || hi[i] >= n_sym)
                bad = 1;
        for (i = 0; i < n_x && !bad; i++)
            if ((uint32_t)esrc[i] >= (uint32_t)n_nfa || (uint32_t)etgt[i] >= (uint32_t)n_nfa)
                bad = 1;
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "_subset: an edge leads out of the NFA");
            return NULL;
        }
        S.n_nfa = (int32_t)n_nfa;
        S.n_sym = (int32_t)n_sym;
        S.accept = (int32_t)accept_arg;
        S.e_off = (int32_t *)calloc((size_t)n_nfa + 1, sizeof(int32_t));
        S.e_lo = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + 1));
        S.e_hi = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + 1));
        S.e_tgt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + 1));
        S.x_off = (int32_t *)calloc((size_t)n_nfa + 1, sizeof(int32_t));
        S.x_tgt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_x + 1));
        S.useful = (uint8_t *)calloc((size_t)n_nfa, 1);
        S.c_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)n_nfa);
        S.c_len = (int32_t *)calloc((size_t)n_nfa, sizeof(int32_t));
        S.cmark = (uint32_t *)calloc((size_t)n_nfa, sizeof(uint32_t));
        S.umark = (uint32_t *)calloc((size_t)n_nfa, sizeof(uint32_t));
        S.s_cap = 64;
        S.s_off = (int64_t *)malloc(sizeof(int64_t) * (size_t)S.s_cap);
        S.s_len = (int32_t *)malloc(sizeof(int32_t) * (size_t)S.s_cap);
        S.s_hash = (uint64_t *)malloc(sizeof(uint64_t) * (size_t)S.s_cap);
        S.s_acc = (uint8_t *)malloc((size_t)S.s_cap);
        S.n_slots = 256;
        S.slots = (int32_t *)malloc(sizeof(int32_t) * (size_t)S.n_slots);
        S.count = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_sym + 1));
        S.b_off = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_sym + 1));
        S.b_fill = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_sym + 1));
        if (!S.e_off || !S.e_lo || !S.e_hi || !S.e_tgt || !S.x_off || !S.x_tgt || !S.useful ||
            !S.c_off || !S.c_len || !S.cmark || !S.umark || !S.s_off || !S.s_len || !S.s_hash ||
            !S.s_acc || !S.slots || !S.count || !S.b_off || !S.b_fill) {
            subset_free(&S);
            PyErr_NoMemory();
            return NULL;
        }
        Py_BEGIN_ALLOW_THREADS
        /* the CSRs (edges keep their given order within a source) */
        for (i = 0; i < n_e; i++)
            S.e_off[src[i] + 1]++;
        for (i = 0; i < n_nfa; i++)
            S.e_off[i + 1] += S.e_off[i];
        for (i = 0; i < n_nfa; i++)
            S.c_len[i] = S.e_off[i];
        for (i = 0; i < n_e; i++) {
            const int32_t p = S.c_len[src[i]]++;
            S.e_lo[p] = lo[i];
            S.e_hi[p] = hi[i];
            S.e_tgt[p] = tgt[i];
        }
        for (i = 0; i < n_x; i++)
            S.x_off[esrc[i] + 1]++;
        for (i = 0; i < n_nfa; i++)
            S.x_off[i + 1] += S.x_off[i];
        for (i = 0; i < n_nfa; i++)
            S.c_len[i] = S.x_off[i];
        for (i = 0; i < n_x; i++)
            S.x_tgt[S.c_len[esrc[i]]++] = etgt[i];
        for (i = 0; i < n_nfa; i++) {
            S.c_len[i] = 0;
            S.c_off[i] = -1;
            S.useful[i] = S.e_off[i + 1] > S.e_off[i] || i == accept_arg;
        }
        for (i = 0; i < S.n_slots; i++)
            S.slots[i] = -1;
        status = subset_run(&S, (int32_t)start_arg, max_states, state_cost, units_left, threshold,
                            &units);
        if (status == 0) {
            /* live states: a reverse breadth-first search from the accepting ones */
            const int64_t n = S.n_states;
            const int32_t *rows = S.rows.a;
            int64_t head = 0, tail = 0, j;
            live = (uint8_t *)calloc((size_t)n, 1);
            order = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
            r_off = (int32_t *)calloc((size_t)n + 1, sizeof(int32_t));
            new_id = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
            if (!live || !order || !r_off || !new_id)
                status = -1;
            if (status == 0) {
                int64_t total = 0;
                for (i = 0; i < n; i++)
                    for (j = 0; j < n_sym; j++)
                        if (rows[i * n_sym + j] >= 0 &&
                            (j == 0 || rows[i * n_sym + j] != rows[i * n_sym + j - 1]))
                            r_off[rows[i * n_sym + j] + 1]++;
                for (i = 0; i < n; i++)
                    r_off[i + 1] += r_off[i];
                total = r_off[n];
                r_src = (int32_t *)malloc(sizeof(int32_t) * (size_t)(total + 1));
                if (!r_src)
                    status = -1;
                else {
                    for (i = 0; i < n; i++)
                        new_id[i] = r_off[i];
                    for (i = 0; i < n; i++)
                        for (j = 0; j < n_sym; j++) {
                            const int32_t t = rows[i * n_sym + j];
                            if (t >= 0 && (j == 0 || t != rows[i * n_sym + j - 1]))
                                r_src[new_id[t]++] = (int32_t)i;
                        }
                    for (i = 0; i < n; i++)
                        if (S.s_acc[i]) {
                            live[i] = 1;
                            order[tail++] = (int32_t)i;
                        }
                    while (head < tail) {
                        const int32_t t = order[head++];
                        for (j = r_off[t]; j < r_off[t + 1]; j++)
                            if (!live[r_src[j]]) {
                                live[r_src[j]] = 1;
                                order[tail++] = r_src[j];
                            }
                    }
                }
            }
            if (status == 0 && !live[0])
                status = 4;
            if (status == 0) {
                /* renumbered breadth-first from the start, in symbol order: dead 0, start 1 */
                for (i = 0; i < n; i++)
                    new_id[i] = 0;
                head = 0;
                tail = 0;
                order[tail++] = 0;
                new_id[0] = 1;
                while (head < tail) {
                    const int32_t k = order[head++];
                    for (j = 0; j < n_sym; j++) {
                        const int32_t t = rows[(int64_t)k * n_sym + j];
                        if (t >= 0 && live[t] && new_id[t] == 0) {
                            new_id[t] = (int32_t)(tail + 1);
                            order[tail++] = t;
                        }
                    }
                }
                m = tail + 1;
                table = (int32_t *)calloc((size_t)(m * n_sym), sizeof(int32_t));
                acc = (uint8_t *)calloc((size_t)m, 1);
                if (!table || !acc)
                    status = -1;
                else
                    for (head = 0; head < tail; head++) {
                        const int32_t old = order[head];
                        int32_t *out = table + (head + 1) * n_sym;
                        acc[head + 1] = S.s_acc[old];
                        for (j = 0; j < n_sym; j++) {
                            const int32_t t = rows[(int64_t)old * n_sym + j];
                            if (t >= 0 && live[t])
                                out[j] = new_id[t];
                        }
                    }
            }
        }
        Py_END_ALLOW_THREADS
        if (status == -1)
            PyErr_NoMemory();
        else if (status == 0) {
            PyObject *t = PyByteArray_FromStringAndSize((const char *)table,
                                                        (Py_ssize_t)(m * n_sym * 4));
            PyObject *a = PyByteArray_FromStringAndSize((const char *)acc, (Py_ssize_t)m);
            if (t && a)
                result = Py_BuildValue("(iLLOOL)", status, (long long)units,
                                       (long long)S.n_states, t, a, (long long)m);
            Py_XDECREF(t);
            Py_XDECREF(a);
        } else
            result = Py_BuildValue("(iLLOOL)", status, (long long)units, (long long)S.n_states,
                                   Py_None, Py_None, (long long)0);
        free(table);
        free(acc);
        free(live);
        free(order);
        free(new_id);
        free(r_off);
        free(r_src);
        subset_free(&S);
    }
    return result;
}

/* the int value of `obj` in [lo, hi], or -1 with ValueError/TypeError set */
static int64_t
int_in(PyObject *obj, int64_t lo, int64_t hi, const char *what)
{
    long long v = PyLong_AsLongLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "_subset: %s %lld is out of range", what, v);
        return -1;
    }
    return (int64_t)v;
}

/* a list of `n` lists: the sum of their lengths, or -1 with TypeError set */
static int64_t
total_length(PyObject *lists, Py_ssize_t n, const char *what)
{
    int64_t total = 0;
    Py_ssize_t s;
    if (!PyList_Check(lists) || PyList_GET_SIZE(lists) != n) {
        PyErr_Format(PyExc_TypeError, "_subset: %s must be a list of one list per state", what);
        return -1;
    }
    for (s = 0; s < n; s++) {
        PyObject *row = PyList_GET_ITEM(lists, s);
        if (!PyList_Check(row)) {
            PyErr_Format(PyExc_TypeError, "_subset: %s must be a list of lists", what);
            return -1;
        }
        total += PyList_GET_SIZE(row);
    }
    return total;
}

/* the item `j` of a tuple of `size` ints, or -1 with an error set */
static int64_t
tuple_int(PyObject *t, Py_ssize_t size, Py_ssize_t j, int64_t lo, int64_t hi, const char *what)
{
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != size) {
        PyErr_Format(PyExc_TypeError, "_subset: %s must be tuples of %zd ints", what, size);
        return -1;
    }
    return int_in(PyTuple_GET_ITEM(t, j), lo, hi, what);
}

static int
cmp64(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* the byte edges src/lo/hi/tgt[0 .. n_e) (lo, hi: bytes, checked), then the rule references
 * src/tgt[n_e .. n_e + n_r) calling rule[0 .. n_r), and the epsilon edges esrc/etgt[0 .. n_x)
 * of an n-state NFA: the byte classes, the references' symbols, then the construction
 * (determinize_arrays) and determinize()'s result.  The arrays are rewritten (bytes to
 * classes), not freed. */
static PyObject *
finish_determinize(Py_ssize_t n, int32_t *src, int32_t *lo, int32_t *hi, int32_t *tgt, int64_t n_e,
                   int64_t *rule, int64_t n_r, int32_t *esrc, int32_t *etgt, int64_t n_x,
                   long long start, long long accept, long long max_states, long long state_cost,
                   long long units_left, double threshold)
{
    PyObject *result = NULL, *built = NULL, *classes = NULL, *rules = NULL;
    int64_t n_rules = 0, n_classes = 0, i;
    int32_t class_of[256];
    uint8_t cuts[257];
    /* the byte edges, cut into byte classes at every range boundary (dfa._byte_classes) */
    memset(cuts, 0, sizeof cuts);
    cuts[0] = 1;
    for (i = 0; i < n_e; i++) {
        cuts[lo[i]] = 1;
        cuts[hi[i] + 1] = 1;
    }
    for (i = 0; i < 256; i++) {
        n_classes += cuts[i];
        class_of[i] = (int32_t)(n_classes - 1);
    }
    for (i = 0; i < n_e; i++) {
        lo[i] = class_of[lo[i]];
        hi[i] = class_of[hi[i]];
    }
    /* rule references: the symbol n_classes + the rule's rank among the referenced rules */
    if (n_r > 0) {
        int64_t *sorted_rules = (int64_t *)malloc(sizeof(int64_t) * (size_t)n_r);
        if (!sorted_rules)
            return PyErr_NoMemory();
        memcpy(sorted_rules, rule, sizeof(int64_t) * (size_t)n_r);
        qsort(sorted_rules, (size_t)n_r, sizeof(int64_t), cmp64);
        for (i = 0; i < n_r; i++)
            if (i == 0 || sorted_rules[i] != sorted_rules[n_rules - 1])
                sorted_rules[n_rules++] = sorted_rules[i];
        for (i = 0; i < n_r; i++) {
            int64_t l = 0, h = n_rules - 1;
            while (l < h) {
                const int64_t mid = (l + h) / 2;
                if (sorted_rules[mid] < rule[i])
                    l = mid + 1;
                else
                    h = mid;
            }
            lo[n_e + i] = hi[n_e + i] = (int32_t)(n_classes + l);
        }
        rules = PyList_New((Py_ssize_t)n_rules);
        for (i = 0; rules && i < n_rules; i++) {
            PyObject *v = PyLong_FromLongLong((long long)sorted_rules[i]);
            if (!v)
                Py_CLEAR(rules);
            else
                PyList_SET_ITEM(rules, (Py_ssize_t)i, v);
        }
        free(sorted_rules);
    } else
        rules = PyList_New(0);
    classes = PyByteArray_FromStringAndSize((const char *)class_of, (Py_ssize_t)sizeof class_of);
    if (!rules || !classes)
        goto done;
    if (start < 0 || start >= n || accept < 0 || accept >= n) {
        PyErr_SetString(PyExc_ValueError, "_subset: the start or accepting state is not one");
        goto done;
    }
    if (max_states > INT32_MAX - 1) /* (state numbers are int32) */
        max_states = INT32_MAX - 1;
    built = determinize_arrays((int64_t)n, start, accept, n_classes + n_rules, src, lo, hi, tgt,
                               n_e + n_r, esrc, etgt, n_x, max_states, state_cost, units_left,
                               threshold);
    if (built)
        result = Py_BuildValue("(OOO)", built, classes, rules);
done:
    Py_XDECREF(built);
    Py_XDECREF(classes);
    Py_XDECREF(rules);
    return result;
}

static PyObject *
subset_determinize(PyObject *self, PyObject *args)
{
    PyObject *eps, *edges, *refs, *result = NULL;
    long long start, accept, max_states, state_cost, units_left;
    double threshold;
    Py_ssize_t n, s, j;
    int64_t n_e, n_r, n_x, q = 0, x = 0;
    int32_t *src = NULL, *lo = NULL, *hi = NULL, *tgt = NULL, *esrc = NULL, *etgt = NULL;
    int64_t *rule = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOLLLLLd", &eps, &edges, &refs, &start, &accept, &max_states,
                          &state_cost, &units_left, &threshold))
        return NULL;
    if (!PyList_Check(eps) || PyList_GET_SIZE(eps) == 0) {
        PyErr_SetString(PyExc_TypeError, "_subset: eps must be a non-empty list");
        return NULL;
    }
    n = PyList_GET_SIZE(eps);
    if ((int64_t)n >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_subset: too many NFA states");
        return NULL;
    }
    if ((n_x = total_length(eps, n, "eps")) < 0 || (n_e = total_length(edges, n, "edges")) < 0 ||
        (n_r = total_length(refs, n, "refs")) < 0)
        return NULL;
    src = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    lo = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    hi = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    tgt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    esrc = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_x + 1));
    etgt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_x + 1));
    rule = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_r + 1));
    if (!src || !lo || !hi || !tgt || !esrc || !etgt || !rule) {
        PyErr_NoMemory();
        goto done;
    }
    for (s = 0; s < n; s++) {
        PyObject *row = PyList_GET_ITEM(edges, s);
        for (j = 0; j < PyList_GET_SIZE(row); j++) {
            PyObject *e = PyList_GET_ITEM(row, j);
            int64_t a, b, t;
            if ((a = tuple_int(e, 3, 0, 0, 255, "edges")) < 0 ||
                (b = tuple_int(e, 3, 1, a, 255, "edges")) < 0 ||
                (t = tuple_int(e, 3, 2, 0, (int64_t)n - 1, "edges")) < 0)
                goto done;
            src[q] = (int32_t)s;
            lo[q] = (int32_t)a;
            hi[q] = (int32_t)b;
            tgt[q++] = (int32_t)t;
        }
        row = PyList_GET_ITEM(eps, s);
        for (j = 0; j < PyList_GET_SIZE(row); j++) {
            int64_t t = int_in(PyList_GET_ITEM(row, j), 0, (int64_t)n - 1, "eps");
            if (t < 0)
                goto done;
            esrc[x] = (int32_t)s;
            etgt[x++] = (int32_t)t;
        }
    }
    for (s = 0; s < n; s++) {
        PyObject *row = PyList_GET_ITEM(refs, s);
        for (j = 0; j < PyList_GET_SIZE(row); j++) {
            PyObject *e = PyList_GET_ITEM(row, j);
            int64_t r, t;
            if ((r = tuple_int(e, 2, 0, 0, INT64_MAX, "refs")) < 0 ||
                (t = tuple_int(e, 2, 1, 0, (int64_t)n - 1, "refs")) < 0)
                goto done;
            rule[q - n_e] = r;
            src[q] = (int32_t)s;
            tgt[q++] = (int32_t)t;
        }
    }
    result = finish_determinize(n, src, lo, hi, tgt, n_e, rule, n_r, esrc, etgt, n_x, start,
                                accept, max_states, state_cost, units_left, threshold);
done:
    free(src);
    free(lo);
    free(hi);
    free(tgt);
    free(esrc);
    free(etgt);
    free(rule);
    return result;
}

/* `o` must be a list of `len` ints, each in [lo, hi]: copied into out32 (or out64 when out32 is
 * NULL); 0, or -1 with TypeError/ValueError set */
static int
flat_ints(PyObject *o, Py_ssize_t len, int64_t lo, int64_t hi, int32_t *out32, int64_t *out64,
          const char *what)
{
    Py_ssize_t j;
    if (!PyList_Check(o) || PyList_GET_SIZE(o) != len) {
        PyErr_Format(PyExc_TypeError, "_subset: %s must be a list of %zd ints", what, len);
        return -1;
    }
    for (j = 0; j < len; j++) {
        int64_t v = int_in(PyList_GET_ITEM(o, j), lo, hi, what);
        if (v < 0)
            return -1;
        if (out32)
            out32[j] = (int32_t)v;
        else
            out64[j] = v;
    }
    return 0;
}

/* determinize_flat(n, e_src, e_lo, e_hi, e_tgt, x_src, x_tgt, r_src, r_rule, r_tgt, start, accept,
 * max_states, state_cost, units_left, threshold): determinize() of the NFA of `n` states given
 * as flat lists of ints (formcast.automata.nfa.FlatNFA: byte edge k is e_src[k] --[e_lo[k],
 * e_hi[k]]--> e_tgt[k], epsilon edge k x_src[k] -> x_tgt[k], rule reference k r_src[k] calls
 * r_rule[k] and returns to r_tgt[k]): the same construction, result and errors as determinize()
 * of the per-state lists FlatNFA.to_lists() makes (edge order within a state does not change
 * the DFA: a DFA state is a sorted set) */
static PyObject *
subset_determinize_flat(PyObject *self, PyObject *args)
{
    PyObject *es, *el, *eh, *et, *xs, *xt, *rs, *rr, *rt, *result = NULL;
    long long n_arg, start, accept, max_states, state_cost, units_left;
    double threshold;
    Py_ssize_t n, n_e, n_x, n_r, k;
    int32_t *src = NULL, *lo = NULL, *hi = NULL, *tgt = NULL, *esrc = NULL, *etgt = NULL;
    int64_t *rule = NULL;
    (void)self;
    if (!PyArg_ParseTuple(args, "LOOOOOOOOOLLLLLd", &n_arg, &es, &el, &eh, &et, &xs, &xt, &rs,
                          &rr, &rt, &start, &accept, &max_states, &state_cost, &units_left,
                          &threshold))
        return NULL;
    if (n_arg <= 0 || n_arg >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "_subset: the NFA must have 1 to 2**31 - 2 states");
        return NULL;
    }
    n = (Py_ssize_t)n_arg;
    if (!PyList_Check(es) || !PyList_Check(xs) || !PyList_Check(rs)) {
        PyErr_SetString(PyExc_TypeError, "_subset: the edge lists must be lists");
        return NULL;
    }
    n_e = PyList_GET_SIZE(es);
    n_x = PyList_GET_SIZE(xs);
    n_r = PyList_GET_SIZE(rs);
    src = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    lo = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    hi = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    tgt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_e + n_r + 1));
    esrc = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_x + 1));
    etgt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n_x + 1));
    rule = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n_r + 1));
    if (!src || !lo || !hi || !tgt || !esrc || !etgt || !rule) {
        PyErr_NoMemory();
        goto done;
    }
    if (flat_ints(es, n_e, 0, n - 1, src, NULL, "e_src") < 0 ||
        flat_ints(el, n_e, 0, 255, lo, NULL, "e_lo") < 0 ||
        flat_ints(eh, n_e, 0, 255, hi, NULL, "e_hi") < 0 ||
        flat_ints(et, n_e, 0, n - 1, tgt, NULL, "e_tgt") < 0 ||
        flat_ints(xs, n_x, 0, n - 1, esrc, NULL, "x_src") < 0 ||
        flat_ints(xt, n_x, 0, n - 1, etgt, NULL, "x_tgt") < 0 ||
        flat_ints(rs, n_r, 0, n - 1, src + n_e, NULL, "r_src") < 0 ||
        flat_ints(rr, n_r, 0, INT64_MAX, NULL, rule, "r_rule") < 0 ||
        flat_ints(rt, n_r, 0, n - 1, tgt + n_e, NULL, "r_tgt") < 0)
        goto done;
    for (k = 0; k < n_e; k++)
        if (hi[k] < lo[k]) {
            PyErr_SetString(PyExc_ValueError, "_subset: an edge's range is empty (hi < lo)");
            goto done;
        }
    result = finish_determinize(n, src, lo, hi, tgt, n_e, rule, n_r, esrc, etgt, n_x, start,
                                accept, max_states, state_cost, units_left, threshold);
done:
    free(src);
    free(lo);
    free(hi);
    free(tgt);
    free(esrc);
    free(etgt);
    free(rule);
    return result;
}

/* ---- Hopcroft ---- */

static PyObject *
subset_hopcroft(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_acc, *o_out, *result = NULL;
    long long k_arg, start_arg;
    Py_buffer b_table, b_acc, b_out;
    HELD_BUFFERS(3);
    (void)self;
    if (!PyArg_ParseTuple(args, "OLOLO", &o_table, &k_arg, &o_acc, &start_arg, &o_out))
        return NULL;
    GET(o_table, b_table, 4, 0, "table");
    GET(o_acc, b_acc, 1, 0, "accepting");
    GET(o_out, b_out, 8, 1, "out");
    {
        const int64_t n = b_acc.len, k = k_arg;
        const int32_t *table = (const int32_t *)b_table.buf;
        const uint8_t *accepting = (const uint8_t *)b_acc.buf;
        int64_t *out = (int64_t *)b_out.buf;
        int32_t *p_off = NULL, *p_src = NULL, *p_fill = NULL, *p_sym = NULL, *pc = NULL, *px = NULL;
        int32_t *cnt = NULL, *cfill = NULL, *elems = NULL, *loc = NULL, *blk = NULL;
        int32_t *bstart = NULL, *bend = NULL, *marked = NULL, *work = NULL, *members = NULL;
        int32_t *xs = NULL, *touched = NULL;
        uint8_t *in_work = NULL;
        int64_t i, c, bad = 0, nomem = 0;
        if (k <= 0 || n <= 0 || n >= INT32_MAX || b_table.len / 4 != n * k || b_out.len / 8 != n ||
            start_arg < 0 || start_arg >= n) {
            PyErr_SetString(PyExc_ValueError, "_subset: array lengths disagree");
            goto done;
        }
        bad = table_out_of_range(table, n * k, n);
        for (c = 0; c < k; c++)
            bad |= table[c] != 0;
        if (bad) {
            PyErr_SetString(PyExc_ValueError,
                            "_subset: the table leads to a state it lacks (or state 0 is live)");
            goto done;
        }
        p_off = (int32_t *)calloc((size_t)(n * k + 1), sizeof(int32_t));
        p_src = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k + 1));
        p_fill = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k + 1));
        p_sym = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k + 1));
        pc = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k + 1));
        px = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k + 1));
        cnt = (int32_t *)malloc(sizeof(int32_t) * (size_t)(k + 1));
        cfill = (int32_t *)malloc(sizeof(int32_t) * (size_t)(k + 1));
        elems = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        loc = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        blk = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        bstart = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        bend = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        marked = (int32_t *)calloc((size_t)(n + 1), sizeof(int32_t));
        work = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        in_work = (uint8_t *)calloc((size_t)(n + 1), 1);
        members = (int32_t *)malloc(sizeof(int32_t) * (size_t)n);
        xs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n * k + 1));
        touched = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
        if (!p_off || !p_src || !p_fill || !p_sym || !pc || !px || !cnt || !cfill || !elems || !loc || !blk || !bstart || !bend || !marked || !work ||
            !in_work || !members || !xs || !touched)
            nomem = 1;
        if (!nomem) {
            int64_t n_blocks = 0, n_work = 0, pos = 0;
            Py_BEGIN_ALLOW_THREADS
            /* predecessors per (target, symbol), transitions into the dead state left out */
            for (i = 0; i < n; i++)
                for (c = 0; c < k; c++) {
                    const int32_t t = table[i * k + c];
                    if (t != 0)
                        p_off[(int64_t)t * k + c + 1]++;
                }
            for (i = 0; i < n * k; i++)
                p_off[i + 1] += p_off[i];
            {
                int32_t *fill = p_fill;
                memcpy(fill, p_off, sizeof(int32_t) * (size_t)(n * k));
                for (i = 0; i < n; i++)
                    for (c = 0; c < k; c++) {
                        const int32_t t = table[i * k + c];
                        if (t != 0) {
                            const int32_t slot = fill[(int64_t)t * k + c]++;
                            p_src[slot] = (int32_t)i;
                            p_sym[slot] = (int32_t)c;
                        }
                    }
            }
            /* blocks: the dead state, the accepting states, the others */
            elems[0] = 0;
            loc[0] = 0;
            blk[0] = 0;
            bstart[0] = 0;
            bend[0] = 1;
            n_blocks = 1;
            pos = 1;
            for (c = 1; c >= 0; c--) { /* accepting (c = 1), then rejecting */
                const int64_t first = pos;
                for (i = 1; i < n; i++)
                    if ((accepting[i] != 0) == (c == 1)) {
                        elems[pos] = (int32_t)i;
                        loc[i] = (int32_t)pos;
                        blk[i] = (int32_t)n_blocks;
                        pos++;
                    }
                if (pos > first) {
                    bstart[n_blocks] = (int32_t)first;
                    bend[n_blocks] = (int32_t)pos;
                    in_work[n_blocks] = 1;
                    work[n_work++] = (int32_t)n_blocks;
                    n_blocks++;
                }
            }
            /* splitters are whole blocks, every symbol of one at a time; the dead block never */
            while (n_work > 0) {
                const int32_t a = work[--n_work];
                const int64_t na = bend[a] - bstart[a];
                in_work[a] = 0;
                int64_t n_pairs = 0, q, j;
                memcpy(members, elems + bstart[a], sizeof(int32_t) * (size_t)na);
                /* the predecessors of the block's states, by symbol (a counting sort): the
                 * entries of state t are p_src[p_off[t k] .. p_off[t k + k]), symbols ascending */
                for (q = 0; q < na; q++) {
                    const int64_t first = (int64_t)members[q] * k;
                    for (j = p_off[first]; j < p_off[first + k]; j++) {
                        pc[n_pairs] = p_sym[j];
                        px[n_pairs++] = p_src[j];
                    }
                }
                if (n_pairs == 0)
                    continue;
                memset(cnt, 0, sizeof(int32_t) * (size_t)(k + 1));
                for (q = 0; q < n_pairs; q++)
                    cnt[pc[q] + 1]++;
                for (c = 0; c < k; c++)
                    cnt[c + 1] += cnt[c];
                memcpy(cfill, cnt, sizeof(int32_t) * (size_t)k);
                for (q = 0; q < n_pairs; q++)
                    xs[cfill[pc[q]]++] = px[q];
                for (c = 0; c < k; c++) {
                    const int32_t *xc = xs + cnt[c];
                    const int64_t nx = cnt[c + 1] - cnt[c];
                    int64_t n_touched = 0;
                    if (nx == 0)
                        continue;
                    /* move each predecessor to the front of its block */
                    for (q = 0; q < nx; q++) {
                        const int32_t x = xc[q], b = blk[x];
                        const int32_t p = bstart[b] + marked[b], y = elems[p], lx = loc[x];
                        if (marked[b] == 0)
                            touched[n_touched++] = b;
                        elems[p] = x;
                        loc[x] = p;
                        elems[lx] = y;
                        loc[y] = lx;
                        marked[b]++;
                    }
                    for (q = 0; q < n_touched; q++) {
                        const int32_t b = touched[q], mk = marked[b];
                        const int32_t size = bend[b] - bstart[b];
                        int32_t z, p;
                        marked[b] = 0;
                        if (mk == size)
                            continue;
                        z = (int32_t)n_blocks++;
                        bstart[z] = bstart[b];
                        bend[z] = bstart[b] + mk;
                        bstart[b] = bend[z];
                        for (p = bstart[z]; p < bend[z]; p++)
                            blk[elems[p]] = z;
                        if (in_work[b] || mk <= size - mk) {
                            work[n_work++] = z;
                            in_work[z] = 1;
                        } else {
                            work[n_work++] = b;
                            in_work[b] = 1;
                        }
                    }
                }
            }
            /* the blocks numbered breadth-first from the start's, in symbol order (dead 0,
             * start 1), as dfa._quotient numbers them: members[b] is block b's new number
             * (-1: not met yet), xs the queue of blocks, touched[b] a state of block b */
            for (i = 0; i < n_blocks; i++)
                members[i] = -1;
            for (i = n - 1; i >= 0; i--)
                touched[blk[i]] = (int32_t)i;
            members[blk[0]] = 0;
            {
                int64_t head = 0, tail = 0, next = 1;
                if (members[blk[start_arg]] < 0) {
                    members[blk[start_arg]] = (int32_t)next++;
                    xs[tail++] = blk[start_arg];
                }
                while (head < tail) {
                    const int32_t *row = table + (int64_t)touched[xs[head++]] * k;
                    for (c = 0; c < k; c++) {
                        const int32_t b = blk[row[c]];
                        if (members[b] < 0) {
                            members[b] = (int32_t)next++;
                            xs[tail++] = b;
                        }
                    }
                }
                for (i = 0; i < n; i++) { /* (blocks the start does not reach: after them) */
                    if (members[blk[i]] < 0)
                        members[blk[i]] = (int32_t)next++;
                    out[i] = members[blk[i]];
                }
            }
            Py_END_ALLOW_THREADS
            Py_INCREF(Py_None);
            result = Py_None;
        }
        free(p_off);
        free(p_src);
        free(p_fill);
        free(p_sym);
        free(pc);
        free(px);
        free(cnt);
        free(cfill);
        free(elems);
        free(loc);
        free(blk);
        free(bstart);
        free(bend);
        free(marked);
        free(work);
        free(in_work);
        free(members);
        free(xs);
        free(touched);
        if (nomem)
            PyErr_NoMemory();
    }
done:
    RELEASE_HELD();
    return result;
}

/* widen(table, k, n_classes, class_of) -> (wide, refs): a class table of dfa.nfa_to_dfa (int32,
 * m x k, C-contiguous: the byte classes' columns 0 .. n_classes - 1, then one column per
 * referenced rule) as the ByteDFA's tables: `wide` (a bytearray of int32[m, 256]) has
 * wide[s, b] = table[s, class_of[b]] (np.take(table, class_of, axis=1)), `refs` (a bytearray of
 * int32[m, k - n_classes]) the rule columns (table[:, n_classes:]).  One pass in C, where
 * np.take along the columns of a small table cost microseconds per automaton.  The entries are
 * copied, not read as indices; class_of (int32[256]) is checked against n_classes and the
 * table's length against k (ValueError): nothing is read out of bounds. */
static PyObject *
subset_widen(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_class, *result = NULL;
    long long k_arg, nc_arg;
    Py_buffer b_table, b_class;
    HELD_BUFFERS(2);
    (void)self;
    if (!PyArg_ParseTuple(args, "OLLO", &o_table, &k_arg, &nc_arg, &o_class))
        return NULL;
    GET(o_table, b_table, 4, 0, "table");
    GET(o_class, b_class, 4, 0, "class_of");
    {
        const int32_t *table = (const int32_t *)b_table.buf;
        const int32_t *cls = (const int32_t *)b_class.buf;
        PyObject *wide = NULL, *refs = NULL;
        int64_t k, nc, nr, m, i, j;
        int bad = 0;
        if (k_arg <= 0 || k_arg >= INT32_MAX || nc_arg <= 0 || nc_arg > k_arg ||
            b_table.len % (4 * (Py_ssize_t)k_arg) != 0 || b_class.len != 4 * 256) {
            PyErr_SetString(PyExc_ValueError, "_subset: widen's array lengths disagree");
            goto done;
        }
        k = (int64_t)k_arg;
        nc = (int64_t)nc_arg;
        nr = k - nc;
        m = (int64_t)(b_table.len / (4 * (Py_ssize_t)k));
        for (j = 0; j < 256; j++)
            bad |= (uint32_t)cls[j] >= (uint32_t)nc;
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "_subset: a byte's class is not one of the table's");
            goto done;
        }
        wide = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(m * 256 * 4));
        refs = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(m * nr * 4));
        if (wide && refs) {
            int32_t *w = (int32_t *)PyByteArray_AS_STRING(wide);
            int32_t *r = (int32_t *)PyByteArray_AS_STRING(refs);
            /* the bytes as maximal runs of one class (a few dozen for a JSON rule's classes):
             * each row then reads one entry per run and fills the run, where a gather per byte
             * read 256 (the same table) */
            int32_t run_lo[257], run_cls[256];
            int64_t n_runs = 0, q, b;
            for (j = 0; j < 256; j++) {
                if (j == 0 || cls[j] != cls[j - 1]) {
                    run_lo[n_runs] = (int32_t)j;
                    run_cls[n_runs] = cls[j];
                    n_runs++;
                }
            }
            run_lo[n_runs] = 256;
            for (i = 0; i < m; i++) {
                const int32_t *row = table + i * k;
                int32_t *out = w + i * 256;
                for (q = 0; q < n_runs; q++) {
                    const int32_t v = row[run_cls[q]];
                    for (b = run_lo[q]; b < run_lo[q + 1]; b++)
                        out[b] = v;
                }
                for (j = 0; j < nr; j++)
                    r[i * nr + j] = row[nc + j];
            }
            result = PyTuple_Pack(2, wide, refs);
        }
        Py_XDECREF(wide);
        Py_XDECREF(refs);
    }
done:
    RELEASE_HELD();
    return result;
}

/* sub_edges(table, accepting) -> (edges, accepting_states): what nfa.SubAutomaton.of makes with
 * numpy from a byte DFA (state 0 dead), in one pass: `edges` a tuple of (state, lo, hi, target)
 * tuples, one per maximal run of equal targets of a row other than the dead one's, rows in order
 * and runs by their first byte, runs into the dead state left out; `accepting_states` the
 * accepting states other than 0, ascending.  table: int32[n, 256] (C-contiguous), accepting:
 * bool[n] (n from its length).  Every entry is checked against n (ValueError): a corrupt table
 * raises rather than giving targets outside the automaton.  O(n * 256). */
static PyObject *
subset_sub_edges(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_acc, *result = NULL;
    Py_buffer b_table, b_acc;
    HELD_BUFFERS(2);
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &o_table, &o_acc))
        return NULL;
    GET(o_table, b_table, 4, 0, "table");
    GET(o_acc, b_acc, 1, 0, "accepting");
    {
        const int32_t *table = (const int32_t *)b_table.buf;
        const unsigned char *acc = (const unsigned char *)b_acc.buf;
        const int64_t n = (int64_t)b_acc.len;
        PyObject *edges = NULL, *states = NULL, *item;
        vec32 runs = {NULL, 0, 0}; /* (state, lo, hi, target) per run */
        int64_t s, b, end, n_acc = 0, k;
        if (n >= INT32_MAX || (int64_t)b_table.len != n * 256 * 4) {
            PyErr_SetString(PyExc_ValueError, "_subset: sub_edges' array lengths disagree");
            goto done;
        }
        if (table_out_of_range(table, n * 256, n)) {
            PyErr_SetString(PyExc_ValueError, "_subset: a transition is not a state");
            goto done;
        }
        for (s = 1; s < n; s++) {
            const int32_t *row = table + s * 256;
            n_acc += acc[s] != 0;
            for (b = 0; b < 256; b = end) {
                const int32_t t = row[b];
                end = b + 1;
                while (end < 256 && row[end] == t)
                    end++;
                if (t == 0)
                    continue;
                if (vreserve(&runs, 4) < 0) {
                    PyErr_NoMemory();
                    goto fail;
                }
                runs.a[runs.n++] = (int32_t)s;
                runs.a[runs.n++] = (int32_t)b;
                runs.a[runs.n++] = (int32_t)(end - 1);
                runs.a[runs.n++] = t;
            }
        }
        edges = PyTuple_New((Py_ssize_t)(runs.n / 4));
        states = PyTuple_New((Py_ssize_t)n_acc);
        if (!edges || !states)
            goto fail;
        for (k = 0; k < runs.n / 4; k++) {
            const int32_t *q = runs.a + 4 * k;
            item = Py_BuildValue("(iiii)", q[0], q[1], q[2], q[3]);
            if (!item)
                goto fail;
            PyTuple_SET_ITEM(edges, (Py_ssize_t)k, item);
        }
        for (s = 1, k = 0; s < n; s++) {
            if (acc[s]) {
                item = PyLong_FromLongLong((long long)s);
                if (!item)
                    goto fail;
                PyTuple_SET_ITEM(states, (Py_ssize_t)k, item);
                k++;
            }
        }
        result = PyTuple_Pack(2, edges, states);
    fail:
        free(runs.a);
        Py_XDECREF(edges);
        Py_XDECREF(states);
    }
done:
    RELEASE_HELD();
    return result;
}

/* the m x w int32 buffer of `o` (None: absent, *w = 0); 0, or -1 with ValueError when its length is
 * not m rows of w_expect (w_expect < 0: any whole number of m rows) */
static int
rows_of(Py_buffer *view, int64_t m, int64_t *w)
{
    if (m == 0) {
        *w = 0;
        return view->len == 0 ? 0 : -1;
    }
    if (view->len % (4 * (Py_ssize_t)m) != 0)
        return -1;
    *w = (int64_t)(view->len / (4 * (Py_ssize_t)m));
    return 0;
}

/* rule_flags(table, accepting, ref_table, ref_rules, counted) -> (boundary, tail, refs): what
 * rules.compile_grammar_automaton makes per rule automaton with numpy (rules._rule_flags):
 * `boundary` (bytearray of m bools) a state that accepts or calls a rule (the dead state 0
 * never), `tail` (m bools) a state that accepts and has no move out (no byte into a live state,
 * no call), all False for a counted rule, and `refs` a tuple of m tuples of (callee, return
 * state) (ref_rules[j] for the calls of column j, in column order).  table: int32[m, 256],
 * accepting: bool[m] (m from its length), ref_table: int32[m, len(ref_rules)] or None.  Every
 * entry is checked against m (ValueError).  O(m * (256 + calls)). */
static PyObject *
subset_rule_flags(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_acc, *o_refs, *o_rules, *result = NULL;
    int counted;
    Py_buffer b_table, b_acc, b_refs;
    HELD_BUFFERS(3);
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOO!p", &o_table, &o_acc, &o_refs, &PyTuple_Type, &o_rules,
                          &counted))
        return NULL;
    GET(o_table, b_table, 4, 0, "table");
    GET(o_acc, b_acc, 1, 0, "accepting");
    if (o_refs != Py_None)
        GET(o_refs, b_refs, 4, 0, "ref_table");
    {
        const int32_t *table = (const int32_t *)b_table.buf;
        const unsigned char *acc = (const unsigned char *)b_acc.buf;
        const int64_t m = (int64_t)b_acc.len;
        const int32_t *refs = o_refs == Py_None ? NULL : (const int32_t *)b_refs.buf;
        const int64_t nr = (int64_t)PyTuple_GET_SIZE(o_rules);
        PyObject *bnd = NULL, *tail = NULL, *per = NULL, *empty = NULL, *item, *pair;
        int64_t s, j, w, n_calls;
        if (m >= INT32_MAX || (int64_t)b_table.len != m * 256 * 4 ||
            (refs && (rows_of(&b_refs, m, &w) < 0 || w != nr)) || (!refs && nr != 0)) {
            PyErr_SetString(PyExc_ValueError, "_subset: rule_flags' array lengths disagree");
            goto done;
        }
        if (refs && table_out_of_range(refs, m * nr, m)) {
            PyErr_SetString(PyExc_ValueError, "_subset: a transition is not a state");
            goto done;
        }
        bnd = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)m);
        tail = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)m);
        per = PyTuple_New((Py_ssize_t)m);
        empty = PyTuple_New(0);
        if (!bnd || !tail || !per || !empty)
            goto fail;
        {
            /* one pass over the table (the largest input: 1 KiB a state) for both the range
             * check and each row's "has a byte move", kept in tail until the loop below
             * (two passes, the check then the flags, read it twice) */
            unsigned char *has_out = (unsigned char *)PyByteArray_AS_STRING(tail);
            int bad = 0;
            for (s = 0; s < m; s++) {
                const int32_t *row = table + s * 256;
                int out = 0, b;
                for (b = 0; b < 256; b++) {
                    out |= row[b] != 0;
                    bad |= (uint32_t)row[b] >= (uint32_t)m;
                }
                has_out[s] = (unsigned char)out;
            }
            if (bad) {
                PyErr_SetString(PyExc_ValueError, "_subset: a transition is not a state");
                goto fail;
            }
        }
        for (s = 0; s < m; s++) {
            int out = PyByteArray_AS_STRING(tail)[s] != 0, calls = 0;
            n_calls = 0;
            if (refs && s != 0) {
                for (j = 0; j < nr; j++)
                    n_calls += refs[s * nr + j] != 0;
            }
            calls = n_calls > 0;
            if (calls) {
                int64_t k = 0;
                item = PyTuple_New((Py_ssize_t)n_calls);
                if (!item)
                    goto fail;
                PyTuple_SET_ITEM(per, (Py_ssize_t)s, item);
                for (j = 0; j < nr; j++) {
                    const int32_t t = refs[s * nr + j];
                    if (t == 0)
                        continue;
                    pair = PyTuple_New(2);
                    if (!pair)
                        goto fail;
                    PyTuple_SET_ITEM(item, (Py_ssize_t)k, pair);
                    k++;
                    Py_INCREF(PyTuple_GET_ITEM(o_rules, (Py_ssize_t)j));
                    PyTuple_SET_ITEM(pair, 0, PyTuple_GET_ITEM(o_rules, (Py_ssize_t)j));
                    PyTuple_SET_ITEM(pair, 1, PyLong_FromLong((long)t));
                    if (!PyTuple_GET_ITEM(pair, 1))
                        goto fail;
                }
            } else {
                Py_INCREF(empty);
                PyTuple_SET_ITEM(per, (Py_ssize_t)s, empty);
            }
            PyByteArray_AS_STRING(bnd)[s] = (char)(s != 0 && (acc[s] || calls));
            PyByteArray_AS_STRING(tail)[s] = (char)(!counted && acc[s] && !out && !calls);
        }
        result = PyTuple_Pack(3, bnd, tail, per);
    fail:
        Py_XDECREF(bnd);
        Py_XDECREF(tail);
        Py_XDECREF(per);
        Py_XDECREF(empty);
    }
done:
    RELEASE_HELD();
    return result;
}

/* a list of the n int32 values at a */
static PyObject *
int_list(const int32_t *a, int64_t n)
{
    PyObject *out = PyList_New((Py_ssize_t)n), *x;
    int64_t i;
    if (!out)
        return NULL;
    for (i = 0; i < n; i++) {
        x = PyLong_FromLong((long)a[i]);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, x);
    }
    return out;
}

/* rule_moves(table, ref_table) -> (b_off, b_tgt, r_off, r_col, r_tgt): what rules._moves makes
 * with numpy (lists of ints): per state (row of table, int32[m, 256]) its byte successors, one
 * per maximal run of equal targets other than the dead state 0, as CSR (b_off[s] .. b_off[s + 1]
 * into b_tgt), and its calls (ref_table: int32[m, r] or None) as CSR of (column, return state)
 * for the nonzero entries, row-major.  Entries are checked against m (ValueError).
 * O(m * (256 + r)). */
static PyObject *
subset_rule_moves(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_refs, *result = NULL;
    Py_buffer b_table, b_refs;
    HELD_BUFFERS(2);
    (void)self;
    if (!PyArg_ParseTuple(args, "OO", &o_table, &o_refs))
        return NULL;
    GET(o_table, b_table, 4, 0, "table");
    if (o_refs != Py_None)
        GET(o_refs, b_refs, 4, 0, "ref_table");
    {
        const int32_t *table = (const int32_t *)b_table.buf;
        const int32_t *refs = o_refs == Py_None ? NULL : (const int32_t *)b_refs.buf;
        const int64_t m = (int64_t)(b_table.len / 1024);
        vec32 off = {NULL, 0, 0}, tgt = {NULL, 0, 0}, roff = {NULL, 0, 0}, rcol = {NULL, 0, 0},
              rtgt = {NULL, 0, 0};
        PyObject *l[5] = {NULL, NULL, NULL, NULL, NULL};
        int64_t s, b, j, nr = 0;
        int i;
        if (m >= INT32_MAX || b_table.len % 1024 != 0 || (refs && rows_of(&b_refs, m, &nr) < 0)) {
            PyErr_SetString(PyExc_ValueError, "_subset: rule_moves' array lengths disagree");
            goto done;
        }
        if (table_out_of_range(table, m * 256, m) || (refs && table_out_of_range(refs, m * nr, m))) {
            PyErr_SetString(PyExc_ValueError, "_subset: a transition is not a state");
            goto done;
        }
        if (vreserve(&off, m + 1) < 0 || vreserve(&roff, m + 1) < 0)
            goto nomem;
        off.a[off.n++] = 0;
        roff.a[roff.n++] = 0;
        for (s = 0; s < m; s++) {
            const int32_t *row = table + s * 256;
            for (b = 0; b < 256; b++) {
                if (row[b] != 0 && (b == 0 || row[b] != row[b - 1])) {
                    if (vreserve(&tgt, 1) < 0)
                        goto nomem;
                    tgt.a[tgt.n++] = row[b];
                }
            }
            off.a[off.n++] = (int32_t)tgt.n;
            for (j = 0; j < nr; j++) {
                const int32_t t = refs[s * nr + j];
                if (t != 0) {
                    if (vreserve(&rcol, 1) < 0 || vreserve(&rtgt, 1) < 0)
                        goto nomem;
                    rcol.a[rcol.n++] = (int32_t)j;
                    rtgt.a[rtgt.n++] = t;
                }
            }
            roff.a[roff.n++] = (int32_t)rcol.n;
        }
        l[0] = int_list(off.a, off.n);
        l[1] = int_list(tgt.a, tgt.n);
        l[2] = int_list(roff.a, roff.n);
        l[3] = int_list(rcol.a, rcol.n);
        l[4] = int_list(rtgt.a, rtgt.n);
        if (l[0] && l[1] && l[2] && l[3] && l[4])
            result = PyTuple_Pack(5, l[0], l[1], l[2], l[3], l[4]);
        goto cleanup;
    nomem:
        PyErr_NoMemory();
    cleanup:
        for (i = 0; i < 5; i++)
            Py_XDECREF(l[i]);
        free(off.a);
        free(tgt.a);
        free(roff.a);
        free(rcol.a);
        free(rtgt.a);
    }
done:
    RELEASE_HELD();
    return result;
}

/* quotient(table, k, part, accepting) -> None or (table, accepting, n_blocks): the quotient of a
 * class table (int32[n, k], C-contiguous) by the partition `part` (int64[n], blocks 0 ..
 * n_blocks - 1 numbered as hopcroft numbers them), as dfa._minimize_native makes it with numpy:
 * None when every block is one state (n_blocks == n, nothing merges); else block b's row is the
 * row of its first state with each target replaced by its block (int32[n_blocks, k] as bytes),
 * its accepting flag that state's (bool[n_blocks] as bytes), block 0's row all dead and not
 * accepting.  Every table entry and block number is checked against n (ValueError), and every
 * block must have a state.  O(n * k). */
static PyObject *
subset_quotient(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_part, *o_acc, *result = NULL;
    long long k_arg;
    Py_buffer b_table, b_part, b_acc;
    HELD_BUFFERS(3);
    (void)self;
    if (!PyArg_ParseTuple(args, "OLOO", &o_table, &k_arg, &o_part, &o_acc))
        return NULL;
    GET(o_table, b_table, 4, 0, "table");
    GET(o_part, b_part, 8, 0, "part");
    GET(o_acc, b_acc, 1, 0, "accepting");
    {
        const int32_t *table = (const int32_t *)b_table.buf;
        const int64_t *part = (const int64_t *)b_part.buf;
        const unsigned char *acc = (const unsigned char *)b_acc.buf;
        const int64_t n = (int64_t)b_acc.len, k = (int64_t)k_arg;
        int64_t *rep = NULL, i, c, n_blocks = 0;
        PyObject *out = NULL, *oacc = NULL;
        if (k <= 0 || k >= INT32_MAX || n <= 0 || n >= INT32_MAX || (int64_t)b_table.len != n * k * 4 ||
            (int64_t)b_part.len != n * 8) {
            PyErr_SetString(PyExc_ValueError, "_subset: quotient's array lengths disagree");
            goto done;
        }
        if (table_out_of_range(table, n * k, n)) {
            PyErr_SetString(PyExc_ValueError, "_subset: a transition is not a state");
            goto done;
        }
        for (i = 0; i < n; i++) {
            if (part[i] < 0 || part[i] >= n) {
                PyErr_SetString(PyExc_ValueError, "_subset: a block is not below n");
                goto done;
            }
            if (part[i] + 1 > n_blocks)
                n_blocks = part[i] + 1;
        }
        if (n_blocks == n) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        rep = (int64_t *)malloc(sizeof(int64_t) * (size_t)n_blocks);
        if (!rep) {
            PyErr_NoMemory();
            goto done;
        }
        for (i = 0; i < n_blocks; i++)
            rep[i] = -1;
        for (i = n - 1; i >= 0; i--)
            rep[part[i]] = i;
        for (i = 0; i < n_blocks; i++)
            if (rep[i] < 0) {
                PyErr_SetString(PyExc_ValueError, "_subset: a block has no state");
                goto free_rep;
            }
        out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n_blocks * k * 4));
        oacc = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)n_blocks);
        if (out && oacc) {
            int32_t *o = (int32_t *)PyByteArray_AS_STRING(out);
            char *a = PyByteArray_AS_STRING(oacc);
            for (i = 0; i < n_blocks; i++) {
                const int32_t *row = table + rep[i] * k;
                for (c = 0; c < k; c++)
                    o[i * k + c] = i == 0 ? 0 : (int32_t)part[row[c]];
                a[i] = (char)(i != 0 && acc[rep[i]] != 0);
            }
            result = Py_BuildValue("(OOL)", out, oacc, (long long)n_blocks);
        }
        Py_XDECREF(out);
        Py_XDECREF(oacc);
    free_rep:
        free(rep);
    }
done:
    RELEASE_HELD();
    return result;
}

static PyMethodDef methods[] = {
    {"determinize", subset_determinize, METH_VARARGS,
     "determinize(eps, edges, refs, start, accept, max_states, state_cost, units_left, "
     "threshold) -> ((status, units, n_built, table, accepting, m), class_of, ref_rules) "
     "(see the module's source)."},
    {"determinize_flat", subset_determinize_flat, METH_VARARGS,
     "determinize_flat(n, e_src, e_lo, e_hi, e_tgt, x_src, x_tgt, r_src, r_rule, r_tgt, start, "
     "accept, max_states, state_cost, units_left, threshold) -> as determinize() (see the "
     "module's source)."},
    {"hopcroft", subset_hopcroft, METH_VARARGS,
     "hopcroft(table, k, accepting, start, out) -> None (see the module's source)."},
    {"widen", subset_widen, METH_VARARGS,
     "widen(table, k, n_classes, class_of) -> (wide, refs) (see the module's source)."},
    {"sub_edges", subset_sub_edges, METH_VARARGS,
     "sub_edges(table, accepting) -> (edges, accepting_states) (see the module's source)."},
    {"rule_flags", subset_rule_flags, METH_VARARGS,
     "rule_flags(table, accepting, ref_table, ref_rules, counted) -> (boundary, tail, refs) "
     "(see the module's source)."},
    {"quotient", subset_quotient, METH_VARARGS,
     "quotient(table, k, part, accepting) -> None or (table, accepting, n_blocks) (see the "
     "module's source)."},
    {"rule_moves", subset_rule_moves, METH_VARARGS,
     "rule_moves(table, ref_table) -> (b_off, b_tgt, r_off, r_col, r_tgt) (see the module's "
     "source)."},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE(_subset,
              "formcast's compiled subset construction and minimization (the compiled build only).")
