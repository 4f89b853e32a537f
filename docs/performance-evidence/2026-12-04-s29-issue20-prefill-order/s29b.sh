#!/usr/bin/env bash
# Session 29, call 2: the host's path to the first attention launch, finer marks (s29_host.py), twice.
source benchmarks/device_env.sh
for i in 1 2; do timeout 120 python3 .whl/s29_host.py 4000 8000 > $L/host-$i.log 2>&1; echo "rc=$?"; done
paste $L/host-1.log $L/host-2.log
tar -czf $OUT/logs.tgz -C $OUT logs
