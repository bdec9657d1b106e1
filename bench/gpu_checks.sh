#!/usr/bin/env bash
# The checks that need a GPU, in parts that each fit a short session on a lent machine. Run it where
# digideep and its dependencies import (a venv, or PYTHONPATH) and a CUDA device is visible:
#
#   bash bench/gpu_checks.sh OUT_DIR [PART ...]   # parts: tests updates end-to-end deterministic learning
#
# Each part tees its output to OUT_DIR/<part>.log. Times on one H100 with 16 host cores, measured
# where said, else estimated from those:
#   tests         the test files with CUDA cases, 12 workers (more than 210 s: a run stopped there
#                 before the bit-identical CUDA kill-and-resume of tests/pipeline/test_resume.py
#                 finished; give it 5 min)
#   updates       bench_gpu.py --only updates: SAC and TD3 gradient steps/s per update mode, SB3 and
#                 the CUDA-graph ceiling beside them (measured: about 130 s)
#   end-to-end    HalfCheetah SAC through the Runner, acting on the host and on the GPU, replay
#                 sampled on the host and on the GPU: four runs and their ratios (one run measured:
#                 about 45 s; four: 3-4 min)
#   deterministic the same end-to-end run in a deterministic process (--deterministic cannot be
#                 turned off in a process): compare its frames/s with end-to-end's (about 1 min)
#   learning      the learning check beside the speed: SAC on Hopper-v5, 50,000 frames, seeds 0 and 1
#                 side by side, cudagraphs and actions from the host copy (2-4 min). The slow test's
#                 bar is 800 on each seed; the CPU's eager run scored 2730.6 and 1098.4
#                 (docs/measurements.md)
# With no part named, all five run (longer than one 10-minute call: name parts to split them).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bash bench/gpu_checks.sh OUT_DIR [tests|updates|end-to-end|deterministic|learning ...]}
shift
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(tests updates end-to-end deterministic learning)
mkdir -p "$out"
export MUJOCO_GL=${MUJOCO_GL:-egl} PREFECT_SERVER_ANALYTICS_ENABLED=false
python=${PYTHON:-python3}
e2e=(bench/bench_gpu.py --only end-to-end --frames 12000 --learning-starts 2000)
status=0
for part in "${parts[@]}"; do
    case $part in
        tests)
            command=("$python" -m pytest -v -n 12 -p no:cacheprovider -rfEs --tb=short
                tests/agents/test_host_acting.py tests/memory/test_device_replay.py
                tests/agents/test_update_modes.py tests/agents/test_base.py
                tests/pipeline/test_runner.py tests/pipeline/test_resume.py tests/utility/test_machine.py) ;;
        updates) command=("$python" bench/bench_gpu.py --only updates --grad-steps 500 --repeats 3) ;;
        end-to-end) command=("$python" "${e2e[@]}" --acting-device both --replay-device both) ;;
        deterministic) command=("$python" "${e2e[@]}" --deterministic) ;;
        learning)
            command=("$python" bench/bench_learning.py --device cuda --sides digideep --seeds 0 1 --jobs 2
                --cpanel '{"update_mode": "cudagraphs"}' --json "$out/learning.json") ;;
        *) echo "gpu_checks.sh: unknown part '$part'; use tests, updates, end-to-end, deterministic or learning" >&2
           exit 2 ;;
    esac
    echo "== $part: ${command[*]}" | tee "$out/$part.log"
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader \
        >>"$out/$part.log" 2>&1
    start=$SECONDS
    "${command[@]}" 2>&1 | grep --line-buffered -v "settotalmass" | tee -a "$out/$part.log"
    code=${PIPESTATUS[0]}
    echo "== $part: exit $code after $((SECONDS - start)) s" | tee -a "$out/$part.log"
    [ "$code" = 0 ] || status=1
done
exit $status
