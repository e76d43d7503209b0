#!/bin/sh
# gpu_unpack.sh -- check and extract what train/gpu_retrain.sh packed (train/GPU.md):
#   sh train/gpu_unpack.sh FILES_DIR [DEST]   (DEST default: gpu-results/ of the repository)
# Every member's checksum against MANIFEST.json, every model file loaded; non-zero exit otherwise.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: gpu_unpack.sh FILES_DIR [DEST]" >&2
    exit 2
fi
exec "${PYTHON:-/usr/bin/python3}" "$root/train/gpu_retrain.py" unpack "$1" "${2:-$root/gpu-results}"
