/* team.h -- a team of threads that splits loops over items among its threads
 * (the calling thread is one of them). Used by the networks for every layer and
 * by the memory models to split one VB fit over its clusters. */
#ifndef VBMEM_TEAM_H
#define VBMEM_TEAM_H

#define TEAM_MAX_THREADS 64 /* threads of one team, the caller included */

typedef struct vbm_team team_t; /* public as vbm_team (vbmem.h) */

/* fn(ctx, begin, end, worker) runs items [begin, end) of a loop on thread
 * `worker` (0 is the caller, 1 .. team_size - 1 the helpers). */
typedef void (*team_fn)(const void *ctx, long begin, long end, int worker);

/* Start a team of up to `threads` threads, the caller included: threads - 1
 * helpers (at most TEAM_MAX_THREADS - 1). Starting fewer helpers than asked
 * (thread creation failed) is not an error: the loops then run on fewer
 * threads. Returns NULL only when the team's memory cannot be allocated; a NULL
 * team is valid everywhere below and runs every loop on the caller. An idle
 * helper spins for up to 2 ms after a loop before it sleeps. */
team_t *team_new(int threads);

/* Stop and join the helpers and free the team. NULL is a no-op. The team must
 * not be running a loop. */
void team_free(team_t *t);

/* Threads of the team, the caller included (1 for NULL). */
int team_size(const team_t *t);

/* Run fn over [0, items) and return when every item has run. The items are
 * handed out in chunks of `chunk` (0: about 8 chunks per thread) to whichever
 * thread is free, so fn must not depend on which thread runs an item, and
 * items must write disjoint outputs. Runs everything on the caller when the
 * team is NULL or has one thread, when items < 2, when work (the caller's
 * estimate of the values the loop touches) is under 16,384, or when the team
 * is already running a loop (a loop nested in fn, or a second thread using
 * the same team): so a team is safe to share, and only one loop at a time
 * gets its helpers. A loop run on the calling thread alone gets worker 0, also
 * when a helper called it (nested), so per-thread state indexed by worker must
 * not be shared between a loop and the loops nested in it. Never fails. */
void team_for(team_t *t, long items, long chunk, long work, team_fn fn, const void *ctx);

/* The same with the items in team_size(t) contiguous shares (at most 32), share
 * i going to thread i (0 is the caller) unless that thread is late, when
 * another takes it. Loops that touch the same data per item from one loop to
 * the next keep it in one core's cache this way. Never fails. */
void team_for_shares(team_t *t, long items, long work, team_fn fn, const void *ctx);

#endif
