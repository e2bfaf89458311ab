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
 * The contract, which tests/trace/test_gpuscan.py checks on every shared trace and on mutated events:
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
 * case and its error message, reads the piece. tests/trace/test_native_sanitizers.py fuzzes it under
 * AddressSanitizer and UBSan; tests/trace/test_trace_fuzzing.py fuzzes it, coverage-guided, against
 * the Python reader.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_gpuscan_json.h"      /* the JSON primitives: lexing, values, byte search */
#include "_gpuscan_structure.h" /* balanced(): is a piece a run of whole values (structure.py) */
#include "_gpuscan_event.h"     /* one event parsed into its known fields */

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
        if (!one) goto fail; /* out of memory: strings_ok checked every string it converts */
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
    {"balanced", (PyCFunction)(void (*)(void))balanced, METH_FASTCALL,
     "balanced(buf, lo, hi) -> bool: buf[lo:hi] a run of whole JSON values (see structure.py)"},
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
