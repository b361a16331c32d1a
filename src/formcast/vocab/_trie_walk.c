/* The vocabulary-trie walk of the compiled build: formcast.vocab._trie_walk.
 *
 * One function, walk(first, count, byte, end, table, start, out_idx, out_state) -> int: a
 * depth-first walk of a token trie (TokenTrie's nodes flattened level by level: node i's
 * children are nodes first[i] .. first[i] + count[i] - 1, reached on byte[child]; end[i] is
 * the string that ends at node i, or -1) through a DFA table (int32, 256 columns, state 0
 * dead) from state `start`.  The root's children are nodes 0 .. n_root - 1, passed as
 * `first`/`count` of a virtual root through the two trailing arguments.  Every string that
 * stays alive is written to out_idx with its end state in out_state, in the trie's order
 * (ascending string index: the strings are sorted); the count is returned.  A dead branch is
 * dropped at once, so the cost is O(live trie nodes) with no per-level overhead.
 *
 * Safety: every array is a C-contiguous buffer of the stated item size (checked), every node
 * and state index is checked against its array before it is read (a table from a corrupt
 * file raises ValueError, never reads out of bounds), and the outputs must hold one entry per
 * string.  No Python object is touched while walking (the GIL is released).
 *
 * walk_all(parent, byte, table, start, out) -> None: every node's state, in one pass over the
 * nodes in level order (parent[i] < i is node i's parent, -1 for the root's children; out[i] is
 * 0 where the walk died on the way): O(nodes) with no branching on liveness, for the permissive
 * walks that reach most of the trie.
 *
 * walk and walk_all take an optional trailing (cmap, width): the table is then *narrow*, one
 * column per byte class (int32[n, width]), and byte b reads column cmap[b] (uint8[256], each
 * class below width, checked).  A counted rule's window (formcast.index.cfg_program.
 * _CountedClassifier) is walked so: built on its item's ~3-25 byte classes, it is 10-80x
 * smaller than the 256-column table it stands for, and never materialized at full width.
 *
 * write_rows(ids, targets, split, rows, lex, cut, exit_byte, sink) -> None: the rows of the
 * lazy walk tables (formcast.index.cfg_program._LazyWalkTables.write) of n lexer states in one
 * pass: targets (int32[n, 256]) and split (bool[n, 256]) are the states' lexer rows and split
 * flags, rows (int64[n]) their ids, ids (int32) the id of each lexer state (every target has
 * one).  Id k's rows 3k, 3k + 1, 3k + 2 of lex (int32[*, 256]) become (split ? passed :
 * plain, passed, plain) with plain = 3 * ids[target] and passed = plain + 1, or sink where
 * the target is dead (0); cut, when it is not lex, gets the same rows with the exit byte's
 * column (0, sink, 0).  Every index is checked before use (ValueError).
 *
 * set_bits(words, first_token, strings, n_bits) -> None: words (int32 bitmask words, written
 * in place) |= the bit of first_token[s] (int64) for each string s of strings (int64), where
 * every string is one token id (TokenTrie.token_words); every index checked (ValueError).
 *
 * ahead_rows(table, skip, frontier, ahead, budget, out, scratch) -> count: the look-ahead of
 * formcast.index.cfg_program._LazyExitSplitClassifier._ensure: level by level (at most
 * `ahead` levels, at most `budget` states in all), the successors in table (int32[n, 256])
 * of the previous level (the first: frontier, int64) not flagged in skip (bool[n], set here
 * for each state met), each once, in the order of its last occurrence among the level's rows
 * read byte by byte (the order the pure build's numpy scatter gives), a level cut to what is
 * left of the budget; written to out (int64[budget]); scratch: int64[n].
 *
 * classify(handle, table, start, pending, sink, string_map, drop, words, max_reach) ->
 * (candidates, stopped), handle a trie_handle (below: the walked trie's arrays, the first
 * tokens of the vocabulary's strings, the memo): a classification of
 * formcast.index.cfg_program._LazyExitSplitClassifier in one call: the walk of
 * TokenTrie.walk_pairs (depth-first, or one pass over every node where the reach of
 * TokenTrie._reach is at least max_reach) from `start` through `table`, and for each live
 * string i (g = string_map[i] when string_map is not None, else i; the trie's arrays are
 * those of TokenTrie._flat_nodes, string_node and the reach tables the trie's): ending in
 * a state flagged in pending (bool, a sentinel's row): the state goes to `stopped` (each
 * once, in the order met; then nothing else is written: the caller builds those rows and
 * walks again); ending in `sink`: g is a candidate unless drop[g] (drop: bool or None);
 * otherwise the bit of first_token[g] is set in words (int32 bitmask words, written in
 * place).  Both outputs are int64 bytearrays, candidates in ascending string order (that of
 * walk_pairs' strings).  Every index checked (ValueError).  With a trailing `rows` tuple
 * (formcast.vocab.trie.WalkRows: the lexer's rows, split and built flags, the lazy walk
 * tables' ids, ready flags, states, both whole tables, pending flags, ids given, exit byte),
 * `table` and `pending` are those tables' and a sentinel the walk meets whose lexer row is
 * built gets its rows written on the spot (RowWriter: the rows write_rows writes), so the
 * walk goes on through it; only unbuilt lexer rows (or no room for a new id) stop it.  It
 * returns (candidates, stopped, lexer states written, ids given).
 *
 * classify_from(<classify's 9 arguments>, rows, resume) -> (candidates, stops, written, count):
 * classify with rows, resumable (formcast.vocab.trie.classify_walk_resume): a sentinel it
 * cannot write (unbuilt lexer row, or no room) is a stop: (node, row) is kept and the node's
 * string and subtree are left (a sentinel row leads every byte back to itself, so all of it
 * would end there); stops are returned as int64 pairs.  resume: None (a walk from start), or
 * the stops of the walk before, once the caller has written their rows (rows never move):
 * from each, the node's string, then its subtree depth-first.  The words and candidates of a
 * walk and its resumes together are those of one walk on the finished tables (the caller
 * sorts the candidates); no string is walked twice.  A fresh walk whose first bytes meet a
 * sentinel it cannot write walks nothing: its stops are (-1, row) pairs (walk again from
 * start once built).
 *
 * trie_handle(first, count, byte, end, parent, string_node, below_first, below_second,
 * first_token[, memo]) -> capsule: those arguments' buffers taken once and held, the first
 * argument of classify and classify_from (the forms that took the 8 trie arrays, the first
 * tokens and the memo on every call are gone: walk38, session 24).
 *
 * walk and classify's depth-first walk is one static inline walker (dfs_walk) with their
 * callbacks.
 *
 * With a memo in the handle (trie_handle's trailing argument), the subtree
 * memo of the walked trie (formcast.vocab.trie.TokenTrie._subtree_memo, built by
 * subtree_memo below: the nodes in preorder, each larger subtree's byte set), a walk whose
 * reach is at least the memo's least reach and below max_reach runs on the memo's preorder
 * nodes (memo_walk): where it arrives at a node in a state that leads every byte below the
 * node back to itself, every string below ends there, and it takes those strings as one
 * range (their words set in one loop) without walking them.  The words, candidates and
 * stopped states are the walk's without the memo; stops are then (preorder node, row)
 * pairs, and their resumes must pass the same memo (the rows written may come in another
 * order: rows are functions of the lexer's).
 *
 * The memo may carry a text memo (text_memo below; TokenTrie._subtree_memo's text_* fields):
 * a walk then takes a string body's text below a character boundary as string ranges where
 * its state loops on the text bytes and the well-formed UTF-8 characters there, walking only
 * the breaks (see TEXT_BOUNDARY), and a fresh walk from such a start takes the whole trie so;
 * with the memo's all_words (the bits of every string, for a walk of the trie's own strings)
 * the ranges' words are set at the end as those bits less the strings outside the ranges.
 *
 * The pure-Python package does the same walks with numpy (TokenTrie.walk_pairs and walk);
 * tests/vocab/test_native_trie_walk.py compares them.
 */
#define KERNEL_NAME "_trie_walk"
#include "../automata/_kernel_args.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* the trie and table of a depth-first walk (dfs_walk) */
typedef struct {
    const int32_t *first, *count, *end;
    const uint8_t *byte;
    int64_t n_nodes;
    const int32_t *table;
    int64_t n_states;
    const uint8_t *pending; /* per state: arrive is called only where set (NULL: never) */
} DfsArgs;

/* The subtree memo of classify's walks (TokenTrie._subtree_memo): the trie's nodes again in
 * preorder (a depth-first walk reads them in address order, skipping a subtree by its size),
 * per preorder node its byte, depth (the root's children: 1), subtree size (itself
 * included), whether a string ends there, and the strings before it in preorder (str[i]: the
 * string ending at node i, when one does, is string str[i]: preorder is the strings' sorted
 * order; str has a last entry, the number of strings), pos (per level-order node, its
 * preorder number), and for the nodes with enough below them sel[i] = k >= 0, sets[k] (4
 * words: the 256-bit set of the bytes of the nodes below it); -1 elsewhere; the deepest
 * node's depth, and the least reach (TokenTrie._reach) of a fresh walk that runs on it (a
 * narrow walk pays more for the sets of its states than it skips).
 * Where a walk arrives at such a node in a state s (not pending: its row is final for the
 * walk) whose row leads every byte of the set back to s, every node below ends in s: the
 * walk skips the subtree and hands its strings over as one range (on_range), in the trie's
 * order, the same strings and states as walking it.  The per-state sets of self-looping
 * bytes are computed on first use in a walk (256 reads) into a small direct-mapped cache. */
#define MEMO_SLOTS 512
typedef struct SubtreeMemo {
    const int32_t *pos, *size, *str, *sel;
    const uint8_t *byte, *own;
    const uint16_t *depth;
    const uint64_t *sets;
    int64_t n_nodes, n_sel, n_strings;
    int32_t *st; /* per depth, the state of the walk's node there (max depth + 1 entries) */
    int64_t max_depth;
    int64_t min_reach; /* a fresh walk reaching fewer nodes runs dfs_walk (its stops renumbered) */
    int32_t key[MEMO_SLOTS];     /* the state of each slot's loop set (-1: none) */
    uint64_t loop[MEMO_SLOTS][4]; /* the bytes a state's row leads back to it */
    /* the text memo (NULL tflag: none; see text_memo below): per preorder node its flags
     * (TEXT_BOUNDARY), per node the index in tbrk of the first break at or after it (n + 1
     * entries), the breaks in preorder, their partial characters (TEXT_PRE), the text bytes */
    const uint8_t *tflag;
    const int32_t *tnext, *tbrk;
    const uint32_t *tpre;
    int64_t n_brk;
    uint64_t kset[4];
    uint8_t textish[MEMO_SLOTS];   /* its loop set holds TEXT_MIN_LOOP text bytes at least */
    int32_t key2[MEMO_SLOTS];      /* the state of each slot's lead set (-1: none) */
    int64_t ver2[MEMO_SLOTS];      /* *version when it was computed */
    const int64_t *version; /* rows written so far in the walk (NULL: none are): a lead set
                             * missing a byte is computed again once rows were written */
    uint64_t leads[MEMO_SLOTS][4]; /* the lead bytes whose characters lead a state back */
    struct TextFrame *fr;          /* memo_walk's region stack (2 * max_depth + 4 frames) */
    int64_t fr_cap;
} SubtreeMemo;

/* The text memo (text_memo below builds it, per trie, with the subtree memo): the walks of
 * a text-like state (a string body: it leads every "text" byte, printable ASCII but the
 * quote and the backslash, and every well-formed UTF-8 character back to itself) reach most
 * of the trie, but few subtrees hold only bytes that loop (UTF-8 characters pass through
 * other states, and quotes, backslashes, control bytes leave).  So each preorder node gets
 * the state of a UTF-8 decoder run along its string (resynchronized after an ill-formed
 * byte): TEXT_BOUNDARY where a character ends there (an ASCII byte or a character's last
 * byte), and a node is a *break* where its byte is neither a text byte at a boundary, a
 * lead byte at a boundary, nor an allowed continuation inside a character (the
 * well-formed ranges: E0 A0-BF, ED 80-9F, F0 90-BF, F4 80-8F), or where a string ends
 * there inside a character.  A walk arriving at a boundary node w in a state s whose row
 * leads each text byte below w back to s, and each well-formed character whose lead byte
 * lies below w back to s through live states (text_uniform), knows that every node below
 * w not under a break ends its character in s, and every string there ends in s: it takes
 * those strings as ranges, and walks only the breaks below w that lie under no other
 * (their parent's state: s walked over the break's partial character, TEXT_PRE), each as a
 * subtree of its own.  The same words, candidates and stops as walking every node. */
#define TEXT_BOUNDARY 1
#define TEXT_SOFT 0x80000000u /* in a break's TEXT_PRE: a well-formed byte whose string ends
                               * inside a character (only that string is walked) */
typedef struct TextFrame {
    int64_t end;   /* the frame's subtree ends before this preorder node */
    int64_t depth; /* a region's root's depth (0: the trie's root) */
    int32_t s;     /* a region's state */
    int32_t s0;    /* its root's state (the parent state of the breaks just below it) */
    int32_t kind;  /* 1: a region (its gaps taken as ranges), 0: a break's subtree */
} TextFrame;

/* per lead byte: the allowed range of the next byte and the continuation bytes in all */
static inline int
utf8_lead(int b, int *lo, int *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF)
        return 1;
    if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0)
            *lo = 0xA0;
        else if (b == 0xED)
            *hi = 0x9F;
        return 2;
    }
    if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0)
            *lo = 0x90;
        else if (b == 0xF4)
            *hi = 0x8F;
        return 3;
    }
    return 0;
}

/* text_leads' memo of the states inside a character: (state, bytes left) -> ok */
typedef struct {
    int32_t st[32];
    int8_t k[32], ok[32];
    int n;
} ChainMemo;

/* whether every byte c in lo .. hi leads t on to a state that, after k - 1 more
 * continuation bytes (any in 80-BF), is s, through live states; a state met with too many
 * others (the memo full) counts as not (a conservative answer) */
static int
text_chain(const int32_t *table, int64_t n_states, int32_t t, int lo, int hi, int k, int32_t s,
           ChainMemo *cm)
{
    int c;
    for (c = lo; c <= hi; c++) {
        const int32_t u = table[(int64_t)t * 256 + c];
        if (k == 1) {
            if (u != s)
                return 0;
        } else {
            int j, ok = -1;
            if (u <= 0 || u >= n_states)
                return 0;
            for (j = 0; j < cm->n; j++)
                if (cm->st[j] == u && cm->k[j] == k - 1) {
                    ok = cm->ok[j];
                    break;
                }
            if (ok < 0) {
                if (cm->n >= 32)
                    return 0;
                ok = text_chain(table, n_states, u, 0x80, 0xBF, k - 1, s, cm);
                cm->st[cm->n] = u;
                cm->k[cm->n] = (int8_t)(k - 1);
                cm->ok[cm->n] = (int8_t)ok;
                cm->n++;
            }
            if (!ok)
                return 0;
        }
    }
    return 1;
}

/* the lead bytes L of state s (a row of table) whose every well-formed character L ...
 * leads s back to s through live states */
static void
text_leads(const int32_t *table, int64_t n_states, int32_t s, uint64_t out[4])
{
    ChainMemo cm;
    int b;
    cm.n = 0;
    out[0] = out[1] = out[2] = out[3] = 0;
    for (b = 0xC2; b <= 0xF4; b++) {
        int lo, hi;
        const int k = utf8_lead(b, &lo, &hi);
        const int32_t t = table[(int64_t)s * 256 + b];
        if (t <= 0 || t >= n_states)
            continue;
        if (text_chain(table, n_states, t, lo, hi, k, s, &cm))
            out[b >> 6] |= (uint64_t)1 << (b & 63);
    }
}

/* the text bytes a state's row must lead back to it for memo_walk to try text regions in
 * it (a gate, not a condition: text_uniform decides; an identifier's or a number's state,
 * looping on 63 or fewer of the 94, whose subtrees the plain memo takes, tries none) */
#define TEXT_MIN_LOOP 72

static inline int
popcount64(uint64_t x)
{
    return __builtin_popcountll(x);
}

/* the loop set of state s into its slot (the bytes its row leads back to s) */
static inline void
memo_loop(SubtreeMemo *m, const int32_t *table, int32_t s, int slot)
{
    const int32_t *row = table + (int64_t)s * 256;
    uint64_t *loop = m->loop[slot];
    int b;
    loop[0] = loop[1] = loop[2] = loop[3] = 0;
    for (b = 0; b < 256; b++)
        loop[b >> 6] |= (uint64_t)(row[b] == s) << (b & 63);
    m->key[slot] = s;
    m->textish[slot] = popcount64(loop[0] & m->kset[0]) + popcount64(loop[1] & m->kset[1]) +
                           popcount64(loop[2] & m->kset[2]) + popcount64(loop[3] & m->kset[3]) >=
                       TEXT_MIN_LOOP;
}

/* whether state s (a row of table) leads every byte of subtree set k back to itself */
static inline int
memo_uniform(SubtreeMemo *m, const int32_t *table, int32_t s, int64_t k)
{
    const int slot = (int)((uint32_t)s % MEMO_SLOTS);
    const uint64_t *set = m->sets + 4 * k;
    uint64_t *loop = m->loop[slot];
    if (m->key[slot] != s)
        memo_loop(m, table, s, slot);
    return ((set[0] & ~loop[0]) | (set[1] & ~loop[1]) | (set[2] & ~loop[2]) |
            (set[3] & ~loop[3])) == 0;
}

static inline int text_uniform(SubtreeMemo *m, const int32_t *table, int64_t n_states,
                               int32_t s, const uint64_t *set);

/* The text region of a whole fresh walk (memo_walk from the trie's root in state s0): the
 * state s1 every text byte leads s0 to, where s1 is not a sentinel, its row leads each text
 * byte of the trie back to itself and each lead byte of the trie as s0's row does, and its
 * characters back to s1 (text_uniform); 0 where there is none, -3 where the memo's root
 * children disagree with it.  The row is read first (one row: a start whose text bytes part
 * ways costs no more), then the trie's bytes (its children's, and their sets). */
static int32_t
text_entry(SubtreeMemo *m, const int32_t *table, int64_t n_states, const uint8_t *pending,
           int32_t s0)
{
    const int32_t *row = table + (int64_t)s0 * 256;
    uint64_t set[4] = {0, 0, 0, 0};
    int32_t s1 = 0;
    int64_t c = 0;
    int b;
    if (m->tflag == NULL)
        return 0;
    for (b = 0; b < 256; b++) {
        if (!(m->kset[b >> 6] >> (b & 63) & 1))
            continue;
        if (s1 == 0)
            s1 = row[b];
        if (row[b] != s1 || s1 <= 0)
            return 0;
    }
    if (s1 <= 0 || s1 >= n_states || (pending != NULL && pending[s1]))
        return 0;
    while (c < m->n_nodes) { /* the root's set: its children's bytes and sets */
        const int64_t k = m->sel[c], z = m->size[c];
        if (z < 1 || z > m->n_nodes - c || k >= m->n_sel || m->depth[c] != 1)
            return -3;
        set[m->byte[c] >> 6] |= (uint64_t)1 << (m->byte[c] & 63);
        if (k >= 0) {
            set[0] |= m->sets[4 * k];
            set[1] |= m->sets[4 * k + 1];
            set[2] |= m->sets[4 * k + 2];
            set[3] |= m->sets[4 * k + 3];
        } else if (z > 1)
            set[0] = set[1] = set[2] = set[3] = ~(uint64_t)0; /* (every byte: safe) */
        c += z;
    }
    for (b = 0xC2; b <= 0xF4; b++)
        if ((set[3] >> (b & 63) & 1) && row[b] != table[(int64_t)s1 * 256 + b])
            return 0;
    return text_uniform(m, table, n_states, s1, set) ? s1 : 0;
}

/* whether a walk arriving at a boundary node in state s may take the node's subtree as a
 * text region (the text memo above): s leads every text byte of subtree set k back to
 * itself, and each well-formed character whose lead byte is in the set back to s (lead
 * sets cached per state as the loop sets; a row never changes once the walk reads it: a
 * sentinel's row leads every byte to itself) */
static inline int
text_uniform(SubtreeMemo *m, const int32_t *table, int64_t n_states, int32_t s,
             const uint64_t *set)
{
    const int slot = (int)((uint32_t)s % MEMO_SLOTS);
    const uint64_t *loop = m->loop[slot];
    uint64_t *leads = m->leads[slot];
    int j;
    if (m->key[slot] != s) /* (after memo_uniform for s, its loop set is in the slot) */
        memo_loop(m, table, s, slot);
    for (j = 0; j < 4; j++)
        if (set[j] & m->kset[j] & ~loop[j])
            return 0;
    if ((set[2] | set[3]) == 0)
        return 1; /* no byte past 0x7F below */
    /* (lead bytes C2-F4 are in word 3, C0-FF, only) */
    if (m->key2[slot] == s && ((set[3] & ~leads[3] & 0x001FFFFFFFFFFFFCull) == 0 ||
                               m->version == NULL || m->ver2[slot] == *m->version))
        return (set[3] & ~leads[3] & 0x001FFFFFFFFFFFFCull) == 0;
    /* (computed, or again: a character's state that was a sentinel may have its row now) */
    text_leads(table, n_states, s, leads);
    m->key2[slot] = s;
    m->ver2[slot] = m->version != NULL ? *m->version : 0;
    return (set[3] & ~leads[3] & 0x001FFFFFFFFFFFFCull) == 0;
}

/* dfs_walk on the memo's preorder nodes lo .. hi - 1 (whole subtrees, the shallowest ones'
 * parent in state s0), with the memo's skips: arrive and on_string as dfs_walk's (node
 * numbers preorder ones), on_range(ctx, lo, hi, s) for the strings lo .. hi - 1 of a skipped
 * subtree.  The same codes as dfs_walk; every index checked (a corrupt memo reads nothing
 * out of bounds: states come from the zeroed per-depth stack or the table).  Static inline,
 * as dfs_walk: each caller's callbacks known. */
static inline __attribute__((always_inline)) int
memo_walk_as(const DfsArgs *a, SubtreeMemo *m, int64_t lo, int64_t hi, int32_t s0,
             int32_t entry, const int text, int (*arrive)(void *, int32_t, int64_t),
             int (*on_string)(void *, int64_t, int32_t),
             int (*on_range)(void *, int64_t, int64_t, int32_t), void *ctx)
{
    const int32_t *table = a->table;
    int32_t *st = m->st;
    TextFrame *fr = m->fr;
    int64_t i = lo, d0, nf = 0;
    if (lo >= hi)
        return 0;
    if (lo < 0 || hi > m->n_nodes)
        return 3;
    d0 = m->depth[lo];
    if (d0 < 1 || d0 > m->max_depth)
        return 3;
    st[d0 - 1] = s0;
    if (text && entry > 0) { /* (a fresh walk whose start text_entry found a text region) */
        fr[0].end = hi;
        fr[0].depth = d0 - 1;
        fr[0].s = entry;
        fr[0].s0 = s0;
        fr[0].kind = 1;
        nf = 1;
    }
    while (i < hi) {
        int64_t d, size;
        int32_t s;
        while (text && nf > 0 && i >= fr[nf - 1].end)
            nf--;
        if (text && nf > 0 && fr[nf - 1].kind) {
            /* a text region's gap (text_uniform): its strings, up to the next break or the
             * region's end, end in the region's state; the break's subtree is walked from
             * its parent's state (the region's, over the break's partial character) */
            const TextFrame *f = &fr[nf - 1];
            const int64_t j = m->tnext[i];
            int64_t u = f->end, du;
            int32_t p = f->s;
            uint32_t pre;
            int c, np;
            if (j < 0 || j > m->n_brk)
                return 3;
            if (j < m->n_brk && m->tbrk[j] < f->end)
                u = m->tbrk[j];
            if (u < i)
                return 3;
            if (m->str[u] > m->str[i]) {
                const int r = on_range(ctx, m->str[i], m->str[u], f->s);
                if (r != 0)
                    return r;
            }
            if (u == f->end) {
                i = u;
                nf--;
                continue;
            }
            pre = m->tpre[j];
            np = (int)((pre >> 24) & 0x7F);
            du = m->depth[u];
            if (np > 3 || du <= f->depth || du - 1 - np < f->depth || du > m->max_depth ||
                m->size[u] < 1 || m->size[u] > hi - u || nf >= m->fr_cap)
                return 3;
            if (du - 1 - np == f->depth)
                p = f->s0; /* (the character starts just below the region's root) */
            for (c = 0; c < np && p != 0; c++) {
                p = table[(int64_t)p * 256 + ((pre >> (8 * c)) & 0xFF)];
                if (p < 0 || p >= a->n_states)
                    return 1;
            }
            if (p != 0 && (pre & TEXT_SOFT)) {
                /* a string ending inside a character: that string; its subtree stays in
                 * the region (its characters' states are live, no sentinels: text_uniform) */
                p = table[(int64_t)p * 256 + m->byte[u]];
                if (p < 0 || p >= a->n_states)
                    return 1;
                if (p != 0) {
                    if (m->own[u]) {
                        const int r = on_string(ctx, m->str[u], p);
                        if (r != 0)
                            return r;
                    }
                    i = u + 1;
                    continue;
                }
            }
            if (p == 0) { /* (not with the rows text_uniform checked: exact all the same) */
                i = u + m->size[u];
                continue;
            }
            st[du - 1] = p;
            fr[nf].end = u + m->size[u];
            fr[nf].depth = du;
            fr[nf].s = fr[nf].s0 = 0;
            fr[nf].kind = 0;
            nf++;
            i = u;
        }
        d = m->depth[i];
        size = m->size[i];
        if (d < d0 || d > m->max_depth || size < 1 || size > hi - i)
            return 3;
        s = table[(int64_t)st[d - 1] * 256 + m->byte[i]];
        if (s == 0) {
            i += size;
            continue;
        }
        if (s < 0 || s >= a->n_states)
            return 1;
        if (arrive != NULL && a->pending != NULL && a->pending[s]) {
            const int r = arrive(ctx, s, i);
            if (r < 0) { /* a stop: the string and the subtree are left to a resume */
                i += size;
                continue;
            }
            if (r != 0)
                return r;
        }
        if (m->own[i]) {
            const int r = on_string(ctx, m->str[i], s);
            if (r != 0)
                return r;
        }
        if (size > 1) {
            const int64_t k = m->sel[i];
            if (k >= m->n_sel)
                return 3;
            if (k >= 0 && memo_uniform(m, table, s, k)) {
                const int r = on_range(ctx, m->str[i] + (m->own[i] != 0), m->str[i + size], s);
                if (r != 0)
                    return r;
                i += size;
                continue;
            }
            if (text && k >= 0 && m->tflag != NULL && m->textish[(uint32_t)s % MEMO_SLOTS] &&
                (m->tflag[i] & TEXT_BOUNDARY) &&
                text_uniform(m, table, a->n_states, s, m->sets + 4 * k)) {
                if (nf >= m->fr_cap)
                    return 3;
                fr[nf].end = i + size;
                fr[nf].depth = d;
                fr[nf].s = fr[nf].s0 = s;
                fr[nf].kind = 1;
                nf++;
                i++;
                continue;
            }
            st[d] = s;
        }
        i++;
    }
    return 0;
}

/* memo_walk_as with text regions where the walk may meet one: a text memo and a start
 * whose row loops on most text bytes (textish) or a text_entry region; else without them
 * (their checks cost an identifier's or a number's walk ~10%).  Static inline, as dfs_walk. */
static inline int
memo_walk(const DfsArgs *a, SubtreeMemo *m, int64_t lo, int64_t hi, int32_t s0, int32_t entry,
          int (*arrive)(void *, int32_t, int64_t), int (*on_string)(void *, int64_t, int32_t),
          int (*on_range)(void *, int64_t, int64_t, int32_t), void *ctx)
{
    if (m->tflag != NULL && s0 > 0 && s0 < a->n_states) {
        const int slot = (int)((uint32_t)s0 % MEMO_SLOTS);
        if (m->key[slot] != s0)
            memo_loop(m, a->table, s0, slot);
        if (entry > 0 || m->textish[slot])
            return memo_walk_as(a, m, lo, hi, s0, entry, 1, arrive, on_string, on_range, ctx);
    }
    return memo_walk_as(a, m, lo, hi, s0, 0, 0, arrive, on_string, on_range, ctx);
}

/* The depth-first walk of walk and classify: from `start`, the children root_first ..
 * root_first + root_count - 1 of a virtual root, then each live node's children; a dead
 * branch is dropped at once.  On arriving at a live state s flagged in a->pending,
 * arrive(ctx, s, node) (when neither is NULL) may write the row of s first (classify's rows
 * written in the walk: the test is inline, the call only on a sentinel), or return -1: the
 * node's string and subtree are skipped (a resumable classify's stop); for each node
 * ending a string, on_string(ctx, string, s), in the trie's order.  Returns 0, a callback's nonzero
 * code, or 1 (a state out of range), 3 (a child range out of bounds), 5 (out of memory).
 * Static inline: each caller gets its own copy, its callbacks known (no GIL needed).
 * dfs_walk_as reads column cmap[byte] of rows `width` wide (a table with one column per byte
 * class: walk's narrow tables); dfs_walk (cmap NULL, width 256: folded where it inlines)
 * reads column byte of 256-wide rows. */
static inline __attribute__((always_inline)) int
dfs_walk_as(const DfsArgs *a, int64_t root_first, int64_t root_count, int32_t start,
            int (*arrive)(void *, int32_t, int64_t), int (*on_string)(void *, int64_t, int32_t),
            void *ctx, const uint8_t *cmap, int64_t width)
{
    /* explicit stack: per depth, the next child to try, the end of the range, the state */
    int64_t cap = 64, depth = 0;
    int64_t *lo = (int64_t *)malloc(sizeof(int64_t) * cap);
    int64_t *hi = (int64_t *)malloc(sizeof(int64_t) * cap);
    int32_t *st = (int32_t *)malloc(sizeof(int32_t) * cap);
    const int32_t *table = a->table;
    int bad = 0;
    if (lo == NULL || hi == NULL || st == NULL)
        bad = 5;
    else {
        lo[0] = root_first;
        hi[0] = root_first + root_count;
        st[0] = start;
    }
    while (!bad && depth >= 0) {
        int64_t c;
        int32_t s;
        if (lo[depth] >= hi[depth]) {
            depth--;
            continue;
        }
        c = lo[depth]++;
        s = table[(int64_t)st[depth] * width + (cmap != NULL ? cmap[a->byte[c]] : a->byte[c])];
        if (s == 0)
            continue;
        if (s < 0 || s >= a->n_states) {
            bad = 1;
            break;
        }
        if (arrive != NULL && a->pending != NULL && a->pending[s]) {
            const int r = arrive(ctx, s, c);
            if (r < 0)
                continue; /* a stop: the string and the subtree are left to a resume */
            if ((bad = r) != 0)
                break;
        }
        if (a->end[c] >= 0 && (bad = on_string(ctx, a->end[c], s)) != 0)
            break;
        if (a->count[c] > 0) {
            int64_t f = a->first[c], k = a->count[c];
            if (f < 0 || f + k > a->n_nodes) {
                bad = 3;
                break;
            }
            if (depth + 1 >= cap) {
                int64_t ncap = cap * 2;
                int64_t *nlo = (int64_t *)realloc(lo, sizeof(int64_t) * ncap);
                int64_t *nhi = nlo ? (int64_t *)realloc(hi, sizeof(int64_t) * ncap) : NULL;
                int32_t *nst = nhi ? (int32_t *)realloc(st, sizeof(int32_t) * ncap) : NULL;
                if (nlo) lo = nlo;
                if (nhi) hi = nhi;
                if (nst) st = nst;
                if (!nst) {
                    bad = 5;
                    break;
                }
                cap = ncap;
            }
            depth++;
            lo[depth] = f;
            hi[depth] = f + k;
            st[depth] = s;
        }
    }
    free(lo);
    free(hi);
    free(st);
    return bad;
}

static inline int
dfs_walk(const DfsArgs *a, int64_t root_first, int64_t root_count, int32_t start,
         int (*arrive)(void *, int32_t, int64_t), int (*on_string)(void *, int64_t, int32_t),
         void *ctx)
{
    return dfs_walk_as(a, root_first, root_count, start, arrive, on_string, ctx, NULL, 256);
}

/* The optional trailing (cmap, width) of walk and walk_all: a narrow table's byte classes
 * (uint8[256], each below width) and its row width (1 .. 256).  Sets *cmap (NULL: none
 * given, width 256) and returns 0, or raises ValueError and returns -1. */
static int
narrow_columns(const Py_buffer *b_cmap, long long width, const uint8_t **cmap, int64_t *w)
{
    int i;
    *cmap = NULL;
    *w = 256;
    if (b_cmap == NULL)
        return 0;
    if (b_cmap->len != 256 || width < 1 || width > 256) {
        PyErr_SetString(PyExc_ValueError, "_trie_walk: cmap must be 256 classes below width");
        return -1;
    }
    for (i = 0; i < 256; i++)
        if (((const uint8_t *)b_cmap->buf)[i] >= width) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: a byte's class is past the width");
            return -1;
        }
    *cmap = (const uint8_t *)b_cmap->buf;
    *w = (int64_t)width;
    return 0;
}

/* walk's output: the live strings and their end states */
typedef struct {
    int32_t *idx, *state;
    int64_t found, n_out;
} WalkOut;

static int
walk_out(void *ctx, int64_t string, int32_t s)
{
    WalkOut *o = (WalkOut *)ctx;
    if (o->found >= o->n_out)
        return 2;
    o->idx[o->found] = (int32_t)string;
    o->state[o->found] = s;
    o->found++;
    return 0;
}

static PyObject *
trie_walk(PyObject *self, PyObject *args)
{
    PyObject *o_first, *o_count, *o_byte, *o_end, *o_table, *o_idx, *o_state;
    PyObject *o_cmap = Py_None;
    long long start, root_first, root_count, width = 256;
    Py_buffer b_first, b_count, b_byte, b_end, b_table, b_idx, b_state, b_cmap;
    HELD_BUFFERS(8);
    PyObject *result = NULL;
    const uint8_t *cmap = NULL;
    int64_t w = 256;

    if (!PyArg_ParseTuple(args, "OOOOOLOOLL|OL", &o_first, &o_count, &o_byte, &o_end, &o_table,
                          &start, &o_idx, &o_state, &root_first, &root_count, &o_cmap, &width))
        return NULL;
    GET(o_first, b_first, 4, 0, "first (int32)");
    GET(o_count, b_count, 4, 0, "count (int32)");
    GET(o_byte, b_byte, 1, 0, "byte (uint8)");
    GET(o_end, b_end, 4, 0, "end (int32)");
    GET(o_table, b_table, 4, 0, "table (int32)");
    GET(o_idx, b_idx, 4, 1, "out_idx (int32)");
    GET(o_state, b_state, 4, 1, "out_state (int32)");
    if (o_cmap != Py_None)
        GET(o_cmap, b_cmap, 1, 0, "cmap (uint8)");
    if (narrow_columns(o_cmap != Py_None ? &b_cmap : NULL, width, &cmap, &w) < 0)
        goto done;
    {
        DfsArgs a;
        WalkOut o;
        const int64_t n_nodes = b_first.len / 4;
        const int64_t n_states = b_table.len / (4 * w);
        int bad = 0;
        if (b_count.len / 4 != n_nodes || b_byte.len != n_nodes || b_end.len / 4 != n_nodes ||
            b_state.len != b_idx.len || b_table.len % (4 * w) != 0) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: array lengths disagree");
            goto done;
        }
        if (start <= 0 || start >= n_states || root_first < 0 || root_count < 0 ||
            root_first + root_count > n_nodes) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: start state or root out of range");
            goto done;
        }
        a.first = (const int32_t *)b_first.buf;
        a.count = (const int32_t *)b_count.buf;
        a.byte = (const uint8_t *)b_byte.buf;
        a.end = (const int32_t *)b_end.buf;
        a.n_nodes = n_nodes;
        a.table = (const int32_t *)b_table.buf;
        a.n_states = n_states;
        a.pending = NULL;
        o.idx = (int32_t *)b_idx.buf;
        o.state = (int32_t *)b_state.buf;
        o.found = 0;
        o.n_out = b_idx.len / 4;
        Py_BEGIN_ALLOW_THREADS
        if (cmap != NULL)
            bad = dfs_walk_as(&a, root_first, root_count, (int32_t)start, NULL, walk_out, &o,
                              cmap, w);
        else
            bad = dfs_walk(&a, root_first, root_count, (int32_t)start, NULL, walk_out, &o);
        Py_END_ALLOW_THREADS
        if (bad == 1)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: the table leads to a state it lacks");
        else if (bad == 2)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: more strings than output slots");
        else if (bad == 3)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: a child range is out of bounds");
        else if (bad == 5)
            PyErr_NoMemory();
        else
            result = PyLong_FromLongLong((long long)o.found);
    }
done:
    RELEASE_HELD();
    return result;
}

/* walk_all's pass: out[i] = the state of node i (0: died on the way), reading column
 * cmap[byte] of rows `width` wide (cmap NULL: column byte, width 256; folded, the function
 * inlined at each call).  0, 1 (a state out of range) or 3 (a parent not first).  No GIL. */
static inline __attribute__((always_inline)) int
walk_all_as(const int32_t *parent, const uint8_t *byte, const int32_t *table, int64_t n_nodes,
            int64_t n_states, int32_t start, int32_t *out, const uint8_t *cmap, int64_t width)
{
    int64_t i;
    for (i = 0; i < n_nodes; i++) {
        int32_t p = parent[i], s;
        if (p >= i)
            return 3;
        s = p < 0 ? start : out[p];
        if (s == 0) {
            out[i] = 0;
            continue;
        }
        s = table[(int64_t)s * width + (cmap != NULL ? cmap[byte[i]] : byte[i])];
        if (s < 0 || s >= n_states)
            return 1;
        out[i] = s;
    }
    return 0;
}

static PyObject *
trie_walk_all(PyObject *self, PyObject *args)
{
    PyObject *o_parent, *o_byte, *o_table, *o_out, *o_cmap = Py_None;
    long long start, width = 256;
    Py_buffer b_parent, b_byte, b_table, b_out, b_cmap;
    HELD_BUFFERS(5);
    int bad = 0;
    PyObject *result = NULL;
    const uint8_t *cmap = NULL;
    int64_t w = 256;

    if (!PyArg_ParseTuple(args, "OOOLO|OL", &o_parent, &o_byte, &o_table, &start, &o_out,
                          &o_cmap, &width))
        return NULL;
    GET(o_parent, b_parent, 4, 0, "parent (int32)");
    GET(o_byte, b_byte, 1, 0, "byte (uint8)");
    GET(o_table, b_table, 4, 0, "table (int32)");
    GET(o_out, b_out, 4, 1, "out (int32)");
    if (o_cmap != Py_None)
        GET(o_cmap, b_cmap, 1, 0, "cmap (uint8)");
    if (narrow_columns(o_cmap != Py_None ? &b_cmap : NULL, width, &cmap, &w) < 0)
        goto done;
    {
        const int32_t *parent = (const int32_t *)b_parent.buf;
        const uint8_t *byte = (const uint8_t *)b_byte.buf;
        const int32_t *table = (const int32_t *)b_table.buf;
        int32_t *out = (int32_t *)b_out.buf;
        const int64_t n_nodes = b_parent.len / 4;
        const int64_t n_states = b_table.len / (4 * w);
        if (b_byte.len != n_nodes || b_out.len / 4 != n_nodes || b_table.len % (4 * w) != 0) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: array lengths disagree");
            goto done;
        }
        if (start <= 0 || start >= n_states) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: start state out of range");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        if (cmap == NULL)
            bad = walk_all_as(parent, byte, table, n_nodes, n_states, (int32_t)start, out, NULL,
                              256);
        else
            bad = walk_all_as(parent, byte, table, n_nodes, n_states, (int32_t)start, out, cmap,
                              w);
        Py_END_ALLOW_THREADS
        if (bad == 1)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: the table leads to a state it lacks");
        else if (bad == 3)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: a parent does not come first");
        else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
done:
    RELEASE_HELD();
    return result;
}

/* The three walk-table rows of id k (write_rows' layout) from its lexer state's row t and
 * split flags sp, into lex and, unless NULL, cut (the exit byte's column (0, sink, 0)); k is
 * in range (3k + 2 < n_lex, checked by the caller).  0, or 2 where a target has no id or an
 * id out of range (rows partly written: the caller raises).  No GIL needed. */
static inline int
write_id_rows(int32_t *lex, int32_t *cut, long long exit_byte, int64_t k, const int32_t *t,
              const uint8_t *sp, const int32_t *ids, int64_t n_ids, int64_t n_lex, int32_t sink)
{
    int32_t *first = lex + 3 * k * 256, *passed = first + 256, *plain = passed + 256;
    int b;
    for (b = 0; b < 256; b++) {
        int32_t q = t[b], h, pl, pa;
        if (q < 0 || q >= n_ids || (h = ids[q]) < 0 || 3 * (int64_t)h + 2 >= n_lex)
            return 2;
        pl = 3 * h;
        pa = q == 0 ? sink : pl + 1;
        plain[b] = pl;
        passed[b] = pa;
        first[b] = sp[b] ? pa : pl;
    }
    if (cut != NULL) {
        int32_t *c = cut + 3 * k * 256;
        memcpy(c, first, 3 * 256 * sizeof(int32_t));
        c[exit_byte] = 0;
        c[256 + exit_byte] = sink;
        c[512 + exit_byte] = 0;
    }
    return 0;
}

static PyObject *
trie_write_rows(PyObject *self, PyObject *args)
{
    PyObject *o_ids, *o_targets, *o_split, *o_rows, *o_lex, *o_cut;
    long long exit_byte, sink;
    Py_buffer b_ids, b_targets, b_split, b_rows, b_lex, b_cut;
    HELD_BUFFERS(6);
    int bad = 0;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "OOOOOOLL", &o_ids, &o_targets, &o_split, &o_rows, &o_lex,
                          &o_cut, &exit_byte, &sink))
        return NULL;
    GET(o_ids, b_ids, 4, 0, "ids (int32)");
    GET(o_targets, b_targets, 4, 0, "targets (int32)");
    GET(o_split, b_split, 1, 0, "split (bool)");
    GET(o_rows, b_rows, 8, 0, "rows (int64)");
    GET(o_lex, b_lex, 4, 1, "lex (int32)");
    GET(o_cut, b_cut, 4, 1, "cut (int32)");
    {
        const int32_t *ids = (const int32_t *)b_ids.buf;
        const int32_t *targets = (const int32_t *)b_targets.buf;
        const uint8_t *split = (const uint8_t *)b_split.buf;
        const int64_t *rows = (const int64_t *)b_rows.buf;
        int32_t *lex = (int32_t *)b_lex.buf;
        int32_t *cut = (int32_t *)b_cut.buf;
        const int64_t n_ids = b_ids.len / 4;
        const int64_t n = b_rows.len / 8;
        const int64_t n_lex = b_lex.len / (4 * 256);
        const int64_t n_cut = b_cut.len / (4 * 256);
        const int same = b_lex.buf == b_cut.buf;
        int64_t i;
        if (b_targets.len != n * 256 * 4 || b_split.len != n * 256 || b_lex.len % (4 * 256) != 0
            || b_cut.len % (4 * 256) != 0 || exit_byte > 255 || (!same && exit_byte < 0)
            || sink < 0 || sink >= n_lex || sink >= n_cut) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: write_rows arguments disagree");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n && !bad; i++) {
            const int64_t k = rows[i];
            if (k <= 0 || 3 * k + 2 >= n_lex || 3 * k + 2 >= n_cut) {
                bad = 1;
                break;
            }
            bad = write_id_rows(lex, same ? NULL : cut, exit_byte, k, targets + i * 256,
                                split + i * 256, ids, n_ids, n_lex, (int32_t)sink);
        }
        Py_END_ALLOW_THREADS
        if (bad == 1)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: write_rows row out of range");
        else if (bad == 2)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: write_rows target without an id");
        else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
done:
    RELEASE_HELD();
    return result;
}

static PyObject *
trie_set_bits(PyObject *self, PyObject *args)
{
    PyObject *o_words, *o_first, *o_strings;
    long long n_bits;
    Py_buffer b_words, b_first, b_strings;
    HELD_BUFFERS(3);
    int bad = 0;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "OOOL", &o_words, &o_first, &o_strings, &n_bits))
        return NULL;
    GET(o_words, b_words, 4, 1, "words (int32)");
    GET(o_first, b_first, 8, 0, "first_token (int64)");
    GET(o_strings, b_strings, 8, 0, "strings (int64)");
    {
        uint32_t *words = (uint32_t *)b_words.buf;
        const int64_t *first = (const int64_t *)b_first.buf;
        const int64_t *strings = (const int64_t *)b_strings.buf;
        const int64_t n_first = b_first.len / 8;
        const int64_t n = b_strings.len / 8;
        int64_t i;
        if (n_bits < 0 || n_bits > (int64_t)(b_words.len / 4) * 32) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: set_bits: more bits than words");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++) {
            int64_t s = strings[i], t;
            if (s < 0 || s >= n_first || (t = first[s]) < 0 || t >= n_bits) {
                bad = 1;
                break;
            }
            words[t >> 5] |= (uint32_t)1 << (t & 31);
        }
        Py_END_ALLOW_THREADS
        if (bad)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: set_bits: a string or id out of range");
        else {
            Py_INCREF(Py_None);
            result = Py_None;
        }
    }
done:
    RELEASE_HELD();
    return result;
}

static PyObject *
trie_ahead_rows(PyObject *self, PyObject *args)
{
    PyObject *o_table, *o_skip, *o_frontier, *o_out, *o_scratch;
    long long ahead, budget;
    Py_buffer b_table, b_skip, b_frontier, b_out, b_scratch;
    HELD_BUFFERS(5);
    int bad = 0;
    PyObject *result = NULL;

    if (!PyArg_ParseTuple(args, "OOOLLOO", &o_table, &o_skip, &o_frontier, &ahead, &budget,
                          &o_out, &o_scratch))
        return NULL;
    GET(o_table, b_table, 4, 0, "table (int32)");
    GET(o_skip, b_skip, 1, 1, "skip (bool)");
    GET(o_frontier, b_frontier, 8, 0, "frontier (int64)");
    GET(o_out, b_out, 8, 1, "out (int64)");
    GET(o_scratch, b_scratch, 8, 1, "scratch (int64)");
    {
        const int32_t *table = (const int32_t *)b_table.buf;
        uint8_t *skip = (uint8_t *)b_skip.buf;
        const int64_t *frontier = (const int64_t *)b_frontier.buf;
        int64_t *out = (int64_t *)b_out.buf;
        int64_t *scratch = (int64_t *)b_scratch.buf;
        const int64_t n_states = b_table.len / (4 * 256);
        const int64_t n_front = b_frontier.len / 8;
        int64_t lo = 0, hi = 0, level, written = 0;
        if (b_table.len % (4 * 256) != 0 || b_skip.len != n_states || b_scratch.len / 8 < n_states
            || budget < 0 || b_out.len / 8 < budget) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: ahead_rows arguments disagree");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (level = 0; level < ahead && budget > 0 && !bad; level++) {
            /* the level's frontier: the given states, then the previous level's rows */
            const int64_t *front = level == 0 ? frontier : out + lo;
            const int64_t n = level == 0 ? n_front : hi - lo;
            int64_t found = 0, i, keep;
            /* scanned backwards: each state once, at its last occurrence (numpy's
             * last-write-wins scatter in the pure build), then read back in forward order */
            for (i = n - 1; i >= 0 && !bad; i--) {
                const int64_t q = front[i];
                int b;
                if (q < 0 || q >= n_states) {
                    bad = 1;
                    break;
                }
                for (b = 255; b >= 0; b--) {
                    const int32_t t = table[q * 256 + b];
                    if (t < 0 || t >= n_states) {
                        bad = 1;
                        break;
                    }
                    if (!skip[t]) {
                        skip[t] = 1;
                        scratch[found++] = t;
                    }
                }
            }
            if (bad || found == 0)
                break;
            keep = found < budget ? found : budget;
            lo = written;
            for (i = 0; i < keep; i++)
                out[written++] = scratch[found - 1 - i];
            hi = written;
            budget -= keep;
        }
        Py_END_ALLOW_THREADS
        if (bad)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: ahead_rows: a state out of range");
        else
            result = PyLong_FromLongLong((long long)written);
    }
done:
    RELEASE_HELD();
    return result;
}

/* a growable int64 list (classify below) */
typedef struct {
    int64_t *v;
    int64_t n, cap;
} I64List;

static int
i64_push(I64List *l, int64_t x)
{
    if (l->n >= l->cap) {
        int64_t ncap = l->cap ? 2 * l->cap : 256;
        int64_t *nv = (int64_t *)realloc(l->v, sizeof(int64_t) * ncap);
        if (nv == NULL)
            return -1;
        l->v = nv;
        l->cap = ncap;
    }
    l->v[l->n++] = x;
    return 0;
}

/* what classify does with one live string i (of the walked trie) ending in state s */
typedef struct {
    const uint8_t *pending; /* per state: a sentinel's row */
    int32_t sink;
    const int64_t *first_token; /* per string of the vocabulary trie: its token id */
    int64_t n_first;
    const int64_t *map; /* per walked string, its vocabulary string (NULL: the same) */
    int64_t n_map;
    const uint8_t *drop; /* per vocabulary string: not a candidate (NULL: none dropped) */
    int64_t n_drop;
    uint32_t *words;
    int64_t n_bits;
    uint8_t *seen; /* per state: already in stopped (allocated on the first one) */
    int64_t n_states;
    I64List cands, stopped;
    /* the bits of every string of the walked trie (the memo's all words; NULL: none, or a
     * string map): word ranges are then kept in `deferred` (lo, hi pairs, `n_deferred`
     * strings in all) and set at the end (finish_deferred) */
    const uint32_t *all;
    I64List deferred;
    int64_t n_deferred;
} ClassifyOut;

/* 0, or the error code of classify (5: out of memory, 6: an index out of range) */
static int
classify_one(ClassifyOut *o, int64_t i, int32_t s)
{
    int64_t g, t;
    if (o->pending[s]) {
        if (o->seen == NULL) {
            o->seen = (uint8_t *)calloc((size_t)o->n_states, 1);
            if (o->seen == NULL)
                return 5;
        }
        if (!o->seen[s]) {
            o->seen[s] = 1;
            if (i64_push(&o->stopped, s) < 0)
                return 5;
        }
        return 0;
    }
    if (o->stopped.n)
        return 0; /* the walk is run again: only the stopped states matter now */
    if (o->map != NULL) {
        if (i < 0 || i >= o->n_map)
            return 6;
        g = o->map[i];
    } else
        g = i;
    if (g < 0 || g >= o->n_first)
        return 6;
    if (s == o->sink) {
        if (o->drop != NULL) {
            if (g >= o->n_drop)
                return 6;
            if (o->drop[g])
                return 0;
        }
        return i64_push(&o->cands, g) < 0 ? 5 : 0;
    }
    t = o->first_token[g];
    if (t < 0 || t >= o->n_bits)
        return 6;
    o->words[t >> 5] |= (uint32_t)1 << (t & 31);
    return 0;
}

static PyObject *
i64_bytes(const I64List *l)
{
    return PyByteArray_FromStringAndSize((const char *)l->v, (Py_ssize_t)(l->n * 8));
}

/* The rows classify writes in its walk (its `rows` argument): a pending row met (a
 * sentinel: its id's lexer state not ready) whose lexer state's row is built gets its walk
 * rows written at once (write_id_rows; each target without an id gets the next one, with
 * sentinel rows), so the walk goes on where it would have stopped; one whose lexer row is
 * not built, or past the tables' room, stays a sentinel (the caller builds it and walks
 * again).  The rows written are those _LazyWalkTables.write writes for the same states. */
typedef struct {
    const int32_t *lexer; /* the lexer's rows, int32[n_lexer, 256] */
    const uint8_t *split; /* their split flags, bool[n_lexer, 256] */
    const uint8_t *built; /* per lexer state: its row built */
    int64_t n_lexer;
    int32_t *ids;      /* per lexer state: its id, or -1 */
    uint8_t *ready;    /* per lexer state: its walk rows written */
    int64_t *states;   /* per id: its lexer state */
    uint8_t *pending;  /* per walk row: a sentinel's */
    int32_t *lex, *cut; /* the tables (cut NULL: the lex table itself) */
    long long exit_byte;
    int32_t sink;
    int64_t room;  /* ids the tables have room for */
    int64_t count; /* ids given */
    I64List written; /* the lexer states made ready, in order */
} RowWriter;

/* 0, or 6 (out of range): lexer state q given the next id, with sentinel rows, where it has
 * none and the tables have room (else it stays without one) */
static int
give_id(RowWriter *w, int32_t q)
{
    int64_t h;
    int j;
    if (q < 0 || q >= w->n_lexer)
        return 6;
    if (w->ids[q] >= 0 || w->count >= w->room)
        return 0;
    h = w->count++;
    w->ids[q] = (int32_t)h;
    w->states[h] = q;
    for (j = 0; j < 3; j++) {
        int32_t *row = w->lex + (3 * h + j) * 256;
        int c;
        w->pending[3 * h + j] = 1;
        for (c = 0; c < 256; c++)
            row[c] = (int32_t)(3 * h + j);
        if (w->cut != NULL)
            memcpy(w->cut + (3 * h + j) * 256, row, 256 * sizeof(int32_t));
    }
    return 0;
}

/* 0, or 5 (out of memory) or 6 (an index out of range): the row s met by the walk written
 * where it is a sentinel of a built lexer row and the room allows */
static int
write_met(void *ctx, int32_t s)
{
    RowWriter *w = (RowWriter *)ctx;
    int64_t k, q;
    const int32_t *t;
    int b;
    if (!w->pending[s])
        return 0;
    k = s / 3;
    if (k <= 0 || k >= w->count)
        return 6;
    q = w->states[k];
    if (q <= 0 || q >= w->n_lexer || w->ids[q] != k)
        return 6;
    if (!w->built[q])
        return 0; /* stays a sentinel: the caller builds it */
    t = w->lexer + q * 256;
    for (b = 0; b < 256; b++) {
        int r = give_id(w, t[b]);
        if (r != 0)
            return r;
        if (w->ids[t[b]] < 0)
            return 0; /* no room: stays a sentinel (the ids given stay, as sentinels) */
    }
    if (write_id_rows(w->lex, w->cut, w->exit_byte, k, t, w->split + q * 256, w->ids,
                      w->n_lexer, 3 * w->room, w->sink) != 0)
        return 6;
    w->pending[3 * k] = w->pending[3 * k + 1] = w->pending[3 * k + 2] = 0;
    w->ready[q] = 1;
    return i64_push(&w->written, q) < 0 ? 5 : 0;
}

/* Takes the buffers of a WalkRows tuple into w (v: room for its 9 views, each appended to
 * held) and checks them against each other; 0, or -1 with an exception set (the views
 * taken so far are in held: the caller releases them). */
static int
rows_take(PyObject *o_rows, RowWriter *w, Py_buffer *v, Py_buffer **held, int *n_held,
          long long sink)
{
    static const int size[9] = {4, 1, 1, 4, 1, 8, 4, 4, 1};
    static const int writable[9] = {0, 0, 0, 1, 1, 1, 1, 1, 1};
    static const char *what[9] = {"lexer table (int32)", "lexer split (bool)", "built (bool)",
                                  "ids (int32)", "ready (bool)", "states (int64)",
                                  "lex (int32)", "cut (int32)", "pending (bool)"};
    PyObject *o[9];
    long long count, exit_byte;
    int64_t room, n;
    int i;
    if (!PyTuple_Check(o_rows) ||
        !PyArg_ParseTuple(o_rows, "OOOOOOOOOLL", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &o[7], &o[8], &count, &exit_byte)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "_trie_walk: rows must be a WalkRows tuple");
        return -1;
    }
    for (i = 0; i < 9; i++) {
        if (get_buffer(o[i], &v[i], size[i], writable[i], what[i]) < 0)
            return -1;
        held[(*n_held)++] = &v[i];
    }
    n = v[0].len / (4 * 256);
    if (v[1].len / 256 < n)
        n = v[1].len / 256;
    if (v[2].len < n)
        n = v[2].len;
    if (v[3].len / 4 < n)
        n = v[3].len / 4;
    if (v[4].len < n)
        n = v[4].len;
    room = v[5].len / 8;
    if (v[8].len / 3 < room)
        room = v[8].len / 3;
    if (v[6].len / (3 * 256 * 4) < room)
        room = v[6].len / (3 * 256 * 4);
    if (v[7].len / (3 * 256 * 4) < room)
        room = v[7].len / (3 * 256 * 4);
    if (v[0].len % (4 * 256) != 0 || v[6].len % (4 * 256) != 0 || v[7].len % (4 * 256) != 0 ||
        v[6].len != v[7].len || count < 1 || count > room || exit_byte > 255 ||
        (v[7].buf != v[6].buf && exit_byte < 0) || sink < 0 || sink >= 3 * room) {
        PyErr_SetString(PyExc_ValueError, "_trie_walk: rows arguments disagree");
        return -1;
    }
    w->lexer = (const int32_t *)v[0].buf;
    w->split = (const uint8_t *)v[1].buf;
    w->built = (const uint8_t *)v[2].buf;
    w->n_lexer = n;
    w->ids = (int32_t *)v[3].buf;
    w->ready = (uint8_t *)v[4].buf;
    w->states = (int64_t *)v[5].buf;
    w->lex = (int32_t *)v[6].buf;
    w->cut = v[7].buf == v[6].buf ? NULL : (int32_t *)v[7].buf;
    w->pending = (uint8_t *)v[8].buf;
    w->exit_byte = exit_byte;
    w->sink = (int32_t)sink;
    w->room = room;
    w->count = count;
    return 0;
}

static PyObject *
trie_write_state(PyObject *self, PyObject *args)
{
    PyObject *o_rows;
    long long state, sink;
    Py_buffer v[9];
    HELD_BUFFERS(9);
    RowWriter w;
    PyObject *result = NULL;
    int bad = 0, done_ = 0;

    memset(&w, 0, sizeof(w));
    if (!PyArg_ParseTuple(args, "OLL", &o_rows, &state, &sink))
        return NULL;
    if (rows_take(o_rows, &w, v, held, &n_held, sink) < 0)
        goto done;
    if (state <= 0 || state >= w.n_lexer) {
        PyErr_SetString(PyExc_ValueError, "_trie_walk: write_state: state out of range");
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    if (w.built[state] && !w.ready[state]) {
        bad = give_id(&w, (int32_t)state);
        if (bad == 0 && w.ids[state] >= 0) {
            bad = write_met(&w, 3 * w.ids[state]);
            done_ = w.ready[state];
        }
    }
    Py_END_ALLOW_THREADS
    if (bad == 5)
        PyErr_NoMemory();
    else if (bad)
        PyErr_SetString(PyExc_ValueError, "_trie_walk: write_state: an index out of range");
    else
        result = Py_BuildValue("(LO)", (long long)w.count, done_ ? Py_True : Py_False);
done:
    free(w.written.v);
    RELEASE_HELD();
    return result;
}

/* classify's two callbacks of dfs_walk */
typedef struct {
    ClassifyOut *o;
    RowWriter *w; /* NULL: no row written in the walk */
    I64List *stops; /* a resumable walk's stops, (node, row) pairs (NULL: not resumable) */
    const int32_t *pos; /* stops' nodes numbered by this (the memo's preorder), or NULL */
} ClassifyWalk;

/* a sentinel s met at node: its rows written where its lexer row is built; else, in a
 * resumable walk, (node, s) kept as a stop and -1 (dfs_walk skips the node's string and
 * subtree: every byte of a sentinel row leads back to it, so all of it ends there) */
static int
classify_arrive(void *ctx, int32_t s, int64_t node)
{
    ClassifyWalk *cw = (ClassifyWalk *)ctx;
    int r = write_met(cw->w, s);
    if (r != 0 || cw->stops == NULL || !cw->w->pending[s])
        return r;
    if (cw->pos != NULL)
        node = cw->pos[node]; /* (in range: the memo's lengths were checked) */
    if (i64_push(cw->stops, node) < 0 || i64_push(cw->stops, s) < 0)
        return 5;
    return -1;
}

/* classify_one of a walk's live string: its common case (s neither pending nor the sink, no
 * stop met, no string map: a bit set) inline in the walks, the rest by classify_one */
static inline __attribute__((always_inline)) int
classify_string(void *ctx, int64_t string, int32_t s)
{
    ClassifyOut *o = ((ClassifyWalk *)ctx)->o;
    if (o->map == NULL && !o->pending[s] && s != o->sink && o->stopped.n == 0 && string >= 0 &&
        string < o->n_first) {
        const int64_t t = o->first_token[string];
        if (t < 0 || t >= o->n_bits)
            return 6;
        o->words[t >> 5] |= (uint32_t)1 << (t & 31);
        return 0;
    }
    return classify_one(o, string, s);
}

/* strings lo .. hi - 1 all ending in s (a subtree of the memo): classify_one of each, the
 * common case (s neither pending nor the sink, no stop met) as one loop of bits */
static int
classify_range(void *ctx, int64_t lo, int64_t hi, int32_t s)
{
    ClassifyOut *o = ((ClassifyWalk *)ctx)->o;
    int64_t i;
    if (o->pending[s] || s == o->sink || o->stopped.n) {
        for (i = lo; i < hi; i++) {
            const int r = classify_one(o, i, s);
            if (r != 0)
                return r;
        }
        return 0;
    }
    if (o->all != NULL && o->map == NULL) { /* (words: set by finish_deferred) */
        if (i64_push(&o->deferred, lo) < 0 || i64_push(&o->deferred, hi) < 0)
            return 5;
        o->n_deferred += hi - lo;
        return 0;
    }
    for (i = lo; i < hi; i++) {
        int64_t g = i, t;
        if (o->map != NULL) {
            if (i >= o->n_map)
                return 6;
            g = o->map[i];
        }
        if (g < 0 || g >= o->n_first)
            return 6;
        t = o->first_token[g];
        if (t < 0 || t >= o->n_bits)
            return 6;
        o->words[t >> 5] |= (uint32_t)1 << (t & 31);
    }
    return 0;
}

static int
cmp_pair(const void *x, const void *y)
{
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* The words of the deferred ranges (classify_range: strings of the walked trie, each once,
 * no string map) of a walk over n_str strings: where they are most of the strings, the
 * memo's all words less the bits of the strings outside them (first_token is one-to-one:
 * each string its own token id), OR-ed into the words; else range by range.  0, or 5 (out
 * of memory) or 6 (a string or id out of range). */
static int
finish_deferred(ClassifyOut *o, int64_t n_str)
{
    int64_t *v = o->deferred.v, np = o->deferred.n / 2, p, g;
    const int64_t n_words = o->n_bits / 32;
    if (np == 0)
        return 0;
    for (p = 1; p < np && v[2 * p] >= v[2 * p - 2]; p++)
        ;
    if (p < np)
        qsort(v, (size_t)np, 2 * sizeof(int64_t), cmp_pair); /* (resumes: several walks) */
    for (p = 0; p < np; p++)
        if (v[2 * p] < (p ? v[2 * p - 1] : 0) || v[2 * p + 1] < v[2 * p] || v[2 * p + 1] > n_str ||
            v[2 * p + 1] > o->n_first)
            return 6; /* (ranges overlap or pass the strings: not a walk's) */
    if (o->n_deferred > n_str - o->n_deferred + n_words) {
        uint32_t *tmp = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)(n_words ? n_words : 1));
        int64_t cur = 0, w;
        if (tmp == NULL)
            return 5;
        memcpy(tmp, o->all, sizeof(uint32_t) * (size_t)n_words);
        for (p = 0; p <= np; p++) {
            const int64_t end = p < np ? v[2 * p] : n_str;
            for (g = cur; g < end; g++) {
                const int64_t t = g < o->n_first ? o->first_token[g] : -1;
                if (t < 0 || t >= o->n_bits) {
                    free(tmp);
                    return 6;
                }
                tmp[t >> 5] &= ~((uint32_t)1 << (t & 31));
            }
            if (p < np)
                cur = v[2 * p + 1];
        }
        for (w = 0; w < n_words; w++)
            o->words[w] |= tmp[w];
        free(tmp);
        return 0;
    }
    for (p = 0; p < np; p++)
        for (g = v[2 * p]; g < v[2 * p + 1]; g++) {
            const int64_t t = o->first_token[g];
            if (t < 0 || t >= o->n_bits)
                return 6;
            o->words[t >> 5] |= (uint32_t)1 << (t & 31);
        }
    return 0;
}

/* Takes the buffers of a subtree memo tuple (TokenTrie._subtree_memo: pos, byte, depth, size,
 * own, str, sel, sets, max depth, least reach[, the text memo's flag, next, breaks, pre, text
 * bytes[, all words]]) into mv[0..13] (mv[8..12]: the text memo, mv[13]: all words), each
 * appended to held; sets *has_text and *has_all.  0, or -1 with an exception set (the
 * buffers taken so far are in held). */
static int
memo_take(PyObject *o_memo, Py_buffer mv[14], Py_buffer **held, int *n_held,
          long long *max_depth, long long *min_reach, int *has_text, int *has_all)
{
    static const int msize[8] = {4, 1, 2, 4, 1, 4, 4, 8};
    static const char *mwhat[8] = {"memo pos (int32)", "memo byte (uint8)",
                                   "memo depth (uint16)", "memo size (int32)",
                                   "memo own (uint8)", "memo str (int32)",
                                   "memo sel (int32)", "memo sets (uint64)"};
    static const int tsize[5] = {1, 4, 4, 4, 8};
    static const char *twhat[5] = {"memo text flag (uint8)", "memo text next (int32)",
                                   "memo text breaks (int32)", "memo text pre (uint32)",
                                   "memo text bytes (uint64)"};
    PyObject *mo[8];
    PyObject *to[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    int j;
    *has_text = *has_all = 0;
    if (!PyTuple_Check(o_memo) ||
        !PyArg_ParseTuple(o_memo, "OOOOOOOOLL|OOOOOO", &mo[0], &mo[1], &mo[2], &mo[3], &mo[4],
                          &mo[5], &mo[6], &mo[7], max_depth, min_reach, &to[0], &to[1],
                          &to[2], &to[3], &to[4], &to[5])) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "_trie_walk: classify: memo is not a tuple");
        return -1;
    }
    for (j = 0; j < 8; j++) {
        if (get_buffer(mo[j], &mv[j], msize[j], 0, mwhat[j]) < 0)
            return -1;
        held[(*n_held)++] = &mv[j];
    }
    if (to[0] != NULL && to[0] != Py_None) {
        for (j = 0; j < 5; j++) {
            if (to[j] == NULL) {
                PyErr_SetString(PyExc_TypeError, "_trie_walk: classify: a text memo lacks parts");
                return -1;
            }
            if (get_buffer(to[j], &mv[8 + j], tsize[j], 0, twhat[j]) < 0)
                return -1;
            held[(*n_held)++] = &mv[8 + j];
        }
        *has_text = 1;
    }
    if (to[5] != NULL && to[5] != Py_None) {
        if (get_buffer(to[5], &mv[13], 4, 0, "memo all words (int32)") < 0)
            return -1;
        held[(*n_held)++] = &mv[13];
        *has_all = 1;
    }
    return 0;
}

/* trie_handle(first, count, byte, end, parent, string_node, below_first, below_second,
 * first_token[, memo]) -> a capsule holding the buffers of classify's arguments that depend
 * on the walked trie alone (and the vocabulary's first tokens, and the memo tuple's arrays):
 * classify and classify_from take it as their first argument (formcast.vocab.trie.
 * TokenTrie._classify_head keeps one per trie and width), so a call takes 4-6 buffers, not
 * 23-27 (~1.3 us a call).  The buffers are held (the arrays cannot be resized) until the
 * capsule dies; classify checks their lengths on every call. */
#define TRIE_HANDLE "formcast.vocab._trie_walk.TrieHandle"
typedef struct {
    Py_buffer v[23]; /* 0-7: the trie's, 8: first_token, 9-22: the memo's (memo_take's mv) */
    Py_buffer *held[23];
    int n_held;
    int has_memo, has_text, has_all;
    long long max_depth, min_reach;
} TrieHandle;

static void
trie_handle_free(PyObject *capsule)
{
    TrieHandle *h = (TrieHandle *)PyCapsule_GetPointer(capsule, TRIE_HANDLE);
    if (h == NULL) {
        PyErr_Clear();
        return;
    }
    while (h->n_held > 0)
        PyBuffer_Release(h->held[--h->n_held]);
    free(h);
}

static PyObject *
trie_handle(PyObject *self, PyObject *args)
{
    static const int size[9] = {4, 4, 1, 4, 4, 8, 8, 8, 8};
    static const char *what[9] = {"first (int32)", "count (int32)", "byte (uint8)",
                                  "end (int32)", "parent (int32)", "string_node (int64)",
                                  "below_first (int64)", "below_second (int64)",
                                  "first_token (int64)"};
    PyObject *o[9], *o_memo = Py_None, *capsule;
    TrieHandle *h;
    int j;
    if (!PyArg_ParseTuple(args, "OOOOOOOOO|O", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o_memo))
        return NULL;
    h = (TrieHandle *)calloc(1, sizeof(TrieHandle));
    if (h == NULL)
        return PyErr_NoMemory();
    for (j = 0; j < 9; j++) {
        if (get_buffer(o[j], &h->v[j], size[j], 0, what[j]) < 0)
            goto fail;
        h->held[h->n_held++] = &h->v[j];
    }
    if (o_memo != Py_None) {
        if (memo_take(o_memo, &h->v[9], h->held, &h->n_held, &h->max_depth, &h->min_reach,
                      &h->has_text, &h->has_all) < 0)
            goto fail;
        h->has_memo = 1;
    }
    capsule = PyCapsule_New(h, TRIE_HANDLE, trie_handle_free);
    if (capsule != NULL)
        return capsule;
fail:
    while (h->n_held > 0)
        PyBuffer_Release(h->held[--h->n_held]);
    free(h);
    return NULL;
}

static PyObject *
classify_impl(PyObject *args, int resumable)
{
    PyObject *o_handle, *o_table, *o_pending, *o_map, *o_drop, *o_words, *o_rows = Py_None;
    PyObject *o_resume = NULL, *o_x = NULL;
    long long start, sink, max_reach;
    Py_buffer b_first, b_count, b_byte, b_end, b_parent, b_snode, b_below1, b_below2;
    Py_buffer b_table, b_pending, b_ftok, b_map, b_drop, b_words;
    Py_buffer rv[9], b_resume, mv[14];
    HELD_BUFFERS(16);
    int bad = 0;
    PyObject *result = NULL;
    ClassifyOut o;
    RowWriter w;
    ClassifyWalk cw;
    I64List stops;
    int32_t *node_state = NULL;
    SubtreeMemo *memo = NULL;
    const TrieHandle *h = NULL;
    long long max_depth = 0, min_reach = 0;
    int have_memo = 0, have_text = 0, have_all = 0, j;

    memset(&o, 0, sizeof(o));
    memset(&w, 0, sizeof(w));
    memset(&stops, 0, sizeof(stops));
    /* (handle, table, start, pending, sink, string_map, drop, words, max_reach[, rows
     * [, resume]]): the trie's arrays and memo from a trie_handle */
    if (!PyArg_ParseTuple(args, "OOLOLOOOL|OO", &o_handle, &o_table, &start, &o_pending, &sink,
                          &o_map, &o_drop, &o_words, &max_reach, &o_rows, &o_x))
        return NULL;
    h = (const TrieHandle *)PyCapsule_GetPointer(o_handle, TRIE_HANDLE);
    if (h == NULL)
        return NULL;
    if (resumable)
        o_resume = o_x;
    else if (o_x != NULL) {
        PyErr_SetString(PyExc_TypeError, "_trie_walk: classify takes at most 10 arguments");
        return NULL;
    }
    b_first = h->v[0];
    b_count = h->v[1];
    b_byte = h->v[2];
    b_end = h->v[3];
    b_parent = h->v[4];
    b_snode = h->v[5];
    b_below1 = h->v[6];
    b_below2 = h->v[7];
    b_ftok = h->v[8];
    for (j = 0; j < 14; j++)
        mv[j] = h->v[9 + j];
    have_memo = h->has_memo;
    have_text = h->has_text;
    have_all = h->has_all;
    max_depth = h->max_depth;
    min_reach = h->min_reach;
    if (o_resume != NULL && o_rows == Py_None) {
        PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: a resumable walk needs rows");
        goto done;
    }
    GET(o_table, b_table, 4, 0, "table (int32)");
    GET(o_pending, b_pending, 1, 0, "pending (bool)");
    if (o_map != Py_None)
        GET(o_map, b_map, 8, 0, "string_map (int64)");
    if (o_drop != Py_None)
        GET(o_drop, b_drop, 1, 0, "drop (bool)");
    GET(o_words, b_words, 4, 1, "words (int32)");
    if (o_resume != NULL && o_resume != Py_None) {
        GET(o_resume, b_resume, 8, 0, "resume (int64 pairs)");
        if (b_resume.len % 16 != 0) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: resume is not pairs");
            goto done;
        }
    }
    if (have_memo) {
        /* the subtree memo of the walked trie (TokenTrie._subtree_memo): pos, byte, depth,
         * size, own, str, sel, sets (mv[0..7]), the text memo (mv[8..12]), all words */
        const int64_t nn = b_first.len / 4;
        if (mv[0].len / 4 != nn || mv[1].len != nn || mv[2].len / 2 != nn ||
            mv[3].len / 4 != nn || mv[4].len != nn || mv[5].len / 4 != nn + 1 ||
            mv[6].len / 4 != nn || mv[7].len % 32 != 0 || max_depth < 1 ||
            max_depth > 65535) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: memo lengths disagree");
            goto done;
        }
        memo = (SubtreeMemo *)malloc(sizeof(SubtreeMemo));
        if (memo == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memo->pos = (const int32_t *)mv[0].buf;
        memo->byte = (const uint8_t *)mv[1].buf;
        memo->depth = (const uint16_t *)mv[2].buf;
        memo->size = (const int32_t *)mv[3].buf;
        memo->own = (const uint8_t *)mv[4].buf;
        memo->str = (const int32_t *)mv[5].buf;
        memo->sel = (const int32_t *)mv[6].buf;
        memo->sets = (const uint64_t *)mv[7].buf;
        memo->n_nodes = nn;
        memo->n_sel = mv[7].len / 32;
        memo->n_strings = b_snode.len / 8;
        memo->max_depth = max_depth; /* (a deeper node is refused by memo_walk) */
        memo->min_reach = min_reach;
        memo->tflag = NULL;
        memset(memo->kset, 0, sizeof(memo->kset));
        memo->version = NULL;
        memo->fr_cap = 2 * max_depth + 4;
        memo->st = (int32_t *)calloc((size_t)memo->max_depth + 1, sizeof(int32_t));
        memo->fr = (TextFrame *)malloc(sizeof(TextFrame) * (size_t)memo->fr_cap);
        if (memo->st == NULL || memo->fr == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memset(memo->key, 0xff, sizeof(memo->key));
        memset(memo->key2, 0xff, sizeof(memo->key2));
        if (have_text) {
            /* the text memo (text_memo): flag, next, breaks, pre, text bytes */
            if (mv[8].len != nn || mv[9].len / 4 != nn + 1 || mv[10].len != mv[11].len ||
                mv[12].len != 32) {
                PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: memo lengths disagree");
                goto done;
            }
            memo->tflag = (const uint8_t *)mv[8].buf;
            memo->tnext = (const int32_t *)mv[9].buf;
            memo->tbrk = (const int32_t *)mv[10].buf;
            memo->tpre = (const uint32_t *)mv[11].buf;
            memo->n_brk = mv[10].len / 4;
            memcpy(memo->kset, mv[12].buf, sizeof(memo->kset));
        }
        if (have_all) {
            /* the bits of every string of the trie (TokenTrie._memo_words) */
            if (mv[13].len != b_words.len) {
                PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: memo lengths disagree");
                goto done;
            }
            o.all = (const uint32_t *)mv[13].buf;
        }
    }
    if (o_rows != Py_None) {
        /* the walked table and pending flags are these tables' (one of lex and cut) */
        if (rows_take(o_rows, &w, rv, held, &n_held, sink) < 0)
            goto done;
        if ((b_table.buf != rv[6].buf && b_table.buf != rv[7].buf) || b_table.len != rv[6].len ||
            b_pending.buf != rv[8].buf || b_pending.len != rv[8].len) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: rows arguments disagree");
            goto done;
        }
    }
    cw.o = &o;
    cw.w = o_rows != Py_None ? &w : NULL;
    if (memo != NULL && cw.w != NULL)
        memo->version = &w.written.n; /* (rows written in the walk: lead sets go stale) */
    cw.stops = o_resume != NULL ? &stops : NULL;
    cw.pos = NULL;
    {
        const int32_t *parent = (const int32_t *)b_parent.buf;
        const uint8_t *byte = (const uint8_t *)b_byte.buf;
        const int64_t *snode = (const int64_t *)b_snode.buf;
        const int64_t *below1 = (const int64_t *)b_below1.buf;
        const int64_t *below2 = (const int64_t *)b_below2.buf;
        const int32_t *table = (const int32_t *)b_table.buf;
        const int64_t n_nodes = b_first.len / 4;
        const int64_t n_states = b_table.len / (4 * 256);
        const int64_t n_root = b_below1.len / 8;
        const int64_t n_strings = b_snode.len / 8;
        int64_t reach = 0, n_live = 0, r, i;
        int32_t entry = 0; /* text_entry's state of a fresh walk (0: none) */
        DfsArgs a;
        o.pending = (const uint8_t *)b_pending.buf;
        o.sink = (int32_t)sink;
        o.first_token = (const int64_t *)b_ftok.buf;
        o.n_first = b_ftok.len / 8;
        if (o_map != Py_None) {
            o.map = (const int64_t *)b_map.buf;
            o.n_map = b_map.len / 8;
        }
        if (o_drop != Py_None) {
            o.drop = (const uint8_t *)b_drop.buf;
            o.n_drop = b_drop.len;
        }
        o.words = (uint32_t *)b_words.buf;
        o.n_bits = (b_words.len / 4) * 32;
        o.n_states = n_states;
        a.first = (const int32_t *)b_first.buf;
        a.count = (const int32_t *)b_count.buf;
        a.byte = byte;
        a.end = (const int32_t *)b_end.buf;
        a.n_nodes = n_nodes;
        a.table = table;
        a.n_states = n_states;
        a.pending = cw.w != NULL ? cw.w->pending : NULL;
        if (b_count.len / 4 != n_nodes || b_byte.len != n_nodes || b_end.len / 4 != n_nodes ||
            b_parent.len / 4 != n_nodes || b_table.len % (4 * 256) != 0 ||
            b_below2.len / 8 != n_root * 256 || n_root > n_nodes || b_pending.len < n_states) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: array lengths disagree");
            goto done;
        }
        if (start <= 0 || start >= n_states || sink < 0 || sink >= n_states) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: a state out of range");
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        if (o_resume != NULL && o_resume != Py_None) {
            /* a resumed walk: from each stop (node, row) of the walk before, whose row may be
             * written now: the node's string, then its subtree depth-first */
            const int64_t *pairs = (const int64_t *)b_resume.buf;
            const int64_t n_pairs = b_resume.len / 16;
            int64_t p;
            for (p = 0; p < n_pairs && !bad; p++) {
                const int64_t c = pairs[2 * p], q = pairs[2 * p + 1];
                int32_t s;
                if (c < 0 || c >= n_nodes) {
                    bad = 3;
                    break;
                }
                if (q <= 0 || q >= n_states) {
                    bad = 1;
                    break;
                }
                s = (int32_t)q;
                if (w.pending[s]) {
                    const int rr = classify_arrive(&cw, s, c);
                    if (rr < 0)
                        continue; /* still a sentinel: a stop again */
                    if ((bad = rr) != 0)
                        break;
                }
                if (memo != NULL) { /* (stops of a memo walk: preorder nodes) */
                    if (memo->own[c] && (bad = classify_one(&o, memo->str[c], s)) != 0)
                        break;
                    if (memo->size[c] < 1 || memo->size[c] > n_nodes - c) {
                        bad = 3;
                        break;
                    }
                    bad = memo_walk(&a, memo, c + 1, c + memo->size[c], s, 0, classify_arrive,
                                    classify_string, classify_range, &cw);
                    continue;
                }
                if (a.end[c] >= 0 && (bad = classify_one(&o, a.end[c], s)) != 0)
                    break;
                if (a.count[c] > 0) {
                    const int64_t f = a.first[c], k = a.count[c];
                    if (f < 0 || f + k > n_nodes) {
                        bad = 3;
                        break;
                    }
                    bad = dfs_walk(&a, f, k, s, classify_arrive, classify_string, &cw);
                }
            }
            reach = -1; /* (done) */
        } else if (cw.stops != NULL) {
            /* a fresh resumable walk: the first bytes' rows first; where one stays a
             * sentinel, nothing is walked: its stops are (-1, row), the caller builds them
             * and walks again from the start (a stop this shallow would leave most of the
             * walk to depth-first resumes, slower than one walk of a wide reach) */
            for (r = 0; r < n_root && !bad; r++) {
                const int32_t s = table[start * 256 + byte[r]];
                if (s == 0)
                    continue;
                if (s < 0 || s >= n_states) {
                    bad = 1;
                    break;
                }
                if (w.pending[s] && (bad = write_met(&w, s)) == 0 && w.pending[s] &&
                    (i64_push(&stops, -1) < 0 || i64_push(&stops, s) < 0))
                    bad = 5;
            }
            if (stops.n)
                reach = -1; /* (walk again) */
        }
        /* the reach of TokenTrie.walk_pairs: the nodes below the live first bytes, refined
         * by the second bytes where that is many (TokenTrie._reach) */
        for (r = 0; r < n_root && reach >= 0; r++) {
            const int32_t s = table[start * 256 + byte[r]];
            if (s != 0) {
                reach += below1[r];
                n_live++;
            }
        }
        if (reach >= 0 && (reach >= max_reach || (memo != NULL && reach >= memo->min_reach))) {
            /* (refined where it decides between the pass and a walk, or the memo's walk):
             * the live first bytes' rows written first (the rows of an id are written
             * together or not at all, so a later write leaves an earlier row as it was),
             * then the second bytes' nodes summed (branch-free: the loop vectorizes) until
             * the sum passes every threshold it decides (a string body's: after ~half of
             * its 256 rows; walk38) */
            int64_t reach2 = n_live, cap = max_reach;
            if (memo != NULL && memo->min_reach > cap)
                cap = memo->min_reach;
            for (r = 0; r < n_root && !bad; r++) {
                const int32_t s = table[start * 256 + byte[r]];
                if (s == 0)
                    continue;
                if (s < 0 || s >= n_states) {
                    bad = 1;
                    break;
                }
                if (cw.w != NULL)
                    bad = write_met(cw.w, s);
            }
            for (r = 0; r < n_root && !bad && reach2 < cap; r++) {
                const int32_t s = table[start * 256 + byte[r]];
                const int32_t *row = table + (int64_t)s * 256;
                const int64_t *below = below2 + r * 256;
                int64_t sum = 0;
                int b;
                if (s == 0)
                    continue;
                for (b = 0; b < 256; b++)
                    sum += below[b] & -(int64_t)(row[b] != 0);
                reach2 += sum;
            }
            reach = reach2;
        }
        if (!bad && reach >= 0 && memo != NULL && reach >= memo->min_reach &&
            (entry = text_entry(memo, table, n_states, a.pending, (int32_t)start)) < 0)
            bad = -entry;
        if (bad || reach < 0) {
        } else if (reach >= max_reach && entry <= 0) {
            /* wide: every node's state in one pass (walk_all), then the strings in order */
            node_state = (int32_t *)malloc(sizeof(int32_t) * (n_nodes ? n_nodes : 1));
            if (node_state == NULL)
                bad = 5;
            for (i = 0; i < n_nodes && !bad; i++) {
                int32_t p = parent[i], s;
                if (p >= i) {
                    bad = 3;
                    break;
                }
                s = p < 0 ? (int32_t)start : node_state[p];
                if (s != 0) {
                    s = table[(int64_t)s * 256 + byte[i]];
                    if (s < 0 || s >= n_states) {
                        bad = 1;
                        break;
                    }
                    if (s != 0 && cw.w != NULL && cw.w->pending[s] &&
                        (bad = write_met(cw.w, s)) != 0)
                        break;
                    if (s != 0 && cw.stops != NULL && cw.w->pending[s]) {
                        /* a stop: kept, the node and its subtree dead here (numbered in
                         * preorder where the memo is given: a resume walks its nodes) */
                        const int64_t at = memo != NULL ? memo->pos[i] : i;
                        if (at < 0 || at >= n_nodes) {
                            bad = 3;
                            break;
                        }
                        if (i64_push(&stops, at) < 0 || i64_push(&stops, s) < 0) {
                            bad = 5;
                            break;
                        }
                        s = 0;
                    }
                }
                node_state[i] = s;
            }
            for (i = 0; i < n_strings && !bad; i++) {
                const int64_t nd = snode[i];
                int32_t s;
                if (nd < 0 || nd >= n_nodes) {
                    bad = 3;
                    break;
                }
                s = node_state[nd];
                if (s != 0)
                    bad = classify_one(&o, i, s);
            }
        } else {
            /* restrictive: depth-first over the live nodes (walk), strings in trie order */
            if (memo != NULL && reach >= memo->min_reach)
                bad = memo_walk(&a, memo, 0, n_nodes, (int32_t)start, entry,
                                cw.w != NULL ? classify_arrive : NULL, classify_string,
                                classify_range, &cw);
            else {
                cw.pos = memo != NULL ? memo->pos : NULL; /* (stops numbered in preorder) */
                bad = dfs_walk(&a, 0, n_root, (int32_t)start,
                               cw.w != NULL ? classify_arrive : NULL, classify_string, &cw);
            }
        }
        if (!bad)
            bad = finish_deferred(&o, n_strings);
        Py_END_ALLOW_THREADS
        if (bad == 1)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: the table leads to a state it lacks");
        else if (bad == 3)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: a node out of order or range");
        else if (bad == 5)
            PyErr_NoMemory();
        else if (bad == 6)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: classify: a string or id out of range");
        else if (cw.w == NULL) {
            PyObject *c = i64_bytes(&o.cands), *s = c ? i64_bytes(&o.stopped) : NULL;
            if (c != NULL && s != NULL)
                result = PyTuple_Pack(2, c, s);
            Py_XDECREF(c);
            Py_XDECREF(s);
        } else {
            PyObject *c = i64_bytes(&o.cands);
            PyObject *s = c ? i64_bytes(cw.stops != NULL ? &stops : &o.stopped) : NULL;
            PyObject *wr = s ? i64_bytes(&w.written) : NULL;
            PyObject *n = wr ? PyLong_FromLongLong((long long)w.count) : NULL;
            if (n != NULL)
                result = PyTuple_Pack(4, c, s, wr, n);
            Py_XDECREF(c);
            Py_XDECREF(s);
            Py_XDECREF(wr);
            Py_XDECREF(n);
        }
    }
done:
    if (memo != NULL) {
        free(memo->st);
        free(memo->fr);
    }
    free(memo);
    free(node_state);
    free(o.seen);
    free(o.cands.v);
    free(o.stopped.v);
    free(o.deferred.v);
    free(w.written.v);
    free(stops.v);
    RELEASE_HELD();
    return result;
}

static PyObject *
trie_classify(PyObject *self, PyObject *args)
{
    return classify_impl(args, 0);
}

/* subtree_memo(first, count, byte, end, parent, min_below, pos, pbyte, depth, size, own, str,
 * sel, sets) -> count of sets: TokenTrie._subtree_memo's arrays (the SubtreeMemo above) from
 * the trie's level-order nodes (those of walk_all and classify: parent[i] < i), in three
 * passes over the nodes: bottom-up (each node's subtree size and byte set into its parent),
 * top-down (preorder numbers: a parent's plus one plus its earlier children's sizes; depths),
 * then in preorder (the string counts, and a set for each node with at least min_below nodes
 * below it, numbered in preorder).  Outputs (written): pos int32[n], pbyte uint8[n], depth
 * uint16[n], size int32[n], own uint8[n], str int32[n + 1], sel int32[n], sets uint64[n, 4]
 * (the first `count` rows are the memo's; the rest untouched).  O(nodes), no Python object
 * touched; every index checked (ValueError). */
static PyObject *
trie_subtree_memo(PyObject *self, PyObject *args)
{
    PyObject *o[13];
    long long min_below;
    Py_buffer b[13];
    HELD_BUFFERS(13);
    static const int isize[13] = {4, 4, 1, 4, 4, 4, 1, 2, 4, 1, 4, 4, 8};
    static const char *what[13] = {"first (int32)", "count (int32)", "byte (uint8)",
                                   "end (int32)", "parent (int32)", "pos (int32)",
                                   "pbyte (uint8)", "depth (uint16)", "size (int32)",
                                   "own (uint8)", "str (int32)", "sel (int32)",
                                   "sets (uint64)"};
    PyObject *result = NULL;
    int j, bad = 0;
    int64_t k = 0;

    if (!PyArg_ParseTuple(args, "OOOOOLOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4],
                          &min_below, &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11],
                          &o[12]))
        return NULL;
    for (j = 0; j < 13; j++)
        GET(o[j], b[j], isize[j], j >= 5, what[j]);
    {
        const int32_t *first = (const int32_t *)b[0].buf, *count = (const int32_t *)b[1].buf;
        const uint8_t *byte = (const uint8_t *)b[2].buf;
        const int32_t *end = (const int32_t *)b[3].buf, *parent = (const int32_t *)b[4].buf;
        int32_t *pos = (int32_t *)b[5].buf;
        uint8_t *pbyte = (uint8_t *)b[6].buf;
        uint16_t *depth = (uint16_t *)b[7].buf;
        int32_t *size = (int32_t *)b[8].buf;
        uint8_t *own = (uint8_t *)b[9].buf;
        int32_t *str = (int32_t *)b[10].buf, *sel = (int32_t *)b[11].buf;
        uint64_t *sets = (uint64_t *)b[12].buf;
        const int64_t n = b[0].len / 4;
        /* scratch, per level-order node: subtree size, set, next child's preorder number,
         * depth; per preorder number, its node (int32: fewer pages to fault in, the cost of
         * this one-time build) */
        int32_t *nsize = NULL, *next = NULL, *order = NULL;
        uint64_t *tmp = NULL;
        uint16_t *dep = NULL;
        int64_t i, root_next = 0, total = 0;
        (void)first;
        if (b[1].len / 4 != n || b[2].len != n || b[3].len / 4 != n || b[4].len / 4 != n ||
            b[5].len / 4 != n || b[6].len != n || b[7].len / 2 != n || b[8].len / 4 != n ||
            b[9].len != n || b[10].len / 4 != n + 1 || b[11].len / 4 != n ||
            b[12].len / 32 != n || min_below < 0) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: subtree_memo: array lengths disagree");
            goto done;
        }
        if (n >= INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: subtree_memo: too many nodes");
            goto done;
        }
        nsize = (int32_t *)malloc(sizeof(int32_t) * (n ? n : 1));
        next = (int32_t *)malloc(sizeof(int32_t) * (n ? n : 1));
        order = (int32_t *)malloc(sizeof(int32_t) * (n ? n : 1));
        tmp = (uint64_t *)calloc((size_t)(n ? n : 1) * 4, sizeof(uint64_t));
        dep = (uint16_t *)malloc(sizeof(uint16_t) * (n ? n : 1));
        if (nsize == NULL || next == NULL || order == NULL || tmp == NULL || dep == NULL) {
            free(nsize);
            free(next);
            free(order);
            free(tmp);
            free(dep);
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++) {
            nsize[i] = 1;
            order[i] = -1;
        }
        for (i = n - 1; i >= 0 && !bad; i--) { /* bottom-up */
            const int64_t p = parent[i];
            if (p >= i || count[i] < 0) {
                bad = 1;
                break;
            }
            if (p >= 0) {
                uint64_t *ps = tmp + 4 * p;
                const uint64_t *cs = tmp + 4 * i;
                nsize[p] += nsize[i];
                ps[0] |= cs[0];
                ps[1] |= cs[1];
                ps[2] |= cs[2];
                ps[3] |= cs[3];
                ps[byte[i] >> 6] |= (uint64_t)1 << (byte[i] & 63);
            }
        }
        for (i = 0; i < n && !bad; i++) { /* top-down, in level order: siblings in order */
            const int64_t p = parent[i];
            int64_t at;
            if (p < 0) {
                at = root_next;
                root_next += nsize[i];
                dep[i] = 1;
            } else {
                at = next[p];
                next[p] += nsize[i]; /* (sizes sum to at most n: no overflow) */
                if (dep[p] >= 65535) {
                    bad = 2;
                    break;
                }
                dep[i] = (uint16_t)(dep[p] + 1);
            }
            if (at < 0 || at >= n) {
                bad = 1;
                break;
            }
            next[i] = (int32_t)(at + 1);
            pos[i] = (int32_t)at;
            order[at] = (int32_t)i;
        }
        for (i = 0; i < n && !bad; i++) { /* in preorder */
            const int64_t v = order[i];
            if (v < 0) { /* (a number given twice: a parent after its child) */
                bad = 1;
                break;
            }
            pbyte[i] = byte[v];
            depth[i] = dep[v];
            size[i] = (int32_t)nsize[v];
            own[i] = end[v] >= 0;
            str[i] = (int32_t)total;
            total += own[i];
            if (nsize[v] - 1 >= min_below) {
                memcpy(sets + 4 * k, tmp + 4 * v, 4 * sizeof(uint64_t));
                sel[i] = (int32_t)k++;
            } else
                sel[i] = -1;
        }
        if (!bad)
            str[n] = (int32_t)total;
        Py_END_ALLOW_THREADS
        free(nsize);
        free(next);
        free(order);
        free(tmp);
        free(dep);
        if (bad == 2)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: subtree_memo: a trie too deep");
        else if (bad)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: subtree_memo: nodes out of order");
        else
            result = PyLong_FromLongLong((long long)k);
    }
done:
    RELEASE_HELD();
    return result;
}

/* text_memo(pbyte, depth, own, kset, flag, next, breaks, pre) -> count of breaks: the text
 * memo of a subtree memo (SubtreeMemo's text part: see TEXT_BOUNDARY above) from its
 * preorder bytes, depths and own flags, and the text bytes kset (uint64[4], a 256-bit set):
 * one pass in preorder with a UTF-8 decoder's state per depth.  Outputs (written): flag
 * uint8[n] (TEXT_BOUNDARY where a character ends at the node), next int32[n + 1] (per node
 * the number of breaks before it: the index of the first break at or after it), breaks
 * int32[n] and pre uint32[n] (the first `count` entries: the breaks in preorder, and each
 * one's partial character before it: up to three bytes, the first in the low byte, their
 * count in the top byte).  O(nodes), no Python object touched; every index checked
 * (ValueError). */
static PyObject *
trie_text_memo(PyObject *self, PyObject *args)
{
    PyObject *o[8];
    Py_buffer b[8];
    HELD_BUFFERS(8);
    static const int isize[8] = {1, 2, 1, 8, 1, 4, 4, 4};
    static const char *what[8] = {"pbyte (uint8)", "depth (uint16)", "own (uint8)",
                                  "kset (uint64)", "flag (uint8)", "next (int32)",
                                  "breaks (int32)", "pre (uint32)"};
    PyObject *result = NULL;
    int j, bad = 0;
    int64_t m = 0;

    if (!PyArg_ParseTuple(args, "OOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7]))
        return NULL;
    for (j = 0; j < 8; j++)
        GET(o[j], b[j], isize[j], j >= 4, what[j]);
    {
        const uint8_t *pbyte = (const uint8_t *)b[0].buf, *own = (const uint8_t *)b[2].buf;
        const uint16_t *depth = (const uint16_t *)b[1].buf;
        const uint64_t *kset = (const uint64_t *)b[3].buf;
        uint8_t *flag = (uint8_t *)b[4].buf;
        int32_t *next = (int32_t *)b[5].buf, *brk = (int32_t *)b[6].buf;
        uint32_t *pre = (uint32_t *)b[7].buf;
        const int64_t n = b[0].len;
        int64_t i, maxd = 0;
        /* per depth (0: the root), the decoder after that node: continuation bytes still
         * needed, the allowed range of the next one, the partial character (TEXT_PRE) */
        uint8_t *need = NULL, *lo = NULL, *hi = NULL;
        uint32_t *part = NULL;
        if (b[1].len / 2 != n || b[2].len != n || b[3].len != 32 || b[4].len != n ||
            b[5].len / 4 != n + 1 || b[6].len / 4 != n || b[7].len / 4 != n ||
            n >= INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "_trie_walk: text_memo: array lengths disagree");
            goto done;
        }
        for (i = 0; i < n; i++)
            if (depth[i] > maxd)
                maxd = depth[i];
        need = (uint8_t *)calloc((size_t)maxd + 1, 1);
        lo = (uint8_t *)calloc((size_t)maxd + 1, 1);
        hi = (uint8_t *)calloc((size_t)maxd + 1, 1);
        part = (uint32_t *)calloc((size_t)maxd + 1, sizeof(uint32_t));
        if (need == NULL || lo == NULL || hi == NULL || part == NULL) {
            free(need);
            free(lo);
            free(hi);
            free(part);
            PyErr_NoMemory();
            goto done;
        }
        Py_BEGIN_ALLOW_THREADS
        for (i = 0; i < n; i++) {
            const int64_t d = depth[i];
            const int by = pbyte[i];
            int ok, nn = 0, nlo = 0x80, nhi = 0xBF, l, h;
            uint32_t np = 0, pp;
            if (d < 1 || (i == 0 && d != 1) || (i > 0 && d > depth[i - 1] + 1)) {
                bad = 1; /* (preorder: a node's depth at most its predecessor's plus one) */
                break;
            }
            pp = need[d - 1] ? part[d - 1] : 0;
            if (need[d - 1] && by >= lo[d - 1] && by <= hi[d - 1]) {
                const uint32_t cnt = pp >> 24;
                ok = 1;
                nn = need[d - 1] - 1;
                if (nn)
                    np = ((cnt + 1) << 24) | (pp & 0xFFFFFF) | ((uint32_t)by << (8 * cnt));
            } else {
                /* at a boundary: a text byte, or a lead byte starting a character; inside
                 * one, an ill-formed byte: a break, the decoder resynchronized on it */
                const int k = utf8_lead(by, &l, &h);
                ok = !need[d - 1] && (k || ((kset[by >> 6] >> (by & 63)) & 1));
                if (k) {
                    nn = k;
                    nlo = l;
                    nhi = h;
                    np = ((uint32_t)1 << 24) | (uint32_t)by;
                }
            }
            need[d] = (uint8_t)nn;
            lo[d] = (uint8_t)nlo;
            hi[d] = (uint8_t)nhi;
            part[d] = np;
            flag[i] = nn == 0 ? TEXT_BOUNDARY : 0;
            next[i] = (int32_t)m;
            if (!ok || (own[i] && nn)) {
                brk[m] = (int32_t)i;
                pre[m] = pp | (ok ? TEXT_SOFT : 0);
                m++;
            }
        }
        if (!bad)
            next[n] = (int32_t)m;
        Py_END_ALLOW_THREADS
        free(need);
        free(lo);
        free(hi);
        free(part);
        if (bad)
            PyErr_SetString(PyExc_ValueError, "_trie_walk: text_memo: depths out of order");
        else
            result = PyLong_FromLongLong((long long)m);
    }
done:
    RELEASE_HELD();
    return result;
}

/* classify with its trailing rows and resume given (both required) */
static PyObject *
trie_classify_from(PyObject *self, PyObject *args)
{
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != 11) {
        PyErr_SetString(PyExc_TypeError, "_trie_walk: classify_from takes 11 arguments");
        return NULL;
    }
    return classify_impl(args, 1);
}

static PyMethodDef methods[] = {
    {"walk", trie_walk, METH_VARARGS,
     "walk(first, count, byte, end, table, start, out_idx, out_state, root_first, "
     "root_count[, cmap, width]) -> number of live strings written (see the module's "
     "source)."},
    {"walk_all", trie_walk_all, METH_VARARGS,
     "walk_all(parent, byte, table, start, out[, cmap, width]) -> None: every node's state "
     "(see the source)."},
    {"set_bits", trie_set_bits, METH_VARARGS,
     "set_bits(words, first_token, strings, n_bits) -> None: OR the bits of the strings' "
     "token ids into words (see the source)."},
    {"ahead_rows", trie_ahead_rows, METH_VARARGS,
     "ahead_rows(table, skip, frontier, ahead, budget, out, scratch) -> rows written to out: "
     "the lexer states up to `ahead` bytes past the frontier (see the source)."},
    {"write_rows", trie_write_rows, METH_VARARGS,
     "write_rows(ids, targets, split, rows, lex, cut, exit_byte, sink) -> None: the lazy walk "
     "tables' rows of some lexer states (see the source)."},
    {"write_state", trie_write_state, METH_VARARGS,
     "write_state(rows, state, sink) -> (ids given, written): the walk rows of one built "
     "lexer state written as classify writes those it meets (not written: not built, or no "
     "room; ids may have been given all the same; see the source)."},
    {"subtree_memo", trie_subtree_memo, METH_VARARGS,
     "subtree_memo(first, count, byte, end, parent, min_below, pos, pbyte, depth, size, own, "
     "str, sel, sets) -> count of sets: the subtree memo of classify's walks (see the "
     "source)."},
    {"text_memo", trie_text_memo, METH_VARARGS,
     "text_memo(pbyte, depth, own, kset, flag, next, breaks, pre) -> count of breaks: the "
     "text memo of a subtree memo (see the source)."},
    {"trie_handle", trie_handle, METH_VARARGS,
     "trie_handle(first, count, byte, end, parent, string_node, below_first, below_second, "
     "first_token[, memo]) -> a capsule: classify's per-trie arguments, taken once (classify "
     "and classify_from take it in their place; see the source)."},
    {"classify", trie_classify, METH_VARARGS,
     "classify(handle, table, start, pending, sink, string_map, drop, words, max_reach) -> "
     "(candidates, stopped) as int64 bytearrays: a lazy classifier's walk, bits and "
     "candidates in one call; with a trailing `rows` tuple, the walk tables' rows it meets "
     "are written as it goes: (candidates, stopped, written, count) (see the source)."},
    {"classify_from", trie_classify_from, METH_VARARGS,
     "classify_from(<classify's 9 arguments>, rows, resume) -> (candidates, stops, written, "
     "count): classify with rows, resumable: a sentinel it cannot write is a stop, its "
     "node's string and subtree left; stops are (node, row) int64 pairs, and resume (None: "
     "from start) the stops of the walk before, walked on from (see the source)."},
    {NULL, NULL, 0, NULL},
};

KERNEL_MODULE(_trie_walk, "formcast's compiled vocabulary-trie walk (the compiled build only).")
