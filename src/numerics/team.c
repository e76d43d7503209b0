/* team.c -- a team of threads that splits loops over items among its threads
 * (the calling thread included): helpers that spin, then sleep, between loops.
 *
 * A caller hands a team many loops, each a fraction of a millisecond. Waking a
 * sleeping helper for each (a futex wake, and on a virtual machine the wake of a
 * halted virtual CPU) costs as much as the loops, so an idle helper spins on the
 * job sequence number for up to TEAM_SPIN_NS before it sleeps on the condition
 * variable. And a helper may start late or get less of a CPU than the caller (on
 * a shared or virtual machine), so a loop is not split in equal shares: the
 * threads take chunks of it from a shared counter until none is left, and the
 * caller waits only for chunks that were taken, never for a helper to arrive. */
#define _GNU_SOURCE /* sched_getcpu and thread affinity (Linux), see team_new */
#include "team.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEAM_SPIN_NS  2000000L /* how long an idle helper spins before it sleeps */
#define TEAM_YIELD_NS 100000L  /* after this long, a spinning helper also yields its CPU */
#define TEAM_CHUNKS   8        /* default chunks per thread of a loop */

typedef struct {
    team_t *t;
    int i;
} team_arg;

/* The job fields are published like a sequence lock: the caller makes seq odd,
 * writes them, and makes seq even again; a helper copies them between two equal
 * even reads of seq. next holds the job (seq / 2, low 32 bits) in its high half
 * and the next item to take in its low half, so a helper holding an old job's
 * copy can take no item of a newer job. done counts the finished items of the
 * current job. busy is held by the thread running a loop on the team. */
struct vbm_team {
    int n; /* threads, the caller included */
    pthread_t th[TEAM_MAX_THREADS];
    team_arg args[TEAM_MAX_THREADS];
    int sync; /* mu and go were initialised */
#ifdef __linux__
    int widen; /* helpers return to the full CPU set once running (see team_new) */
    cpu_set_t all;
#endif
    pthread_mutex_t mu; /* guards sleepers and the sleeping helpers' wake-up */
    pthread_cond_t go;
    int sleepers;
    atomic_flag busy;
    _Atomic unsigned long seq;
    _Atomic(team_fn) fn;
    _Atomic(const void *) ctx;
    _Atomic long items, chunk;
    _Atomic int shares; /* 0: chunks from a counter; > 0: owned shares (team_for_shares) */
    _Atomic unsigned long long next;
    _Atomic long done;
    _Atomic int quit;
};

/* A short pause inside a spin loop. */
static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Take chunks of job `job` (fields fn, ctx, items, chunk) until none is left or
 * the team has moved on to a newer job. */
static void team_take(team_t *t, unsigned long job, team_fn fn, const void *ctx, long items,
                      long chunk, int worker)
{
    unsigned long long tag = (unsigned long long)(job & 0xffffffffUL) << 32;
    unsigned long long v = atomic_load_explicit(&t->next, memory_order_acquire);
    for (;;) {
        if ((v & 0xffffffff00000000ULL) != tag)
            return;
        long b = (long)(v & 0xffffffffULL);
        if (b >= items)
            return;
        long e = items - b < chunk ? items : b + chunk;
        if (!atomic_compare_exchange_weak_explicit(&t->next, &v, tag | (unsigned long long)e,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue; /* v now holds the current value */
        fn(ctx, b, e, worker);
        atomic_fetch_add_explicit(&t->done, e - b, memory_order_release);
        v = atomic_load_explicit(&t->next, memory_order_acquire);
    }
}

/* Take the shares of job `job` (share c: items [c chunk, (c + 1) chunk)), thread
 * `worker`'s own share first, then any share no thread has taken, until all are
 * taken or the team has moved on to a newer job. */
static void team_take_shares(team_t *t, unsigned long job, team_fn fn, const void *ctx, long items,
                             long chunk, int shares, int worker)
{
    unsigned long long tag = (unsigned long long)(job & 0xffffffffUL) << 32;
    for (int k = 0; k < shares; k++) {
        int c = (worker + k) % shares;
        unsigned long long bit = 1ULL << c,
                           v = atomic_load_explicit(&t->next, memory_order_acquire);
        for (;;) {
            if ((v & 0xffffffff00000000ULL) != tag)
                return;
            if (v & bit)
                break; /* taken */
            if (atomic_compare_exchange_weak_explicit(&t->next, &v, v | bit, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                long b = (long)c * chunk, e = b + chunk < items ? b + chunk : items;
                if (b < e)
                    fn(ctx, b, e, worker);
                atomic_fetch_add_explicit(&t->done, e > b ? e - b : 0, memory_order_release);
                break;
            }
        }
    }
}

/* Wait until seq is even and differs from seen, or the team quits: spin, then
 * sleep. Returns the seq seen last. */
static unsigned long team_wait(team_t *t, unsigned long seen)
{
    long t0 = 0;
    for (long spins = 0;; spins++) {
        unsigned long q = atomic_load_explicit(&t->seq, memory_order_acquire);
        if ((q != seen && !(q & 1)) || atomic_load_explicit(&t->quit, memory_order_acquire))
            return q;
        spin_pause();
        if ((spins & 255) == 255) {
            long now = now_ns();
            if (t0 == 0)
                t0 = now;
            else if (now - t0 > TEAM_SPIN_NS)
                break;
            else if (now - t0 > TEAM_YIELD_NS)
                sched_yield(); /* the caller may share this CPU */
        }
    }
    pthread_mutex_lock(&t->mu);
    t->sleepers++;
    while (atomic_load(&t->seq) == seen && !atomic_load(&t->quit))
        pthread_cond_wait(&t->go, &t->mu);
    t->sleepers--;
    pthread_mutex_unlock(&t->mu);
    return seen; /* the caller looks again (seq may be odd now) */
}

static void *team_main(void *arg)
{
    team_t *t = ((team_arg *)arg)->t;
    int i = ((team_arg *)arg)->i;
#ifdef __linux__
    if (t->widen)
        pthread_setaffinity_np(pthread_self(), sizeof t->all, &t->all);
#endif
    unsigned long seen = 0;
    for (;;) {
        unsigned long q = team_wait(t, seen);
        if (atomic_load_explicit(&t->quit, memory_order_acquire))
            return NULL;
        if (q == seen || (q & 1))
            continue;
        team_fn fn = atomic_load_explicit(&t->fn, memory_order_relaxed);
        const void *ctx = atomic_load_explicit(&t->ctx, memory_order_relaxed);
        long items = atomic_load_explicit(&t->items, memory_order_relaxed);
        long chunk = atomic_load_explicit(&t->chunk, memory_order_relaxed);
        int shares = atomic_load_explicit(&t->shares, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&t->seq, memory_order_relaxed) != q)
            continue; /* changed meanwhile: look again */
        seen = q;
        if (shares > 0)
            team_take_shares(t, q / 2, fn, ctx, items, chunk, shares, i);
        else
            team_take(t, q / 2, fn, ctx, items, chunk, i);
    }
}

/* On Linux a helper starts on any CPU of the caller's set but the one the caller
 * runs on now: left to itself the kernel was seen starting every helper on the
 * caller's CPU and moving it only milliseconds later. Once running, a helper
 * returns to the caller's full set, so that a long-lived team does not keep it
 * off one CPU for good. */
team_t *team_new(int threads)
{
    team_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n = 1;
    atomic_flag_clear(&t->busy);
    atomic_init(&t->seq, 0);
    atomic_init(&t->fn, NULL);
    atomic_init(&t->ctx, NULL);
    atomic_init(&t->items, 0);
    atomic_init(&t->chunk, 1);
    atomic_init(&t->shares, 0);
    atomic_init(&t->next, 0);
    atomic_init(&t->done, 0);
    atomic_init(&t->quit, 0);
    if (threads > TEAM_MAX_THREADS)
        threads = TEAM_MAX_THREADS;
    if (threads <= 1)
        return t;
    if (pthread_mutex_init(&t->mu, NULL) != 0)
        return t;
    if (pthread_cond_init(&t->go, NULL) != 0) {
        pthread_mutex_destroy(&t->mu);
        return t;
    }
    t->sync = 1;
    pthread_attr_t attr, *pa = NULL;
#ifdef __linux__
    cpu_set_t others;
    int cpu = sched_getcpu();
    if (cpu >= 0 && cpu < CPU_SETSIZE && sched_getaffinity(0, sizeof t->all, &t->all) == 0) {
        t->widen = 1;
        others = t->all;
        CPU_CLR(cpu, &others);
        if (CPU_COUNT(&others) > 0 && pthread_attr_init(&attr) == 0) {
            pa = &attr;
            if (pthread_attr_setaffinity_np(&attr, sizeof others, &others) != 0) {
                pthread_attr_destroy(&attr);
                pa = NULL;
            }
        }
    }
#endif
    for (int i = 1; i < threads; i++) {
        t->args[i] = (team_arg){t, i};
        if (pthread_create(&t->th[i], pa, team_main, &t->args[i]) != 0)
            break;
        t->n = i + 1;
    }
    if (pa)
        pthread_attr_destroy(pa);
    return t;
}

/* Wake the helpers that sleep (those that spin see the new job themselves). */
static void team_wake(team_t *t)
{
    pthread_mutex_lock(&t->mu);
    if (t->sleepers > 0)
        pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
}

void team_free(team_t *t)
{
    if (!t)
        return;
    if (t->n > 1) {
        atomic_store_explicit(&t->quit, 1, memory_order_release);
        team_wake(t);
        for (int i = 1; i < t->n; i++)
            pthread_join(t->th[i], NULL);
    }
    if (t->sync) {
        pthread_mutex_destroy(&t->mu);
        pthread_cond_destroy(&t->go);
    }
    free(t);
}

int team_size(const team_t *t)
{
    return t ? t->n : 1;
}

/* Publish a loop (shares 0: chunks of `chunk` items from the counter; shares >
 * 0: that many owned shares of `chunk` items), take part in it, and wait for
 * every item. The caller holds busy. */
static void team_run(team_t *t, long items, long chunk, int shares, team_fn fn, const void *ctx)
{
    unsigned long q = atomic_load_explicit(&t->seq, memory_order_relaxed) + 2; /* this job's seq */
    atomic_store_explicit(&t->seq, q - 1, memory_order_relaxed); /* odd: fields change */
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&t->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&t->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&t->items, items, memory_order_relaxed);
    atomic_store_explicit(&t->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&t->shares, shares, memory_order_relaxed);
    atomic_store_explicit(&t->done, 0, memory_order_relaxed);
    atomic_store_explicit(&t->next, (unsigned long long)((q / 2) & 0xffffffffUL) << 32,
                          memory_order_release);
    atomic_store_explicit(&t->seq, q, memory_order_release);
    team_wake(t);
    if (shares > 0)
        team_take_shares(t, q / 2, fn, ctx, items, chunk, shares, 0);
    else
        team_take(t, q / 2, fn, ctx, items, chunk, 0);
    for (long spins = 1; atomic_load_explicit(&t->done, memory_order_acquire) < items; spins++) {
        spin_pause();
        if (spins % 1024 == 0)
            sched_yield(); /* a helper may have lost its CPU */
    }
}

/* Whether a loop goes to the helpers; takes busy when it does. */
static int team_engage(team_t *t, long items, long work)
{
    return t && t->n > 1 && items >= 2 && work >= 16384 && items <= 0x7fffffffL
           && !atomic_flag_test_and_set_explicit(&t->busy, memory_order_acquire);
}

void team_for(team_t *t, long items, long chunk, long work, team_fn fn, const void *ctx)
{
    if (items <= 0)
        return;
    if (!team_engage(t, items, work)) {
        fn(ctx, 0, items, 0);
        return;
    }
    if (chunk <= 0)
        chunk = items / ((long)t->n * TEAM_CHUNKS);
    if (chunk < 1)
        chunk = 1;
    team_run(t, items, chunk, 0, fn, ctx);
    atomic_flag_clear_explicit(&t->busy, memory_order_release);
}

void team_for_shares(team_t *t, long items, long work, team_fn fn, const void *ctx)
{
    if (items <= 0)
        return;
    if (!team_engage(t, items, work)) {
        fn(ctx, 0, items, 0);
        return;
    }
    int shares = t->n < 32 ? t->n : 32;
    team_run(t, items, (items + shares - 1) / shares, shares, fn, ctx);
    atomic_flag_clear_explicit(&t->busy, memory_order_release);
}
