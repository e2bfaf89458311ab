/* The JSON primitives of _gpuscan.c, which includes this file (one translation unit: these are its
 * hot loops and must inline there; setup.py and tests/trace/test_native_sanitizers.py compile _gpuscan.c
 * alone): lexing (whitespace, strings, numbers, any value skipped), the typed values an event's
 * fields are read into, and the byte search that finds its `"cat"` keys. Each answers NULL for
 * whatever it is not sure of, as _gpuscan.c's contract asks.
 */
#ifndef WARPWATCH_GPUSCAN_JSON_H
#define WARPWATCH_GPUSCAN_JSON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>
#if defined(__SSE2__) && !defined(WARPWATCH_NO_SIMD)
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
#define MAX_NUMBER 64

typedef struct {
    const char *s;
    Py_ssize_t n;
} Str; /* a JSON string's contents, without escapes */

enum { V_ABSENT = 0, V_NULL, V_INT, V_FLOAT, V_STR, V_DIMS, V_OTHER, V_OBJECT };

typedef struct {
    int kind;
    long long i;
    double d;
    Str str;
    long long dims[3];
} Value;

/* memcmp(a, b, n) == 0 for the few bytes of a key or a category, without a call into libc. */
static inline int same(const char *a, const char *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* --- lexing ------------------------------------------------------------------------------- */

/* JSON's whitespace (not `\v` or `\f`, which a regex's `\s` takes too). */
static inline int json_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static inline const char *ws(const char *p, const char *end) {
    while (p < end && json_ws(*p)) p++;
    return p;
}

/* The 4 hex digits of the `\\uXXXX` at p, or -1. */
static int hex4(const char *p, const char *end) {
    if (end - p < 6) return -1;
    int u = 0;
    for (int k = 2; k < 6; k++) {
        char h = p[k];
        int d = (h >= '0' && h <= '9') ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        u = u * 16 + d;
    }
    return u;
}

/* After the opening quote: the end of the string (after the closing quote), or NULL. `esc` is set
 * when the string holds an escape (its contents are then not usable as they are). */
static const char *string_end(const char *p, const char *end, int *esc) {
    *esc = 0;
    while (p < end) {
#if defined(__SSE2__) && !defined(WARPWATCH_NO_SIMD)
        /* 16 plain bytes at a time (no quote, backslash or control character): kernel names are
         * 100-200 bytes */
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), below = _mm_set1_epi8(0x1F);
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                           _mm_cmpeq_epi8(_mm_min_epu8(v, below), v));
            unsigned m = (unsigned)_mm_movemask_epi8(special);
            if (m) {
                p += __builtin_ctz(m);
                break;
            }
            p += 16;
        }
        if (p >= end) return NULL;
#endif
        unsigned char c = (unsigned char)*p;
        if (c == '"') return p + 1;
        if (c < 0x20) return NULL; /* raw control character: msgspec rejects it */
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= end) return NULL;
            char e = p[1];
            if (e == 'u') {
                int u = hex4(p, end);
                if (u < 0 || (u >= 0xDC00 && u <= 0xDFFF)) return NULL; /* a lone low surrogate: msgspec rejects it */
                if (u >= 0xD800 && u <= 0xDBFF) { /* a high one must be followed by a low one */
                    int low = (end - p >= 8 && p[6] == '\\' && p[7] == 'u') ? hex4(p + 6, end) : -1;
                    if (low < 0xDC00 || low > 0xDFFF) return NULL;
                    p += 6;
                }
                p += 6;
                continue;
            }
            if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
                return NULL;
            p += 2;
            continue;
        }
        p++;
    }
    return NULL;
}

/* A JSON number at p: its end, or NULL. `is_int`: no fraction, no exponent. */
static const char *number_end(const char *p, const char *end, int *is_int) {
    const char *q = p;
    *is_int = 1;
    if (q < end && *q == '-') q++;
    if (q >= end) return NULL;
    if (*q == '0') {
        q++;
    } else if (*q >= '1' && *q <= '9') {
        while (q < end && *q >= '0' && *q <= '9') q++;
    } else {
        return NULL;
    }
    if (q < end && *q == '.') {
        *is_int = 0;
        q++;
        if (q >= end || !(*q >= '0' && *q <= '9')) return NULL;
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        *is_int = 0;
        q++;
        if (q < end && (*q == '+' || *q == '-')) q++;
        if (q >= end || !(*q >= '0' && *q <= '9')) return NULL;
        while (q < end && *q >= '0' && *q <= '9') q++;
    }
    return q;
}

/* Any JSON value: its end, or NULL. */
static const char *skip_value(const char *p, const char *end, int depth) {
    int esc, is_int;
    if (p >= end) return NULL;
    switch (*p) {
    case '"':
        return string_end(p + 1, end, &esc);
    case '{':
    case '[': {
        char close = *p == '{' ? '}' : ']';
        if (depth >= MAX_DEPTH) return NULL;
        p = ws(p + 1, end);
        if (p < end && *p == close) return p + 1;
        for (;;) {
            if (close == '}') {
                if (p >= end || *p != '"') return NULL;
                p = string_end(p + 1, end, &esc);
                if (!p) return NULL;
                p = ws(p, end);
                if (p >= end || *p != ':') return NULL;
                p = ws(p + 1, end);
            }
            /* strings and numbers here, without a call: most values of the args skipped */
            if (p < end && *p == '"')
                p = string_end(p + 1, end, &esc);
            else if (p < end && ((*p >= '0' && *p <= '9') || *p == '-'))
                p = number_end(p, end, &is_int);
            else
                p = skip_value(p, end, depth + 1);
            if (!p) return NULL;
            p = ws(p, end);
            if (p >= end) return NULL;
            if (*p == close) return p + 1;
            if (*p != ',') return NULL;
            p = ws(p + 1, end);
        }
    }
    case 't':
        return (end - p >= 4 && memcmp(p, "true", 4) == 0) ? p + 4 : NULL;
    case 'f':
        return (end - p >= 5 && memcmp(p, "false", 5) == 0) ? p + 5 : NULL;
    case 'n':
        return (end - p >= 4 && memcmp(p, "null", 4) == 0) ? p + 4 : NULL;
    default:
        return number_end(p, end, &is_int);
    }
}

/* Clinger's fast path: a decimal of at most 15 significant digits times 10^e, |e| <= 22, is one
 * exact double multiplied or divided by another, so one IEEE operation rounds it correctly, as
 * msgspec does. 0 when the number is not of that form (then PyOS_string_to_double). */
static int fast_double(const char *p, const char *q, double *out) {
    static const double POW10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    int neg = *p == '-', digits = 0, e = 0;
    long long m = 0;
    const char *c = p + neg;
    for (; c < q && *c >= '0' && *c <= '9'; c++) {
        if (m || *c != '0') digits++;
        m = m * 10 + (*c - '0');
        if (digits > 15) return 0;
    }
    if (c < q && *c == '.') {
        for (c++; c < q && *c >= '0' && *c <= '9'; c++) {
            if (m || *c != '0') digits++;
            m = m * 10 + (*c - '0');
            e--;
            if (digits > 15) return 0;
        }
    }
    if (c < q) { /* exponent */
        int x = 0, xneg = 0;
        c++;
        if (*c == '+' || *c == '-') xneg = *c++ == '-';
        for (; c < q; c++) {
            x = x * 10 + (*c - '0');
            if (x > 400) return 0;
        }
        e += xneg ? -x : x;
    }
    if (e < -22 || e > 22) return 0;
    double d = (double)m;
    d = e < 0 ? d / POW10[-e] : d * POW10[e];
    if (neg && d == 0) return 0; /* -0.0: leave the sign to PyOS_string_to_double */
    *out = neg ? -d : d;
    return 1;
}

/* A value whose type matters: null, a number (int when plain and of at most 18 digits, else a
 * finite double), a string without escapes, or "other" (skipped). NULL on invalid JSON or on a
 * number this parser does not convert itself. */
static const char *read_value(const char *p, const char *end, Value *v) {
    int esc, is_int;
    const char *q;
    if (p >= end) return NULL;
    if (*p == 'n') {
        if (end - p >= 4 && memcmp(p, "null", 4) == 0) {
            v->kind = V_NULL;
            return p + 4;
        }
        return NULL;
    }
    if (*p == '"') {
        q = string_end(p + 1, end, &esc);
        if (!q || esc) return NULL;
        v->kind = V_STR;
        v->str.s = p + 1;
        v->str.n = q - p - 2;
        return q;
    }
    if (*p == '-' || (*p >= '0' && *p <= '9')) {
        q = number_end(p, end, &is_int);
        if (!q) return NULL;
        Py_ssize_t len = q - p;
        if (is_int && len - (*p == '-') <= 18) {
            if (*p == '-' && len == 2 && p[1] == '0') return NULL; /* -0: a float field would keep the sign */
            long long x = 0;
            for (const char *c = p + (*p == '-'); c < q; c++) x = x * 10 + (*c - '0');
            v->kind = V_INT;
            v->i = *p == '-' ? -x : x;
            return q;
        }
        if (is_int || len >= MAX_NUMBER) return NULL;
        if (fast_double(p, q, &v->d)) {
            v->kind = V_FLOAT;
            return q;
        }
        char tmp[MAX_NUMBER];
        memcpy(tmp, p, (size_t)len);
        tmp[len] = 0;
        char *stop = NULL;
        double d = PyOS_string_to_double(tmp, &stop, NULL);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            return NULL;
        }
        if (stop != tmp + len || !isfinite(d)) return NULL;
        v->kind = V_FLOAT;
        v->d = d;
        return q;
    }
    q = skip_value(p, end, 1);
    if (!q) return NULL;
    v->kind = V_OTHER;
    return q;
}

/* [a, b, c] of non-negative plain integers (kind V_DIMS), or null; NULL otherwise. */
static const char *read_dims(const char *p, const char *end, Value *v) {
    if (p < end && *p == 'n') return read_value(p, end, v);
    if (p >= end || *p != '[') return NULL;
    p = ws(p + 1, end);
    for (int k = 0; k < 3; k++) {
        Value x = {0};
        p = read_value(p, end, &x);
        if (!p || x.kind != V_INT || x.i < 0) return NULL;
        v->dims[k] = x.i;
        p = ws(p, end);
        if (p >= end || *p != (k < 2 ? ',' : ']')) return NULL;
        p = ws(p + 1, end);
    }
    v->kind = V_DIMS;
    return p;
}

/* --- byte search ------------------------------------------------------------------------- */

/* The next `needle` (2 to 16 bytes) in [p, end), or NULL. With SSE2, 16 positions at a time whose
 * first and last bytes match (3.5x faster than glibc's memmem for `"cat":`, found once per event);
 * elsewhere, or built with -DWARPWATCH_NO_SIMD (tests/trace/test_native_sanitizers.py does), memmem. */
static const char *find(const char *p, const char *end, const char *needle, size_t n) {
#if defined(__SSE2__) && !defined(WARPWATCH_NO_SIMD)
    const __m128i first = _mm_set1_epi8(needle[0]), last = _mm_set1_epi8(needle[n - 1]);
    for (; end - p >= 16 + (Py_ssize_t)n - 1; p += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)(p + n - 1));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(a, first), _mm_cmpeq_epi8(b, last)));
        while (m) {
            int i = __builtin_ctz(m);
            if (same(p + i + 1, needle + 1, n - 2)) return p + i;
            m &= m - 1;
        }
    }
#endif
    return memmem(p, (size_t)(end - p), needle, n);
}

#endif
