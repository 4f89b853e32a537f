"""Session 33 experiment: benchmarks/prefill.py with attn_prefill_wgmma's 64-row split planned
for the slots of the warp-specialized 64-row kernel (2 blocks an SM, not 4): does the 1 x 1,000
win come from the plan or the kernel?"""
import runpy, sys
from engine.ops import cuda_ops
init = cuda_ops.CudaOps.__init__
def patched(self, *a, **k):
    init(self, *a, **k)
    self._prefill_slots[1] = 2 * self.num_sms
cuda_ops.CudaOps.__init__ = patched
sys.argv = ["prefill.py", *sys.argv[1:]]
runpy.run_path("benchmarks/prefill.py", run_name="__main__")
