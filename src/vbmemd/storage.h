/* storage.h -- owns vbmemd's choice of session store (SQLite in --data-dir, Redis with --redis or
 * --redis-sentinel, or memory) and its one-shot storage commands (--list-sessions, --export-all,
 * --import-all). */
#ifndef VBMEM_VBMEMD_STORAGE_H
#define VBMEM_VBMEMD_STORAGE_H

#include <stdio.h>

#include "engine/store.h"
#include "vbmemd/options.h"

#define VBMEMD_CHECK_IDS 8 /* corrupt ids a start-up check names */

/* What the start-up check of a SQLite store found. */
typedef struct {
    int ran;                       /* 1 when the store was checked (a SQLite store; 0 otherwise) */
    char quick_check[VBM_MSG_LEN]; /* "ok", or what PRAGMA quick_check (or running it) reported */
    long records;                  /* stored records read */
    long corrupt;                  /* of which corrupt (checksum mismatch, malformed fields) */
    char corrupt_ids[VBMEMD_CHECK_IDS][ENG_ID_LEN + 1]; /* the first min(corrupt, 8) of them */
} vbmemd_store_check;

/* Open the store the options ask for: with o->data_dir the durable SQLite
 * store (DIR/vbmem.db, locked for this process), with o->redis the durable
 * store over a Redis server shared with other replicas, with o->redis_sentinel
 * over the primary the sentinels name for o->redis_service (followed through
 * failovers), a write acknowledged once o->redis_min_replicas replicas
 * confirmed it (not contacted yet: an unreachable server or sentinels give
 * 503s until they are back), all with at most
 * o->max_resident idle sessions in memory; else the in-memory store. *durable
 * is set to 1 for a durable store. A SQLite store is checked first (PRAGMA
 * quick_check, then every record's checksum), what was found in
 * *check (which the caller logs); a store that fails the check still opens:
 * a corrupt record is skipped by listings and backups and answered as corrupt.
 * On success *out is owned by the caller (eng_store_free). Fails with
 * VBM_EUNAVAIL (database cannot be opened, is locked by another vbmemd, or is
 * from a newer schema), VBM_EINVAL, VBM_ENOMEM; the message says which. */
vbm_status vbmemd_storage_open(const vbmemd_options *o, eng_store **out, int *durable,
                               vbmemd_store_check *check, vbm_error *err);

/* 1 when the options ask for a one-shot storage command instead of serving. */
int vbmemd_storage_is_command(const vbmemd_options *o);

/* Run the storage command of the options, writing JSON lines to out:
 * --list-sessions (every stored session: id, owner prefix, version, TTL,
 * times, memory bytes; read-only, safe while vbmemd runs), --export-all FILE
 * (a consistent copy of every session into a new SQLite file; safe while
 * vbmemd runs; {"exported":N,"skipped":K}), --import-all FILE (copy every
 * session of FILE into the store, replacing sessions of the same id; takes
 * the data directory's lock, so vbmemd must be stopped;
 * {"imported":N,"skipped":K}). A corrupt record is skipped, not copied or
 * listed, and named on diag ("vbmemd: skipped session ID: why"). Fails with
 * VBM_EINVAL (no --data-dir, FILE exists for an export), VBM_EUNAVAIL,
 * VBM_ENOMEM. */
vbm_status vbmemd_storage_command(const vbmemd_options *o, FILE *out, FILE *diag, vbm_error *err);

#endif
