#!/usr/bin/python3
"""test_store.py -- integration tests of vbmemd's durable store (SQLite in --data-dir): crash safety
(writes from several client threads, SIGKILL at seeded random moments, restart, every acknowledged
write present with its exact content and version, PRAGMA integrity_check ok), restart with an LRU
bound on resident sessions, stored-session TTL, the backup CLI (--list-sessions, --export-all,
--import-all), the data-directory lock, 503 while the database is locked, corrupt records (reported,
skipped by lists and backups, deletable), and
the whole of test_http.py against SQLite stores (with_data_dir.sh); and replicas: redis-server,
three vbmemd --redis and nginx (deploy/nginx/nginx.conf) in front, writes and reads through nginx,
one replica SIGKILLed mid-run: no acknowledged write lost, every session readable, no request failed
before the kill, at most one per client after it (the request it had in flight), every client served
again after it.
Every process runs on loopback; every response is validated against proto/openapi.yaml.

usage: test_store.py PATH/TO/vbmemd [--quick] [--wrapper 'valgrind ...'] [--only a,b] [--seed N]"""
import http.client
import json
import os
import random
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from daemon import CONTRACT, Client, Daemon, expect, ok, parse_args, run_tests, tensor, usage_error  # noqa: E402

BIN = None
WRAPPER = None
QUICK = False
SEED = 20240505
MEM = {"kind": "mixture", "rows": 2, "clusters": 2, "retain_max": 200}
C = 8
CRASH_CLIENTS = 8   # client threads of the SIGKILL rounds






STARTED = []  # every daemon a test started: killed after the test if it is still running


def start(data, *args):
    d = Daemon(BIN, "--data-dir", data, "--threads", "2", *args, wrapper=WRAPPER)
    STARTED.append(d)
    return d


def kill9(d):
    d.proc.kill()
    d.proc.wait()
    d.thread.join(5)


def codes(rnd, T=12):
    return [[rnd.gauss(3.0 * (t % 2), 1.0) for _ in range(C)] for t in range(T)]


def create(c, **extra):
    body = {"code_size": C, "memory": MEM}
    body.update(extra)
    return ok(c.request("POST", "/v1/sessions", body), 201)


def all_ids(c):
    ids, cursor = [], None
    while True:
        r = ok(c.request("GET", "/v1/sessions?limit=7" + ("&cursor=" + cursor if cursor else "")))
        ids += [s["id"] for s in r["sessions"]]
        cursor = r["next_cursor"]
        if cursor is None:
            return ids


def integrity(data):
    db = sqlite3.connect(os.path.join(data, "vbmem.db"))
    try:
        res = db.execute("PRAGMA integrity_check").fetchall()
    finally:
        db.close()
    expect(res == [("ok",)], "integrity_check: %s" % res)


# ---- tests -------------------------------------------------------------------------------

def test_crash_safety_sigkill():
    """Writes from 8 client threads, SIGKILL at seeded random moments, restart, check. With 2
    workers computing and the rest waiting for commits, several writes share each group commit,
    so a kill lands inside one most of the time: an answer sent before its commit was durable
    would show up as an acknowledged version missing after the restart."""
    rnd = random.Random(SEED)
    rounds = 3 if QUICK else 5
    data = tempfile.mkdtemp(prefix="vbmem-crash-")
    state = {}          # sid -> {"version", "elbo", "frames", "memory", "pending", "thread"}
    pending_creates = [0]
    lock = threading.Lock()
    acked_writes = [0]
    try:
        for rnd_i in range(rounds + 1):
            d = start(data)
            c = d.client()
            # Every acknowledged write is there, with its exact content and version.
            ids = set(all_ids(c))
            missing = set(state) - ids
            expect(not missing, "round %d: acknowledged sessions lost: %s" % (rnd_i, missing))
            expect(len(ids - set(state)) <= pending_creates[0],
                   "round %d: %d unknown sessions, %d creates were unacknowledged"
                   % (rnd_i, len(ids - set(state)), pending_creates[0]))
            for sid in ids - set(state):  # created, committed, answer lost: check from now on
                state[sid] = {"version": 0, "elbo": None, "frames": 0, "memory": None, "pending": True,
                              "thread": -1}
            for sid, st in state.items():
                r = c.request("GET", "/v1/sessions/" + sid)
                info = ok(r)
                expect(r.header("ETag") == '"%d"' % info["version"], "ETag")
                if info["version"] == st["version"]:
                    if st["elbo"] is not None:
                        expect(info["last_elbo"] == st["elbo"],
                               "%s v%d: ELBO %r, acknowledged %r" % (sid, st["version"], info["last_elbo"], st["elbo"]))
                        expect(info["frames"] == st["frames"], "%s: frames" % sid)
                    if st["memory"] is not None:
                        mem = ok(c.request("GET", "/v1/sessions/%s/memory" % sid))
                        expect(mem == st["memory"], "%s v%d: memory differs after restart" % (sid, st["version"]))
                elif (info["version"] == st["version"] + 1 or st["thread"] == -1) and st["pending"]:
                    pass  # the write in flight at the kill committed; its answer was lost
                else:
                    raise AssertionError("%s: version %d after restart, acknowledged %d (pending %s)"
                                         % (sid, info["version"], st["version"], st["pending"]))
                st["version"] = info["version"]
                st["elbo"] = info["last_elbo"]
                st["frames"] = info["frames"]
                st["memory"] = ok(c.request("GET", "/v1/sessions/%s/memory" % sid))
                st["pending"] = False
            pending_creates[0] = 0
            if rnd_i == rounds:
                expect(d.stop() == 0, "clean stop")
                integrity(data)
                break

            stop = threading.Event()
            errors = []
            seeds = [rnd.randrange(1 << 30) for _ in range(CRASH_CLIENTS)]

            def worker(k, seed):
                wr = random.Random(seed)
                cl = d.client()
                cl.timeout = 30
                mine = [s for s, st in state.items() if st["thread"] == k]
                try:
                    while not stop.is_set():
                        if not mine or wr.random() < 0.05:
                            with lock:
                                pending_creates[0] += 1
                            s = create(cl)
                            with lock:
                                pending_creates[0] -= 1
                                state[s["id"]] = {"version": 1, "elbo": None, "frames": 0, "memory": None,
                                                  "pending": False, "thread": k}
                            mine.append(s["id"])
                            continue
                        sid = wr.choice(mine)
                        st = state[sid]
                        mode = "replace" if st["elbo"] is None or wr.random() < 0.3 else "append"
                        body = {"mode": mode, "seed": wr.randrange(1000), "iterations": 5,
                                "codes": {"mu": tensor(codes(wr)), "sigma2": 0.05}}
                        st["pending"] = True
                        r = cl.request("POST", "/v1/sessions/%s/episodes" % sid, body,
                                       headers={"If-Match": '"%d"' % st["version"]})
                        res = ok(r)
                        expect(res["version"] == st["version"] + 1, "version +1")
                        st.update(version=res["version"], elbo=res["elbo"]["per_frame"],
                                  frames=res["frames"], memory=None, pending=False)
                        with lock:
                            acked_writes[0] += 1
                except (OSError, http.client.HTTPException):
                    return  # the kill cut the connection: the request in flight stays pending
                except Exception as e:  # noqa: BLE001
                    errors.append("thread %d: %s: %s" % (k, type(e).__name__, e))

            threads = [threading.Thread(target=worker, args=(k, seeds[k]), daemon=True)
                       for k in range(CRASH_CLIENTS)]
            for t in threads:
                t.start()
            time.sleep(rnd.uniform(0.4, 1.5))
            kill9(d)
            stop.set()
            for t in threads:
                t.join(30)
            expect(not errors, "round %d: %s" % (rnd_i, errors))
            integrity(data)
        expect(acked_writes[0] >= rounds, "too few writes were acknowledged: %d" % acked_writes[0])
        print("     crash safety: %d rounds, %d sessions, %d acknowledged writes checked"
              % (rounds, len(state), acked_writes[0]), flush=True)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_restart_keeps_sessions_lru_and_ttl():
    data = tempfile.mkdtemp(prefix="vbmem-restart-")
    rnd = random.Random(SEED + 1)
    try:
        d = start(data, "--max-resident", "3")
        c = d.client()
        mems = {}
        for i in range(10):
            sid = create(c)["id"]
            ok(c.request("POST", "/v1/sessions/%s/episodes" % sid,
                         {"mode": "replace", "seed": i, "iterations": 5, "codes": {"mu": codes(rnd), "sigma2": 0.05}}))
        for sid in all_ids(c):
            mems[sid] = (ok(c.request("GET", "/v1/sessions/" + sid))["version"],
                         ok(c.request("GET", "/v1/sessions/%s/memory" % sid)))
        short = create(c, ttl_seconds=1)["id"]
        gone = create(c)["id"]
        ok(c.request("DELETE", "/v1/sessions/" + gone), 204)
        expect(d.stop() == 0, "clean stop")
        d = start(data, "--max-resident", "3")
        c = d.client()
        ids = all_ids(c)
        expect(set(ids) == set(mems) | {short}, "sessions after restart: %d of %d" % (len(ids), len(mems) + 1))
        for _ in range(2):  # twice: the second pass reloads what the LRU bound evicted
            for sid, (v, mem) in mems.items():
                r = c.request("GET", "/v1/sessions/%s/memory" % sid)
                expect(r.header("ETag") == '"%d"' % v and ok(r) == mem, "%s differs after restart" % sid)
        c.request("GET", "/v1/sessions/" + gone)
        expect(c.request("GET", "/v1/sessions/" + gone).status == 404, "deleted session is back")
        time.sleep(2.6)  # the stored TTL session expires (idle since before the restart)
        expect(c.request("GET", "/v1/sessions/" + short).status == 404, "TTL session did not expire")
        metrics = c.request("GET", "/metrics").body.decode()
        expect("vbmemd_sessions 10" in metrics, "metrics count stored sessions")
        expect(d.stop() == 0, "clean stop")
        integrity(data)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def run_cli(*args):
    p = subprocess.run(list(WRAPPER or []) + [BIN] + list(args), capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_backup_cli_and_lock():
    data = tempfile.mkdtemp(prefix="vbmem-backup-")
    other = tempfile.mkdtemp(prefix="vbmem-restore-")
    try:
        d = start(data)
        c = d.client()
        mems = {}
        for i in range(4):
            sid = create(c, ttl_seconds=3600 * (i % 2))["id"]
            ok(c.request("POST", "/v1/sessions/%s/episodes" % sid,
                         {"mode": "replace", "seed": i, "iterations": 5, "codes": {"mu": codes(random.Random(i)), "sigma2": 0.1}}))
            mems[sid] = ok(c.request("GET", "/v1/sessions/%s/memory" % sid))
        # A second daemon on the same directory is refused.
        p = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data-dir", data], capture_output=True, timeout=60)
        expect(p.returncode != 0 and b"locked" in p.stderr, "second daemon: %d %s" % (p.returncode, p.stderr[-300:]))
        # List and export while the daemon runs; import needs it stopped.
        rc, out, err = run_cli("--data-dir", data, "--list-sessions")
        expect(rc == 0, err)
        listed = {json.loads(line)["id"]: json.loads(line) for line in out.splitlines()}
        expect(set(listed) == set(mems), "listed %s" % listed)
        expect(all(v["version"] == 2 for v in listed.values()), "versions listed")
        backup = os.path.join(other, "backup.db")
        rc, out, err = run_cli("--data-dir", data, "--export-all", backup)
        expect(rc == 0 and json.loads(out) == {"exported": 4, "skipped": 0}, out + err)
        rc, out, err = run_cli("--data-dir", data, "--export-all", backup)
        expect(rc != 0 and "exists" in err, "export over an existing file: " + err)
        rc, out, err = run_cli("--data-dir", data, "--import-all", backup)
        expect(rc != 0 and "locked" in err, "import while running: " + err)
        expect(d.stop() == 0, "clean stop")
        restore = os.path.join(other, "data")
        os.mkdir(restore)
        rc, out, err = run_cli("--data-dir", restore, "--import-all", backup)
        expect(rc == 0 and json.loads(out) == {"imported": 4, "skipped": 0}, out + err)
        d = start(restore)
        c = d.client()
        for sid, mem in mems.items():
            r = c.request("GET", "/v1/sessions/%s/memory" % sid)
            expect(ok(r) == mem and r.header("ETag") == '"2"', "restored %s differs" % sid)
        expect(d.stop() == 0, "clean stop")
        integrity(restore)
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(other, ignore_errors=True)


def test_locked_database_503_then_recovers():
    data = tempfile.mkdtemp(prefix="vbmem-busy-")
    try:
        d = start(data)
        c = d.client()
        sid = create(c)["id"]
        body = {"mode": "replace", "seed": 1, "iterations": 5, "codes": {"mu": codes(random.Random(3)), "sigma2": 0.1}}
        db = sqlite3.connect(os.path.join(data, "vbmem.db"), isolation_level=None, timeout=1)
        db.execute("BEGIN IMMEDIATE")
        r = c.request("POST", "/v1/sessions/%s/episodes" % sid, body)
        expect(r.status == 503 and r.header("Retry-After") is not None, "locked store: %d %s" % (r.status, r.body[:300]))
        expect("busy" in r.json()["detail"], r.json()["detail"])
        expect(ok(c.request("GET", "/v1/sessions/" + sid))["version"] == 1, "failed write left a trace")
        r = c.request("POST", "/v1/sessions", {"code_size": C, "memory": MEM})
        expect(r.status == 503, "create on a locked store: %d" % r.status)
        db.execute("COMMIT")
        db.close()
        expect(ok(c.request("POST", "/v1/sessions/%s/episodes" % sid, body))["version"] == 2, "recovered")
        expect(d.stop() == 0, "clean stop")
    finally:
        shutil.rmtree(data, ignore_errors=True)


def store_checks(d):
    """The start-up check lines of a daemon's log ("store check..."), as dicts."""
    return [l for l in d.logs() if str(l.get("msg", "")).startswith("store check")]


def test_corrupt_record_reported_skipped_deletable():
    """One corrupt record (a flipped bit in its memory) neither blocks its owner's list nor the
    backups: the start-up check names it, its own GET is a precise problem (500, type
    corrupt-record, no Retry-After) logged and counted, other owners do not see it, lists and
    --list-sessions / --export-all skip it (exit 0, saying what they skipped), and its owner
    deletes it through the API."""
    data = tempfile.mkdtemp(prefix="vbmem-corrupt-")
    try:
        keyfile = os.path.join(data, "keys")
        with open(keyfile, "w") as f:
            f.write("key-a owner=team-a\nkey-b owner=team-b\n")
        d = start(data, "--api-key-file", keyfile)
        a, b = d.client("key-a"), d.client("key-b")
        bad = create(a)["id"]
        good = create(a)["id"]
        ok(a.request("POST", "/v1/sessions/%s/episodes" % bad,
                     {"mode": "replace", "seed": 1, "iterations": 5, "codes": {"mu": codes(random.Random(1)), "sigma2": 0.1}}))
        expect(d.stop() == 0, "clean stop")
        (line,) = store_checks(d)
        expect(line["corrupt"] == 0 and line["records"] == 0 and line["quick_check"] == "ok", line)
        db = sqlite3.connect(os.path.join(data, "vbmem.db"))
        blob = bytearray(db.execute("SELECT memory FROM sessions WHERE id = ?", (bad,)).fetchone()[0])
        blob[200] ^= 0x40  # one flipped bit in the posterior
        db.execute("UPDATE sessions SET memory = ? WHERE id = ?", (bytes(blob), bad))
        db.commit()
        db.close()

        d = start(data, "--api-key-file", keyfile)
        (line,) = store_checks(d)
        expect(line["level"] == "error" and line["records"] == 2 and line["corrupt"] == 1
               and line["corrupt_ids"] == [bad] and line["quick_check"] == "ok", "start-up check: %s" % line)
        a, b = d.client("key-a"), d.client("key-b")
        r = a.request("GET", "/v1/sessions/" + bad)
        expect(r.status == 500, "corrupt: %d %s" % (r.status, r.body[:300]))
        p = r.json()
        expect(p["type"] == "urn:vbmem:problem:corrupt-record" and bad in p["detail"] and "corrupt" in p["detail"]
               and r.header("Retry-After") is None, p)
        deadline = time.time() + 30  # (the log line is read from the daemon's stderr by a thread)
        while not any(l.get("msg") == "corrupt stored record" and l.get("id") == bad for l in d.logs()):
            expect(time.time() < deadline, "not logged")
            time.sleep(0.02)
        metrics = a.request("GET", "/metrics").body.decode()
        expect("vbmemd_store_corrupt_total 1\n" in metrics, "metric: %s" % [m for m in metrics.splitlines() if "corrupt" in m])
        # the owner's list skips it and still answers
        expect([s["id"] for s in ok(a.request("GET", "/v1/sessions"))["sessions"]] == [good], "list")
        ok(a.request("GET", "/v1/sessions/" + good))
        # another owner sees nothing of it
        r = b.request("GET", "/v1/sessions/" + bad)
        expect(r.status == 404, "other owner: %d %s" % (r.status, r.body[:200]))
        expect(b.request("DELETE", "/v1/sessions/" + bad).status == 404, "other owner deleted it")
        # backups while the daemon runs: exit 0, the corrupt record named and skipped
        rc, out, err = run_cli("--data-dir", data, "--list-sessions")
        expect(rc == 0 and [json.loads(l)["id"] for l in out.splitlines()] == [good], "list-sessions: %d %s %s" % (rc, out, err))
        expect("skipped session " + bad in err and "corrupt" in err, "list-sessions stderr: " + err)
        backup = os.path.join(data, "backup.db")
        rc, out, err = run_cli("--data-dir", data, "--export-all", backup)
        expect(rc == 0 and json.loads(out) == {"exported": 1, "skipped": 1}, "export-all: %d %s %s" % (rc, out, err))
        expect("skipped session " + bad in err, "export-all stderr: " + err)
        # If-Match cannot be checked against a corrupt record; without it the owner deletes it
        r = a.request("DELETE", "/v1/sessions/" + bad, headers={"If-Match": '"2"'})
        expect(r.status == 500, "DELETE with If-Match: %d" % r.status)
        ok(a.request("DELETE", "/v1/sessions/" + bad), 204)
        expect(a.request("GET", "/v1/sessions/" + bad).status == 404, "still there")
        expect(d.stop() == 0, "clean stop")
        d = start(data, "--api-key-file", keyfile)
        (line,) = store_checks(d)
        expect(line["level"] == "info" and line["records"] == 1 and line["corrupt"] == 0, line)
        expect(d.stop() == 0, "clean stop")
        integrity(data)
    finally:
        shutil.rmtree(data, ignore_errors=True)


def free_port():
    sk = socket.socket()
    sk.bind(("127.0.0.1", 0))
    port = sk.getsockname()[1]
    sk.close()
    return port


def redis_ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sk:
            sk.sendall(b"PING\r\n")
            return sk.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis(tmp):
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "yes", "--appendfsync", "always", "--dir", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(100):
        if redis_ping(port):
            return proc, port
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("redis-server did not start")


def start_nginx(tmp, upstreams):
    """nginx with deploy/nginx/nginx.conf, its replicas and port replaced by the test's."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "deploy", "nginx", "nginx.conf")) as f:
        conf = f.read()
    port = free_port()
    servers = ["server 127.0.0.1:%d " % p for p in upstreams]
    for i, old in enumerate(["server 127.0.0.1:8081 ", "server 127.0.0.1:8082 ", "server 127.0.0.1:8083 "]):
        expect(old in conf, "deploy/nginx/nginx.conf lacks %r" % old)
        conf = conf.replace(old, servers[i])
    conf = conf.replace("listen 127.0.0.1:8080;", "listen 127.0.0.1:%d;" % port)
    conf = conf.replace("worker_processes auto;", "worker_processes 1;" + (" user root;" if os.getuid() == 0 else ""))
    conf = conf.replace("http {", "http {\n    client_body_temp_path %s/body;\n    proxy_temp_path %s/proxy;" % (tmp, tmp), 1)
    path = os.path.join(tmp, "nginx.conf")
    with open(path, "w") as f:
        f.write(conf)
    proc = subprocess.Popen(["nginx", "-c", path, "-p", tmp, "-g",
                             "daemon off; pid %s/nginx.pid; error_log %s/error.log warn;" % (tmp, tmp)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise AssertionError("nginx did not start: %s" % proc.stderr.read()[-500:])


def test_replicas_redis_nginx_sigkill():
    """Redis + 3 replicas + nginx; writes and reads through nginx; one replica SIGKILLed mid-run."""
    tmp = tempfile.mkdtemp(prefix="vbmem-replicas-")
    procs = []
    daemons = []
    try:
        redis, rport = start_redis(tmp)
        procs.append(redis)
        daemons = [start_redis_daemon(rport) for _ in range(3)]
        ngx, nport = start_nginx(tmp, [d.port for d in daemons])
        procs.append(ngx)
        c = Client(nport)
        state = {}
        for _ in range(8):
            sid = create(c)["id"]
            state[sid] = {"version": 1, "elbo": None, "pending": False}
        sids = sorted(state)
        stop = threading.Event()
        killed = threading.Event()  # set just before the SIGKILL
        failures = []  # (client, the kill was under way when the request failed, what)
        errors = []
        acked = [0]
        served_after = {}  # client: requests answered 200 that began after the kill

        def writer(k):
            wr = random.Random(SEED + k)
            cl = Client(nport, timeout=30)
            mine = sids[2 * k:2 * k + 2]
            while not stop.is_set():
                after = killed.is_set()
                sid = wr.choice(mine)
                st = state[sid]
                body = {"mode": "replace" if st["elbo"] is None else "append", "seed": wr.randrange(1000),
                        "iterations": 5, "codes": {"mu": tensor(codes(wr)), "sigma2": 0.05}}
                st["pending"] = True
                try:
                    r = cl.request("POST", "/v1/sessions/%s/episodes" % sid, body,
                                   headers={"If-Match": '"%d"' % st["version"]}, validate=False)
                except (OSError, http.client.HTTPException) as e:
                    failures.append((k, killed.is_set(), "POST %s" % type(e).__name__))
                    cl.close()
                    continue
                if r.status == 200:
                    res = r.json()
                    st.update(version=res["version"], elbo=res["elbo"]["per_frame"], pending=False)
                    acked[0] += 1
                    served_after[k] = served_after.get(k, 0) + after
                elif r.status == 409 and st["pending"]:
                    # the write answered 502 had committed: take the stored state
                    info = ok(cl.request("GET", "/v1/sessions/" + sid))
                    if info["version"] != st["version"] + 1:
                        errors.append("%s: 409 at %d, stored %d" % (sid, st["version"], info["version"]))
                    st.update(version=info["version"], elbo=info["last_elbo"], pending=False)
                elif r.status in (502, 503, 504):
                    failures.append((k, killed.is_set(), "POST %d" % r.status))
                else:
                    errors.append("POST %d %s" % (r.status, r.body[:200]))

        def reader():
            cl = Client(nport, timeout=30)
            rr = random.Random(SEED)
            while not stop.is_set():
                after = killed.is_set()
                try:
                    r = cl.request("GET", "/v1/sessions/" + rr.choice(sids), validate=False)
                    if r.status != 200:
                        failures.append(("reader", killed.is_set(), "GET %d" % r.status))
                    else:
                        served_after["reader"] = served_after.get("reader", 0) + after
                except (OSError, http.client.HTTPException) as e:
                    failures.append(("reader", killed.is_set(), "GET %s" % type(e).__name__))
                    cl.close()

        threads = [threading.Thread(target=writer, args=(k,), daemon=True) for k in range(4)]
        threads.append(threading.Thread(target=reader, daemon=True))
        for t in threads:
            t.start()
        time.sleep(2.0)  # (how long the run goes before and after the kill; nothing is timed)
        killed.set()
        kill9(daemons[0])
        time.sleep(4.0 if QUICK else 6.0)
        stop.set()
        for t in threads:
            t.join(60)
        expect(not errors, "; ".join(errors[:5]))
        # a request fails only because the kill cut it: none before the kill; after it, at most
        # the one each client had in flight on the killed replica (nginx takes a replica out of
        # its pool at its first failure, and passes a refused connection on to the next one)
        early = [f for f in failures if not f[1]]
        expect(not early, "requests failed before the kill: %s" % early[:5])
        per_client = {}
        for who, _, what in failures:
            per_client.setdefault(who, []).append(what)
        twice = {who: w for who, w in per_client.items() if len(w) > 1}
        expect(not twice, "clients failed more than once after the kill: %s" % twice)
        idle = [who for who in list(range(4)) + ["reader"] if served_after.get(who, 0) < 1]
        expect(not idle, "clients not served again after the kill: %s" % idle)
        for sid, st in state.items():
            r = c.request("GET", "/v1/sessions/" + sid)
            info = ok(r)
            if info["version"] == st["version"] + 1 and st["pending"]:
                continue  # committed by the killed replica, answer lost
            expect(info["version"] == st["version"], "%s: version %d, acknowledged %d" % (sid, info["version"], st["version"]))
            expect(st["elbo"] is None or info["last_elbo"] == st["elbo"], "%s: content differs" % sid)
        expect(acked[0] > 20, "too few writes: %d" % acked[0])
        print("     replicas: %d acknowledged writes through nginx, %d requests failed (each in flight at the kill)"
              % (acked[0], len(failures)), flush=True)
        # /readyz follows the shared store: ready while Redis answers, 503 (out of nginx's pool) when it does not
        r1 = Client(daemons[1].port)
        ok(r1.request("GET", "/readyz"))
        redis.terminate()
        redis.wait(10)
        r = r1.request("GET", "/readyz", validate=False)
        expect(r.status == 503 and "session store" in r.body.decode(), "readyz without Redis: %d %s" % (r.status, r.body[:200]))
        for d in daemons[1:]:
            expect(d.stop() == 0, "clean stop")
    finally:
        for d in daemons:
            if d.proc.poll() is None:
                d.proc.kill()
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


def start_redis_daemon(rport):
    d = Daemon(BIN, "--redis", "127.0.0.1:%d" % rport, "--threads", "2", wrapper=WRAPPER)
    STARTED.append(d)
    return d


def test_full_http_suite_on_sqlite():
    """test_http.py (every route, error, limit, concurrency, TTL, shutdown) against SQLite stores."""
    parent = tempfile.mkdtemp(prefix="vbmem-suite-")
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        p = subprocess.run([sys.executable, os.path.join(here, "test_http.py"), BIN, "--wrapper",
                            os.path.join(here, "with_data_dir.sh") + " " + parent],
                           capture_output=True, timeout=280)
        out = p.stdout.decode()
        expect(p.returncode == 0, "test_http.py on SQLite failed:\n" + out[-3000:] + p.stderr.decode()[-1000:])
        print("     " + out.strip().splitlines()[-1], flush=True)
    finally:
        shutil.rmtree(parent, ignore_errors=True)


TESTS = [
    test_crash_safety_sigkill,
    test_restart_keeps_sessions_lru_and_ttl,
    test_backup_cli_and_lock,
    test_locked_database_503_then_recovers,
    test_corrupt_record_reported_skipped_deletable,
    test_full_http_suite_on_sqlite,
    test_replicas_redis_nginx_sigkill,
]


def main():
    global BIN, WRAPPER, QUICK, SEED
    args = sys.argv[1:]
    if "--seed" in args:
        i = args.index("--seed")
        if i + 1 >= len(args) or not args[i + 1].isdigit():
            raise usage_error("--seed needs a number")
        SEED = int(args[i + 1])
        del args[i:i + 2]
    BIN, WRAPPER, QUICK, only = parse_args(args)
    if BIN is None:
        print(__doc__)
        return 2
    t_all = time.time()

    def reap():  # a failed test leaves no daemon behind
        for d in STARTED:
            if d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()
        STARTED.clear()
    # under valgrind test_http.py runs its own subset, so the whole-suite-on-SQLite test is skipped
    skip = (test_full_http_suite_on_sqlite,) if WRAPPER else ()
    passed, failed = run_tests(TESTS, only, skip, reap)
    print("responses validated against proto/openapi.yaml: %d (%.1fs)" % (CONTRACT.checked, time.time() - t_all))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
