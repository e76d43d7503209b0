/* fuzz_request.c -- owns the whole-request libFuzzer harness: each input is sent as raw bytes
 * (method, path, headers, body) over loopback to the real vbmemd HTTP server, started in this
 * process with an in-memory store and the bundled model, and every answer is checked. */
#define _GNU_SOURCE /* memmem */

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine/hosted.h"
#include "engine/pool.h"
#include "engine/store.h"
#include "fuzz_check.h"
#include "http/auth.h"
#include "http/server.h"

/* The server of this process. libFuzzer calls the harness without a context, so
 * the one server, started once by LLVMFuzzerInitialize, is the harness's only
 * state outside a call (it lives until the process exits). */
typedef struct {
    eng_pool *pool;
    eng_store *store;
    eng_models *models;
    http_auth *auth;
    hlog log;
    http_server *srv;
    int port;
} fuzz_daemon;

static fuzz_daemon fuzz_d;

#define FUZZ_ANSWER_MAX (8u << 20) /* bytes of answer read per input */
/* an answer (or the close) must come within this: a model read under ASan on a
 * loaded machine takes tens of seconds */
#define FUZZ_WAIT_MS     180000
#define FUZZ_IDLE_MS     200 /* silence to a partial request */
#define FUZZ_TAIL_MS     20  /* silence after whole answers */
#define FUZZ_MAX_ANSWERS 64

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Start the server on 127.0.0.1, a free port: the bundled models, no API keys,
 * small limits (so that no valid request is slow), 2 workers. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    http_server_config cfg;
    vbm_error err;

    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    fuzz_d.log.level = HLOG_ERROR;
    fuzz_d.log.out = stderr;
    memset(&cfg, 0, sizeof cfg);
    cfg.listen = "127.0.0.1:0";
    cfg.max_connections = 512; /* connections the harness left wait for their timeout */
    cfg.connection_timeout_s = 2;
    http_limits_default(&cfg.limits);
    cfg.limits.max_body_bytes = 1u << 20;
    cfg.limits.max_frames = 16;
    cfg.limits.max_code_size = 64;
    cfg.limits.max_sessions = 256;
    cfg.limits.max_memory_bytes = 256u << 20;
    cfg.limits.max_iterations = 20;
    cfg.limits.max_solve_seconds = 2.0;
    cfg.limits.max_read_steps = 5;
    {
        eng_store_limits sl = {cfg.limits.max_sessions, cfg.limits.max_memory_bytes};
        FUZZ_CHECK(
            http_auth_create(NULL, &fuzz_d.auth, &err) == VBM_OK
                && eng_models_create(FUZZ_MODELS_DIR, "fashion-mnist-mixture", &fuzz_d.models, &err)
                       == VBM_OK
                && eng_store_memory_create(&sl, &fuzz_d.store, &err) == VBM_OK
                && eng_pool_create(2, 64, &fuzz_d.pool, &err) == VBM_OK,
            "cannot set up the daemon: %s", err.msg);
    }
    cfg.models = fuzz_d.models;
    cfg.models_dir = eng_models_dir(fuzz_d.models);
    FUZZ_CHECK(http_server_start(&cfg, fuzz_d.pool, fuzz_d.store, fuzz_d.auth, &fuzz_d.log,
                                 &fuzz_d.srv, &err)
                   == VBM_OK,
               "cannot start the server: %s", err.msg);
    fuzz_d.port = http_server_port(fuzz_d.srv);
    return 0;
}

/* The value of header name in the header block h[0..n) (not NUL-terminated)
 * copied into out (cap bytes), or 0 when absent. */
static int fuzz_header(const char *h, size_t n, const char *name, char *out, size_t cap)
{
    size_t i = 0, nl = strlen(name), e, v;

    while (i < n) {
        for (e = i; e + 1 < n && !(h[e] == '\r' && h[e + 1] == '\n'); e++)
            ;
        if (e + 1 >= n)
            e = n;
        if (e - i > nl && strncasecmp(h + i, name, nl) == 0 && h[i + nl] == ':') {
            for (v = i + nl + 1; v < e && h[v] == ' '; v++)
                ;
            snprintf(out, cap, "%.*s", (int)(e - v), h + v);
            return 1;
        }
        i = e + 2;
    }
    return 0;
}

/* 1 when data[0..len) holds a whole first request: the end of its headers and,
 * when it has a Content-Length, that many body bytes (a chunked body counts as
 * not known to be whole). The server must answer such a request; to anything
 * else it may rightly wait for more bytes until its connection timeout. */
static int fuzz_request_whole(const uint8_t *data, size_t len)
{
    const uint8_t *end = memmem(data, len, "\r\n\r\n", 4);
    char v[32];
    size_t h;

    if (end == NULL)
        return 0;
    h = (size_t)(end - data) + 4;
    if (fuzz_header((const char *)data, h - 2, "Transfer-Encoding", v, sizeof v))
        return 0;
    if (fuzz_header((const char *)data, h - 2, "Content-Length", v, sizeof v))
        return v[0] >= '0' && v[0] <= '9' && strtoull(v, NULL, 10) <= len - h;
    return 1;
}

/* 1 when buf[0..n) is one or more whole answers (status line, headers, and
 * Content-Length bytes of body, or no body when the next answer follows). */
static int fuzz_answers_whole(const char *buf, size_t n)
{
    const char *end;
    char v[32];
    size_t i = 0, h, len;

    while (i < n) {
        end = memmem(buf + i, n - i, "\r\n\r\n", 4);
        if (end == NULL)
            return 0;
        h = (size_t)(end - buf) + 4;
        len = 0;
        if (fuzz_header(buf + i, h - 2 - i, "Content-Length", v, sizeof v))
            len = strtoull(v, NULL, 10);
        if (len > n - h)
            return 0;
        i = h + len;
    }
    return n > 0;
}

/* Send len bytes to the server on a new connection and read the answer into
 * buf (at most cap bytes) until the server closes, or, once the bytes read are
 * whole answers, until nothing more comes for FUZZ_TAIL_MS (a kept-alive
 * connection stays open). Returns the bytes read. When the input is a
 * whole request, or an answer has begun, a server that neither answers nor
 * closes within FUZZ_WAIT_MS is a finding; to another input it may rightly say
 * nothing (it waits for the rest), and the harness stops waiting after
 * FUZZ_IDLE_MS. */
static size_t fuzz_exchange(const uint8_t *data, size_t len, char *buf, size_t cap)
{
    struct sockaddr_in a;
    struct pollfd p;
    size_t sent = 0, got = 0;
    ssize_t k;
    int fd, rc, whole = fuzz_request_whole(data, len), wait;

    fd = socket(AF_INET, SOCK_STREAM, 0);
    FUZZ_CHECK(fd >= 0, "socket: %s", strerror(errno));
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)fuzz_d.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
    while (sent < len) {
        k = send(fd, data + sent, len - sent, MSG_NOSIGNAL);
        if (k <= 0)
            break; /* the server may close early (a bad request) */
        sent += (size_t)k;
    }
    /* (no half-close: libmicrohttpd 0.9.75 may drop a whole request whose FIN it
     * reads before answering) */
    for (;;) {
        if (got > 0 && fuzz_answers_whole(buf, got))
            wait = FUZZ_TAIL_MS;
        else if (got > 0 || whole)
            wait = FUZZ_WAIT_MS;
        else
            wait = FUZZ_IDLE_MS;
        p.fd = fd;
        p.events = POLLIN;
        rc = poll(&p, 1, wait);
        if (rc == 0 && wait != FUZZ_WAIT_MS)
            break;
        FUZZ_CHECK(rc != 0, "the server neither answered nor closed within %d ms (%zu bytes read)",
                   FUZZ_WAIT_MS, got);
        if (rc < 0 && errno == EINTR)
            continue;
        k = recv(fd, buf + got, cap - got, 0);
        if (k <= 0)
            break; /* closed, or reset after an answer to an unread body */
        got += (size_t)k;
        if (got == cap)
            break;
    }
    close(fd);
    return got;
}

/* Check a problem body of an answer with status code. */
static void fuzz_check_problem(int code, const char *body, size_t n)
{
    json_error_t jerr;
    json_t *p = json_loadb(body, n, 0, &jerr);
    const json_t *f;

    FUZZ_CHECK(p != NULL && json_is_object(p), "a %d problem body is not a JSON object: %.200s",
               code, body);
    FUZZ_CHECK(json_integer_value(json_object_get(p, "status")) == code
                   && json_is_string(json_object_get(p, "type"))
                   && json_is_string(json_object_get(p, "title"))
                   && json_is_string(json_object_get(p, "detail")),
               "a %d problem without type, title, detail or the same status: %.300s", code, body);
    f = json_object_get(p, "field");
    FUZZ_CHECK(f == NULL || (json_is_string(f) && json_string_length(f) > 0),
               "a problem with an empty or non-string field: %.300s", body);
    /* an invalid value (422) always names the field at fault */
    FUZZ_CHECK(code != 422 || f != NULL, "a 422 problem names no field: %.300s", body);
    json_decref(p);
}

/* Walk the answers in buf[0..n): every one a complete HTTP/1.x response with a
 * known status; vbmem's own 5xx (an answer with a Content-Type) only a 503 with
 * Retry-After that is not the out-of-memory answer (load or shutdown: never a
 * 500, never a 503 without Retry-After, and an input that breaks the making of
 * an answer is a defect, not an out-of-memory), libmicrohttpd's (no
 * Content-Type) only 501 or 505 to malformed HTTP; JSON errors are
 * application/problem+json. The
 * Location of every 201 is stored in loc (up to nloc) for clean-up. head: the
 * input has a HEAD request (whose answer has a length but no body). */
static int fuzz_check_answers(const char *buf, size_t n, char loc[][256], int nloc, int head)
{
    static const int known[] = {200, 201, 204, 304, 400, 401, 404, 405, 409, 411,
                                413, 414, 415, 417, 422, 429, 431, 501, 503, 505};
    char ctype[128], clen[32], where[256];
    size_t i = 0, h, body, len;
    int code, k, ok, found = 0, answers = 0;

    while (i < n && answers < FUZZ_MAX_ANSWERS) {
        FUZZ_CHECK(n - i >= 13 && memcmp(buf + i, "HTTP/1.", 7) == 0 && buf[i + 8] == ' ',
                   "answer %d is not an HTTP/1.x status line: %.60s", answers, buf + i);
        code = atoi(buf + i + 9);
        if (getenv("FUZZ_REQUEST_TRACE") != NULL) /* debugging: the status lines on stderr */
            fprintf(stderr, "fuzz-request: answer %.*s\n", (int)(n - i < 600 ? n - i : 600),
                    buf + i);
        ok = 0;
        for (k = 0; k < (int)(sizeof known / sizeof known[0]); k++)
            ok |= known[k] == code;
        FUZZ_CHECK(ok, "answer %d has status %d: %.300s", answers, code, buf + i);
        for (h = i; h + 3 < n && memcmp(buf + h, "\r\n\r\n", 4) != 0; h++)
            ;
        FUZZ_CHECK(h + 3 < n, "answer %d has no end of headers", answers);
        body = h + 4;
        if (code >= 500) {
            char retry[32];
            int own = fuzz_header(buf + i, h - i + 2, "Content-Type", ctype, sizeof ctype);

            FUZZ_CHECK(
                !own
                    || (code == 503
                        && fuzz_header(buf + i, h - i + 2, "Retry-After", retry, sizeof retry)
                        && memmem(buf + body, n - body < 400 ? n - body : 400, "out of memory", 13)
                               == NULL),
                "answer %d is a %d of vbmem's other than 503 with Retry-After under load: "
                "%.300s",
                answers, code, buf + i);
            FUZZ_CHECK(own || code == 501 || code == 505, "answer %d is libmicrohttpd's %d: %.300s",
                       answers, code, buf + i);
        }
        /* an error answer without Content-Type is libmicrohttpd's own, to malformed
         * HTTP; libmicrohttpd 0.9.75 may send its headers twice, the first time
         * without the body (a defect outside vbmem: tests/fuzz/README.md), so the
         * bytes after it are not checked */
        if (code >= 400 && !fuzz_header(buf + i, h - i + 2, "Content-Type", ctype, sizeof ctype))
            break;
        len = 0;
        if (fuzz_header(buf + i, h - i + 2, "Content-Length", clen, sizeof clen))
            len = strtoul(clen, NULL, 10);
        /* an answer to HEAD has a length but no body: the next answer follows, or none */
        if (head && len > 0
            && (n == body || (n - body >= 7 && memcmp(buf + body, "HTTP/1.", 7) == 0)))
            len = 0;
        FUZZ_CHECK(len <= n - body, "answer %d is cut: %zu of %zu body bytes", answers, n - body,
                   len);
        if (code >= 400 && len > 0
            && fuzz_header(buf + i, h - i + 2, "Content-Type", ctype, sizeof ctype)
            && strncmp(ctype, "application/", 12) == 0) {
            FUZZ_CHECK(strcmp(ctype, "application/problem+json") == 0, "a %d answer of type %s",
                       code, ctype);
            fuzz_check_problem(code, buf + body, len);
        }
        if (code == 201 && found < nloc
            && fuzz_header(buf + i, h - i + 2, "Location", where, sizeof where))
            snprintf(loc[found++], 256, "%s", where);
        i = body + len;
        answers++;
    }
    return found;
}

/* The sessions an input may name: "@L@" in the input stands for a latent
 * session (mixture, code size 4) and "@M@" for a session on the bundled model,
 * each created fresh for the input (ids are the server's, so an input cannot
 * know them) and deleted after it. */
static const char *const fuzz_tokens[2] = {"@L@", "@M@"};
static const char *const fuzz_bodies[2] = {
    "{\"code_size\":4,\"memory\":{\"kind\":\"mixture\",\"rows\":2,\"clusters\":3}}",
    "{\"model\":\"fashion-mnist-mixture\"}"};

/* Create a session with body over a new connection; its path (Location) goes
 * into path. */
static void fuzz_create(const char *body, char *path, size_t cap, char *buf, size_t bufcap)
{
    char req[512];
    char loc[1][256];
    size_t n;

    snprintf(req, sizeof req,
             "POST /v1/sessions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n%s",
             strlen(body), body);
    n = fuzz_exchange((const uint8_t *)req, strlen(req), buf, bufcap);
    FUZZ_CHECK(fuzz_check_answers(buf, n, loc, 1, 0) == 1, "cannot create a session: %.300s", buf);
    snprintf(path, cap, "%s", loc[0]);
}

/* Delete the session at path; gone already (the input deleted it) is fine
 * when may_be_gone. */
static void fuzz_delete(const char *path, int may_be_gone, char *buf, size_t bufcap)
{
    char del[400];
    size_t n;

    snprintf(del, sizeof del, "DELETE %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", path);
    n = fuzz_exchange((const uint8_t *)del, strlen(del), buf, bufcap);
    FUZZ_CHECK(n > 12
                   && (strncmp(buf + 9, "204", 3) == 0
                       || (may_be_gone && strncmp(buf + 9, "404", 3) == 0)),
               "cannot delete %s: %.200s", path, buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char buf[FUZZ_ANSWER_MAX]; /* scratch, reused by every call */
    char loc[8][256], made[2][256];
    const char *id;
    uint8_t *in = NULL, *grown;
    size_t n, len = 0, cap = 0, i, t, idlen;
    int k, created, uses[2] = {0, 0};

    for (t = 0; t < 2; t++)
        uses[t] = size >= 3 && memmem(data, size, fuzz_tokens[t], 3) != NULL;
    if (uses[0] || uses[1]) {
        /* the input with every token replaced by its session's id */
        for (t = 0; t < 2; t++)
            if (uses[t])
                fuzz_create(fuzz_bodies[t], made[t], sizeof made[t], buf, sizeof buf);
        for (i = 0; i < size;) {
            id = NULL;
            for (t = 0; t < 2; t++)
                if (uses[t] && size - i >= 3 && memcmp(data + i, fuzz_tokens[t], 3) == 0)
                    id = made[t] + strlen("/v1/sessions/");
            idlen = id != NULL ? strlen(id) : 1;
            if (len + idlen > cap) {
                cap = 2 * (len + idlen) + 64;
                grown = realloc(in, cap);
                FUZZ_CHECK(grown != NULL, "out of memory");
                in = grown;
            }
            memcpy(in + len, id != NULL ? (const uint8_t *)id : data + i, idlen);
            len += idlen;
            i += id != NULL ? 3 : 1;
        }
        data = in;
        size = len;
    }
    n = fuzz_exchange(data, size, buf, sizeof buf);
    created = fuzz_check_answers(buf, n, loc, 8, memmem(data, size, "HEAD", 4) != NULL);
    /* delete the sessions the input created, so that the store stays small */
    for (k = 0; k < created; k++)
        fuzz_delete(loc[k], 1, buf, sizeof buf);
    for (t = 0; t < 2; t++)
        if (uses[t])
            fuzz_delete(made[t], 1, buf, sizeof buf);
    free(in);
    return 0;
}
