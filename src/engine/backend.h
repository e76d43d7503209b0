/* backend.h -- owns the durable storage interface (open, load, store-with-version, delete, list,
 * close) that SQLite and Redis implement, and the backup copy between two backends. */
#ifndef VBMEM_ENGINE_BACKEND_H
#define VBMEM_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/clock.h"
#include "engine/session.h"

/* The operations of one durable backend; impl is its private state. Every
 * operation is safe to call from several threads at once. */
typedef struct {
    vbm_status (*load)(void *impl, const char *id, eng_record *out, vbm_error *err);
    vbm_status (*save)(void *impl, const eng_record *rec, uint64_t expected, vbm_error *err);
    vbm_status (*remove)(void *impl, const char *id, const unsigned char *owner, vbm_error *err);
    vbm_status (*list)(void *impl, const unsigned char *owner, const char *after, int limit,
                       char (*ids)[ENG_ID_LEN + 1], int *n, vbm_error *err);
    vbm_status (*idle)(void *impl, double now_wall, int limit, char (*ids)[ENG_ID_LEN + 1], int *n,
                       vbm_error *err);
    vbm_status (*touch)(void *impl, const char *id, double used, vbm_error *err);
    vbm_status (*count)(void *impl, long *n, vbm_error *err);
    vbm_status (*check)(void *impl, vbm_error *err);
    void (*close)(void *impl);
    vbm_status (*current)(void *impl, const char *id, uint64_t *version, vbm_error *err);
} eng_backend_ops;

typedef struct {
    const eng_backend_ops *ops;
    void *impl;
    const char *name; /* "sqlite", "redis" */
    int shared;       /* 1: other processes write it too (replicas): caches check versions */
} eng_backend;

/* Open (creating or migrating it) the SQLite database at path: WAL journal,
 * synchronous=FULL, schema versioned by PRAGMA user_version. With lock_path
 * non-NULL an exclusive advisory lock (flock) on that file is taken first, so
 * that one daemon at a time owns a data directory (waiting up to 2 s for a
 * predecessor that is exiting). readonly opens an existing
 * database without writing to it (backups of a running daemon's data). The
 * connection opens through a VFS of the backend's own that forwards to
 * SQLite's default one and counts its fsyncs (store_sqlite_durability_get). On
 * success *out is owned by the caller (eng_backend_close). Fails with
 * VBM_EUNAVAIL (cannot create or open the file, the lock is held by another
 * process, the database is corrupt or from a newer schema, SQLite refused the
 * counting VFS: the message says which), VBM_ENOMEM. */
vbm_status store_sqlite_open(const char *path, const char *lock_path, int readonly,
                             eng_backend **out, vbm_error *err);

/* A Redis backend at host:port (hiredis; keys under prefix, e.g. "vbmem:"):
 * one hash per session (the record's fields, the memory and usage as binary
 * strings, a checksum), sorted-set indexes of all ids and of each owner's,
 * compare-and-set in a Lua script, a session's TTL as the hash's expiry
 * (renewed on every use). Connects lazily and reconnects after a failure,
 * waiting 0.1 s, doubling up to 5 s, between tries; meanwhile every operation
 * fails at once with VBM_EUNAVAIL. Durability is Redis's: run it with
 * appendonly yes, appendfsync always. shared is 1. On success *out is owned by
 * the caller (eng_backend_close). Fails with VBM_EINVAL (address), VBM_ENOMEM;
 * never for an unreachable server. */
vbm_status store_redis_open(const char *host, int port, const char *prefix, eng_backend **out,
                            vbm_error *err);

/* One Redis or Sentinel address. */
typedef struct {
    char host[256];
    int port;
} store_redis_addr;

#define STORE_REDIS_MAX_SENTINELS 16

/* Parse list, "HOST:PORT[,HOST:PORT...]" ("[V6]:PORT" for IPv6), into
 * out[0..*n) (at most max); option names the option in messages
 * ("redis-sentinel"). Fails with VBM_EINVAL, field option, the message naming
 * the option and the bad item (an empty list or item, a missing or bad port
 * (1..65535), a host over 255 bytes, more than max addresses). */
vbm_status store_redis_parse_addrs(const char *list, const char *option, store_redis_addr *out,
                                   int max, int *n, vbm_error *err);

/* How a Redis backend finds its server and when a write counts. */
typedef struct {
    store_redis_addr server;                               /* n_sentinels == 0: this server */
    store_redis_addr sentinels[STORE_REDIS_MAX_SENTINELS]; /* else: ask these for the primary */
    int n_sentinels;
    const char *service; /* with sentinels: the name they monitor the primary under */
    const char *prefix;  /* key prefix, e.g. "vbmem:" */
    int min_replicas;    /* a save or delete is acknowledged once WAIT saw it on this many */
    int wait_timeout_ms; /* WAIT's timeout (with min_replicas > 0) */
} store_redis_config;

/* A Redis backend as store_redis_open, configured by cfg. With sentinels, each
 * (re)connect asks them in turn (starting with the one that answered last)
 * for the primary of cfg->service (SENTINEL get-master-addr-by-name), connects
 * to it and checks with ROLE that it is a master; a lost connection or a
 * READONLY answer (the server was demoted) drops the connection and the next
 * connect asks the sentinels again, with the same backoff (0.1 s doubling, up
 * to 1 s with sentinels, 5 s without); a command that had no effect (READONLY)
 * or that is safe to repeat (reads) is retried once at once on the
 * rediscovered primary. With min_replicas > 0 a save or delete that the
 * primary applied is reported done only when WAIT min_replicas
 * wait_timeout_ms confirms it on that many replicas; fewer: VBM_EUNAVAIL
 * although the write may stand (the version check makes a retry safe). On
 * success *out is owned by the caller (eng_backend_close). Fails with
 * VBM_EINVAL (an address, no service with sentinels, a negative count or
 * timeout), VBM_ENOMEM; never for an unreachable server or sentinel. */
vbm_status store_redis_open_config(const store_redis_config *cfg, eng_backend **out,
                                   vbm_error *err);

/* How many times a Redis backend with sentinels has asked them for the primary
 * and got an address (-1: not a Redis backend with sentinels). Cannot fail. */
long store_redis_discoveries(eng_backend *b);

/* Test hook of a Redis backend: the clock its reconnect backoff reads
 * (now(ctx), seconds; now NULL: eng_now, the default), so that a test steps
 * through the backoff without waiting it. Does nothing when b is not a Redis
 * backend. Cannot fail. */
void store_redis_set_clock(eng_backend *b, double (*now)(void *ctx), void *ctx);

/* How many connects a Redis backend has tried since it was opened (each one
 * bounded by a 1 s connect timeout); -1 when b is not a Redis backend. Cannot
 * fail. */
long store_redis_connect_tries(eng_backend *b);

/* Bulk copies into a SQLite backend (the backup CLI): on = 1 drops the
 * per-commit fsync (synchronous=NORMAL: the WAL keeps the file consistent,
 * a crash loses only the last commits); on = 0 then makes everything durable
 * (a full checkpoint, fsyncing the WAL and the database, the WAL truncated)
 * and restores synchronous=FULL. Call on = 0 and check it before reporting a
 * copy done. Fails with VBM_EINVAL (not a writable SQLite backend),
 * VBM_EUNAVAIL (the pragma or the checkpoint failed or was blocked). */
vbm_status store_sqlite_bulk(eng_backend *b, int on, vbm_error *err);

/* The durability settings of a SQLite backend's open connection and its fsyncs so far. */
typedef struct {
    int synchronous;       /* PRAGMA synchronous: 0 OFF, 1 NORMAL, 2 FULL, 3 EXTRA */
    char journal_mode[16]; /* PRAGMA journal_mode, e.g. "wal" */
    long commits;          /* transactions of saves committed (one per group commit) */
    long wal_syncs;        /* fsyncs (VFS xSync calls) of the write-ahead log since open */
    long db_syncs;         /* fsyncs of the database file (checkpoints) since open */
} store_sqlite_durability;

/* Read into *out the synchronous level and journal mode the open connection of
 * b runs with (queried from SQLite itself) and the counts of commits and of
 * fsyncs made through the backend's counting VFS since it was opened: with
 * WAL and synchronous=FULL every commit syncs the WAL, so wal_syncs grows at
 * least as fast as commits. Safe while other threads use b. Fails with
 * VBM_EINVAL (not a SQLite backend), VBM_EUNAVAIL (the pragma query failed). */
vbm_status store_sqlite_durability_get(eng_backend *b, store_sqlite_durability *out,
                                       vbm_error *err);

/* Open the database of a data directory: DIR/vbmem.db, locked through
 * DIR/vbmemd.lock. Same failures as store_sqlite_open. */
vbm_status store_sqlite_open_dir(const char *dir, eng_backend **out, vbm_error *err);

/* The stored record of id (any owner) into *out (release with
 * eng_record_free). Fails with VBM_ENOTFOUND, VBM_EUNAVAIL (busy, I/O error),
 * VBM_ECORRUPT (the record fails its checksum or has malformed fields: *out
 * then holds its id, version and owner only -- the owner all 0xff, nobody's,
 * when it is unreadable -- and no memory), VBM_ENOMEM. */
vbm_status eng_backend_load(eng_backend *b, const char *id, eng_record *out, vbm_error *err);

/* Store rec in one transaction, committed (durable) when VBM_OK is returned.
 * Compare-and-set on the version: expected 0 creates the record (VBM_ECONFLICT
 * when the id exists); expected N > 0 replaces the record only if it is at
 * version N (VBM_ENOTFOUND when it is gone, VBM_ECONFLICT when it is at another
 * version). Fails also with VBM_EUNAVAIL, VBM_ENOMEM. */
vbm_status eng_backend_save(eng_backend *b, const eng_record *rec, uint64_t expected,
                            vbm_error *err);

/* Delete the record id of owner (NULL: any owner). Fails with VBM_ENOTFOUND,
 * VBM_EUNAVAIL. */
vbm_status eng_backend_remove(eng_backend *b, const char *id, const unsigned char *owner,
                              vbm_error *err);

/* Up to limit ids of owner's records (owner NULL: every owner) that sort after
 * `after` (NULL or "": from the start), in id order, into ids; *n is how many.
 * Fails with VBM_EUNAVAIL. */
vbm_status eng_backend_list(eng_backend *b, const unsigned char *owner, const char *after,
                            int limit, char (*ids)[ENG_ID_LEN + 1], int *n, vbm_error *err);

/* Up to limit ids of records with a TTL whose last use plus TTL is before
 * now_wall (wall clock seconds). Fails with VBM_EUNAVAIL. */
vbm_status eng_backend_idle(eng_backend *b, double now_wall, int limit, char (*ids)[ENG_ID_LEN + 1],
                            int *n, vbm_error *err);

/* Record a later last use of id (wall clock seconds); a missing id is not an
 * error. Fails with VBM_EUNAVAIL. */
vbm_status eng_backend_touch(eng_backend *b, const char *id, double used, vbm_error *err);

/* The stored version of id, for a shared backend's caches (Redis also renews
 * the session's expiry). Fails with VBM_ENOTFOUND, VBM_EUNAVAIL, and VBM_EINVAL
 * for a backend without it (SQLite: the daemon owns the file). */
vbm_status eng_backend_current(eng_backend *b, const char *id, uint64_t *version, vbm_error *err);

/* Number of stored records. Fails with VBM_EUNAVAIL. */
vbm_status eng_backend_count(eng_backend *b, long *n, vbm_error *err);

/* Check the backend is usable (SQLite: PRAGMA quick_check). Fails with
 * VBM_EUNAVAIL naming the problem. */
vbm_status eng_backend_check(eng_backend *b, vbm_error *err);

/* Close and free the backend. NULL is a no-op. */
void eng_backend_close(eng_backend *b);

/* The record checksum both backends store and check: word-wise FNV-1a 64 over
 * a[0..na) then b[0..nb) (the memory, then the encoded usage). Never fails. */
uint64_t eng_backend_checksum(const unsigned char *a, size_t na, const unsigned char *b, size_t nb);

/* The n usage doubles as 8 * n little-endian bytes (malloc'd, the caller's);
 * NULL when n == 0 or u == NULL, or out of memory (*fail = 1). */
unsigned char *eng_backend_usage_encode(const double *u, size_t n, int *fail);

/* Decode n doubles of eng_backend_usage_encode's form from b into u. Never
 * fails. */
void eng_backend_usage_decode(const unsigned char *b, size_t n, double *u);

/* Backup and restore: copy every record of src into dst (each checked by
 * importing its memory), replacing a record of the same id in dst whatever its
 * version (a corrupt one included). *copied counts them. A corrupt record of
 * src (VBM_ECORRUPT, or a memory that does not import) is skipped: skipped(ctx,
 * id, why) is called for it (skipped may be NULL) and the copy goes on. Fails
 * with VBM_EUNAVAIL, VBM_ENOMEM; records copied before the failure stay. */
vbm_status eng_backend_copy_all(eng_backend *src, eng_backend *dst, long *copied,
                                void (*skipped)(void *ctx, const char *id, const char *why),
                                void *ctx, vbm_error *err);

#endif
