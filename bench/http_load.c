/* http_load.c -- owns bench-http: a bounded keep-alive HTTP/1.1 load generator for vbmemd on
 * loopback (latent writes with JSON or base64 codes, samples), reporting throughput and latency
 * percentiles. */
#define _GNU_SOURCE /* strcasestr */

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LOAD_MAX_CLIENTS 256

typedef enum {
    MODE_WRITE_JSON,
    MODE_WRITE_B64,
    MODE_SAMPLES,
    MODE_APPEND_B64,
    MODE_SAMPLES_B64
} load_mode;

typedef struct {
    int port;
    int clients;
    long requests;  /* total, across clients */
    double seconds; /* wall-clock bound */
    load_mode mode;
    int T, C, H, K, iterations, samples;
} load_opts;

/* A growing byte buffer. */
typedef struct {
    char *s;
    size_t len, cap;
} load_buf;

typedef struct {
    const load_opts *o;
    int id;
    char session[40];
    char *request; /* the prepared request bytes */
    size_t request_len;
    double *lat; /* seconds per completed request */
    long n, ok, errors;
    double solve_sum; /* sum of the server-reported timings.solve_s */
    long solve_n;
    long quota;
    double deadline;
    pthread_barrier_t *start;
} load_client;

static double load_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void load_append(load_buf *b, const char *data, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        b->cap = 2 * (b->len + n) + 1024;
        b->s = realloc(b->s, b->cap);
        if (b->s == NULL) {
            fprintf(stderr, "bench-http: out of memory\n");
            exit(1);
        }
    }
    memcpy(b->s + b->len, data, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void load_printf(load_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#include <stdarg.h>
static void load_printf(load_buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        load_append(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static int load_connect(int port)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    if (fd < 0)
        return -1;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

/* Send req and read one response into body. Returns the status, or -1. */
static int load_roundtrip(int fd, const char *req, size_t len, load_buf *resp)
{
    size_t sent = 0, head = 0, need = 0;
    ssize_t n;
    char *hdr_end, *cl;
    int status = -1;

    while (sent < len) {
        n = send(fd, req + sent, len - sent, MSG_NOSIGNAL);
        if (n <= 0)
            return -1;
        sent += (size_t)n;
    }
    resp->len = 0;
    for (;;) {
        if (resp->cap - resp->len < 65536) {
            resp->cap = resp->cap * 2 + 65536;
            resp->s = realloc(resp->s, resp->cap);
            if (resp->s == NULL)
                return -1;
        }
        n = recv(fd, resp->s + resp->len, resp->cap - resp->len - 1, 0);
        if (n <= 0)
            return -1;
        resp->len += (size_t)n;
        resp->s[resp->len] = '\0';
        if (head == 0) {
            hdr_end = strstr(resp->s, "\r\n\r\n");
            if (hdr_end == NULL)
                continue;
            head = (size_t)(hdr_end - resp->s) + 4;
            if (sscanf(resp->s, "HTTP/1.1 %d", &status) != 1)
                return -1;
            cl = strcasestr(resp->s, "\r\nContent-Length:");
            need = cl != NULL && cl < hdr_end ? (size_t)strtoul(cl + 17, NULL, 10) : 0;
        }
        if (resp->len >= head + need) {
            memmove(resp->s, resp->s + head, need);
            resp->len = need;
            resp->s[need] = '\0';
            return status;
        }
    }
}

/* Build a full request with a JSON body. */
static char *load_request(const char *method, const char *path, const load_buf *body, size_t *len)
{
    load_buf b = {NULL, 0, 0};

    load_printf(&b,
                "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Content-Length: %zu\r\n\r\n",
                method, path, body != NULL ? body->len : 0);
    if (body != NULL)
        load_append(&b, body->s, body->len);
    *len = b.len;
    return b.s;
}

/* Codes of an episode: T frames around H cluster centres (deterministic). */
static void load_codes(const load_opts *o, int seed, float *out)
{
    uint64_t x = 0x9E3779B97F4A7C15ULL * (uint64_t)(seed + 1);
    int t, c;

    for (t = 0; t < o->T; t++) {
        for (c = 0; c < o->C; c++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out[t * o->C + c] = (float)(3.0 * sin((t % o->H) * 1.7 + c * 0.31)
                                        + ((double)(x >> 11) / 9007199254740992.0 - 0.5));
        }
    }
}

static void load_b64(load_buf *b, const unsigned char *d, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char q[4];
    size_t i;
    unsigned v;

    for (i = 0; i + 2 < n; i += 3) {
        v = (unsigned)d[i] << 16 | (unsigned)d[i + 1] << 8 | d[i + 2];
        q[0] = tbl[v >> 18];
        q[1] = tbl[(v >> 12) & 63];
        q[2] = tbl[(v >> 6) & 63];
        q[3] = tbl[v & 63];
        load_append(b, q, 4);
    }
    if (i < n) {
        v = (unsigned)d[i] << 16 | (i + 1 < n ? (unsigned)d[i + 1] << 8 : 0u);
        q[0] = tbl[v >> 18];
        q[1] = tbl[(v >> 12) & 63];
        q[2] = i + 1 < n ? tbl[(v >> 6) & 63] : '=';
        q[3] = '=';
        load_append(b, q, 4);
    }
}

/* The episode body {"mode", "codes": {"mu": ...}, "iterations", "seed"}. */
static void load_episode(const load_opts *o, const char *mode, int base64, int seed, load_buf *b)
{
    float *z = malloc(sizeof(float) * (size_t)o->T * (size_t)o->C);
    unsigned char *raw;
    int t, c;
    size_t i;

    load_codes(o, seed, z);
    load_printf(b, "{\"mode\":\"%s\",\"iterations\":%d,\"seed\":%d,\"codes\":{\"mu\":", mode,
                o->iterations, seed);
    if (base64) {
        raw = malloc(4 * (size_t)o->T * (size_t)o->C);
        for (i = 0; i < (size_t)o->T * (size_t)o->C; i++) {
            uint32_t bits;

            memcpy(&bits, &z[i], 4);
            raw[4 * i] = (unsigned char)bits;
            raw[4 * i + 1] = (unsigned char)(bits >> 8);
            raw[4 * i + 2] = (unsigned char)(bits >> 16);
            raw[4 * i + 3] = (unsigned char)(bits >> 24);
        }
        load_printf(b, "{\"dtype\":\"float32\",\"shape\":[%d,%d],\"data\":\"", o->T, o->C);
        load_b64(b, raw, 4 * (size_t)o->T * (size_t)o->C);
        load_append(b, "\"}", 2);
        free(raw);
    } else {
        load_append(b, "[", 1);
        for (t = 0; t < o->T; t++) {
            load_append(b, t > 0 ? ",[" : "[", t > 0 ? 2 : 1);
            for (c = 0; c < o->C; c++)
                load_printf(b, c > 0 ? ",%.7g" : "%.7g", (double)z[t * o->C + c]);
            load_append(b, "]", 1);
        }
        load_append(b, "]", 1);
    }
    load_append(b, "}}", 2);
    free(z);
}

/* Create the client's session (and write it once for sampling/appending). */
static int load_setup(load_client *cl)
{
    const load_opts *o = cl->o;
    load_buf body = {NULL, 0, 0}, resp = {NULL, 0, 0};
    char *req, *id, path[128];
    size_t len;
    int fd, st;

    fd = load_connect(o->port);
    if (fd < 0)
        return -1;
    load_printf(&body,
                "{\"code_size\":%d,\"memory\":{\"kind\":\"mixture\",\"clusters\":%d,\"rows\":%d}}",
                o->C, o->H, o->K);
    req = load_request("POST", "/v1/sessions", &body, &len);
    st = load_roundtrip(fd, req, len, &resp);
    free(req);
    id = resp.s != NULL ? strstr(resp.s, "\"id\":\"") : NULL;
    if (st != 201 || id == NULL) {
        fprintf(stderr, "bench-http: create failed (%d): %.200s\n", st, resp.s ? resp.s : "");
        close(fd);
        return -1;
    }
    memcpy(cl->session, id + 6, 32);
    cl->session[32] = '\0';
    body.len = 0;
    if (o->mode == MODE_SAMPLES || o->mode == MODE_SAMPLES_B64 || o->mode == MODE_APPEND_B64) {
        load_episode(o, "replace", 1, cl->id, &body);
        snprintf(path, sizeof path, "/v1/sessions/%s/episodes", cl->session);
        req = load_request("POST", path, &body, &len);
        st = load_roundtrip(fd, req, len, &resp);
        free(req);
        if (st != 200) {
            fprintf(stderr, "bench-http: first write failed (%d)\n", st);
            close(fd);
            return -1;
        }
    }
    body.len = 0;
    if (o->mode == MODE_SAMPLES || o->mode == MODE_SAMPLES_B64) {
        load_printf(&body, "{\"count\":%d,\"seed\":1,\"encoding\":\"%s\"}", o->samples,
                    o->mode == MODE_SAMPLES ? "json" : "base64");
        snprintf(path, sizeof path, "/v1/sessions/%s/samples", cl->session);
    } else {
        load_episode(o, o->mode == MODE_APPEND_B64 ? "append" : "replace",
                     o->mode != MODE_WRITE_JSON, cl->id, &body);
        snprintf(path, sizeof path, "/v1/sessions/%s/episodes", cl->session);
    }
    cl->request = load_request("POST", path, &body, &cl->request_len);
    free(body.s);
    free(resp.s);
    close(fd);
    return 0;
}

static void *load_run(void *arg)
{
    load_client *cl = arg;
    load_buf resp = {NULL, 0, 0};
    double t0;
    int fd, st;

    fd = load_connect(cl->o->port);
    pthread_barrier_wait(cl->start);
    while (fd >= 0 && cl->n < cl->quota && load_now() < cl->deadline) {
        t0 = load_now();
        st = load_roundtrip(fd, cl->request, cl->request_len, &resp);
        cl->lat[cl->n++] = load_now() - t0;
        if (st == 200) {
            const char *p = strstr(resp.s, "\"solve_s\":");

            cl->ok++;
            if (p != NULL) {
                cl->solve_sum += strtod(p + 10, NULL);
                cl->solve_n++;
            }
        } else {
            cl->errors++;
            if (st < 0) { /* reconnect */
                close(fd);
                fd = load_connect(cl->o->port);
            }
        }
    }
    if (fd >= 0)
        close(fd);
    free(resp.s);
    return NULL;
}

static int load_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    load_opts o = {8080, 8, 2000, 20.0, MODE_WRITE_B64, 64, 200, 10, 6, 10, 64};
    load_client *cls;
    pthread_t th[LOAD_MAX_CLIENTS];
    pthread_barrier_t start;
    double t0, wall, *all;
    long total = 0, ok = 0, errors = 0, k, solve_n = 0;
    double solve_sum = 0.0;
    int i;

    for (i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--port") == 0)
            o.port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--clients") == 0)
            o.clients = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--requests") == 0)
            o.requests = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            o.seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--T") == 0)
            o.T = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--C") == 0)
            o.C = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--H") == 0)
            o.H = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--K") == 0)
            o.K = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--iterations") == 0)
            o.iterations = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--samples") == 0)
            o.samples = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--mode") == 0) {
            if (strcmp(argv[i + 1], "write-json") == 0)
                o.mode = MODE_WRITE_JSON;
            else if (strcmp(argv[i + 1], "write-b64") == 0)
                o.mode = MODE_WRITE_B64;
            else if (strcmp(argv[i + 1], "append-b64") == 0)
                o.mode = MODE_APPEND_B64;
            else if (strcmp(argv[i + 1], "samples") == 0)
                o.mode = MODE_SAMPLES;
            else if (strcmp(argv[i + 1], "samples-b64") == 0)
                o.mode = MODE_SAMPLES_B64;
            else {
                fprintf(stderr, "bench-http: unknown mode %s\n", argv[i + 1]);
                return 2;
            }
        } else {
            fprintf(
                stderr,
                "usage: bench-http --port P [--clients N] [--requests N] [--seconds S]\n"
                "  [--mode write-json|write-b64|append-b64|samples|samples-b64] [--T --C --H --K]\n"
                "  [--iterations N] [--samples N]\n");
            return 2;
        }
    }
    if (o.clients < 1 || o.clients > LOAD_MAX_CLIENTS || o.requests < o.clients || o.seconds <= 0) {
        fprintf(stderr, "bench-http: need 1 <= clients <= %d, requests >= clients, seconds > 0\n",
                LOAD_MAX_CLIENTS);
        return 2;
    }
    cls = calloc((size_t)o.clients, sizeof *cls);
    pthread_barrier_init(&start, NULL, (unsigned)o.clients + 1);
    for (i = 0; i < o.clients; i++) {
        cls[i].o = &o;
        cls[i].id = i;
        cls[i].quota = o.requests / o.clients + (i < o.requests % o.clients ? 1 : 0);
        cls[i].lat = calloc((size_t)cls[i].quota, sizeof(double));
        cls[i].start = &start;
        if (load_setup(&cls[i]) != 0)
            return 1;
    }
    t0 = load_now();
    for (i = 0; i < o.clients; i++) {
        cls[i].deadline = t0 + o.seconds;
        pthread_create(&th[i], NULL, load_run, &cls[i]);
    }
    t0 = load_now();
    pthread_barrier_wait(&start);
    for (i = 0; i < o.clients; i++)
        pthread_join(th[i], NULL);
    wall = load_now() - t0;
    for (i = 0; i < o.clients; i++) {
        total += cls[i].n;
        ok += cls[i].ok;
        errors += cls[i].errors;
        solve_sum += cls[i].solve_sum;
        solve_n += cls[i].solve_n;
    }
    all = calloc((size_t)total + 1, sizeof(double));
    for (i = 0, k = 0; i < o.clients; i++) {
        memcpy(all + k, cls[i].lat, sizeof(double) * (size_t)cls[i].n);
        k += cls[i].n;
    }
    qsort(all, (size_t)total, sizeof(double), load_cmp);
    printf(
        "{\"mode\":\"%s\",\"clients\":%d,\"requests\":%ld,\"ok\":%ld,\"errors\":%ld,"
        "\"seconds\":%.3f,\"rps\":%.1f,\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.2f,"
        "\"request_bytes\":%zu,\"T\":%d,\"C\":%d,\"H\":%d,\"K\":%d,\"iterations\":%d,"
        "\"samples_per_s\":%.0f,\"mean_solve_ms\":%.2f}\n",
        o.mode == MODE_WRITE_JSON   ? "write-json"
        : o.mode == MODE_WRITE_B64  ? "write-b64"
        : o.mode == MODE_APPEND_B64 ? "append-b64"
        : o.mode == MODE_SAMPLES    ? "samples"
                                    : "samples-b64",
        o.clients, total, ok, errors, wall, ok / wall,
        total ? 1000.0 * all[(size_t)(0.50 * (double)(total - 1))] : 0.0,
        total ? 1000.0 * all[(size_t)(0.99 * (double)(total - 1))] : 0.0,
        total ? 1000.0 * all[total - 1] : 0.0, cls[0].request_len, o.T, o.C, o.H, o.K, o.iterations,
        o.mode == MODE_SAMPLES || o.mode == MODE_SAMPLES_B64 ? ok * (double)o.samples / wall : 0.0,
        solve_n > 0 ? 1000.0 * solve_sum / (double)solve_n : 0.0);
    for (i = 0; i < o.clients; i++) {
        free(cls[i].lat);
        free(cls[i].request);
    }
    free(cls);
    free(all);
    pthread_barrier_destroy(&start);
    return errors == 0 ? 0 : 1;
}
