/* test_store.c -- Check tests of durable storage against a real SQLite file: schema and lock,
 * compare-and-set, reload, delete, list, corrupt records, rollback of a failed persist, LRU
 * residency, stored-session TTL, busy store, backup copy, concurrent saves (group commit); the
 * generic ones again against a real redis-server, with Redis TTL, reconnect and replica caches;
 * Redis Sentinel: address lists, unreachable sentinels and their backoff, discovery, WAIT on
 * replicas, and a demoted primary (READONLY) left for the new one. */
#define _GNU_SOURCE
#include <check.h>
#include <ftw.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <hiredis/hiredis.h>
#include <sqlite3.h>

#include "engine/backend.h"
#include "engine/session_impl.h"
#include "engine/store.h"

/* A fresh temporary directory per test (removed by the fixture). */
static char tdir[256];

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void setup(void)
{
    snprintf(tdir, sizeof tdir, "/tmp/vbmem-store-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static void teardown(void)
{
    nftw(tdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The backend the generic tests run against: SQLite in tdir, or the Redis
 * server the Redis fixture started (redis_port > 0). */
static int redis_port;
static pid_t redis_pid;

static vbm_status open_backend(eng_backend **b, vbm_error *err)
{
    if (redis_port > 0)
        return store_redis_open("127.0.0.1", redis_port, "test:", b, err);
    return store_sqlite_open_dir(tdir, b, err);
}

/* Start redis-server on a free loopback port with its files in tdir (AOF,
 * fsync always), waiting until it answers. */
static void redis_start(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    char port[16];
    eng_backend *b = NULL;
    vbm_error err;
    int fd, i;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    if (redis_port == 0)
        redis_port = ntohs(sa.sin_port);
    close(fd);
    snprintf(port, sizeof port, "%d", redis_port);
    redis_pid = fork();
    ck_assert_int_ge(redis_pid, 0);
    if (redis_pid == 0) {
        int null = open("/dev/null", O_WRONLY);

        dup2(null, 1);
        dup2(null, 2);
        execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "yes", "--appendfsync", "always", "--dir", tdir, (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 100; i++) {
        usleep(50000);
        ck_assert_int_eq(store_redis_open("127.0.0.1", redis_port, "test:", &b, &err), VBM_OK);
        if (eng_backend_check(b, &err) == VBM_OK) {
            eng_backend_close(b);
            return;
        }
        eng_backend_close(b);
    }
    ck_abort_msg("redis-server did not start: %s", err.msg);
}

static void redis_stop(void)
{
    if (redis_pid > 0) {
        kill(redis_pid, SIGKILL);
        waitpid(redis_pid, NULL, 0);
        redis_pid = 0;
    }
}

static void redis_setup(void)
{
    setup();
    redis_port = 0;
    redis_start();
}

static void redis_teardown(void)
{
    redis_stop();
    redis_port = 0;
    teardown();
}

static void db_path(char *out, size_t len)
{
    snprintf(out, len, "%s/vbmem.db", tdir);
}

static eng_session *new_session(const unsigned char *owner, long ttl)
{
    eng_solver sv = {10, 0.0, VBM_INIT_AUTO};
    vbm_config cfg;
    eng_session *s;
    vbm_error err;

    vbm_config_default(VBM_MIXTURE, 4, &cfg);
    cfg.rows = 2;
    cfg.clusters = 2;
    cfg.retain_max = 100;
    ck_assert_int_eq(eng_session_create(&cfg, &sv, ttl, owner, &s, &err), VBM_OK);
    return s;
}

/* Write 8 deterministic codes (seeded by k) to s. */
static vbm_status write_codes(eng_session *s, int k, eng_mode mode, vbm_error *err)
{
    double mu[8 * 4];
    vbm_codes codes = {8, 4, mu, NULL};
    eng_fit_opts o;
    eng_fit_out out;
    vbm_status st;
    int i;

    for (i = 0; i < 8 * 4; i++)
        mu[i] = sin(1.0 + i * 0.7 + k) * (i % 8 < 4 ? 1.0 : 5.0);
    memset(&o, 0, sizeof o);
    o.iterations = 5;
    o.tolerance = -1.0;
    o.init = -1;
    o.seed = (uint64_t)k;
    o.if_match = -1;
    st = eng_session_write(s, mode, &codes, &o, &out, err);
    if (st == VBM_OK)
        eng_fit_out_free(&out);
    return st;
}

/* The export of s's memory (malloc'd) and its version. */
static unsigned char *export_of(eng_session *s, size_t *len, uint64_t *version)
{
    unsigned char *buf = NULL;
    vbm_error verr;

    eng_session_rdlock(s);
    ck_assert_int_eq(vbm_export(s->mem, &buf, len, &verr), VBM_OK);
    *version = s->version;
    eng_session_unlock(s);
    return buf;
}

static eng_record record_of(eng_session *s)
{
    eng_record rec;
    vbm_error err;

    ck_assert_int_eq(eng_session_to_record(s, &rec, &err), VBM_OK);
    return rec;
}

START_TEST(test_schema_lock_reopen)
{
    char path[300], lock[300];
    eng_backend *b, *b2;
    sqlite3 *db;
    sqlite3_stmt *st;
    vbm_error err;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    /* A second owner of the directory is refused while the first holds it. */
    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b2, &err), VBM_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(err.msg, "locked"));
    ck_assert_int_eq(eng_backend_check(b, &err), VBM_OK);
    eng_backend_close(b);
    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    eng_backend_close(b);

    db_path(path, sizeof path);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
    sqlite3_finalize(st);
    /* A database from a newer schema is refused, not misread. */
    ck_assert_int_eq(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(err.msg, "schema version 99"));
    snprintf(lock, sizeof lock, "%s/vbmemd.lock", tdir);
    ck_assert_int_eq(access(lock, F_OK), 0);
}
END_TEST

/* A database of schema 1 (before the model column) migrates to 2 and keeps its rows. */
START_TEST(test_migration_from_v1)
{
    char path[300];
    eng_session *s = new_session(NULL, 0), *back;
    eng_backend *b;
    eng_record rec;
    vbm_error err;
    sqlite3 *db;
    sqlite3_stmt *st;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    eng_record_free(&rec);
    eng_backend_close(b);
    /* Turn it back into schema 1: the same rows, no model column. */
    db_path(path, sizeof path);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db,
                                  "ALTER TABLE sessions DROP COLUMN model;"
                                  "PRAGMA user_version = 1;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_load(b, s->id, &rec, &err), VBM_OK);
    ck_assert_str_eq(rec.model_name, "");
    ck_assert_int_eq(eng_session_from_record(&rec, &back, &err), VBM_OK);
    eng_session_unref(back);
    snprintf(rec.model_name, sizeof rec.model_name, "%s", "fashion-mixture");
    ck_assert_int_eq(eng_backend_save(b, &rec, 1, &err), VBM_OK);
    eng_record_free(&rec);
    ck_assert_int_eq(eng_backend_load(b, s->id, &rec, &err), VBM_OK);
    ck_assert_str_eq(rec.model_name, "fashion-mixture");
    eng_record_free(&rec);
    eng_backend_close(b);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(st, 0), 2);
    sqlite3_finalize(st);
    sqlite3_close(db);
    eng_session_unref(s);
}
END_TEST

START_TEST(test_cas_reload_delete)
{
    unsigned char owner[ENG_OWNER_LEN] = {7};
    eng_session *s = new_session(owner, 0), *back;
    eng_backend *b;
    eng_record rec, got;
    vbm_error err;
    unsigned char *e1, *e2;
    size_t n1, n2;
    uint64_t v1, v2;

    ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_ECONFLICT); /* exists */
    eng_record_free(&rec);

    ck_assert_int_eq(write_codes(s, 1, ENG_REPLACE, &err), VBM_OK); /* version 2 */
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 2, &err), VBM_ECONFLICT); /* stored is 1 */
    ck_assert_ptr_nonnull(strstr(err.msg, "version 1"));
    ck_assert_int_eq(eng_backend_save(b, &rec, 1, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_save(b, &rec, 1, &err), VBM_ECONFLICT); /* lost update refused */
    eng_record_free(&rec);

    /* Reload after closing: bit-exact memory, same metadata. */
    eng_backend_close(b);
    ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_load(b, s->id, &got, &err), VBM_OK);
    ck_assert_int_eq(got.version, 2);
    ck_assert(memcmp(got.owner, owner, ENG_OWNER_LEN) == 0);
    ck_assert_int_eq(eng_session_from_record(&got, &back, &err), VBM_OK);
    eng_record_free(&got);
    e1 = export_of(s, &n1, &v1);
    e2 = export_of(back, &n2, &v2);
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(e1, e2, n1) == 0);
    ck_assert_int_eq(v1, v2);
    ck_assert_double_eq(s->created, back->created);
    ck_assert_ptr_nonnull(back->usage);
    ck_assert(memcmp(s->usage, back->usage, 2 * sizeof(double)) == 0);
    free(e1);
    free(e2);
    eng_session_unref(back);

    /* Delete: by the wrong owner refused; then gone for load, save and delete. */
    ck_assert_int_eq(eng_backend_remove(
                         b, s->id, (const unsigned char *)"other-owner-xxxxxxxxxxxxxxxxxxxx", &err),
                     VBM_ENOTFOUND);
    ck_assert_int_eq(eng_backend_remove(b, s->id, owner, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_load(b, s->id, &got, &err), VBM_ENOTFOUND);
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 2, &err), VBM_ENOTFOUND);
    eng_record_free(&rec);
    ck_assert_int_eq(eng_backend_remove(b, s->id, NULL, &err), VBM_ENOTFOUND);
    eng_backend_close(b);
    eng_session_unref(s);
}
END_TEST

START_TEST(test_list_owners_pages)
{
    unsigned char a[ENG_OWNER_LEN] = {1}, c[ENG_OWNER_LEN] = {2};
    char ids[3][ENG_ID_LEN + 1], after[ENG_ID_LEN + 1] = "";
    eng_backend *b;
    eng_session *s;
    eng_record rec;
    vbm_error err;
    int i, n, total = 0;
    long count;

    ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
    for (i = 0; i < 7; i++) {
        s = new_session(i < 5 ? a : c, 0);
        rec = record_of(s);
        ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
        eng_record_free(&rec);
        eng_session_unref(s);
    }
    do {
        ck_assert_int_eq(eng_backend_list(b, a, after, 3, ids, &n, &err), VBM_OK);
        for (i = 0; i < n; i++) {
            ck_assert(strcmp(ids[i], after) > 0);
            strcpy(after, ids[i]);
        }
        total += n;
    } while (n == 3);
    ck_assert_int_eq(total, 5);
    after[0] = '\0';
    total = 0;
    do {
        ck_assert_int_eq(eng_backend_list(b, NULL, after, 3, ids, &n, &err), VBM_OK);
        if (n > 0)
            strcpy(after, ids[n - 1]);
        total += n;
    } while (n == 3);
    ck_assert_int_eq(total, 7);
    ck_assert_int_eq(eng_backend_count(b, &count, &err), VBM_OK);
    ck_assert_int_eq(count, 7);
    eng_backend_close(b);
}
END_TEST

/* The corrupt hook of test_corrupt_records_rejected: counts the records met. */
static void count_corrupt(void *ctx, const char *id, const char *msg)
{
    (void)id;
    ck_assert_ptr_nonnull(strstr(msg, "corrupt"));
    (*(int *)ctx)++;
}

/* eng_backend_copy_all's skipped callback: keeps the id (ctx: ENG_ID_LEN + 1 chars). */
static void note_skipped(void *ctx, const char *id, const char *why)
{
    ck_assert_ptr_nonnull(strstr(why, "corrupt"));
    snprintf(ctx, ENG_ID_LEN + 1, "%s", id);
}

START_TEST(test_corrupt_records_rejected)
{
    static const unsigned char zero_owner[ENG_OWNER_LEN];
    unsigned char other[ENG_OWNER_LEN];
    char path[300];
    eng_session *s = new_session(NULL, 0), *t = new_session(NULL, 0), *got, *ok, **page;
    int met = 0, n = 0, more = 0;
    eng_store_limits lim = {0, 0};
    eng_backend *b;
    eng_store *st;
    eng_record rec;
    vbm_error err;
    sqlite3 *db;
    char sql[256];

    memset(other, 7, sizeof other);
    ck_assert_int_eq(write_codes(s, 3, ENG_REPLACE, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    eng_record_free(&rec);
    /* t: a record whose checksum matches but whose memory does not import. */
    rec = record_of(t);
    rec.blob[0] ^= 0xff; /* bad magic */
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    eng_record_free(&rec);
    eng_backend_close(b);

    /* Flip one byte of s's memory behind the store's back: the checksum catches it. */
    db_path(path, sizeof path);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    snprintf(sql, sizeof sql,
             "UPDATE sessions SET memory = substr(memory, 1, 100) || x'ff' || "
             "substr(memory, 102) WHERE id = '%s'",
             s->id);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(sqlite3_changes(db), 1);
    sqlite3_close(db);

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    /* a corrupt record: its own status, and what is known of it (id, version, owner) */
    ck_assert_int_eq(eng_backend_load(b, s->id, &rec, &err), VBM_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "corrupt"));
    ck_assert_str_eq(rec.id, s->id);
    ck_assert_uint_eq(rec.version, eng_session_version(s));
    ck_assert_ptr_null(rec.blob);
    ck_assert_int_eq(memcmp(rec.owner, zero_owner, ENG_OWNER_LEN), 0);
    eng_record_free(&rec);
    ck_assert_int_eq(eng_backend_load(b, t->id, &rec, &err), VBM_OK);
    ck_assert_int_eq(eng_session_from_record(&rec, &got, &err), VBM_EFORMAT);
    eng_record_free(&rec);
    ck_assert_int_eq(eng_store_durable_create(b, &lim, 10, &st, &err), VBM_OK);
    eng_store_set_corrupt_hook(st, count_corrupt, &met);
    ck_assert_int_eq(eng_store_get(st, s->id, NULL, &got, &err), VBM_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "DELETE"));
    ck_assert_int_eq(eng_store_get(st, t->id, NULL, &got, &err), VBM_ECORRUPT);
    ck_assert_ptr_nonnull(strstr(err.msg, "does not import"));
    ck_assert_int_eq(met, 2);
    /* another owner: not found, and nothing reported */
    ck_assert_int_eq(eng_store_get(st, s->id, other, &got, &err), VBM_ENOTFOUND);
    ck_assert_int_eq(met, 2);
    ck_assert_int_eq(eng_store_get(st, "nothex", NULL, &got, &err), VBM_ENOTFOUND);
    /* a listing skips both (and reports them); a sound session next to them is listed */
    ok = new_session(NULL, 0);
    ck_assert_int_eq(eng_store_insert(st, ok, 0, &err), VBM_OK);
    ck_assert_int_eq(eng_store_list(st, NULL, NULL, 10, &page, &n, &more, &err), VBM_OK);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(eng_session_id(page[0]), ok->id);
    eng_session_unref(page[0]);
    free(page);
    ck_assert_int_eq(met, 4);
    /* the corrupt records can be removed, by their owner only */
    ck_assert_int_eq(eng_store_remove(st, s->id, other, &err), VBM_ENOTFOUND);
    ck_assert_int_eq(eng_store_remove(st, s->id, NULL, &err), VBM_OK);
    ck_assert_int_eq(eng_store_get(st, s->id, NULL, &got, &err), VBM_ENOTFOUND);
    eng_store_free(st);
    eng_session_unref(s);
    eng_session_unref(t);
    eng_session_unref(ok);
}
END_TEST

/* A backup skips a corrupt record, names it, and copies the rest. */
START_TEST(test_copy_all_skips_corrupt_records)
{
    char path[300], backup[320], sql[256], skipped[ENG_ID_LEN + 1] = "";
    eng_session *s = new_session(NULL, 0), *t = new_session(NULL, 0);
    eng_backend *b, *dst;
    eng_record rec;
    vbm_error err;
    long copied = 0;
    sqlite3 *db;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    eng_record_free(&rec);
    rec = record_of(t);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    eng_record_free(&rec);
    eng_backend_close(b);
    db_path(path, sizeof path);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    snprintf(sql, sizeof sql, "UPDATE sessions SET checksum = checksum + 1 WHERE id = '%s'", s->id);
    ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    snprintf(backup, sizeof backup, "%s/backup.db", tdir);
    ck_assert_int_eq(store_sqlite_open(path, NULL, 1, &b, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_open(backup, NULL, 0, &dst, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_copy_all(b, dst, &copied, note_skipped, skipped, &err), VBM_OK);
    ck_assert_int_eq(copied, 1);
    ck_assert_str_eq(skipped, s->id);
    ck_assert_int_eq(eng_backend_load(dst, t->id, &rec, &err), VBM_OK);
    eng_record_free(&rec);
    ck_assert_int_eq(eng_backend_load(dst, s->id, &rec, &err), VBM_ENOTFOUND);
    eng_backend_close(dst);
    eng_backend_close(b);
    eng_session_unref(s);
    eng_session_unref(t);
}
END_TEST

/* A backend that delegates to SQLite but can be told to fail saves. */
typedef struct {
    eng_backend base;
    eng_backend *real;
    int fail_saves;
} flaky_backend;

static vbm_status flaky_load(void *impl, const char *id, eng_record *out, vbm_error *err)
{
    return eng_backend_load(((flaky_backend *)impl)->real, id, out, err);
}

static vbm_status flaky_save(void *impl, const eng_record *rec, uint64_t expected, vbm_error *err)
{
    flaky_backend *f = impl;

    if (f->fail_saves)
        return vbm_fail(err, VBM_EUNAVAIL, NULL, "injected failure");
    return eng_backend_save(f->real, rec, expected, err);
}

static vbm_status flaky_remove(void *impl, const char *id, const unsigned char *owner,
                               vbm_error *err)
{
    return eng_backend_remove(((flaky_backend *)impl)->real, id, owner, err);
}

static vbm_status flaky_list(void *impl, const unsigned char *owner, const char *after, int limit,
                             char (*ids)[ENG_ID_LEN + 1], int *n, vbm_error *err)
{
    return eng_backend_list(((flaky_backend *)impl)->real, owner, after, limit, ids, n, err);
}

static vbm_status flaky_idle(void *impl, double now, int limit, char (*ids)[ENG_ID_LEN + 1], int *n,
                             vbm_error *err)
{
    return eng_backend_idle(((flaky_backend *)impl)->real, now, limit, ids, n, err);
}

static vbm_status flaky_touch(void *impl, const char *id, double used, vbm_error *err)
{
    return eng_backend_touch(((flaky_backend *)impl)->real, id, used, err);
}

static vbm_status flaky_count(void *impl, long *n, vbm_error *err)
{
    return eng_backend_count(((flaky_backend *)impl)->real, n, err);
}

static vbm_status flaky_check(void *impl, vbm_error *err)
{
    return eng_backend_check(((flaky_backend *)impl)->real, err);
}

static void flaky_close(void *impl)
{
    flaky_backend *f = impl;

    eng_backend_close(f->real);
    free(f);
}

static const eng_backend_ops flaky_ops = {flaky_load,  flaky_save,  flaky_remove, flaky_list,
                                          flaky_idle,  flaky_touch, flaky_count,  flaky_check,
                                          flaky_close, NULL};

START_TEST(test_failed_persist_rolls_back)
{
    eng_store_limits lim = {0, 0};
    flaky_backend *f = calloc(1, sizeof *f);
    eng_session *s = new_session(NULL, 0), *again;
    eng_store *st;
    vbm_error err;
    unsigned char *e1, *e2;
    size_t n1, n2;
    uint64_t v1, v2;
    vbm_memory *mem;
    vbm_error verr;

    ck_assert_ptr_nonnull(f);
    f->base.ops = &flaky_ops;
    f->base.impl = f;
    ck_assert_int_eq(open_backend(&f->real, &err), VBM_OK);
    ck_assert_int_eq(eng_store_durable_create(&f->base, &lim, 10, &st, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, s, 0, &err), VBM_OK);
    ck_assert_int_eq(write_codes(s, 1, ENG_REPLACE, &err), VBM_OK);
    e1 = export_of(s, &n1, &v1);
    ck_assert_int_eq(v1, 2);

    f->fail_saves = 1;
    ck_assert_int_eq(write_codes(s, 2, ENG_APPEND, &err), VBM_EUNAVAIL);
    ck_assert_int_eq(write_codes(s, 2, ENG_REPLACE, &err), VBM_EUNAVAIL);
    ck_assert_int_eq(vbm_memory_clone(s->mem, &mem, &verr), VBM_OK);
    ck_assert_int_eq(eng_session_replace(s, mem, -1, &v2, &err), VBM_EUNAVAIL);
    vbm_memory_free(mem); /* still the caller's after a failure */
    e2 = export_of(s, &n2, &v2);
    ck_assert_int_eq(v2, 2); /* unchanged: memory, version */
    ck_assert_uint_eq(n1, n2);
    ck_assert(memcmp(e1, e2, n1) == 0);
    free(e2);

    f->fail_saves = 0;
    ck_assert_int_eq(write_codes(s, 2, ENG_APPEND, &err), VBM_OK);
    eng_store_free(st);

    /* What was acknowledged (version 3) is what a new store serves. */
    {
        eng_backend *b;

        free(e1);
        e1 = export_of(s, &n1, &v1);
        ck_assert_int_eq(v1, 3);
        ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
        ck_assert_int_eq(eng_store_durable_create(b, &lim, 10, &st, &err), VBM_OK);
        ck_assert_int_eq(eng_store_get(st, s->id, NULL, &again, &err), VBM_OK);
        e2 = export_of(again, &n2, &v2);
        ck_assert_int_eq(v2, 3);
        ck_assert_uint_eq(n1, n2);
        ck_assert(memcmp(e1, e2, n1) == 0);
        free(e2);
        eng_session_unref(again);
        eng_store_free(st);
    }
    free(e1);
    eng_session_unref(s);
}
END_TEST

START_TEST(test_lru_resident_bound_and_restart)
{
    eng_store_limits lim = {0, 0};
    eng_session *s[6], *got;
    unsigned char *before[6], *after;
    size_t len[6], n;
    uint64_t ver[6], v;
    eng_backend *b;
    eng_store *st;
    vbm_error err;
    size_t bytes;
    long count;
    char ids[6][ENG_ID_LEN + 1];
    size_t one = 0;
    int i, round;

    ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
    ck_assert_int_eq(eng_store_durable_create(b, &lim, 2, &st, &err), VBM_OK);
    for (i = 0; i < 6; i++) {
        s[i] = new_session(NULL, 0);
        ck_assert_int_eq(eng_store_insert(st, s[i], 0, &err), VBM_OK);
        ck_assert_int_eq(write_codes(s[i], i, ENG_REPLACE, &err), VBM_OK);
        before[i] = export_of(s[i], &len[i], &ver[i]);
        strcpy(ids[i], s[i]->id);
        one = atomic_load(&s[i]->bytes);
        eng_session_unref(s[i]);
    }
    eng_store_stats(st, &count, &bytes);
    ck_assert_int_eq(count, 6);
    ck_assert_uint_le(bytes, 2 * one); /* only two stay resident */
    /* Twice: from the evicting store, then from a store reopened on the file. */
    for (round = 0; round < 2; round++) {
        for (i = 0; i < 6; i++) {
            ck_assert_int_eq(eng_store_get(st, ids[i], NULL, &got, &err), VBM_OK);
            after = export_of(got, &n, &v);
            ck_assert_uint_eq(n, len[i]);
            ck_assert(memcmp(after, before[i], n) == 0);
            ck_assert_int_eq(v, ver[i]);
            free(after);
            eng_session_unref(got);
        }
        eng_store_free(st);
        ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
        ck_assert_int_eq(eng_store_durable_create(b, &lim, 2, &st, &err), VBM_OK);
    }
    eng_store_stats(st, &count, NULL);
    ck_assert_int_eq(count, 6);
    /* Listing (nothing resident): pages of at most max_resident (2) sessions
     * whatever the limit, each with its stored content, and the cache left as
     * it was (nothing resident afterwards). */
    {
        eng_session **page;
        char cursor[ENG_ID_LEN + 1] = "";
        int np, more, seen = 0, k;

        do {
            ck_assert_int_eq(eng_store_list(st, NULL, cursor, 10, &page, &np, &more, &err), VBM_OK);
            ck_assert_int_le(np, 2);
            for (k = 0; k < np; k++) {
                for (i = 0; i < 6 && strcmp(ids[i], page[k]->id) != 0; i++) {
                }
                ck_assert_int_lt(i, 6);
                after = export_of(page[k], &n, &v);
                ck_assert_uint_eq(n, len[i]);
                ck_assert(memcmp(after, before[i], n) == 0);
                free(after);
                seen++;
            }
            if (np > 0)
                strcpy(cursor, page[np - 1]->id);
            for (k = 0; k < np; k++)
                eng_session_unref(page[k]);
            free(page);
        } while (more);
        ck_assert_int_eq(seen, 6);
        eng_store_stats(st, NULL, &bytes);
        ck_assert_uint_eq(bytes, 0);
        /* A resident session is listed as its resident copy. */
        ck_assert_int_eq(eng_store_get(st, ids[1], NULL, &got, &err), VBM_OK);
        cursor[0] = '\0'; /* the id just before ids[1], so that it opens the page */
        for (i = 0; i < 6; i++) {
            if (strcmp(ids[i], ids[1]) < 0 && strcmp(ids[i], cursor) > 0)
                strcpy(cursor, ids[i]);
        }
        ck_assert_int_eq(eng_store_list(st, NULL, cursor, 10, &page, &np, &more, &err), VBM_OK);
        ck_assert_int_ge(np, 1);
        ck_assert_str_eq(page[0]->id, ids[1]);
        ck_assert_ptr_eq(page[0], got);
        for (k = 0; k < np; k++)
            eng_session_unref(page[k]);
        free(page);
        eng_session_unref(got);
        eng_store_stats(st, NULL, &bytes);
        ck_assert_uint_eq(bytes, one);
    }
    ck_assert_int_eq(eng_store_remove(st, ids[0], NULL, &err), VBM_OK);
    ck_assert_int_eq(eng_store_get(st, ids[0], NULL, &got, &err), VBM_ENOTFOUND);
    eng_store_free(st);
    for (i = 0; i < 6; i++)
        free(before[i]);
}
END_TEST

START_TEST(test_stored_ttl_expiry)
{
    eng_store_limits lim = {0, 0};
    eng_session *a = new_session(NULL, 1), *keep = new_session(NULL, 0),
                *busy = new_session(NULL, 1);
    eng_session *got;
    char ida[ENG_ID_LEN + 1], idb[ENG_ID_LEN + 1];
    eng_backend *b;
    eng_store *st;
    vbm_error err;
    long count;
    long long now_ms;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    ck_assert_int_eq(eng_store_durable_create(b, &lim, 1, &st, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, a, 0, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, keep, 0, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, busy, 0, &err), VBM_OK);
    strcpy(ida, a->id);
    strcpy(idb, busy->id);
    eng_session_unref(a);
    eng_session_unref(keep);
    /* busy stays referenced (in use); a is evicted (max_resident 1). */
    now_ms = (long long)(eng_now() * 1000.0);
    ck_assert_int_eq(eng_store_expire(st, now_ms), 0);
    sleep(2); /* past a's TTL in the store (SQLite's record of its last use, wall clock) */
    eng_session_touch(busy);
    /* busy is in use, its last use that touch: not expired although its stored use is old
     * (now taken as the touch's own stamp, so no time between the two statements counts) */
    now_ms = atomic_load(&busy->last_used_ms);
    ck_assert_int_eq(eng_store_expire(st, now_ms), 1);
    ck_assert_int_eq(eng_store_get(st, ida, NULL, &got, &err), VBM_ENOTFOUND);
    ck_assert_int_eq(eng_store_get(st, idb, NULL, &got, &err), VBM_OK);
    eng_session_unref(got);
    eng_store_stats(st, &count, NULL);
    ck_assert_int_eq(count, 2);
    eng_session_unref(busy);
    eng_store_free(st);
}
END_TEST

START_TEST(test_busy_store_is_unavailable)
{
    char path[300];
    eng_session *s = new_session(NULL, 0);
    eng_store_limits lim = {0, 0};
    eng_backend *b;
    eng_store *st;
    vbm_error err;
    sqlite3 *db;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    ck_assert_int_eq(eng_store_durable_create(b, &lim, 10, &st, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, s, 0, &err), VBM_OK);
    db_path(path, sizeof path);
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    ck_assert_int_eq(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    ck_assert_int_eq(write_codes(s, 1, ENG_REPLACE, &err), VBM_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(err.msg, "busy"));
    ck_assert_int_eq(s->version, 1);
    ck_assert_int_eq(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    ck_assert_int_eq(write_codes(s, 1, ENG_REPLACE, &err), VBM_OK);
    ck_assert_int_eq(s->version, 2);
    eng_session_unref(s);
    eng_store_free(st);
}
END_TEST

START_TEST(test_backup_copy_all)
{
    char src_path[300], dst_path[300];
    eng_backend *b, *dst, *src;
    eng_session *s;
    eng_record rec, r2;
    vbm_error err;
    char ids[8][ENG_ID_LEN + 1];
    long copied;
    int i, n;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    for (i = 0; i < 5; i++) {
        s = new_session(NULL, i);
        ck_assert_int_eq(write_codes(s, i, ENG_REPLACE, &err), VBM_OK);
        rec = record_of(s);
        ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
        eng_record_free(&rec);
        eng_session_unref(s);
    }
    eng_backend_close(b);
    db_path(src_path, sizeof src_path);
    snprintf(dst_path, sizeof dst_path, "%s/backup.db", tdir);
    ck_assert_int_eq(store_sqlite_open(src_path, NULL, 1, &src, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_open(dst_path, NULL, 0, &dst, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_copy_all(src, dst, &copied, NULL, NULL, &err), VBM_OK);
    ck_assert_int_eq(copied, 5);
    /* Copying again replaces whatever is there (restore). */
    ck_assert_int_eq(eng_backend_copy_all(src, dst, &copied, NULL, NULL, &err), VBM_OK);
    ck_assert_int_eq(eng_backend_list(src, NULL, "", 8, ids, &n, &err), VBM_OK);
    ck_assert_int_eq(n, 5);
    for (i = 0; i < n; i++) {
        ck_assert_int_eq(eng_backend_load(src, ids[i], &rec, &err), VBM_OK);
        ck_assert_int_eq(eng_backend_load(dst, ids[i], &r2, &err), VBM_OK);
        ck_assert_uint_eq(rec.blob_len, r2.blob_len);
        ck_assert(memcmp(rec.blob, r2.blob, rec.blob_len) == 0);
        ck_assert_int_eq(rec.version, r2.version);
        ck_assert_int_eq(rec.ttl_s, r2.ttl_s);
        eng_record_free(&rec);
        eng_record_free(&r2);
    }
    eng_backend_close(src);
    eng_backend_close(dst);
}
END_TEST

/* Save s's record as version `version` over version version - 1 (0: create it). */
static void save_version(eng_backend *b, eng_session *s, uint64_t version)
{
    eng_record rec = record_of(s);
    vbm_error err;

    rec.version = version;
    ck_assert_msg(eng_backend_save(b, &rec, version - 1, &err) == VBM_OK, "%s", err.msg);
    eng_record_free(&rec);
}

/* Durability as set, read back from the open connection: WAL with
 * synchronous=FULL, and every commit fsyncs the WAL (xSync calls counted by the
 * backend's VFS). The backup's bulk mode (synchronous=NORMAL) commits without
 * an fsync, which shows the count is of fsyncs, not of commits; leaving it
 * restores FULL after a checkpoint that syncs the database file. */
START_TEST(test_synchronous_full_fsyncs_each_commit)
{
    store_sqlite_durability d0, d1, d2, d3;
    eng_session *s = new_session(NULL, 0);
    char path[300];
    eng_backend *b;
    vbm_error err;
    uint64_t v;

    ck_assert_int_eq(store_sqlite_open_dir(tdir, &b, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_durability_get(b, &d0, &err), VBM_OK);
    ck_assert_msg(d0.synchronous == 2,
                  "PRAGMA synchronous is %d on the open connection, not 2 (FULL)", d0.synchronous);
    ck_assert_str_eq(d0.journal_mode, "wal");
    for (v = 1; v <= 5; v++)
        save_version(b, s, v);
    ck_assert_int_eq(store_sqlite_durability_get(b, &d1, &err), VBM_OK);
    ck_assert_int_eq(d1.commits - d0.commits, 5);
    ck_assert_msg(d1.wal_syncs - d0.wal_syncs >= 5, "5 commits made %ld fsyncs of the WAL",
                  d1.wal_syncs - d0.wal_syncs);
    ck_assert_int_eq(store_sqlite_bulk(b, 1, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_durability_get(b, &d2, &err), VBM_OK);
    ck_assert_int_eq(d2.synchronous, 1);
    for (v = 6; v <= 8; v++)
        save_version(b, s, v);
    ck_assert_int_eq(store_sqlite_durability_get(b, &d3, &err), VBM_OK);
    ck_assert_int_eq(d3.commits - d2.commits, 3);
    ck_assert_int_eq(d3.wal_syncs, d2.wal_syncs);
    ck_assert_int_eq(store_sqlite_bulk(b, 0, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_durability_get(b, &d1, &err), VBM_OK);
    ck_assert_int_eq(d1.synchronous, 2);
    ck_assert_int_gt(d1.db_syncs, d3.db_syncs);
    eng_backend_close(b);
    /* read-only (the backup CLI's source) runs with FULL too */
    db_path(path, sizeof path);
    ck_assert_int_eq(store_sqlite_open(path, NULL, 1, &b, &err), VBM_OK);
    ck_assert_int_eq(store_sqlite_durability_get(b, &d0, &err), VBM_OK);
    ck_assert_int_eq(d0.synchronous, 2);
    ck_assert_int_eq(store_sqlite_durability_get(NULL, &d0, &err), VBM_EINVAL);
    eng_backend_close(b);
    eng_session_unref(s);
}
END_TEST

/* Group commit: threads saving their own records at once all commit, in order. */
typedef struct {
    eng_backend *b;
    eng_session *s;
    int fails;
} saver;

static void *saver_run(void *arg)
{
    saver *w = arg;
    eng_record rec;
    vbm_error err;
    int i;

    for (i = 0; i < 25; i++) {
        if (eng_session_to_record(w->s, &rec, &err) != VBM_OK) {
            w->fails++;
            continue;
        }
        rec.version = (uint64_t)i + 2;
        if (eng_backend_save(w->b, &rec, (uint64_t)i + 1, &err) != VBM_OK)
            w->fails++;
        eng_record_free(&rec);
    }
    return NULL;
}

START_TEST(test_concurrent_saves_group_commit)
{
    saver w[8];
    pthread_t th[8];
    eng_backend *b;
    eng_record rec;
    vbm_error err;
    int i;

    ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
    for (i = 0; i < 8; i++) {
        w[i].b = b;
        w[i].s = new_session(NULL, 0);
        w[i].fails = 0;
        rec = record_of(w[i].s);
        ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
        eng_record_free(&rec);
    }
    for (i = 0; i < 8; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, saver_run, &w[i]), 0);
    for (i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    eng_backend_close(b);
    ck_assert_int_eq(open_backend(&b, &err), VBM_OK);
    for (i = 0; i < 8; i++) {
        ck_assert_int_eq(w[i].fails, 0);
        ck_assert_int_eq(eng_backend_load(b, w[i].s->id, &rec, &err), VBM_OK);
        ck_assert_int_eq(rec.version, 26);
        eng_record_free(&rec);
        eng_session_unref(w[i].s);
    }
    ck_assert_int_eq(eng_backend_check(b, &err), VBM_OK);
    eng_backend_close(b);
}
END_TEST

/* A clock the test moves by hand (store_redis_set_clock). */
typedef struct {
    double t;
} fake_clock;

static double fake_now(void *ctx)
{
    return ((fake_clock *)ctx)->t;
}

/* Redis: TTL as expiry, an unreachable server is 503 (then reconnects), and a
 * replica's cache follows writes made through another replica. */
START_TEST(test_redis_ttl_unreachable_replicas)
{
    eng_store_limits lim = {0, 0};
    eng_session *s = new_session(NULL, 1), *k = new_session(NULL, 0), *got, *other;
    eng_backend *b1, *b2;
    eng_store *r1, *r2;
    eng_record rec;
    vbm_error err;
    char sid[ENG_ID_LEN + 1];
    fake_clock clock = {1000.0};
    long tries;

    ck_assert_int_eq(open_backend(&b1, &err), VBM_OK);
    ck_assert_int_eq(open_backend(&b2, &err), VBM_OK);
    ck_assert_int_eq(eng_store_durable_create(b1, &lim, 10, &r1, &err), VBM_OK);
    ck_assert_int_eq(eng_store_durable_create(b2, &lim, 10, &r2, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(r1, s, 0, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(r1, k, 0, &err), VBM_OK);
    strcpy(sid, s->id);

    /* Replica 2 caches k at version 1, replica 1 writes it: replica 2 serves version 2. */
    ck_assert_int_eq(eng_store_get(r2, k->id, NULL, &other, &err), VBM_OK);
    ck_assert_int_eq(other->version, 1);
    eng_session_unref(other);
    ck_assert_int_eq(write_codes(k, 1, ENG_REPLACE, &err), VBM_OK);
    ck_assert_int_eq(eng_store_get(r2, k->id, NULL, &other, &err), VBM_OK);
    ck_assert_int_eq(other->version, 2);
    /* and a write through replica 2 on its fresh copy commits version 3. */
    ck_assert_int_eq(write_codes(other, 2, ENG_APPEND, &err), VBM_OK);
    ck_assert_int_eq(other->version, 3);
    eng_session_unref(other);
    /* replica 1's copy is stale now: its write is refused, the next get reloads. */
    ck_assert_int_eq(write_codes(k, 3, ENG_APPEND, &err), VBM_ECONFLICT);
    ck_assert_int_eq(eng_store_get(r1, k->id, NULL, &got, &err), VBM_OK);
    ck_assert_int_eq(got->version, 3);
    eng_session_unref(got);

    /* TTL 1 s: Redis expires the session. */
    eng_session_unref(s);
    sleep(2);
    ck_assert_int_eq(eng_backend_load(b2, sid, &rec, &err), VBM_ENOTFOUND);
    ck_assert_int_eq(eng_store_get(r1, sid, NULL, &got, &err), VBM_ENOTFOUND);

    /* The server goes away: every operation is a 503 at once, counted in connects
     * tried on a clock the test moves: the lost connection gets one immediate
     * reconnect, then none before the backoff (0.1 s, doubling) has run on that
     * clock; it comes back: served again after the longest backoff (5 s). */
    store_redis_set_clock(b1, fake_now, &clock);
    redis_stop();
    tries = store_redis_connect_tries(b1);
    /* the write was sent on the connection the server dropped: it may have run (outcome
     * unknown, never retried without If-Match); what follows finds the server unreachable */
    ck_assert_int_eq(write_codes(k, 4, ENG_APPEND, &err), VBM_EUNKNOWN);
    ck_assert_ptr_nonnull(strstr(err.msg, "may have been applied"));
    ck_assert_int_eq(eng_store_get(r1, k->id, NULL, &got, &err), VBM_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(err.msg, "unreachable"));
    ck_assert_int_eq(store_redis_connect_tries(b1), tries + 1);
    ck_assert_int_eq(eng_store_get(r1, k->id, NULL, &got, &err), VBM_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(err.msg, "next try in"));
    ck_assert_int_eq(store_redis_connect_tries(b1), tries + 1);
    clock.t += 0.1;
    ck_assert_int_eq(eng_store_get(r1, k->id, NULL, &got, &err), VBM_EUNAVAIL);
    ck_assert_int_eq(store_redis_connect_tries(b1), tries + 2);
    clock.t += 0.1; /* the backoff is 0.2 s now */
    ck_assert_int_eq(eng_store_get(r1, k->id, NULL, &got, &err), VBM_EUNAVAIL);
    ck_assert_int_eq(store_redis_connect_tries(b1), tries + 2);
    redis_start();
    clock.t += 5.0;
    ck_assert_int_eq(eng_store_get(r1, k->id, NULL, &got, &err), VBM_OK);
    ck_assert_int_eq(store_redis_connect_tries(b1), tries + 3);
    ck_assert_int_eq(got->version, 3); /* AOF: every acknowledged write survived */
    ck_assert_int_eq(write_codes(got, 4, ENG_APPEND, &err), VBM_OK);
    eng_session_unref(got);
    eng_session_unref(k);
    eng_store_free(r1);
    eng_store_free(r2);
}
END_TEST

/* --redis-sentinel lists: good ones parsed, bad ones refused naming the option and the item. */
START_TEST(test_redis_sentinel_addr_lists)
{
    store_redis_addr a[STORE_REDIS_MAX_SENTINELS];
    vbm_error err;
    int n = -1, i;
    struct {
        const char *list, *says;
    } bad[] = {
        {"", "expected HOST:PORT"},
        {"h", "expected HOST:PORT in \"h\""},
        {"h:", "expected HOST:PORT in \"h:\""},
        {":26379", "expected HOST:PORT in \":26379\""},
        {"h:1,", "expected HOST:PORT in \"\" (item 2"},
        {"h:1,,h:2", "item 2"},
        {"h:0", "port of \"h:0\""},
        {"h:65536", "port of \"h:65536\""},
        {"h:-1", "port of \"h:-1\""},
        {"h:+1", "port of \"h:+1\""},
        {"h:1x", "port of \"h:1x\""},
        {"h:1 ", "port of \"h:1 \""},
        {"h:99999999999999999999", "port of"},
    };

    ck_assert_int_eq(store_redis_parse_addrs("127.0.0.1:26379,sentinel-b:26380,[::1]:26381",
                                             "redis-sentinel", a, STORE_REDIS_MAX_SENTINELS, &n,
                                             &err),
                     VBM_OK);
    ck_assert_int_eq(n, 3);
    ck_assert_str_eq(a[0].host, "127.0.0.1");
    ck_assert_int_eq(a[0].port, 26379);
    ck_assert_str_eq(a[1].host, "sentinel-b");
    ck_assert_int_eq(a[1].port, 26380);
    ck_assert_str_eq(a[2].host, "::1");
    ck_assert_int_eq(a[2].port, 26381);
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        ck_assert_int_eq(store_redis_parse_addrs(bad[i].list, "redis-sentinel", a,
                                                 STORE_REDIS_MAX_SENTINELS, &n, &err),
                         VBM_EINVAL);
        ck_assert_str_eq(err.field, "redis-sentinel");
        ck_assert_msg(strncmp(err.msg, "redis-sentinel: ", 16) == 0
                          && strstr(err.msg, bad[i].says) != NULL,
                      "\"%s\": %s", bad[i].list, err.msg);
    }
    /* at most max addresses; a host of 256 bytes is too long */
    ck_assert_int_eq(store_redis_parse_addrs("a:1,b:2,c:3", "redis-sentinel", a, 2, &n, &err),
                     VBM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "more than 2"));
    {
        char longhost[300];

        memset(longhost, 'h', 256);
        snprintf(longhost + 256, sizeof longhost - 256, ":1");
        ck_assert_int_eq(store_redis_parse_addrs(longhost, "redis", a, 1, &n, &err), VBM_EINVAL);
        ck_assert_ptr_nonnull(strstr(err.msg, "over 255 bytes"));
    }
}
END_TEST

/* A free loopback port (nothing listens on it once this returns). */
static int free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* Sentinel mode without any server: no sentinel answers, so every operation is a
 * 503 naming the service and the last sentinel's problem; the sentinels are asked
 * again only after the backoff (0.1 s doubling, at most 1 s with sentinels) has run
 * on the injected clock; a bad configuration is refused. */
START_TEST(test_redis_sentinel_unreachable_backoff)
{
    store_redis_config cfg;
    eng_backend *b;
    eng_record rec;
    vbm_error err;
    fake_clock clock = {50.0};
    double waits[] = {0.1, 0.2, 0.4, 0.8, 1.0, 1.0};
    int i;

    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = "test:";
    cfg.n_sentinels = 2;
    snprintf(cfg.sentinels[0].host, sizeof cfg.sentinels[0].host, "127.0.0.1");
    cfg.sentinels[0].port = free_port();
    snprintf(cfg.sentinels[1].host, sizeof cfg.sentinels[1].host, "127.0.0.1");
    cfg.sentinels[1].port = free_port();
    cfg.min_replicas = 1;
    cfg.wait_timeout_ms = 100;
    ck_assert_int_eq(store_redis_open_config(&cfg, &b, &err), VBM_EINVAL); /* no service */
    ck_assert_str_eq(err.field, "redis-service");
    cfg.service = "vbmem";
    cfg.wait_timeout_ms = 0;
    ck_assert_int_eq(store_redis_open_config(&cfg, &b, &err), VBM_EINVAL); /* WAIT without time */
    cfg.wait_timeout_ms = 100;
    ck_assert_int_eq(store_redis_open_config(&cfg, &b, &err), VBM_OK);
    store_redis_set_clock(b, fake_now, &clock);
    ck_assert_int_eq(store_redis_discoveries(b), 0);
    ck_assert_int_eq(eng_backend_check(b, &err), VBM_EUNAVAIL);
    ck_assert_ptr_nonnull(strstr(err.msg, "redis service \"vbmem\""));
    ck_assert_ptr_nonnull(strstr(err.msg, "no sentinel of 2"));
    ck_assert_ptr_nonnull(strstr(err.msg, "Connection refused"));
    ck_assert_int_eq(store_redis_connect_tries(b), 1);
    for (i = 0; i < (int)(sizeof waits / sizeof waits[0]); i++) {
        double base = clock.t; /* the clock of the last try */

        /* just before the wait has run: nothing asked, a 503 at once */
        clock.t = base + waits[i] - 0.01;
        ck_assert_int_eq(eng_backend_load(b, "0123456789abcdef0123456789abcdef", &rec, &err),
                         VBM_EUNAVAIL);
        ck_assert_ptr_nonnull(strstr(err.msg, "next try (asking the sentinels) in"));
        ck_assert_int_eq(store_redis_connect_tries(b), 1 + i);
        clock.t = base + waits[i] + 0.001;
        ck_assert_int_eq(eng_backend_check(b, &err), VBM_EUNAVAIL);
        ck_assert_ptr_nonnull(strstr(err.msg, "no sentinel of 2"));
        ck_assert_int_eq(store_redis_connect_tries(b), 2 + i);
    }
    ck_assert_int_eq(store_redis_discoveries(b), 0);
    eng_backend_close(b);
    /* a backend without sentinels reports no discoveries */
    ck_assert_int_eq(store_redis_open("127.0.0.1", cfg.sentinels[0].port, "test:", &b, &err),
                     VBM_OK);
    ck_assert_int_eq(store_redis_discoveries(b), -1);
    eng_backend_close(b);
}
END_TEST

/* Start a redis-server (or a sentinel: conf non-NULL) with argv; waits until port answers PING. */
static pid_t spawn_redis(int port, const char *conf, const char *dir, const char *replicaof)
{
    char sport[16];
    pid_t pid;
    int i;

    snprintf(sport, sizeof sport, "%d", port);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);

        dup2(null, 1);
        dup2(null, 2);
        if (conf != NULL)
            execlp("redis-server", "redis-server", conf, "--sentinel", (char *)NULL);
        else if (replicaof != NULL)
            execlp("redis-server", "redis-server", "--port", sport, "--bind", "127.0.0.1", "--save",
                   "", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir,
                   "--repl-diskless-sync-delay", "0", "--replicaof", "127.0.0.1", replicaof,
                   (char *)NULL);
        _exit(127);
    }
    for (i = 0; i < 200; i++) {
        redisContext *c = redisConnect("127.0.0.1", port);
        redisReply *r = c != NULL && !c->err ? redisCommand(c, "PING") : NULL;
        int up = r != NULL && r->type == REDIS_REPLY_STATUS;

        freeReplyObject(r);
        redisFree(c);
        if (up)
            return pid;
        usleep(50000);
    }
    ck_abort_msg("redis-server on %d did not start", port);
    return -1;
}

/* One command to 127.0.0.1:port; the reply (free it), NULL when unreachable. */
static redisReply *redis_at(int port, const char *fmt, const char *arg)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    redisReply *r = c != NULL && !c->err ? redisCommand(c, fmt, arg) : NULL;

    redisFree(c);
    return r;
}

/* 1 when the reply is an array whose element i is the string s. */
static int reply_elem_is(const redisReply *r, size_t i, const char *s)
{
    return r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements > i
           && r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, s) == 0;
}

/* Poll (50 ms apart, at most tries times) until the server on port has ROLE role (and,
 * for a master, n connected replicas; for a replica, its link up). */
static void wait_role(int port, const char *role, size_t n, int tries)
{
    int i;

    for (i = 0; i < tries; i++) {
        redisReply *r = redis_at(port, "ROLE", NULL);
        int ok = reply_elem_is(r, 0, role)
                 && (strcmp(role, "master") == 0 ? r->element[2]->elements == n
                                                 : reply_elem_is(r, 3, "connected"));

        freeReplyObject(r);
        if (ok)
            return;
        usleep(50000);
    }
    ck_abort_msg("redis on %d: not %s (%zu) after %d polls", port, role, n, tries);
}

/* A real sentinel over the fixture's redis (A) and its replica (B): the backend asks a closed
 * port, then a server that is no sentinel, then the sentinel, and writes to A once B confirmed
 * (WAIT); a forced failover promotes B: a write that reaches A, which has no replica left, is not
 * acknowledged (503 saying so) although A stored it; A demoted to a replica answers READONLY:
 * the backend asks the sentinels again and the same write lands on B, acknowledged (A, now B's
 * replica, confirms it), on the version acknowledged before. */
START_TEST(test_redis_sentinel_failover_readonly)
{
    char bdir[300], conf[300], sport[16];
    int pb = free_port(), ps = free_port();
    pid_t bpid, spid;
    store_redis_config cfg;
    eng_session *s = new_session(NULL, 0);
    eng_record rec, got;
    eng_backend *b;
    redisReply *r;
    vbm_error err;
    FILE *f;
    int i;

    snprintf(bdir, sizeof bdir, "%s/b", tdir);
    ck_assert_int_eq(mkdir(bdir, 0700), 0);
    snprintf(sport, sizeof sport, "%d", redis_port);
    bpid = spawn_redis(pb, NULL, bdir, sport);
    wait_role(redis_port, "master", 1, 200);
    snprintf(conf, sizeof conf, "%s/sentinel.conf", tdir);
    f = fopen(conf, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor svc 127.0.0.1 %d 1\n"
            "sentinel down-after-milliseconds svc 500\nsentinel failover-timeout svc 3000\n",
            ps, tdir, redis_port);
    fclose(f);
    spid = spawn_redis(ps, conf, NULL, NULL);
    for (i = 0; i < 200; i++) { /* the sentinel knows the replica */
        r = redis_at(ps, "SENTINEL replicas %s", "svc");
        if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 1)
            i = 1000;
        freeReplyObject(r);
        if (i < 1000)
            usleep(50000);
    }
    ck_assert_int_eq(i, 1001);

    memset(&cfg, 0, sizeof cfg);
    cfg.prefix = "test:";
    cfg.service = "svc";
    cfg.min_replicas = 1;
    cfg.wait_timeout_ms =
        2000; /* (generous: a loaded machine; only the refused write waits it out) */
    cfg.n_sentinels = 3;
    for (i = 0; i < 3; i++)
        snprintf(cfg.sentinels[i].host, sizeof cfg.sentinels[i].host, "127.0.0.1");
    cfg.sentinels[0].port = free_port(); /* nothing there */
    cfg.sentinels[1].port = pb;          /* a redis-server, no sentinel: an error reply */
    cfg.sentinels[2].port = ps;
    ck_assert_int_eq(store_redis_open_config(&cfg, &b, &err), VBM_OK);
    rec = record_of(s);
    ck_assert_int_eq(eng_backend_save(b, &rec, 0, &err), VBM_OK);
    ck_assert_int_eq(store_redis_discoveries(b), 1);
    ck_assert_int_eq(store_redis_connect_tries(b), 1);

    /* failover: B is the primary, A (still up, still a master) has no replica */
    for (i = 0; i < 200; i++) { /* NOGOODSLAVE until the sentinel has pinged B */
        int done;

        r = redis_at(ps, "SENTINEL failover %s", "svc");
        ck_assert_ptr_nonnull(r);
        done = r->type == REDIS_REPLY_STATUS;
        ck_assert_msg(done || strstr(r->str, "NOGOODSLAVE") != NULL, "SENTINEL failover: %s",
                      r->str);
        freeReplyObject(r);
        if (done)
            break;
        usleep(50000);
    }
    ck_assert_int_lt(i, 200);
    wait_role(pb, "master", 0, 400);
    snprintf(sport, sizeof sport, "%d", pb);
    for (i = 0; i < 400; i++) { /* until the sentinel names B */
        r = redis_at(ps, "SENTINEL get-master-addr-by-name %s", "svc");
        if (reply_elem_is(r, 1, sport))
            i = 1000;
        freeReplyObject(r);
        if (i < 1000)
            usleep(50000);
    }
    ck_assert_int_eq(i, 1001);
    rec.version = 2;
    ck_assert_int_eq(eng_backend_save(b, &rec, 1, &err), VBM_EUNKNOWN); /* A applied it */
    ck_assert_ptr_nonnull(
        strstr(err.msg, "0 of the 1 replicas required confirmed it within 2000 ms"));
    ck_assert_ptr_nonnull(strstr(err.msg, "may be stored"));
    /* ... and indeed A stored it (reads still go to A) */
    ck_assert_int_eq(eng_backend_load(b, rec.id, &got, &err), VBM_OK);
    ck_assert_int_eq(got.version, 2);
    eng_record_free(&got);

    /* A demoted, as the sentinel would: its copy is B's again (version 1); the next write meets
     * READONLY, the sentinel names B, and the write is retried there at once */
    r = redis_at(redis_port, "REPLICAOF 127.0.0.1 %s", sport);
    freeReplyObject(r);
    wait_role(redis_port, "slave", 0, 400);
    wait_role(pb, "master", 1, 400);
    rec.version = 2;
    ck_assert_msg(eng_backend_save(b, &rec, 1, &err) == VBM_OK, "%s", err.msg);
    ck_assert_int_eq(store_redis_discoveries(b), 2);
    ck_assert_int_eq(eng_backend_load(b, rec.id, &got, &err), VBM_OK);
    ck_assert_int_eq(got.version, 2);
    ck_assert_uint_eq(got.blob_len, rec.blob_len);
    ck_assert_int_eq(memcmp(got.blob, rec.blob, rec.blob_len), 0);
    eng_record_free(&got);
    r = redis_at(pb, "HGET test:s:%s version", rec.id);
    ck_assert_ptr_nonnull(r);
    ck_assert_str_eq(r->str, "2");
    freeReplyObject(r);

    eng_record_free(&rec);
    eng_backend_close(b);

    /* a sentinel that names a replica (a stale view): refused after ROLE, never written to */
    {
        int ps2 = free_port();
        pid_t s2pid;

        snprintf(conf, sizeof conf, "%s/sentinel2.conf", tdir);
        f = fopen(conf, "w");
        ck_assert_ptr_nonnull(f);
        fprintf(f, "port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor stale 127.0.0.1 %d 1\n", ps2,
                tdir, redis_port);
        fclose(f);
        s2pid = spawn_redis(ps2, conf, NULL, NULL);
        cfg.service = "stale";
        cfg.n_sentinels = 1;
        cfg.sentinels[0].port = ps2;
        ck_assert_int_eq(store_redis_open_config(&cfg, &b, &err), VBM_OK);
        ck_assert_int_eq(eng_backend_check(b, &err), VBM_EUNAVAIL);
        ck_assert_ptr_nonnull(strstr(err.msg, "is not the primary: its role is slave"));
        ck_assert_int_eq(store_redis_discoveries(b), 1);
        eng_backend_close(b);
        kill(s2pid, SIGKILL);
        waitpid(s2pid, NULL, 0);
    }
    eng_session_unref(s);
    kill(spid, SIGKILL);
    waitpid(spid, NULL, 0);
    kill(bpid, SIGKILL);
    waitpid(bpid, NULL, 0);
}
END_TEST

static Suite *store_suite(void)
{
    Suite *s = suite_create("vbmem-store");
    TCase *tc = tcase_create("sqlite");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_schema_lock_reopen);
    tcase_add_test(tc, test_migration_from_v1);
    tcase_add_test(tc, test_cas_reload_delete);
    tcase_add_test(tc, test_list_owners_pages);
    tcase_add_test(tc, test_corrupt_records_rejected);
    tcase_add_test(tc, test_copy_all_skips_corrupt_records);
    tcase_add_test(tc, test_failed_persist_rolls_back);
    tcase_add_test(tc, test_lru_resident_bound_and_restart);
    tcase_add_test(tc, test_stored_ttl_expiry);
    tcase_add_test(tc, test_busy_store_is_unavailable);
    tcase_add_test(tc, test_backup_copy_all);
    tcase_add_test(tc, test_concurrent_saves_group_commit);
    tcase_add_test(tc, test_synchronous_full_fsyncs_each_commit);
    tcase_add_test(tc, test_redis_sentinel_addr_lists);
    tcase_add_test(tc, test_redis_sentinel_unreachable_backoff);
    suite_add_tcase(s, tc);

    /* The same store tests against a real redis-server started per test. */
    tc = tcase_create("redis");
    tcase_add_checked_fixture(tc, redis_setup, redis_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_cas_reload_delete);
    tcase_add_test(tc, test_list_owners_pages);
    tcase_add_test(tc, test_failed_persist_rolls_back);
    tcase_add_test(tc, test_lru_resident_bound_and_restart);
    tcase_add_test(tc, test_concurrent_saves_group_commit);
    tcase_add_test(tc, test_redis_ttl_unreachable_replicas);
    tcase_add_test(tc, test_redis_sentinel_failover_readonly);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(store_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
