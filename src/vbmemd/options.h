/* options.h -- owns vbmemd's options: the table of every option, and reading them from defaults, a
 * config file, VBMEMD_* variables and the command line. */
#ifndef VBMEM_VBMEMD_OPTIONS_H
#define VBMEM_VBMEMD_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

#include "http/log.h"
#include "http/server.h"

/* Everything vbmemd is configured with. Strings point into the options' own
 * storage and live until vbmemd_options_free. */
typedef struct {
    const char *listen;
    const char *data_dir;         /* NULL: none */
    const char *models_dir;       /* NULL: the bundled models; "": none */
    const char *default_model;    /* "": none */
    const char *api_key_file;     /* NULL: no API keys */
    const char *config;           /* the config file read, NULL: none */
    const char *export_all;       /* --export-all FILE, NULL: none */
    const char *import_all;       /* --import-all FILE, NULL: none */
    long max_resident;            /* resident sessions of the durable store */
    const char *redis;            /* --redis HOST:PORT, NULL: none */
    const char *redis_sentinel;   /* --redis-sentinel HOST:PORT[,...], NULL: none */
    const char *redis_service;    /* --redis-service NAME, NULL: none */
    int redis_min_replicas;       /* WAIT for this many replicas (1 with sentinels, else 0) */
    int redis_wait_timeout_ms;    /* WAIT's timeout */
    const char *tls_cert;         /* --tls-cert FILE, NULL: plain HTTP */
    const char *tls_key;          /* --tls-key FILE */
    int metrics_key_required;     /* 1: /metrics needs an API key */
    const char *cors_origins;     /* --cors-origin, every one given, blank-separated; NULL: none */
    const char *test_hold_writes; /* hidden --test-hold-writes DIR (tests only), NULL: off */
    int commit_waiters; /* extra pool workers of a durable store (eng_pool_create_blocking) */
    int threads;
    int queue_depth;
    int max_connections;
    int connection_timeout_s;
    double shutdown_timeout_s;
    double queue_timeout_s; /* --queue-timeout: longest wait of a job in the queue */
    hlog_level log_level;
    http_limits limits;
    int help;
    int version;
    int print_routes;
    int list_sessions;
    char *store[64]; /* owned option strings, one per option (options.c asserts there is room) */
} vbmemd_options;

/* Read the options: defaults, then the config file (--config or
 * VBMEMD_CONFIG), then VBMEMD_* environment variables, then the command line
 * (later sources win). Returns VBM_OK, or VBM_EINVAL (unknown option, missing or
 * malformed value, unreadable config file) or VBM_ENOMEM with err's message naming the
 * option; *o must be released with vbmemd_options_free in both cases. */
vbm_status vbmemd_options_read(int argc, char **argv, vbmemd_options *o, vbm_error *err);

/* Print the usage text listing every option, its variable and its default. */
void vbmemd_options_usage(FILE *out);

/* Release the strings held by o. */
void vbmemd_options_free(vbmemd_options *o);

#endif
