#!/bin/bash
# with_data_dir.sh -- runs a vbmemd command line with --data-dir set to a fresh directory under PARENT,
# so that test_http.py's daemons (several at once) each get their own SQLite store.
# usage: with_data_dir.sh PARENT vbmemd [ARGS...]
set -e
parent=$1
shift
exec "$@" --data-dir "$(mktemp -d "$parent/d-XXXXXX")"
