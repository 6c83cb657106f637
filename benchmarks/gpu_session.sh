#!/usr/bin/env bash
# The GPU measurements of BENCHMARKS.md, as run on a machine with 2 H200s (NV18), NCCL 2.28.9,
# torch 2.11, Python 3.12, no internet: `bash benchmarks/gpu_session.sh STEP` from the repo
# root, raw outputs into $OUT (default ./gpu-out). NVLink multicast stays off throughout.
#
# Ray and the Python packages the machine lacks come as wheels (prepared elsewhere by
# shared/tools/device-ray-prepare into .raywheel1/ and .raywheel2/): `wheels1` installs
# everything but Ray from .raywheel1 and stages Ray's first half; `wheels2` joins Ray's halves
# and installs it. NVIDIA's example tuner plugin is built from NCCL's own source of the
# version torch loads (v2.28.9-1, ext-tuner/example), unpacked in .nccl-tuner-example/
# (never part of this repository), built from a scratch copy with one fix: NCCL hands the
# cost table over as a flat float[algorithms][protocols] cast to float**, and that version's
# example indexes it as an array of pointers, so it dies of SIGSEGV on the first collective
# (NVIDIA/nccl#1974; the example of 2.29.7 casts the table back, as the step does).
#
# Steps:
#   wheels1     stage and install the wheels of .raywheel1 (Ray's first half staged)
#   tests       the gpu-marked tests at 2 ranks (every allreduce path captures and passes the gate)
#   plugin      build the example tuner plugin; benchmarks/tuner_plugin_check.py with it
#   wheels2     join and install Ray (.raywheel2)
#   runs        servetune run on the proxy, Kimi-K2.5 shape, verify-campaign, ASHA + confirm,
#               over NVLink and with --interconnect pcie
#   landscape   the 36-point grid of benchmarks/landscape-nvlink.yaml with --interconnect pcie,
#               turned into a measured search-efficiency landscape
#   landscape-nccl  the same grid over NVLink with every allreduce on NCCL
#               (benchmarks/landscape-nvlink-nccl.yaml): where the NCCL knobs act
# With SGLang staged in /root/site (shared/tools/device-sglang-prepare, its calls A and B):
#   native-tests      the gpu-marked native-mode tests (every TP 2 path through SGLang's own
#                     GroupCoordinator captures and passes the gate; which communicator served)
#   native-paths-nvlink, native-paths-pcie   benchmarks/proxy_paths.py in both modes, Kimi-K2.5
#                     shape: native vs emulated verify, compute and exposed ms per path
#   pvs-proxy, pvs-server, pvs-compare   benchmarks/proxy_vs_server.py: 12 settings on the
#                     proxy (native) and on real SGLang at TP 2; run pvs-server again until it
#                     says nothing is left (each call measures for 9 minutes at most). The model
#                     folders come from `python -m benchmarks.proxy_vs_server prepare --out
#                     .proxy-vs-server` run beforehand anywhere, that folder carried; its
#                     rows.jsonl is copied to $OUT after each call (carry it back in to resume
#                     on a fresh machine)
# The proxy steps above pin --proxy-comm emulated: their numbers in BENCHMARKS.md are the
# emulated paths'.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 RAY_AUTH_MODE=disabled
export PYTHONPATH=/root/pylibs:$PWD
STAGE=/root/stage
PLUGIN=$STAGE/libnccl-tuner-example.so
# The proxy with Kimi-K2.5's shapes at TP 2: 15 replays per graph per round keep a trial near
# 10 s (6 s of it start-up: torch import, NCCL, capture).
PROXY=(--model-config kimi-k2.5 --iters 15 --rounds 3 --no-dashboard --proxy-comm emulated)  # the dashboard needs packages this machine lacks
SGL=(env PYTHONPATH=/root/site:$PYTHONPATH PATH=/root/site/bin:$PATH HF_HUB_OFFLINE=1)  # SGLang staged
PVS=.proxy-vs-server

step() {  # step NAME LIMIT_S COMMAND...: output to $OUT/NAME.log, a summary line
  local name=$1 limit=$2 began rc
  shift 2
  began=$(date +%s)
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc=$?
  echo "$name rc=$rc $(($(date +%s) - began)) s" | tee -a "$OUT/summary.txt"
}

# measure_landscape STEP LIMIT_S SPACE NAME MACHINE [RUN ARGS...]: the space's full grid, one
# round per point, turned into a landscape table for benchmarks/search_efficiency.py.
measure_landscape() {
  local step=$1 limit=$2 space=$3 name=$4 machine=$5 log=${1//-/_}
  shift 5
  step "$log" "$limit" python3 -m tuner run --space "$space" --search grid --samples 36 \
    --scheduler fifo --confirm 0 --model-config kimi-k2.5 --iters 15 --rounds 1 \
    --no-dashboard --proxy-comm emulated --out "runs/landscape-$name" "$@"
  python3 -m benchmarks.landscape_table "runs/landscape-$name" --out "$OUT/$name.csv" \
    --name "$name" --machine "$machine" --command "bash benchmarks/gpu_session.sh $step"
  tail -5 "$OUT/$log.log"
  tar czf "$OUT/$log.tgz" --exclude='*.trace.json.gz' "runs/landscape-$name"
}

case "${1:-}" in
wheels1)
  mkdir -p "$STAGE" /root/pylibs && cp .raywheel1/* "$STAGE"/ &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/pylibs \
      $(ls "$STAGE"/*.whl) && echo "wheels1 ok" ;;
tests)
  step gpu_tests 240 python3 -m pytest -m gpu tests/launchers/proxy/test_gpu_paths.py tests/launchers/proxy/test_gpu.py -q -p no:cacheprovider -rs -x
  tail -3 "$OUT/gpu_tests.log" ;;
plugin)
  rm -rf "$STAGE/tuner-example" && mkdir -p "$STAGE" &&
    cp -r .nccl-tuner-example/ext-tuner/example "$STAGE/tuner-example" &&
    sed -i 's/collCostTable\[config->algorithm\]\[config->protocol\]/((float (*)[NCCL_NUM_PROTOCOLS])collCostTable)[config->algorithm][config->protocol]/g' \
      "$STAGE/tuner-example/plugin.c" &&
    (cd "$STAGE/tuner-example" && gcc -Inccl -fPIC -shared -o "$PLUGIN" plugin.c) &&
    step tuner_plugin 240 python3 -m benchmarks.tuner_plugin_check --plugin "$PLUGIN" \
      --model-config kimi-k2.5 --pin NCCL_PROTO=LL --pin NCCL_MAX_NCHANNELS=8 --out "$OUT/plugin"
  tail -12 "$OUT/tuner_plugin.log" ;;
wheels2)
  cat "$STAGE"/ray.part.aa .raywheel2/ray.part.ab >"$STAGE"/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/pylibs \
      "$STAGE"/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl && echo "wheels2 ok" ;;
runs)
  for regime in nvlink pcie; do
    step "run_$regime" 280 python3 -m tuner run "${PROXY[@]}" --interconnect "$regime" \
      --samples 8 --confirm 3 --confirm-top 1 --out "runs/kimi-$regime"
    tail -16 "$OUT/run_$regime.log"
  done
  tar czf "$OUT/runs.tgz" --exclude='*.trace.json.gz' runs/kimi-nvlink runs/kimi-pcie ;;
landscape)
  measure_landscape landscape 400 benchmarks/landscape-nvlink.yaml h200x2-p2p-off \
    "2x H200 (NV18), --interconnect pcie (NCCL_P2P_DISABLE=1), proxy kimi-k2.5 TP 2" \
    --interconnect pcie ;;
landscape-nccl)
  measure_landscape landscape-nccl 480 benchmarks/landscape-nvlink-nccl.yaml h200x2-nvlink-nccl \
    "2x H200 (NV18), NVLink, every allreduce on NCCL, proxy kimi-k2.5 TP 2" ;;
native-tests)
  step native_tests 560 "${SGL[@]}" python3 -m pytest -m gpu tests/launchers/proxy/test_gpu_native.py \
    -q -p no:cacheprovider -rs -x
  tail -3 "$OUT/native_tests.log" ;;
native-paths-nvlink|native-paths-pcie)
  regime=${1#native-paths-}
  step "native_paths_$regime" 560 "${SGL[@]}" python3 -m benchmarks.proxy_paths --model kimi-k2.5 \
    --ranks 2 --interconnect "$regime" --proxy-comm emulated --proxy-comm native --rounds 4 \
    --iters 30 --json "$OUT/native_paths_$regime.json" --out "/tmp/native-paths-$regime"
  tail -16 "$OUT/native_paths_$regime.log" ;;
pvs-proxy|pvs-server)
  step "${1//-/_}" 580 "${SGL[@]}" python3 -m benchmarks.proxy_vs_server measure \
    --side "${1#pvs-}" --out "$PVS" --budget 520
  cp "$PVS/rows.jsonl" "$OUT/pvs_rows.jsonl"
  tail -3 "$OUT/${1//-/_}.log" ;;
pvs-compare)
  step pvs_compare 60 python3 -m benchmarks.proxy_vs_server compare --out "$PVS"
  cp "$PVS/verdict.json" "$OUT/pvs_verdict.json"
  tail -14 "$OUT/pvs_compare.log" ;;
*)
  sed -n '2,40p' "$0"
  exit 2 ;;
esac
