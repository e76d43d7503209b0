#!/usr/bin/env bash
# check.sh -- checks what can be checked here of deploy/: nginx -t on both nginx configurations (the
# compose one with its service names pointed at loopback), YAML well-formedness of docker-compose.yml
# and the Kubernetes manifests (and the kinds they hold), and systemd-analyze verify of the unit.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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
PY
if command -v systemd-analyze >/dev/null; then
  sed "s#/usr/local/bin/vbmemd#$PWD/build/vbmemd#" deploy/vbmemd.service >"$tmp/vbmemd.service"
  [ -x build/vbmemd ] || sed -i "s#$PWD/build/vbmemd#/bin/true#" "$tmp/vbmemd.service"
  systemd-analyze verify "$tmp/vbmemd.service"
fi
echo "deploy: nginx configurations, compose and Kubernetes YAML, systemd unit checked"
