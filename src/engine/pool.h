/* pool.h -- owns the fixed pool of worker threads, their CPU slots and its bounded FIFO job
 * queue. */
#ifndef VBMEM_ENGINE_POOL_H
#define VBMEM_ENGINE_POOL_H

#include "engine/clock.h"
#include "vbmem/vbmem.h"

typedef struct eng_job eng_job;

/* A unit of work. The submitter owns the job (usually embedded in a larger
 * request record); the pool only links it into its queue and calls run(job) once
 * on a worker thread. run must not free the pool. */
struct eng_job {
    void (*run)(eng_job *job);
    eng_job *next;     /* queue link, owned by the pool while queued */
    double queued_at;  /* eng_now() when submitted, set by the pool */
    double started_at; /* eng_now() when a worker took it, set by the pool */
    /* Called on the worker instead of run when the job waited in the queue longer than the
     * pool's maximum wait (eng_pool_set_max_wait); NULL: such a job runs anyway. */
    void (*shed)(eng_job *job);
};

typedef struct eng_pool eng_pool;

/* Start `threads` worker threads (1..1024) sharing a queue of at most `depth`
 * waiting jobs (1..1000000). On success *out is owned by the caller (release
 * with eng_pool_free). Fails with VBM_EINVAL (sizes out of range) or VBM_ENOMEM
 * (allocation or thread creation failed; nothing is left running). */
vbm_status eng_pool_create(int threads, int depth, eng_pool **out, vbm_error *err);

/* Like eng_pool_create, with `waiters` (0..1024) more worker threads for jobs
 * that block on I/O: threads + waiters workers share `threads` CPU slots; a
 * worker runs a job only while holding a slot and gives it up between
 * eng_pool_block(pool, 1) and eng_pool_block(pool, 0), so that other jobs run
 * while it waits (e.g. several writes meet in one durable commit). Fails with
 * VBM_EINVAL (sizes out of range) or VBM_ENOMEM. */
vbm_status eng_pool_create_blocking(int threads, int waiters, int depth, eng_pool **out,
                                    vbm_error *err);

/* Called by a job around a wait that uses no CPU (begin 1 before, 0 after):
 * the calling worker gives its CPU slot up, then takes one back without
 * waiting for it (more than `threads` jobs may compute for a moment; no new job
 * starts until they are fewer: waiting could deadlock on requests that hold the
 * slots and wait for this one, e.g. on a session's write lock). A no-op from a thread that is not
 * one of pool's workers, or for a NULL
 * pool. Never fails. Signature fits eng_store_set_wait. */
void eng_pool_block(void *pool, int begin);

/* The buffer pool (vbm_scratch) the calling worker holds while it runs its job, for the fits the
 * job makes (vbm_write_opts.scratch), or NULL: when the caller is not one of pool's workers, for a
 * NULL pool, or when every one of the pool's `threads` scratches is held by another job (a worker
 * that waits on I/O keeps its own). Each scratch keeps the large arrays of the fits that used it
 * for the next (mixture and tree: a few K x T blocks per group), so a pool keeps at most
 * `threads` such sets between jobs; they are freed with the pool. Never fails. */
vbm_scratch *eng_pool_scratch(eng_pool *pool);

/* Bytes the pool's scratches kept after the last job that held each (eng_pool_scratch): the
 * memory they hold between jobs. Never fails. */
size_t eng_pool_scratch_bytes(eng_pool *pool);

/* Queue job for a worker. Returns VBM_OK, VBM_EBUSY when `depth` jobs are
 * already waiting (the job is not queued), or VBM_ESTOPPED after
 * eng_pool_drain began. Never blocks on the queue. */
vbm_status eng_pool_submit(eng_pool *pool, eng_job *job);

/* Set the longest a job may wait in the queue, in seconds: a worker that takes a job queued
 * longer ago calls its shed(job) instead of run(job) (a job without shed runs). 0 (the value of
 * a new pool) means no limit; a negative or non-finite value also means no limit. Never fails. */
void eng_pool_set_max_wait(eng_pool *pool, double seconds);

/* Jobs shed so far (eng_pool_set_max_wait). Never fails. */
unsigned long eng_pool_shed_count(eng_pool *pool);

/* Current number of waiting and running jobs, and the queue capacity (any
 * pointer may be NULL). Never fails. */
void eng_pool_stats(eng_pool *pool, int *queued, int *running, int *depth);

/* Stop accepting jobs, then wait until no job is queued or running or until
 * `seconds` elapse. Returns VBM_OK when the pool drained, VBM_EBUSY on timeout
 * (jobs are still running; the pool must then not be freed). */
vbm_status eng_pool_drain(eng_pool *pool, double seconds);

/* Join the workers and free the pool. Requires an empty queue (after a
 * successful drain, or before any submit); waits for running jobs. NULL is a
 * no-op. */
void eng_pool_free(eng_pool *pool);

#endif
