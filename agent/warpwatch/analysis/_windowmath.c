/* The two loops of `analysis.analyze` that run once per launch, in C: the same arithmetic, in the
 * same order, as their Python definitions in windowmath.py (`group_launches`, `busy_time`), which
 * stay the reference and the fallback. tests/analysis/test_windowmath.py checks that both give the same
 * floats, bit for bit, on random launches and on every shared trace.
 *
 *   group_sums(gids, n_groups, launches, t0, t1, w) -> (sum_h, sum_hd, sum_lim, longest, intervals) | None
 *   busy_time(intervals, w, max_overlap) -> (busy, truncated) | None
 *
 * None: an input the C code does not take (a time that is not a float, a non-finite one): then
 * analysis/windowmath.py runs the Python loop.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdlib.h>

/* A float attribute of a launch (its ts or dur); -1 with no exception: not a float (fallback). */
static int float_attr(PyObject *obj, PyObject *name, double *out) {
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) return -1;
    int ok = PyFloat_CheckExact(v);
    if (ok) *out = PyFloat_AS_DOUBLE(v);
    Py_DECREF(v);
    if (!ok) return -2;
    return 0;
}

static PyObject *TS, *DUR;

/* Per group: Σh, Σh·d, Σ(h·d or h) over the launches wholly inside [t0, t1], the intervals
 * (ts, ts + d) of those with d > 0 in launch order, and the longest of them: `group_launches`. */
static PyObject *group_sums(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 6) {
        PyErr_SetString(PyExc_TypeError, "group_sums(gids, n_groups, launches, t0, t1, w)");
        return NULL;
    }
    PyObject *gids = argv[0], *launches = argv[2];
    Py_ssize_t groups = PyLong_AsSsize_t(argv[1]);
    if (groups == -1 && PyErr_Occurred()) return NULL;
    if (!PyList_CheckExact(gids) || !PyFloat_CheckExact(argv[3]) || !PyFloat_CheckExact(argv[4]) ||
        !PyFloat_CheckExact(argv[5]))
        Py_RETURN_NONE;
    PyObject *seq = PySequence_Fast(launches, "launches must be a sequence");
    if (!seq) return NULL;
    double t0 = PyFloat_AS_DOUBLE(argv[3]), t1 = PyFloat_AS_DOUBLE(argv[4]), w = PyFloat_AS_DOUBLE(argv[5]);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL, *intervals = NULL;
    double *sums = NULL;
    if (PyList_GET_SIZE(gids) != n || groups < 0) {
        PyErr_SetString(PyExc_ValueError, "group_sums: one group id per launch");
        goto done;
    }
    sums = PyMem_Calloc((size_t)(groups ? groups : 1) * 4, sizeof(double));
    intervals = PyList_New(groups);
    if (!sums || !intervals) goto done;
    for (Py_ssize_t g = 0; g < groups; g++) {
        PyObject *list = PyList_New(0);
        if (!list) goto done;
        PyList_SET_ITEM(intervals, g, list);
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t k = 0; k < n; k++) {
        double ts, d;
        int rc = float_attr(items[k], TS, &ts);
        if (rc == 0) rc = float_attr(items[k], DUR, &d);
        if (rc == -2) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        if (rc < 0) goto done;
        Py_ssize_t g = PyLong_AsSsize_t(PyList_GET_ITEM(gids, k));
        if (g == -1 && PyErr_Occurred()) goto done;
        if (g < 0 || g >= groups) {
            PyErr_SetString(PyExc_ValueError, "group_sums: a group id out of range");
            goto done;
        }
        double end = ts + d;
        if (ts < t0 || end > t1) continue; /* outside the window (see `sampling_weight`) */
        double h = (0 < d && d < w) ? w / (w - d) : 1.0;
        double hd = h * d;
        sums[4 * g] += h;
        sums[4 * g + 1] += hd;
        sums[4 * g + 2] += hd != 0.0 ? hd : h; /* Python's `hd or h` (NaN is true in both) */
        if (d > 0) {
            if (end - ts > sums[4 * g + 3]) sums[4 * g + 3] = end - ts;
            PyObject *iv = Py_BuildValue("(dd)", ts, end);
            if (!iv) goto done;
            rc = PyList_Append(PyList_GET_ITEM(intervals, g), iv);
            Py_DECREF(iv);
            if (rc < 0) goto done;
        }
    }
    PyObject *sh = PyList_New(groups), *shd = PyList_New(groups), *slim = PyList_New(groups), *lng = PyList_New(groups);
    if (!sh || !shd || !slim || !lng) {
        Py_XDECREF(sh);
        Py_XDECREF(shd);
        Py_XDECREF(slim);
        Py_XDECREF(lng);
        goto done;
    }
    for (Py_ssize_t g = 0; g < groups; g++) {
        PyList_SET_ITEM(sh, g, PyFloat_FromDouble(sums[4 * g]));
        PyList_SET_ITEM(shd, g, PyFloat_FromDouble(sums[4 * g + 1]));
        PyList_SET_ITEM(slim, g, PyFloat_FromDouble(sums[4 * g + 2]));
        PyList_SET_ITEM(lng, g, PyFloat_FromDouble(sums[4 * g + 3]));
    }
    result = Py_BuildValue("(NNNNO)", sh, shd, slim, lng, intervals);
done:
    Py_XDECREF(intervals);
    PyMem_Free(sums);
    Py_DECREF(seq);
    return result;
}

/* --- busy_time --------------------------------------------------------------------------------- */

typedef struct {
    double s, e;
} Interval;

static int by_start_then_end(const void *a, const void *b) { /* Python's tuple order */
    const Interval *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? -1 : 1;
    if (x->e != y->e) return x->e < y->e ? -1 : 1;
    return 0;
}

static double min2(double a, double b) { return b < a ? b : a; } /* Python's min: the first of equals */
static double max2(double a, double b) { return b > a ? b : a; }

static double weight(double span, double w) { return span < w ? w / (w - span) : 1.0; }

/* `_terms`: the newest launch (starting at `start`) with every subset of active[i:]. */
static double terms(double start, double min_end, double first, double last, const Interval *active,
                    Py_ssize_t n, Py_ssize_t i, int sign, double w) {
    double span = last - first;
    double out = (double)sign * (min_end - start) * weight(span, w);
    for (Py_ssize_t j = i; j < n; j++) {
        double s_j = active[j].s, e_j = active[j].e;
        out += terms(start, min2(min_end, e_j), min2(first, s_j), max2(last, e_j), active, n, j + 1, -sign, w);
    }
    return out;
}

static PyObject *busy_time(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "busy_time(intervals, w, max_overlap)");
        return NULL;
    }
    if (!PyFloat_CheckExact(argv[1])) Py_RETURN_NONE;
    double w = PyFloat_AS_DOUBLE(argv[1]);
    Py_ssize_t max_overlap = PyLong_AsSsize_t(argv[2]);
    if (max_overlap == -1 && PyErr_Occurred()) return NULL;
    if (max_overlap < 2) Py_RETURN_NONE; /* (the inlined cases assume at least 2) */
    PyObject *seq = PySequence_Fast(argv[0], "intervals must be a sequence");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Interval *all = PyMem_Malloc(sizeof(Interval) * (size_t)(n ? n : 1));
    Interval *active = PyMem_Malloc(sizeof(Interval) * (size_t)(max_overlap + 2));
    PyObject *result = NULL;
    if (!all || !active) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *t = items[k];
        if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != 2 || !PyFloat_CheckExact(PyTuple_GET_ITEM(t, 0)) ||
            !PyFloat_CheckExact(PyTuple_GET_ITEM(t, 1))) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        all[k].s = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(t, 0));
        all[k].e = PyFloat_AS_DOUBLE(PyTuple_GET_ITEM(t, 1));
        if (!isfinite(all[k].s) || !isfinite(all[k].e)) { /* Python's sort of NaNs is its own */
            result = Py_NewRef(Py_None);
            goto done;
        }
    }
    double total = 0.0;
    int truncated = 0;
    Py_ssize_t na = 0;
    /* From here on only C data: other threads (the agent's scrapes) run meanwhile. */
    Py_BEGIN_ALLOW_THREADS
    qsort(all, (size_t)n, sizeof(Interval), by_start_then_end);
    for (Py_ssize_t k = 0; k < n; k++) {
        double start = all[k].s, end = all[k].e;
        Py_ssize_t kept = 0;
        for (Py_ssize_t a = 0; a < na; a++)
            if (active[a].e > start) active[kept++] = active[a];
        na = kept;
        double d = end - start;
        double alone = d < w ? d * w / (w - d) : d;
        if (na == 0) {
            total += alone;
        } else if (na == 1) {
            double s1 = active[0].s, e1 = active[0].e;
            double span = (end > e1 ? end : e1) - s1;
            total += alone - (((end < e1 ? end : e1) - start) * weight(span, w));
        } else if (na == 2) {
            double s1 = active[0].s, e1 = active[0].e, s2 = active[1].s, e2 = active[1].e;
            double m1 = min2(end, e1), m2 = min2(end, e2), m12 = min2(min2(end, e1), e2);
            double x1 = max2(end, e1) - s1, x2 = max2(end, e2) - s2, x12 = max2(max2(end, e1), e2) - min2(s1, s2);
            total += alone - ((m1 - start) * weight(x1, w)) - ((m2 - start) * weight(x2, w)) +
                     ((m12 - start) * weight(x12, w));
        } else {
            if (na > max_overlap) {
                truncated = 1;
                /* active.sort(key=end), stable, then keep the last max_overlap: insertion sort */
                for (Py_ssize_t a = 1; a < na; a++) {
                    Interval x = active[a];
                    Py_ssize_t b = a;
                    while (b > 0 && active[b - 1].e > x.e) {
                        active[b] = active[b - 1];
                        b--;
                    }
                    active[b] = x;
                }
                memmove(active, active + (na - max_overlap), sizeof(Interval) * (size_t)max_overlap);
                na = max_overlap;
            }
            total += terms(start, end, start, end, active, na, 0, 1, w);
        }
        active[na].s = start;
        active[na].e = end;
        na++;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(dO)", total < 0.0 ? 0.0 : total, truncated ? Py_True : Py_False);
done:
    PyMem_Free(all);
    PyMem_Free(active);
    Py_DECREF(seq);
    return result;
}

static PyMethodDef methods[] = {
    {"group_sums", (PyCFunction)(void (*)(void))group_sums, METH_FASTCALL,
     "group_sums(gids, n_groups, launches, t0, t1, w) -> (sum_h, sum_hd, sum_lim, longest, intervals) | None"},
    {"busy_time", (PyCFunction)(void (*)(void))busy_time, METH_FASTCALL,
     "busy_time(intervals, w, max_overlap) -> (busy, truncated) | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    .m_base = PyModuleDef_HEAD_INIT,
    .m_name = "_windowmath",
    .m_doc = "The per-launch loops of warpwatch.windowmath, in C (see _windowmath.c).",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__windowmath(void) {
    TS = PyUnicode_InternFromString("ts");
    DUR = PyUnicode_InternFromString("dur");
    if (!TS || !DUR) return NULL;
    return PyModule_Create(&module);
}
