/* vb.c -- Check tests of libvbmem (test-models, tests/test_models.c): the VB updates: the ELBO
 * never decreases, KL identities, one iteration by hand, Theorem 4's q(s) and one mixture update
 * term by term, model equivalences, clustering recovery and sampling moments. */
#include "common.h"

/* ---- ELBO never decreases ---- */

static void check_monotone(vbm_kind kind, int shift, int K, int H, int G, double var)
{
    int C = 12;
    long T = 40;
    vbm_memory *m = make(kind, C, K, H, G);
    m->cfg.s_floor = 0.0; /* no smoothing of q(s): pure coordinate ascent */
    if (kind == VBM_GAUSSIAN)
        m->cfg.shift = shift;
    double *mu = randn(T * C, 11, 1.5), *s2 = NULL;
    if (var > 0) {
        s2 = malloc(sizeof(double) * T * C);
        for (long i = 0; i < T * C; i++)
            s2[i] = var * (1.0 + 0.5 * sin((double)i));
    }
    for (long i = 0; i < T * C; i++)
        mu[i] += (i / C) % 3 * 2.0; /* some structure */
    vbm_codes codes = {T, C, mu, s2};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 30;
    o.seed = 5;
    o.want_trace = 1;
    vbm_write_result res;
    write_ok(m, &codes, &o, &res);
    ck_assert_int_eq(res.iterations, 30);
    for (int i = 0; i < res.iterations; i++)
        ck_assert_msg(res.trace[i + 1] >= res.trace[i] - 1e-9 * fabs(res.trace[i]),
                      "%s: ELBO decreased at iteration %d: %.15g -> %.15g", vbm_kind_name(kind), i,
                      res.trace[i], res.trace[i + 1]);
    ck_assert_msg(res.trace[res.iterations] > res.trace[0], "%s: ELBO did not improve",
                  vbm_kind_name(kind));
    ck_assert(fabs(res.elbo.per_frame - res.trace[res.iterations])
              < 1e-12 * fabs(res.elbo.per_frame));
    vbm_write_result_free(&res);
    vbm_memory_free(m);
    free(mu);
    free(s2);
}

START_TEST(elbo_monotone_gaussian)
{
    check_monotone(VBM_GAUSSIAN, 0, 4, 1, 1, 0.0);
    check_monotone(VBM_GAUSSIAN, 0, 4, 1, 1, 0.1);
}
END_TEST
START_TEST(elbo_monotone_gaussian_shift)
{
    check_monotone(VBM_GAUSSIAN, 1, 4, 1, 1, 0.05);
}
END_TEST
START_TEST(elbo_monotone_categorical)
{
    check_monotone(VBM_CATEGORICAL, 0, 5, 1, 1, 0.05);
}
END_TEST
START_TEST(elbo_monotone_mixture)
{
    check_monotone(VBM_MIXTURE, 1, 3, 4, 1, 0.0);
    check_monotone(VBM_MIXTURE, 1, 3, 4, 1, 0.2);
}
END_TEST
START_TEST(elbo_monotone_tree)
{
    check_monotone(VBM_TREE, 1, 3, 3, 3, 0.1);
}
END_TEST

/* ---- KL terms vanish when q equals the prior ---- */

START_TEST(kl_zero_at_prior)
{
    vbm_kind kinds[] = {VBM_GAUSSIAN, VBM_CATEGORICAL, VBM_MIXTURE, VBM_TREE};
    for (int i = 0; i < 4; i++) {
        vbm_memory *m =
            make(kinds[i], 8, 3, kinds[i] >= VBM_MIXTURE ? 3 : 1, kinds[i] == VBM_TREE ? 2 : 1);
        double *mu = randn(10 * 8, 3, 1.0);
        vbm_codes codes = {10, 8, mu, NULL};
        vbm_elbo e;
        vbm_error err;
        ck_assert(vbm_elbo_eval(m, &codes, &e, NULL, &err) == VBM_OK);
        ck_assert_msg(fabs(e.kl_M) < 1e-10, "kl_M = %g", e.kl_M);
        ck_assert_msg(fabs(e.kl_b) < 1e-10, "kl_b = %g", e.kl_b);
        ck_assert(e.kl_w >= 0.0 && e.kl_s >= 0.0);
        vbm_memory_free(m);
        free(mu);
    }
    double mu0[3] = {0, 0, 0}, I3[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1}, th[4] = {.25, .25, .25, .25};
    ck_assert(fabs(kl_std_normal(3, mu0, 1, I3, 0.0)) < 1e-15);
    ck_assert(fabs(kl_uniform_cat(4, th)) < 1e-15);
    ck_assert(fabs(kl_iso_normal(3, mu0, 2.5, mu0, 2.5)) < 1e-15);
    double m1[3] = {1, 0, 0};
    ck_assert(kl_std_normal(3, m1, 1, I3, 0.0) > 0.4);
}
END_TEST

/* ---- one iteration of Theorem 1 computed by hand (K = C = 1) ---- */

START_TEST(hand_computed_iteration)
{
    vbm_config cfg;
    vbm_config_default(VBM_GAUSSIAN, 1, &cfg);
    cfg.rows = 1;
    cfg.sigma_z2 = 0.5;
    double R0 = 0.5, U0 = 2.0;
    vbm_memory *m;
    vbm_error err;
    ck_assert(vbm_memory_create(&cfg, &R0, &U0, &m, &err) == VBM_OK);
    double z[2] = {1.0, -2.0};
    vbm_codes codes = {2, 1, z, NULL};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 1;
    o.init = VBM_INIT_PRIOR;
    vbm_write_result res;
    write_ok(m, &codes, &o, &res);
    double s2 = 0.5;
    /* address step with R = 0.5, U = 2 */
    double A = 1.0 + (R0 * R0 + 1.0 * U0) / s2, Sw = 1.0 / A;
    double w1 = Sw * R0 * z[0] / s2, w2 = Sw * R0 * z[1] / s2;
    /* M step */
    double Q = 1.0 / U0 + (w1 * w1 + w2 * w2 + 2.0 * Sw) / s2;
    double R = (R0 / U0 + (w1 * z[0] + w2 * z[1]) / s2) / Q, U = 1.0 / Q;
    ck_assert_msg(rel(m->R[0], R) < 1e-13, "R %.17g vs %.17g", m->R[0], R);
    ck_assert_msg(rel(m->U[0], U) < 1e-13, "U %.17g vs %.17g", m->U[0], U);
    /* final address step and the ELBO */
    A = 1.0 + (R * R + U) / s2;
    Sw = 1.0 / A;
    double elbo = 0.0;
    for (int t = 0; t < 2; t++) {
        double w = Sw * R * z[t] / s2;
        double e = (z[t] - R * w) * (z[t] - R * w) + U * w * w + (R * R + U) * Sw;
        elbo += -0.5 * log(2 * VBM_PI * s2) - e / (2 * s2) - 0.5 * (Sw + w * w - 1.0 - log(Sw));
    }
    elbo -= 0.5 * (U / U0 + (R - R0) * (R - R0) / U0 - 1.0 - log(U) + log(U0));
    ck_assert_msg(rel(res.elbo.total, elbo) < 1e-12, "ELBO %.17g vs %.17g", res.elbo.total, elbo);
    vbm_write_result_free(&res);
    vbm_memory_free(m);
}
END_TEST

/* ---- q(s) with s_floor = 0 is Theorem 4's update exactly ---- */
/* With s_floor = 0, q(s) (and q(w | s)) from vbm_address equal Theorem 4's update
 * computed independently above, on a hand-set posterior whose far clusters give
 * q(s) far below the default floor's 1e-6 / H; with s_floor = f they are
 * (1 - f) q(s) + f / H. Mixture and tree. */
START_TEST(s_floor_zero_is_theorem4)
{
    int C = 6, K = 3, H = 4;
    long T = 5;
    vbm_kind kinds[2] = {VBM_MIXTURE, VBM_TREE};
    for (int i = 0; i < 2; i++) {
        int G = kinds[i] == VBM_TREE ? 2 : 1;
        vbm_memory *m = make(kinds[i], C, K, H, G);
        int cg = m->cg;
        size_t GH = (size_t)G * H;
        double *R = randn((long)GH * K * cg, 51 + i, 0.7),
               *A = randn((long)GH * K * K, 53 + i, 0.5), *B = randn((long)GH * cg, 55 + i, 4.0);
        memcpy(m->R, R, sizeof(double) * GH * K * cg);
        memcpy(m->mu_b, B, sizeof(double) * GH * cg);
        for (size_t gh = 0; gh < GH; gh++) { /* U_h = A A^T / K + 0.05 I, SPD */
            m->s2_b[gh] = 0.05 + 0.1 * (double)gh;
            for (int a = 0; a < K; a++)
                for (int b = 0; b < K; b++) {
                    double v = a == b ? 0.05 : 0.0;
                    for (int c = 0; c < K; c++)
                        v += A[(gh * K + a) * K + c] * A[(gh * K + b) * K + c] / K;
                    m->U[(gh * K + a) * K + b] = v;
                }
        }
        double *mu = randn(T * C, 57 + i, 1.0), *s2 = malloc(sizeof(double) * T * C);
        for (long j = 0; j < T * C; j++)
            s2[j] = 0.1 + 0.05 * (double)(j % 4); /* cancels in q(s) */
        for (long t = 0; t < T; t++) /* frame t sits near cluster t % H of each group */
            for (int g = 0; g < G; g++)
                for (int c = 0; c < cg; c++)
                    mu[t * C + g * cg + c] += B[((size_t)g * H + t % H) * cg + c];
        vbm_codes q = {T, C, mu, s2};
        double floors[2] = {0.0, 1e-6}, smallest = 1.0;
        for (int f = 0; f < 2; f++) {
            m->cfg.s_floor = floors[f];
            vbm_addresses a;
            vbm_error err;
            ck_assert_msg(vbm_address(m, &q, &a, &err) == VBM_OK, "%s", err.msg);
            for (long t = 0; t < T; t++)
                for (int g = 0; g < G; g++) {
                    double th[8], wm[64];
                    theorem4_qs(m, mu + t * C, g, th, wm);
                    for (int h = 0; h < H; h++) {
                        double want = (1.0 - floors[f]) * th[h] + floors[f] / H;
                        double got = a.s[((size_t)t * G + g) * H + h];
                        if (f == 0 && want < smallest)
                            smallest = want;
                        ck_assert_msg(fabs(got - want) <= 1e-9 * want,
                                      "%s, s_floor %g: q(s_%ld^%d = %d) = %.17g, Eq. 195 %.17g",
                                      vbm_kind_name(kinds[i]), floors[f], t, g, h, got, want);
                        for (int k = 0; k < K; k++) {
                            double gw = a.w_mu[(((size_t)t * G + g) * H + h) * K + k],
                                   ww = wm[h * K + k];
                            ck_assert_msg(fabs(gw - ww) <= 1e-10 * (1.0 + fabs(ww)),
                                          "%s: mu_w %.17g vs %.17g", vbm_kind_name(kinds[i]), gw,
                                          ww);
                        }
                    }
                }
            vbm_addresses_free(&a);
        }
        /* some q(s) lie far below the default floor's 1e-6 / H (about 1e-24 and 1e-31 here), yet
         * above 0 */
        ck_assert_msg(smallest > 0.0 && smallest < 1e-6 / H * 1e-6, "%s: smallest q(s) %g",
                      vbm_kind_name(kinds[i]), smallest);
        vbm_memory_free(m);
        free(R);
        free(A);
        free(B);
        free(mu);
        free(s2);
    }
}
END_TEST

/* ---- one mixture update computed term by term (Eq. 198-199, 206-207) ---- */

/* One iteration of vbm_write from the memory's current posterior (VBM_INIT_CURRENT, q(s)
 * floor 0) on the given solver: the new q(b_h), q(M_h) against the update equations computed
 * here from Theorem 4's q(s_t), E[w_t | s = h] (theorem4_qs) and Sigma_w,h of the starting
 * posterior, with a prior that has a nonzero mean (R0, mu_b0) and a non-diagonal U0:
 *   N_h = sum_t q_th, sw_h = sum_t q_th w_th,
 *   s2_bh = 1 / (1 / s2_b0 + N_h / s2),
 *   mu_bh = s2_bh (mu_b0 / s2_b0 + (sum_t q_th z_t - R_h^T sw_h) / s2)   (the old R_h),
 *   Q_h = U0^{-1} + (sum_t q_th w_th w_th^T + N_h Sigma_w,h) / s2,  U_h = Q_h^{-1},
 *   R_h = Q_h^{-1} (U0^{-1} R0 + (sum_t q_th w_th z_t^T - sw_h mu_bh^T) / s2)   (the new mu_bh). */
static void check_mixture_update(long T, vbm_solver solver)
{
    int C = 6, K = 3, H = 4;
    vbm_config cfg;
    vbm_config_default(VBM_MIXTURE, C, &cfg);
    cfg.rows = K;
    cfg.clusters = H;
    cfg.s_floor = 0.0;
    double *R0 = randn((long)K * C, 91, 0.6),
           U0[9] = {1.3, 0.4, 0.1, 0.4, 0.9, -0.2, 0.1, -0.2, 1.1};
    vbm_memory *m = NULL;
    vbm_error err;
    ck_assert_msg(vbm_memory_create(&cfg, R0, U0, &m, &err) == VBM_OK, "%s", err.msg);
    for (int c = 0; c < C; c++)
        m->mu_b0[c] = 0.3 * (c % 3) - 0.2;
    double *R = randn((long)H * K * C, 92, 0.7), *A = randn((long)H * K * K, 93, 0.5),
           *B = randn((long)H * C, 94, 3.0);
    memcpy(m->R, R, sizeof(double) * H * K * C);
    memcpy(m->mu_b, B, sizeof(double) * H * C);
    for (int h = 0; h < H; h++) { /* U_h = A A^T / K + 0.05 I */
        m->s2_b[h] = 0.05 + 0.1 * h;
        for (int a = 0; a < K; a++)
            for (int b = 0; b < K; b++) {
                double v = a == b ? 0.05 : 0.0;
                for (int c = 0; c < K; c++)
                    v += A[(h * K + a) * K + c] * A[(h * K + b) * K + c] / K;
                m->U[(h * K + a) * K + b] = v;
            }
    }
    double *mu = randn(T * C, 95, 1.0);
    for (long t = 0; t < T; t++) /* frame t near cluster t % H, with some spread */
        for (int c = 0; c < C; c++)
            mu[t * C + c] += B[(t % H) * C + c];
    /* the reference, from the starting posterior */
    double s2 = m->cfg.sigma_z2, s2b0 = m->cfg.sigma2_b0, P0[9], U0c[9], wantR[4 * 3 * 6],
           wantU[4 * 9], wantB[4 * 6], wantS2b[4];
    memcpy(U0c, U0, sizeof U0c);
    gj_inverse(K, U0c, P0);
    for (int h = 0; h < H; h++) {
        const double *Rh = m->R + (size_t)h * K * C, *Uh = m->U + (size_t)h * K * K;
        double L[9], Sw[9], N = 0.0, sw[3] = {0}, sz[6] = {0}, ww[9] = {0}, wz[3 * 6] = {0};
        for (int i = 0; i < K; i++)
            for (int j = 0; j < K; j++) {
                double v = C * Uh[i * K + j];
                for (int c = 0; c < C; c++)
                    v += Rh[i * C + c] * Rh[j * C + c];
                L[i * K + j] = (i == j) + v / s2;
            }
        gj_inverse(K, L, Sw);
        for (long t = 0; t < T; t++) {
            double th[8], wm[64];
            theorem4_qs(m, mu + t * C, 0, th, wm);
            double q = th[h], *w = wm + h * K;
            N += q;
            for (int i = 0; i < K; i++) {
                sw[i] += q * w[i];
                for (int j = 0; j < K; j++)
                    ww[i * K + j] += q * w[i] * w[j];
                for (int c = 0; c < C; c++)
                    wz[i * C + c] += q * w[i] * mu[t * C + c];
            }
            for (int c = 0; c < C; c++)
                sz[c] += q * mu[t * C + c];
        }
        double sb = 1.0 / (1.0 / s2b0 + N / s2), Q[9], Qi[9];
        wantS2b[h] = sb;
        for (int c = 0; c < C; c++) {
            double rw = 0.0;
            for (int k = 0; k < K; k++)
                rw += Rh[k * C + c] * sw[k];
            wantB[h * C + c] = sb * (m->mu_b0[c] / s2b0 + (sz[c] - rw) / s2);
        }
        for (int i = 0; i < K * K; i++)
            Q[i] = P0[i] + (ww[i] + N * Sw[i]) / s2;
        gj_inverse(K, Q, Qi);
        memcpy(wantU + h * K * K, Qi, sizeof Qi);
        for (int i = 0; i < K; i++)
            for (int c = 0; c < C; c++) {
                double v = 0.0;
                for (int j = 0; j < K; j++) {
                    double y = 0.0;
                    for (int l = 0; l < K; l++)
                        y += P0[j * K + l] * R0[l * C + c];
                    y += (wz[j * C + c] - sw[j] * wantB[h * C + c]) / s2;
                    v += Qi[i * K + j] * y;
                }
                wantR[(h * K + i) * C + c] = v;
            }
    }
    vbm_codes codes = {T, C, mu, NULL};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 1;
    o.init = VBM_INIT_CURRENT;
    o.solver = solver;
    vbm_write_result res;
    write_ok(m, &codes, &o, &res);
    ck_assert_int_eq(res.iterations, 1);
    const char *path = solver == VBM_SOLVER_DIRECT ? "direct" : "gram";
    double dR = max_rel_diff(m->R, wantR, (size_t)H * K * C),
           dU = max_rel_diff(m->U, wantU, (size_t)H * K * K),
           dB = max_rel_diff(m->mu_b, wantB, (size_t)H * C),
           dS = max_rel_diff(m->s2_b, wantS2b, (size_t)H);
    ck_assert_msg(dR <= 1e-10 && dU <= 1e-10 && dB <= 1e-10 && dS <= 1e-12,
                  "%s path, T = %ld: R %.3g, U %.3g, mu_b %.3g, s2_b %.3g off the equations", path,
                  T, dR, dU, dB, dS);
    vbm_write_result_free(&res);
    vbm_memory_free(m);
    free(R0);
    free(R);
    free(A);
    free(B);
    free(mu);
}

START_TEST(mixture_update_is_theorem4)
{
    check_mixture_update(40, VBM_SOLVER_DIRECT); /* T > C: the direct update */
    check_mixture_update(40, VBM_SOLVER_GRAM);
    check_mixture_update(5, VBM_SOLVER_AUTO); /* T <= C: the Gram update */
    check_mixture_update(5, VBM_SOLVER_DIRECT);
}
END_TEST

/* ---- model equivalences from the same initialisation ---- */

START_TEST(mixture_h1_equals_shifted_gaussian)
{
    int C = 10, K = 3;
    long T = 25;
    double *mu = randn(T * C, 21, 2.0);
    for (long i = 0; i < T * C; i++)
        mu[i] += 3.0;
    vbm_codes codes = {T, C, mu, NULL};
    /* a random prior mean: with R0 = 0 both would sit at the fixed point R = 0 */
    double *R0 = randn((long)K * C, 22, 1.0);
    vbm_config cfg;
    vbm_config_default(VBM_MIXTURE, C, &cfg);
    cfg.rows = K;
    cfg.clusters = 1;
    vbm_memory *mix, *gau;
    vbm_error err;
    ck_assert(vbm_memory_create(&cfg, R0, NULL, &mix, &err) == VBM_OK);
    cfg.kind = VBM_GAUSSIAN;
    ck_assert(vbm_memory_create(&cfg, R0, NULL, &gau, &err) == VBM_OK);
    free(R0);
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 15;
    o.init = VBM_INIT_PRIOR;
    o.want_trace = 1;
    vbm_write_result r1, r2;
    write_ok(mix, &codes, &o, &r1);
    write_ok(gau, &codes, &o, &r2);
    ck_assert_msg(max_rel_diff(mix->R, gau->R, (size_t)K * C) < 1e-9, "R differs");
    ck_assert(max_rel_diff(mix->U, gau->U, (size_t)K * K) < 1e-9);
    ck_assert(max_rel_diff(mix->mu_b, gau->mu_b, C) < 1e-9);
    ck_assert(rel(mix->s2_b[0], gau->s2_b[0]) < 1e-12);
    ck_assert_msg(rel(r1.elbo.total, r2.elbo.total) < 1e-10, "%.15g vs %.15g", r1.elbo.total,
                  r2.elbo.total);
    for (int i = 0; i <= 15; i++)
        ck_assert(rel(r1.trace[i], r2.trace[i]) < 1e-10);
    vbm_write_result_free(&r1);
    vbm_write_result_free(&r2);
    vbm_memory_free(mix);
    vbm_memory_free(gau);
    free(mu);
}
END_TEST

START_TEST(tree_g1_equals_mixture)
{
    int C = 8;
    long T = 30;
    double *mu = randn(T * C, 33, 2.0);
    vbm_codes codes = {T, C, mu, NULL};
    vbm_memory *mix = make(VBM_MIXTURE, C, 2, 4, 1);
    vbm_memory *tree = make(VBM_TREE, C, 2, 4, 1);
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 12;
    o.seed = 99;
    vbm_write_result r1, r2;
    write_ok(mix, &codes, &o, &r1);
    write_ok(tree, &codes, &o, &r2);
    ck_assert(memcmp(mix->R, tree->R, sizeof(double) * 4 * 2 * C) == 0);
    ck_assert(memcmp(mix->mu_b, tree->mu_b, sizeof(double) * 4 * C) == 0);
    ck_assert(r1.elbo.total == r2.elbo.total);
    /* the tree keeps pseudocounts of its hard-assignment paths, one per frame */
    double n = 0.0;
    for (long i = 0; i < tree->n_paths; i++)
        n += tree->path_counts[i];
    ck_assert(n == (double)T);
    vbm_write_result_free(&r1);
    vbm_write_result_free(&r2);
    vbm_memory_free(mix);
    vbm_memory_free(tree);
    free(mu);
}
END_TEST

/* ---- clustering recovery: adjusted Rand index ---- */

static double adjusted_rand(const int *a, const int *b, long n, int ka, int kb)
{
    double *tab = calloc((size_t)ka * kb, sizeof(double)), *ra = calloc(ka, sizeof(double)),
           *rb = calloc(kb, sizeof(double));
    for (long i = 0; i < n; i++) {
        tab[a[i] * kb + b[i]] += 1;
        ra[a[i]] += 1;
        rb[b[i]] += 1;
    }
    double sij = 0, sa = 0, sb = 0;
    for (int i = 0; i < ka * kb; i++)
        sij += tab[i] * (tab[i] - 1) / 2;
    for (int i = 0; i < ka; i++)
        sa += ra[i] * (ra[i] - 1) / 2;
    for (int i = 0; i < kb; i++)
        sb += rb[i] * (rb[i] - 1) / 2;
    double tot = (double)n * (n - 1) / 2, exp_ = sa * sb / tot, maxi = 0.5 * (sa + sb);
    free(tab);
    free(ra);
    free(rb);
    return (sij - exp_) / (maxi - exp_);
}

START_TEST(mixture_recovers_clusters)
{
    int C = 16, H = 5;
    long T = 250;
    rng_t r;
    rng_seed(&r, 7);
    double *centers = randn((long)H * C, 8, 6.0);
    double *mu = malloc(sizeof(double) * T * C);
    int *truth = malloc(sizeof(int) * T), *found = malloc(sizeof(int) * T);
    for (long t = 0; t < T; t++) {
        truth[t] = (int)rng_below(&r, H);
        for (int c = 0; c < C; c++)
            mu[t * C + c] = centers[truth[t] * C + c] + 0.7 * rng_normal(&r);
    }
    vbm_memory *m = make(VBM_MIXTURE, C, 3, H, 1);
    vbm_codes codes = {T, C, mu, NULL};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 20;
    o.seed = 1;
    o.want_addresses = 1;
    vbm_write_result res;
    write_ok(m, &codes, &o, &res);
    for (long t = 0; t < T; t++) {
        int best = 0;
        for (int h = 1; h < H; h++)
            if (res.addr.s[t * H + h] > res.addr.s[t * H + best])
                best = h;
        found[t] = best;
    }
    double ari = adjusted_rand(truth, found, T, H, H);
    ck_assert_msg(ari >= 0.95, "adjusted Rand index %.3f < 0.95", ari);
    vbm_write_result_free(&res);
    vbm_memory_free(m);
    free(centers);
    free(mu);
    free(truth);
    free(found);
}
END_TEST

/* ---- samples match the posterior predictive moments ---- */

static void check_moments(vbm_memory *m, int gh, int cluster)
{
    int C = m->cfg.code_size, K = m->cfg.rows;
    long n = 40000;
    double *z = malloc(sizeof(double) * n * C);
    vbm_error err;
    ck_assert(vbm_sample(m, n, 1234, cluster, z, NULL, &err) == VBM_OK);
    const double *R = m->R + (size_t)gh * K * C, *U = m->U + (size_t)gh * K * K;
    double trU = 0.0;
    for (int k = 0; k < K; k++)
        trU += U[k * K + k];
    double iso = trU + (m->cfg.shift ? m->s2_b[gh] : 0.0) + m->cfg.sigma_z2;
    double *mean = calloc(C, sizeof(double)), *cov = calloc((size_t)C * C, sizeof(double));
    for (long i = 0; i < n; i++)
        for (int c = 0; c < C; c++)
            mean[c] += z[i * C + c] / n;
    for (long i = 0; i < n; i++)
        for (int a = 0; a < C; a++)
            for (int b = 0; b < C; b++)
                cov[a * C + b] += (z[i * C + a] - mean[a]) * (z[i * C + b] - mean[b]) / (n - 1);
    for (int a = 0; a < C; a++) {
        double expect_mean = m->cfg.shift ? m->mu_b[(size_t)gh * C + a] : 0.0;
        for (int b = 0; b < C; b++) {
            double ec = (a == b ? iso : 0.0);
            for (int k = 0; k < K; k++)
                ec += R[k * C + a] * R[k * C + b];
            double va = 0, vb = 0;
            va = cov[a * C + a];
            vb = cov[b * C + b];
            double se = sqrt((va * vb + ec * ec) / n); /* approx. std. error of a covariance */
            ck_assert_msg(fabs(cov[a * C + b] - ec) < 6 * se, "cov[%d][%d] %g vs %g (se %g)", a, b,
                          cov[a * C + b], ec, se);
        }
        double se = sqrt(cov[a * C + a] / n);
        ck_assert_msg(fabs(mean[a] - expect_mean) < 5 * se, "mean[%d] %g vs %g", a, mean[a],
                      expect_mean);
    }
    free(z);
    free(mean);
    free(cov);
}

START_TEST(samples_match_posterior)
{
    int C = 6;
    long T = 30;
    double *mu = randn(T * C, 44, 1.0);
    for (long i = 0; i < T * C; i++)
        mu[i] += 2.0 * (i % C == 0);
    vbm_codes codes = {T, C, mu, NULL};
    vbm_write_opts o;
    vbm_write_opts_default(&o);
    o.max_iter = 10;
    vbm_write_result res;
    vbm_memory *g = make(VBM_GAUSSIAN, C, 3, 1, 1);
    g->cfg.shift = 1;
    write_ok(g, &codes, &o, &res);
    vbm_write_result_free(&res);
    check_moments(g, 0, -1);
    vbm_memory *mx = make(VBM_MIXTURE, C, 2, 3, 1);
    write_ok(mx, &codes, &o, &res);
    vbm_write_result_free(&res);
    check_moments(mx, 2, 2);
    vbm_memory_free(g);
    vbm_memory_free(mx);
    free(mu);
}
END_TEST

TCase *models_vb_tcase(void)
{
    TCase *tc = tcase_create("vb");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, elbo_monotone_gaussian);
    tcase_add_test(tc, elbo_monotone_gaussian_shift);
    tcase_add_test(tc, elbo_monotone_categorical);
    tcase_add_test(tc, elbo_monotone_mixture);
    tcase_add_test(tc, elbo_monotone_tree);
    tcase_add_test(tc, kl_zero_at_prior);
    tcase_add_test(tc, hand_computed_iteration);
    tcase_add_test(tc, s_floor_zero_is_theorem4);
    tcase_add_test(tc, mixture_update_is_theorem4);
    tcase_add_test(tc, mixture_h1_equals_shifted_gaussian);
    tcase_add_test(tc, tree_g1_equals_mixture);
    tcase_add_test(tc, mixture_recovers_clusters);
    tcase_add_test(tc, samples_match_posterior);
    return tc;
}
