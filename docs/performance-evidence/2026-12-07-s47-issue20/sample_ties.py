"""Session 47: where the CUDA sampler and the torch reference part on logits with ties.
Logits in quarter steps (as tests/gpu/test_kernels.py's tie test), top_k 5 and 50, bf16 and
float32; for each row where they draw different tokens: the two tokens, each one's scaled
logit, uniform and Gumbel value (torch on the GPU and on the CPU), whether each reference
keeps it, and how many tokens each keeps."""
import dataclasses
import sys

import torch

sys.path[:0] = [".", "tests"]
from engine.ops.cuda_ops import CudaOps  # noqa: E402
from engine.ops.torch_ops import TorchOps, filter_logits, uniform_noise  # noqa: E402
from sampling_support import sampling_tensors  # noqa: E402

ops, ref = CudaOps(), TorchOps()
B, V = 256, 49152
for dtype in (torch.bfloat16, torch.float32):
    for k in (5, 50):
        for rnd in range(3):
            logits = ((torch.randn(B, V, device="cuda") * 12).round() / 4).to(dtype)
            s = sampling_tensors(B, 0.9, k)
            mine, gpu_ref = ops.sample(logits, s), ref.sample(logits, s)
            cpu_s = dataclasses.replace(s, **{f.name: getattr(s, f.name).cpu() for f in dataclasses.fields(s)
                                              if torch.is_tensor(getattr(s, f.name))})
            cpu_ref = ref.sample(logits.cpu(), cpu_s)
            rows = torch.nonzero(mine != gpu_ref).flatten().tolist()
            print(f"{dtype} k={k} round {rnd}: {len(rows)} rows differ from the GPU reference, "
                  f"{(gpu_ref.cpu() != cpu_ref).sum().item()} GPU reference rows from the CPU one")
            for r in rows[:4]:
                x = logits[r:r + 1].float()
                sc = x / 0.9
                keep_gpu = torch.isfinite(filter_logits(sc, s.top_k[r:r + 1], s.top_p[r:r + 1]))[0]
                u = uniform_noise(s.seeds[r:r + 1], s.counters[r:r + 1], V)[0]
                g_gpu = sc[0] - torch.log(-torch.log(u))
                g_cpu = sc[0].cpu() - torch.log(-torch.log(u.cpu()))
                print(f"  row {r}: kernel {mine[r].item()}, reference {gpu_ref[r].item()}; kept {keep_gpu.sum().item()}")
                for t in (mine[r].item(), gpu_ref[r].item()):
                    print(f"    token {t}: scaled {sc[0, t].item():.8g} u {u[t].item():.10g} v gpu {g_gpu[t].item():.10g} "
                          f"v cpu {g_cpu[t].item():.10g} kept {bool(keep_gpu[t])}")
