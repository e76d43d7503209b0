/* main.c -- owns the vbmemd process: options, signals (SIGTERM/SIGINT graceful stop, SIGHUP
 * reload), BLAS threading, start-up and orderly shutdown. */
#define _POSIX_C_SOURCE 200809L

#include <cblas.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "engine/hosted.h"
#include "engine/pool.h"
#include "engine/store.h"
#include "http/auth.h"
#include "http/log.h"
#include "http/server.h"
#include "http/tls.h"
#include "nets/nets.h"
#include "vbmem/vbmem.h"
#include "vbmemd/options.h"
#include "vbmemd/storage.h"

/* Check that path (when given) is an existing directory. */
static int main_check_dir(const hlog *lg, const char *what, const char *path)
{
    struct stat sb;

    if (path == NULL || path[0] == '\0')
        return 0;
    if (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        hlog_emit(lg, HLOG_ERROR, "not a directory", NULL,
                  json_pack("{s:s, s:s}", "option", what, "path", path));
        return -1;
    }
    return 0;
}

/* Whether this process's executable lies in the install prefix's bin directory
 * (VBMEM_INSTALLED_BINDIR, set by meson): the directory of /proc/self/exe and
 * that directory are the same file (device and inode; symlinks resolved). */
static int main_runs_installed(void)
{
    char exe[4096];
    struct stat a, b;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char *slash;

    if (n <= 0 || (size_t)n >= sizeof exe - 1)
        return 0;
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash == NULL)
        return 0;
    if (slash == exe)
        slash[1] = '\0';
    else
        *slash = '\0';
    if (stat(exe, &a) != 0 || stat(VBMEM_INSTALLED_BINDIR, &b) != 0)
        return 0;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* The models directory: the option when given ("" for none), else the first
 * existing of the installed DATADIR/vbmem/models and the source tree's
 * models/ when this executable runs from the install prefix's bin directory
 * (an installed vbmemd: the source tree may be gone, hidden or changed), the
 * other order otherwise (a build-tree vbmemd), else none. */
static const char *main_models_dir(const char *opt)
{
    static const char *const build_order[] = {VBMEM_SOURCE_MODELS_DIR, VBMEM_INSTALLED_MODELS_DIR};
    static const char *const installed_order[] = {VBMEM_INSTALLED_MODELS_DIR,
                                                  VBMEM_SOURCE_MODELS_DIR};
    const char *const *candidates = main_runs_installed() ? installed_order : build_order;
    struct stat sb;
    size_t i;

    if (opt != NULL)
        return opt;
    for (i = 0; i < 2; i++) {
        if (stat(candidates[i], &sb) == 0 && S_ISDIR(sb.st_mode))
            return candidates[i];
    }
    return "";
}

/* Log what a load of the models directory gave: one line per model, one
 * warning with the loader's message per file that failed, and a summary
 * event ("models loaded", or "reloaded" with the API key count when auth is
 * given). */
static void main_log_models(const hlog *lg, eng_models *models, const char *event, http_auth *auth)
{
    eng_model_set *set = eng_models_snapshot(models);
    json_t *fields;
    int i;

    for (i = 0; i < set->n; i++) {
        const eng_model_info *in = set->models[i]->info;

        if (in == NULL) { /* an RPM (nets/rpm.h) */
            const eng_rpm_info *ri = set->models[i]->rpm_info;

            hlog_emit(lg, HLOG_INFO, "model", NULL,
                      json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:s}", "name", set->models[i]->name,
                                "file", set->models[i]->path, "kind", "rpm", "factors", ri->factors,
                                "observation_size", ri->obs_size, "latent_size", ri->latent,
                                "sha256", set->models[i]->sha256));
            continue;
        }
        hlog_emit(lg, HLOG_INFO, "model", NULL,
                  json_pack("{s:s, s:s, s:[i, i, i], s:i, s:s, s:s}", "name", set->models[i]->name,
                            "file", set->models[i]->path, "observation_shape", in->channels,
                            in->height, in->width, "code_size", in->code_size, "memory", in->kind,
                            "sha256", set->models[i]->sha256));
    }
    for (i = 0; i < set->n_failed; i++)
        hlog_emit(
            lg, HLOG_WARN, "model file skipped", NULL,
            json_pack("{s:s, s:s}", "file", set->failed[i].file, "detail", set->failed[i].msg));
    fields = json_pack("{s:i, s:i, s:s, s:s}", "models", set->n, "models_failed", set->n_failed,
                       "models_dir", eng_models_dir(models), "default_model",
                       eng_models_default_name(models));
    if (fields != NULL && auth != NULL)
        json_object_set_new(fields, "api_keys", json_integer(http_auth_count(auth)));
    hlog_event(lg, event, fields);
    eng_model_set_release(set);
}

/* Log what the start-up check of the store found (nothing for a store that was not checked):
 * info when sound, an error naming the corrupt records (the first few) otherwise. */
static void main_log_store_check(const hlog *lg, const vbmemd_store_check *c)
{
    json_t *ids;
    long i;
    int sound = strcmp(c->quick_check, "ok") == 0 && c->corrupt == 0;

    if (!c->ran)
        return;
    ids = json_array();
    for (i = 0; ids != NULL && i < c->corrupt && i < VBMEMD_CHECK_IDS; i++)
        json_array_append_new(ids, json_string(c->corrupt_ids[i]));
    hlog_emit(lg, sound ? HLOG_INFO : HLOG_ERROR,
              sound ? "store check" : "store check: corrupt records are skipped until deleted",
              NULL,
              json_pack("{s:s, s:I, s:I, s:o}", "quick_check", c->quick_check, "records",
                        (json_int_t)c->records, "corrupt", (json_int_t)c->corrupt, "corrupt_ids",
                        ids != NULL ? ids : json_array()));
}

/* Pool threads use the cores; BLAS gets what is left per worker (at least 1). */
static int main_blas_threads(int workers)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int per = 1;

    if (ncpu > workers && workers > 0)
        per = (int)(ncpu / workers);
    openblas_set_num_threads(per);
    return per;
}

/* Every write allocates and frees buffers of ~0.1-4 MB (libvbmem's transactional
 * copy, codes, addresses). glibc's defaults return them to the kernel and fault
 * them in again on the next request (page faults were ~15% of a write's CPU);
 * keep them in the heap instead. Each malloc arena keeps what it held at its
 * peak, and glibc makes up to 8 per core: the workers of a durable store's
 * pool (--commit-waiters) would spread loads and evictions over all of them
 * and RSS would grow past the resident bound, so arenas are capped at the
 * threads that can allocate at once (the CPU slots, plus the HTTP thread and
 * one spare). Returns 0 when glibc accepted all three. */
static int main_tune_malloc(int threads)
{
    int ok = mallopt(M_MMAP_THRESHOLD, 4 << 20);

    ok &= mallopt(M_TRIM_THRESHOLD, 64 << 20);
    ok &= mallopt(M_ARENA_MAX, threads + 2);
    return ok ? 0 : -1;
}

/* Wait for signals, expiring idle sessions every second, until SIGTERM/SIGINT;
 * SIGHUP reloads the API keys and the models. */
static int main_loop(const sigset_t *set, const hlog *lg, eng_store *store, http_auth *auth,
                     eng_models *models)
{
    struct timespec tick = {1, 0};
    vbm_error err;
    long n;
    int sig;

    for (;;) {
        sig = sigtimedwait(set, NULL, &tick);
        if (sig < 0) {
            if (errno == EAGAIN) {
                n = eng_store_expire(store, (long long)(eng_now() * 1000.0));
                if (n > 0)
                    hlog_emit(lg, HLOG_INFO, "sessions expired", NULL,
                              json_pack("{s:I}", "count", (json_int_t)n));
            }
            continue;
        }
        if (sig == SIGHUP) {
            if (http_auth_reload(auth, &err) != VBM_OK)
                hlog_emit(lg, HLOG_ERROR, "reload failed; keeping the previous keys", NULL,
                          json_pack("{s:s}", "detail", err.msg));
            if (eng_models_reload(models, &err) != VBM_OK)
                hlog_emit(lg, HLOG_ERROR, "model reload failed; keeping the previous models", NULL,
                          json_pack("{s:s}", "detail", err.msg));
            main_log_models(lg, models, "reloaded", auth);
            continue;
        }
        return sig;
    }
}

int main(int argc, char **argv)
{
    vbmemd_options opt;
    hlog lg = {HLOG_INFO, stderr};
    http_server_config scfg;
    eng_pool *pool = NULL;
    eng_store *store = NULL;
    http_auth *auth = NULL;
    http_server *srv = NULL;
    eng_models *models = NULL;
    http_tls tls = {NULL, NULL};
    sigset_t set;
    vbmemd_store_check check;
    vbm_error err;
    double t0, left;
    int sig, blas, durable = 0, rc = 1;

    if (vbmemd_options_read(argc, argv, &opt, &err) != VBM_OK) {
        fprintf(stderr, "vbmemd: %s\n", err.msg);
        vbmemd_options_free(&opt);
        return 2;
    }
    if (opt.help || opt.version || opt.print_routes) {
        if (opt.help)
            vbmemd_options_usage(stdout);
        else if (opt.version)
            printf("vbmemd %s\n", VBM_VERSION_STRING);
        else
            http_server_print_routes(stdout);
        vbmemd_options_free(&opt);
        return fflush(stdout) == 0 ? 0 : 1;
    }
    if (vbmemd_storage_is_command(&opt)) {
        rc = vbmemd_storage_command(&opt, stdout, stderr, &err) == VBM_OK ? 0 : 1;
        if (rc != 0)
            fprintf(stderr, "vbmemd: %s\n", err.msg);
        vbmemd_options_free(&opt);
        return rc;
    }
    /* the networks' path from VBMEM_NETS_PATH: a name that is not a path, or one this CPU or
     * build cannot run, stops the daemon here rather than being ignored */
    nets_path np;
    if (nets_path_from_env(&np, &err) != VBM_OK) {
        fprintf(stderr, "vbmemd: %s\n", err.msg);
        vbmemd_options_free(&opt);
        return 2;
    }
    lg.level = opt.log_level;
    if (main_tune_malloc(opt.threads) != 0)
        hlog_emit(&lg, HLOG_WARN, "mallopt refused the heap thresholds", NULL, NULL);

    /* Signals are taken synchronously by this thread only: block them before
     * any thread starts so that every thread inherits the mask. */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (main_check_dir(&lg, "data-dir", opt.data_dir) != 0
        || main_check_dir(&lg, "models-dir", opt.models_dir) != 0)
        goto out;
    if (http_auth_create(opt.api_key_file, &auth, &err) != VBM_OK) {
        hlog_emit(&lg, HLOG_ERROR, "cannot load API keys", NULL,
                  json_pack("{s:s}", "detail", err.msg));
        goto out;
    }
    if (http_tls_load(opt.tls_cert, opt.tls_key, &tls, &err) != VBM_OK) {
        hlog_emit(&lg, HLOG_ERROR, "cannot load the TLS certificate", NULL,
                  json_pack("{s:s, s:s}", "option", err.field, "detail", err.msg));
        goto out;
    }
    if (opt.metrics_key_required && !http_auth_enabled(auth)) {
        hlog_emit(&lg, HLOG_ERROR, "--metrics-key-required needs --api-key-file", NULL, NULL);
        goto out;
    }
    if (eng_models_create(main_models_dir(opt.models_dir), opt.default_model, &models, &err)
        != VBM_OK) {
        hlog_emit(&lg, HLOG_ERROR, "cannot load models", NULL,
                  json_pack("{s:s}", "detail", err.msg));
        goto out;
    }
    main_log_models(&lg, models, "models loaded", NULL);
    blas = main_blas_threads(opt.threads);
    if (vbmemd_storage_open(&opt, &store, &durable, &check, &err) != VBM_OK
        || eng_pool_create_blocking(opt.threads, durable ? opt.commit_waiters : 0, opt.queue_depth,
                                    &pool, &err)
               != VBM_OK) {
        hlog_emit(&lg, HLOG_ERROR, "cannot start", NULL, json_pack("{s:s}", "detail", err.msg));
        goto out;
    }
    main_log_store_check(&lg, &check);
    eng_pool_set_max_wait(pool, opt.queue_timeout_s);
    if (durable) /* workers waiting for a commit free their CPU slot: group commit */
        eng_store_set_wait(store, eng_pool_block, pool);
    memset(&scfg, 0, sizeof scfg);
    scfg.listen = opt.listen;
    scfg.queue_timeout_s = opt.queue_timeout_s;
    scfg.max_connections = opt.max_connections;
    scfg.connection_timeout_s = opt.connection_timeout_s;
    scfg.models_dir = eng_models_dir(models);
    scfg.models = models;
    scfg.data_dir = opt.data_dir;
    scfg.limits = opt.limits;
    scfg.tls_cert_pem = tls.cert_pem;
    scfg.tls_key_pem = tls.key_pem;
    scfg.metrics_key_required = opt.metrics_key_required;
    scfg.cors_origins = opt.cors_origins;
    scfg.test_hold_dir = opt.test_hold_writes;
    if (opt.test_hold_writes != NULL)
        hlog_emit(&lg, HLOG_WARN, "test hook on: writes wait while DIR/ID.hold exists", NULL,
                  json_pack("{s:s}", "test_hold_writes", opt.test_hold_writes));
    if (http_server_start(&scfg, pool, store, auth, &lg, &srv, &err) != VBM_OK) {
        hlog_emit(&lg, HLOG_ERROR, "cannot listen", NULL,
                  json_pack("{s:s, s:s}", "listen", opt.listen, "detail", err.msg));
        goto out;
    }
    hlog_event(&lg, "listening",
               json_pack("{s:s, s:i, s:i, s:i, s:i, s:b, s:b, s:s, s:s}", "listen", opt.listen,
                         "port", http_server_port(srv), "threads", opt.threads, "queue_depth",
                         opt.queue_depth, "blas_threads", blas, "api_keys", http_auth_enabled(auth),
                         "tls", http_tls_enabled(&tls), "version", VBM_VERSION_STRING, "store",
                         !durable                     ? "memory"
                         : opt.redis_sentinel != NULL ? "redis-sentinel"
                         : opt.redis != NULL          ? "redis"
                                                      : "sqlite"));

    sig = main_loop(&set, &lg, store, auth, models);

    t0 = eng_now();
    hlog_event(&lg, "shutting down",
               json_pack("{s:s, s:f}", "signal", sig == SIGINT ? "SIGINT" : "SIGTERM", "deadline_s",
                         opt.shutdown_timeout_s));
    http_server_begin_shutdown(srv);
    if (eng_pool_drain(pool, opt.shutdown_timeout_s) != VBM_OK) {
        /* Jobs still run inside libvbmem and cannot be interrupted: leave now
         * without freeing what they use. */
        hlog_emit(&lg, HLOG_ERROR, "shutdown deadline passed with jobs still running", NULL, NULL);
        _exit(1);
    }
    left = opt.shutdown_timeout_s - (eng_now() - t0);
    if (http_server_wait_idle(srv, left > 0.5 ? left : 0.5) != VBM_OK)
        hlog_emit(&lg, HLOG_WARN, "closing connections with unsent responses", NULL, NULL);
    http_server_stop(srv);
    srv = NULL;
    hlog_event(&lg, "stopped", json_pack("{s:f}", "seconds", eng_now() - t0));
    rc = 0;
out:
    http_server_stop(srv);
    if (store != NULL)
        eng_store_set_wait(store, NULL, NULL); /* the pool goes first */
    eng_pool_free(pool);
    eng_store_free(store);
    eng_models_free(models);
    http_auth_free(auth);
    http_tls_free(&tls);
    vbmemd_options_free(&opt);
    return rc;
}
