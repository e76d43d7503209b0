/* threads.c -- Check tests of libvbmem (test-models, tests/test_models.c): threads: parallel
 * writes on different memories, the Gram path against the direct one, the time budget, fits
 * split over a thread team, and fits that reuse a scratch pool. */
#include "common.h"
#include "memory/scratch.h"

/* ---- thread safety: parallel writes on different memories ---- */

typedef struct {
    const vbm_codes *codes;
    double elbo;
} job_t;

static void *thread_write(void *arg)
{
    job_t *j = arg;
    vbm_memory *m = make(VBM_MIXTURE, j->codes->C, 3, 4, 1);
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 10;
    o.seed = 8;
    vbm_write_result r;
    vbm_error err;
    if (vbm_write(m, j->codes, &o, &r, &err) == VBM_OK) {
        j->elbo = r.elbo.total;
        vbm_write_result_free(&r);
    }
    vbm_memory_free(m);
    return NULL;
}

START_TEST(parallel_writes_match_sequential)
{
    int C = 12;
    long T = 80;
    double *mu = randn(T * C, 61, 2.0);
    vbm_codes codes = {T, C, mu, NULL};
    job_t seq = {&codes, 0}, par[4];
    thread_write(&seq);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        par[i].codes = &codes;
        par[i].elbo = 0;
        pthread_create(&th[i], NULL, thread_write, &par[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert(par[i].elbo == seq.elbo);
    }
    free(mu);
}
END_TEST

/* ---- the Gram path of the mixture/tree updates gives the direct path's posterior ---- */

static void compare_solvers(vbm_kind kind, int C, int K, int H, int G, long T, int online)
{
    vbm_memory *m[2];
    vbm_write_result res[2];
    double *mu = randn(T * C, 71, 1.5), *s2 = randn(T * C, 72, 0.1), *mu2 = randn(T * C, 73, 1.5);
    for (long i = 0; i < T * C; i++)
        s2[i] = s2[i] * s2[i] + 0.01;
    for (long t = 0; t < T; t++) /* three well separated groups */
        for (int c = 0; c < C; c++) {
            mu[t * C + c] += 4.0 * ((t % 3) == (c % 3));
            mu2[t * C + c] += 4.0 * ((t % 3) == (c % 3));
        }
    vbm_codes codes = {T, C, mu, s2}, codes2 = {T, C, mu2, NULL};
    for (int i = 0; i < 2; i++) {
        m[i] = make(kind, C, K, H, G);
        m[i]->cfg.s_floor = 0.0;
        vbm_write_opts o;
        vbm_write_opts_default(&o);
        o.max_iter = 12;
        o.seed = 5;
        o.want_addresses = 1;
        o.want_trace = 1;
        o.solver = i == 0 ? VBM_SOLVER_DIRECT : VBM_SOLVER_GRAM;
        write_ok(m[i], &codes, &o, &res[i]);
        if (online) {
            vbm_write_result_free(&res[i]);
            vbm_error err;
            ck_assert_msg(vbm_append(m[i], &codes2, &o, &res[i], &err) == VBM_OK, "%s", err.msg);
        }
    }
    int cg = C / G, GH = G * H;
    ck_assert_double_le(max_rel_diff(m[1]->R, m[0]->R, (size_t)GH * K * cg), 1e-8);
    ck_assert_double_le(max_rel_diff(m[1]->U, m[0]->U, (size_t)GH * K * K), 1e-8);
    ck_assert_double_le(max_rel_diff(m[1]->mu_b, m[0]->mu_b, (size_t)GH * cg), 1e-8);
    ck_assert_double_le(max_rel_diff(m[1]->s2_b, m[0]->s2_b, (size_t)GH), 1e-8);
    ck_assert_double_le(max_rel_diff(res[1].trace, res[0].trace, (size_t)res[0].iterations + 1),
                        1e-9);
    ck_assert_double_le(max_rel_diff(res[1].addr.s, res[0].addr.s, (size_t)T * G * H), 1e-8);
    ck_assert_double_le(max_rel_diff(res[1].addr.w_mu, res[0].addr.w_mu, (size_t)T * G * H * K),
                        1e-8);
    ck_assert_double_le(rel(res[1].elbo.kl_M, res[0].elbo.kl_M), 1e-8);
    ck_assert_double_le(rel(res[1].elbo.total, res[0].elbo.total), 1e-10);
    for (int it = 1; it <= res[1].iterations; it++) /* still coordinate ascent */
        ck_assert_double_ge(res[1].trace[it], res[1].trace[it - 1] - 1e-9 * fabs(res[1].trace[it]));
    if (!online) {
        /* without a trace the ELBO is evaluated only at the end: the same fit, bit for bit */
        vbm_memory *m3 = make(kind, C, K, H, G);
        m3->cfg.s_floor = 0.0;
        vbm_write_opts o;
        vbm_write_opts_default(&o);
        o.max_iter = 12;
        o.seed = 5;
        o.solver = VBM_SOLVER_GRAM;
        vbm_write_result r3;
        write_ok(m3, &codes, &o, &r3);
        ck_assert(r3.trace == NULL);
        ck_assert_int_eq(r3.iterations, res[1].iterations);
        ck_assert(memcmp(m3->R, m[1]->R, sizeof(double) * (size_t)GH * K * cg) == 0);
        ck_assert(memcmp(m3->mu_b, m[1]->mu_b, sizeof(double) * (size_t)GH * cg) == 0);
        ck_assert(memcmp(&r3.elbo, &res[1].elbo, sizeof r3.elbo) == 0);
        vbm_write_result_free(&r3);
        vbm_memory_free(m3);
    }
    for (int i = 0; i < 2; i++) {
        vbm_write_result_free(&res[i]);
        vbm_memory_free(m[i]);
    }
    free(mu);
    free(s2);
    free(mu2);
}

START_TEST(gram_path_equals_direct)
{
    compare_solvers(VBM_MIXTURE, 40, 4, 3, 1, 30, 0); /* batch write from k-means++ */
    compare_solvers(VBM_MIXTURE, 40, 4, 3, 1, 30, 1); /* then online: nonzero prior means */
    compare_solvers(VBM_TREE, 40, 3, 3, 2, 16, 0);
    compare_solvers(VBM_MIXTURE, 10, 3, 4, 1, 50, 0); /* T > C: forced Gram still agrees */
}
END_TEST

/* ---- a time budget stops a fit after an update, with a valid posterior ---- */

START_TEST(time_budget_stops_fit)
{
    int C = 30, K = 6, H = 8;
    long T = 400;
    vbm_memory *m = make(VBM_MIXTURE, C, K, H, 1);
    double *mu = randn(T * C, 81, 1.0);
    vbm_codes codes = {T, C, mu, NULL};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 100000;
    o.max_seconds = 0.05;
    vbm_write_result res;
    write_ok(m, &codes, &o, &res);
    ck_assert_int_eq(res.time_limited, 1);
    ck_assert_int_ge(res.iterations, 1);
    ck_assert_int_lt(res.iterations, 100000);
    ck_assert(isfinite(res.elbo.per_frame));
    vbm_write_result_free(&res);
    /* append and refit honour it too; bad budgets are refused */
    vbm_error err;
    ck_assert_int_eq(vbm_append(m, &codes, &o, &res, &err), VBM_OK);
    ck_assert_int_eq(res.time_limited, 1);
    vbm_write_result_free(&res);
    o.max_seconds = -1.0;
    ck_assert_int_eq(vbm_write(m, &codes, &o, &res, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "max_seconds") != NULL, "%s", err.msg);
    o.max_seconds = 0.0;
    o.solver = (vbm_solver)7;
    ck_assert_int_eq(vbm_write(m, &codes, &o, &res, &err), VBM_EINVAL);
    ck_assert_msg(strstr(err.msg, "solver") != NULL, "%s", err.msg);
    vbm_memory_free(m);
    free(mu);
}
END_TEST

/* ---- the thread team runs every item of a loop exactly once ---- */

typedef struct {
    team_t *team;
    int *hits;      /* per item */
    int *worker_of; /* per item: the thread that ran it */
    long items;
} count_job;

static void count_run(const void *ctx, long b, long e, int worker)
{
    const count_job *j = ctx;
    for (long i = b; i < e; i++) {
        j->hits[i]++;
        j->worker_of[i] = worker;
    }
    /* a loop nested in an item runs on this thread alone (the team is busy), as worker 0 */
    if (b == 0 && j->items > 3) {
        int nested[3] = {0, 0, 0}, wk[3];
        count_job in = {j->team, nested, wk, 3};
        team_for(j->team, 3, 1, 1 << 20, count_run, &in);
        for (int i = 0; i < 3; i++)
            ck_assert(nested[i] == 1 && wk[i] == 0);
    }
}

START_TEST(team_runs_every_item_once)
{
    for (int threads = 1; threads <= 4; threads++) {
        team_t *team = team_new(threads);
        ck_assert_ptr_nonnull(team);
        ck_assert_int_ge(team_size(team), 1);
        ck_assert_int_le(team_size(team), threads);
        const long sizes[] = {1, 2, 3, 7, 10, 64, 1000};
        for (int rep = 0; rep < 50; rep++)
            for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
                long n = sizes[z];
                int *hits = calloc((size_t)n, sizeof(int)), *wk = calloc((size_t)n, sizeof(int));
                count_job j = {team, hits, wk, n};
                if (rep % 2)
                    team_for(team, n, 0, 1 << 20, count_run, &j);
                else
                    team_for_shares(team, n, 1 << 20, count_run, &j);
                for (long i = 0; i < n; i++) {
                    ck_assert_int_eq(hits[i], 1);
                    ck_assert(wk[i] >= 0 && wk[i] < team_size(team));
                }
                free(hits);
                free(wk);
            }
        /* small work runs on the caller (3 items: no nested loop, which would then engage the
         * team) */
        int hits[3] = {0, 0, 0}, wk[3] = {9, 9, 9};
        count_job j = {team, hits, wk, 3};
        team_for_shares(team, 3, 100, count_run, &j);
        for (int i = 0; i < 3; i++)
            ck_assert(hits[i] == 1 && wk[i] == 0);
        team_free(team);
    }
    team_free(NULL);
    ck_assert_int_eq(team_size(NULL), 1);
}
END_TEST

/* ---- a fit split over a team of threads gives the same bytes as one without ---- */

typedef struct {
    vbm_kind kind;
    int C, K, H, G;
    long T;
    vbm_solver solver;
    vbm_team *team;
    vbm_scratch *scratch;
    vbm_memory *m;
    vbm_write_result res;
} team_fit;

static void *team_fit_run(void *arg)
{
    team_fit *f = arg;
    double *mu = randn(f->T * f->C, 91, 1.5), *mu2 = randn(f->T * f->C, 92, 1.5);
    for (long t = 0; t < f->T; t++) /* three well separated groups */
        for (int c = 0; c < f->C; c++) {
            mu[t * f->C + c] += 4.0 * ((t % 3) == (c % 3));
            mu2[t * f->C + c] += 4.0 * ((t % 3) == (c % 3));
        }
    vbm_codes codes = {f->T, f->C, mu, NULL}, codes2 = {f->T, f->C, mu2, NULL};
    f->m = make(f->kind, f->C, f->K, f->H, f->G);
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 9;
    o.seed = 3;
    o.want_addresses = 1;
    o.solver = f->solver;
    o.team = f->team;
    o.scratch = f->scratch;
    write_ok(f->m, &codes, &o, &f->res);
    vbm_write_result_free(&f->res);
    vbm_error err;
    /* online VB next: nonzero prior means and shifts in every product */
    ck_assert_msg(vbm_append(f->m, &codes2, &o, &f->res, &err) == VBM_OK, "%s", err.msg);
    free(mu);
    free(mu2);
    return NULL;
}

static void team_fit_same(const team_fit *a, const team_fit *b)
{
    size_t GH = (size_t)a->G * a->H, K = (size_t)a->K, cg = (size_t)(a->C / a->G), T = (size_t)a->T;
    ck_assert(memcmp(a->m->R, b->m->R, sizeof(double) * GH * K * cg) == 0);
    ck_assert(memcmp(a->m->U, b->m->U, sizeof(double) * GH * K * K) == 0);
    ck_assert(memcmp(a->m->mu_b, b->m->mu_b, sizeof(double) * GH * cg) == 0);
    ck_assert(memcmp(a->m->s2_b, b->m->s2_b, sizeof(double) * GH) == 0);
    ck_assert(memcmp(&a->res.elbo, &b->res.elbo, sizeof a->res.elbo) == 0);
    ck_assert_int_eq(a->res.iterations, b->res.iterations);
    ck_assert(memcmp(a->res.addr.s, b->res.addr.s, sizeof(double) * T * GH) == 0);
    ck_assert(memcmp(a->res.addr.w_mu, b->res.addr.w_mu, sizeof(double) * T * GH * K) == 0);
    ck_assert(memcmp(a->res.addr.w_cov, b->res.addr.w_cov, sizeof(double) * GH * K * K) == 0);
}

static void team_fit_free(team_fit *f)
{
    vbm_write_result_free(&f->res);
    vbm_memory_free(f->m);
}

START_TEST(team_gives_same_bytes)
{
    /* sizes large enough that every per-cluster loop goes to the helpers */
    const team_fit cases[] = {
        {.kind = VBM_MIXTURE,
         .C = 40,
         .K = 4,
         .H = 7,
         .G = 1,
         .T = 30,
         .solver = VBM_SOLVER_AUTO}, /* Gram path */
        {.kind = VBM_MIXTURE,
         .C = 10,
         .K = 4,
         .H = 6,
         .G = 1,
         .T = 120,
         .solver = VBM_SOLVER_AUTO}, /* direct path (T > C) */
        {.kind = VBM_TREE,
         .C = 60,
         .K = 4,
         .H = 6,
         .G = 2,
         .T = 28,
         .solver = VBM_SOLVER_AUTO}, /* G groups of clusters */
        {.kind = VBM_MIXTURE,
         .C = 48,
         .K = 9,
         .H = 3,
         .G = 1,
         .T = 40,
         .solver = VBM_SOLVER_AUTO}, /* K > 8 rows */
    };
    ck_assert_ptr_null(vbm_team_new(0));
    vbm_team_free(NULL);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        team_fit alone = cases[c];
        team_fit_run(&alone);
        for (int threads = 1; threads <= 3; threads++) {
            team_fit f = cases[c];
            f.team = vbm_team_new(threads);
            ck_assert_ptr_nonnull(f.team);
            team_fit_run(&f);
            team_fit_same(&f, &alone);
            team_fit_free(&f);
            vbm_team_free(f.team);
        }
        /* two fits on one team at once: one gets the helpers, the other runs on its own thread */
        vbm_team *team = vbm_team_new(2);
        team_fit g[2] = {cases[c], cases[c]};
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            g[i].team = team;
            pthread_create(&th[i], NULL, team_fit_run, &g[i]);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            team_fit_same(&g[i], &alone);
            team_fit_free(&g[i]);
        }
        vbm_team_free(team);
        team_fit_free(&alone);
    }
}
END_TEST

/* ---- a fit that reuses a scratch's buffers gives the same bytes as one without ---- */

START_TEST(scratch_pool_semantics)
{
    vbm_scratch *s = vbm_scratch_new();
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(scratch_acquire(NULL), 0);
    ck_assert_int_eq(scratch_acquire(s), 1);
    ck_assert_int_eq(scratch_acquire(s), 0); /* held: a second fit goes without */
    scratch_release(s);
    ck_assert_int_eq(scratch_acquire(s), 1);
    scratch_release(s);
    double *a = scratch_take(s, 100), *b = scratch_take(s, 300);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(vbm_scratch_bytes(s), 0);
    ck_assert_uint_eq(vbm_scratch_bytes(NULL), 0);
    scratch_give(s, b, 300);
    scratch_give(s, a, 100);
    ck_assert_uint_eq(vbm_scratch_bytes(s), 400 * sizeof(double)); /* what it keeps */
    ck_assert_ptr_eq(scratch_take(s, 50), a);   /* the smallest block large enough */
    ck_assert_ptr_eq(scratch_take(s, 101), b);  /* a is out: the next one that fits */
    ck_assert_uint_eq(vbm_scratch_bytes(s), 0); /* both taken */
    double *c = scratch_take(s, 10);            /* the pool is empty: a new block */
    ck_assert_ptr_nonnull(c);
    ck_assert_ptr_ne(c, a);
    ck_assert_ptr_ne(c, b);
    ck_assert_ptr_null(scratch_take(s, (size_t)VBM_MAX_ELEMENTS + 1));
    double *more[SCRATCH_SLOTS + 1];
    for (int i = 0; i <= SCRATCH_SLOTS; i++)
        more[i] = scratch_take(NULL, 8);
    for (int i = 0; i <= SCRATCH_SLOTS; i++) /* the last ones find the pool full: freed */
        scratch_give(s, more[i], 8);
    scratch_give(s, a, 100);
    scratch_give(s, b, 300);
    scratch_give(s, c, 10);
    scratch_give(NULL, scratch_take(NULL, 4), 4);
    vbm_scratch_free(s);
    vbm_scratch_free(NULL);
}
END_TEST

START_TEST(scratch_gives_same_bytes)
{
    const team_fit cases[] = {
        {.kind = VBM_MIXTURE, .C = 10, .K = 4, .H = 6, .G = 1, .T = 120}, /* direct path */
        {.kind = VBM_MIXTURE, .C = 40, .K = 4, .H = 7, .G = 1, .T = 30},  /* Gram path */
        {.kind = VBM_TREE, .C = 20, .K = 3, .H = 5, .G = 2, .T = 50},     /* two groups */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        team_fit alone = cases[c];
        team_fit_run(&alone);
        vbm_scratch *scratch = vbm_scratch_new();
        ck_assert_ptr_nonnull(scratch);
        /* a fit on other codes first leaves its blocks, with stale contents: a
         * smaller one (blocks too small for the next fit's P, though within what its
         * W needed), then a larger one (blocks larger than needed, taken and reused) */
        const long before[2] = {cases[c].T * cases[c].K / (cases[c].K + 1) + 1, 2 * cases[c].T + 7};
        for (int rep = 0; rep < 2; rep++) {
            team_fit pre = cases[c];
            pre.T = before[rep];
            pre.scratch = scratch;
            team_fit_run(&pre);
            team_fit_free(&pre);
            team_fit f = cases[c];
            f.scratch = scratch;
            team_fit_run(&f);
            team_fit_same(&f, &alone);
            team_fit_free(&f);
        }
        /* two fits with one scratch at once: one holds it, the other allocates */
        team_fit g[2] = {cases[c], cases[c]};
        pthread_t th[2];
        for (int i = 0; i < 2; i++) {
            g[i].scratch = scratch;
            pthread_create(&th[i], NULL, team_fit_run, &g[i]);
        }
        for (int i = 0; i < 2; i++) {
            pthread_join(th[i], NULL);
            team_fit_same(&g[i], &alone);
            team_fit_free(&g[i]);
        }
        vbm_scratch_free(scratch);
        team_fit_free(&alone);
    }
}
END_TEST

TCase *models_threads_tcase(void)
{
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, parallel_writes_match_sequential);
    tcase_add_test(tc, gram_path_equals_direct);
    tcase_add_test(tc, time_budget_stops_fit);
    tcase_add_test(tc, team_runs_every_item_once);
    tcase_add_test(tc, team_gives_same_bytes);
    tcase_add_test(tc, scratch_pool_semantics);
    tcase_add_test(tc, scratch_gives_same_bytes);
    return tc;
}
