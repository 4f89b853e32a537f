"""Session 34: is the float32 whole-graph test's error run-to-run noise, and on which side?
First-token logits of the test's 1,025- and 3,000-token prompts, 4 times each through the
graphed and the eager engine (the test's settings); prints each run's error against the
first eager run, and against the same engine's first run."""
import sys
import torch
from tests.gpu.test_model_cuda import first_token_logits, rel, MODEL
from engine import LLM

dtype = sys.argv[1] if len(sys.argv) > 1 else "float32"
settings = dict(backend="cuda", dtype=dtype, kv_cache_tokens=1 << 15, max_num_batched_tokens=4096,
                max_model_len=8192)
eager, graphed = LLM(MODEL, enforce_eager=True, **settings), LLM(MODEL, **settings)
print("tf32 matmul:", torch.backends.cuda.matmul.allow_tf32, "cudnn tf32:", torch.backends.cudnn.allow_tf32)


def cold_logits(llm, p):
    assert llm.reset_prefix_cache()
    return first_token_logits(llm, p)


for n in (1025, 3000, 600, 1025):
    p = [(29 * n + 7 * j) % 20000 + 30 for j in range(n)]
    e = [cold_logits(eager, p) for _ in range(4)]
    g = [cold_logits(graphed, p) for _ in range(4)]
    print(f"{dtype} n={n}: eager vs eager[0] {[f'{rel(x, e[0]):.2e}' for x in e]}; "
          f"graphed vs graphed[0] {[f'{rel(x, g[0]):.2e}' for x in g]}; graphed vs eager[0] "
          f"{[f'{rel(x, e[0]):.2e}' for x in g]}")

# The test's order, twice: each prompt's error against the eager engine's.
lengths = [5, 17, 600, 1025, 2100, 3000, 4000, 5000]
for round_ in range(2):
    errs = []
    for n in lengths:
        p = [(29 * n + 7 * j) % 20000 + 30 for j in range(n)]
        errs.append(rel(cold_logits(graphed, p), cold_logits(eager, p)))
    print(f"{dtype} test order, round {round_}: " + ", ".join(f"{n}:{e:.2e}" for n, e in zip(lengths, errs)))
