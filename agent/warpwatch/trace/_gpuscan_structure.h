/* The structure of a piece, in C: the compiled twin of `structure.balanced` (structure.py says
 * what it proves and why; tests/trace/test_structure.py compares the two on real and random bytes).
 *
 *   balanced(buf, lo, hi) -> bool
 *
 * Read from `lo`, outside any string at depth 0: does every bracket outside strings (`{` and `[`
 * open, `}` and `]` close, of either kind) close one that opened after `lo`, and is no string open
 * and no bracket left open at `hi`? A quote preceded by an odd run of backslashes does not count;
 * every other quote opens or closes a string. Nothing else is checked (the piece's JSON is the
 * strict decoder's business); the answer is exactly the Python twin's on any bytes.
 *
 * With SSE2 (and not -DWARPWATCH_NO_SIMD), 64 bytes at a time as the fastest JSON parsers do
 * (simdjson's stage 1): bitmasks of quotes, backslashes and brackets, the escaped quotes found by
 * carry propagation over the backslash runs, the bytes inside strings by a prefix XOR of the
 * quotes, and the depth by counting bits (walking them only where it may go below 0).
 */
#ifndef WARPWATCH_GPUSCAN_STRUCTURE_H
#define WARPWATCH_GPUSCAN_STRUCTURE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__) && !defined(WARPWATCH_NO_SIMD)
#include <emmintrin.h>
#define STRUCTURE_SIMD 1
#endif

/* Byte by byte: the reference the block version must equal (and the build without SIMD). */
static int balanced_bytes(const unsigned char *p, const unsigned char *end, int *in_string, long long *depth,
                          int *escaped) {
    int in = *in_string, esc = *escaped;
    long long d = *depth;
    for (; p < end; p++) {
        unsigned char c = *p;
        int was_escaped = esc;
        esc = c == '\\' && !was_escaped;
        if (c == '"') {
            if (!was_escaped) in = !in;
        } else if (!in && (c | 0x20) == '{') { /* `{` or `[` */
            d++;
        } else if (!in && (c | 0x20) == '}') { /* `}` or `]` */
            if (--d < 0) return 0;
        }
    }
    *in_string = in;
    *depth = d;
    *escaped = esc;
    return 1;
}

#ifdef STRUCTURE_SIMD
static inline uint64_t movemask4(__m128i a, __m128i b, __m128i c, __m128i d) {
    return (uint64_t)(uint32_t)_mm_movemask_epi8(a) | (uint64_t)(uint32_t)_mm_movemask_epi8(b) << 16 |
           (uint64_t)(uint32_t)_mm_movemask_epi8(c) << 32 | (uint64_t)(uint32_t)_mm_movemask_epi8(d) << 48;
}

/* The bits of `quote` (and of a byte escaped at the start of a block by a backslash run ending the
 * last one) that follow an odd run of backslashes: simdjson's find_escaped. */
static inline uint64_t escaped_bits(uint64_t backslash, uint64_t *carry) {
    const uint64_t even = 0x5555555555555555ULL;
    if (!backslash) {
        uint64_t e = *carry;
        *carry = 0;
        return e;
    }
    backslash &= ~*carry;
    uint64_t follows = backslash << 1 | *carry;
    uint64_t odd_starts = backslash & ~even & ~follows;
    uint64_t even_sequences;
    *carry = __builtin_add_overflow(odd_starts, backslash, &even_sequences);
    return (even ^ (even_sequences << 1)) & follows;
}

static inline uint64_t prefix_xor(uint64_t m) {
    m ^= m << 1;
    m ^= m << 2;
    m ^= m << 4;
    m ^= m << 8;
    m ^= m << 16;
    m ^= m << 32;
    return m;
}
#endif

static int balanced_range(const char *buf, Py_ssize_t n) {
    const unsigned char *p = (const unsigned char *)buf, *end = p + n;
    int in_string = 0, escaped = 0;
    long long depth = 0;
#ifdef STRUCTURE_SIMD
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), lower = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
    uint64_t carry = 0, inside = 0; /* inside: all ones when the last block ended in a string */
    for (; end - p >= 64; p += 64) {
        __m128i v[4], f[4];
        for (int k = 0; k < 4; k++) {
            v[k] = _mm_loadu_si128((const __m128i *)(p + 16 * k));
            f[k] = _mm_or_si128(v[k], lower);
        }
        uint64_t q = movemask4(_mm_cmpeq_epi8(v[0], quote), _mm_cmpeq_epi8(v[1], quote),
                               _mm_cmpeq_epi8(v[2], quote), _mm_cmpeq_epi8(v[3], quote));
        uint64_t b = movemask4(_mm_cmpeq_epi8(v[0], backslash), _mm_cmpeq_epi8(v[1], backslash),
                               _mm_cmpeq_epi8(v[2], backslash), _mm_cmpeq_epi8(v[3], backslash));
        uint64_t o = movemask4(_mm_cmpeq_epi8(f[0], open), _mm_cmpeq_epi8(f[1], open),
                               _mm_cmpeq_epi8(f[2], open), _mm_cmpeq_epi8(f[3], open));
        uint64_t c = movemask4(_mm_cmpeq_epi8(f[0], close), _mm_cmpeq_epi8(f[1], close),
                               _mm_cmpeq_epi8(f[2], close), _mm_cmpeq_epi8(f[3], close));
        q &= ~escaped_bits(b, &carry);
        uint64_t strings = prefix_xor(q) ^ inside;
        inside = (uint64_t)((int64_t)strings >> 63);
        o &= ~strings;
        c &= ~strings;
        int closes = __builtin_popcountll(c);
        if (depth >= closes) {
            depth += __builtin_popcountll(o) - closes;
            continue;
        }
        for (uint64_t all = o | c; all; all &= all - 1) { /* it may go below 0: in order */
            if (o >> __builtin_ctzll(all) & 1)
                depth++;
            else if (--depth < 0)
                return 0;
        }
    }
    in_string = inside != 0;
    escaped = (int)carry;
#endif
    if (!balanced_bytes(p, end, &in_string, &depth, &escaped)) return 0;
    return !in_string && depth == 0;
}

static PyObject *balanced(PyObject *Py_UNUSED(module), PyObject *const *argv, Py_ssize_t argc) {
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "balanced(buf, lo, hi)");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(argv[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t lo = PyLong_AsSsize_t(argv[1]), hi = PyLong_AsSsize_t(argv[2]);
    PyObject *result = NULL;
    if ((lo == -1 || hi == -1) && PyErr_Occurred()) goto done;
    if (lo < 0 || hi < lo || hi > view.len) {
        PyErr_SetString(PyExc_ValueError, "balanced: bad range");
        goto done;
    }
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = balanced_range((const char *)view.buf + lo, hi - lo);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    PyBuffer_Release(&view);
    return result;
}

#endif
