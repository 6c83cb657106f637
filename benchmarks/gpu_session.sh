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
#
# Real SGLang (0.5.16, prepared by shared/tools/device-sglang-prepare into .sglwheel1/ and
# .sglwheel2/; the tiny models of shared/data copied into .models/), on one H200:
#   sglang-wheels1  stage .sglwheel1
#   sglang-wheels2  install both into /root/site (flash_ops stripped: no fa3 backend)
#   sglang-probe    what real SGLang prints and where its start goes: import times, SGLang's
#               resolution in servetune's reader (no GPU context), three failing launches
#               (no weights, fa3, topk without steps), timed launches stopped both ways
#   sglang-ray1     stage and install .raywheel1 (shared/tools/device-ray-prepare), Ray's first half
#   sglang-campaign join and install Ray (.raywheel2), then `servetune run --workload sglang` on the
#               tiny models over benchmarks/sglang-h200-tiny.yaml (grid, ASHA, confirm, report)
#   sglang-resume   `servetune run --resume` of that campaign, where the call's time ran out
#   sglang-profile  `servetune profile` of that campaign (after sglang-campaign, same machine,
#               or its folder carried back as runs/sglang-h200); SHAPE='{...}' profiles that
#               config beside the baseline instead of the chosen one
#   sglang-knobs    `servetune knobs --check` against the staged SGLang (0.5.16)
#   sglang-decide   join and install Ray (.raywheel2), then issue 30's campaign: the user's shape
#               (5,4,16) given with --server-arg is the baseline, grid over
#               benchmarks/sglang-h200-shape.yaml, the sequential confirm stage (cap CAP=5) and
#               the speculative reference; LIMIT= seconds (540); sglang-decide-resume goes on
#   sglang-serve    that campaign's best/launch.sh started by hand, one request, /server_info
#               compared with the decision (benchmarks/serve_check.py)
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

# Real SGLang on the tiny models (random weights), TP 1, as device-sglang-prepare says.
TINY=.models/tiny-llama
DRAFT=.models/tiny-llama-eagle3
SGL_FLAGS="--load-format dummy --speculative-draft-load-format dummy --attention-backend triton --sampling-backend pytorch"
SPEC="--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4"
FAST="--cuda-graph-backend-prefill disabled --cuda-graph-bs-decode 1 --skip-server-warmup"

since() { python3 -c "import sys; print(round($EPOCHREALTIME - float(sys.argv[1]), 2))" "$1"; }

with_sglang() {  # the real-SGLang steps: SGLang staged in /root/site
  export PYTHONPATH=/root/site:$PYTHONPATH PATH=/root/site/bin:$PATH HF_HUB_OFFLINE=1
}

sglang_probe() {  # everything under $OUT/probe/, then one tarball (the device returns 8 files)
  local t0 P="$OUT/probe"
  with_sglang
  mkdir -p "$P"
  # 1. imports: the first import writes bytecode (--no-compile), the second is the floor
  for i in 1 2; do
    t0=$EPOCHREALTIME
    python3 -X importtime -c "import sglang.srt.entrypoints.http_server" 2>"$P/importtime$i.txt"
    echo "import http_server #$i: $(since "$t0") s" | tee -a "$OUT/summary.txt"
  done
  t0=$EPOCHREALTIME
  python3 -c "import sglang.srt.managers.scheduler" 2>/dev/null
  echo "import scheduler: $(since "$t0") s" | tee -a "$OUT/summary.txt"
  sort -t'|' -k2 -n -r "$P/importtime2.txt" | head -40 | tee "$P/importtime_top.txt"
  # 2. SGLang's own resolution in servetune's reader, on the GPU machine (nothing skipped),
  #    and no GPU context held by the reader while it lives
  timeout 200 python3 -m benchmarks.sglang_resolve --model "$TINY" --draft "$DRAFT" \
    --out "$P/resolve.json" 2>&1 | cut -c1-400 | tee "$P/resolve.log"
  # 3. three launches that fail, side by side: no weights, a backend not here, a partial shape
  python3 -m benchmarks.sglang_startup --model "$TINY" --draft "$DRAFT" --out "$P/fail" \
    --flags "--attention-backend triton --sampling-backend pytorch $SPEC" \
    --variant noweights= --expect-failure noweights --timeout 150 >"$P/fail1.log" 2>&1 &
  python3 -m benchmarks.sglang_startup --model "$TINY" --draft "$DRAFT" --out "$P/fail" \
    --flags "--load-format dummy --speculative-draft-load-format dummy --sampling-backend pytorch $SPEC" \
    --variant fa3="--attention-backend fa3" --expect-failure fa3 --timeout 150 >"$P/fail2.log" 2>&1 &
  python3 -m benchmarks.sglang_startup --model "$TINY" --draft "$DRAFT" --out "$P/fail" \
    --flags "$SGL_FLAGS" --variant topk="--speculative-eagle-topk 1" --expect-failure topk \
    --timeout 150 >"$P/fail3.log" 2>&1 &
  wait
  cat "$P"/fail?.log
  # 4. timed launches, alone: the fast shape cold then warm, stopped by SIGTERM and SIGKILL
  timeout 300 python3 -m benchmarks.sglang_startup --model "$TINY" --draft "$DRAFT" \
    --out "$P/startup" --flags "$SGL_FLAGS $SPEC" --variant fast="$FAST" --repeat 3 \
    --stop both --timeout 200 2>&1 | tee "$P/startup.log"
  nvidia-smi --query-gpu=memory.used --format=csv | tee -a "$OUT/summary.txt"
  tar czf "$OUT/probe.tgz" -C "$OUT" probe && rm -rf "$P"
}

campaign_outputs() {  # the campaign's log tail, its report and its folder
  tail -45 "$OUT/$1.log"
  python3 -m tuner report runs/sglang-h200 >"$OUT/sglang_report.txt" 2>&1
  tar czf "$OUT/sglang_campaign.tgz" --exclude='*.trace.json.gz' --exclude='nccl-*.log' runs/sglang-h200
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
sglang-wheels1)
  mkdir -p "$STAGE" && cp .sglwheel1/* "$STAGE"/ && echo "sglang-wheels1 ok" ;;
sglang-wheels2)
  mkdir -p /root/site && python3 -m pip install -q --no-index --no-deps --no-compile \
      --target /root/site "$STAGE"/*.whl .sglwheel2/*.whl &&
    tar -C /root/site -xJf .sglwheel2/site-stripped.tar.xz && rm -f "$STAGE"/*.whl &&
    with_sglang && python3 -c "import sglang; print('sglang', sglang.__version__)" ;;
sglang-probe)
  sglang_probe ;;
sglang-ray1)
  mkdir -p "$STAGE" /root/pylibs && cp .raywheel1/* "$STAGE"/ &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/pylibs \
      $(ls "$STAGE"/*.whl) && rm -f "$STAGE"/*.whl && echo "sglang-ray1 ok" ;;
sglang-campaign)
  cat "$STAGE"/ray.part.aa .raywheel2/ray.part.ab >"$STAGE"/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl &&
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/pylibs \
      "$STAGE"/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl || exit 1
  with_sglang
  step sglang_campaign 560 python3 -m tuner run --model "$TINY" --draft-model "$DRAFT" \
    --speculative-algorithm EAGLE3 --server-arg "--attention-backend triton --sampling-backend pytorch" \
    --space benchmarks/sglang-h200-tiny.yaml --search grid --samples 8 --scheduler asha \
    --metric verify_ms --mode min --weights dummy --confirm 2 --confirm-top 1 --rounds 3 \
    --input-len 64 --output-len 64 --requests-per-round 8 --no-dashboard --out runs/sglang-h200
  campaign_outputs sglang_campaign ;;
sglang-decide|sglang-decide-resume)  # issue 30's campaign: the user's shape as baseline
  name=${1//-/_}
  if [ "$1" = sglang-decide ]; then
    cat "$STAGE"/ray.part.aa .raywheel2/ray.part.ab >"$STAGE"/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl &&
      python3 -m pip install -q --no-index --no-deps --no-compile --target /root/pylibs \
        "$STAGE"/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl || exit 1
    set -- python3 -m tuner run --model "$TINY" --draft-model "$DRAFT" \
      --speculative-algorithm EAGLE3 --server-arg "--load-format dummy \
      --speculative-draft-load-format dummy --attention-backend triton --sampling-backend pytorch \
      --speculative-num-steps 5 --speculative-eagle-topk 4 --speculative-num-draft-tokens 16" \
      --space benchmarks/sglang-h200-shape.yaml --search grid --samples 9 --rounds 2 \
      --metric output_throughput --confirm "${CAP:-5}" --confirm-top 1 --input-len 64 \
      --output-len 64 --requests-per-round 8 --no-dashboard --out runs/sglang-decide
  else
    set -- python3 -m tuner run --resume runs/sglang-decide
  fi
  with_sglang
  step "$name" "${LIMIT:-540}" "$@"
  tail -60 "$OUT/$name.log"
  python3 -m tuner report runs/sglang-decide >"$OUT/sglang_decide_report.txt" 2>&1
  tar czf "$OUT/sglang_decide.tgz" --exclude='*.trace.json.gz' --exclude='nccl-*.log' runs/sglang-decide ;;
sglang-serve)  # best/launch.sh of that campaign started by hand, one request, /server_info
  with_sglang
  python3 -m benchmarks.serve_check runs/sglang-decide --out "$OUT/serve_check.json" \
    --timeout 300 2>&1 | tee "$OUT/serve_check.log" | tail -30 ;;
sglang-resume)
  with_sglang
  step sglang_resume 560 python3 -m tuner run --resume runs/sglang-h200
  campaign_outputs sglang_resume ;;
sglang-profile)  # the baseline and the chosen config; with a shape given, the baseline and it
  with_sglang
  step sglang_profile 450 python3 -m tuner profile runs/sglang-h200 --steps 20 \
    ${SHAPE:+--label shape --config "$SHAPE"}
  tail -30 "$OUT/sglang_profile.log"
  tar czf "$OUT/sglang_profile.tgz" --exclude='*.trace.json.gz' runs/sglang-h200/profile ;;
sglang-knobs)
  with_sglang
  step sglang_knobs 200 python3 -m tuner knobs --check --python python3
  tail -40 "$OUT/sglang_knobs.log" ;;
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
  sed -n '2,/^set -u/p' "$0" | sed '$d'  # the header
  exit 2 ;;
esac
