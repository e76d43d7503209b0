/* metrics.c -- owns request/solver counters, fixed-bucket histograms and the text exposition. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http/metrics.h"

#define METRICS_NB 14 /* latency buckets, the last is +Inf */
#define METRICS_NS 16 /* tracked statuses, the last is "other" */
#define METRICS_NI 12 /* iteration buckets, the last is +Inf */

static const double metrics_lat_bounds[METRICS_NB - 1] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0};
static const int metrics_statuses[METRICS_NS - 1] = {200, 201, 204, 400, 401, 404, 405, 409,
                                                     413, 415, 422, 429, 500, 501, 503};
static const double metrics_iter_bounds[METRICS_NI - 1] = {0,  1,   2,   5,   10,  20,
                                                           50, 100, 200, 500, 1000};

typedef struct {
    unsigned long count;
    double sum;
    unsigned long buckets[METRICS_NB]; /* non-cumulative */
} metrics_hist;

struct http_metrics {
    pthread_mutex_t lock;
    int nroutes;
    const char *const *names;
    metrics_hist req[METRICS_MAX_ROUTES][METRICS_NS];
    int other_status[METRICS_MAX_ROUTES]; /* last "other" status seen, for its label */
    metrics_hist solve_seconds;
    unsigned long iter_buckets[METRICS_NI];
    unsigned long iter_count;
    double iter_sum;
    unsigned long rejected;
    unsigned long corrupt;
    unsigned long answers_refused;
};

http_metrics *metrics_create(int nroutes, const char *const *route_names)
{
    http_metrics *m;

    if (nroutes < 0 || nroutes > METRICS_MAX_ROUTES - 1)
        return NULL;
    m = calloc(1, sizeof *m);
    if (m == NULL)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    m->nroutes = nroutes;
    m->names = route_names;
    return m;
}

static void metrics_hist_add(metrics_hist *h, const double *bounds, double v)
{
    int b = 0;

    while (b < METRICS_NB - 1 && v > bounds[b])
        b++;
    h->buckets[b]++;
    h->count++;
    h->sum += v;
}

void metrics_request(http_metrics *m, int route, int status, double seconds)
{
    int s = 0;

    if (route < 0 || route > m->nroutes)
        route = m->nroutes;
    while (s < METRICS_NS - 1 && metrics_statuses[s] != status)
        s++;
    pthread_mutex_lock(&m->lock);
    metrics_hist_add(&m->req[route][s], metrics_lat_bounds, seconds);
    if (s == METRICS_NS - 1)
        m->other_status[route] = status;
    pthread_mutex_unlock(&m->lock);
}

void metrics_solve(http_metrics *m, int iterations, double seconds)
{
    int b = 0;

    while (b < METRICS_NI - 1 && (double)iterations > metrics_iter_bounds[b])
        b++;
    pthread_mutex_lock(&m->lock);
    metrics_hist_add(&m->solve_seconds, metrics_lat_bounds, seconds);
    m->iter_buckets[b]++;
    m->iter_count++;
    m->iter_sum += iterations;
    pthread_mutex_unlock(&m->lock);
}

void metrics_rejected(http_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    m->rejected++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_answer_refused(http_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    m->answers_refused++;
    pthread_mutex_unlock(&m->lock);
}

void metrics_corrupt(http_metrics *m)
{
    pthread_mutex_lock(&m->lock);
    m->corrupt++;
    pthread_mutex_unlock(&m->lock);
}

/* A growing text buffer; failed is set once an allocation fails. */
typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} metrics_buf;

static void metrics_printf(metrics_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void metrics_printf(metrics_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    char *grown;
    size_t cap;

    if (b->failed)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        cap = 2 * b->cap + (size_t)n + 1;
        grown = realloc(b->s, cap);
        if (grown == NULL) {
            b->failed = 1;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
}

/* Emit the bucket, sum and count lines of histogram h named name with the
 * label prefix labels ("" or 'route="x",status="200",'). */
static void metrics_hist_text(metrics_buf *b, const char *name, const char *labels,
                              const metrics_hist *h, const double *bounds, int nb)
{
    unsigned long cum = 0;
    int i;

    for (i = 0; i < nb - 1; i++) {
        cum += h->buckets[i];
        metrics_printf(b, "%s_bucket{%sle=\"%g\"} %lu\n", name, labels, bounds[i], cum);
    }
    cum += h->buckets[nb - 1];
    metrics_printf(b, "%s_bucket{%sle=\"+Inf\"} %lu\n", name, labels, cum);
    if (labels[0] != '\0') {
        char trimmed[256];
        size_t n = strlen(labels);

        snprintf(trimmed, sizeof trimmed, "%.*s", (int)(n - 1), labels);
        metrics_printf(b, "%s_sum{%s} %.9g\n", name, trimmed, h->sum);
        metrics_printf(b, "%s_count{%s} %lu\n", name, trimmed, h->count);
    } else {
        metrics_printf(b, "%s_sum %.9g\n", name, h->sum);
        metrics_printf(b, "%s_count %lu\n", name, h->count);
    }
}

char *metrics_render(http_metrics *m, const metrics_gauges *g, size_t *len)
{
    metrics_buf b = {NULL, 0, 0, 0};
    metrics_hist it;
    char labels[256];
    int r, s, status;
    const char *name;

    b.cap = 16384;
    b.s = malloc(b.cap);
    if (b.s == NULL)
        return NULL;
    b.s[0] = '\0';
    pthread_mutex_lock(&m->lock);
    metrics_printf(&b, "# HELP vbmemd_requests_total HTTP requests answered, by route and status.\n"
                       "# TYPE vbmemd_requests_total counter\n");
    for (r = 0; r <= m->nroutes; r++) {
        name = r < m->nroutes ? m->names[r] : "unmatched";
        for (s = 0; s < METRICS_NS; s++) {
            if (m->req[r][s].count == 0)
                continue;
            status = s < METRICS_NS - 1 ? metrics_statuses[s] : m->other_status[r];
            metrics_printf(&b, "vbmemd_requests_total{route=\"%s\",status=\"%d\"} %lu\n", name,
                           status, m->req[r][s].count);
        }
    }
    metrics_printf(&b, "# HELP vbmemd_request_duration_seconds Request latency from the first "
                       "byte to the queued response, by route and status.\n"
                       "# TYPE vbmemd_request_duration_seconds histogram\n");
    for (r = 0; r <= m->nroutes; r++) {
        name = r < m->nroutes ? m->names[r] : "unmatched";
        for (s = 0; s < METRICS_NS; s++) {
            if (m->req[r][s].count == 0)
                continue;
            status = s < METRICS_NS - 1 ? metrics_statuses[s] : m->other_status[r];
            snprintf(labels, sizeof labels, "route=\"%s\",status=\"%d\",", name, status);
            metrics_hist_text(&b, "vbmemd_request_duration_seconds", labels, &m->req[r][s],
                              metrics_lat_bounds, METRICS_NB);
        }
    }
    metrics_printf(&b, "# HELP vbmemd_solve_duration_seconds Time inside the VB solver per write, "
                       "append, refit or resize.\n"
                       "# TYPE vbmemd_solve_duration_seconds histogram\n");
    metrics_hist_text(&b, "vbmemd_solve_duration_seconds", "", &m->solve_seconds,
                      metrics_lat_bounds, METRICS_NB);
    memset(&it, 0, sizeof it);
    memcpy(it.buckets, m->iter_buckets, sizeof m->iter_buckets);
    it.count = m->iter_count;
    it.sum = m->iter_sum;
    metrics_printf(&b, "# HELP vbmemd_vb_iterations VB iterations run per solve.\n"
                       "# TYPE vbmemd_vb_iterations histogram\n");
    {
        unsigned long cum = 0;
        int i;

        for (i = 0; i < METRICS_NI - 1; i++) {
            cum += it.buckets[i];
            metrics_printf(&b, "vbmemd_vb_iterations_bucket{le=\"%g\"} %lu\n",
                           metrics_iter_bounds[i], cum);
        }
        cum += it.buckets[METRICS_NI - 1];
        metrics_printf(&b, "vbmemd_vb_iterations_bucket{le=\"+Inf\"} %lu\n", cum);
        metrics_printf(&b, "vbmemd_vb_iterations_sum %.17g\nvbmemd_vb_iterations_count %lu\n",
                       it.sum, it.count);
    }
    metrics_printf(&b,
                   "# HELP vbmemd_rejected_total Requests refused with 503 because the job "
                   "queue was full.\n# TYPE vbmemd_rejected_total counter\n"
                   "vbmemd_rejected_total %lu\n",
                   m->rejected);
    metrics_printf(&b,
                   "# HELP vbmemd_store_corrupt_total Corrupt stored records met by requests "
                   "(answered as corrupt, or skipped by a listing).\n"
                   "# TYPE vbmemd_store_corrupt_total counter\n"
                   "vbmemd_store_corrupt_total %lu\n",
                   m->corrupt);
    metrics_printf(&b,
                   "# HELP vbmemd_answers_refused_total Answers refused with 503 because answers "
                   "not yet read by their clients held --max-answer-memory.\n"
                   "# TYPE vbmemd_answers_refused_total counter\n"
                   "vbmemd_answers_refused_total %lu\n",
                   m->answers_refused);
    pthread_mutex_unlock(&m->lock);
    metrics_printf(&b,
                   "# HELP vbmemd_answer_bytes Bytes of answers built and not yet read by their "
                   "clients.\n# TYPE vbmemd_answer_bytes gauge\nvbmemd_answer_bytes %llu\n"
                   "# HELP vbmemd_answer_bytes_limit Configured --max-answer-memory.\n"
                   "# TYPE vbmemd_answer_bytes_limit gauge\nvbmemd_answer_bytes_limit %zu\n",
                   g->answer_bytes, g->answer_bytes_limit);
    metrics_printf(&b,
                   "# HELP vbmemd_queue_depth Jobs waiting for a worker.\n"
                   "# TYPE vbmemd_queue_depth gauge\nvbmemd_queue_depth %d\n"
                   "# HELP vbmemd_queue_capacity Configured queue depth.\n"
                   "# TYPE vbmemd_queue_capacity gauge\nvbmemd_queue_capacity %d\n"
                   "# HELP vbmemd_jobs_in_flight Jobs running on workers.\n"
                   "# TYPE vbmemd_jobs_in_flight gauge\nvbmemd_jobs_in_flight %d\n"
                   "# HELP vbmemd_sessions Sessions held.\n"
                   "# TYPE vbmemd_sessions gauge\nvbmemd_sessions %ld\n"
                   "# HELP vbmemd_memory_bytes Heap bytes accounted to sessions.\n"
                   "# TYPE vbmemd_memory_bytes gauge\nvbmemd_memory_bytes %zu\n"
                   "# HELP vbmemd_scratch_bytes Bytes of fit buffers the workers keep between "
                   "jobs.\n# TYPE vbmemd_scratch_bytes gauge\nvbmemd_scratch_bytes %zu\n"
                   "# HELP vbmemd_api_keys API keys loaded.\n"
                   "# TYPE vbmemd_api_keys gauge\nvbmemd_api_keys %d\n",
                   g->queue_depth, g->queue_capacity, g->jobs_in_flight, g->sessions,
                   g->memory_bytes, g->scratch_bytes, g->api_keys);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    *len = b.len;
    return b.s;
}

void metrics_free(http_metrics *m)
{
    if (m == NULL)
        return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}
