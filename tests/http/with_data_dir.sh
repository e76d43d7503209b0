#!/bin/bash
# with_data_dir.sh -- runs a vbmemd command line with --data-dir set to a fresh directory under PARENT,
# so that test_http.py's daemons (several at once) each get their own SQLite store.
# A command line that names its own --data-dir (a test that restarts a daemon on the same store)
# keeps it.
# usage: with_data_dir.sh PARENT vbmemd [ARGS...]
set -e
parent=$1
shift
for a in "$@"; do
  case $a in --data-dir | --data-dir=* | --data_dir | --data_dir=*) exec "$@" ;; esac
done
exec "$@" --data-dir "$(mktemp -d "$parent/d-XXXXXX")"
