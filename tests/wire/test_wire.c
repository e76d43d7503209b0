/* test_wire.c -- Check tests of the wire library: the body reader (numbers bit-exact against
 * strtod, trees equal to json_loadb's, the same errors on malformed and fuzzed input), the
 * checked readers (seeds, ranged integers, shaped arrays) and the codes form. */
#define _POSIX_C_SOURCE 200809L
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/codes.h"
#include "wire/memory.h"
#include "wire/parse.h"
#include "wire/values.h"

static uint64_t rng_state = 0x243F6A8885A308D3ULL;

static uint64_t rng_next(void)
{
    uint64_t x = rng_state;

    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

static uint64_t bits_of(double x)
{
    uint64_t b;

    memcpy(&b, &x, sizeof b);
    return b;
}

/* Compact dump with reals at 17 digits: equal dumps mean equal trees, member
 * order and real values (up to the sign of zero, checked apart) included. */
static char *dump(const json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
}

/* Whether the reader takes body by itself (without jansson behind it). */
static int reader_takes(const char *body, size_t len, size_t flags)
{
    json_t *v = NULL;
    int rc = wire_parse_reader(body, len, flags, &v);

    ck_assert_int_eq(rc == 0, v != NULL);
    json_decref(v);
    return rc == 0;
}

/* wire_parse and json_loadb agree on body: both accept it with equal trees,
 * or both reject it with the same error. Returns whether it was accepted. */
static int agree(const char *body, size_t len, size_t flags)
{
    json_error_t e1, e2;
    json_t *a = NULL, *b;
    int rc;
    char *da, *db;

    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    rc = wire_parse(body, len, flags, &a, &e1);
    b = json_loadb(body, len, flags, &e2);
    ck_assert_int_eq(rc == 0, b != NULL);
    ck_assert_int_eq(a != NULL, b != NULL);
    if (b == NULL) {
        ck_assert_msg(!reader_takes(body, len, flags), "the reader takes a bad text: %.200s", body);
        ck_assert_int_eq(e1.line, e2.line);
        ck_assert_int_eq(e1.column, e2.column);
        ck_assert_int_eq(e1.position, e2.position);
        ck_assert_str_eq(e1.text, e2.text);
        return 0;
    }
    ck_assert_msg(json_equal(a, b), "tree differs from json_loadb's: %.200s", body);
    da = dump(a);
    db = dump(b);
    ck_assert_str_eq(da, db);
    free(da);
    free(db);
    json_decref(a);
    json_decref(b);
    return 1;
}

static int agree_str(const char *body)
{
    return agree(body, strlen(body), JSON_REJECT_DUPLICATES);
}

/* Parse "[tokens]" and check every element against strtod (reals) bit for bit. */
static void check_tokens(char **tok, size_t n)
{
    size_t len = 2, i, o = 0;
    char *body;
    json_t *v = NULL, *e;
    json_error_t jerr;
    double want;

    for (i = 0; i < n; i++)
        len += strlen(tok[i]) + 1;
    body = malloc(len + 1);
    body[o++] = '[';
    for (i = 0; i < n; i++) {
        if (i > 0)
            body[o++] = ',';
        memcpy(body + o, tok[i], strlen(tok[i]));
        o += strlen(tok[i]);
    }
    body[o++] = ']';
    ck_assert_msg(wire_parse(body, o, JSON_REJECT_DUPLICATES, &v, &jerr) == 0, "%s at %d: %.80s",
                  jerr.text, jerr.position, body + (jerr.position > 40 ? jerr.position - 40 : 0));
    ck_assert_uint_eq(json_array_size(v), n);
    for (i = 0; i < n; i++) {
        e = json_array_get(v, i);
        if (json_is_integer(e))
            continue; /* integers: checked against jansson by agree() */
        ck_assert(json_is_real(e));
        want = strtod(tok[i], NULL);
        ck_assert_msg(bits_of(json_real_value(e)) == bits_of(want), "%s: got %.17g want %.17g",
                      tok[i], json_real_value(e), want);
    }
    json_decref(v);
    ck_assert_msg(reader_takes(body, o, JSON_REJECT_DUPLICATES), "reader gave up: %.300s", body);
    agree(body, o, JSON_REJECT_DUPLICATES);
    free(body);
}

START_TEST(test_numbers_edges)
{
    static const char *const edges[] = {
        "0.0",
        "-0.0",
        "-0e0",
        "0e-999",
        "0e999",
        "0.000e+5",
        "1e-400",
        "-1e-400",
        "1.0",
        "4.9406564584124654e-324",
        "5e-324",
        "2.4703282292062327e-324",
        "2.4703282292062328e-324",
        "2.2250738585072011e-308",
        "2.2250738585072012e-308",
        "2.2250738585072014e-308",
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "9007199254740993.0",
        "9007199254740992.0",
        "9007199254740991.0",
        "9007199254740995e0",
        "1e22",
        "1e23",
        "1e-22",
        "1e-23",
        "8.98846567431158e307",
        "0.1",
        "0.2",
        "0.3",
        "123456789012345.6",
        "12345678901234567e-5",
        "0.000000000000000000000000000001",
        "3.141592653589793238462643383279",
        "-2.718281828459045e-10",
        "1E5",
        "1e+5",
        "1E-5",
        "123.456e-7",
        "100000000000000000000000.0",
        "1.00000000000000011102230246251565e0",
        "1.00000000000000011102230246251566e0",
        "7.2057594037927933e16",
        "0.00000000000000000000000000000000000000000000000000000000000000001e300",
        "1234567890123456789012345678901234567890e-30",
        "4503599627370496.5",
        "4503599627370497.5",
        "2.5e-1",
        "-1.5e+22",
        "6.02214076e23",
        "1.602176634e-19",
    };
    static const char *const ints[] = {
        "0",
        "-0",
        "7",
        "-7",
        "123456789012345678",
        "-123456789012345678",
        "999999999999999999",
        "9223372036854775807",
        "-9223372036854775808",
    };
    char *tok[64];
    size_t i;

    for (i = 0; i < sizeof edges / sizeof edges[0]; i++)
        tok[i] = (char *)edges[i];
    check_tokens(tok, sizeof edges / sizeof edges[0]);
    for (i = 0; i < sizeof ints / sizeof ints[0]; i++)
        tok[i] = (char *)ints[i];
    check_tokens(tok, sizeof ints / sizeof ints[0]);
    /* the sign of zero survives */
    {
        json_t *v;
        json_error_t jerr;

        ck_assert_int_eq(wire_parse("[-0.0, 0.0, -0]", 15, 0, &v, &jerr), 0);
        ck_assert(signbit(json_real_value(json_array_get(v, 0))));
        ck_assert(!signbit(json_real_value(json_array_get(v, 1))));
        ck_assert(json_is_integer(json_array_get(v, 2)));
        json_decref(v);
    }
}
END_TEST

/* Random doubles printed many ways, and random digit strings with exponents. */
START_TEST(test_numbers_random)
{
    static const char *const fmts[] = {"%.17g", "%.16g", "%.15g", "%.9g", "%.6e",
                                       "%.3g",  "%.20e", "%.12f", "%.1e", "%.25g"};
    enum { BATCH = 500 };
    char *tok[BATCH];
    char buf[BATCH][96];
    int round, k, nd, j, dot, e;
    uint64_t b;
    double x;

    for (round = 0; round < 400; round++) {
        for (k = 0; k < BATCH; k++) {
            switch (rng_next() % 4) {
            case 0: /* any finite double, subnormals included */
                do {
                    b = rng_next();
                    memcpy(&x, &b, sizeof x);
                } while (!isfinite(x));
                break;
            case 1: /* floats, as clients send them */
                x = (double)(float)((double)(int64_t)rng_next() / 9.3e18 * 10.0);
                break;
            case 2: /* tiny and huge */
                x = ldexp((double)(rng_next() >> 11), (int)(rng_next() % 2100) - 1100);
                break;
            default: x = (double)(int64_t)(rng_next() >> 20) / 1024.0; break;
            }
            if (snprintf(buf[k], sizeof buf[k], fmts[rng_next() % (sizeof fmts / sizeof fmts[0])],
                         x)
                >= (int)sizeof buf[k] - 4) /* too long for the buffer ("%.12f" of 1e300) */
                snprintf(buf[k], sizeof buf[k], "%.17g", x);
            if (strchr(buf[k], 'i') != NULL || strchr(buf[k], 'n') != NULL)
                snprintf(buf[k], sizeof buf[k], "1.5");
            if (strchr(buf[k], '.') == NULL && strchr(buf[k], 'e') == NULL)
                strcat(buf[k], ".0");  /* a real, not an integer */
            if (rng_next() % 3 == 0) { /* a random digit string instead */
                nd = 1 + (int)(rng_next() % 24);
                dot = (int)(rng_next() % (uint64_t)(nd + 1));
                j = 0;
                if (rng_next() % 2)
                    buf[k][j++] = '-';
                buf[k][j++] = (char)('1' + rng_next() % 9);
                for (e = 1; e < nd; e++) {
                    if (e == dot)
                        buf[k][j++] = '.';
                    buf[k][j++] = (char)('0' + rng_next() % 10);
                }
                e = (int)(rng_next() % 700) - 350;
                j += snprintf(buf[k] + j, sizeof buf[k] - (size_t)j, "e%d", e);
                buf[k][j] = '\0';
                if (strtod(buf[k], NULL) == HUGE_VAL || strtod(buf[k], NULL) == -HUGE_VAL)
                    snprintf(buf[k], sizeof buf[k], "2.5e-3");
            }
            tok[k] = buf[k];
        }
        check_tokens(tok, BATCH);
    }
}
END_TEST

/* 15 to 19 significant digits with |exponent| <= 27 (the extended-precision
 * path), and integers at and next to midpoints between doubles above 2^53. */
START_TEST(test_numbers_wide)
{
    enum { BATCH = 500 };
    char *tok[BATCH];
    char buf[BATCH][64];
    int round, k, nd, dot, e, j, s;
    uint64_t m;

    for (round = 0; round < 400; round++) {
        for (k = 0; k < BATCH; k++) {
            if (k % 5 == 0) { /* a midpoint k 2^s + 2^(s-1), or one off it, as a real */
                s = 1 + (int)(rng_next() % 11);
                m = ((rng_next() >> 11) | (UINT64_C(1) << 52)) << s;
                m += (UINT64_C(1) << (s - 1)) + (uint64_t)((int)(rng_next() % 3) - 1);
                snprintf(buf[k], sizeof buf[k], rng_next() % 2 ? "%llu.0" : "%llu0e-1",
                         (unsigned long long)m);
            } else {
                nd = 15 + (int)(rng_next() % 5);
                dot = (int)(rng_next() % (uint64_t)(nd + 1));
                j = 0;
                if (rng_next() % 2)
                    buf[k][j++] = '-';
                buf[k][j++] = (char)('1' + rng_next() % 9);
                for (e = 1; e < nd; e++) {
                    if (e == dot)
                        buf[k][j++] = '.';
                    buf[k][j++] = (char)('0' + rng_next() % 10);
                }
                e = (int)(rng_next() % 50) - 25;
                snprintf(buf[k] + j, sizeof buf[k] - (size_t)j, "e%d", e);
            }
            tok[k] = buf[k];
        }
        check_tokens(tok, BATCH);
    }
}
END_TEST

START_TEST(test_trees_equal)
{
    static const char *const docs[] = {
        "{}",
        "[]",
        "[[]]",
        "{\"a\": {}}",
        " \n\t{\"a\" : [1, 2.5, -3e2, true, false, null]}\r\n",
        "{\"codes\": {\"mu\": [[1.25, -2], [0.5, 3e-7]], \"sigma2\": 0.25}, \"seed\": \"18\"}",
        "{\"s\": \"plain\", \"e\": \"esc \\\" \\\\ \\/ \\b \\f \\n \\r \\t\", \"u\": "
        "\"\\u00e9\\u4e2d\"}",
        "{\"pair\": \"\\ud83d\\ude00\", \"raw\": \"\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80\"}",
        "{\"\\u00e9t\\u00e9\": 1, \"\xc3\xa9\": 2, \"k\\\"q\": 3}",
        "[1, [2, [3, [4, [5, {\"x\": [6.5]}]]]]]",
        "{\"b\": 1, \"a\": 2, \"c\": {\"z\": [], \"y\": {}}}",
        "[9223372036854775807, -9223372036854775808, 0, -0, 1e0, 0.5e-1]",
        "{\"\": \"\", \"x\": \"\"}",
        "[\"\\u0041\\u00FF\\u0100\\uFFFF\\uD800\\uDC00\\uDBFF\\uDFFF\"]",
    };
    size_t i;
    char *deep;
    int d;

    for (i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        ck_assert_msg(agree_str(docs[i]), "not accepted: %s", docs[i]);
        ck_assert_msg(reader_takes(docs[i], strlen(docs[i]), JSON_REJECT_DUPLICATES),
                      "reader gave up: %s", docs[i]);
    }
    /* nesting deeper than the reader takes, within jansson's limit */
    deep = malloc(2 * 3000 + 1);
    for (d = 0; d < 1500; d++) {
        deep[d] = '[';
        deep[3000 - 1 - d] = ']';
    }
    ck_assert(agree(deep, 3000, 0));
    for (d = 0; d < 3000; d++)
        deep[d] = '[';
    agree(deep, 3000, 0); /* beyond jansson's: its error */
    free(deep);
    /* flags */
    ck_assert(agree("3.25", 4, JSON_DECODE_ANY));
    ck_assert(!agree("3.25", 4, 0));
    ck_assert(agree("\"x\"", 3, JSON_DECODE_ANY));
    ck_assert(agree("{\"a\": 1, \"a\": 2}", 16, 0)); /* duplicates: last wins without the flag */
    ck_assert(agree("[1.5, 2]", 8, JSON_DECODE_INT_AS_REAL));
}
END_TEST

START_TEST(test_malformed)
{
    static const char *const bad[] = {
        "",
        " ",
        "{",
        "[",
        "]",
        "{\"a\" 1}",
        "{\"a\": 1,}",
        "[1, 2,]",
        "[1 2]",
        "{\"a\": 1 \"b\": 2}",
        "{\"a\": 1, \"a\": 2}",
        "[01]",
        "[-]",
        "[1.]",
        "[.5]",
        "[1e]",
        "[1e+]",
        "[+1]",
        "[0x10]",
        "[1.5e400]",
        "[-1e309]",
        "[99999999999999999999]",
        "[-9223372036854775809]",
        "[\"a\nb\"]",
        "[\"\\x\"]",
        "[\"\\u12\"]",
        "[\"\\u0000\"]",
        "[\"\\ud800\"]",
        "[\"\\udc00\"]",
        "[\"\\ud800\\u0041\"]",
        "[\"\xff\"]",
        "[\"\xc0\xaf\"]",
        "[\"\xed\xa0\x80\"]",
        "[\"unterminated",
        "{\"a\": tru}",
        "[nul]",
        "[falsey]",
        "[1] x",
        "[1]]",
        "{} {}",
        "\xef\xbb\xbf[1]",
        "[NaN]",
        "[Infinity]",
        "[-Infinity]",
        "{\"a\"}",
        "{1: 2}",
        "{'a': 1}",
        "[\"a\"\"b\"]",
        "[1,,2]",
        "[,1]",
        "{,}",
        "[\"\\",
        "[1.5e",
        "[-0.e1]",
        "[1e5.5]",
    };
    size_t i;

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!agree_str(bad[i]), "accepted: %s", bad[i]);
    /* a NUL byte inside the text */
    ck_assert(!agree("[1,\0 2]", 7, 0));
    ck_assert(!agree("[\"a\0b\"]", 7, 0));
    /* the existing big-body paths: long base64 strings with an error after them */
    {
        size_t n = 9000, k;
        char *body = malloc(n + 64);

        k = (size_t)snprintf(body, 64, "{\"data\": \"");
        memset(body + k, 'A', n);
        k += n;
        k += (size_t)snprintf(body + k, 64, "\" \"x\": 1}");
        ck_assert(!agree(body, k, JSON_REJECT_DUPLICATES));
        free(body);
    }
}
END_TEST

/* Random mutations of valid documents: accept and reject exactly as jansson. */
START_TEST(test_fuzz)
{
    static const char *const seeds[] = {
        "{\"codes\": {\"mu\": [[1.25, -2.5e-3, 3], [0.5, 7, -0.0]], \"sigma2\": [[0, 1e-9, 2], [1, "
        "1, 1]]},"
        " \"seed\": \"1844674407\", \"iterations\": 10, \"addresses\": true, \"name\": "
        "\"\\u00e9\\n\"}",
        "[[0.123456789, -1.5e+10, 42], {\"a\": null, \"b\": [false, true]}, \"s\\\"t\", "
        "12345678901234567]",
    };
    static const char alphabet[] = "{}[],:\" \\0123456789eE.-+tfnul\x01\xff\xc3\xa9u";
    char buf[512];
    size_t len, pos;
    int i, m;
    const char *s;

    for (i = 0; i < 20000; i++) {
        s = seeds[rng_next() % 2];
        len = strlen(s);
        memcpy(buf, s, len);
        for (m = 0; m < 1 + (int)(rng_next() % 3); m++) {
            pos = (size_t)(rng_next() % len);
            switch (rng_next() % 4) {
            case 0: /* replace a byte */
                buf[pos] = alphabet[rng_next() % (sizeof alphabet - 1)];
                break;
            case 1: /* insert a byte */
                if (len + 1 < sizeof buf) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    buf[pos] = alphabet[rng_next() % (sizeof alphabet - 1)];
                    len++;
                }
                break;
            case 2: /* delete a byte */
                memmove(buf + pos, buf + pos + 1, len - pos - 1);
                len--;
                break;
            default: /* truncate */ len = pos; break;
            }
            if (len == 0)
                break;
        }
        agree(buf, len, (rng_next() % 2) ? JSON_REJECT_DUPLICATES : 0);
    }
}
END_TEST

START_TEST(test_seed_rule)
{
    json_error_t jerr;
    json_t *v = json_loads("{\"a\": 5, \"b\": \"18446744073709551615\", \"c\": \"\", \"d\": "
                           "\"18446744073709551616\", \"e\": -1, \"f\": \"12a\", \"g\": "
                           "\"000000000000000000001\", \"h\": 1.5, \"i\": \"00018\"}",
                           0, &jerr);
    vbm_error err;
    uint64_t s = 7;

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(wire_opt_seed(v, "a", &s, &err), VBM_OK);
    ck_assert(s == 5);
    ck_assert_int_eq(wire_opt_seed(v, "b", &s, &err), VBM_OK);
    ck_assert(s == UINT64_MAX);
    ck_assert_int_eq(wire_opt_seed(v, "i", &s, &err), VBM_OK);
    ck_assert(s == 18);
    ck_assert_int_eq(wire_opt_seed(v, "absent", &s, &err), VBM_OK);
    ck_assert(s == 18);
    ck_assert_int_eq(wire_opt_seed(v, "c", &s, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "c");
    ck_assert_int_eq(wire_opt_seed(v, "d", &s, &err), VBM_EINVAL);
    ck_assert_int_eq(wire_opt_seed(v, "e", &s, &err), VBM_EINVAL);
    ck_assert_int_eq(wire_opt_seed(v, "f", &s, &err), VBM_EINVAL);
    ck_assert_int_eq(wire_opt_seed(v, "g", &s, &err), VBM_EINVAL);
    ck_assert_int_eq(wire_opt_seed(v, "h", &s, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "h");
    ck_assert(strncmp(err.msg, "h: ", 3) == 0);
    ck_assert(s == 18);
    json_decref(v);
}
END_TEST

START_TEST(test_readers)
{
    json_error_t jerr;
    json_t *v =
        json_loads("{\"n\": 3, \"r\": 2.5, \"m\": [[1, 2], [3, \"x\"]], \"b\": true}", 0, &jerr);
    vbm_error err;
    long x = 0, dims[2] = {2, 2};
    double a[4], d = 0;
    int b = 0;

    ck_assert_int_eq(wire_opt_long(v, "n", 0, 5, &x, &err), VBM_OK);
    ck_assert_int_eq(x, 3);
    ck_assert_int_eq(wire_opt_long(v, "n", 4, 5, &x, &err), VBM_EINVAL);
    ck_assert_str_eq(err.field, "n");
    ck_assert_int_eq(wire_opt_long(v, "r", 0, 5, &x, &err), VBM_EINVAL);
    ck_assert_int_eq(wire_opt_double(v, "r", 0, 5, &d, &err), VBM_OK);
    ck_assert(d == 2.5);
    ck_assert_int_eq(wire_opt_bool(v, "b", &b, &err), VBM_OK);
    ck_assert_int_eq(b, 1);
    ck_assert_int_eq(wire_opt_bool(v, "n", &b, &err), VBM_EINVAL);
    ck_assert_int_eq(wire_read_array(json_object_get(v, "m"), "codes.mu", 2, dims, 0, a, &err),
                     VBM_EINVAL);
    ck_assert_str_eq(err.field, "codes.mu[1][1]");
    ck_assert_str_eq(err.msg, "codes.mu[1][1]: expected a number, got string");
    vbm_error_rebase(&err, "job");
    ck_assert_str_eq(err.field, "job.codes.mu[1][1]");
    json_decref(v);
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("wire");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_numbers_edges);
    tcase_add_test(tc, test_numbers_random);
    tcase_add_test(tc, test_numbers_wide);
    tcase_add_test(tc, test_trees_equal);
    tcase_add_test(tc, test_malformed);
    tcase_add_test(tc, test_fuzz);
    tcase_add_test(tc, test_seed_rule);
    tcase_add_test(tc, test_readers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(wire_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
