/* test_units.c -- Check tests of vbmemd's building blocks: SHA-256, constant-time compare,
 * base64, code decoding, the job pool (bounded queue, drain), the session store (owners,
 * pagination, limits, TTL), session versions / If-Match, the connection table's eviction, the
 * API key file (scopes, owners, quotas, the request-rate bucket, reload), and the response
 * funnel (a handler's status and vbm_error turned into the answer). */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine/pool.h"
#include "engine/session_impl.h"
#include "engine/store.h"
#include "http/auth.h"
#include "http/codec.h"
#include "http/conns.h"
#include "http/keyhash.h"
#include "http/respond.h"
#include "http/urlpath.h"

static void hex(const unsigned char *d, size_t n, char *out)
{
    size_t i;

    for (i = 0; i < n; i++)
        sprintf(out + 2 * i, "%02x", d[i]);
}

START_TEST(test_keyhash_vectors)
{
    unsigned char d[32];
    char h[65];
    char *million = malloc(1000000);

    keyhash_digest("", 0, d);
    hex(d, 32, h);
    ck_assert_str_eq(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    keyhash_digest("abc", 3, d);
    hex(d, 32, h);
    ck_assert_str_eq(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    keyhash_digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56, d);
    hex(d, 32, h);
    ck_assert_str_eq(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    memset(million, 'a', 1000000);
    keyhash_digest(million, 1000000, d);
    hex(d, 32, h);
    ck_assert_str_eq(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(million);
    ck_assert_int_eq(
        keyhash_equal_ct((const unsigned char *)"abcd", (const unsigned char *)"abcd", 4), 1);
    ck_assert_int_eq(
        keyhash_equal_ct((const unsigned char *)"abcd", (const unsigned char *)"abce", 4), 0);
}
END_TEST

START_TEST(test_base64)
{
    const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *enc[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    unsigned char *out;
    size_t len;
    char *e;
    int i;

    for (i = 0; i < 7; i++) {
        e = wire_b64_encode((const unsigned char *)plain[i], strlen(plain[i]));
        ck_assert_str_eq(e, enc[i]);
        free(e);
        ck_assert_int_eq(wire_b64_decode(enc[i], strlen(enc[i]), &out, &len), 0);
        ck_assert_uint_eq(len, strlen(plain[i]));
        ck_assert(memcmp(out, plain[i], len) == 0);
        free(out);
    }
    ck_assert_int_eq(wire_b64_decode("Zm9", 3, &out, &len), -1);
    ck_assert_int_eq(wire_b64_decode("Zm9*", 4, &out, &len), -1);
    ck_assert_int_eq(wire_b64_decode("Z===", 4, &out, &len), -1);
}
END_TEST

/* A body with long base64 strings parses to exactly what jansson alone gives. */
static void parse_both(const char *body, int expect_ok)
{
    json_error_t e1, e2;
    json_t *a = NULL, *b = json_loadb(body, strlen(body), JSON_REJECT_DUPLICATES, &e2);
    int rc = wire_parse(body, strlen(body), JSON_REJECT_DUPLICATES, &a, &e1);

    ck_assert_int_eq(rc == 0, expect_ok);
    ck_assert_int_eq(b != NULL, expect_ok);
    if (expect_ok) {
        ck_assert_msg(json_equal(a, b), "fast parse differs from jansson");
    } else {
        ck_assert_ptr_null(a);
        ck_assert_int_eq(e1.line, e2.line);
        ck_assert_int_eq(e1.column, e2.column);
        ck_assert_str_eq(e1.text, e2.text);
    }
    json_decref(a);
    json_decref(b);
}

START_TEST(test_fast_body_parse)
{
    size_t n = 6000;
    char *b64 = malloc(n + 1), *body = malloc(4 * n + 512);
    size_t i;

    for (i = 0; i < n; i++)
        b64[i] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(i * 7919) % 64];
    b64[n] = '\0';
    /* values in objects and arrays, a long key (kept), a short string, numbers */
    snprintf(
        body, 4 * n + 512,
        "{\"codes\": {\"dtype\": \"float32\", \"shape\": [3, 2], \"data\": \"%s\"}, "
        "\"observations\": [\"%s\", \"%s\"], \"%s\": 1, \"mode\": \"append\", \"x\": [1.5, -2]}",
        b64, b64, b64, b64);
    parse_both(body, 1);
    /* a long string with an escape is parsed by jansson as usual */
    snprintf(body, 4 * n + 512, "{\"a\": \"%.3000s\\n%s\", \"b\": \"%s\"}", b64, b64 + 3000, b64);
    parse_both(body, 1);
    /* a client string that looks like the marker disables the fast path */
    snprintf(body, 4 * n + 512, "{\"a\": \"\\u0001#0\", \"b\": \"%s\"}", b64);
    parse_both(body, 1);
    /* malformed bodies: same error, same position */
    snprintf(body, 4 * n + 512, "{\"a\": \"%s\" \"b\": 1}", b64);
    parse_both(body, 0);
    snprintf(body, 4 * n + 512, "{\"a\": \"%s\", \"b\": [1, 2,]}", b64);
    parse_both(body, 0);
    snprintf(body, 4 * n + 512, "{\"a\": \"%s\", \"a\": \"%s\"}", b64, b64); /* duplicate keys */
    parse_both(body, 0);
    snprintf(body, 4 * n + 512, "{\"a\": \"%s", b64); /* unterminated */
    parse_both(body, 0);
    free(b64);
    free(body);
}
END_TEST

START_TEST(test_codec_codes)
{
    /* [[1, -2], [0.5, 3]] as float32 little-endian */
    const char *doc = "{\"mu\": {\"dtype\": \"float32\", \"shape\": [2, 2], "
                      "\"data\": \"AACAPwAAAMAAAAA/AABAQA==\"}, \"sigma2\": 0.25}";
    json_error_t jerr;
    json_t *v = json_loads(doc, 0, &jerr), *w;
    wire_codes c;
    vbm_error err;

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(wire_read_codes(v, "codes", 100, 100, &c, &err), VBM_OK);
    ck_assert_int_eq(c.T, 2);
    ck_assert_int_eq(c.C, 2);
    ck_assert(c.mu[0] == 1.0 && c.mu[1] == -2.0 && c.mu[2] == 0.5 && c.mu[3] == 3.0);
    ck_assert(c.s2[3] == 0.25);
    wire_codes_free(&c);
    ck_assert_int_eq(wire_read_codes(v, "codes", 1, 100, &c, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.mu.shape");
    json_decref(v);
    w = json_loads("{\"mu\": [[1, 2], [3]]}", 0, &jerr);
    ck_assert_int_eq(wire_read_codes(w, "q", 100, 100, &c, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "q.mu[1]");
    json_decref(w);
    w = json_loads("{\"mu\": [[1, 2]], \"sigma2\": [[1, -1]]}", 0, &jerr);
    ck_assert_int_eq(wire_read_codes(w, "codes", 100, 100, &c, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.sigma2[0][1]");
    json_decref(w);
    w = json_loads("{\"mu\": [[1, 2]], \"extra\": 1}", 0, &jerr);
    ck_assert_int_eq(wire_read_codes(w, "codes", 100, 100, &c, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.extra");
    json_decref(w);
}
END_TEST

/* A job that blocks until released. */
typedef struct {
    eng_job job;
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    int *release;
    int *done;
} block_job;

static void block_run(eng_job *j)
{
    block_job *b = (block_job *)j;

    pthread_mutex_lock(b->lock);
    while (!*b->release)
        pthread_cond_wait(b->cond, b->lock);
    (*b->done)++;
    pthread_mutex_unlock(b->lock);
}

START_TEST(test_pool_bounded_and_drain)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    int release = 0, done = 0, i, queued, running, depth;
    block_job jobs[4];
    struct timespec ts = {0, 2000000L};
    eng_pool *pool;
    vbm_error err;

    ck_assert_int_eq(eng_pool_create(0, 1, &pool, &err), VBM_EINVAL);
    ck_assert_int_eq(eng_pool_create(1, 2, &pool, &err), VBM_OK);
    for (i = 0; i < 4; i++) {
        jobs[i].job.run = block_run;
        jobs[i].lock = &lock;
        jobs[i].cond = &cond;
        jobs[i].release = &release;
        jobs[i].done = &done;
    }
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[0].job), VBM_OK);
    do { /* wait until the worker took job 0 */
        nanosleep(&ts, NULL);
        eng_pool_stats(pool, &queued, &running, &depth);
    } while (running == 0);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[1].job), VBM_OK);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[2].job), VBM_OK);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[3].job), VBM_EBUSY);
    eng_pool_stats(pool, &queued, &running, &depth);
    ck_assert_int_eq(queued, 2);
    ck_assert_int_eq(depth, 2);
    ck_assert_int_eq(eng_pool_drain(pool, 0.05), VBM_EBUSY); /* still blocked */
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[3].job), VBM_ESTOPPED);
    pthread_mutex_lock(&lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    ck_assert_int_eq(eng_pool_drain(pool, 10.0), VBM_OK);
    ck_assert_int_eq(done, 3);
    eng_pool_free(pool);
}
END_TEST

/* A job that records the scratch its worker holds, may give its CPU slot up (as a job waiting
 * on I/O does), then blocks until released. */
typedef struct {
    block_job b;
    eng_pool *pool;
    int give_slot;
    int started; /* guarded by *b.lock */
    vbm_scratch *scratch;
} scratch_job;

static void scratch_run(eng_job *j)
{
    scratch_job *s = (scratch_job *)j;

    s->scratch = eng_pool_scratch(s->pool);
    if (s->give_slot)
        eng_pool_block(s->pool, 1);
    pthread_mutex_lock(s->b.lock);
    s->started = 1;
    pthread_cond_broadcast(s->b.cond);
    pthread_mutex_unlock(s->b.lock);
    block_run(j);
    pthread_mutex_lock(s->b.lock); /* done changed */
    pthread_cond_broadcast(s->b.cond);
    pthread_mutex_unlock(s->b.lock);
    if (s->give_slot)
        eng_pool_block(s->pool, 0);
}

/* Every running job of a pool with `threads` slots holds its own scratch, one per slot; a job
 * beyond them (a slot given up by a job waiting on I/O) and a thread outside the pool get none;
 * a scratch is free again for the next job. */
START_TEST(test_pool_scratch_per_slot)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    int release = 0, done = 0, i;
    scratch_job jobs[4];
    eng_pool *pool;
    vbm_error err;

    ck_assert_ptr_null(eng_pool_scratch(NULL));
    ck_assert_int_eq(eng_pool_create_blocking(2, 1, 8, &pool, &err), VBM_OK);
    ck_assert_ptr_null(eng_pool_scratch(pool)); /* not a worker */
    memset(jobs, 0, sizeof jobs);
    for (i = 0; i < 4; i++) {
        jobs[i].b.job.run = scratch_run;
        jobs[i].b.lock = &lock;
        jobs[i].b.cond = &cond;
        jobs[i].b.release = &release;
        jobs[i].b.done = &done;
        jobs[i].pool = pool;
    }
    jobs[0].give_slot = 1;
    for (i = 0; i < 3; i++)
        ck_assert_int_eq(eng_pool_submit(pool, &jobs[i].b.job), VBM_OK);
    pthread_mutex_lock(&lock); /* the three run at once: job 0 gave its slot up */
    while (!(jobs[0].started && jobs[1].started && jobs[2].started))
        pthread_cond_wait(&cond, &lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    ck_assert_ptr_nonnull(jobs[0].scratch);
    ck_assert_ptr_nonnull(jobs[1].scratch);
    ck_assert_ptr_ne(jobs[0].scratch, jobs[1].scratch);
    ck_assert_ptr_null(jobs[2].scratch); /* both scratches held */
    ck_assert_int_eq(eng_pool_drain(pool, 10.0), VBM_OK);
    ck_assert_int_eq(done, 3);
    eng_pool_free(pool);

    /* one slot: jobs one after another get the same scratch back; no fit ran, nothing kept */
    ck_assert_int_eq(eng_pool_create(1, 8, &pool, &err), VBM_OK);
    jobs[2].pool = jobs[3].pool = pool;
    jobs[2].scratch = NULL;
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[2].b.job), VBM_OK);
    pthread_mutex_lock(&lock);
    while (done < 4)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[3].b.job), VBM_OK);
    ck_assert_int_eq(eng_pool_drain(pool, 10.0), VBM_OK);
    ck_assert_ptr_nonnull(jobs[2].scratch);
    ck_assert_ptr_eq(jobs[2].scratch, jobs[3].scratch);
    ck_assert_uint_eq(eng_pool_scratch_bytes(pool), 0);
    eng_pool_free(pool);
}
END_TEST

typedef struct {
    eng_job job;
    int ran, shed;
} count_job;

static void count_run(eng_job *j)
{
    ((count_job *)j)->ran++;
}

static void count_shed(eng_job *j)
{
    ((count_job *)j)->shed++;
}

/* With a maximum wait, a job that waited longer is shed (shed called, run not); one without shed
 * runs anyway; with no limit (0) every job runs. */
START_TEST(test_pool_sheds_jobs_past_max_wait)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    int release = 0, done = 0, queued, running, i;
    block_job blocker;
    count_job jobs[3];
    struct timespec ts = {0, 2000000L}, wait = {0, 60000000L};
    eng_pool *pool;
    vbm_error err;

    memset(jobs, 0, sizeof jobs);
    memset(&blocker, 0, sizeof blocker);
    for (i = 0; i < 3; i++) {
        jobs[i].job.run = count_run;
        jobs[i].job.shed = i < 2 ? count_shed : NULL;
    }
    blocker.job.run = block_run;
    blocker.lock = &lock;
    blocker.cond = &cond;
    blocker.release = &release;
    blocker.done = &done;
    ck_assert_int_eq(eng_pool_create(1, 8, &pool, &err), VBM_OK);
    eng_pool_set_max_wait(pool, 0.02);
    ck_assert_int_eq(eng_pool_submit(pool, &blocker.job), VBM_OK);
    do {
        nanosleep(&ts, NULL);
        eng_pool_stats(pool, &queued, &running, NULL);
    } while (running == 0);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[0].job), VBM_OK);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[2].job), VBM_OK);
    nanosleep(&wait, NULL); /* both wait 60 ms > 20 ms behind the blocked worker */
    pthread_mutex_lock(&lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    ck_assert_int_eq(eng_pool_drain(pool, 10.0), VBM_OK);
    ck_assert_int_eq(jobs[0].shed, 1);
    ck_assert_int_eq(jobs[0].ran, 0);
    ck_assert_int_eq(jobs[2].ran, 1); /* no shed callback: runs */
    ck_assert_uint_eq(eng_pool_shed_count(pool), 1);
    eng_pool_free(pool);
    /* no limit: a job that waited runs */
    release = 0;
    ck_assert_int_eq(eng_pool_create(1, 8, &pool, &err), VBM_OK);
    eng_pool_set_max_wait(pool, 0.0);
    ck_assert_int_eq(eng_pool_submit(pool, &blocker.job), VBM_OK);
    do {
        nanosleep(&ts, NULL);
        eng_pool_stats(pool, &queued, &running, NULL);
    } while (running == 0);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[1].job), VBM_OK);
    nanosleep(&wait, NULL);
    pthread_mutex_lock(&lock);
    release = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    ck_assert_int_eq(eng_pool_drain(pool, 10.0), VBM_OK);
    ck_assert_int_eq(jobs[1].ran, 1);
    ck_assert_int_eq(jobs[1].shed, 0);
    ck_assert_uint_eq(eng_pool_shed_count(pool), 0);
    eng_pool_free(pool);
}
END_TEST

/* A job for the CPU-slot tests: counts the jobs running at once (max in
 * *peak); with `waits` set it gives its slot up (eng_pool_block) and waits,
 * slot-less, until *arrived reaches want (other jobs started meanwhile). */
typedef struct {
    eng_job job;
    eng_pool *pool;
    pthread_mutex_t *lock;
    pthread_cond_t *cond;
    int *running, *peak, *arrived, *done;
    int waits, want, saw; /* saw: *arrived reached want while this job waited */
    int patience_s;       /* how long it waits */
} slot_job;

static void slot_run(eng_job *j)
{
    slot_job *b = (slot_job *)j;
    struct timespec ts = {0, 20000000L}, deadline;

    pthread_mutex_lock(b->lock);
    (*b->arrived)++;
    (*b->running)++;
    if (*b->running > *b->peak)
        *b->peak = *b->running;
    pthread_cond_broadcast(b->cond);
    pthread_mutex_unlock(b->lock);
    if (b->waits) {
        pthread_mutex_lock(b->lock);
        (*b->running)--; /* not computing while it waits */
        pthread_mutex_unlock(b->lock);
        eng_pool_block(b->pool, 1);
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += b->patience_s;
        pthread_mutex_lock(b->lock);
        while (*b->arrived < b->want
               && pthread_cond_timedwait(b->cond, b->lock, &deadline) != ETIMEDOUT) {
        }
        b->saw = *b->arrived >= b->want;
        pthread_mutex_unlock(b->lock);
        eng_pool_block(b->pool, 0);
        pthread_mutex_lock(b->lock);
        (*b->running)++;
        if (*b->running > *b->peak)
            *b->peak = *b->running;
        pthread_mutex_unlock(b->lock);
    }
    nanosleep(&ts, NULL); /* "compute": overlapping jobs would raise *peak */
    pthread_mutex_lock(b->lock);
    (*b->running)--;
    (*b->done)++;
    pthread_mutex_unlock(b->lock);
}

START_TEST(test_pool_slots_and_block)
{
    pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    int running = 0, peak = 0, arrived = 0, done = 0, i;
    slot_job jobs[4];
    eng_pool *pool;
    vbm_error err;

    ck_assert_int_eq(eng_pool_create_blocking(1, -1, 4, &pool, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "waiters");
    ck_assert_int_eq(eng_pool_create_blocking(1, 1025, 4, &pool, &err), VBM_EINVAL);
    /* One CPU slot, three more workers: jobs that never block run one at a time. */
    ck_assert_int_eq(eng_pool_create_blocking(1, 3, 8, &pool, &err), VBM_OK);
    eng_pool_block(pool, 1); /* not a worker: no-op */
    eng_pool_block(pool, 0);
    eng_pool_block(NULL, 1);
    memset(jobs, 0, sizeof jobs);
    for (i = 0; i < 4; i++) {
        jobs[i].job.run = slot_run;
        jobs[i].pool = pool;
        jobs[i].lock = &lock;
        jobs[i].cond = &cond;
        jobs[i].running = &running;
        jobs[i].peak = &peak;
        jobs[i].arrived = &arrived;
        jobs[i].done = &done;
    }
    for (i = 0; i < 4; i++)
        ck_assert_int_eq(eng_pool_submit(pool, &jobs[i].job), VBM_OK);
    ck_assert_int_eq(eng_pool_drain(pool, 10.0), VBM_OK);
    ck_assert_int_eq(done, 4);
    ck_assert_int_eq(peak, 1);
    eng_pool_free(pool);

    /* A job that gives its slot up lets the three others run while it waits
     * (and takes its slot back without waiting). */
    running = peak = arrived = done = 0;
    ck_assert_int_eq(eng_pool_create_blocking(1, 3, 8, &pool, &err), VBM_OK);
    for (i = 0; i < 4; i++)
        jobs[i].pool = pool;
    jobs[0].waits = 1;
    jobs[0].want = 4;
    jobs[0].patience_s = 20;
    for (i = 0; i < 4; i++)
        ck_assert_int_eq(eng_pool_submit(pool, &jobs[i].job), VBM_OK);
    ck_assert_int_eq(eng_pool_drain(pool, 30.0), VBM_OK);
    ck_assert_int_eq(done, 4);
    ck_assert_int_eq(jobs[0].saw, 1);
    ck_assert_int_le(peak, 2); /* back from its wait, job 0 may overlap the last job */
    eng_pool_free(pool);

    /* Without waiters (eng_pool_create) a blocked job keeps the others out:
     * its wait times out. */
    running = peak = arrived = done = 0;
    ck_assert_int_eq(eng_pool_create(1, 8, &pool, &err), VBM_OK);
    for (i = 0; i < 2; i++)
        jobs[i].pool = pool;
    jobs[0].want = 2;
    jobs[0].saw = 0;
    jobs[0].patience_s = 1;
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[0].job), VBM_OK);
    ck_assert_int_eq(eng_pool_submit(pool, &jobs[1].job), VBM_OK);
    ck_assert_int_eq(eng_pool_drain(pool, 30.0), VBM_OK);
    ck_assert_int_eq(done, 2);
    ck_assert_int_eq(jobs[0].saw, 0);
    eng_pool_free(pool);
}
END_TEST

static eng_session *new_session(const unsigned char *owner, long ttl)
{
    eng_solver sv = {10, 0.0, VBM_INIT_AUTO};
    vbm_config cfg;
    eng_session *s;
    vbm_error err;

    vbm_config_default(VBM_GAUSSIAN, 4, &cfg);
    cfg.rows = 2;
    ck_assert_int_eq(eng_session_create(&cfg, &sv, ttl, owner, &s, &err), VBM_OK);
    return s;
}

START_TEST(test_store_owners_pages_limits)
{
    unsigned char a[ENG_OWNER_LEN] = {1}, b[ENG_OWNER_LEN] = {2};
    eng_store_limits lim = {5, 0};
    eng_session *s[6], *got, **page;
    char cursor[ENG_ID_LEN + 1] = "";
    eng_store *st;
    vbm_error err;
    int i, n, more, total = 0;
    long count;

    ck_assert_int_eq(eng_store_memory_create(&lim, &st, &err), VBM_OK);
    for (i = 0; i < 6; i++) {
        s[i] = new_session(i < 4 ? a : b, 0);
        ck_assert_uint_eq(strlen(eng_session_id(s[i])), ENG_ID_LEN);
        ck_assert_int_eq(eng_store_insert(st, s[i], 0, &err), i < 5 ? VBM_OK : VBM_ELIMIT);
    }
    got = eng_store_lookup(st, eng_session_id(s[0]), a);
    ck_assert_ptr_eq(got, s[0]);
    eng_session_unref(got);
    ck_assert_ptr_null(eng_store_lookup(st, eng_session_id(s[0]), b));
    ck_assert_ptr_null(eng_store_lookup(st, eng_session_id(s[0]), NULL));
    ck_assert_int_eq(eng_store_remove(st, eng_session_id(s[0]), b, &err), VBM_ENOTFOUND);
    do {
        ck_assert_int_eq(eng_store_list(st, a, cursor, 3, &page, &n, &more, &err), VBM_OK);
        for (i = 0; i < n; i++) {
            ck_assert(memcmp(page[i]->owner, a, ENG_OWNER_LEN) == 0);
            ck_assert(strcmp(eng_session_id(page[i]), cursor) > 0);
            strcpy(cursor, eng_session_id(page[i]));
            eng_session_unref(page[i]);
        }
        total += n;
        free(page);
    } while (more);
    ck_assert_int_eq(total, 4);
    ck_assert_int_eq(eng_store_remove(st, eng_session_id(s[0]), a, &err), VBM_OK);
    eng_store_stats(st, &count, NULL);
    ck_assert_int_eq(count, 4);
    for (i = 0; i < 6; i++)
        eng_session_unref(s[i]);
    eng_store_free(st);
}
END_TEST

START_TEST(test_store_ttl_and_bytes)
{
    eng_store_limits lim = {0, 0};
    eng_session *s1 = new_session(NULL, 1), *s2 = new_session(NULL, 0);
    eng_store *st;
    vbm_error err;
    vbm_config cfg;
    vbm_memory *mem = NULL;
    eng_fit_opts o;
    eng_fit_out out;
    uint64_t version = 0;
    size_t bytes;
    long count;

    lim.max_bytes = eng_session_bytes(s1) + eng_session_bytes(s2);
    ck_assert_int_eq(eng_store_memory_create(&lim, &st, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, s1, 0, &err), VBM_OK);
    ck_assert_int_eq(eng_store_insert(st, s2, 1, &err), VBM_ELIMIT);
    ck_assert_int_eq(eng_store_insert(st, s2, 0, &err), VBM_OK);
    eng_store_stats(st, &count, &bytes);
    ck_assert_uint_eq(bytes, lim.max_bytes);
    ck_assert_int_eq(eng_store_reserve(st, 0, 1, &err), VBM_ELIMIT);
    ck_assert_int_eq(eng_store_reserve(st, 2, 1, &err), VBM_OK); /* a shrink passes */
    /* every check that grows the total goes through the store's limits */
    eng_session_config(s1, &cfg);
    ck_assert_int_eq(eng_store_admit(st, &cfg, &err), VBM_ELIMIT);
    ck_assert_int_eq(err.status, VBM_ELIMIT);
    memset(&o, 0, sizeof o); /* every member, the test hook too, unset */
    o.iterations = -1;
    o.tolerance = -1.0;
    o.init = -1;
    o.seed = 1;
    o.want_addresses = 0;
    o.max_seconds = 0.0;
    o.if_match = -1;
    ck_assert_int_eq(eng_store_resize(st, s1, 3, 0, &o, &out, &err), VBM_ELIMIT);
    ck_assert_int_eq(eng_session_version(s1), 1);
    cfg.rows = 3;
    ck_assert_int_eq(vbm_memory_create(&cfg, NULL, NULL, &mem, &err), VBM_OK);
    ck_assert_int_eq(eng_store_replace(st, s1, mem, -1, &version, &err), VBM_ELIMIT);
    vbm_memory_free(mem); /* not taken on failure */
    ck_assert_int_eq(eng_session_version(s1), 1);
    ck_assert_int_eq(eng_store_expire(st, atomic_load(&s1->last_used_ms) + 500), 0);
    ck_assert_int_eq(eng_store_expire(st, atomic_load(&s1->last_used_ms) + 1500), 1);
    eng_store_stats(st, &count, NULL);
    ck_assert_int_eq(count, 1);
    eng_session_unref(s1);
    eng_session_unref(s2);
    eng_store_free(st);
}
END_TEST

START_TEST(test_session_versions)
{
    eng_session *s = new_session(NULL, 0);
    double mu[6 * 4];
    vbm_codes codes = {6, 4, mu, NULL};
    eng_fit_opts o;
    eng_fit_out out;
    vbm_error err;
    eng_info info;
    int i;

    for (i = 0; i < 24; i++)
        mu[i] = sin(i * 0.7);
    memset(&o, 0, sizeof o);
    o.iterations = o.init = -1;
    o.tolerance = -1.0;
    o.if_match = 1;
    ck_assert_int_eq(eng_session_write(s, ENG_REPLACE, &codes, &o, &out, &err), VBM_OK);
    ck_assert_int_eq(out.version, 2);
    ck_assert_int_eq(out.frames, 6);
    ck_assert(fabs(out.usage[0] - 6.0) < 1e-12);
    eng_fit_out_free(&out);
    ck_assert_int_eq(eng_session_write(s, ENG_APPEND, &codes, &o, &out, &err), VBM_ECONFLICT);
    ck_assert_str_eq(err.field, "If-Match");
    o.if_match = -1;
    codes.C = 3;
    ck_assert_int_eq(eng_session_write(s, ENG_APPEND, &codes, &o, &out, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes");
    ck_assert_int_eq(eng_session_info(s, &info, &err), VBM_OK);
    ck_assert_int_eq(info.version, 2);
    ck_assert_int_eq(info.frames, 6);
    eng_info_free(&info);
    eng_session_unref(s);
}
END_TEST

/* The exported bytes of the session's memory and its version. */
static void session_snapshot(eng_session *s, unsigned char **buf, size_t *len, uint64_t *version)
{
    vbm_memory *mem = NULL;
    vbm_error err;

    ck_assert_int_eq(eng_session_export(s, &mem, version, &err), VBM_OK);
    ck_assert_int_eq(vbm_export(mem, buf, len, &err), VBM_OK);
    vbm_memory_free(mem);
}

/* Issue 16: a write that fails (out of memory at any allocation of the write
 * path) leaves the session as it was; one that succeeds is acknowledged. */
START_TEST(test_session_write_oom_atomic)
{
    eng_session *s = new_session(NULL, 0);
    double mu[6 * 4];
    vbm_codes codes = {6, 4, mu, NULL};
    eng_fit_opts o;
    eng_fit_out out;
    vbm_error err;
    unsigned char *b0, *b1;
    size_t n0, n1;
    uint64_t v0, v1;
    int i, nth, failed = 0;

    for (i = 0; i < 24; i++)
        mu[i] = sin(i * 0.7);
    memset(&o, 0, sizeof o);
    o.iterations = o.init = -1;
    o.tolerance = -1.0;
    o.if_match = -1;
    ck_assert_int_eq(eng_session_write(s, ENG_REPLACE, &codes, &o, &out, &err), VBM_OK);
    eng_fit_out_free(&out);
    for (nth = 1; nth <= 4; nth++) {
        session_snapshot(s, &b0, &n0, &v0);
        eng_session_test_fail_alloc(s, nth);
        if (eng_session_write(s, ENG_APPEND, &codes, &o, &out, &err) == VBM_OK) {
            session_snapshot(s, &b1, &n1, &v1);
            ck_assert_int_eq(out.version, v0 + 1);
            ck_assert_int_eq(v1, v0 + 1);
            ck_assert_ptr_nonnull(out.usage);
            eng_fit_out_free(&out);
        } else {
            failed++;
            ck_assert_int_eq(err.status, VBM_ENOMEM);
            session_snapshot(s, &b1, &n1, &v1);
            ck_assert_int_eq(v1, v0);
            ck_assert_uint_eq(n1, n0);
            ck_assert(memcmp(b0, b1, n0) == 0);
        }
        eng_session_test_fail_alloc(s, 0);
        free(b0);
        free(b1);
    }
    ck_assert_int_ge(failed, 1);
    eng_session_unref(s);
}
END_TEST

/* Parse one key-file line; returns the status and fills key (NUL-terminated) and pol. */
static vbm_status auth_line(const char *line, char *key, size_t cap, http_key_policy *pol,
                            vbm_error *err)
{
    size_t off = 99, len = 99;
    vbm_status st = http_auth_parse_line(line, &off, &len, pol, err);

    key[0] = '\0';
    if (st == VBM_OK && len > 0 && len < cap) {
        memcpy(key, line + off, len);
        key[len] = '\0';
    }
    if (st == VBM_OK && len == 0)
        ck_assert_uint_eq(off, 0);
    return st;
}

START_TEST(test_auth_key_lines)
{
    static const char *const bad[] = {"k scope=admin",
                                      "k scope=",
                                      "k scope=read scope=write",
                                      "k sessions=0",
                                      "k sessions=-1",
                                      "k sessions=1.5",
                                      "k sessions=1e3",
                                      "k bytes=",
                                      "k bytes=12kB",
                                      "k rps=0",
                                      "k rps=-1",
                                      "k rps=nan",
                                      "k rps=inf",
                                      "k rps=2000000",
                                      "k rps=1x",
                                      "k owner=",
                                      "k owner=a/b",
                                      "k owner=a b",
                                      "k extra",
                                      "k Scope=read",
                                      "k sessions=1 rps",
                                      "k =read",
                                      "k bytes=99999999999999999999",
                                      "scope=read",
                                      "owner=x k",
                                      "  rps=1 k",
                                      "vbmem-owner:team-a",
                                      "vbmem-owner:team-a scope=read",
                                      "vbmem-owner: owner=team-a"};
    char key[64];
    http_key_policy pol;
    vbm_error err;
    size_t i;

    /* bare keys keep today's meaning: full rights, no quotas */
    ck_assert_int_eq(auth_line("  alpha-key \n", key, sizeof key, &pol, &err), VBM_OK);
    ck_assert_str_eq(key, "alpha-key");
    ck_assert_int_eq(pol.scope, HTTP_SCOPE_WRITE);
    ck_assert_int_eq(pol.max_sessions, 0);
    ck_assert_uint_eq(pol.max_bytes, 0);
    ck_assert(pol.rps == 0.0);
    ck_assert_str_eq(pol.owner, "");
    /* blank and comment lines */
    ck_assert_int_eq(auth_line("", key, sizeof key, &pol, &err), VBM_OK);
    ck_assert_str_eq(key, "");
    ck_assert_int_eq(auth_line(" \t\n", key, sizeof key, &pol, &err), VBM_OK);
    ck_assert_str_eq(key, "");
    ck_assert_int_eq(auth_line("  # scope=read", key, sizeof key, &pol, &err), VBM_OK);
    ck_assert_str_eq(key, "");
    /* every option, in any order, blanks and tabs between */
    ck_assert_int_eq(
        auth_line("k9\trps=2.5  bytes=1048576 scope=read sessions=7 owner=team.a-1:x\n", key,
                  sizeof key, &pol, &err),
        VBM_OK);
    ck_assert_str_eq(key, "k9");
    ck_assert_int_eq(pol.scope, HTTP_SCOPE_READ);
    ck_assert_int_eq(pol.max_sessions, 7);
    ck_assert_uint_eq(pol.max_bytes, 1048576);
    ck_assert(pol.rps == 2.5);
    ck_assert_str_eq(pol.owner, "team.a-1:x");
    ck_assert_int_eq(auth_line("k scope=write rps=.5", key, sizeof key, &pol, &err), VBM_OK);
    ck_assert_int_eq(pol.scope, HTTP_SCOPE_WRITE);
    ck_assert(pol.rps == 0.5);
    /* the owner prefix inside a key, or a shorter one, is no collision */
    ck_assert_int_eq(auth_line("x-vbmem-owner:team-a", key, sizeof key, &pol, &err), VBM_OK);
    ck_assert_int_eq(auth_line("vbmem-owner", key, sizeof key, &pol, &err), VBM_OK);
    /* malformed: refused with the field, never echoing the words */
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        ck_assert_msg(auth_line(bad[i], key, sizeof key, &pol, &err) == VBM_EINVAL, "accepted %s",
                      bad[i]);
        ck_assert_str_eq(err.field, "api_key_file");
        ck_assert_msg(strstr(err.msg, "extra") == NULL && strstr(err.msg, "admin") == NULL
                          && strstr(err.msg, "a/b") == NULL,
                      "%s echoed in %s", bad[i], err.msg);
    }
}
END_TEST

/* Write text to a new temporary file; returns its path (static buffer). */
static const char *auth_file(const char *text)
{
    static char path[] = "/tmp/vbmem-keys-XXXXXX";
    int fd;
    FILE *fp;

    strcpy(path, "/tmp/vbmem-keys-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fp = fdopen(fd, "w");
    ck_assert_ptr_nonnull(fp);
    fputs(text, fp);
    fclose(fp);
    return path;
}

START_TEST(test_auth_file_owner_bucket_reload)
{
    unsigned char owner_a[KEYHASH_LEN], owner_b[KEYHASH_LEN], owner_c[KEYHASH_LEN],
        digest[KEYHASH_LEN];
    char path[64];
    http_key_policy pol;
    http_auth *a = NULL;
    vbm_error err;
    int retry = 0, i;
    FILE *fp;

    snprintf(path, sizeof path, "%s",
             auth_file("# keys\nkey-a owner=t\nkey-b scope=read owner=t rps=2\nkey-c\n"));
    ck_assert_int_eq(http_auth_create(path, &a, &err), VBM_OK);
    ck_assert_int_eq(http_auth_count(a), 3);
    ck_assert_int_eq(http_auth_check_policy(a, "Bearer key-a", owner_a, &pol), 1);
    ck_assert_int_eq(pol.scope, HTTP_SCOPE_WRITE);
    ck_assert_int_eq(http_auth_check_policy(a, "Bearer key-b", owner_b, &pol), 1);
    ck_assert_int_eq(pol.scope, HTTP_SCOPE_READ);
    keyhash_digest("key-b", 5, digest);
    ck_assert_mem_eq(pol.key, digest, KEYHASH_LEN);
    ck_assert_mem_eq(owner_a, owner_b, KEYHASH_LEN); /* one owner */
    ck_assert_int_eq(http_auth_check(a, "Bearer key-c", owner_c), 1);
    keyhash_digest("key-c", 5, digest);
    ck_assert_mem_eq(owner_c, digest, KEYHASH_LEN); /* a bare key owns by its digest */
    ck_assert_int_eq(http_auth_check(a, "Bearer key-", owner_c), 0);
    ck_assert_int_eq(http_auth_check(a, "key-a", owner_c), 0);
    ck_assert_int_eq(http_auth_check(a, NULL, owner_c), 0);
    /* the bucket of key-b: 2 tokens, 2 per second; explicit times */
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.0, &retry), 1);
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.0, &retry), 1);
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.0, &retry), 0);
    ck_assert_int_eq(retry, 1);
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.25, &retry), 0); /* half a token */
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.5, &retry), 1);
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.5, &retry), 0);
    for (i = 0; i < 100; i++) /* a key without a rate never waits */
        ck_assert_int_eq(http_auth_take(a, digest, 100.5, &retry), 1);
    /* reload: key-b keeps its (empty) bucket at a new rate, key-a is gone */
    fp = fopen(path, "w");
    fputs("key-b rps=0.25\nkey-c\n", fp);
    fclose(fp);
    ck_assert_int_eq(http_auth_reload(a, &err), VBM_OK);
    ck_assert_int_eq(http_auth_count(a), 2);
    ck_assert_int_eq(http_auth_check(a, "Bearer key-a", owner_a), 0);
    ck_assert_int_eq(http_auth_check_policy(a, "Bearer key-b", owner_b, &pol), 1);
    ck_assert_int_eq(pol.scope, HTTP_SCOPE_WRITE);
    ck_assert_int_eq(http_auth_take(a, pol.key, 100.5, &retry), 0);
    ck_assert_int_eq(retry, 4);
    ck_assert_int_eq(http_auth_take(a, pol.key, 104.5, &retry), 1);
    /* a bad file keeps the previous keys and names the line */
    fp = fopen(path, "w");
    fputs("key-x\n\nkey-y rps=fast\n", fp);
    fclose(fp);
    ck_assert_int_eq(http_auth_reload(a, &err), VBM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "line 3"));
    ck_assert_ptr_null(strstr(err.msg, "fast"));
    ck_assert_int_eq(http_auth_count(a), 2);
    ck_assert_int_eq(http_auth_check(a, "Bearer key-c", owner_c), 1);
    ck_assert_int_eq(http_auth_check(a, "Bearer key-x", owner_c), 0);
    http_auth_free(a);
    unlink(path);
    /* repeated keys are refused; a missing file too */
    snprintf(path, sizeof path, "%s", auth_file("k1\nk2 scope=read\nk1 scope=read\n"));
    ck_assert_int_eq(http_auth_create(path, &a, &err), VBM_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert_ptr_nonnull(strstr(err.msg, "line 3: repeats the key of line 1"));
    unlink(path);
    ck_assert_int_eq(http_auth_create(path, &a, &err), VBM_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert_int_eq(http_auth_create(NULL, &a, &err), VBM_OK);
    ck_assert_int_eq(http_auth_enabled(a), 0);
    http_auth_free(a);
}
END_TEST

START_TEST(test_auth_many_keys_and_long_lines)
{
    unsigned char owner[KEYHASH_LEN], want[KEYHASH_LEN];
    char path[64], header[64], *text, *p;
    http_key_policy pol;
    http_auth *a = NULL;
    vbm_error err;
    FILE *fp;
    int i;

    /* 2000 keys in file order; each is found with its own policy (the table is sorted) */
    snprintf(path, sizeof path, "%s", auth_file(""));
    fp = fopen(path, "w");
    for (i = 0; i < 2000; i++)
        fprintf(fp, "key-%d sessions=%d%s\n", (i * 7919) % 2000, (i * 7919) % 2000 + 1,
                i % 3 == 0 ? " scope=read" : "");
    fclose(fp);
    ck_assert_int_eq(http_auth_create(path, &a, &err), VBM_OK);
    ck_assert_int_eq(http_auth_count(a), 2000);
    for (i = 0; i < 2000; i++) {
        snprintf(header, sizeof header, "Bearer key-%d", i);
        ck_assert_int_eq(http_auth_check_policy(a, header, owner, &pol), 1);
        ck_assert_int_eq(pol.max_sessions, i + 1);
        keyhash_digest(header + 7, strlen(header + 7), want);
        ck_assert_mem_eq(owner, want, KEYHASH_LEN);
        ck_assert_mem_eq(pol.key, want, KEYHASH_LEN);
    }
    ck_assert_int_eq(http_auth_check(a, "Bearer key-2000", owner), 0);
    ck_assert_int_eq(http_auth_check(a, "Bearer key-", owner), 0);
    http_auth_free(a);
    unlink(path);
    /* a line longer than the reader's buffer is refused, not split into two keys */
    text = malloc(6000);
    ck_assert_ptr_nonnull(text);
    p = text + sprintf(text, "short-key\n");
    memset(p, 'x', 5000);
    strcpy(p + 5000, "\nother-key\n");
    snprintf(path, sizeof path, "%s", auth_file(text));
    free(text);
    ck_assert_int_eq(http_auth_create(path, &a, &err), VBM_EINVAL);
    ck_assert_ptr_null(a);
    ck_assert_ptr_nonnull(strstr(err.msg, "line 2 is longer than"));
    unlink(path);
}
END_TEST

/* 1 when the peer of socket s was shut down (a read returns end of file at once). */
static int conn_peer_closed(int s)
{
    char c;
    ssize_t n = recv(s, &c, 1, MSG_DONTWAIT);

    return n == 0;
}

/* Past the limit, the waiting connection with the oldest `since` is shut down: never a busy one,
 * never the new one; a connection that got its answer waits again from then. */
START_TEST(test_conns_evict_stalest_waiting)
{
    http_conns t;
    http_conn *c[6];
    int sv[6][2], i, ev = -1;

    for (i = 0; i < 6; i++)
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]), 0);
    http_conns_init(&t, 3);
    c[0] = http_conns_opened(&t, sv[0][0], 1.0, &ev);
    ck_assert_int_eq(ev, 0);
    c[1] = http_conns_opened(&t, sv[1][0], 2.0, &ev);
    c[2] = http_conns_opened(&t, sv[2][0], 3.0, &ev);
    ck_assert_int_eq(ev, 0);
    ck_assert(c[0] != NULL && c[1] != NULL && c[2] != NULL);
    http_conns_busy(&t, c[0]);          /* oldest, but its request is being handled */
    http_conns_waiting(&t, c[1], 10.0); /* answered at 10: waits from then */
    c[3] = http_conns_opened(&t, sv[3][0], 11.0, &ev);
    ck_assert_int_eq(ev, 1);
    ck_assert_int_eq(t.count, 3);
    for (i = 0; i < 4; i++) /* c[2] (waiting since 3) went, not busy c[0] nor c[1] (since 10) */
        ck_assert_int_eq(conn_peer_closed(sv[i][1]), i == 2);
    /* closing an evicted entry does not count it twice */
    http_conns_closed(&t, c[2]);
    ck_assert_int_eq(t.count, 3);
    http_conns_busy(&t, c[1]);
    http_conns_busy(&t, c[3]);
    c[4] = http_conns_opened(&t, sv[4][0], 12.0, &ev); /* everything else busy: nobody goes */
    ck_assert_int_eq(ev, 0);
    ck_assert_int_eq(t.count, 4);
    ck_assert_int_eq(conn_peer_closed(sv[4][1]), 0);
    http_conns_waiting(&t, c[0], 13.0);
    c[5] = http_conns_opened(&t, sv[5][0], 14.0, &ev); /* 5 > 3: c[4] (12) then c[0] (13) */
    ck_assert_int_eq(ev, 2);
    ck_assert_int_eq(t.count, 3);
    ck_assert_int_eq(conn_peer_closed(sv[4][1]), 1);
    ck_assert_int_eq(conn_peer_closed(sv[0][1]), 1);
    ck_assert_int_eq(conn_peer_closed(sv[5][1]), 0);
    ck_assert_uint_eq(t.evictions, 3);
    http_conns_closed(&t, NULL); /* untracked: a no-op */
    http_conns_closed(&t, c[0]);
    http_conns_destroy(&t); /* frees the entries still listed */
    for (i = 0; i < 6; i++) {
        close(sv[i][0]);
        close(sv[i][1]);
    }
}
END_TEST

/* Request targets (http/urlpath.h): an encoded NUL shows in the decoded length, overlong forms,
 * surrogates and stray bytes are not UTF-8, and the escaped form is printable ASCII. */
START_TEST(test_urlpath_decode_check_escape)
{
    char a[] = "/v1/sessions/ab%00evil", b[] = "/x/%C0%AF", c[] = "/%e2%82%ac%2",
         d[] = "/%ED%A0%80";
    char e[] = "/%F4%90%80%80", f[] = "/%F0%9F%98%80+%zz";
    size_t n;
    char *esc;

    n = urlpath_decode(a);
    ck_assert_uint_eq(n, 20);
    ck_assert_str_eq(a, "/v1/sessions/ab");
    ck_assert_int_eq(urlpath_utf8_ok(a, n), 0);
    n = urlpath_decode(b);
    ck_assert_int_eq(urlpath_utf8_ok(b, n), 0); /* overlong '/' */
    n = urlpath_decode(c);
    ck_assert_str_eq(c, "/\xe2\x82\xac%2");
    ck_assert_int_eq(urlpath_utf8_ok(c, n), 1);
    ck_assert_int_eq(urlpath_utf8_ok(c, 3), 0); /* cut inside a character */
    n = urlpath_decode(d);
    ck_assert_int_eq(urlpath_utf8_ok(d, n), 0); /* a surrogate */
    n = urlpath_decode(e);
    ck_assert_int_eq(urlpath_utf8_ok(e, n), 0); /* past U+10FFFF */
    n = urlpath_decode(f);
    ck_assert_int_eq(urlpath_utf8_ok(f, n), 1);
    ck_assert_str_eq(f, "/\xf0\x9f\x98\x80+%zz");
    ck_assert_int_eq(urlpath_utf8_ok("\xff", 1), 0);
    esc = urlpath_escape("/v1/\xff a\"\\%41\n");
    ck_assert_ptr_nonnull(esc);
    ck_assert_str_eq(esc, "/v1/%FF%20a%22%5C%41%0A");
    free(esc);
}
END_TEST

/* Write n bytes to a new temporary file (NUL bytes included); returns its path (static). */
static const char *auth_file_bytes(const char *bytes, size_t n)
{
    static char path[] = "/tmp/vbmem-keys-XXXXXX";
    int fd;

    strcpy(path, "/tmp/vbmem-keys-XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, bytes, n), (ssize_t)n);
    close(fd);
    return path;
}

/* Key files that would leave every request refused, or hide a mistake, are refused with a
 * message that says what is wrong: no key at all, a byte-order mark, a NUL byte, a rate that is
 * not decimal; on reload the previous keys stay. */
START_TEST(test_auth_file_refusals)
{
    static const struct {
        const char *bytes;
        size_t n;
        const char *says;
    } bad[] = {
        {"", 0, "no key"},
        {"# only a comment\n\n   \n# another\n", 32, "no key"},
        {"\xef\xbb\xbfkey-a\n", 10, "byte-order mark"},
        {"key-a\nkey\0b\n", 12, "line 2 holds a NUL byte"},
        {"key-a rps=0x10\n", 15, "rps="},
        {"key-a rps=1e3\n", 14, "rps="},
    };
    unsigned char owner[KEYHASH_LEN];
    char path[64];
    http_auth *a = NULL;
    vbm_error err;
    size_t i;
    FILE *fp;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s", auth_file_bytes(bad[i].bytes, bad[i].n));
        err.msg[0] = '\0';
        ck_assert_msg(http_auth_create(path, &a, &err) == VBM_EINVAL, "case %zu accepted", i);
        ck_assert_ptr_null(a);
        ck_assert_msg(strstr(err.msg, bad[i].says) != NULL, "case %zu: %s", i, err.msg);
        ck_assert_msg(strstr(err.msg, "key-a") == NULL, "case %zu echoes the key: %s", i, err.msg);
        unlink(path);
    }
    /* decimal rates still pass */
    snprintf(path, sizeof path, "%s", auth_file("key-a rps=10\nkey-b rps=0.25\nkey-c rps=3.\n"));
    ck_assert_int_eq(http_auth_create(path, &a, &err), VBM_OK);
    ck_assert_int_eq(http_auth_count(a), 3);
    /* a reload to an empty (comments-only) file fails and keeps the keys */
    fp = fopen(path, "w");
    fputs("# nothing yet\n", fp);
    fclose(fp);
    ck_assert_int_eq(http_auth_reload(a, &err), VBM_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "no key"));
    ck_assert_int_eq(http_auth_count(a), 3);
    ck_assert_int_eq(http_auth_check(a, "Bearer key-b", owner), 1);
    http_auth_free(a);
    unlink(path);
}
END_TEST

/* A request as the funnel sees it: path, request id, the server's Retry-After (srv zeroed). */
static http_req *funnel_req(http_server *srv)
{
    http_req *r = calloc(1, sizeof *r);

    memset(srv, 0, sizeof *srv);
    srv->cfg.limits.retry_after_s = 7;
    ck_assert_ptr_nonnull(r);
    r->srv = srv;
    r->path = strdup("/v1/sessions/x/episodes");
    snprintf(r->request_id, sizeof r->request_id, "rid-1");
    snprintf(r->param, sizeof r->param, "x"); /* no session id: the funnel looks nothing up */
    return r;
}

static void funnel_req_free(http_req *r)
{
    free(r->path);
    free(r->resp.body);
    free(r);
}

/* The answer's JSON body (a new reference), checked to be a problem document of status. */
static json_t *funnel_problem(const http_req *r, int status, const char *type)
{
    json_t *p;

    ck_assert_int_eq(r->resp.status, status);
    ck_assert_str_eq(r->resp.content_type, "application/problem+json");
    p = json_loadb(r->resp.body, r->resp.len, 0, NULL);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(json_integer_value(json_object_get(p, "status")), status);
    ck_assert_str_eq(json_string_value(json_object_get(p, "type")), type);
    ck_assert_str_eq(json_string_value(json_object_get(p, "instance")), "/v1/sessions/x/episodes");
    ck_assert_str_eq(json_string_value(json_object_get(p, "request_id")), "rid-1");
    return p;
}

START_TEST(test_funnel_answers)
{
    http_server srv;
    http_req *r;
    vbm_error err;
    json_t *p;

    /* the engine's statuses (docs/design/errors.md) */
    ck_assert_int_eq(resp_status_of(VBM_OK), 200);
    ck_assert_int_eq(resp_status_of(VBM_EINVAL), 422);
    ck_assert_int_eq(resp_status_of(VBM_ENUMERIC), 422);
    ck_assert_int_eq(resp_status_of(VBM_EFORMAT), 422);
    ck_assert_int_eq(resp_status_of(VBM_ENOTFOUND), 404);
    ck_assert_int_eq(resp_status_of(VBM_ECONFLICT), 409);
    ck_assert_int_eq(resp_status_of(VBM_ELIMIT), 429);
    ck_assert_int_eq(resp_status_of(VBM_ECORRUPT), 500);
    ck_assert_int_eq(resp_status_of(VBM_EBUSY), 503);
    ck_assert_int_eq(resp_status_of(VBM_ENOMEM), 503);

    /* an engine failure: its field, its message as the detail, no Retry-After */
    r = funnel_req(&srv);
    resp_answer(r, resp_status_of(vbm_fail(&err, VBM_EINVAL, "codes.mu[3][1]", "not finite")),
                &err);
    p = funnel_problem(r, 422, "urn:vbmem:problem:invalid-request");
    ck_assert_str_eq(json_string_value(json_object_get(p, "field")), "codes.mu[3][1]");
    ck_assert_str_eq(json_string_value(json_object_get(p, "detail")), "codes.mu[3][1]: not finite");
    ck_assert_int_eq(r->resp.retry_after, 0);
    json_decref(p);
    funnel_req_free(r);

    /* a failure the edge words with a field: the detail starts with it, once */
    r = funnel_req(&srv);
    resp_answer(r, resp_fail(&err, 422, "limit", "expected an integer"), &err);
    p = funnel_problem(r, 422, "urn:vbmem:problem:invalid-request");
    ck_assert_str_eq(json_string_value(json_object_get(p, "detail")), "limit: expected an integer");
    json_decref(p);
    funnel_req_free(r);

    /* a failure the edge words: the detail as written, no field member when none */
    r = funnel_req(&srv);
    resp_answer(r, resp_fail(&err, 400, NULL, "malformed JSON at line %d", 3), &err);
    p = funnel_problem(r, 400, "urn:vbmem:problem:malformed-request");
    ck_assert_ptr_null(json_object_get(p, "field"));
    ck_assert_str_eq(json_string_value(json_object_get(p, "detail")), "malformed JSON at line 3");
    json_decref(p);
    funnel_req_free(r);

    /* 503 and 429 carry the server's Retry-After, or the handler's own */
    r = funnel_req(&srv);
    resp_answer(r, resp_fail(&err, 503, NULL, "the job queue is full"), &err);
    json_decref(funnel_problem(r, 503, "urn:vbmem:problem:unavailable"));
    ck_assert_int_eq(r->resp.retry_after, 7);
    funnel_req_free(r);
    r = funnel_req(&srv);
    r->resp.retry_after = 3;
    resp_answer(r, resp_fail(&err, 429, NULL, "rate used up"), &err);
    json_decref(funnel_problem(r, 429, "urn:vbmem:problem:limit-reached"));
    ck_assert_int_eq(r->resp.retry_after, 3);
    funnel_req_free(r);

    /* a corrupt stored record: 500 with a type of its own, no field */
    r = funnel_req(&srv);
    resp_answer(r, resp_status_of(vbm_fail(&err, VBM_ECORRUPT, "id", "bad record")), &err);
    p = funnel_problem(r, 500, "urn:vbmem:problem:corrupt-record");
    ck_assert_ptr_null(json_object_get(p, "field"));
    json_decref(p);
    funnel_req_free(r);

    /* a conflict with If-Match sent: field If-Match, the version seen as ETag and in the detail */
    r = funnel_req(&srv);
    r->has_if_match = 1;
    r->if_match = 4;
    resp_answer(r, resp_conflict(r, 5, &err), &err);
    p = funnel_problem(r, 409, "urn:vbmem:problem:version-conflict");
    ck_assert_str_eq(json_string_value(json_object_get(p, "field")), "If-Match");
    ck_assert_str_eq(json_string_value(json_object_get(p, "detail")),
                     "If-Match: the session is at version 5");
    ck_assert_str_eq(r->resp.etag, "\"5\"");
    json_decref(p);
    funnel_req_free(r);

    /* the same without If-Match (another replica committed first): no field, the store's
     * message in the detail */
    r = funnel_req(&srv);
    resp_etag(r, 7);
    resp_answer(r, resp_status_of(vbm_fail(&err, VBM_ECONFLICT, NULL, "stored at 7, not 6")), &err);
    p = funnel_problem(r, 409, "urn:vbmem:problem:version-conflict");
    ck_assert_ptr_null(json_object_get(p, "field"));
    ck_assert_str_eq(json_string_value(json_object_get(p, "detail")),
                     "another replica wrote the session while this write ran (stored at 7, not "
                     "6); nothing was written: send it again");
    ck_assert_str_eq(r->resp.etag, "\"7\"");
    json_decref(p);
    funnel_req_free(r);

    /* a success keeps the resource; a 2xx without one is the handler's fault: 500 */
    r = funnel_req(&srv);
    resp_answer(r, resp_json(r, 201, json_pack("{s:i}", "a", 1), &err), &err);
    ck_assert_int_eq(r->resp.status, 201);
    ck_assert_str_eq(r->resp.content_type, "application/json");
    ck_assert_str_eq(r->resp.body, "{\"a\":1}");
    funnel_req_free(r);
    r = funnel_req(&srv);
    resp_answer(r, 200, &err);
    json_decref(funnel_problem(r, 500, "urn:vbmem:problem:internal"));
    funnel_req_free(r);
    r = funnel_req(&srv);
    resp_answer(r, resp_empty(r), &err);
    ck_assert_int_eq(r->resp.status, 204);
    ck_assert_ptr_null(r->resp.body);
    funnel_req_free(r);
}
END_TEST

static Suite *units_suite(void)
{
    Suite *s = suite_create("vbmemd-units");
    TCase *tc = tcase_create("units");

    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_keyhash_vectors);
    tcase_add_test(tc, test_urlpath_decode_check_escape);
    tcase_add_test(tc, test_base64);
    tcase_add_test(tc, test_codec_codes);
    tcase_add_test(tc, test_fast_body_parse);
    tcase_add_test(tc, test_pool_bounded_and_drain);
    tcase_add_test(tc, test_pool_slots_and_block);
    tcase_add_test(tc, test_pool_scratch_per_slot);
    tcase_add_test(tc, test_store_owners_pages_limits);
    tcase_add_test(tc, test_store_ttl_and_bytes);
    tcase_add_test(tc, test_session_versions);
    tcase_add_test(tc, test_session_write_oom_atomic);
    tcase_add_test(tc, test_auth_key_lines);
    tcase_add_test(tc, test_auth_file_owner_bucket_reload);
    tcase_add_test(tc, test_auth_many_keys_and_long_lines);
    tcase_add_test(tc, test_auth_file_refusals);
    tcase_add_test(tc, test_conns_evict_stalest_waiting);
    tcase_add_test(tc, test_pool_sheds_jobs_past_max_wait);
    tcase_add_test(tc, test_funnel_answers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(units_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
