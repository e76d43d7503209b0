/* conns.c -- owns the table of open HTTP connections and the eviction of the connection that has
 * waited longest for a complete request when the connection limit is reached. */
#include <stdlib.h>
#include <sys/socket.h>

#include "http/conns.h"

void http_conns_init(http_conns *t, int limit)
{
    pthread_mutex_init(&t->lock, NULL);
    t->head.prev = t->head.next = &t->head;
    t->count = 0;
    t->limit = limit >= 1 ? limit : 1;
    t->evictions = 0;
}

void http_conns_destroy(http_conns *t)
{
    http_conn *c = t->head.next, *next;

    while (c != &t->head) {
        next = c->next;
        free(c);
        c = next;
    }
    t->head.prev = t->head.next = &t->head;
    pthread_mutex_destroy(&t->lock);
}

http_conn *http_conns_opened(http_conns *t, int fd, double now, int *evicted)
{
    http_conn *c = calloc(1, sizeof *c), *p, *oldest;
    int n = 0;

    if (evicted != NULL)
        *evicted = 0;
    if (c == NULL)
        return NULL;
    c->fd = fd;
    c->since = now;
    pthread_mutex_lock(&t->lock);
    c->prev = t->head.prev;
    c->next = &t->head;
    t->head.prev->next = c;
    t->head.prev = c;
    t->count++;
    while (t->count > t->limit) {
        oldest = NULL;
        for (p = t->head.next; p != &t->head; p = p->next) {
            if (p != c && !p->busy && !p->evicted && (oldest == NULL || p->since < oldest->since))
                oldest = p;
        }
        if (oldest == NULL)
            break; /* every other connection is busy: MHD's hard limit applies */
        /* The socket stays open until MHD closes it (after its CLOSED notification, which
         * removes the entry under this lock), so the fd cannot have been reused here. */
        shutdown(oldest->fd, SHUT_RDWR);
        oldest->evicted = 1;
        t->count--;
        t->evictions++;
        n++;
    }
    pthread_mutex_unlock(&t->lock);
    if (evicted != NULL)
        *evicted = n;
    return c;
}

void http_conns_busy(http_conns *t, http_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    c->busy = 1;
    pthread_mutex_unlock(&t->lock);
}

void http_conns_waiting(http_conns *t, http_conn *c, double now)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    c->busy = 0;
    c->since = now;
    pthread_mutex_unlock(&t->lock);
}

void http_conns_closed(http_conns *t, http_conn *c)
{
    if (c == NULL)
        return;
    pthread_mutex_lock(&t->lock);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    if (!c->evicted)
        t->count--;
    pthread_mutex_unlock(&t->lock);
    free(c);
}
