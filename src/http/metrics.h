/* metrics.h -- owns the daemon's counters and histograms and their Prometheus text exposition. */
#ifndef VBMEM_HTTP_METRICS_H
#define VBMEM_HTTP_METRICS_H

#include <stddef.h>

#define METRICS_MAX_ROUTES 32

typedef struct http_metrics http_metrics;

/* Gauges sampled at scrape time by the caller. */
typedef struct {
    int queue_depth; /* jobs waiting */
    int queue_capacity;
    int jobs_in_flight; /* jobs running */
    long sessions;
    size_t memory_bytes;
    size_t scratch_bytes; /* the workers' fit buffers kept between jobs (eng_pool_scratch_bytes) */
    int api_keys;
    unsigned long long answer_bytes; /* bytes of answers not yet read by their clients */
    size_t answer_bytes_limit;       /* --max-answer-memory */
} metrics_gauges;

/* Create metrics for nroutes routes named by route_names (copied pointers; the
 * strings must outlive the metrics; index nroutes is "unmatched"). Returns NULL
 * when out of memory or nroutes > METRICS_MAX_ROUTES - 1. */
http_metrics *metrics_create(int nroutes, const char *const *route_names);

/* Count one finished request of route index (nroutes for unmatched) with the
 * given HTTP status and latency in seconds. Thread-safe. */
void metrics_request(http_metrics *m, int route, int status, double seconds);

/* Record one solver run (write/append/refit/resize): iterations and seconds.
 * Thread-safe. */
void metrics_solve(http_metrics *m, int iterations, double seconds);

/* Count a request refused because the queue was full. Thread-safe. */
void metrics_rejected(http_metrics *m);

/* Count an answer refused (503) because answers not yet read held --max-answer-memory.
 * Thread-safe. */
void metrics_answer_refused(http_metrics *m);

/* Count a corrupt stored record met by a request (eng_store_set_corrupt_hook). Thread-safe. */
void metrics_corrupt(http_metrics *m);

/* Render everything in the Prometheus text format (version 0.0.4) into a new
 * malloc'd NUL-terminated string (*len its length). Returns NULL when out of
 * memory. */
char *metrics_render(http_metrics *m, const metrics_gauges *g, size_t *len);

/* Free the metrics. NULL is a no-op. */
void metrics_free(http_metrics *m);

#endif
