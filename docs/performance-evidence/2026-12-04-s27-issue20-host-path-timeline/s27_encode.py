import sys, timeit, random, numpy as np
from array import array
ids = [random.randrange(100, 40000) for _ in range(1000)]
vocab = 49152
def old(ids):
    if not set(map(type, ids)) <= {int, bool} and not all(isinstance(t, int) for t in ids): raise TypeError
    values = np.array(ids, np.int64)
    if values.min() < 0 or values.max() >= vocab: raise ValueError
    a = values.astype(np.int32)
    return list(ids), a
def new(ids):
    values = np.frombuffer(array("q", ids), np.int64)
    if values.size and (values.min() < 0 or values.max() >= vocab): raise ValueError
    a = values.astype(np.int32)
    return a.tolist(), a
res = {"old": [], "new": []}
for r in range(15):
    for f in (old, new):
        res[f.__name__].append(timeit.timeit(lambda: f(ids), number=500)/500*1e6)
for k, v in res.items(): print(k, "min", round(min(v), 1), "median", round(sorted(v)[len(v)//2], 1))
