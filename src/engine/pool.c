/* pool.c -- owns the worker threads, their CPU slots (workers blocked on I/O give theirs up), the
 * bounded job queue and draining at shutdown. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "engine/pool.h"

struct eng_pool {
    pthread_mutex_t lock;
    pthread_cond_t work; /* signalled when a job is queued or on stop */
    pthread_cond_t idle; /* signalled when a job finishes */
    eng_job *head, *tail;
    int queued, running, depth;
    int accepting; /* 0 once draining began */
    int stop;      /* workers exit when set and the queue is empty */
    int nthreads;
    int slots_free;        /* CPU slots not held by a worker (< 0: over for a moment after
                           waits); a job starts only with one */
    pthread_key_t self;    /* set to the pool in its own workers (eng_pool_block) */
    pthread_key_t held;    /* the vbm_scratch the calling worker holds for its job, or NULL */
    vbm_scratch **scratch; /* [nscratch], one per CPU slot */
    size_t *kept;          /* [nscratch] bytes scratch[i] kept after the last job that held it */
    int *spare;            /* spare[0..nspare): indices of the scratches no job holds */
    int nspare, nscratch;
    pthread_t *threads;
    double max_wait;    /* seconds a job may wait in the queue; 0: no limit */
    unsigned long shed; /* jobs shed for waiting longer */
};

/* Take a CPU slot back after a wait, without waiting for one: the count may
 * go below zero for a moment (no new job starts until it is positive again).
 * Waiting here could deadlock: the slots may be held by requests that wait for
 * this worker (e.g. on the write lock of the session it is committing). Lock
 * held. */
static void pool_slot_take(eng_pool *p)
{
    p->slots_free--;
}

/* Give a CPU slot back: to an idle worker when a job is queued. Lock held. */
static void pool_slot_give(eng_pool *p)
{
    p->slots_free++;
    if (p->slots_free > 0 && p->head != NULL)
        pthread_cond_signal(&p->work);
}

static void *pool_worker(void *arg)
{
    eng_pool *p = arg;
    eng_job *job;
    int late, sc;

    pthread_setspecific(p->self, p);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        /* Wait for a job and a slot to run it (stopping: exit once the queue is empty). */
        while (p->stop ? p->head != NULL && p->slots_free <= 0
                       : p->head == NULL || p->slots_free <= 0)
            pthread_cond_wait(&p->work, &p->lock);
        if (p->head == NULL)
            break;
        p->slots_free--;
        job = p->head;
        p->head = job->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->queued--;
        p->running++;
        job->next = NULL;
        job->started_at = eng_now();
        sc = p->nspare > 0 ? p->spare[--p->nspare] : -1;
        late = p->max_wait > 0.0 && job->shed != NULL
               && job->started_at - job->queued_at > p->max_wait;
        if (late)
            p->shed++;
        pthread_mutex_unlock(&p->lock);
        pthread_setspecific(p->held, sc >= 0 ? p->scratch[sc] : NULL);
        if (late)
            job->shed(job);
        else
            job->run(job);
        pthread_setspecific(p->held, NULL);
        pthread_mutex_lock(&p->lock);
        if (sc >= 0) {
            p->kept[sc] = vbm_scratch_bytes(p->scratch[sc]);
            p->spare[p->nspare++] = sc;
        }
        p->running--;
        pool_slot_give(p);
        pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Free the scratches (none is held: no job runs). */
static void pool_free_scratch(eng_pool *p)
{
    int i;

    for (i = 0; i < p->nscratch; i++)
        vbm_scratch_free(p->scratch[i]);
    free(p->scratch);
    free(p->kept);
    free(p->spare);
}

/* Tell the first n workers to stop, join them and release the pool. */
static void pool_destroy(eng_pool *p, int n)
{
    int i;

    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->lock);
    for (i = 0; i < n; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->idle);
    pthread_mutex_destroy(&p->lock);
    pthread_key_delete(p->self);
    pthread_key_delete(p->held);
    pool_free_scratch(p);
    free(p->threads);
    free(p);
}

vbm_status eng_pool_create(int threads, int depth, eng_pool **out, vbm_error *err)
{
    return eng_pool_create_blocking(threads, 0, depth, out, err);
}

vbm_status eng_pool_create_blocking(int threads, int waiters, int depth, eng_pool **out,
                                    vbm_error *err)
{
    eng_pool *p;
    int i, total;

    *out = NULL;
    if (threads < 1 || threads > 1024)
        return vbm_fail(err, VBM_EINVAL, "threads", "%d is outside [1, 1024]", threads);
    if (waiters < 0 || waiters > 1024)
        return vbm_fail(err, VBM_EINVAL, "waiters", "%d is outside [0, 1024]", waiters);
    total = threads + waiters;
    if (depth < 1 || depth > 1000000)
        return vbm_fail(err, VBM_EINVAL, "queue_depth", "%d is outside [1, 1000000]", depth);
    p = calloc(1, sizeof *p);
    if (p == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    p->threads = calloc((size_t)total, sizeof *p->threads);
    p->scratch = calloc((size_t)threads, sizeof *p->scratch);
    p->kept = calloc((size_t)threads, sizeof *p->kept);
    p->spare = calloc((size_t)threads, sizeof *p->spare);
    for (i = 0; p->scratch != NULL && p->kept != NULL && p->spare != NULL && i < threads; i++) {
        p->scratch[i] = vbm_scratch_new();
        if (p->scratch[i] == NULL)
            break;
        p->spare[i] = i;
        p->nscratch = p->nspare = i + 1;
    }
    if (p->threads == NULL || p->nscratch < threads || pthread_key_create(&p->self, NULL) != 0) {
        pool_free_scratch(p);
        free(p->threads);
        free(p);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    if (pthread_key_create(&p->held, NULL) != 0) {
        pthread_key_delete(p->self);
        pool_free_scratch(p);
        free(p->threads);
        free(p);
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->idle, NULL);
    p->depth = depth;
    p->accepting = 1;
    p->nthreads = total;
    p->slots_free = threads;
    for (i = 0; i < total; i++) {
        if (pthread_create(&p->threads[i], NULL, pool_worker, p) != 0) {
            pool_destroy(p, i);
            return vbm_fail(err, VBM_ENOMEM, NULL, "cannot start worker thread %d", i);
        }
    }
    *out = p;
    return VBM_OK;
}

vbm_status eng_pool_submit(eng_pool *p, eng_job *job)
{
    vbm_status st = VBM_OK;

    pthread_mutex_lock(&p->lock);
    if (!p->accepting) {
        st = VBM_ESTOPPED;
    } else if (p->queued >= p->depth) {
        st = VBM_EBUSY;
    } else {
        job->next = NULL;
        job->queued_at = eng_now();
        job->started_at = 0.0;
        if (p->tail != NULL)
            p->tail->next = job;
        else
            p->head = job;
        p->tail = job;
        p->queued++;
        pthread_cond_signal(&p->work);
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void eng_pool_set_max_wait(eng_pool *p, double seconds)
{
    pthread_mutex_lock(&p->lock);
    p->max_wait = seconds > 0.0 && isfinite(seconds) ? seconds : 0.0;
    pthread_mutex_unlock(&p->lock);
}

unsigned long eng_pool_shed_count(eng_pool *p)
{
    unsigned long n;

    pthread_mutex_lock(&p->lock);
    n = p->shed;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void eng_pool_stats(eng_pool *p, int *queued, int *running, int *depth)
{
    pthread_mutex_lock(&p->lock);
    if (queued != NULL)
        *queued = p->queued;
    if (running != NULL)
        *running = p->running;
    if (depth != NULL)
        *depth = p->depth;
    pthread_mutex_unlock(&p->lock);
}

vbm_status eng_pool_drain(eng_pool *p, double seconds)
{
    struct timespec deadline;
    double whole;
    vbm_status st = VBM_OK;

    clock_gettime(CLOCK_REALTIME, &deadline);
    whole = (double)(long)seconds;
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&p->lock);
    p->accepting = 0;
    while (p->queued > 0 || p->running > 0) {
        if (pthread_cond_timedwait(&p->idle, &p->lock, &deadline) == ETIMEDOUT) {
            if (p->queued > 0 || p->running > 0)
                st = VBM_EBUSY;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

void eng_pool_free(eng_pool *p)
{
    if (p == NULL)
        return;
    pool_destroy(p, p->nthreads);
}

vbm_scratch *eng_pool_scratch(eng_pool *p)
{
    return p != NULL ? pthread_getspecific(p->held) : NULL;
}

size_t eng_pool_scratch_bytes(eng_pool *p)
{
    size_t n = 0;
    int i;

    pthread_mutex_lock(&p->lock);
    for (i = 0; i < p->nscratch; i++)
        n += p->kept[i];
    pthread_mutex_unlock(&p->lock);
    return n;
}

void eng_pool_block(void *pool, int begin)
{
    eng_pool *p = pool;

    if (p == NULL || pthread_getspecific(p->self) != p)
        return; /* not one of this pool's workers: it holds no slot */
    pthread_mutex_lock(&p->lock);
    if (begin)
        pool_slot_give(p);
    else
        pool_slot_take(p);
    pthread_mutex_unlock(&p->lock);
}
