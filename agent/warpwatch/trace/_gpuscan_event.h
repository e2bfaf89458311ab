/* One Kineto trace event parsed as strict JSON into its known fields (`Event`): the keys of an event
 * and of its args that the scanner reads, each at most once. Included by _gpuscan.c only (one
 * translation unit, like _gpuscan_json.h, whose `Value` and `Str` it uses).
 */
#ifndef WARPWATCH_GPUSCAN_EVENT_H
#define WARPWATCH_GPUSCAN_EVENT_H

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

#endif
