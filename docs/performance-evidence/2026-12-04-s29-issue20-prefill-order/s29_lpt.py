# Session 29: the 192-row tiles' blocks at 1 x 4,000 / 8,000 / 3,000 (9 heads, 132 slots, one block an SM) as
# jobs on 132 machines: makespan with no split, and with the top k tile ranks split into parts
# (merge ~2 units, 1 unit a block), the blocks in longest-first (LPT) order or in the grid's rank order.
import heapq
def lpt(items, m=132, ovh=1.0):
    items=sorted(items, reverse=True); h=[0.0]*m
    for w in items:
        t=heapq.heappop(h); heapq.heappush(h, t+w+ovh)
    return max(h)
def inorder(items, m=132, ovh=1.0):
    h=[0.0]*m
    for w in items:
        t=heapq.heappop(h); heapq.heappush(h, t+w+ovh)
    return max(h)
nh=9
for T,q in ((21,4000),(42,8000),(16,3000)):
    L=[min(3*(T-r), -(-q//64)) for r in range(T)]
    base=[l for l in L for _ in range(nh)]
    print(q, "no split", inorder(base), "ideal", sum(x+1 for x in base)/132)
    for k in (3,5,8,12,T):
        for parts in (2,3):
            items=[]
            for r,l in enumerate(L):
                for _ in range(nh):
                    if r<k: items += [l/parts + 2]*parts   # merge cost ~2 units
                    else: items.append(l)
            print(f"   split top {k} ranks in {parts}: LPT {lpt(items):.1f}  rank-order {inorder(sorted(items,key=lambda x:-x) if False else items):.1f}")
