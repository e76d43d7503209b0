#!/usr/bin/env bash
# check.sh -- checks what can be checked here of deploy/: nginx -t on both nginx configurations (the
# compose one with its service names pointed at loopback), YAML well-formedness of docker-compose.yml
# and the Kubernetes manifests (and the kinds they hold), that no shipped file holds an API key (the
# Kubernetes Secret is a template), systemd-analyze verify of the unit, and a deployment that starts:
# deploy/install.sh into a temporary prefix, the installed vbmemd run as a throwaway unprivileged user
# with the unit's ExecStart and Environment (prefix, state directory and port substituted) until
# /readyz is 200, an image episode written and samples read back, then a clean SIGTERM stop.
# VBMEM_INSTALL_BUILDDIR: the build directory install.sh (re)uses (default build-inst).
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
pid= user=
cleanup() {
  if [ -n "$pid" ]; then kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$user" ]; then userdel "$user" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
nginx -t -q -c "$PWD/deploy/nginx/nginx.conf" -g "pid $tmp/nginx.pid; error_log $tmp/error.log;"
sed -e 's/server vbmemd-[123]:8080/server 127.0.0.1:8081/' deploy/nginx/nginx-compose.conf >"$tmp/compose.conf"
nginx -t -q -c "$tmp/compose.conf" -g "pid $tmp/nginx.pid; error_log $tmp/error.log;"
/usr/bin/python3 - <<'PY'
import yaml
compose = yaml.safe_load(open("deploy/docker-compose.yml"))
assert sorted(compose["services"]) == ["nginx", "redis", "vbmemd-1", "vbmemd-2", "vbmemd-3"], compose["services"]
kinds = sorted(d["kind"] for d in yaml.safe_load_all(open("deploy/k8s/vbmem.yaml")) if d)
want = sorted(["ConfigMap", "ConfigMap", "Secret", "Deployment", "Service", "Service", "PodDisruptionBudget",
               "HorizontalPodAutoscaler", "StatefulSet"])
assert kinds == want, kinds
# The Secret is a template: its values hold no key (vbmemd takes every non-blank, non-# line as a key).
secret = [d for d in yaml.safe_load_all(open("deploy/k8s/vbmem.yaml")) if d and d["kind"] == "Secret"][0]
for k, v in list((secret.get("stringData") or {}).items()) + list((secret.get("data") or {}).items()):
    keys = [l for l in str(v or "").splitlines() if l.strip() and not l.strip().startswith("#")]
    assert not keys, "deploy/k8s/vbmem.yaml: Secret %s carries a key: %r" % (k, keys)
PY
# No shipped file holds the old placeholder key (vbmemd accepted it).
shipped() { if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then git ls-files -z; else
  find . -path './build*' -prune -o -path ./.git -prune -o -type f -print0; fi; }
if shipped | xargs -0 grep -l -I -e 'change-me-to-a-long-random-key' -- 2>/dev/null \
    | grep -v 'tests/deploy/check.sh$'; then
  echo "deploy: a shipped file (above) holds the placeholder API key" >&2; exit 1
fi
# No shipped file holds a TLS private key (the tests make a throwaway one at run time).
if shipped | xargs -0 grep -l -I -E -e '-----BEGIN ([A-Z]+ )?PRIVATE KEY-----' -- 2>/dev/null \
    | grep -v 'tests/deploy/check.sh$'; then
  echo "deploy: a shipped file (above) holds a private key" >&2; exit 1
fi

# A deployment that starts: install into a temporary prefix, run as the unit would.
t0=$SECONDS
chmod 0755 "$tmp"
prefix=$tmp/prefix
bash deploy/install.sh "$prefix" "${VBMEM_INSTALL_BUILDDIR:-$PWD/build-inst}"
unit_exec=$(sed -n 's/^ExecStart=//p' deploy/vbmemd.service)
unit_prefix=${unit_exec%/bin/vbmemd}
[ "$unit_prefix" != "$unit_exec" ] || { echo "deploy: ExecStart is not PREFIX/bin/vbmemd: $unit_exec" >&2; exit 1; }
exe=$prefix/bin/vbmemd
# The unit's data directory is its StateDirectory, and it runs as a dedicated unprivileged user.
unit_state=$(sed -n 's/^StateDirectory=//p' deploy/vbmemd.service)
grep -qx "Environment=VBMEMD_DATA_DIR=/var/lib/$unit_state" deploy/vbmemd.service \
  || { echo "deploy: VBMEMD_DATA_DIR is not the StateDirectory /var/lib/$unit_state" >&2; exit 1; }
unit_user=$(sed -n 's/^User=//p' deploy/vbmemd.service)
[ -n "$unit_user" ] && [ "$unit_user" != root ] || { echo "deploy: the unit has no unprivileged User=" >&2; exit 1; }
if command -v systemd-analyze >/dev/null; then
  sed "s#^ExecStart=$unit_exec#ExecStart=$exe#" deploy/vbmemd.service >"$tmp/vbmemd.service"
  systemd-analyze verify "$tmp/vbmemd.service"
fi
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
state=$tmp/state/vbmem
mkdir -p "$state"
envs=(PATH=/usr/bin:/bin)
while IFS= read -r e; do
  e=${e#Environment=}
  case $e in
    VBMEMD_DATA_DIR=*) e=VBMEMD_DATA_DIR=$state ;;
    VBMEMD_LISTEN=*) e=VBMEMD_LISTEN=127.0.0.1:$port ;;
  esac
  envs+=("$e")
done < <(grep '^Environment=' deploy/vbmemd.service)
run_as=()
if [ "$(id -u)" = 0 ]; then
  user=vbmemtest$$
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$user"
  chown "$user:" "$state"; chmod 0700 "$state"
  run_as=(setpriv --reuid="$user" --regid="$user" --clear-groups --no-new-privs --)
fi
(cd / && umask 0077 && exec "${run_as[@]}" env -i "${envs[@]}" "$exe") >"$tmp/vbmemd.log" 2>&1 &
pid=$!
ready= code=
for _ in $(seq 1 300); do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/readyz" || true)
  if [ "$code" = 200 ]; then ready=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$ready" ]; then
  echo "deploy: the installed vbmemd ($exe) did not become ready (last /readyz: ${code:-none}); its output:" >&2
  cat "$tmp/vbmemd.log" >&2; exit 1
fi
grep -q "\"models_dir\": *\"$prefix/share/vbmem/models\"" "$tmp/vbmemd.log" \
  || { echo "deploy: the installed vbmemd does not use $prefix/share/vbmem/models:" >&2; cat "$tmp/vbmemd.log" >&2; exit 1; }
/usr/bin/python3 - "$port" <<'PY'
import base64, json, os, sys, urllib.error, urllib.request
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "http"))
import pngs
base = "http://127.0.0.1:%s" % sys.argv[1]
def req(method, path, body=None, want=200):
    r = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(r, timeout=60) as resp:
            assert resp.status == want, (path, resp.status)
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        raise SystemExit("deploy: %s %s: %d %s" % (method, path, e.code, e.read().decode(errors="replace")))
try:
    imgs = pngs.fashion_images(16)
except RuntimeError:
    imgs = [bytes((x * 9 + y * 5 + i * 31) % 256 for y in range(28) for x in range(28)) for i in range(16)]
s = req("POST", "/v1/sessions", {}, 201)
sess = "/v1/sessions/" + s["id"]
w = req("POST", sess + "/episodes", {"observations": [pngs.b64(pngs.grey_png(p)) for p in imgs], "seed": 1})
assert w["frames"] == 16, w
sm = req("POST", sess + "/samples", {"count": 4, "seed": 2})
assert len(sm["observations"]) == 4, sm
for o in sm["observations"]:
    pngs.read_png(base64.b64decode(o))
PY
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
pid=
[ "$rc" = 0 ] || { echo "deploy: the installed vbmemd exited $rc on SIGTERM:" >&2; cat "$tmp/vbmemd.log" >&2; exit 1; }
[ -s "$state/vbmem.db" ] || { echo "deploy: no vbmem.db in the state directory" >&2; exit 1; }
echo "deploy: installed vbmemd (deploy/install.sh; the unit's ExecStart and Environment; user ${user:-$(id -un)}):" \
     "ready, image episode written, samples read back, stopped cleanly ($((SECONDS - t0)) s)"
echo "deploy: nginx configurations, compose and Kubernetes YAML, no shipped API key, systemd unit checked"
