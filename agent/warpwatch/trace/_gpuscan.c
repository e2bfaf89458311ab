/* The GPU events of a piece of a Kineto trace, found and decoded in C: the compiled twin of
 * `skim.skim` + `schema.scan` (see skim.py for what skimming is and what it gives up).
 *
 *   scan(buf, end, launch_type, names, dims) -> (launches, correlations, span, lo, hi) | None
 *
 * `buf[:end]` holds whole trace events separated by commas (optionally after a `[` at byte 0).
 * Every `"cat"` key whose value is a GPU category (kernel, Kernel, gpu_memcpy, gpu_memset, Memcpy,
 * Memset, Trace) is taken back to the `{` that starts its event, and that event is parsed as
 * JSON; the other events are not looked at. Kernels become `launch_type(...)` with the positional
 * fields of `model.KernelLaunch`, their names and (grid, block) tuples interned in the dicts
 * `names` and `dims`.
 *
 * The contract, which tests/test_gpuscan.py checks on every shared trace and on mutated events:
 * the result is either None ("decode this piece in Python") or exactly what the Python path
 * (skim + msgspec + scan) gives. Anything this parser is not sure of -- an escape in a key or a
 * name, a number that is not a plain finite JSON number of at most 18 digits, a type msgspec's
 * strict structs would reject, a duplicate key, an event that does not start after a comma, bare
 * inf/nan, a raw control character, nesting deeper than 64, a bad Trace span, a category written
 * with an escape, `"hip` anywhere in the piece (AMD's hip* runtime calls, which Python reads),
 * args that are not an object, a string msgspec decodes that is not UTF-8, a lone surrogate
 * escape, whitespace JSON does not allow (`\v`, `\f`) around a category, a piece where some `{`
 * follows a `[` or a comma after no `}` (an object in an array: maybe a GPU event nested in
 * another's value, see may_nest) -- gives None, and the Python reader, which knows every such
 * case and its error message, reads the piece. tests/test_native_sanitizers.py fuzzes it under
 * AddressSanitizer and UBSan; tests/test_trace_fuzzing.py fuzzes it, coverage-guided, against
 * the Python reader.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
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

static inline const char *ws(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
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

/* --- one event ------------------------------------------------------------------------------ */

enum { A_DEVICE, A_STREAM, A_GRID, A_BLOCK, A_CORRELATION, A_REGS, A_SMEM, A_WARPS, A_BLOCKS, A_OCC, A_N };
static const char *const ARG_KEYS[A_N] = {
    "device", "stream", "grid", "block", "correlation", "registers per thread", "shared memory",
    "warps per SM", "blocks per SM", "est. achieved occupancy %",
};
static size_t ARG_LENGTHS[A_N];

enum { E_PH, E_CAT, E_NAME, E_PID, E_TS, E_DUR, E_ARGS, E_N };
static const char *const EVENT_KEYS[E_N] = {"ph", "cat", "name", "pid", "ts", "dur", "args"};
static size_t EVENT_LENGTHS[E_N];

typedef struct {
    Value f[E_N];
    Value a[A_N];
    const char *cat_key; /* where the "cat" key starts (its quote) */
} Event;

static int key_index(Str k, const char *const *keys, const size_t *lengths, int n) {
    for (int i = 0; i < n; i++)
        if (lengths[i] == (size_t)k.n && same(keys[i], k.s, (size_t)k.n)) return i;
    return -1;
}

/* An event object (`args` 0: the keys of EVENT_KEYS into ev->f) or its args object (`args` 1: the
 * keys of ARG_KEYS into ev->a); other keys are skipped, a duplicate known key fails. Returns the
 * end of the object, or NULL. */
static const char *parse_object(const char *p, const char *end, Event *ev, int args) {
    const char *const *keys = args ? ARG_KEYS : EVENT_KEYS;
    const size_t *lengths = args ? ARG_LENGTHS : EVENT_LENGTHS;
    Value *values = args ? ev->a : ev->f;
    int n = args ? A_N : E_N, esc;
    if (p >= end || *p != '{') return NULL;
    p = ws(p + 1, end);
    if (p < end && *p == '}') return p + 1;
    for (;;) {
        if (p >= end || *p != '"') return NULL;
        const char *key_at = p;
        const char *q = string_end(p + 1, end, &esc);
        if (!q || esc) return NULL;
        Str key = {p + 1, q - p - 2};
        p = ws(q, end);
        if (p >= end || *p != ':') return NULL;
        p = ws(p + 1, end);
        int k = key_index(key, keys, lengths, n);
        if (k < 0) {
            p = skip_value(p, end, 1 + args);
        } else if (values[k].kind != V_ABSENT) {
            return NULL; /* duplicate key */
        } else if (args) {
            p = (k == A_GRID || k == A_BLOCK) ? read_dims(p, end, &values[k]) : read_value(p, end, &values[k]);
        } else {
            if (k == E_CAT) ev->cat_key = key_at;
            if (k == E_ARGS && p < end && *p == '{') {
                p = parse_object(p, end, ev, 1);
                values[k].kind = V_OBJECT;
            } else {
                p = read_value(p, end, &values[k]);
            }
        }
        if (!p) return NULL;
        p = ws(p, end);
        if (p >= end) return NULL;
        if (*p == '}') return p + 1;
        if (*p != ',') return NULL;
        p = ws(p + 1, end);
    }
}

static const char *parse_event(const char *p, const char *end, Event *ev) {
    memset(ev, 0, sizeof(*ev));
    return parse_object(p, end, ev, 0);
}

/* The next `needle` (2 to 16 bytes) in [p, end), or NULL. With SSE2, 16 positions at a time whose
 * first and last bytes match (3.5x faster than glibc's memmem for `"cat":`, found once per event);
 * elsewhere, or built with -DWARPWATCH_NO_SIMD (tests/test_native_sanitizers.py does), memmem. */
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

/* --- the scan ------------------------------------------------------------------------------- */

static const char *const GPU_CATS[] = {"kernel", "Kernel", "gpu_memcpy", "gpu_memset", "Memcpy", "Memset", "Trace"};
#define N_GPU_CATS 7
static size_t GPU_CAT_LENGTHS[N_GPU_CATS];
#define FIRST_KERNEL 0
#define LAST_KERNEL 1
#define TRACE_CAT 6

/* The GPU category of the `"cat"` key at p: its index in GPU_CATS, -1 for another category (or
 * when `"cat"` is not a key), -2 for one written with an escape (which Python reads). */
static int gpu_category(const char *p, const char *end) {
    p = ws(p + 5, end);
    if (p < end && (*p == '\v' || *p == '\f')) return -2; /* not JSON whitespace, but skim's regex `\s` */
    if (p >= end || *p != ':') return -1;
    p = ws(p + 1, end);
    if (p < end && (*p == '\v' || *p == '\f')) return -2;
    if (p >= end || *p != '"') return -1;
    p++;
    for (int c = 0; c < N_GPU_CATS; c++) {
        size_t n = GPU_CAT_LENGTHS[c];
        if ((size_t)(end - p) > n && p[n] == '"' && same(p, GPU_CATS[c], n)) return c;
    }
    for (; p < end && *p != '"'; p++)
        if (*p == '\\') return -2;
    return -1;
}

static int is_other_phase(Str ph) {
    return ph.n == 1 && ph.s[0] != 'X' && strchr("BEiICbnestfPONDMVvRc()", ph.s[0]) != NULL;
}

/* A Python object for an optional value: None, an int, a float, or a string (NULL: error). */
static PyObject *opt_int(const Value *v) {
    if (v->kind == V_INT) return PyLong_FromLongLong(v->i);
    Py_RETURN_NONE;
}

static PyObject *text(Str s) { return PyUnicode_DecodeUTF8(s.s, s.n, "strict"); }

static PyObject *reported(const Value *v) {
    if (v->kind == V_INT) return PyFloat_FromDouble((double)v->i);
    if (v->kind == V_FLOAT) return PyFloat_FromDouble(v->d);
    if (v->kind == V_STR) { /* the first 32 characters (reported() in schema.py) */
        PyObject *s = text(v->str);
        if (s && PyUnicode_GET_LENGTH(s) > 32) {
            PyObject *cut = PyUnicode_Substring(s, 0, 32);
            Py_DECREF(s);
            return cut;
        }
        return s;
    }
    Py_RETURN_NONE;
}

static PyObject *interned(PyObject *table, PyObject *obj) {
    if (!obj) return NULL;
    PyObject *got = PyDict_SetDefault(table, obj, obj);
    Py_XINCREF(got);
    Py_DECREF(obj);
    return got;
}

static PyObject *dims_tuple(const Value *v, PyObject *dims) {
    if (v->kind != V_DIMS) Py_RETURN_NONE;
    PyObject *t = Py_BuildValue("(LLL)", v->dims[0], v->dims[1], v->dims[2]);
    return interned(dims, t);
}

/* Is each typed field of a complete GPU event what msgspec's strict structs accept? */
static int types_ok(const Event *ev) {
    const Value *f = ev->f, *a = ev->a;
    if (f[E_NAME].kind != V_ABSENT && f[E_NAME].kind != V_NULL && f[E_NAME].kind != V_STR) return 0;
    for (int k = E_TS; k <= E_DUR; k++)
        if (f[k].kind != V_INT && f[k].kind != V_FLOAT) return 0; /* null or absent: Python's error */
    /* args: an object or null (`true` or `[]` is V_OTHER: Python's error) */
    if (f[E_ARGS].kind != V_ABSENT && f[E_ARGS].kind != V_NULL && f[E_ARGS].kind != V_OBJECT) return 0;
    for (int k = 0; k < A_N; k++) {
        int kind = a[k].kind;
        if (kind == V_ABSENT || kind == V_NULL) continue;
        switch (k) {
        case A_DEVICE:
        case A_CORRELATION:
            if (kind != V_INT) return 0;
            break;
        case A_REGS:
        case A_SMEM:
            if (kind != V_INT || a[k].i < 0) return 0;
            break;
        case A_STREAM:
            if (kind != V_INT && kind != V_STR) return 0;
            break;
        case A_GRID:
        case A_BLOCK:
            if (kind != V_DIMS) return 0;
            break;
        default: /* warps, blocks, occupancy: float | str */
            if (kind != V_INT && kind != V_FLOAT && kind != V_STR) return 0;
        }
    }
    return 1;
}

/* Is every string of a complete GPU event that msgspec decodes (name, pid, stream, the reported
 * values...) UTF-8? msgspec's strict structs decode them, and fail on one that is not; the
 * scanner converts only a kernel's (a memcpy's name, say, it never reads). ASCII at a glance. */
static int strings_ok(const Event *ev) {
    for (int k = 0; k < E_N + A_N; k++) {
        const Value *v = k < E_N ? &ev->f[k] : &ev->a[k - E_N];
        if (v->kind != V_STR) continue;
        int ascii = 1;
        for (Py_ssize_t i = 0; i < v->str.n && ascii; i++) ascii = (unsigned char)v->str.s[i] < 0x80;
        if (ascii) continue;
        PyObject *decoded = PyUnicode_DecodeUTF8(v->str.s, v->str.n, "strict");
        if (!decoded) {
            PyErr_Clear();
            return 0;
        }
        Py_DECREF(decoded);
    }
    return 1;
}

static double number(const Value *v) { return v->kind == V_INT ? (double)v->i : v->d; }

static PyObject *launch(const Event *ev, PyObject *launch_type, PyObject *names, PyObject *dims) {
    const Value *f = ev->f, *a = ev->a;
    PyObject *args[12] = {0};
    PyObject *result = NULL;
    /* Each argument only while none has failed: a second call into the C API with an exception
     * set (two strings that are not UTF-8) was a SystemError. */
#define ARG(k, expr) \
    if (!(args[k] = (expr))) goto done
    ARG(0, interned(names, f[E_NAME].kind == V_STR ? text(f[E_NAME].str) : PyUnicode_FromString("None")));
    ARG(1, PyLong_FromLongLong(a[A_DEVICE].kind == V_INT ? a[A_DEVICE].i : f[E_PID].kind == V_INT ? f[E_PID].i : -1));
    ARG(2, PyFloat_FromDouble(number(&f[E_TS])));
    ARG(3, PyFloat_FromDouble(number(&f[E_DUR])));
    ARG(4, a[A_STREAM].kind == V_STR ? text(a[A_STREAM].str) : opt_int(&a[A_STREAM]));
    ARG(5, dims_tuple(&a[A_GRID], dims));
    ARG(6, dims_tuple(&a[A_BLOCK], dims));
    ARG(7, opt_int(&a[A_REGS]));
    ARG(8, opt_int(&a[A_SMEM]));
    ARG(9, reported(&a[A_WARPS]));
    ARG(10, reported(&a[A_BLOCKS]));
    ARG(11, reported(&a[A_OCC]));
#undef ARG
    result = PyObject_Vectorcall(launch_type, args, 12, NULL);
done:
    for (int k = 0; k < 12; k++) Py_XDECREF(args[k]);
    return result;
}

static inline int json_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Is the `{` at `start` where an event starts: the first byte of the piece, just after its `[`,
 * or after a comma? */
static int starts_event(const char *buf, const char *start) {
    const char *p = start;
    while (p > buf && json_ws(p[-1])) p--;
    if (p == buf) return 1;
    if (p[-1] == ',') return 1;
    return p[-1] == '[' && p - 1 == buf;
}

/* May an object of the piece be an element of an array (and so a GPU event found after a comma
 * not be one of the piece's events, but part of another's value)? The first object of any array
 * follows its `[`, or a comma after a value that is not an object: some `{` then follows a `[`,
 * or a comma that follows no `}`. The events of the piece follow `}` and a comma (or start it), as
 * do the later objects of an array of objects only. Checked on the bytes (a `[{` in a string
 * counts too: that piece then goes to Python, which checks each GPU event is one of the piece's
 * by decoding them all; skim._top_level). One memchr per `{`, two per Kineto event. */
static int may_nest(const char *buf, const char *end) {
    const char *start = end > buf && buf[0] == '[' ? buf + 1 : buf;
    for (const char *p = memchr(start, '{', (size_t)(end - start)); p; p = memchr(p + 1, '{', (size_t)(end - p - 1))) {
        const char *q = p;
        while (q > start && json_ws(q[-1])) q--;
        if (q == start) continue; /* the piece's first event */
        if (q[-1] == '[') return 1;
        if (q[-1] == ',') {
            for (q--; q > start && json_ws(q[-1]); q--) {
            }
            if (q == start || q[-1] != '}') return 1;
        }
    }
    return 0;
}

/* Does a whole event end at p: then a comma and the next event's `{`, or the end of the piece? */
static int ends_event(const char *p, const char *end) {
    p = ws(p, end);
    if (p == end) return 1;
    if (*p != ',') return 0;
    p = ws(p + 1, end);
    return p < end && *p == '{';
}

static PyObject *scan(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "scan(buf, end, launch_type, names, dims)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(argv[1]);
    PyObject *launch_type = argv[2], *names = argv[3], *dims = argv[4];
    PyObject *launches = NULL, *correlations = NULL, *span = NULL, *result = NULL;
    if (n == -1 && PyErr_Occurred()) goto fail;
    if (n < 0 || n > view.len || !PyDict_Check(names) || !PyDict_Check(dims)) {
        PyErr_SetString(PyExc_ValueError, "scan: bad end or interning tables");
        goto fail;
    }
    launches = PyList_New(0);
    correlations = PyList_New(0);
    if (!launches || !correlations) goto fail;
    const char *buf = (const char *)view.buf, *end = buf + n, *last = buf;
    double lo = INFINITY, hi = -INFINITY;
    int have_span = 0;
    double span_t0 = 0, span_t1 = 0;
    const char *p = buf;
    Event ev;
    if (find(buf, end, "\"hip", 4)) goto python; /* maybe a hip* runtime call: AMD, read in Python */
    if (may_nest(buf, end)) goto python;
    for (;;) {
        p = find(p, end, "\"cat\"", 5);
        if (!p) break;
        int cat = gpu_category(p, end);
        if (cat == -2) goto python;
        if (cat < 0) {
            p += 4; /* (not 5: in `"cat"cat"` the second one starts at the first one's last quote) */
            continue;
        }
        const char *start = p;
        while (start > last && *start != '{') start--;
        if (*start != '{' || !starts_event(buf, start)) goto python;
        const char *stop = parse_event(start, end, &ev);
        if (!stop || ev.cat_key != p || !ends_event(stop, end)) goto python;
        last = p = stop;
        const Value *f = ev.f;
        if (f[E_PH].kind != V_STR) goto python;
        if (is_other_phase(f[E_PH].str)) continue; /* validated, skipped (schema._OTHER_PHASES) */
        if (!(f[E_PH].str.n == 1 && f[E_PH].str.s[0] == 'X') || !types_ok(&ev) || !strings_ok(&ev)) goto python;
        double ts = number(&f[E_TS]), dur = number(&f[E_DUR]);
        if (cat == TRACE_CAT) {
            if (dur < 0) goto python; /* an error if no earlier piece had a span: Python says */
            if (!have_span && dur > 0) {
                have_span = 1;
                span_t0 = ts;
                span_t1 = ts + dur;
            }
            continue;
        }
        if (dur < 0) goto python;
        if (ts < lo) lo = ts;
        if (ts + dur > hi) hi = ts + dur;
        if (cat > LAST_KERNEL) continue;
        PyObject *one = launch(&ev, launch_type, names, dims);
        if (!one) goto python_error;
        int failed = PyList_Append(launches, one);
        Py_DECREF(one);
        if (failed) goto fail;
        PyObject *corr = PyLong_FromLongLong(ev.a[A_CORRELATION].kind == V_INT ? ev.a[A_CORRELATION].i : -1);
        if (!corr) goto fail;
        failed = PyList_Append(correlations, corr);
        Py_DECREF(corr);
        if (failed) goto fail;
    }
    if (have_span) {
        span = Py_BuildValue("(dd)", span_t0, span_t1);
        if (!span) goto fail;
    } else {
        span = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(OOOdd)", launches, correlations, span, lo, hi);
    goto fail; /* (the common cleanup) */
python_error:
    if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto fail;
    PyErr_Clear(); /* a name that is not UTF-8: Python's decoder has the message */
python:
    result = Py_NewRef(Py_None);
fail:
    Py_XDECREF(launches);
    Py_XDECREF(correlations);
    Py_XDECREF(span);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)(void (*)(void))scan, METH_FASTCALL,
     "scan(buf, end, launch_type, names, dims) -> (launches, correlations, span, lo, hi) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_gpuscan",
    .m_doc = "The GPU events of a trace piece, in C (see _gpuscan.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__gpuscan(void) {
    for (int i = 0; i < A_N; i++) ARG_LENGTHS[i] = strlen(ARG_KEYS[i]);
    for (int i = 0; i < E_N; i++) EVENT_LENGTHS[i] = strlen(EVENT_KEYS[i]);
    for (int i = 0; i < N_GPU_CATS; i++) GPU_CAT_LENGTHS[i] = strlen(GPU_CATS[i]);
    return PyModule_Create(&module);
}
