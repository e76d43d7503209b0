/* backend_redis.c -- owns the Redis durable backend (hiredis): sessions as hashes of versioned
 * blobs, compare-and-set and index upkeep in Lua scripts, TTLs as Redis expiry, reconnect with
 * backoff, 503 while unreachable, the primary found through Redis Sentinel, writes confirmed on
 * replicas with WAIT. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "engine/backend.h"

#define RD_CONNECT_S            1
#define RD_COMMAND_S            3
#define RD_BACKOFF_MIN          0.1
#define RD_BACKOFF_MAX          5.0
#define RD_BACKOFF_MAX_SENTINEL 1.0 /* a failover takes seconds: look again sooner */
#define RD_NFIELDS              13

/* KEYS: session hash, global index, owner index. ARGV: expected version, id,
 * expire-at ms (0: none), then field/value pairs. Returns 0 (stored), -1 (the
 * id exists; expected was 0), -2 (gone), or the stored version (conflict). */
static const char rd_lua_save[] =
    "local v = redis.call('HGET', KEYS[1], 'version')\n"
    "local expected = tonumber(ARGV[1])\n"
    "if expected == 0 then\n"
    "  if v then return -1 end\n"
    "else\n"
    "  if not v then return -2 end\n"
    "  if tonumber(v) ~= expected then return tonumber(v) end\n"
    "end\n"
    "redis.call('HSET', KEYS[1], unpack(ARGV, 4))\n"
    "redis.call('ZADD', KEYS[2], 0, ARGV[2])\n"
    "redis.call('ZADD', KEYS[3], 0, ARGV[2])\n"
    "if tonumber(ARGV[3]) > 0 then redis.call('PEXPIREAT', KEYS[1], ARGV[3])\n"
    "else redis.call('PERSIST', KEYS[1]) end\n"
    "return 0\n";

/* KEYS: session hash, global index. ARGV: id, owner hex ('' : any), owner
 * index prefix. Returns 0 or -1 (no such session for that owner). */
static const char rd_lua_remove[] = "local o = redis.call('HGET', KEYS[1], 'owner')\n"
                                    "if not o then return -1 end\n"
                                    "if ARGV[2] ~= '' and o ~= ARGV[2] then return -1 end\n"
                                    "redis.call('DEL', KEYS[1])\n"
                                    "redis.call('ZREM', KEYS[2], ARGV[1])\n"
                                    "redis.call('ZREM', ARGV[3] .. o, ARGV[1])\n"
                                    "return 0\n";

/* KEYS: an index. ARGV: min (lex), limit, session key prefix, global index
 * (to prune there too). Ids whose hash expired are pruned from the index. */
static const char rd_lua_list[] =
    "local out, min, limit = {}, ARGV[1], tonumber(ARGV[2])\n"
    "while #out < limit do\n"
    "  local ids = redis.call('ZRANGEBYLEX', KEYS[1], min, '+', 'LIMIT', 0, limit - #out)\n"
    "  if #ids == 0 then break end\n"
    "  for _, id in ipairs(ids) do\n"
    "    if redis.call('EXISTS', ARGV[3] .. id) == 1 then out[#out + 1] = id\n"
    "    else redis.call('ZREM', KEYS[1], id); redis.call('ZREM', ARGV[4], id) end\n"
    "  end\n"
    "  min = '(' .. ids[#ids]\n"
    "end\n"
    "return out\n";

/* KEYS: session hash. Returns its version (-1: gone) and renews its expiry
 * (idle TTL) when more than a second of it has run. */
static const char rd_lua_current[] =
    "local v = redis.call('HGET', KEYS[1], 'version')\n"
    "if not v then return -1 end\n"
    "local ttl = tonumber(redis.call('HGET', KEYS[1], 'ttl_s'))\n"
    "if ttl > 0 and redis.call('PTTL', KEYS[1]) < ttl * 1000 - 1000 then\n"
    "  redis.call('PEXPIRE', KEYS[1], ttl * 1000)\n"
    "end\n"
    "return tonumber(v)\n";

typedef struct {
    eng_backend base;     /* first: the backend and its state are one allocation */
    pthread_mutex_t lock; /* one connection, used by one thread at a time */
    redisContext *c;      /* NULL while disconnected */
    double retry_at;      /* clock time before which no reconnect is tried */
    double backoff;       /* seconds of the next wait after a failed connect */
    double backoff_max;   /* the longest wait between connects */
    double (*now)(
        void *ctx); /* the clock of the backoff (NULL: eng_now), see store_redis_set_clock */
    void *now_ctx;
    long connect_tries; /* connects tried since open */
    long discoveries;   /* primaries named by a sentinel since open */
    char host[256];     /* the server: fixed, or the primary the sentinels named last */
    int port;
    char prefix[64]; /* key prefix, e.g. "vbmem:" */
    store_redis_addr sentinels[STORE_REDIS_MAX_SENTINELS];
    int n_sentinels;   /* 0: no Sentinel, host:port is the server */
    int sentinel_next; /* the sentinel asked first: the one that answered last */
    char service[128]; /* the name the sentinels monitor the primary under */
    int min_replicas;  /* WAIT for this many replicas after a write (0: no WAIT) */
    int wait_ms;       /* WAIT's timeout */
} rd_store;

/* Wait longer before the next connect (lock held): 0.1 s, doubling up to backoff_max. */
static void rd_backoff(rd_store *q, double now)
{
    q->backoff = q->backoff > 0.0 ? q->backoff * 2.0 : RD_BACKOFF_MIN;
    if (q->backoff > q->backoff_max)
        q->backoff = q->backoff_max;
    q->retry_at = now + q->backoff;
}

/* Ask the sentinels in turn, starting with the one that answered last, for
 * the primary of q->service into q->host, q->port (lock held). Fails with
 * VBM_EUNAVAIL naming the last sentinel's problem when none names one. */
static vbm_status rd_discover(rd_store *q, vbm_error *err)
{
    struct timeval t = {RD_CONNECT_S, 0};
    const char *argv[3] = {"SENTINEL", "get-master-addr-by-name", q->service};
    char why[640] = "";
    const store_redis_addr *a;
    redisContext *c;
    redisReply *r;
    char *end;
    long port;
    int i, k;

    for (i = 0; i < q->n_sentinels; i++) {
        k = (q->sentinel_next + i) % q->n_sentinels;
        a = &q->sentinels[k];
        c = redisConnectWithTimeout(a->host, a->port, t);
        if (c == NULL || c->err) {
            snprintf(why, sizeof why, "sentinel %s:%d: %s", a->host, a->port,
                     c != NULL ? c->errstr : "out of memory");
            redisFree(c);
            continue;
        }
        redisSetTimeout(c, t);
        r = redisCommandArgv(c, 3, argv, NULL);
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2
            && r->element[0]->type == REDIS_REPLY_STRING
            && r->element[1]->type == REDIS_REPLY_STRING && r->element[0]->len < sizeof q->host
            && r->element[0]->len > 0) {
            port = strtol(r->element[1]->str, &end, 10);
            if (*end == '\0' && port >= 1 && port <= 65535) {
                memcpy(q->host, r->element[0]->str, r->element[0]->len);
                q->host[r->element[0]->len] = '\0';
                q->port = (int)port;
                q->sentinel_next = k;
                q->discoveries++;
                freeReplyObject(r);
                redisFree(c);
                return VBM_OK;
            }
        }
        if (r == NULL)
            snprintf(why, sizeof why, "sentinel %s:%d: %s", a->host, a->port,
                     c->errstr[0] != '\0' ? c->errstr : "connection lost");
        else if (r->type == REDIS_REPLY_ERROR)
            snprintf(why, sizeof why, "sentinel %s:%d: %.200s", a->host, a->port, r->str);
        else if (r->type == REDIS_REPLY_NIL)
            snprintf(why, sizeof why, "sentinel %s:%d monitors no service \"%.100s\"", a->host,
                     a->port, q->service);
        else
            snprintf(why, sizeof why, "sentinel %s:%d: unexpected reply", a->host, a->port);
        freeReplyObject(r);
        redisFree(c);
    }
    return vbm_fail(err, VBM_EUNAVAIL, NULL,
                    "the session store (redis service \"%s\") is unreachable: no sentinel of %d "
                    "named its primary (%s)",
                    q->service, q->n_sentinels, why);
}

/* 0 when the server of c says (ROLE) that it is a master; else -1 with what it is in why. */
static int rd_is_master(redisContext *c, char *why, size_t len)
{
    redisReply *r = redisCommand(c, "ROLE");
    int ok = 0;

    if (r == NULL)
        snprintf(why, len, "%s", c->errstr[0] != '\0' ? c->errstr : "connection lost");
    else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0
             && r->element[0]->type == REDIS_REPLY_STRING)
        ok = strcmp(r->element[0]->str, "master") == 0;
    if (r != NULL && !ok)
        snprintf(why, len, "its role is %.40s, not master",
                 r->type == REDIS_REPLY_ARRAY && r->elements > 0
                         && r->element[0]->type == REDIS_REPLY_STRING
                     ? r->element[0]->str
                     : "unknown");
    freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Connect if needed (lock held). Fails with VBM_EUNAVAIL while unreachable. */
static vbm_status rd_connect(rd_store *q, vbm_error *err)
{
    struct timeval ct = {RD_CONNECT_S, 0}, rt = {RD_COMMAND_S, 0};
    double now = q->now != NULL ? q->now(q->now_ctx) : eng_now();
    redisContext *c;

    char why[160];

    if (q->c != NULL)
        return VBM_OK;
    if (now < q->retry_at && q->n_sentinels > 0)
        return vbm_fail(err, VBM_EUNAVAIL, NULL,
                        "the session store (redis service \"%s\") is unreachable; next try (asking "
                        "the sentinels) in %.1f s",
                        q->service, q->retry_at - now);
    if (now < q->retry_at)
        return vbm_fail(err, VBM_EUNAVAIL, NULL,
                        "the session store (redis %s:%d) is unreachable; next try in %.1f s",
                        q->host, q->port, q->retry_at - now);
    q->connect_tries++;
    if (q->n_sentinels > 0 && rd_discover(q, err) != VBM_OK) {
        rd_backoff(q, now);
        return VBM_EUNAVAIL;
    }
    c = redisConnectWithTimeout(q->host, q->port, ct);
    if (c == NULL || c->err) {
        vbm_fail(err, VBM_EUNAVAIL, NULL, "the session store (redis %s:%d) is unreachable: %s",
                 q->host, q->port, c != NULL ? c->errstr : "out of memory");
        redisFree(c);
        rd_backoff(q, now);
        return VBM_EUNAVAIL;
    }
    redisSetTimeout(c, rt);
    if (q->n_sentinels > 0 && rd_is_master(c, why, sizeof why) != 0) {
        vbm_fail(err, VBM_EUNAVAIL, NULL,
                 "the session store (redis %s:%d, named primary of \"%s\" by a sentinel) is not "
                 "the primary: %s (a failover under way)",
                 q->host, q->port, q->service, why);
        redisFree(c);
        rd_backoff(q, now);
        return VBM_EUNAVAIL;
    }
    q->c = c;
    q->backoff = 0.0;
    return VBM_OK;
}

/* Drop the connection (lock held): the next call reconnects at once (and asks
 * the sentinels again), later ones back off. */
static void rd_drop(rd_store *q)
{
    redisFree(q->c);
    q->c = NULL;
    q->retry_at = 0.0; /* one immediate reconnect, then backoff */
}

/* Run one command (lock held). Returns the reply (free it) or NULL with
 * VBM_EUNAVAIL in err: unreachable, connection lost (dropped, reconnect on
 * the next call), or an error reply (its text); VBM_EUNKNOWN when the connection
 * was lost during a command that is not repeatable (a write: it may have run).
 * A READONLY answer (the server is a replica now) drops the connection too.
 * With sentinels the command is tried once more on the primary they name now
 * after a READONLY answer (the command did nothing) or, when repeatable (1: a
 * read, or a write that may run twice), after a lost connection. */
static redisReply *rd_cmd(rd_store *q, int argc, const char **argv, const size_t *lens,
                          int repeatable, vbm_error *err)
{
    redisReply *r;
    int attempt;

    for (attempt = 0;; attempt++) {
        if (rd_connect(q, err) != VBM_OK)
            return NULL;
        r = redisCommandArgv(q->c, argc, argv, lens);
        if (r == NULL) {
            vbm_fail(err, repeatable ? VBM_EUNAVAIL : VBM_EUNKNOWN, NULL,
                     "the session store (redis %s:%d) failed: %s%s", q->host, q->port,
                     q->c->errstr[0] != '\0' ? q->c->errstr : "connection lost",
                     repeatable ? ""
                                : " (the write may have been applied: not acknowledged; a retry "
                                  "with If-Match is safe)");
            rd_drop(q);
            if (q->n_sentinels > 0 && repeatable && attempt == 0)
                continue;
            return NULL;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            int demoted = strstr(r->str, "READONLY") != NULL;

            vbm_fail(err, VBM_EUNAVAIL, NULL, "the session store (redis %s:%d) refused: %.200s",
                     q->host, q->port, r->str);
            freeReplyObject(r);
            if (demoted) {
                rd_drop(q);
                if (q->n_sentinels > 0 && attempt == 0)
                    continue;
            }
            return NULL;
        }
        return r;
    }
}

/* After a write the primary applied (lock held): with min_replicas > 0, WAIT
 * until that many replicas have it or wait_ms passed. Fails with VBM_EUNKNOWN
 * when fewer confirmed it (the write stands on the primary, unacknowledged). */
static vbm_status rd_wait(rd_store *q, vbm_error *err)
{
    char n[16], ms[16];
    const char *argv[3] = {"WAIT", n, ms};
    redisReply *r;
    long long got;

    if (q->min_replicas <= 0)
        return VBM_OK;
    snprintf(n, sizeof n, "%d", q->min_replicas);
    snprintf(ms, sizeof ms, "%d", q->wait_ms);
    r = redisCommandArgv(q->c, 3, argv, NULL);
    if (r == NULL) {
        vbm_fail(err, VBM_EUNKNOWN, NULL,
                 "the write reached the session store (redis %s:%d), whose connection was then "
                 "lost (%s) before replicas confirmed it: not acknowledged, although it may be "
                 "stored (a retry with If-Match is safe)",
                 q->host, q->port, q->c->errstr[0] != '\0' ? q->c->errstr : "connection lost");
        rd_drop(q);
        return VBM_EUNKNOWN;
    }
    got = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r->type == REDIS_REPLY_ERROR)
        vbm_fail(err, VBM_EUNKNOWN, NULL, "the session store (redis %s:%d) refused WAIT: %.200s",
                 q->host, q->port, r->str);
    else if (got < q->min_replicas)
        vbm_fail(err, VBM_EUNKNOWN, NULL,
                 "the write reached the session store (redis %s:%d) but %lld of the %d replicas "
                 "required confirmed it within %d ms: not acknowledged, although it may be stored "
                 "(a retry with If-Match is safe)",
                 q->host, q->port, got < 0 ? 0 : got, q->min_replicas, q->wait_ms);
    freeReplyObject(r);
    return got >= q->min_replicas ? VBM_OK : VBM_EUNKNOWN;
}

/* Lowercase hex of n bytes into out (2n + 1). */
static void rd_hex(const unsigned char *b, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = '\0';
}

static int rd_unhex(const char *s, size_t len, unsigned char *out, size_t n)
{
    size_t i;
    int hi, lo;

    if (len != 2 * n)
        return -1;
    for (i = 0; i < n; i++) {
        hi = s[2 * i] <= '9' ? s[2 * i] - '0' : s[2 * i] - 'a' + 10;
        lo = s[2 * i + 1] <= '9' ? s[2 * i + 1] - '0' : s[2 * i + 1] - 'a' + 10;
        if (hi < 0 || hi > 15 || lo < 0 || lo > 15)
            return -1;
        out[i] = (unsigned char)(hi * 16 + lo);
    }
    return 0;
}

static void rd_key(const rd_store *q, const char *id, char *out, size_t len)
{
    snprintf(out, len, "%ss:%s", q->prefix, id);
}

/* Run an EVAL of script with nkeys keys and the rest as arguments. */
static redisReply *rd_eval(rd_store *q, const char *script, int nkeys, int argc, const char **argv,
                           const size_t *lens, int repeatable, vbm_error *err)
{
    const char *a[64];
    size_t l[64];
    char nk[16];
    int i;

    if (argc + 3 > 64) {
        vbm_fail(err, VBM_EUNAVAIL, NULL, "internal: too many script arguments");
        return NULL;
    }
    snprintf(nk, sizeof nk, "%d", nkeys);
    a[0] = "EVAL";
    l[0] = 4;
    a[1] = script;
    l[1] = strlen(script);
    a[2] = nk;
    l[2] = strlen(nk);
    for (i = 0; i < argc; i++) {
        a[3 + i] = argv[i];
        l[3 + i] = lens != NULL ? lens[i] : strlen(argv[i]);
    }
    return rd_cmd(q, argc + 3, a, l, repeatable, err);
}

static vbm_status rd_load(void *impl, const char *id, eng_record *out, vbm_error *err)
{
    rd_store *q = impl;
    char key[160];
    const char *argv[2];
    redisReply *r, *f, *v;
    const unsigned char *usage = NULL;
    size_t i, n_usage = 0, got = 0;
    uint64_t want = 0, sum;
    int have_sum = 0, owner_ok = 0;
    vbm_status st = VBM_OK;

    memset(out, 0, sizeof *out);
    rd_key(q, id, key, sizeof key);
    argv[0] = "HGETALL";
    argv[1] = key;
    pthread_mutex_lock(&q->lock);
    r = rd_cmd(q, 2, argv, NULL, 1, err);
    pthread_mutex_unlock(&q->lock);
    if (r == NULL)
        return VBM_EUNAVAIL;
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        freeReplyObject(r);
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    }
    snprintf(out->id, sizeof out->id, "%s", id);
    for (i = 0; i + 1 < r->elements && st == VBM_OK; i += 2) {
        f = r->element[i];
        v = r->element[i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        got++;
        if (strcmp(f->str, "owner") == 0) {
            if (rd_unhex(v->str, v->len, out->owner, ENG_OWNER_LEN) != 0)
                st = VBM_ECORRUPT;
            else
                owner_ok = 1;
        } else if (strcmp(f->str, "version") == 0) {
            out->version = strtoull(v->str, NULL, 10);
        } else if (strcmp(f->str, "ttl_s") == 0) {
            out->ttl_s = strtol(v->str, NULL, 10);
        } else if (strcmp(f->str, "created") == 0) {
            out->created = strtod(v->str, NULL);
        } else if (strcmp(f->str, "updated") == 0) {
            out->updated = strtod(v->str, NULL);
        } else if (strcmp(f->str, "used") == 0) {
            out->used = strtod(v->str, NULL);
        } else if (strcmp(f->str, "solver_iterations") == 0) {
            out->solver.iterations = (int)strtol(v->str, NULL, 10);
        } else if (strcmp(f->str, "solver_tolerance") == 0) {
            out->solver.tolerance = strtod(v->str, NULL);
        } else if (strcmp(f->str, "solver_init") == 0) {
            out->solver.init = (vbm_init)strtol(v->str, NULL, 10);
        } else if (strcmp(f->str, "model") == 0) {
            snprintf(out->model_name, sizeof out->model_name, "%.*s", (int)v->len, v->str);
        } else if (strcmp(f->str, "checksum") == 0) {
            want = strtoull(v->str, NULL, 10);
            have_sum = 1;
        } else if (strcmp(f->str, "usage") == 0) {
            usage = (const unsigned char *)v->str;
            n_usage = v->len;
        } else if (strcmp(f->str, "memory") == 0 && v->len > 0) {
            out->blob = malloc(v->len);
            if (out->blob == NULL)
                st = VBM_ENOMEM;
            else
                memcpy(out->blob, v->str, v->len);
            out->blob_len = v->len;
        }
    }
    sum = eng_backend_checksum(out->blob, out->blob_len, usage, n_usage);
    if (st == VBM_OK
        && (out->blob == NULL || !have_sum || sum != want || n_usage % 8 != 0 || got < RD_NFIELDS))
        st = VBM_ECORRUPT;
    if (st == VBM_OK && n_usage > 0) {
        out->n_usage = n_usage / 8;
        out->usage = malloc(n_usage);
        if (out->usage == NULL)
            st = VBM_ENOMEM;
        else
            eng_backend_usage_decode(usage, out->n_usage, out->usage);
    }
    freeReplyObject(r);
    if (st != VBM_OK) {
        uint64_t version = out->version;
        unsigned char owner[ENG_OWNER_LEN];

        memcpy(owner, out->owner, ENG_OWNER_LEN);
        eng_record_free(out);
        memset(out, 0, sizeof *out);
        if (st == VBM_ENOMEM)
            return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory loading session %s", id);
        /* what is known of it: the id, its version and its owner (nobody's when unreadable) */
        snprintf(out->id, sizeof out->id, "%s", id);
        out->version = version;
        memset(out->owner, 0xff, ENG_OWNER_LEN);
        if (owner_ok)
            memcpy(out->owner, owner, ENG_OWNER_LEN);
        return vbm_fail(err, VBM_ECORRUPT, NULL,
                        "the stored record of session %s is corrupt (checksum mismatch or "
                        "missing fields)",
                        id);
    }
    return VBM_OK;
}

/* Append one argument (s, l) to an argument vector at *n. */
static void rd_arg(const char **argv, size_t *lens, int *n, const char *s, size_t l)
{
    argv[*n] = s;
    lens[*n] = l;
    (*n)++;
}

static vbm_status rd_save(void *impl, const eng_record *r, uint64_t expected, vbm_error *err)
{
    rd_store *q = impl;
    char key[160], gidx[96], oidx[192], owner[2 * ENG_OWNER_LEN + 1];
    char sexp[24], sexpire[24], sver[24], sttl[24], screated[32], supdated[32], sused[32];
    char siter[16], stol[32], sinit[16], ssum[24];
    const char *argv[64];
    size_t lens[64];
    unsigned char *ub;
    redisReply *rep;
    vbm_status st = VBM_OK;
    long long code;
    int n = 0, fail;

    if (r->blob == NULL || r->blob_len == 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "session %s has no memory to store", r->id);
    ub = eng_backend_usage_encode(r->usage, r->n_usage, &fail);
    if (fail)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    rd_key(q, r->id, key, sizeof key);
    rd_hex(r->owner, ENG_OWNER_LEN, owner);
    snprintf(gidx, sizeof gidx, "%sids", q->prefix);
    snprintf(oidx, sizeof oidx, "%sowner:%s", q->prefix, owner);
    snprintf(sexp, sizeof sexp, "%llu", (unsigned long long)expected);
    snprintf(sexpire, sizeof sexpire, "%lld",
             r->ttl_s > 0 ? (long long)((r->used + (double)r->ttl_s) * 1000.0) : 0LL);
    snprintf(sver, sizeof sver, "%llu", (unsigned long long)r->version);
    snprintf(sttl, sizeof sttl, "%ld", r->ttl_s);
    snprintf(screated, sizeof screated, "%.17g", r->created);
    snprintf(supdated, sizeof supdated, "%.17g", r->updated);
    snprintf(sused, sizeof sused, "%.17g", r->used);
    snprintf(siter, sizeof siter, "%d", r->solver.iterations);
    snprintf(stol, sizeof stol, "%.17g", r->solver.tolerance);
    snprintf(sinit, sizeof sinit, "%d", (int)r->solver.init);
    snprintf(ssum, sizeof ssum, "%llu",
             (unsigned long long)eng_backend_checksum(r->blob, r->blob_len, ub,
                                                      ub != NULL ? 8 * r->n_usage : 0));
    rd_arg(argv, lens, &n, key, strlen(key));
    rd_arg(argv, lens, &n, gidx, strlen(gidx));
    rd_arg(argv, lens, &n, oidx, strlen(oidx));
    rd_arg(argv, lens, &n, sexp, strlen(sexp));
    rd_arg(argv, lens, &n, r->id, strlen(r->id));
    rd_arg(argv, lens, &n, sexpire, strlen(sexpire));
    {
        const char *field[RD_NFIELDS] = {"owner",
                                         "version",
                                         "ttl_s",
                                         "created",
                                         "updated",
                                         "used",
                                         "solver_iterations",
                                         "solver_tolerance",
                                         "solver_init",
                                         "model",
                                         "checksum",
                                         "usage",
                                         "memory"};
        const char *value[RD_NFIELDS] = {owner,
                                         sver,
                                         sttl,
                                         screated,
                                         supdated,
                                         sused,
                                         siter,
                                         stol,
                                         sinit,
                                         r->model_name,
                                         ssum,
                                         ub != NULL ? (const char *)ub : "",
                                         (const char *)r->blob};
        int i;

        for (i = 0; i < RD_NFIELDS; i++) {
            rd_arg(argv, lens, &n, field[i], strlen(field[i]));
            if (i == RD_NFIELDS - 2)
                rd_arg(argv, lens, &n, value[i], ub != NULL ? 8 * r->n_usage : 0);
            else if (i == RD_NFIELDS - 1)
                rd_arg(argv, lens, &n, value[i], r->blob_len);
            else
                rd_arg(argv, lens, &n, value[i], strlen(value[i]));
        }
    }
    pthread_mutex_lock(&q->lock);
    rep = rd_eval(q, rd_lua_save, 3, n, argv, lens, 0, err);
    code = rep == NULL ? -4 : rep->type == REDIS_REPLY_INTEGER ? rep->integer : -3;
    if (code == 0 && rd_wait(q, err) != VBM_OK)
        code = -4;
    pthread_mutex_unlock(&q->lock);
    free(ub);
    freeReplyObject(rep);
    if (code == -4) /* the failure rd_cmd or rd_wait recorded */
        return err != NULL && err->status == VBM_EUNKNOWN ? VBM_EUNKNOWN : VBM_EUNAVAIL;
    if (code == -1)
        st = vbm_fail(err, VBM_ECONFLICT, NULL, "session %s already exists in the store", r->id);
    else if (code == -2)
        st = vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s (deleted or expired)", r->id);
    else if (code > 0)
        st =
            vbm_fail(err, VBM_ECONFLICT, NULL, "the stored session %s is at version %lld, not %llu",
                     r->id, code, (unsigned long long)expected);
    else if (code != 0)
        st = vbm_fail(err, VBM_EUNAVAIL, NULL, "unexpected reply from the session store");
    return st;
}

static vbm_status rd_remove(void *impl, const char *id, const unsigned char *owner, vbm_error *err)
{
    rd_store *q = impl;
    char key[160], gidx[96], oprefix[96], ohex[2 * ENG_OWNER_LEN + 1] = "";
    const char *argv[5];
    redisReply *rep;
    long long code;

    rd_key(q, id, key, sizeof key);
    snprintf(gidx, sizeof gidx, "%sids", q->prefix);
    snprintf(oprefix, sizeof oprefix, "%sowner:", q->prefix);
    if (owner != NULL)
        rd_hex(owner, ENG_OWNER_LEN, ohex);
    argv[0] = key;
    argv[1] = gidx;
    argv[2] = id;
    argv[3] = ohex;
    argv[4] = oprefix;
    pthread_mutex_lock(&q->lock);
    rep = rd_eval(q, rd_lua_remove, 2, 5, argv, NULL, 0, err);
    code = rep == NULL ? -4 : rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    if (code == 0 && rd_wait(q, err) != VBM_OK)
        code = -4;
    pthread_mutex_unlock(&q->lock);
    freeReplyObject(rep);
    if (code == -4) /* the failure rd_cmd or rd_wait recorded */
        return err != NULL && err->status == VBM_EUNKNOWN ? VBM_EUNKNOWN : VBM_EUNAVAIL;
    if (code != 0)
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    return VBM_OK;
}

static vbm_status rd_list(void *impl, const unsigned char *owner, const char *after, int limit,
                          char (*ids)[ENG_ID_LEN + 1], int *n, vbm_error *err)
{
    rd_store *q = impl;
    char idx[192], gidx[96], min[ENG_ID_LEN + 8], slimit[16], kprefix[80],
        ohex[2 * ENG_OWNER_LEN + 1];
    const char *argv[5];
    redisReply *rep;
    size_t i;

    *n = 0;
    snprintf(gidx, sizeof gidx, "%sids", q->prefix);
    if (owner != NULL) {
        rd_hex(owner, ENG_OWNER_LEN, ohex);
        snprintf(idx, sizeof idx, "%sowner:%s", q->prefix, ohex);
    } else {
        snprintf(idx, sizeof idx, "%s", gidx);
    }
    if (after != NULL && after[0] != '\0')
        snprintf(min, sizeof min, "(%.*s", ENG_ID_LEN, after);
    else
        snprintf(min, sizeof min, "-");
    snprintf(slimit, sizeof slimit, "%d", limit);
    snprintf(kprefix, sizeof kprefix, "%ss:", q->prefix);
    argv[0] = idx;
    argv[1] = min;
    argv[2] = slimit;
    argv[3] = kprefix;
    argv[4] = gidx;
    pthread_mutex_lock(&q->lock);
    rep = rd_eval(q, rd_lua_list, 1, 5, argv, NULL, 1, err);
    pthread_mutex_unlock(&q->lock);
    if (rep == NULL)
        return VBM_EUNAVAIL;
    for (i = 0; rep->type == REDIS_REPLY_ARRAY && i < rep->elements && *n < limit; i++) {
        if (rep->element[i]->type != REDIS_REPLY_STRING || rep->element[i]->len != ENG_ID_LEN)
            continue;
        memcpy(ids[*n], rep->element[i]->str, ENG_ID_LEN);
        ids[*n][ENG_ID_LEN] = '\0';
        (*n)++;
    }
    freeReplyObject(rep);
    return VBM_OK;
}

/* Redis expires idle sessions itself (their hash carries the TTL). */
static vbm_status rd_idle(void *impl, double now_wall, int limit, char (*ids)[ENG_ID_LEN + 1],
                          int *n, vbm_error *err)
{
    (void)impl;
    (void)now_wall;
    (void)limit;
    (void)ids;
    (void)err;
    *n = 0;
    return VBM_OK;
}

/* The expiry is renewed by eng_backend_current on every use: nothing to do. */
static vbm_status rd_touch(void *impl, const char *id, double used, vbm_error *err)
{
    (void)impl;
    (void)id;
    (void)used;
    (void)err;
    return VBM_OK;
}

static vbm_status rd_current(void *impl, const char *id, uint64_t *version, vbm_error *err)
{
    rd_store *q = impl;
    char key[160];
    const char *argv[1];
    redisReply *rep;
    long long v;

    rd_key(q, id, key, sizeof key);
    argv[0] = key;
    pthread_mutex_lock(&q->lock);
    rep = rd_eval(q, rd_lua_current, 1, 1, argv, NULL, 1, err);
    pthread_mutex_unlock(&q->lock);
    if (rep == NULL)
        return VBM_EUNAVAIL;
    v = rep->type == REDIS_REPLY_INTEGER ? rep->integer : -1;
    freeReplyObject(rep);
    if (v < 1)
        return vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    *version = (uint64_t)v;
    return VBM_OK;
}

static vbm_status rd_count(void *impl, long *n, vbm_error *err)
{
    rd_store *q = impl;
    char gidx[96];
    const char *argv[2];
    redisReply *rep;

    snprintf(gidx, sizeof gidx, "%sids", q->prefix);
    argv[0] = "ZCARD";
    argv[1] = gidx;
    pthread_mutex_lock(&q->lock);
    rep = rd_cmd(q, 2, argv, NULL, 1, err);
    pthread_mutex_unlock(&q->lock);
    if (rep == NULL)
        return VBM_EUNAVAIL;
    *n = rep->type == REDIS_REPLY_INTEGER ? (long)rep->integer : 0;
    freeReplyObject(rep);
    return VBM_OK;
}

static vbm_status rd_check(void *impl, vbm_error *err)
{
    rd_store *q = impl;
    const char *argv[1] = {"PING"};
    redisReply *rep;

    pthread_mutex_lock(&q->lock);
    rep = rd_cmd(q, 1, argv, NULL, 1, err);
    pthread_mutex_unlock(&q->lock);
    if (rep == NULL)
        return VBM_EUNAVAIL;
    freeReplyObject(rep);
    return VBM_OK;
}

static void rd_close(void *impl)
{
    rd_store *q = impl;

    redisFree(q->c);
    pthread_mutex_destroy(&q->lock);
    free(q);
}

static const eng_backend_ops rd_ops = {rd_load,  rd_save,  rd_remove, rd_list,  rd_idle,
                                       rd_touch, rd_count, rd_check,  rd_close, rd_current};

vbm_status store_redis_parse_addrs(const char *list, const char *option, store_redis_addr *out,
                                   int max, int *n, vbm_error *err)
{
    const char *item = list, *end, *colon;
    char *pend;
    size_t len, hlen;
    long port;

    *n = 0;
    if (list == NULL || list[0] == '\0')
        return vbm_fail(err, VBM_EINVAL, option, "expected HOST:PORT[,HOST:PORT...], got \"\"");
    for (;;) {
        end = strchr(item, ',');
        len = end != NULL ? (size_t)(end - item) : strlen(item);
        colon = NULL;
        for (hlen = len; hlen > 0; hlen--) {
            if (item[hlen - 1] == ':') {
                colon = item + hlen - 1;
                break;
            }
        }
        if (len == 0 || colon == NULL || colon == item || colon + 1 == item + len)
            return vbm_fail(err, VBM_EINVAL, option,
                            "expected HOST:PORT in \"%.*s\" (item %d of \"%.200s\")",
                            (int)(len > 300 ? 300 : len), item, *n + 1, list);
        errno = 0;
        port = strtol(colon + 1, &pend, 10);
        if (pend != item + len || errno != 0 || port < 1 || port > 65535 || colon[1] == '+'
            || colon[1] == '-' || colon[1] == ' ')
            return vbm_fail(err, VBM_EINVAL, option, "port of \"%.*s\" is not a number in 1..65535",
                            (int)(len > 300 ? 300 : len), item);
        hlen = (size_t)(colon - item);
        if (hlen > 2 && item[0] == '[' && item[hlen - 1] == ']') { /* [V6]:PORT */
            item++;
            hlen -= 2;
        }
        if (hlen >= sizeof out[0].host)
            return vbm_fail(err, VBM_EINVAL, option, "host of item %d is over %zu bytes", *n + 1,
                            sizeof out[0].host - 1);
        if (*n >= max)
            return vbm_fail(err, VBM_EINVAL, option, "more than %d addresses", max);
        memcpy(out[*n].host, item, hlen);
        out[*n].host[hlen] = '\0';
        out[*n].port = (int)port;
        (*n)++;
        if (end == NULL)
            return VBM_OK;
        item = end + 1;
    }
}

vbm_status store_redis_open(const char *host, int port, const char *prefix, eng_backend **out,
                            vbm_error *err)
{
    store_redis_config cfg;

    memset(&cfg, 0, sizeof cfg);
    if (strlen(host) >= sizeof cfg.server.host) {
        *out = NULL;
        return vbm_fail(err, VBM_EINVAL, "redis", "bad Redis address or key prefix");
    }
    snprintf(cfg.server.host, sizeof cfg.server.host, "%s", host);
    cfg.server.port = port;
    cfg.prefix = prefix;
    return store_redis_open_config(&cfg, out, err);
}

vbm_status store_redis_open_config(const store_redis_config *cfg, eng_backend **out, vbm_error *err)
{
    rd_store *q;
    int i;

    *out = NULL;
    if (cfg->n_sentinels < 0 || cfg->n_sentinels > STORE_REDIS_MAX_SENTINELS
        || cfg->min_replicas < 0 || (cfg->min_replicas > 0 && cfg->wait_timeout_ms < 1))
        return vbm_fail(err, VBM_EINVAL, "redis-sentinel",
                        "bad Redis configuration (sentinels, replicas or timeout)");
    if (cfg->n_sentinels > 0
        && (cfg->service == NULL || cfg->service[0] == '\0'
            || strlen(cfg->service) >= sizeof((rd_store *)0)->service))
        return vbm_fail(err, VBM_EINVAL, "redis-service",
                        "a service name of 1..%zu bytes is needed with sentinels",
                        sizeof((rd_store *)0)->service - 1);
    if ((cfg->n_sentinels == 0 && (cfg->server.port < 1 || cfg->server.port > 65535))
        || strlen(cfg->prefix) >= sizeof((rd_store *)0)->prefix)
        return vbm_fail(err, VBM_EINVAL, "redis", "bad Redis address or key prefix");
    for (i = 0; i < cfg->n_sentinels; i++) {
        if (cfg->sentinels[i].port < 1 || cfg->sentinels[i].port > 65535
            || cfg->sentinels[i].host[0] == '\0')
            return vbm_fail(err, VBM_EINVAL, "redis-sentinel", "bad sentinel address");
    }
    q = calloc(1, sizeof *q);
    if (q == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&q->lock, NULL);
    if (cfg->n_sentinels == 0) {
        snprintf(q->host, sizeof q->host, "%s", cfg->server.host);
        q->port = cfg->server.port;
        q->backoff_max = RD_BACKOFF_MAX;
    } else { /* no primary known until the sentinels name one */
        q->host[0] = '\0';
        q->port = 0;
        memcpy(q->sentinels, cfg->sentinels, (size_t)cfg->n_sentinels * sizeof cfg->sentinels[0]);
        q->n_sentinels = cfg->n_sentinels;
        snprintf(q->service, sizeof q->service, "%s", cfg->service);
        q->backoff_max = RD_BACKOFF_MAX_SENTINEL;
    }
    q->min_replicas = cfg->min_replicas;
    q->wait_ms = cfg->wait_timeout_ms;
    snprintf(q->prefix, sizeof q->prefix, "%s", cfg->prefix);
    q->base.ops = &rd_ops;
    q->base.impl = q;
    q->base.name = "redis";
    q->base.shared = 1;
    *out = &q->base;
    return VBM_OK;
}

void store_redis_set_clock(eng_backend *b, double (*now)(void *ctx), void *ctx)
{
    rd_store *q;

    if (b == NULL || b->ops != &rd_ops)
        return;
    q = b->impl;
    pthread_mutex_lock(&q->lock);
    q->now = now;
    q->now_ctx = ctx;
    pthread_mutex_unlock(&q->lock);
}

long store_redis_discoveries(eng_backend *b)
{
    rd_store *q;
    long n;

    if (b == NULL || b->ops != &rd_ops || ((rd_store *)b->impl)->n_sentinels == 0)
        return -1;
    q = b->impl;
    pthread_mutex_lock(&q->lock);
    n = q->discoveries;
    pthread_mutex_unlock(&q->lock);
    return n;
}

long store_redis_connect_tries(eng_backend *b)
{
    rd_store *q;
    long n;

    if (b == NULL || b->ops != &rd_ops)
        return -1;
    q = b->impl;
    pthread_mutex_lock(&q->lock);
    n = q->connect_tries;
    pthread_mutex_unlock(&q->lock);
    return n;
}
