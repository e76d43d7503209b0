/* options.c -- owns the option table, the config-file parser, the VBMEMD_* variables and the
 * command-line parser of vbmemd. */
#define _POSIX_C_SOURCE 200809L

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/backend.h"
#include "http/cors.h"
#include "vbmemd/options.h"

typedef enum { OPT_STR, OPT_INT, OPT_SIZE, OPT_DOUBLE, OPT_LEVEL, OPT_FLAG } opt_type;

typedef struct {
    const char *name; /* long option without "--"; config key; VBMEMD_ + upper snake */
    opt_type type;
    const char *deflt; /* NULL: unset */
    const char *help;
} opt_def;

enum {
    O_LISTEN,
    O_DATA_DIR,
    O_MODELS_DIR,
    O_DEFAULT_MODEL,
    O_THREADS,
    O_QUEUE_DEPTH,
    O_API_KEY_FILE,
    O_CONFIG,
    O_LOG_LEVEL,
    O_MAX_BODY,
    O_MAX_FRAMES,
    O_MAX_CODE,
    O_MAX_SESSIONS,
    O_MAX_MEMORY,
    O_MAX_ITER,
    O_MAX_SOLVE,
    O_MAX_READ,
    O_MAX_REQUEST_MEMORY,
    O_MAX_ANSWER_MEMORY,
    O_RETRY_AFTER,
    O_MAX_CONN,
    O_CONN_TIMEOUT,
    O_SHUTDOWN,
    O_MAX_RESIDENT,
    O_COMMIT_WAITERS,
    O_REDIS,
    O_EXPORT_ALL,
    O_IMPORT_ALL,
    O_TLS_CERT,
    O_TLS_KEY,
    O_METRICS_KEY,
    O_HELP,
    O_VERSION,
    O_PRINT_ROUTES,
    O_LIST_SESSIONS,
    O_QUEUE_TIMEOUT,
    O_CORS_ORIGIN,
    O_REDIS_SENTINEL,
    O_REDIS_SERVICE,
    O_REDIS_MIN_REPLICAS,
    O_REDIS_WAIT_TIMEOUT,
    O_TEST_HOLD_WRITES,
    O_COUNT
};

/* vbmemd_options.store holds one string per option. */
_Static_assert(O_COUNT <= (int)(sizeof(((vbmemd_options *)0)->store)
                                / sizeof(((vbmemd_options *)0)->store[0])),
               "vbmemd_options.store is too small for the option table");

static const opt_def opt_defs[O_COUNT] = {
    {"listen", OPT_STR, "127.0.0.1:8080",
     "ADDR:PORT to listen on ([V6]:PORT for IPv6; port 0 picks one)"},
    {"data-dir", OPT_STR, NULL,
     "directory of the durable session store (SQLite DIR/vbmem.db); none: sessions live in memory "
     "only"},
    {"models-dir", OPT_STR, NULL,
     "directory of model files NAME.safetensors, reloaded on SIGHUP (default: the bundled models; "
     "\"\" for none)"},
    {"default-model", OPT_STR, "fashion-mnist-mixture-v2",
     "model of sessions created without \"model\" or \"code_size\" (\"\" for none)"},
    {"threads", OPT_INT, NULL, "solver worker threads (default: the number of online CPUs)"},
    {"queue-depth", OPT_INT, "256", "jobs that may wait for a worker; past it requests get 503"},
    {"api-key-file", OPT_STR, NULL,
     "file of API keys, one per line: KEY [scope=read|write] [owner=NAME] [sessions=N] [bytes=N] "
     "[rps=R] (a bare key: scope write, no quotas; see below); reloaded on SIGHUP"},
    {"config", OPT_STR, NULL, "config file of \"name = value\" lines (names as the long options)"},
    {"log-level", OPT_LEVEL, "info", "error | warn | info | debug"},
    {"max-body-bytes", OPT_SIZE, "16777216", "largest request body (413 past it)"},
    {"max-frames", OPT_INT, "100000", "frames per episode, query or sample request"},
    {"max-code-size", OPT_INT, "65536", "largest code size C of a session"},
    {"max-sessions", OPT_INT, "10000", "sessions held at once (429 past it)"},
    {"max-memory-bytes", OPT_SIZE, "4294967296", "accounted bytes of all sessions (429 past it)"},
    {"max-iterations", OPT_INT, "1000", "VB iterations one request may ask for"},
    {"max-solve-seconds", OPT_DOUBLE, "30",
     "solver time budget of one write, append, refit or resize (seconds)"},
    {"max-read-steps", OPT_INT, "100", "iterations of one read"},
    {"max-request-memory", OPT_SIZE, "1073741824",
     "bytes one read, samples, clusters or memory-export request may hold, its work and its "
     "answer (the JSON text and tree); past it 422 naming the field that sizes it"},
    {"max-answer-memory", OPT_SIZE, "1073741824",
     "bytes all answers built and not yet read by their clients may hold together; an answer past "
     "it (above 64 KiB, while others are held) gets 503 + Retry-After"},
    {"retry-after", OPT_INT, "1", "seconds in Retry-After of 429 and 503 answers"},
    {"max-connections", OPT_INT, "1024",
     "open connections at once; a new one past it closes the one waiting longest for a request"},
    {"connection-timeout", OPT_INT, "60", "seconds an idle connection stays open"},
    {"shutdown-timeout", OPT_DOUBLE, "10", "seconds to finish in-flight jobs on SIGTERM/SIGINT"},
    {"max-resident", OPT_INT, "1000",
     "with --data-dir: idle sessions kept in memory (least recently used leave first)"},
    {"commit-waiters", OPT_INT, "32",
     "with --data-dir or --redis: extra workers for requests waiting on a durable commit (they "
     "hold no CPU slot meanwhile, so more writes share one group commit; 0..1024)"},
    {"redis", OPT_STR, NULL,
     "HOST:PORT of a Redis server that replicas share as their session store (instead of "
     "--data-dir; run it with appendonly yes, appendfsync always)"},
    {"export-all", OPT_STR, NULL,
     "with --data-dir: copy every stored session into the new SQLite file FILE and exit (command "
     "line only)"},
    {"import-all", OPT_STR, NULL,
     "with --data-dir: copy every session of the backup FILE into the store (replacing same ids) "
     "and exit; vbmemd must not be running (command line only)"},
    {"tls-cert", OPT_STR, NULL,
     "PEM certificate (chain) file: serve HTTPS (TLS 1.2/1.3) instead of HTTP; needs --tls-key; "
     "read at start (a new certificate needs a restart)"},
    {"tls-key", OPT_STR, NULL, "PEM private key file of --tls-cert"},
    {"metrics-key-required", OPT_INT, "0",
     "1: GET /metrics needs a valid API key (any scope; 401 without); needs --api-key-file"},
    {"help", OPT_FLAG, NULL, "print this help and exit"},
    {"version", OPT_FLAG, NULL, "print the version and exit"},
    {"print-routes", OPT_FLAG, NULL, "print the HTTP routes (METHOD PATH) and exit"},
    {"list-sessions", OPT_FLAG, NULL,
     "with --data-dir: print every stored session as a JSON line and exit"},
    {"queue-timeout", OPT_DOUBLE, "30",
     "seconds a job may wait in the queue for a worker; past it the request gets 503 without "
     "running"},
    {"cors-origin", OPT_STR, NULL,
     "ORIGIN (http[s]://HOST[:PORT]) whose pages may call this server from a browser (CORS); "
     "repeat it for more (the variable and config line take a blank- or comma-separated list); "
     "none by default: no CORS header is sent"},
    {"redis-sentinel", OPT_STR, NULL,
     "HOST:PORT[,HOST:PORT...] of Redis Sentinels to ask for the primary of --redis-service "
     "(instead of --redis); a failover is followed: on a lost connection or a demoted server they "
     "are asked again"},
    {"redis-service", OPT_STR, NULL, "with --redis-sentinel: the name the sentinels monitor"},
    {"redis-min-replicas", OPT_INT, NULL,
     "with --redis or --redis-sentinel: a write is acknowledged only once WAIT confirms it on N "
     "replicas, else 503 (default 1 with --redis-sentinel, 0 with --redis)"},
    {"redis-wait-timeout", OPT_INT, NULL,
     "milliseconds WAIT waits for --redis-min-replicas confirmations (1..60000, default 1000)"},
    /* A test hook, hidden (no help: --help does not list it) and command line only (no
     * variable, no config line): tests/http hold a write with it to observe what runs
     * meanwhile (http_server_config.test_hold_dir). Not for production. */
    {"test-hold-writes", OPT_STR, NULL, NULL},
};

/* Options that only the command line may give (one-shot commands, the test hook). */
static int opt_cli_only(int i)
{
    return i == O_EXPORT_ALL || i == O_IMPORT_ALL || i == O_TEST_HOLD_WRITES;
}

/* Name of the environment variable of option i into buf. */
static void opt_env_name(int i, char *buf, size_t len)
{
    size_t k, n;

    n = (size_t)snprintf(buf, len, "VBMEMD_%s", opt_defs[i].name);
    for (k = 7; k < n && k < len; k++)
        buf[k] = buf[k] == '-' ? '_' : (char)toupper((unsigned char)buf[k]);
}

/* Index of the option called name ('_' and '-' equivalent), or -1. */
static int opt_find(const char *name, size_t n)
{
    size_t k;
    int i;

    for (i = 0; i < O_COUNT; i++) {
        if (strlen(opt_defs[i].name) != n)
            continue;
        for (k = 0; k < n; k++) {
            char c = name[k] == '_' ? '-' : name[k];

            if (c != opt_defs[i].name[k])
                break;
        }
        if (k == n)
            return i;
    }
    return -1;
}

/* Set option i to a copy of value (replacing an earlier source's). */
static vbm_status opt_set(char **vals, int i, const char *value, vbm_error *err)
{
    char *copy = strdup(value);

    if (copy == NULL)
        return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
    free(vals[i]);
    vals[i] = copy;
    return VBM_OK;
}

/* Read "name = value" lines of path. */
static vbm_status opt_read_file(const char *path, char **vals, vbm_error *err)
{
    char line[4096], *p, *eq, *v;
    size_t n;
    int lineno = 0, i;
    FILE *fp = fopen(path, "r");

    if (fp == NULL)
        return vbm_fail(err, VBM_EINVAL, NULL, "config %s: %s", path, strerror(errno));
    while (fgets(line, sizeof line, fp) != NULL) {
        lineno++;
        p = line;
        while (isspace((unsigned char)*p))
            p++;
        n = strlen(p);
        while (n > 0 && isspace((unsigned char)p[n - 1]))
            p[--n] = '\0';
        if (n == 0 || p[0] == '#')
            continue;
        eq = strchr(p, '=');
        if (eq == NULL) {
            vbm_fail(err, VBM_EINVAL, NULL, "config %s:%d: expected name = value", path, lineno);
            fclose(fp);
            return err->status;
        }
        v = eq + 1;
        while (eq > p && isspace((unsigned char)eq[-1]))
            eq--;
        while (isspace((unsigned char)*v))
            v++;
        i = opt_find(p, (size_t)(eq - p));
        if (i < 0 || i == O_CONFIG || opt_defs[i].type == OPT_FLAG || opt_cli_only(i)) {
            vbm_fail(err, VBM_EINVAL, NULL, "config %s:%d: unknown option \"%.*s\"", path, lineno,
                     (int)(eq - p), p);
            fclose(fp);
            return err->status;
        }
        if (opt_set(vals, i, v, err) != VBM_OK) {
            fclose(fp);
            return err->status;
        }
    }
    fclose(fp);
    return VBM_OK;
}

/* Parse a long in [lo, hi]. */
static vbm_status opt_long(const char *name, const char *s, long lo, long hi, long *out,
                           vbm_error *err)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || s[0] == '\0' || *end != '\0' || v < lo || v > hi)
        return vbm_fail(err, VBM_EINVAL, NULL,
                        "--%s: expected an integer in [%ld, %ld], got \"%s\"", name, lo, hi, s);
    *out = v;
    return VBM_OK;
}

/* 1 when s is given and not empty. */
static int opt_given(const char *s)
{
    return s != NULL && s[0] != '\0';
}

/* The Redis options of o, checked together: one of --redis and
 * --redis-sentinel, a service with sentinels, WAIT's count and timeout. */
static vbm_status opt_convert_redis(char **vals, vbmemd_options *o, vbm_error *err)
{
    store_redis_addr addrs[STORE_REDIS_MAX_SENTINELS];
    vbm_error e; /* the address parser's, re-worded as an option's */
    const char *p;
    long v = 0;
    int n;

    if (opt_given(o->redis)
        && store_redis_parse_addrs(o->redis, "redis", addrs, 1, &n, &e) != VBM_OK)
        return vbm_fail(err, e.status, NULL, "--%s", e.msg);
    o->redis_sentinel = vals[O_REDIS_SENTINEL];
    o->redis_service = vals[O_REDIS_SERVICE];
    if (o->redis_sentinel != NULL) {
        if (store_redis_parse_addrs(o->redis_sentinel, "redis-sentinel", addrs,
                                    STORE_REDIS_MAX_SENTINELS, &n, &e)
            != VBM_OK)
            return vbm_fail(err, e.status, NULL, "--%s", e.msg);
        if (opt_given(o->redis))
            return vbm_fail(
                err, VBM_EINVAL, NULL,
                "--redis-sentinel: give --redis HOST:PORT or --redis-sentinel, not both");
        if (opt_given(o->data_dir))
            return vbm_fail(err, VBM_EINVAL, NULL,
                            "--redis-sentinel: give --data-dir or --redis-sentinel, not both");
        if (!opt_given(o->redis_service))
            return vbm_fail(err, VBM_EINVAL, NULL,
                            "--redis-service: needed with --redis-sentinel (the name the "
                            "sentinels monitor the primary under)");
        for (p = o->redis_service; *p != '\0'; p++) {
            if ((unsigned char)*p <= ' ' || (unsigned char)*p >= 0x7f)
                return vbm_fail(
                    err, VBM_EINVAL, NULL,
                    "--redis-service: expected a name without blanks or control bytes, got "
                    "\"%.100s\"",
                    o->redis_service);
        }
        if (strlen(o->redis_service) > 127)
            return vbm_fail(err, VBM_EINVAL, NULL, "--redis-service: longer than 127 bytes");
    } else if (o->redis_service != NULL)
        return vbm_fail(err, VBM_EINVAL, NULL, "--redis-service: needs --redis-sentinel");
    o->redis_min_replicas = o->redis_sentinel != NULL ? 1 : 0;
    o->redis_wait_timeout_ms = 1000;
    if (vals[O_REDIS_MIN_REPLICAS] != NULL) {
        if (!opt_given(o->redis) && o->redis_sentinel == NULL)
            return vbm_fail(err, VBM_EINVAL, NULL,
                            "--redis-min-replicas: needs --redis or --redis-sentinel");
        if (opt_long("redis-min-replicas", vals[O_REDIS_MIN_REPLICAS], 0, 64, &v, err) != VBM_OK)
            return err->status;
        o->redis_min_replicas = (int)v;
    }
    if (vals[O_REDIS_WAIT_TIMEOUT] != NULL) {
        if (!opt_given(o->redis) && o->redis_sentinel == NULL)
            return vbm_fail(err, VBM_EINVAL, NULL,
                            "--redis-wait-timeout: needs --redis or --redis-sentinel");
        if (opt_long("redis-wait-timeout", vals[O_REDIS_WAIT_TIMEOUT], 1, 60000, &v, err) != VBM_OK)
            return err->status;
        o->redis_wait_timeout_ms = (int)v;
    }
    return VBM_OK;
}

/* Convert the strings to the typed fields of o. */
static vbm_status opt_convert(char **vals, vbmemd_options *o, vbm_error *err)
{
    long v = 0;
    double d = 0.0;
    char *end;
    int i;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    o->listen = vals[O_LISTEN];
    o->data_dir = vals[O_DATA_DIR];
    o->models_dir = vals[O_MODELS_DIR];
    o->default_model = vals[O_DEFAULT_MODEL];
    o->api_key_file = vals[O_API_KEY_FILE];
    o->export_all = vals[O_EXPORT_ALL];
    o->redis = vals[O_REDIS];
    o->import_all = vals[O_IMPORT_ALL];
    o->config = vals[O_CONFIG];
    o->tls_cert = vals[O_TLS_CERT];
    o->tls_key = vals[O_TLS_KEY];
    o->test_hold_writes = vals[O_TEST_HOLD_WRITES];
    o->cors_origins = vals[O_CORS_ORIGIN];
    {
        http_cors cors;

        if (http_cors_parse(o->cors_origins, &cors, err) != VBM_OK)
            return err->status;
    }
    if (hlog_parse_level(vals[O_LOG_LEVEL], &o->log_level) != 0)
        return vbm_fail(err, VBM_EINVAL, NULL,
                        "--log-level: expected error, warn, info or debug, got \"%s\"",
                        vals[O_LOG_LEVEL]);
    o->threads = ncpu > 0 ? (int)ncpu : 1;
    if (vals[O_THREADS] != NULL) {
        if (opt_long("threads", vals[O_THREADS], 1, 1024, &v, err) != VBM_OK)
            return err->status;
        o->threads = (int)v;
    }
    for (i = 0; i < O_COUNT; i++) {
        if (vals[i] == NULL || i == O_THREADS || i == O_REDIS_MIN_REPLICAS
            || i == O_REDIS_WAIT_TIMEOUT)
            continue;
        switch (opt_defs[i].type) {
        case OPT_INT:
            if (opt_long(opt_defs[i].name, vals[i], 0, INT_MAX, &v, err) != VBM_OK)
                return err->status;
            break;
        case OPT_SIZE:
            if (opt_long(opt_defs[i].name, vals[i], 1, LONG_MAX, &v, err) != VBM_OK)
                return err->status;
            break;
        case OPT_DOUBLE:
            errno = 0;
            d = strtod(vals[i], &end);
            if (errno != 0 || *end != '\0' || vals[i][0] == '\0' || !(d > 0.0) || !isfinite(d))
                return vbm_fail(err, VBM_EINVAL, NULL, "--%s: expected a number > 0, got \"%s\"",
                                opt_defs[i].name, vals[i]);
            v = 0;
            break;
        default: continue;
        }
        switch (i) {
        case O_QUEUE_DEPTH: o->queue_depth = (int)v; break;
        case O_MAX_BODY: o->limits.max_body_bytes = (size_t)v; break;
        case O_MAX_FRAMES: o->limits.max_frames = v; break;
        case O_MAX_CODE: o->limits.max_code_size = (int)v; break;
        case O_MAX_SESSIONS: o->limits.max_sessions = v; break;
        case O_MAX_MEMORY: o->limits.max_memory_bytes = (size_t)v; break;
        case O_MAX_ITER: o->limits.max_iterations = (int)v; break;
        case O_MAX_SOLVE: o->limits.max_solve_seconds = d; break;
        case O_MAX_READ: o->limits.max_read_steps = (int)v; break;
        case O_MAX_REQUEST_MEMORY: o->limits.max_request_bytes = (size_t)v; break;
        case O_MAX_ANSWER_MEMORY: o->limits.max_answer_bytes = (size_t)v; break;
        case O_RETRY_AFTER: o->limits.retry_after_s = (int)v; break;
        case O_MAX_CONN: o->max_connections = (int)v; break;
        case O_CONN_TIMEOUT: o->connection_timeout_s = (int)v; break;
        case O_SHUTDOWN: o->shutdown_timeout_s = d; break;
        case O_QUEUE_TIMEOUT: o->queue_timeout_s = d; break;
        case O_MAX_RESIDENT: o->max_resident = v; break;
        case O_METRICS_KEY:
            if (v > 1)
                return vbm_fail(err, VBM_EINVAL, NULL,
                                "--metrics-key-required: expected 0 or 1, got \"%s\"", vals[i]);
            o->metrics_key_required = (int)v;
            break;
        case O_COMMIT_WAITERS: o->commit_waiters = (int)v; break;
        default: break;
        }
    }
    if (o->queue_depth < 1 || o->max_connections < 1 || o->limits.max_frames < 1
        || o->limits.max_code_size < 1 || o->limits.max_sessions < 1 || o->limits.max_read_steps < 1
        || o->max_resident < 1)
        return vbm_fail(err, VBM_EINVAL, NULL,
                        "queue-depth, max-connections, max-frames, max-code-size, "
                        "max-sessions, max-read-steps and max-resident must be >= 1");
    if (o->commit_waiters > 1024)
        return vbm_fail(err, VBM_EINVAL, NULL, "--commit-waiters: expected 0..1024, got %d",
                        o->commit_waiters);
    return opt_convert_redis(vals, o, err);
}

vbm_status vbmemd_options_read(int argc, char **argv, vbmemd_options *o, vbm_error *err)
{
    char **vals, env[64];
    const char *arg, *value, *config = NULL, *e;
    size_t n;
    int i, k, cors_given = 0;

    memset(o, 0, sizeof *o);
    vals = o->store;
    http_limits_default(&o->limits);
    for (i = 0; i < O_COUNT; i++) {
        if (opt_defs[i].deflt != NULL && opt_set(vals, i, opt_defs[i].deflt, err) != VBM_OK)
            return err->status;
    }
    /* The config file named on the command line (or in VBMEMD_CONFIG) is read
     * first so that the environment and the command line override it. */
    opt_env_name(O_CONFIG, env, sizeof env);
    config = getenv(env);
    for (k = 1; k < argc; k++) {
        if (strcmp(argv[k], "--config") == 0 && k + 1 < argc)
            config = argv[k + 1];
        else if (strncmp(argv[k], "--config=", 9) == 0)
            config = argv[k] + 9;
    }
    if (config != NULL && config[0] != '\0') {
        if (opt_set(vals, O_CONFIG, config, err) != VBM_OK
            || opt_read_file(config, vals, err) != VBM_OK)
            return err->status;
    }
    for (i = 0; i < O_COUNT; i++) {
        if (i == O_CONFIG || opt_defs[i].type == OPT_FLAG || opt_cli_only(i))
            continue;
        opt_env_name(i, env, sizeof env);
        e = getenv(env);
        if (e != NULL && opt_set(vals, i, e, err) != VBM_OK)
            return err->status;
    }
    for (k = 1; k < argc; k++) {
        arg = argv[k];
        if (strcmp(arg, "-h") == 0)
            arg = "--help";
        if (strncmp(arg, "--", 2) != 0)
            return vbm_fail(err, VBM_EINVAL, NULL, "unexpected argument \"%s\" (see --help)", arg);
        arg += 2;
        value = strchr(arg, '=');
        n = value != NULL ? (size_t)(value - arg) : strlen(arg);
        i = opt_find(arg, n);
        if (i < 0)
            return vbm_fail(err, VBM_EINVAL, NULL, "unknown option --%.*s (see --help)", (int)n,
                            arg);
        if (opt_defs[i].type == OPT_FLAG) {
            if (value != NULL)
                return vbm_fail(err, VBM_EINVAL, NULL, "--%s takes no value", opt_defs[i].name);
            if (i == O_HELP)
                o->help = 1;
            else if (i == O_VERSION)
                o->version = 1;
            else if (i == O_LIST_SESSIONS)
                o->list_sessions = 1;
            else
                o->print_routes = 1;
            continue;
        }
        if (value != NULL) {
            value++;
        } else {
            if (k + 1 >= argc)
                return vbm_fail(err, VBM_EINVAL, NULL, "--%s needs a value", opt_defs[i].name);
            value = argv[++k];
        }
        if (i == O_CORS_ORIGIN && cors_given) { /* repeated: every one counts */
            size_t len = strlen(vals[i]) + strlen(value) + 2;
            char *both = malloc(len);

            if (both == NULL)
                return vbm_fail(err, VBM_ENOMEM, NULL, "out of memory");
            snprintf(both, len, "%s %s", vals[i], value);
            free(vals[i]);
            vals[i] = both;
            continue;
        }
        cors_given |= i == O_CORS_ORIGIN;
        if (opt_set(vals, i, value, err) != VBM_OK)
            return err->status;
    }
    if (o->help || o->version || o->print_routes)
        return VBM_OK;
    return opt_convert(vals, o, err);
}

void vbmemd_options_usage(FILE *out)
{
    char env[64], left[64];
    int i;

    fputs("usage: vbmemd [OPTION]...\n"
          "\n"
          "vbmemd hosts episodic generative memories (libvbmem) behind an HTTP/JSON API\n"
          "(proto/openapi.yaml). A session holds one memory: on a hosted model it takes\n"
          "and returns images (through the model's encoder and decoder); a latent session\n"
          "takes the client's own codes.\n"
          "\n"
          "Every option can also be given as an environment variable (shown) or as a\n"
          "\"name = value\" line of the --config file. Precedence: command line >\n"
          "environment > config file > default.\n"
          "\n",
          out);
    for (i = 0; i < O_COUNT; i++) {
        if (opt_defs[i].help == NULL) /* hidden: the test hook */
            continue;
        if (opt_defs[i].type == OPT_FLAG) {
            snprintf(left, sizeof left, "--%s", opt_defs[i].name);
            fprintf(out, "  %-26s %s\n", left, opt_defs[i].help);
            continue;
        }
        opt_env_name(i, env, sizeof env);
        snprintf(left, sizeof left, "--%s %s", opt_defs[i].name,
                 opt_defs[i].type == OPT_STR     ? "VALUE"
                 : opt_defs[i].type == OPT_LEVEL ? "LEVEL"
                                                 : "N");
        fprintf(out, "  %-26s %s\n  %-26s [%s%s%s]\n", left, opt_defs[i].help, "", env,
                opt_defs[i].deflt != NULL ? ", default " : "",
                opt_defs[i].deflt != NULL ? opt_defs[i].deflt : "");
    }
    fputs("\nSignals: SIGTERM/SIGINT stop accepting, finish in-flight jobs (within\n"
          "--shutdown-timeout) and exit 0; SIGHUP reloads the API keys and the model files.\n"
          "\n"
          "API key file: one key per line, then optional words: scope=read (list and get\n"
          "sessions, samples, reads, models, encode/decode, GET memory; every write answers\n"
          "403) or scope=write (the default); owner=NAME (keys naming one owner share its\n"
          "sessions; default: the key owns its own); sessions=N (sessions of the owner),\n"
          "bytes=N (accounted bytes of the owner's sessions, resident or not), rps=R\n"
          "(requests per second of the key, bursts of max(1, R)); past a quota: 429 with\n"
          "Retry-After. A malformed line stops the start (or a SIGHUP reload: the old keys\n"
          "stay). TLS: --tls-cert and --tls-key (PEM) serve HTTPS only.\n"
          "\n"
          "Logs are JSON lines on stderr.\n",
          out);
}

void vbmemd_options_free(vbmemd_options *o)
{
    int i;

    for (i = 0; i < O_COUNT; i++) {
        free(o->store[i]);
        o->store[i] = NULL;
    }
}
