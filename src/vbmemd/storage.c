/* storage.c -- owns vbmemd's choice of session store (SQLite in --data-dir, Redis with --redis or
 * --redis-sentinel, or memory) and its one-shot storage commands (--list-sessions, --export-all,
 * --import-all). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/backend.h"
#include "vbmemd/storage.h"

#define STORAGE_PAGE 64

/* Open the Redis backend of the options: --redis-sentinel and --redis-service,
 * or --redis "HOST:PORT" ("[V6]:PORT" for IPv6), with WAIT's settings. */
static vbm_status storage_open_redis(const vbmemd_options *o, eng_backend **out, vbm_error *err)
{
    store_redis_config cfg;
    vbm_status st;

    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = "vbmem:";
    cfg.min_replicas = o->redis_min_replicas;
    cfg.wait_timeout_ms = o->redis_wait_timeout_ms;
    if (o->redis_sentinel != NULL) {
        st = store_redis_parse_addrs(o->redis_sentinel, "redis-sentinel", cfg.sentinels,
                                     STORE_REDIS_MAX_SENTINELS, &cfg.n_sentinels, err);
        cfg.service = o->redis_service;
    } else {
        int n;

        st = store_redis_parse_addrs(o->redis, "redis", &cfg.server, 1, &n, err);
    }
    if (st != VBM_OK)
        return st;
    return store_redis_open_config(&cfg, out, err);
}

/* The start-up check of a SQLite backend into *check: PRAGMA quick_check, then every record read
 * and its checksum checked (a memory that passes but does not import is found on first use).
 * Fails with VBM_EUNAVAIL (the records cannot be listed
 * or read), VBM_ENOMEM. */
static vbm_status storage_check(eng_backend *b, vbmemd_store_check *check, vbm_error *err)
{
    char ids[STORAGE_PAGE][ENG_ID_LEN + 1], after[ENG_ID_LEN + 1] = "";
    eng_record rec;
    vbm_error why;
    vbm_status st;
    int n, i;

    check->ran = 1;
    if (eng_backend_check(b, &why) == VBM_OK)
        snprintf(check->quick_check, sizeof check->quick_check, "ok");
    else
        snprintf(check->quick_check, sizeof check->quick_check, "%s", why.msg);
    for (;;) {
        st = eng_backend_list(b, NULL, after, STORAGE_PAGE, ids, &n, err);
        if (st != VBM_OK)
            return st;
        for (i = 0; i < n; i++) {
            st = eng_backend_load(b, ids[i], &rec, err);
            if (st == VBM_ENOTFOUND)
                continue;
            if (st != VBM_OK && st != VBM_ECORRUPT)
                return st;
            check->records++;
            eng_record_free(&rec);
            if (st == VBM_ECORRUPT) {
                if (check->corrupt < VBMEMD_CHECK_IDS)
                    memcpy(check->corrupt_ids[check->corrupt], ids[i], ENG_ID_LEN + 1);
                check->corrupt++;
            }
        }
        if (n < STORAGE_PAGE)
            return VBM_OK;
        memcpy(after, ids[n - 1], sizeof after);
    }
}

vbm_status vbmemd_storage_open(const vbmemd_options *o, eng_store **out, int *durable,
                               vbmemd_store_check *check, vbm_error *err)
{
    eng_store_limits lim;
    eng_backend *b = NULL;
    vbm_status st;

    *out = NULL;
    *durable = 0;
    memset(check, 0, sizeof *check);
    lim.max_sessions = o->limits.max_sessions;
    lim.max_bytes = o->limits.max_memory_bytes;
    if ((o->redis != NULL && o->redis[0] != '\0') || o->redis_sentinel != NULL) {
        if (o->data_dir != NULL && o->data_dir[0] != '\0')
            return vbm_fail(err, VBM_EINVAL, "redis", "give --data-dir or --redis, not both");
        st = storage_open_redis(o, &b, err);
    } else if (o->data_dir == NULL || o->data_dir[0] == '\0') {
        return eng_store_memory_create(&lim, out, err);
    } else {
        st = store_sqlite_open_dir(o->data_dir, &b, err);
        if (st == VBM_OK && (st = storage_check(b, check, err)) != VBM_OK)
            eng_backend_close(b);
    }
    if (st != VBM_OK)
        return st;
    st = eng_store_durable_create(b, &lim, o->max_resident, out, err);
    if (st != VBM_OK) {
        eng_backend_close(b);
        return st;
    }
    *durable = 1;
    return VBM_OK;
}

int vbmemd_storage_is_command(const vbmemd_options *o)
{
    return o->list_sessions || o->export_all != NULL || o->import_all != NULL;
}

/* 1 when name can be printed inside a JSON string as is. */
static int storage_json_safe(const char *name)
{
    for (; *name != '\0'; name++) {
        if ((unsigned char)*name < 0x20 || *name == '"' || *name == '\\')
            return 0;
    }
    return 1;
}

/* A corrupt record skipped by a storage command: named on the diagnostics stream (ctx), counted
 * in count. */
typedef struct {
    FILE *diag;
    long count;
} storage_skips;

static void storage_skipped(void *ctx, const char *id, const char *why)
{
    storage_skips *sk = ctx;

    sk->count++;
    fprintf(sk->diag, "vbmemd: skipped session %s: %s\n", id, why);
}

/* Print every stored session of b as a JSON line (a corrupt one skipped). */
static vbm_status storage_list(eng_backend *b, FILE *out, storage_skips *skips, vbm_error *err)
{
    char ids[STORAGE_PAGE][ENG_ID_LEN + 1], after[ENG_ID_LEN + 1] = "";
    eng_record rec;
    vbm_status st;
    int n, i, k;

    for (;;) {
        st = eng_backend_list(b, NULL, after, STORAGE_PAGE, ids, &n, err);
        if (st != VBM_OK)
            return st;
        for (i = 0; i < n; i++) {
            st = eng_backend_load(b, ids[i], &rec, err);
            if (st == VBM_ENOTFOUND)
                continue;
            if (st == VBM_ECORRUPT) {
                eng_record_free(&rec);
                storage_skipped(skips, ids[i], err != NULL ? err->msg : "corrupt");
                continue;
            }
            if (st != VBM_OK)
                return st;
            fprintf(out, "{\"id\":\"%s\",\"owner\":\"", rec.id);
            for (k = 0; k < 8; k++)
                fprintf(out, "%02x", rec.owner[k]);
            fprintf(out,
                    "\",\"version\":%llu,\"ttl_seconds\":%ld,\"created\":%.3f,\"updated\":%.3f,"
                    "\"used\":%.3f,\"memory_bytes\":%zu,\"model\":\"%s\"}\n",
                    (unsigned long long)rec.version, rec.ttl_s, rec.created, rec.updated, rec.used,
                    rec.blob_len, storage_json_safe(rec.model_name) ? rec.model_name : "?");
            eng_record_free(&rec);
        }
        if (n < STORAGE_PAGE)
            return VBM_OK;
        memcpy(after, ids[n - 1], sizeof after);
    }
}

/* Copy every record of src into the SQLite backend dst without an fsync per
 * record, then make the copy durable (one checkpoint) before it counts as
 * done. */
static vbm_status storage_copy(eng_backend *src, eng_backend *dst, long *copied,
                               storage_skips *skips, vbm_error *err)
{
    vbm_status st = store_sqlite_bulk(dst, 1, err);

    if (st == VBM_OK)
        st = eng_backend_copy_all(src, dst, copied, storage_skipped, skips, err);
    if (st == VBM_OK)
        st = store_sqlite_bulk(dst, 0, err);
    return st;
}

vbm_status vbmemd_storage_command(const vbmemd_options *o, FILE *out, FILE *diag, vbm_error *err)
{
    storage_skips skips = {diag, 0};
    char db[4096];
    eng_backend *src = NULL, *dst = NULL;
    struct stat sb;
    long copied = 0;
    vbm_status st;

    if (o->data_dir == NULL || o->data_dir[0] == '\0')
        return vbm_fail(err, VBM_EINVAL, "data-dir",
                        "--list-sessions, --export-all and --import-all need --data-dir");
    if ((size_t)snprintf(db, sizeof db, "%s/vbmem.db", o->data_dir) >= sizeof db)
        return vbm_fail(err, VBM_EINVAL, "data-dir", "data directory path too long");
    if (o->import_all != NULL) {
        st = store_sqlite_open(o->import_all, NULL, 1, &src, err);
        if (st == VBM_OK)
            st = store_sqlite_open_dir(o->data_dir, &dst, err);
        if (st == VBM_OK)
            st = storage_copy(src, dst, &copied, &skips, err);
        if (st == VBM_OK)
            fprintf(out, "{\"imported\":%ld,\"skipped\":%ld}\n", copied, skips.count);
    } else if (o->export_all != NULL) {
        if (stat(o->export_all, &sb) == 0 || errno != ENOENT)
            return vbm_fail(err, VBM_EINVAL, "export-all",
                            "%s exists (or cannot be checked); give a new file", o->export_all);
        st = store_sqlite_open(db, NULL, 1, &src, err);
        if (st == VBM_OK)
            st = store_sqlite_open(o->export_all, NULL, 0, &dst, err);
        if (st == VBM_OK)
            st = storage_copy(src, dst, &copied, &skips, err);
        if (st == VBM_OK)
            fprintf(out, "{\"exported\":%ld,\"skipped\":%ld}\n", copied, skips.count);
    } else {
        st = store_sqlite_open(db, NULL, 1, &src, err);
        if (st == VBM_OK)
            st = storage_list(src, out, &skips, err);
    }
    eng_backend_close(dst);
    eng_backend_close(src);
    if (st == VBM_OK && fflush(out) != 0)
        st = vbm_fail(err, VBM_EUNAVAIL, NULL, "cannot write the output: %s", strerror(errno));
    return st;
}
