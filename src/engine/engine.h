/* engine.h -- owns the status codes, error record and clock helpers shared by the engine layer (sessions, store, job pool). */
#ifndef VBMEM_ENGINE_H
#define VBMEM_ENGINE_H

#include <stddef.h>

/* Status of every engine function. */
typedef enum {
    ENG_OK = 0,
    ENG_EINVAL = 1,    /* invalid argument (the message and field say which) */
    ENG_ENOMEM = 2,    /* allocation failed */
    ENG_ENUMERIC = 3,  /* a factorization failed inside libvbmem */
    ENG_ENOTFOUND = 4, /* no such session (or not visible to this owner) */
    ENG_ECONFLICT = 5, /* If-Match version differs from the session's version */
    ENG_ELIMIT = 6,    /* a configured limit (sessions, memory bytes) would be exceeded */
    ENG_EBUSY = 7,     /* the job queue is full */
    ENG_ESTOPPED = 8,  /* the pool no longer accepts jobs (shutting down) */
    ENG_EFORMAT = 9,   /* an imported memory is malformed */
    ENG_EUNAVAIL = 10  /* the durable store is busy, locked, unreachable or holds a corrupt
                        * record (503 + Retry-After) */
} eng_status;

#define ENG_MSG_LEN 512
#define ENG_FIELD_LEN 128

/* A failure: the offending request field ("" when none) and a readable message. */
typedef struct {
    char field[ENG_FIELD_LEN];
    char msg[ENG_MSG_LEN];
} eng_error;

/* Record st with field (NULL: none) and a printf-style message in err (which may
 * be NULL). Returns st. */
eng_status eng_fail(eng_error *err, eng_status st, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Seconds on CLOCK_MONOTONIC. Never fails. */
double eng_now(void);

/* Seconds since the Unix epoch on CLOCK_REALTIME. Never fails. */
double eng_wall(void);

#endif
