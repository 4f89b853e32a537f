// Session 40 probe (compiled here, not run): does ptxas let code after setmaxnreg.inc use more
// registers than the launch bound's 64K / 384 = 168? Build and read the highest register:
//   nvcc -arch=sm_90a -cubin -O3 -Xptxas -v -o probe.cubin registers_past_the_launch_bound.cu
//   cuobjdump -sass probe.cubin | grep -oE '\bR[0-9]+\b' | sort -t R -k1.2 -n | tail -1
// CUDA 13.0: "Used 168 registers", no spills, and the SASS names R211: 200 live accumulators
// held after setmaxnreg.inc 232. So gemm_tma's multiplying code (R167 at most) is not capped
// at 168; it needs no more.
extern "C" __global__ void __launch_bounds__(384, 1) probe(float* out, const float* in, int n) {
    if (threadIdx.x / 128 == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float acc[200];
#pragma unroll
    for (int i = 0; i < 200; ++i) acc[i] = in[i * 384 + threadIdx.x];
    for (int it = 0; it < n; ++it) {
#pragma unroll
        for (int i = 0; i < 200; ++i) acc[i] = acc[i] * acc[(i + 7) % 200] + 1.0f;
    }
#pragma unroll
    for (int i = 0; i < 200; ++i) out[i * 384 + threadIdx.x] = acc[i];
}
