/* backend.h -- owns the durable storage interface (open, load, store-with-version, delete, list, close) that SQLite and Redis implement, and the backup copy between two backends. */
#ifndef VBMEM_ENGINE_BACKEND_H
#define VBMEM_ENGINE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "engine/session.h"

/* The operations of one durable backend; impl is its private state. Every
 * operation is safe to call from several threads at once. */
typedef struct {
    eng_status (*load)(void *impl, const char *id, eng_record *out, eng_error *err);
    eng_status (*save)(void *impl, const eng_record *rec, uint64_t expected, eng_error *err);
    eng_status (*remove)(void *impl, const char *id, const unsigned char *owner, eng_error *err);
    eng_status (*list)(void *impl, const unsigned char *owner, const char *after, int limit,
                       char (*ids)[ENG_ID_LEN + 1], int *n, eng_error *err);
    eng_status (*idle)(void *impl, double now_wall, int limit, char (*ids)[ENG_ID_LEN + 1],
                       int *n, eng_error *err);
    eng_status (*touch)(void *impl, const char *id, double used, eng_error *err);
    eng_status (*count)(void *impl, long *n, eng_error *err);
    eng_status (*check)(void *impl, eng_error *err);
    void (*close)(void *impl);
    eng_status (*current)(void *impl, const char *id, uint64_t *version, eng_error *err);
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
 * database without writing to it (backups of a running daemon's data). On
 * success *out is owned by the caller (eng_backend_close). Fails with
 * ENG_EUNAVAIL (cannot create or open the file, the lock is held by another
 * process, the database is corrupt or from a newer schema: the message says
 * which), ENG_ENOMEM. */
eng_status store_sqlite_open(const char *path, const char *lock_path, int readonly,
                             eng_backend **out, eng_error *err);

/* A Redis backend at host:port (hiredis; keys under prefix, e.g. "vbmem:"):
 * one hash per session (the record's fields, the memory and usage as binary
 * strings, a checksum), sorted-set indexes of all ids and of each owner's,
 * compare-and-set in a Lua script, a session's TTL as the hash's expiry
 * (renewed on every use). Connects lazily and reconnects after a failure,
 * waiting 0.1 s, doubling up to 5 s, between tries; meanwhile every operation
 * fails at once with ENG_EUNAVAIL. Durability is Redis's: run it with
 * appendonly yes, appendfsync always. shared is 1. On success *out is owned by
 * the caller (eng_backend_close). Fails with ENG_EINVAL (address), ENG_ENOMEM;
 * never for an unreachable server. */
eng_status store_redis_open(const char *host, int port, const char *prefix, eng_backend **out,
                            eng_error *err);

/* Open the database of a data directory: DIR/vbmem.db, locked through
 * DIR/vbmemd.lock. Same failures as store_sqlite_open. */
eng_status store_sqlite_open_dir(const char *dir, eng_backend **out, eng_error *err);

/* The stored record of id (any owner) into *out (release with
 * eng_record_free). Fails with ENG_ENOTFOUND, ENG_EUNAVAIL (busy, I/O error,
 * or the record fails its checksum: corrupt), ENG_ENOMEM. */
eng_status eng_backend_load(eng_backend *b, const char *id, eng_record *out, eng_error *err);

/* Store rec in one transaction, committed (durable) when ENG_OK is returned.
 * Compare-and-set on the version: expected 0 creates the record (ENG_ECONFLICT
 * when the id exists); expected N > 0 replaces the record only if it is at
 * version N (ENG_ENOTFOUND when it is gone, ENG_ECONFLICT when it is at another
 * version). Fails also with ENG_EUNAVAIL, ENG_ENOMEM. */
eng_status eng_backend_save(eng_backend *b, const eng_record *rec, uint64_t expected,
                            eng_error *err);

/* Delete the record id of owner (NULL: any owner). Fails with ENG_ENOTFOUND,
 * ENG_EUNAVAIL. */
eng_status eng_backend_remove(eng_backend *b, const char *id, const unsigned char *owner,
                              eng_error *err);

/* Up to limit ids of owner's records (owner NULL: every owner) that sort after
 * `after` (NULL or "": from the start), in id order, into ids; *n is how many.
 * Fails with ENG_EUNAVAIL. */
eng_status eng_backend_list(eng_backend *b, const unsigned char *owner, const char *after,
                            int limit, char (*ids)[ENG_ID_LEN + 1], int *n, eng_error *err);

/* Up to limit ids of records with a TTL whose last use plus TTL is before
 * now_wall (wall clock seconds). Fails with ENG_EUNAVAIL. */
eng_status eng_backend_idle(eng_backend *b, double now_wall, int limit,
                            char (*ids)[ENG_ID_LEN + 1], int *n, eng_error *err);

/* Record a later last use of id (wall clock seconds); a missing id is not an
 * error. Fails with ENG_EUNAVAIL. */
eng_status eng_backend_touch(eng_backend *b, const char *id, double used, eng_error *err);

/* The stored version of id, for a shared backend's caches (Redis also renews
 * the session's expiry). Fails with ENG_ENOTFOUND, ENG_EUNAVAIL, and ENG_EINVAL
 * for a backend without it (SQLite: the daemon owns the file). */
eng_status eng_backend_current(eng_backend *b, const char *id, uint64_t *version,
                               eng_error *err);

/* Number of stored records. Fails with ENG_EUNAVAIL. */
eng_status eng_backend_count(eng_backend *b, long *n, eng_error *err);

/* Check the backend is usable (SQLite: PRAGMA quick_check). Fails with
 * ENG_EUNAVAIL naming the problem. */
eng_status eng_backend_check(eng_backend *b, eng_error *err);

/* Close and free the backend. NULL is a no-op. */
void eng_backend_close(eng_backend *b);

/* The record checksum both backends store and check: word-wise FNV-1a 64 over
 * a[0..na) then b[0..nb) (the memory, then the encoded usage). Never fails. */
uint64_t eng_backend_checksum(const unsigned char *a, size_t na, const unsigned char *b,
                              size_t nb);

/* The n usage doubles as 8 * n little-endian bytes (malloc'd, the caller's);
 * NULL when n == 0 or u == NULL, or out of memory (*fail = 1). */
unsigned char *eng_backend_usage_encode(const double *u, size_t n, int *fail);

/* Decode n doubles of eng_backend_usage_encode's form from b into u. Never
 * fails. */
void eng_backend_usage_decode(const unsigned char *b, size_t n, double *u);

/* Backup and restore: copy every record of src into dst (each checked by
 * importing its memory, so a corrupt record stops the copy), replacing a
 * record of the same id in dst whatever its version. *copied counts them.
 * Fails with ENG_EUNAVAIL, ENG_EFORMAT (a record of src does not import; the
 * message names it), ENG_ENOMEM; records copied before the failure stay. */
eng_status eng_backend_copy_all(eng_backend *src, eng_backend *dst, long *copied,
                                eng_error *err);

#endif
