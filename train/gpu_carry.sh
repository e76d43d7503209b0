#!/bin/sh
# gpu_carry.sh -- put the data of the GPU retrain into gpu-data/ (git-ignored, named in the device
# run's carry; train/GPU.md): exactly the files train/gpu_retrain.sh reads, each checked against the
# sha256 and size in the source's README.md, and the whole transfer (the files git would send plus
# gpu-data/) checked against the 64 MiB a run may carry.
#   sh train/gpu_carry.sh [--src DIR] [--dest DIR] [--datasets fashion-mnist,omniglot] [--resume DIR]
# --src: the data folder (default ../shared/data beside the repository); --resume: a folder of
# MODEL.ckpt and MODEL.log.jsonl, or what train/gpu_unpack.sh made (its checkpoints/ and runs/),
# copied to DEST/resume, from where the next run continues.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/../shared/data
dest=$root/gpu-data
datasets=fashion-mnist,omniglot
resume=
limit=$((64 * 1024 * 1024))
while [ $# -gt 0 ]; do
    case $1 in
    --src) src=$2; shift 2 ;;
    --dest) dest=$2; shift 2 ;;
    --datasets) datasets=$2; shift 2 ;;
    --resume) resume=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    *) echo "gpu_carry.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [ ! -f "$src/README.md" ]; then
    echo "gpu_carry.sh: no $src/README.md (its table gives the checksums)" >&2
    exit 1
fi
rm -rf "$dest"
mkdir -p "$dest"
for ds in $(echo "$datasets" | tr ',' ' '); do
    case $ds in
    fashion-mnist | mnist) files="train-images-idx3-ubyte.gz t10k-images-idx3-ubyte.gz" ;;
    omniglot) files="omniglot.tar.gz" ;;
    *) echo "gpu_carry.sh: no rule for dataset $ds" >&2; exit 2 ;;
    esac
    mkdir -p "$dest/$ds"
    for f in $files; do
        # the README's row: | `DATASET/FILE` | BYTES | `SHA256` |
        row=$(grep -F "| \`$ds/$f\` |" "$src/README.md" | head -n 1)
        want_sha=$(echo "$row" | awk -F'|' '{gsub(/[` ]/, "", $4); print $4}')
        want_bytes=$(echo "$row" | awk -F'|' '{gsub(/[, ]/, "", $3); print $3}')
        if [ -z "$want_sha" ] || [ -z "$want_bytes" ]; then
            echo "gpu_carry.sh: $src/README.md gives no size and sha256 for $ds/$f" >&2
            exit 1
        fi
        cp "$src/$ds/$f" "$dest/$ds/$f"
        got_sha=$(sha256sum "$dest/$ds/$f" | cut -d' ' -f1)
        got_bytes=$(wc -c <"$dest/$ds/$f" | tr -d ' ')
        if [ "$got_sha" != "$want_sha" ] || [ "$got_bytes" != "$want_bytes" ]; then
            echo "gpu_carry.sh: $ds/$f is $got_bytes bytes, sha256 $got_sha; README.md says $want_bytes, $want_sha" >&2
            exit 1
        fi
        echo "ok $ds/$f $got_bytes bytes"
    done
done
if [ -n "$resume" ]; then
    mkdir -p "$dest/resume"
    for f in "$resume"/*.ckpt "$resume"/*.log.jsonl "$resume"/checkpoints/*.ckpt "$resume"/runs/*.log.jsonl; do
        if [ -f "$f" ]; then
            cp "$f" "$dest/resume/"
            echo "resume $(basename "$f")"
        fi
    done
fi
# what a run sends: the files git does not ignore (tracked or not), plus the carried folder
if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    tree=$(cd "$root" && git ls-files -z --cached --others --exclude-standard |
        xargs -0 -r stat -c %s -- 2>/dev/null | awk '{s += $1} END {print s + 0}')
else
    echo "gpu_carry.sh: $root is not a git checkout: only the carried folder is counted" >&2
    tree=0
fi
carried=$(find "$dest" -type f -exec stat -c %s {} + | awk '{s += $1} END {print s + 0}')
total=$((tree + carried))
echo "carry: $carried bytes in $dest, working tree $tree bytes, $total of $limit"
if [ "$total" -gt "$limit" ]; then
    echo "gpu_carry.sh: $total bytes would travel, more than $limit" >&2
    exit 1
fi
