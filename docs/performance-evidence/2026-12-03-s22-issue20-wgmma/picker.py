# Offline: how well does each tile-picking rule do on the measured sweep (call 1's gemm.log)?
import math, re, sys
log = open("/work/.device/1/logs/gemm.log").read().splitlines()
names = log[0].split("us")[-1].split()
# header tokens: "16x64x10k1", "wg", "64x64x8k1", ... -> rebuild tile names
tiles, i = [], 0
toks = log[0].split(",")[1].split()[1:]
while i < len(toks):
    if toks[i] == "wg": tiles.append("wg " + toks[i + 1]); i += 2
    elif toks[i] == "cuBLAS": i += 1
    else: tiles.append(toks[i]); i += 1
regs = {}
for line in open("/tmp/s22/regs.txt"):
    n, r = line.split()
    m = re.match(r"gemm_(wg_)?bf16_(\d+)x(\d+)x(\d+)_k(\d+)", n)
    regs[("wg " if m[1] else "") + f"{m[2]}x{m[3]}x{m[4]}k{m[5]}"] = int(r)
def parse(t):
    wg = t.startswith("wg ")
    bm, bn, rest = t.split()[-1].split("x")
    s, k = rest.split("k")
    return wg, int(bm), int(bn), int(s), int(k)
def smem(t):
    wg, bm, bn, s, k = parse(t)
    return s * (bm + bn) * 128 + 1024 if wg else s * (bm + bn) * 144
def bpsm(t):
    by_smem = 233472 // (smem(t) + 1024)
    by_regs = 65536 // (math.ceil(regs[t] / 8) * 8 * 128)
    return max(0, min(by_smem, by_regs, 32))
rows = []
for line in log[1:]:
    m = re.match(r"(\d+) x (\d+) -> (\d+)\s+(.*)", line)
    if not m: continue
    M, K, N = int(m[1]), int(m[2]), int(m[3])
    vals = [float(v.rstrip("*")) for v in m[4].split()]
    rows.append((M, K, N, dict(zip(tiles, vals[:-1])), vals[-1]))
def rule_waves_chunks_area(M, N, K, t):
    wg, bm, bn, s, k = parse(t)
    blocks = math.ceil(M / bm) * math.ceil(N / bn) * k
    return math.ceil(blocks / (132 * bpsm(t))), math.ceil(K // 64 / k), bm * bn
def rule_waves_chunks_bytes(M, N, K, t):
    wg, bm, bn, s, k = parse(t)
    blocks = math.ceil(M / bm) * math.ceil(N / bn) * k
    return math.ceil(blocks / (132 * bpsm(t))), math.ceil(K // 64 / k), blocks * (bm + bn) * (K // k)
def rule_bytes_per_sm(M, N, K, t):
    # the bytes the busiest SM pulls in: blocks per SM (rounded up) x a block's bytes, then total
    wg, bm, bn, s, k = parse(t)
    blocks = math.ceil(M / bm) * math.ceil(N / bn) * k
    per_sm = math.ceil(blocks / 132)
    return per_sm * (bm + bn) * (K // k), blocks * (bm + bn) * (K // k)
for name, rule, pool in [("HEAD rule, mma only", rule_waves_chunks_area, [t for t in tiles if not t.startswith("wg")]),
                         ("HEAD rule, all tiles", rule_waves_chunks_area, tiles),
                         ("waves, chunks, bytes", rule_waves_chunks_bytes, tiles),
                         ("bytes per SM, bytes", rule_bytes_per_sm, tiles),
                         ("bytes per SM, mma only", rule_bytes_per_sm, [t for t in tiles if not t.startswith("wg")])]:
    regrets = []
    out = []
    for M, K, N, times, cublas in rows:
        pick = min(pool, key=lambda t: rule(M, N, K, t))
        best = min(times.values())
        regrets.append(times[pick] / best)
        out.append(f"{M}x{K}->{N}: {pick} {times[pick]:.2f} (best {best:.2f}, cuBLAS {cublas:.2f})")
    print(f"{name}: mean regret {sum(regrets)/len(regrets):.3f}, worst {max(regrets):.2f}, sum of picked us {sum(r[3][min(pool, key=lambda t: rule(r[0], r[2], r[1], t))] for r in rows):.1f}")
    if "-v" in sys.argv: print("\n".join("   " + o for o in out))
print("best possible sum:", round(sum(min(r[3].values()) for r in rows), 1), " cuBLAS sum:", round(sum(r[4] for r in rows), 1))
