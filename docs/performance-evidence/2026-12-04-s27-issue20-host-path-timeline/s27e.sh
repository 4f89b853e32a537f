#!/usr/bin/env bash
# Session 27, call 5: is the GPU host's Python slower, or the engine's CUDA process? The stubbed
# host path (s27_crit.py, torch backend on the CPU, no CUDA) against the same on the dev host
# (~305 us arrival -> forward); then the CUDA engine's marks (s27_host.py) with one OpenMP thread.
source benchmarks/device_env.sh
lscpu | grep -E "Model name|MHz|^CPU\(s\)" > $L/cpu.txt; cat /proc/cpuinfo | grep MHz | head -4 >> $L/cpu.txt; cat $L/cpu.txt
for i in 1 2; do CUDA_VISIBLE_DEVICES= timeout 100 python3 .whl/s27_crit.py 4000 > $L/crit-$i.log 2>&1; tail -1 $L/crit-$i.log; done
timeout 100 python3 .whl/s27_host.py cuda 4000 > $L/host-default.log 2>&1; echo default; tail -1 $L/host-default.log
OMP_NUM_THREADS=1 timeout 100 python3 .whl/s27_host.py cuda 4000 > $L/host-omp1.log 2>&1; echo omp1; tail -1 $L/host-omp1.log
taskset -c 3 timeout 100 python3 .whl/s27_host.py cuda 4000 > $L/host-core3.log 2>&1; echo core3; tail -1 $L/host-core3.log
tar -czf $OUT/logs.tgz -C $OUT logs
