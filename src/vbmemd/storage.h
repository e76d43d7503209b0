/* storage.h -- owns vbmemd's choice of session store (SQLite in --data-dir, Redis with --redis, or memory) and its one-shot storage commands (--list-sessions, --export-all, --import-all). */
#ifndef VBMEM_VBMEMD_STORAGE_H
#define VBMEM_VBMEMD_STORAGE_H

#include <stdio.h>

#include "engine/store.h"
#include "vbmemd/options.h"

/* Open the store the options ask for: with o->data_dir the durable SQLite
 * store (DIR/vbmem.db, locked for this process), with o->redis the durable
 * store over a Redis server shared with other replicas (not contacted yet: an
 * unreachable server gives 503s until it is back), both with at most
 * o->max_resident idle sessions in memory; else the in-memory store. *durable
 * is set to 1 for a durable store. On success *out is owned by the caller (eng_store_free). Fails with
 * VBM_EUNAVAIL (database cannot be opened, is locked by another vbmemd, or is
 * from a newer schema), VBM_EINVAL, VBM_ENOMEM; the message says which. */
vbm_status vbmemd_storage_open(const vbmemd_options *o, eng_store **out, int *durable,
                               vbm_error *err);

/* 1 when the options ask for a one-shot storage command instead of serving. */
int vbmemd_storage_is_command(const vbmemd_options *o);

/* Run the storage command of the options, writing JSON lines to out:
 * --list-sessions (every stored session: id, owner prefix, version, TTL,
 * times, memory bytes; read-only, safe while vbmemd runs), --export-all FILE
 * (a consistent copy of every session into a new SQLite file; safe while
 * vbmemd runs), --import-all FILE (copy every session of FILE into the store,
 * replacing sessions of the same id; takes the data directory's lock, so
 * vbmemd must be stopped). Fails with VBM_EINVAL (no --data-dir, FILE exists
 * for an export), VBM_EUNAVAIL, VBM_EFORMAT (a corrupt record: nothing after
 * it is copied), VBM_ENOMEM. */
vbm_status vbmemd_storage_command(const vbmemd_options *o, FILE *out, vbm_error *err);

#endif
