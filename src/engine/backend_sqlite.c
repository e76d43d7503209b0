/* backend_sqlite.c -- owns the SQLite durable backend: one database file (WAL, synchronous=FULL),
 * its versioned schema and migrations, checksummed session records, compare-and-set writes with
 * group commit, and a counting VFS that makes its fsyncs observable
 * (store_sqlite_durability_get). */
#define _GNU_SOURCE /* flock, O_CLOEXEC */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "engine/backend.h"

#define SQ_BUSY_MS    2000
#define SQ_LOCK_TRIES 40 /* x 50 ms */

/* Schema migrations: entry v brings a database from user_version v to v + 1.
 * Never edit a shipped entry; append a new one. */
static const char *const sq_migrations[] = {
    /* 0 -> 1: the sessions table. expires = used + ttl_s (NULL without TTL);
     * checksum = FNV-1a 64 of memory then usage. */
    "CREATE TABLE sessions ("
    " id TEXT NOT NULL UNIQUE,"
    " owner BLOB NOT NULL,"
    " version INTEGER NOT NULL,"
    " ttl_s INTEGER NOT NULL,"
    " created REAL NOT NULL,"
    " updated REAL NOT NULL,"
    " used REAL NOT NULL,"
    " expires REAL,"
    " solver_iterations INTEGER NOT NULL,"
    " solver_tolerance REAL NOT NULL,"
    " solver_init INTEGER NOT NULL,"
    " memory BLOB NOT NULL,"
    " usage BLOB,"
    " checksum INTEGER NOT NULL);"
    "CREATE INDEX sessions_owner ON sessions(owner, id);"
    "CREATE INDEX sessions_expires ON sessions(expires) WHERE expires IS NOT NULL;",
    /* 1 -> 2: the hosted model a session was created on ("" for a latent session). */
    "ALTER TABLE sessions ADD COLUMN model TEXT NOT NULL DEFAULT '';",
};
#define SQ_SCHEMA_VERSION ((int)(sizeof sq_migrations / sizeof sq_migrations[0]))

enum {
    SQ_LOAD,
    SQ_INSERT,
    SQ_UPDATE,
    SQ_VERSION,
    SQ_DELETE,
    SQ_DELETE_OWNER,
    SQ_LIST,
    SQ_LIST_OWNER,
    SQ_IDLE,
    SQ_TOUCH,
    SQ_COUNT,
    SQ_NSTMT
};

static const char *const sq_sql[SQ_NSTMT] = {
    "SELECT owner, version, ttl_s, created, updated, used, solver_iterations, solver_tolerance,"
    " solver_init, memory, usage, checksum, model FROM sessions WHERE id = ?1",
    "INSERT INTO sessions (id, owner, version, ttl_s, created, updated, used, expires,"
    " solver_iterations, solver_tolerance, solver_init, memory, usage, checksum, model)"
    " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?16)",
    "UPDATE sessions SET owner = ?2, version = ?3, ttl_s = ?4, created = ?5, updated = ?6,"
    " used = ?7, expires = ?8, solver_iterations = ?9, solver_tolerance = ?10,"
    " solver_init = ?11, memory = ?12, usage = ?13, checksum = ?14, model = ?16"
    " WHERE id = ?1 AND version = ?15",
    "SELECT version FROM sessions WHERE id = ?1",
    "DELETE FROM sessions WHERE id = ?1",
    "DELETE FROM sessions WHERE id = ?1 AND owner = ?2",
    "SELECT id FROM sessions WHERE id > ?1 ORDER BY id LIMIT ?2",
    "SELECT id FROM sessions WHERE owner = ?3 AND id > ?1 ORDER BY id LIMIT ?2",
    "SELECT id FROM sessions WHERE expires IS NOT NULL AND expires < ?1 ORDER BY expires"
    " LIMIT ?2",
    "UPDATE sessions SET used = ?2, expires = CASE WHEN ttl_s > 0 THEN ?2 + ttl_s END"
    " WHERE id = ?1 AND used < ?2",
    "SELECT count(*) FROM sessions",
};

/* One save waiting for a group commit (on its caller's stack). */
typedef struct sq_pending {
    const eng_record *rec;
    uint64_t expected;
    const unsigned char *ub; /* usage bytes (owned by the caller) */
    uint64_t sum;
    vbm_status st;
    vbm_error err;
    int done; /* guarded by gc_lock */
    struct sq_pending *next;
} sq_pending;

typedef struct {
    eng_backend base;        /* first: the backend and its state are one allocation */
    pthread_mutex_t gc_lock; /* the group-commit queue below */
    pthread_cond_t gc_cond;
    sq_pending *head, *tail; /* saves waiting for the next commit */
    int leader;              /* a thread is committing a batch */
    pthread_mutex_t lock;    /* one connection, used by one thread at a time */
    sqlite3 *db;
    sqlite3_stmt *stmt[SQ_NSTMT];
    int lock_fd; /* -1: no directory lock */
    char path[4096];
    /* The counting VFS of this store's connection (sq_vfs_*): the default VFS with each
     * file's xSync counted; registered under vfs_name while the connection is open. */
    sqlite3_vfs vfs;
    sqlite3_vfs *real_vfs;
    int vfs_registered;
    char vfs_name[48];
    long commits;   /* group-commit transactions committed (atomic) */
    long wal_syncs; /* xSync calls on the write-ahead log (atomic) */
    long db_syncs;  /* xSync calls on the database file (atomic) */
} sq_store;

/* ---- the counting VFS: every call goes to the default VFS; xSync is counted ---- */

/* A file of the counting VFS: the default VFS's file follows it in the same allocation. */
typedef struct {
    sqlite3_file base; /* pMethods: &sq_io, or NULL when the real open left none */
    sq_store *q;
    int wal; /* 1: the write-ahead log; 0: the database (or a journal) */
    sqlite3_file *real;
} sq_file;

static sqlite3_file *sq_real(sqlite3_file *f)
{
    return ((sq_file *)f)->real;
}

static int sq_io_close(sqlite3_file *f)
{
    return sq_real(f)->pMethods->xClose(sq_real(f));
}

static int sq_io_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
    return sq_real(f)->pMethods->xRead(sq_real(f), buf, n, off);
}

static int sq_io_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
    return sq_real(f)->pMethods->xWrite(sq_real(f), buf, n, off);
}

static int sq_io_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    return sq_real(f)->pMethods->xTruncate(sq_real(f), size);
}

/* The one method that does more than forward: count the sync, then sync. */
static int sq_io_sync(sqlite3_file *f, int flags)
{
    sq_file *p = (sq_file *)f;

    __atomic_fetch_add(p->wal ? &p->q->wal_syncs : &p->q->db_syncs, 1, __ATOMIC_RELAXED);
    return p->real->pMethods->xSync(p->real, flags);
}

static int sq_io_size(sqlite3_file *f, sqlite3_int64 *size)
{
    return sq_real(f)->pMethods->xFileSize(sq_real(f), size);
}

static int sq_io_lock(sqlite3_file *f, int level)
{
    return sq_real(f)->pMethods->xLock(sq_real(f), level);
}

static int sq_io_unlock(sqlite3_file *f, int level)
{
    return sq_real(f)->pMethods->xUnlock(sq_real(f), level);
}

static int sq_io_reserved(sqlite3_file *f, int *out)
{
    return sq_real(f)->pMethods->xCheckReservedLock(sq_real(f), out);
}

static int sq_io_control(sqlite3_file *f, int op, void *arg)
{
    return sq_real(f)->pMethods->xFileControl(sq_real(f), op, arg);
}

static int sq_io_sector(sqlite3_file *f)
{
    return sq_real(f)->pMethods->xSectorSize(sq_real(f));
}

static int sq_io_device(sqlite3_file *f)
{
    return sq_real(f)->pMethods->xDeviceCharacteristics(sq_real(f));
}

static int sq_io_shm_map(sqlite3_file *f, int region, int size, int extend, void volatile **pp)
{
    if (sq_real(f)->pMethods->iVersion < 2)
        return SQLITE_IOERR;
    return sq_real(f)->pMethods->xShmMap(sq_real(f), region, size, extend, pp);
}

static int sq_io_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    if (sq_real(f)->pMethods->iVersion < 2)
        return SQLITE_IOERR;
    return sq_real(f)->pMethods->xShmLock(sq_real(f), offset, n, flags);
}

static void sq_io_shm_barrier(sqlite3_file *f)
{
    if (sq_real(f)->pMethods->iVersion >= 2)
        sq_real(f)->pMethods->xShmBarrier(sq_real(f));
}

static int sq_io_shm_unmap(sqlite3_file *f, int del)
{
    if (sq_real(f)->pMethods->iVersion < 2)
        return SQLITE_OK;
    return sq_real(f)->pMethods->xShmUnmap(sq_real(f), del);
}

static int sq_io_fetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp)
{
    if (sq_real(f)->pMethods->iVersion < 3) {
        *pp = NULL;
        return SQLITE_OK;
    }
    return sq_real(f)->pMethods->xFetch(sq_real(f), off, n, pp);
}

static int sq_io_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    if (sq_real(f)->pMethods->iVersion < 3)
        return SQLITE_OK;
    return sq_real(f)->pMethods->xUnfetch(sq_real(f), off, p);
}

static const sqlite3_io_methods sq_io = {
    3,
    sq_io_close,
    sq_io_read,
    sq_io_write,
    sq_io_truncate,
    sq_io_sync,
    sq_io_size,
    sq_io_lock,
    sq_io_unlock,
    sq_io_reserved,
    sq_io_control,
    sq_io_sector,
    sq_io_device,
    sq_io_shm_map,
    sq_io_shm_lock,
    sq_io_shm_barrier,
    sq_io_shm_unmap,
    sq_io_fetch,
    sq_io_unfetch,
};

static sqlite3_vfs *sq_vfs_real(sqlite3_vfs *v)
{
    return ((sq_store *)v->pAppData)->real_vfs;
}

static int sq_vfs_open(sqlite3_vfs *v, const char *name, sqlite3_file *file, int flags, int *oflags)
{
    sq_file *f = (sq_file *)file;
    int rc;

    f->q = v->pAppData;
    f->wal = (flags & SQLITE_OPEN_WAL) != 0;
    f->real = (sqlite3_file *)(f + 1);
    f->real->pMethods = NULL;
    rc = sq_vfs_real(v)->xOpen(sq_vfs_real(v), name, f->real, flags, oflags);
    f->base.pMethods = f->real->pMethods != NULL ? &sq_io : NULL;
    return rc;
}

static int sq_vfs_delete(sqlite3_vfs *v, const char *name, int sync_dir)
{
    return sq_vfs_real(v)->xDelete(sq_vfs_real(v), name, sync_dir);
}

static int sq_vfs_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
    return sq_vfs_real(v)->xAccess(sq_vfs_real(v), name, flags, out);
}

static int sq_vfs_full(sqlite3_vfs *v, const char *name, int n, char *out)
{
    return sq_vfs_real(v)->xFullPathname(sq_vfs_real(v), name, n, out);
}

static void *sq_vfs_dlopen(sqlite3_vfs *v, const char *name)
{
    return sq_vfs_real(v)->xDlOpen(sq_vfs_real(v), name);
}

static void sq_vfs_dlerror(sqlite3_vfs *v, int n, char *msg)
{
    sq_vfs_real(v)->xDlError(sq_vfs_real(v), n, msg);
}

static void (*sq_vfs_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
    return sq_vfs_real(v)->xDlSym(sq_vfs_real(v), h, sym);
}

static void sq_vfs_dlclose(sqlite3_vfs *v, void *h)
{
    sq_vfs_real(v)->xDlClose(sq_vfs_real(v), h);
}

static int sq_vfs_random(sqlite3_vfs *v, int n, char *out)
{
    return sq_vfs_real(v)->xRandomness(sq_vfs_real(v), n, out);
}

static int sq_vfs_sleep(sqlite3_vfs *v, int us)
{
    return sq_vfs_real(v)->xSleep(sq_vfs_real(v), us);
}

static int sq_vfs_time(sqlite3_vfs *v, double *out)
{
    return sq_vfs_real(v)->xCurrentTime(sq_vfs_real(v), out);
}

static int sq_vfs_last_error(sqlite3_vfs *v, int n, char *msg)
{
    return sq_vfs_real(v)->xGetLastError(sq_vfs_real(v), n, msg);
}

static int sq_vfs_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
    sqlite3_vfs *r = sq_vfs_real(v);
    double d;
    int rc;

    if (r->iVersion >= 2 && r->xCurrentTimeInt64 != NULL)
        return r->xCurrentTimeInt64(r, out);
    rc = r->xCurrentTime(r, &d);
    *out = (sqlite3_int64)(d * 86400000.0);
    return rc;
}

/* Register q's counting VFS over the default one (under a name unique to q). */
static int sq_vfs_register(sq_store *q)
{
    int rc;

    q->real_vfs = sqlite3_vfs_find(NULL);
    if (q->real_vfs == NULL)
        return SQLITE_ERROR;
    snprintf(q->vfs_name, sizeof q->vfs_name, "vbmem-counting-%p", (void *)q);
    memset(&q->vfs, 0, sizeof q->vfs);
    q->vfs.iVersion = 2;
    q->vfs.szOsFile = (int)sizeof(sq_file) + q->real_vfs->szOsFile;
    q->vfs.mxPathname = q->real_vfs->mxPathname;
    q->vfs.zName = q->vfs_name;
    q->vfs.pAppData = q;
    q->vfs.xOpen = sq_vfs_open;
    q->vfs.xDelete = sq_vfs_delete;
    q->vfs.xAccess = sq_vfs_access;
    q->vfs.xFullPathname = sq_vfs_full;
    q->vfs.xDlOpen = sq_vfs_dlopen;
    q->vfs.xDlError = sq_vfs_dlerror;
    q->vfs.xDlSym = sq_vfs_dlsym;
    q->vfs.xDlClose = sq_vfs_dlclose;
    q->vfs.xRandomness = sq_vfs_random;
    q->vfs.xSleep = sq_vfs_sleep;
    q->vfs.xCurrentTime = sq_vfs_time;
    q->vfs.xGetLastError = sq_vfs_last_error;
    q->vfs.xCurrentTimeInt64 = sq_vfs_time64;
    rc = sqlite3_vfs_register(&q->vfs, 0);
    q->vfs_registered = rc == SQLITE_OK;
    return rc;
}

/* Translate a SQLite failure into an engine status and message. */
static vbm_status sq_fail(sq_store *q, int rc, vbm_error *err, const char *what)
{
    const char *detail = q->db != NULL ? sqlite3_errmsg(q->db) : sqlite3_errstr(rc);

    switch (rc & 0xff) {
    case SQLITE_NOMEM: return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory in SQLite (%s)", what);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return vbm_fail(err, VBM_EUNAVAIL, NULL,
                        "the session store is busy (%s: database %s locked); retry", what, q->path);
    default:
        return vbm_fail(err, VBM_EUNAVAIL, NULL, "the session store failed (%s: %s: %s)", what,
                        q->path, detail);
    }
}

/* Run one statement of the cached set to completion (no rows expected), then
 * reset it. Returns the SQLite code (SQLITE_DONE on success). */
static int sq_step_done(sqlite3_stmt *stmt)
{
    int rc = sqlite3_step(stmt);

    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    return rc;
}

static void sq_reset(sqlite3_stmt *stmt)
{
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
}

static vbm_status sq_load(void *impl, const char *id, eng_record *out, vbm_error *err)
{
    sq_store *q = impl;
    sqlite3_stmt *st = q->stmt[SQ_LOAD];
    const unsigned char *owner, *mem, *usage;
    int n_owner, n_mem, n_usage, rc;
    uint64_t sum, want;
    vbm_status est = VBM_OK;

    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&q->lock);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        est = vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    } else if (rc != SQLITE_ROW) {
        est = sq_fail(q, rc, err, "load");
    } else {
        owner = sqlite3_column_blob(st, 0);
        n_owner = sqlite3_column_bytes(st, 0);
        mem = sqlite3_column_blob(st, 9);
        n_mem = sqlite3_column_bytes(st, 9);
        usage = sqlite3_column_blob(st, 10);
        n_usage = sqlite3_column_bytes(st, 10);
        want = (uint64_t)sqlite3_column_int64(st, 11);
        sum = eng_backend_checksum(mem, (size_t)n_mem, usage, (size_t)n_usage);
        if (n_owner != ENG_OWNER_LEN || owner == NULL || mem == NULL || n_usage % 8 != 0
            || sum != want) {
            /* what is known of it: the id, its version and its owner (nobody's when the owner
             * column is unreadable) */
            snprintf(out->id, sizeof out->id, "%s", id);
            memset(out->owner, 0xff, ENG_OWNER_LEN);
            if (n_owner == ENG_OWNER_LEN && owner != NULL)
                memcpy(out->owner, owner, ENG_OWNER_LEN);
            out->version = (uint64_t)sqlite3_column_int64(st, 1);
            est =
                vbm_fail(err, VBM_ECORRUPT, NULL, "the stored record of session %s is corrupt (%s)",
                         id, sum != want ? "checksum mismatch" : "malformed columns");
        } else {
            snprintf(out->id, sizeof out->id, "%s", id);
            memcpy(out->owner, owner, ENG_OWNER_LEN);
            out->version = (uint64_t)sqlite3_column_int64(st, 1);
            out->ttl_s = (long)sqlite3_column_int64(st, 2);
            out->created = sqlite3_column_double(st, 3);
            out->updated = sqlite3_column_double(st, 4);
            out->used = sqlite3_column_double(st, 5);
            out->solver.iterations = sqlite3_column_int(st, 6);
            out->solver.tolerance = sqlite3_column_double(st, 7);
            out->solver.init = (vbm_init)sqlite3_column_int(st, 8);
            snprintf(out->model_name, sizeof out->model_name, "%s",
                     sqlite3_column_text(st, 12) != NULL ? (const char *)sqlite3_column_text(st, 12)
                                                         : "");
            out->blob = malloc((size_t)n_mem > 0 ? (size_t)n_mem : 1);
            out->n_usage = (size_t)n_usage / 8;
            if (out->n_usage > 0)
                out->usage = malloc((size_t)n_usage);
            if (out->blob == NULL || (out->n_usage > 0 && out->usage == NULL)) {
                eng_record_free(out);
                est = vbm_fail(err, VBM_ENOMEM, NULL, "out of memory loading session %s", id);
            } else {
                memcpy(out->blob, mem, (size_t)n_mem);
                out->blob_len = (size_t)n_mem;
                eng_backend_usage_decode(usage, out->n_usage, out->usage);
            }
        }
    }
    sq_reset(st);
    pthread_mutex_unlock(&q->lock);
    if (est != VBM_OK && est != VBM_ECORRUPT)
        memset(out, 0, sizeof *out);
    return est;
}

/* Bind the record columns of INSERT/UPDATE (1-14, 16). ub: usage bytes; sum: their
 * checksum with the memory. */
static void sq_bind_record(sqlite3_stmt *st, const eng_record *r, const unsigned char *ub,
                           uint64_t sum)
{
    size_t nu = ub != NULL ? 8 * r->n_usage : 0;

    sqlite3_bind_text(st, 1, r->id, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, r->owner, ENG_OWNER_LEN, SQLITE_STATIC);
    sqlite3_bind_int64(st, 3, (sqlite3_int64)r->version);
    sqlite3_bind_int64(st, 4, (sqlite3_int64)r->ttl_s);
    sqlite3_bind_double(st, 5, r->created);
    sqlite3_bind_double(st, 6, r->updated);
    sqlite3_bind_double(st, 7, r->used);
    if (r->ttl_s > 0)
        sqlite3_bind_double(st, 8, r->used + (double)r->ttl_s);
    else
        sqlite3_bind_null(st, 8);
    sqlite3_bind_int(st, 9, r->solver.iterations);
    sqlite3_bind_double(st, 10, r->solver.tolerance);
    sqlite3_bind_int(st, 11, (int)r->solver.init);
    sqlite3_bind_blob64(st, 12, r->blob, r->blob_len, SQLITE_STATIC);
    if (ub != NULL)
        sqlite3_bind_blob64(st, 13, ub, nu, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 13);
    sqlite3_bind_int64(st, 14, (sqlite3_int64)sum);
    sqlite3_bind_text(st, 16, r->model_name, -1, SQLITE_STATIC);
}

/* Apply one save inside the open transaction (lock held), recording its
 * outcome in p. Returns 1 when the failure dooms the whole transaction (I/O,
 * busy), 0 otherwise (success, or a refused compare-and-set / duplicate). */
static int sq_apply(sq_store *q, sq_pending *p)
{
    const eng_record *r = p->rec;
    sqlite3_stmt *st = q->stmt[p->expected == 0 ? SQ_INSERT : SQ_UPDATE];
    sqlite3_stmt *vs = q->stmt[SQ_VERSION];
    int rc;

    p->st = VBM_OK;
    sq_bind_record(st, r, p->ub, p->sum);
    if (p->expected > 0)
        sqlite3_bind_int64(st, 15, (sqlite3_int64)p->expected);
    rc = sq_step_done(st);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
        p->st =
            vbm_fail(&p->err, VBM_ECONFLICT, NULL, "session %s already exists in the store", r->id);
        return 0;
    }
    if (rc != SQLITE_DONE) {
        p->st = sq_fail(q, rc, &p->err, "save");
        return 1;
    }
    if (p->expected > 0 && sqlite3_changes(q->db) == 0) {
        /* Compare-and-set refused: gone, or at another version. */
        sqlite3_bind_text(vs, 1, r->id, -1, SQLITE_STATIC);
        rc = sqlite3_step(vs);
        if (rc == SQLITE_ROW)
            p->st = vbm_fail(
                &p->err, VBM_ECONFLICT, NULL, "the stored session %s is at version %lld, not %llu",
                r->id, (long long)sqlite3_column_int64(vs, 0), (unsigned long long)p->expected);
        else if (rc == SQLITE_DONE)
            p->st = vbm_fail(&p->err, VBM_ENOTFOUND, "id", "no session %s (deleted)", r->id);
        else
            p->st = sq_fail(q, rc, &p->err, "save");
        sq_reset(vs);
        return rc != SQLITE_ROW && rc != SQLITE_DONE;
    }
    return 0;
}

/* Commit a batch of saves in one transaction (one fsync for all). A failure
 * of the transaction fails every save of the batch that had succeeded. */
static void sq_run_batch(sq_store *q, sq_pending *batch)
{
    sq_pending *p;
    vbm_error fatal;
    int doomed = 0, rc;

    for (p = batch; p != NULL; p = p->next)
        p->st = VBM_OK; /* not failed (yet) */
    pthread_mutex_lock(&q->lock);
    rc = sqlite3_exec(q->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        sq_fail(q, rc, &fatal, "begin");
        doomed = 1;
    }
    for (p = batch; !doomed && p != NULL; p = p->next) {
        if (sq_apply(q, p)) {
            fatal = p->err;
            doomed = 1;
        }
    }
    if (!doomed) {
        rc = sqlite3_exec(q->db, "COMMIT", NULL, NULL, NULL);
        if (rc != SQLITE_OK) {
            sq_fail(q, rc, &fatal, "commit");
            doomed = 1;
        } else {
            __atomic_fetch_add(&q->commits, 1, __ATOMIC_RELAXED);
        }
    }
    if (doomed) {
        if (!sqlite3_get_autocommit(q->db))
            sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
        for (p = batch; p != NULL; p = p->next) {
            if (p->st == VBM_OK) {
                p->st = VBM_EUNAVAIL;
                p->err = fatal;
            }
        }
    }
    pthread_mutex_unlock(&q->lock);
}

/* Group commit: a save joins the queue; whichever waiting thread finds no
 * commit running becomes the leader, takes every queued save and commits
 * them in one transaction; the others wait for their outcome. */
static vbm_status sq_save(void *impl, const eng_record *r, uint64_t expected, vbm_error *err)
{
    sq_store *q = impl;
    sq_pending me, *batch, *b, *next;
    int fail;

    if (r->blob == NULL || r->blob_len == 0)
        return vbm_fail(err, VBM_EINVAL, NULL, "session %s has no memory to store", r->id);
    memset(&me, 0, sizeof me);
    me.rec = r;
    me.expected = expected;
    me.ub = eng_backend_usage_encode(r->usage, r->n_usage, &fail);
    if (fail)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    me.sum = eng_backend_checksum(r->blob, r->blob_len, me.ub, me.ub != NULL ? 8 * r->n_usage : 0);
    me.st = VBM_EUNAVAIL;

    pthread_mutex_lock(&q->gc_lock);
    if (q->tail != NULL)
        q->tail->next = &me;
    else
        q->head = &me;
    q->tail = &me;
    while (!me.done) {
        if (q->leader) {
            pthread_cond_wait(&q->gc_cond, &q->gc_lock);
            continue;
        }
        q->leader = 1;
        batch = q->head;
        q->head = q->tail = NULL;
        pthread_mutex_unlock(&q->gc_lock);
        sq_run_batch(q, batch);
        pthread_mutex_lock(&q->gc_lock);
        for (b = batch; b != NULL; b = next) {
            next = b->next; /* a waiter marked done may return and free its record */
            b->done = 1;
        }
        q->leader = 0;
        pthread_cond_broadcast(&q->gc_cond);
    }
    pthread_mutex_unlock(&q->gc_lock);
    free((void *)me.ub);
    if (me.st != VBM_OK && err != NULL)
        *err = me.err;
    return me.st;
}

static vbm_status sq_remove(void *impl, const char *id, const unsigned char *owner, vbm_error *err)
{
    sq_store *q = impl;
    sqlite3_stmt *st = q->stmt[owner != NULL ? SQ_DELETE_OWNER : SQ_DELETE];
    vbm_status est = VBM_OK;
    int rc;

    pthread_mutex_lock(&q->lock);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    if (owner != NULL)
        sqlite3_bind_blob(st, 2, owner, ENG_OWNER_LEN, SQLITE_STATIC);
    rc = sq_step_done(st);
    if (rc != SQLITE_DONE)
        est = sq_fail(q, rc, err, "delete");
    else if (sqlite3_changes(q->db) == 0)
        est = vbm_fail(err, VBM_ENOTFOUND, "id", "no session %s", id);
    pthread_mutex_unlock(&q->lock);
    return est;
}

/* Collect up to limit ids from a prepared SELECT id query. Lock held. */
static vbm_status sq_collect(sq_store *q, sqlite3_stmt *st, int limit, char (*ids)[ENG_ID_LEN + 1],
                             int *n, vbm_error *err)
{
    const unsigned char *text;
    vbm_status est = VBM_OK;
    int rc = SQLITE_DONE; /* (limit 0: no step taken) */

    *n = 0;
    while (*n < limit && (rc = sqlite3_step(st)) == SQLITE_ROW) {
        text = sqlite3_column_text(st, 0);
        if (text == NULL || sqlite3_column_bytes(st, 0) != ENG_ID_LEN)
            continue; /* not an id vbmemd writes: skip it */
        memcpy(ids[*n], text, ENG_ID_LEN);
        ids[*n][ENG_ID_LEN] = '\0';
        (*n)++;
    }
    if (*n < limit && rc != SQLITE_DONE)
        est = sq_fail(q, rc, err, "list");
    sq_reset(st);
    return est;
}

static vbm_status sq_list(void *impl, const unsigned char *owner, const char *after, int limit,
                          char (*ids)[ENG_ID_LEN + 1], int *n, vbm_error *err)
{
    sq_store *q = impl;
    sqlite3_stmt *st = q->stmt[owner != NULL ? SQ_LIST_OWNER : SQ_LIST];
    vbm_status est;

    pthread_mutex_lock(&q->lock);
    sqlite3_bind_text(st, 1, after != NULL ? after : "", -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, limit);
    if (owner != NULL)
        sqlite3_bind_blob(st, 3, owner, ENG_OWNER_LEN, SQLITE_STATIC);
    est = sq_collect(q, st, limit, ids, n, err);
    pthread_mutex_unlock(&q->lock);
    return est;
}

static vbm_status sq_idle(void *impl, double now_wall, int limit, char (*ids)[ENG_ID_LEN + 1],
                          int *n, vbm_error *err)
{
    sq_store *q = impl;
    sqlite3_stmt *st = q->stmt[SQ_IDLE];
    vbm_status est;

    pthread_mutex_lock(&q->lock);
    sqlite3_bind_double(st, 1, now_wall);
    sqlite3_bind_int(st, 2, limit);
    est = sq_collect(q, st, limit, ids, n, err);
    pthread_mutex_unlock(&q->lock);
    return est;
}

static vbm_status sq_touch(void *impl, const char *id, double used, vbm_error *err)
{
    sq_store *q = impl;
    sqlite3_stmt *st = q->stmt[SQ_TOUCH];
    vbm_status est = VBM_OK;
    int rc;

    pthread_mutex_lock(&q->lock);
    sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_double(st, 2, used);
    rc = sq_step_done(st);
    if (rc != SQLITE_DONE)
        est = sq_fail(q, rc, err, "touch");
    pthread_mutex_unlock(&q->lock);
    return est;
}

static vbm_status sq_count(void *impl, long *n, vbm_error *err)
{
    sq_store *q = impl;
    sqlite3_stmt *st = q->stmt[SQ_COUNT];
    vbm_status est = VBM_OK;
    int rc;

    pthread_mutex_lock(&q->lock);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW)
        *n = (long)sqlite3_column_int64(st, 0);
    else
        est = sq_fail(q, rc, err, "count");
    sq_reset(st);
    pthread_mutex_unlock(&q->lock);
    return est;
}

/* Run PRAGMA name and compare its single text result with want (NULL: any);
 * the result is copied into got. Lock held or not yet shared. */
static int sq_pragma(sq_store *q, const char *sql, char *got, size_t len)
{
    sqlite3_stmt *st = NULL;
    const unsigned char *text;
    int rc = sqlite3_prepare_v2(q->db, sql, -1, &st, NULL);

    got[0] = '\0';
    if (rc != SQLITE_OK)
        return rc;
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        text = sqlite3_column_text(st, 0);
        snprintf(got, len, "%s", text != NULL ? (const char *)text : "");
        rc = SQLITE_OK;
    } else if (rc == SQLITE_DONE) {
        rc = SQLITE_OK;
    }
    sqlite3_finalize(st);
    return rc;
}

static vbm_status sq_check(void *impl, vbm_error *err)
{
    sq_store *q = impl;
    char got[256];
    vbm_status est = VBM_OK;
    int rc;

    pthread_mutex_lock(&q->lock);
    rc = sq_pragma(q, "PRAGMA quick_check", got, sizeof got);
    if (rc != SQLITE_OK)
        est = sq_fail(q, rc, err, "quick_check");
    else if (strcmp(got, "ok") != 0)
        est = vbm_fail(err, VBM_EUNAVAIL, NULL, "the session store %s fails its check: %s", q->path,
                       got);
    pthread_mutex_unlock(&q->lock);
    return est;
}

static void sq_close(void *impl)
{
    sq_store *q = impl;
    int i;

    for (i = 0; i < SQ_NSTMT; i++)
        sqlite3_finalize(q->stmt[i]);
    if (q->db != NULL)
        sqlite3_close(q->db);
    if (q->vfs_registered)
        sqlite3_vfs_unregister(&q->vfs);
    if (q->lock_fd >= 0)
        close(q->lock_fd); /* releases the flock */
    pthread_mutex_destroy(&q->lock);
    pthread_mutex_destroy(&q->gc_lock);
    pthread_cond_destroy(&q->gc_cond);
    free(q);
}

static const eng_backend_ops sq_ops = {sq_load,  sq_save,  sq_remove, sq_list,  sq_idle,
                                       sq_touch, sq_count, sq_check,  sq_close, NULL};

/* Bring the schema to SQ_SCHEMA_VERSION in one transaction (or, read-only,
 * check that it is there). */
static vbm_status sq_migrate(sq_store *q, int readonly, vbm_error *err)
{
    char got[64];
    int rc, v, i;

    rc = sqlite3_exec(q->db, readonly ? "BEGIN" : "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return sq_fail(q, rc, err, "begin migration");
    rc = sq_pragma(q, "PRAGMA user_version", got, sizeof got);
    if (rc != SQLITE_OK) {
        sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
        return sq_fail(q, rc, err, "read user_version");
    }
    v = atoi(got);
    if (v > SQ_SCHEMA_VERSION || v < 0 || (readonly && v != SQ_SCHEMA_VERSION)) {
        sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
        return vbm_fail(err, VBM_EUNAVAIL, NULL,
                        "%s has schema version %d; this vbmemd %s version %d", q->path, v,
                        readonly ? "reads" : "knows up to", SQ_SCHEMA_VERSION);
    }
    for (i = v; i < SQ_SCHEMA_VERSION && rc == SQLITE_OK; i++)
        rc = sqlite3_exec(q->db, sq_migrations[i], NULL, NULL, NULL);
    if (rc == SQLITE_OK && v < SQ_SCHEMA_VERSION) {
        snprintf(got, sizeof got, "PRAGMA user_version = %d", SQ_SCHEMA_VERSION);
        rc = sqlite3_exec(q->db, got, NULL, NULL, NULL);
    }
    if (rc == SQLITE_OK)
        rc = sqlite3_exec(q->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        vbm_status est = sq_fail(q, rc, err, "migrate the schema");

        sqlite3_exec(q->db, "ROLLBACK", NULL, NULL, NULL);
        return est;
    }
    return VBM_OK;
}

/* Take the directory lock. */
static vbm_status sq_lock_dir(sq_store *q, const char *lock_path, vbm_error *err)
{
    struct timespec pause = {0, 50 * 1000 * 1000};
    int i;

    q->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (q->lock_fd < 0)
        return vbm_fail(err, VBM_EUNAVAIL, NULL, "cannot open %s: %s", lock_path, strerror(errno));
    /* Wait a little: a killed predecessor's lock goes only when it is reaped. */
    for (i = 0; flock(q->lock_fd, LOCK_EX | LOCK_NB) != 0; i++) {
        if (errno != EWOULDBLOCK || i >= SQ_LOCK_TRIES)
            return vbm_fail(err, VBM_EUNAVAIL, NULL,
                            "%s is locked: another vbmemd (or an import) uses this data "
                            "directory",
                            lock_path);
        nanosleep(&pause, NULL);
    }
    return VBM_OK;
}

vbm_status store_sqlite_open(const char *path, const char *lock_path, int readonly,
                             eng_backend **out, vbm_error *err)
{
    sq_store *q;
    char got[64];
    vbm_status est = VBM_OK;
    int rc, i, flags;

    *out = NULL;
    if (strlen(path) >= sizeof q->path)
        return vbm_fail(err, VBM_EINVAL, NULL, "database path too long");
    q = calloc(1, sizeof *q);
    if (q == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    pthread_mutex_init(&q->lock, NULL);
    pthread_mutex_init(&q->gc_lock, NULL);
    pthread_cond_init(&q->gc_cond, NULL);
    q->lock_fd = -1;
    snprintf(q->path, sizeof q->path, "%s", path);
    q->base.ops = &sq_ops;
    q->base.impl = q;
    q->base.name = "sqlite";
    if (lock_path != NULL)
        est = sq_lock_dir(q, lock_path, err);
    flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE)
            | SQLITE_OPEN_NOMUTEX;
    if (est == VBM_OK) {
        rc = sq_vfs_register(q);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "register the counting VFS");
    }
    if (est == VBM_OK) {
        rc = sqlite3_open_v2(path, &q->db, flags, q->vfs_name);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "open");
    }
    if (est == VBM_OK) {
        sqlite3_extended_result_codes(q->db, 0);
        sqlite3_busy_timeout(q->db, SQ_BUSY_MS);
        if (!readonly) {
            rc = sq_pragma(q, "PRAGMA journal_mode = WAL", got, sizeof got);
            if (rc != SQLITE_OK)
                est = sq_fail(q, rc, err, "set WAL mode");
            else if (strcmp(got, "wal") != 0)
                est = vbm_fail(err, VBM_EUNAVAIL, NULL, "%s: WAL mode refused (journal mode %s)",
                               path, got);
        }
    }
    if (est == VBM_OK) {
        rc = sqlite3_exec(q->db, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "set synchronous=FULL");
    }
    if (est == VBM_OK)
        est = sq_migrate(q, readonly, err);
    for (i = 0; est == VBM_OK && i < SQ_NSTMT; i++) {
        rc = sqlite3_prepare_v3(q->db, sq_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &q->stmt[i], NULL);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "prepare");
    }
    if (est != VBM_OK) {
        sq_close(q);
        return est;
    }
    *out = &q->base;
    return VBM_OK;
}

vbm_status store_sqlite_open_dir(const char *dir, eng_backend **out, vbm_error *err)
{
    char db[4096], lock[4096];

    *out = NULL;
    if ((size_t)snprintf(db, sizeof db, "%s/vbmem.db", dir) >= sizeof db
        || (size_t)snprintf(lock, sizeof lock, "%s/vbmemd.lock", dir) >= sizeof lock)
        return vbm_fail(err, VBM_EINVAL, NULL, "data directory path too long");
    return store_sqlite_open(db, lock, 0, out, err);
}

vbm_status store_sqlite_bulk(eng_backend *b, int on, vbm_error *err)
{
    sq_store *q;
    char got[64];
    vbm_status est = VBM_OK;
    int rc;

    if (b == NULL || b->ops != &sq_ops)
        return vbm_fail(err, VBM_EINVAL, NULL, "not a SQLite backend");
    q = b->impl;
    pthread_mutex_lock(&q->lock);
    if (sqlite3_db_readonly(q->db, "main") == 1) {
        est = vbm_fail(err, VBM_EINVAL, NULL, "%s is open read-only", q->path);
    } else if (on) {
        rc = sqlite3_exec(q->db, "PRAGMA synchronous = NORMAL", NULL, NULL, NULL);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "set synchronous=NORMAL");
    } else {
        /* The result row is (busy, WAL frames, frames checkpointed): busy 1 means
         * the checkpoint could not finish. */
        rc = sq_pragma(q, "PRAGMA wal_checkpoint(TRUNCATE)", got, sizeof got);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "checkpoint");
        else if (strcmp(got, "0") != 0)
            est =
                vbm_fail(err, VBM_EUNAVAIL, NULL, "%s: the final checkpoint was blocked", q->path);
        if (est == VBM_OK) {
            rc = sqlite3_exec(q->db, "PRAGMA synchronous = FULL", NULL, NULL, NULL);
            if (rc != SQLITE_OK)
                est = sq_fail(q, rc, err, "set synchronous=FULL");
        }
    }
    pthread_mutex_unlock(&q->lock);
    return est;
}

vbm_status store_sqlite_durability_get(eng_backend *b, store_sqlite_durability *out, vbm_error *err)
{
    sq_store *q;
    char got[64];
    vbm_status est = VBM_OK;
    int rc;

    memset(out, 0, sizeof *out);
    if (b == NULL || b->ops != &sq_ops)
        return vbm_fail(err, VBM_EINVAL, NULL, "not a SQLite backend");
    q = b->impl;
    pthread_mutex_lock(&q->lock);
    rc = sq_pragma(q, "PRAGMA synchronous", got, sizeof got);
    if (rc != SQLITE_OK)
        est = sq_fail(q, rc, err, "read synchronous");
    else
        out->synchronous = atoi(got);
    if (est == VBM_OK) {
        rc = sq_pragma(q, "PRAGMA journal_mode", out->journal_mode, sizeof out->journal_mode);
        if (rc != SQLITE_OK)
            est = sq_fail(q, rc, err, "read journal_mode");
    }
    out->commits = __atomic_load_n(&q->commits, __ATOMIC_RELAXED);
    out->wal_syncs = __atomic_load_n(&q->wal_syncs, __ATOMIC_RELAXED);
    out->db_syncs = __atomic_load_n(&q->db_syncs, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&q->lock);
    return est;
}
