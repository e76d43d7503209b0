/* fuzz_check.h -- owns the harnesses' shared checks: an invariant that aborts with a message, and a
 * bit-exact comparison of two JSON trees. */
#ifndef VBMEM_FUZZ_CHECK_H
#define VBMEM_FUZZ_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

/* Abort (a finding for libFuzzer) with the message when cond is false. */
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz invariant failed at %s:%d: ", __FILE__, __LINE__);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* 1 when a and b are the same tree: same types, integers equal, reals equal bit
 * for bit, strings equal byte for byte (lengths included), arrays and objects
 * equal member by member in the same order; 0 otherwise. */
static inline int fuzz_json_same(const json_t *a, const json_t *b)
{
    size_t i, n;
    double x, y;
    const char *ka, *kb;
    void *ia, *ib;

    if (json_typeof(a) != json_typeof(b))
        return 0;
    switch (json_typeof(a)) {
    case JSON_INTEGER: return json_integer_value(a) == json_integer_value(b);
    case JSON_REAL:
        x = json_real_value(a);
        y = json_real_value(b);
        return memcmp(&x, &y, sizeof x) == 0;
    case JSON_STRING:
        return json_string_length(a) == json_string_length(b)
               && memcmp(json_string_value(a), json_string_value(b), json_string_length(a)) == 0;
    case JSON_ARRAY:
        n = json_array_size(a);
        if (n != json_array_size(b))
            return 0;
        for (i = 0; i < n; i++)
            if (!fuzz_json_same(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    case JSON_OBJECT:
        if (json_object_size(a) != json_object_size(b))
            return 0;
        for (ia = json_object_iter((json_t *)a), ib = json_object_iter((json_t *)b);
             ia != NULL && ib != NULL; ia = json_object_iter_next((json_t *)a, ia),
            ib = json_object_iter_next((json_t *)b, ib)) {
            ka = json_object_iter_key(ia);
            kb = json_object_iter_key(ib);
            if (strcmp(ka, kb) != 0
                || !fuzz_json_same(json_object_iter_value(ia), json_object_iter_value(ib)))
                return 0;
        }
        return ia == NULL && ib == NULL;
    default: return 1; /* true, false, null */
    }
}

#endif
