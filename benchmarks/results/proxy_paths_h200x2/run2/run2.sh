#!/bin/bash
# run as: cd <copy of the tree> && bash run2.sh (H200 x2; .whl holds pydantic and its deps)
# device check 2: paths again after the warm-up change; setup before/after x2; per-path table
set -u
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
S=$OUT/summary.txt
step() { local name=$1 limit=$2; shift 2; local t=$(date +%s);
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc $(( $(date +%s) - t )) s" >> "$S"; }
step gpu_tests 120 python3 -m pytest -m gpu tests/launchers/proxy/test_gpu_paths.py tests/launchers/proxy/test_gpu.py -k "paths or tiny_captures or kimi_two or profile_on_gpu" -x -q -p no:cacheprovider
step setup 75 python3 -m benchmarks.proxy_setup --model kimi-k2.5 --ranks 2 --repeats 2 --before-root .. --json $OUT/setup.json
step paths_nv 110 python3 -m benchmarks.proxy_paths --model kimi-k2.5 --ranks 2 --rounds 3 --iters 30 --profile --steps 5 --interconnect nvlink --config "sglang default" --config nccl --config "nccl graph-mixing 0" --config "nccl LL" --config "custom allreduce" --config "torch symm-mem" --json $OUT/paths_nvlink.json
step paths_pcie 70 python3 -m benchmarks.proxy_paths --model kimi-k2.5 --ranks 2 --rounds 3 --iters 30 --interconnect pcie --config "sglang default" --config nccl --config "nccl graph-mixing 0" --config "nccl LL" --config "custom allreduce" --json $OUT/paths_pcie.json
grep -E "passed|failed" $OUT/gpu_tests.log | tail -2; tail -2 $OUT/setup.log; tail -7 $OUT/paths_nv.log; tail -6 $OUT/paths_pcie.log; cat $S
