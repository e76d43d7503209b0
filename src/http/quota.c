/* quota.c -- owns the per-API-key session and byte quotas: counting a key's sessions and bytes,
 * refusing with 429. */
#define _POSIX_C_SOURCE 200809L

#include <stdlib.h>
#include <string.h>

#include "http/quota.h"
#include "http/respond.h"

#define QUOTA_PAGE 200

/* 1 when the request's key has a session or byte quota (counted over its
 * owner's sessions). */
static int quota_applies(const http_req *r)
{
    return r->policy.max_sessions > 0 || r->policy.max_bytes > 0;
}

/* The stripe of the request's key. */
static pthread_mutex_t *quota_stripe(http_req *r)
{
    return &r->srv->quota_locks[r->owner[0] % QUOTA_STRIPES];
}

void quota_lock(http_req *r)
{
    if (quota_applies(r))
        pthread_mutex_lock(quota_stripe(r));
}

void quota_unlock(http_req *r)
{
    if (quota_applies(r))
        pthread_mutex_unlock(quota_stripe(r));
}

/* Count the sessions of r's key and their accounted bytes. */
static vbm_status quota_usage(http_req *r, long *count, double *bytes, vbm_error *err)
{
    char after[ENG_ID_LEN + 1];
    eng_session **items;
    int n, more = 1, i;
    vbm_status st;

    *count = 0;
    *bytes = 0.0;
    after[0] = '\0';
    while (more) {
        st = eng_store_list(r->srv->store, r->owner, after, QUOTA_PAGE, &items, &n, &more, err);
        if (st != VBM_OK)
            return st;
        for (i = 0; i < n; i++) {
            *bytes += (double)eng_session_bytes(items[i]);
            if (i == n - 1)
                snprintf(after, sizeof after, "%s", eng_session_id(items[i]));
            eng_session_unref(items[i]);
        }
        free(items);
        *count += n;
        if (n == 0)
            break;
    }
    return VBM_OK;
}

int quota_admit(http_req *r, int new_session, size_t old_bytes, double new_bytes, int grows_unknown,
                vbm_error *err)
{
    const http_key_policy *p = &r->policy;
    double bytes, after;
    long count;
    vbm_status st;

    if (!quota_applies(r))
        return 0;
    if (p->max_bytes == 0 && !new_session)
        return 0;
    st = quota_usage(r, &count, &bytes, err);
    if (st != VBM_OK)
        return resp_status_of(st);
    if (new_session && p->max_sessions > 0 && count + 1 > p->max_sessions)
        return resp_fail(err, 429, NULL, "this API key owns %ld session(s), its quota is %ld",
                         count, p->max_sessions);
    if (p->max_bytes == 0)
        return 0;
    if (grows_unknown && bytes >= (double)p->max_bytes)
        return resp_fail(err, 429, NULL,
                         "this API key's sessions hold %.0f accounted bytes, its quota is %zu",
                         bytes, p->max_bytes);
    after = bytes - (double)old_bytes + new_bytes;
    if (new_bytes > (double)old_bytes && after > (double)p->max_bytes)
        return resp_fail(err, 429, NULL,
                         "this API key's sessions would hold %.0f accounted bytes (now %.0f), "
                         "its quota is %zu",
                         after, bytes, p->max_bytes);
    return 0;
}
