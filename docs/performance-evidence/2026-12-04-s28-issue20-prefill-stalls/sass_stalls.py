import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]; data = rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
stall_cols = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
tot = sum(int(r[ix["Warp Stall Sampling (All Samples)"]]) for r in data)
print("total samples", tot, "instructions", len(data))
agg = {}
for h in stall_cols:
    agg[h] = sum(int(r[ix[h]]) for r in data)
print(sorted(((v, k) for k, v in agg.items()), reverse=True)[:12])
top = sorted(range(len(data)), key=lambda i: -int(data[i][ix["Warp Stall Sampling (All Samples)"]]))[:int(sys.argv[2])]
for i in sorted(top):
    r = data[i]
    s = int(r[ix["Warp Stall Sampling (All Samples)"]])
    reasons = sorted(((int(r[ix[h]]), h[6:]) for h in stall_cols if int(r[ix[h]]) > 0), reverse=True)[:3]
    print(f"{i:5d} {s:6d} {100*s/tot:5.1f}% {r[ix['Source']].strip()[:60]:60s} {reasons}")
