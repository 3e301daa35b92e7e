#!/usr/bin/env bash
# The policies on this machine's GPUs, inside the rps-serve image's gpu-check stage, in the form of the CPU stack's
# `rps-serve demo`: first a profile of the served model (isolated runs on its engine, as model.json sets
# it up) to train the repository's cost models on; then for each policy a fresh tritonserver on the
# repository (RPS_POLICY selects the scheduler), the same paired seeds of a mixed text/image/video
# workload replayed through rps_ensemble with tritonclient's gRPC streaming; then the steady-state TTFT
# per modality and RPS's ratios to each baseline with their 95% intervals.
#
#   docker build -f docker/Dockerfile --target gpu-check -t rps-serve:llava-onevision-qwen2-7b-check .
#   docker run --rm --gpus all --shm-size 16g rps-serve:llava-onevision-qwen2-7b-check tools/gpu_check.sh
#
# Settings (environment):
#   MODEL      model directory to serve; default: a tiny random LLaVA-OneVision (the image's family)
#              built here, no weights needed. The client writes prompts with the model's own chat template
#              and counts placeholder tokens with its own processor, so any model whose processor
#              has a chat template will do (Qwen2-VL, LLaVA-OneVision, ...).
#   PROFILE (1)  profile the model once per OUT (a few minutes) and train the repository's cost models on
#              it; 0, or a profile that fails (a tensor-parallel model), keeps the repository's (the
#              image's: the published H100 reference fits), and the report says which it served
#   POLICIES ("fcfs vllm-priority rps")  REPEATS (3)  paired seeds, each policy's on one server
#   RATE (4)  REQUESTS (200)  MIX (mixed-iii)  SEED (0)   the workload
#   OUT (./gpu-check)      profile, records, server logs
#   REPOSITORY             model repository (default: the image's, /opt/rps-serve/model_repository)
#   TRITONSERVER (tritonserver), TRITONSERVER_ARGS (extra flags), HTTP_PORT/GRPC_PORT/METRICS_PORT (8000-8002)
#   READY_TIMEOUT (1800)   seconds to wait for the server to load the model
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repository=${REPOSITORY:-/opt/rps-serve/model_repository}
out=${OUT:-./gpu-check}
rate=${RATE:-4}
requests=${REQUESTS:-200}
mix=${MIX:-mixed-iii}
seed=${SEED:-0}
repeats=${REPEATS:-3}
read -r -a policies <<<"${POLICIES:-fcfs vllm-priority rps}"
http_port=${HTTP_PORT:-8000}
grpc_port=${GRPC_PORT:-8001}
metrics_port=${METRICS_PORT:-8002}
ready_timeout=${READY_TIMEOUT:-1800}
read -r -a extra_args <<<"${TRITONSERVER_ARGS:-}"
mkdir -p "$out"

if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
else
    echo "warning: nvidia-smi not found; the engine will not see a GPU" >&2
fi

engine_args=${RPS_ENGINE_ARGS:-}
if [[ -z ${MODEL:-} ]]; then
    MODEL=$out/tiny-llava-onevision
    # 384x384 images (1,485 placeholder tokens: a base view and one crop) and 8-frame videos (1,569).
    [[ -f $MODEL/config.json ]] || rps-serve make-tiny-model "$MODEL" --family llava-onevision \
        --image-size 384 --video-size 384 --video-frames 8
    # The image's model.json is written for its real model: fit the engine to the tiny one.
    engine_args=${engine_args:-'{"tensor_parallel_size": 1, "max_model_len": 8192}'}
fi

server_pid=
stop_server() {
    if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
        kill -TERM "$server_pid"
        wait "$server_pid" || true
    fi
    server_pid=
}
trap stop_server EXIT

wait_ready() {
    local deadline=$((SECONDS + ready_timeout))
    until python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$http_port/v2/health/ready', timeout=2)" 2>/dev/null; do
        if ! kill -0 "$server_pid" 2>/dev/null; then
            echo "tritonserver exited; see $1" >&2
            return 1
        fi
        if ((SECONDS > deadline)); then
            echo "tritonserver not ready after ${ready_timeout}s; see $1" >&2
            return 1
        fi
        sleep 2
    done
}

profile=$out/profile.jsonl
if [[ ${PROFILE:-1} != 0 ]]; then
    if [[ ! -f $profile ]]; then
        echo "profiling $MODEL (isolated runs, log $out/profile.log)"
        rm -f "$profile.partial"
        if RPS_MODEL=$MODEL RPS_ENGINE_ARGS=$engine_args rps-serve profile --repository "$repository" \
            --repeats 2 --out "$profile.partial" >"$out/profile.log" 2>&1; then
            mv "$profile.partial" "$profile"
        else
            echo "warning: profiling failed (see $out/profile.log); the repository's cost models stay" >&2
        fi
    fi
    if [[ -f $profile ]]; then
        rps-serve train --profile-data "$profile" --out "$repository"
    fi
fi

run=0
records=()
for policy in "${policies[@]}"; do
    log=$out/tritonserver-$policy.log
    echo "$policy: starting tritonserver (log $log)"
    RPS_POLICY=$policy RPS_MODEL=$MODEL RPS_ENGINE_ARGS=$engine_args "${TRITONSERVER:-tritonserver}" \
        --model-repository="$repository" \
        --http-port="$http_port" --grpc-port="$grpc_port" --metrics-port="$metrics_port" \
        --allow-metrics=true \
        --backend-config=python,shm-default-byte-size=67108864 \
        --backend-config=python,shm-growth-byte-size=67108864 \
        "${extra_args[@]}" >"$log" 2>&1 &
    server_pid=$!
    wait_ready "$log"
    for ((repeat = 0; repeat < repeats; repeat++)); do
        echo "$policy: replaying $requests requests ($mix, $rate req/s, seed $((seed + repeat)))"
        python3 "$here/gpu_check.py" replay --url "127.0.0.1:$grpc_port" --model "$MODEL" --mix "$mix" \
            --rate "$rate" --requests "$requests" --seed "$((seed + repeat))" --run "$run" \
            --out "$out/$policy-$repeat.npz"
        records+=("$out/$policy-$repeat.npz")
        run=$((run + 1))
    done
    stop_server
done

python3 "$here/gpu_check.py" table --repository "$repository" "${records[@]}"
