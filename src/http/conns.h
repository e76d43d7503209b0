/* conns.h -- owns the table of open HTTP connections and the eviction of the connection that has
 * waited longest for a complete request when the connection limit is reached. */
#ifndef VBMEM_HTTP_CONNS_H
#define VBMEM_HTTP_CONNS_H

#include <pthread.h>

/* One open connection. busy: a complete request is being handled or its answer sent; otherwise
 * the connection is waiting for (the rest of) a request since `since` (its opening or its last
 * answer): idle keep-alive, slow headers or a slow body all count as waiting. */
typedef struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    int busy;
    int evicted; /* shut down by http_conns_opened; MHD closes it */
    double since;
} http_conn;

/* The table. The connection limit is `limit`; MHD's own hard limit must be higher, so that a new
 * connection is accepted (and the stalest waiting one shut down) instead of waiting in the
 * kernel's backlog behind slow clients. */
typedef struct {
    pthread_mutex_t lock;
    http_conn head; /* sentinel of a circular list in opening order */
    int count;      /* open, not yet evicted */
    int limit;
    unsigned long evictions;
} http_conns;

/* Initialise an empty table for `limit` (>= 1) connections. Never fails. */
void http_conns_init(http_conns *t, int limit);

/* Release the table and every entry still in it. Never fails. */
void http_conns_destroy(http_conns *t);

/* Record a new connection on socket fd at time now; returns its entry (owned by the table, freed
 * by http_conns_closed), or NULL when out of memory (the connection is then not tracked and never
 * evicted). When more than `limit` connections are open, shuts down (shutdown(2), both ways) the
 * waiting connection with the oldest `since`, never a busy one nor c itself; MHD then closes it.
 * Returns the number evicted through *evicted when non-NULL. */
http_conn *http_conns_opened(http_conns *t, int fd, double now, int *evicted);

/* Mark c busy (a complete request was received). c may be NULL (untracked). Never fails. */
void http_conns_busy(http_conns *t, http_conn *c);

/* Mark c waiting from time now (its answer was sent). c may be NULL. Never fails. */
void http_conns_waiting(http_conns *t, http_conn *c, double now);

/* Forget c (MHD closed it) and free it. c may be NULL. Never fails. */
void http_conns_closed(http_conns *t, http_conn *c);

#endif
