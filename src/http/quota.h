/* quota.h -- owns the per-API-key quotas of sessions and accounted memory bytes (the request-rate
 * quota lives in auth.c). */
#ifndef VBMEM_HTTP_QUOTA_H
#define VBMEM_HTTP_QUOTA_H

#include <stddef.h>

#include "http/request.h"

/* Hold the request owner's quota lock (one of QUOTA_STRIPES, by owner
 * digest) while a creation is checked and inserted, so that concurrent
 * creations of one owner cannot both pass the last free slot. A no-op for a key without a
 * session or byte quota. Pair with quota_unlock. Never fails. */
void quota_lock(http_req *r);

/* Release what quota_lock took. Never fails. */
void quota_unlock(http_req *r);

/* Check the request key's quotas before an operation that adds new_session
 * (0 or 1) sessions and turns old_bytes of accounted bytes into new_bytes
 * (an estimate). The usage counted is the number of sessions of the key's
 * owner (r->owner: the key, or the owner=NAME keys share) and the sum of
 * their accounted bytes (eng_session_bytes; a durable store loads the owner's
 * sessions to count them, resident or not). Refused when the sessions would
 * pass max_sessions, when the bytes would pass max_bytes, or, for an
 * operation whose growth is unknown (grows_unknown 1: episodes), when the
 * key is already at or over max_bytes; shrinking always passes the byte
 * quota. Returns 0 when the operation may go on (always for a key without
 * these quotas), else the status with err filled: 429 naming the quota, or the
 * store's failure (503) when it cannot list the sessions. */
int quota_admit(http_req *r, int new_session, size_t old_bytes, double new_bytes, int grows_unknown,
                vbm_error *err);

#endif
