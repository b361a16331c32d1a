"""Upper bound of a k-start walk's saving on grammar_bench's c1/c2 cold steps (walk40): the
kernel's memo walk (``_trie_walk.c``'s ``memo_walk_as``, text frames aside) simulated in
Python on the final cut walk table, per start and for the step's new starts together (one pass
carrying their states; a member uniform at a node takes its range and leaves the subtree):
(nodes visited, table look-ups, ranges taken).  Slow (pure Python), a measurement aid only.

    PYTHONPATH=/tmp/fc-base40 python benchmarks/walk40_kstart_bound.py c1_arith 2
"""

import sys

sys.path.insert(0, "/work/walk40/benchmarks")
import numpy as np
from tokenizers import Tokenizer

import grammar_bench as gb

wl = gb.make_workloads()[sys.argv[1]]
tp = gb.tokenizer_path()
tok = Tokenizer.from_file(tp)
doc = tok.encode(wl.docs[0], add_special_tokens=False).ids
ad = gb.FormcastAdapter(tp)
ad.setup()
ad.warmup()
comp = ad.compile(wl)
prog = comp.program
m = ad.matcher(comp)
mask = ad.alloc()
trie = prog.vocab.trie
trie._flat_nodes()
memo = trie._memo
depth = memo.depth.astype(np.int64).tolist()
size = memo.size.tolist()
byte = memo.byte.tolist()
sel = memo.sel.tolist()
sets = memo.sets
n = len(depth)


def walk(table, rows):
    loopc = {}

    def uniform(s, k):
        lp = loopc.get(s)
        if lp is None:
            r = table[s] == s
            bits = np.packbits(r, bitorder="little").view(np.uint64)
            lp = loopc[s] = bits
        return not np.any(sets[k] & ~lp)

    K = len(rows)
    st = [[0] * (memo.max_depth + 2) for _ in range(K)]
    for j in range(K):
        st[j][0] = rows[j]
    i = 0
    visits = 0
    looks = 0
    ranged = 0
    while i < n:
        d = depth[i]
        b = byte[i]
        ss = []
        for j in range(K):
            ps = st[j][d - 1]
            if ps:
                looks += 1
                s = int(table[ps, b])
            else:
                s = 0
            ss.append(s)
        visits += 1
        if not any(ss):
            i += size[i]
            continue
        if size[i] > 1:
            k = sel[i]
            for j in range(K):
                if ss[j] and k >= 0 and uniform(ss[j], k):
                    ranged += 1
                    ss[j] = 0
            if not any(ss):
                i += size[i]
                continue
            for j in range(K):
                st[j][d] = ss[j]
        i += 1
    return visits, looks, ranged


seen = set()
for step in range(int(sys.argv[2])):
    ad.fill(m, mask)
    pos = prog._positions
    new = [s for s in pos._by_start if s not in seen]
    seen |= set(pos._by_start)
    if len(new) >= 2:
        tables = pos._tables()
        rows = [tables.start(s) for s in new]
        singles = [walk(tables.cut, [r]) for r in rows]
        joint = walk(tables.cut, rows)
        print(
            f"step {step} starts {new}: single (visits, lookups, ranges) {singles}; joint {joint}"
        )
    ad.accept(m, doc[step])
