#!/bin/bash
# device check 1 (H200 x2), run as: cd <copy of the tree> && bash run1.sh
# the paths capture and pass the gate; setup before/after; first path numbers
set -u
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
S=$OUT/summary.txt
step() { local name=$1 limit=$2; shift 2; local t=$(date +%s);
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1; local rc=$?;
  echo "$name rc=$rc $(( $(date +%s) - t )) s" >> "$S"; }
{ nvidia-smi topo -m; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 -c "import torch; print(torch.__version__, torch.cuda.nccl.version(), torch.cuda.device_count()); print([n for n in ('one_shot_all_reduce_copy_out','one_shot_all_reduce_out','two_shot_all_reduce_out','two_shot_all_reduce_') if hasattr(torch.ops.symm_mem, n)])"
  python3 -c "import pynvml, pydantic; print('pynvml ok', pydantic.VERSION)"; } > $OUT/env.txt 2>&1
step gpu_paths 150 python3 -m pytest -m gpu tests/launchers/proxy/test_gpu_paths.py -x -q -p no:cacheprovider
step setup 90 python3 -m benchmarks.proxy_setup --model kimi-k2.5 --ranks 2 --repeats 1 --before-root .. --json $OUT/setup.json
step paths_nv 90 python3 -m benchmarks.proxy_paths --model kimi-k2.5 --ranks 2 --rounds 3 --iters 30 --profile --steps 5 --interconnect nvlink --config "sglang default" --config nccl --config "custom allreduce" --json $OUT/paths_nvlink.json
step paths_pcie 60 python3 -m benchmarks.proxy_paths --model kimi-k2.5 --ranks 2 --rounds 3 --iters 30 --interconnect pcie --config nccl --config "custom allreduce" --json $OUT/paths_pcie.json
