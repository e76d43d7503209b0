#!/bin/sh
# gpu_retrain.sh -- the one command of the GPU retrain (train/GPU.md): train/gpu_retrain.py run
# with the data of train/gpu_carry.sh (gpu-data/) and the packed files under $OUT. Arguments are
# passed on (later ones win: --deadline-s, --datasets, --device, --train-arg, --resume-dir ...).
# The Python is $PYTHON, else the first of python3, /usr/bin/python3 that imports PyTorch.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-}
if [ -z "$py" ]; then
    for c in python3 /usr/bin/python3; do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import torch' >/dev/null 2>&1; then
            py=$c
            break
        fi
    done
fi
if [ -z "$py" ]; then
    echo "gpu_retrain.sh: no Python with PyTorch found (set PYTHON)" >&2
    exit 2
fi
if [ -z "${OUT:-}" ]; then
    echo "gpu_retrain.sh: set OUT to the (empty) folder for the packed files" >&2
    exit 2
fi
exec env PYTHONUNBUFFERED=1 "$py" "$root/train/gpu_retrain.py" run --data "$root/gpu-data" --out "$OUT" \
    --python "$py" "$@"
