/* Native decoding of XSpace wire bytes (TF2/JAX profiles): the xplane source's fast path.
 *
 * Why: walking XEvent messages with protobuf costs several microseconds per event (and
 * holds the whole parsed tree, 2-3x the file, in memory); a big profile has tens of
 * millions of events. These functions read the wire format of the file's bytes (mapped,
 * not copied) directly into columns:
 *   split_plane(buf, field=3, depth=99, utf8=0)
 *                                -> (list of (offset, length) of its lines (the values of
 *                                   length-delimited `field`), the message's other bytes:
 *                                   a plane's name and metadata, for protobuf); field=1,
 *                                   depth=100 splits an XSpace into its planes the same way.
 *                                   Values of the fields set in the bit mask `utf8` are
 *                                   checked to be UTF-8 and left out of the other bytes
 *                                   (the XSpace's errors, warnings and hostnames: checked
 *                                   as protobuf would, never made into objects)
 *   decode_lines(buf, spans, stat_ids, keep=None)
 *                                -> (ids, timestamps_ns, names, starts, n, metadata_id,
 *                                   offset_ps, duration_ps, stats, hashes, at)
 *       a batch of lines (`spans`: int64 (offset, length) pairs into buf) in one call: one
 *       entry of ids/timestamps (int64 bytes), names (display name, else name: a list of
 *       bytes) per line, `starts` (int64, one more than lines: each line's first row);
 *       the event columns as int64 bytes, of the events whose metadata_id is set in the
 *       bytes `keep` (every event when None): the first n rows of each are filled;
 *       `stats` is n x len(stat_ids) int64: the integer value (int64, uint64 or ref) of
 *       each wanted stat of each event, ABSENT where the event has none, OTHER where its
 *       value is a string, bytes or double; and `hashes`, same shape: a hash of each
 *       string value (0 elsewhere), by which the caller tells strings apart and reads one
 *       event per distinct string with protobuf; and `at`, n x 2: where each event's
 *       bytes start in buf, and their length.
 *   decode_line(buf, stat_ids, keep=None)
 *                                -> (id, timestamp_ns, name, display_name, n, ...): one
 *                                   line, the same columns (`at` into the line's bytes).
 *   self_times(start, dur, group=None)
 *                                -> each event's duration less its directly nested events'
 *       (events sorted by group then start, longer first at equal starts; events of
 *       different groups (lines) never nest; int64 bytes in and out).
 * What is damage: exactly what protobuf (upb, and so xprof) refuses in these messages, so
 * that this path and the protobuf walk agree on every file (docs/robustness.md): tags of
 * more than 5 bytes or beyond 32 bits, field number 0, wire types 6 and 7, a stray or
 * unmatched end of group, groups nested deeper than protobuf's limit (100 levels of
 * messages and groups from the XSpace), lengths past the end or of more than 5 bytes,
 * varints of more than 10 bytes, and string fields (line name and display name, string
 * stat values) that are not UTF-8. Every event is walked whole, those left out by `keep`
 * too; unknown fields and fields of an unexpected wire type are skipped, as protobuf keeps
 * them aside. Malformed input raises ValueError; the caller turns it into a one-line
 * error. Field numbers: analyzer/proto/xplane.proto.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ABSENT INT64_MIN
#define OTHER (INT64_MIN + 1)

#include "xplane_c/wire.h"
static PyObject *malformed(const char *what) {
    PyErr_Format(PyExc_ValueError, "malformed XSpace (%s)", what);
    return NULL;
}

static PyObject *split_plane(PyObject *self, PyObject *args) {
    Py_buffer view;
    int want = 3, depth = DEPTH_LIMIT - 1;
    unsigned long utf8 = 0; /* bit f: length-delimited values of field f must be UTF-8 */
    if (!PyArg_ParseTuple(args, "y*|iik", &view, &want, &depth, &utf8)) return NULL;
    Reader r = {view.buf, (const uint8_t *)view.buf + view.len};
    PyObject *lines = PyList_New(0);
    char *rest = malloc(view.len ? view.len : 1);
    size_t rest_len = 0;
    if (!lines || !rest) goto nomem;
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        uint32_t field;
        int wire;
        if (tag(&r, &field, &wire)) goto bad;
        if (field == (uint32_t)want && wire == 2) {
            Reader line;
            if (sub(&r, &line)) goto bad;
            PyObject *item = Py_BuildValue(
                "(nn)", (Py_ssize_t)(line.p - (const uint8_t *)view.buf),
                (Py_ssize_t)(line.end - line.p));
            if (!item || PyList_Append(lines, item)) { Py_XDECREF(item); goto nomem; }
            Py_DECREF(item);
        } else if (wire == 2 && field < 32 && (utf8 >> field & 1)) {
            Reader text;
            if (sub(&r, &text) || !utf8_ok(text.p, text.end)) goto bad;
        } else {
            if (skip(&r, field, wire, depth)) goto bad;
            memcpy(rest + rest_len, start, (size_t)(r.p - start));
            rest_len += (size_t)(r.p - start);
        }
    }
    PyObject *rest_bytes = PyBytes_FromStringAndSize(rest, (Py_ssize_t)rest_len);
    free(rest);
    PyBuffer_Release(&view);
    if (!rest_bytes) { Py_DECREF(lines); return NULL; }
    return Py_BuildValue("(NN)", lines, rest_bytes);
bad:
    Py_XDECREF(lines);
    free(rest);
    PyBuffer_Release(&view);
    return malformed(want == 3 ? "plane" : "space");
nomem:
    Py_XDECREF(lines);
    free(rest);
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
}

/* Output columns, written in place: the lines' events are counted first, so each column
 * is allocated once at its final size (as the bytes object returned), never regrown or
 * copied; fresh memory costs page faults, the larger part of decoding a big file. */
typedef struct {
    int64_t *mid, *off, *dur, *stats, *hashes, *at;
    size_t n, cap;
} Events;

/* FNV-1a of a string value: the key by which the caller tells strings apart. */
static int64_t fnv1a(const uint8_t *p, const uint8_t *end) {
    uint64_t h = 1469598103934665603ULL;
    for (; p < end; p++) h = (h ^ *p) * 1099511628211ULL;
    return (int64_t)(h >> 1) | 1; /* never 0: 0 means "not a string" */
}

/* Events whose metadata_id is not set in `keep` (when given) are left out of the
 * columns (a host line is mostly executor events no reader needs); they are still
 * walked whole, so that damage in them is found as protobuf finds it. */
typedef struct {
    const uint8_t *bits;
    size_t len;
} Keep;

static int kept(const Keep *keep, uint64_t mid) {
    return !keep->bits || (mid < keep->len && keep->bits[mid]);
}

/* One XStat: its wanted value into row/hrow when `store`; -1 on malformed input. */
static int decode_stat(Reader *st, int64_t *row, int64_t *hrow, const int64_t *ids,
                       size_t k, int store) {
    int64_t stat_id = 0, value = OTHER;
    const uint8_t *text = NULL, *text_end = NULL;
    while (st->p < st->end) {
        uint32_t f;
        int w;
        uint64_t v;
        if (tag(st, &f, &w)) return -1;
        if (w == 0 && (f == 1 || f == 3 || f == 4 || f == 7)) {
            if (varint(st, &v)) return -1;
            if (f == 1) stat_id = (int64_t)v;
            else { value = (int64_t)v; text = NULL; }
        } else if (w == 2 && (f == 5 || f == 6)) {
            Reader s;
            if (sub(st, &s)) return -1;
            if (f == 5 && !utf8_ok(s.p, s.end)) return -1;
            value = OTHER;
            text = s.p;
            text_end = s.end;
        } else if (w == 1 && f == 2) {
            if (skip(st, f, w, 0)) return -1;
            value = OTHER;
            text = NULL;
        } else if (skip(st, f, w, DEPTH_LIMIT - 4)) { /* unknown: the value stays */
            return -1;
        }
    }
    if (!store) return 0;
    for (size_t j = 0; j < k; j++)
        if (ids[j] == stat_id) {
            row[j] = value;
            hrow[j] = text ? fnv1a(text, text_end) : 0;
        }
    return 0;
}

/* One XEvent into row e->n (counted when kept); -1 on malformed input. */
static int decode_event(Reader *r, Events *e, const int64_t *ids, size_t k,
                        const Keep *keep, int force) {
    const Reader at = *r;
    size_t i = e->n;
    int64_t *row = e->stats + i * k, *hrow = e->hashes + i * k;
    int64_t mid = 0, off = 0, dur = 0;
    int store = 1, skipped = 0;
    for (size_t j = 0; j < k; j++) {
        row[j] = ABSENT;
        hrow[j] = 0;
    }
    while (r->p < r->end) {
        uint32_t field;
        int wire;
        uint64_t v;
        if (tag(r, &field, &wire)) return -1;
        if (wire == 0 && (field == 1 || field == 2 || field == 3 || field == 5)) {
            if (varint(r, &v)) return -1;
            if (field == 1) {
                mid = (int64_t)v;
                store = force || kept(keep, v);
            }
            else if (field == 2) off = (int64_t)v;
            else if (field == 3) dur = (int64_t)v;
            else off = 0; /* num_occurrences: the other member of offset_ps's oneof */
        } else if (field == 4 && wire == 2) {
            Reader st;
            if (sub(r, &st)) return -1;
            skipped |= !store;
            if (decode_stat(&st, row, hrow, ids, k, store)) return -1;
        } else if (skip(r, field, wire, DEPTH_LIMIT - 3)) {
            return -1;
        }
    }
    if (!kept(keep, (uint64_t)mid)) return 0; /* not counted: the row is reused */
    if (skipped && !force) { /* an earlier metadata_id left stats out: again, all kept */
        Reader again = at;
        return decode_event(&again, e, ids, k, keep, 1);
    }
    e->mid[i] = mid;
    e->off[i] = off;
    e->dur[i] = dur;
    e->n++;
    return 0;
}

typedef struct {
    int64_t id, ts;
    const uint8_t *name, *display;
    size_t name_len, display_len, count;
} LineHead;

/* Pass 1 over a line: its own fields, how many events it holds, its structure checked
 * (the events' insides are checked in pass 2). */
static int scan_line(Reader r, LineHead *h) {
    memset(h, 0, sizeof *h);
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        uint64_t v;
        if (tag(&r, &field, &wire)) return -1;
        if (wire == 0 && (field == 1 || field == 3)) {
            if (varint(&r, &v)) return -1;
            if (field == 1) h->id = (int64_t)v; else h->ts = (int64_t)v;
        } else if (wire == 2 && (field == 2 || field == 11 || field == 4)) {
            Reader s;
            if (sub(&r, &s)) return -1;
            if (field == 4) { h->count++; continue; }
            if (!utf8_ok(s.p, s.end)) return -1;
            if (field == 2) { h->name = s.p; h->name_len = (size_t)(s.end - s.p); }
            else { h->display = s.p; h->display_len = (size_t)(s.end - s.p); }
        } else if (skip(&r, field, wire, DEPTH_LIMIT - 2)) {
            return -1;
        }
    }
    return 0;
}

/* Pass 2: the line's events appended to `e` (`at` offsets from `base`). */
static int fill_line(Reader r, const uint8_t *base, Events *e, const int64_t *ids,
                     size_t k, const Keep *keep) {
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        if (tag(&r, &field, &wire)) return -1;
        if (wire == 2 && field == 4) {
            Reader s;
            if (sub(&r, &s) || e->n >= e->cap) return -1;
            e->at[2 * e->n] = (int64_t)(s.p - base);
            e->at[2 * e->n + 1] = (int64_t)(s.end - s.p);
            if (decode_event(&s, e, ids, k, keep, 0)) return -1;
        } else if (skip(&r, field, wire, DEPTH_LIMIT - 2)) {
            return -1;
        }
    }
    return 0;
}

/* The arguments decode_line and decode_lines share: wanted stat ids and keep. */
static int parse_wanted(PyObject *wanted, PyObject *keep_obj, int64_t *ids, size_t *k,
                        Keep *keep) {
    keep->bits = NULL;
    keep->len = 0;
    if (keep_obj != Py_None) {
        if (!PyBytes_Check(keep_obj)) {
            PyErr_SetString(PyExc_TypeError, "keep: bytes or None");
            return -1;
        }
        keep->bits = (const uint8_t *)PyBytes_AS_STRING(keep_obj);
        keep->len = (size_t)PyBytes_GET_SIZE(keep_obj);
    }
    *k = (size_t)PyTuple_GET_SIZE(wanted);
    if (*k > 16) {
        malformed("too many stats asked");
        return -1;
    }
    for (size_t j = 0; j < *k; j++) {
        ids[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(wanted, j));
        if (ids[j] == -1 && PyErr_Occurred()) return -1;
    }
    return 0;
}

/* The six event columns for `count` events (bytes objects, filled in place). */
static int alloc_events(PyObject **cols, Events *e, size_t count, size_t k) {
    const size_t widths[6] = {1, 1, 1, k, k, 2};
    for (int c = 0; c < 6; c++) {
        cols[c] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(count * widths[c] * 8));
        if (!cols[c]) {
            for (int d = 0; d < c; d++) Py_DECREF(cols[d]);
            return -1;
        }
    }
    int64_t **ptrs[6] = {&e->mid, &e->off, &e->dur, &e->stats, &e->hashes, &e->at};
    for (int c = 0; c < 6; c++) *ptrs[c] = (int64_t *)PyBytes_AS_STRING(cols[c]);
    e->n = 0;
    e->cap = count;
    return 0;
}

static PyObject *decode_line(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *wanted, *keep_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*O!|O", &view, &PyTuple_Type, &wanted, &keep_obj))
        return NULL;
    int64_t ids[16];
    size_t k;
    Keep keep;
    if (parse_wanted(wanted, keep_obj, ids, &k, &keep)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Reader r = {view.buf, (const uint8_t *)view.buf + view.len};
    LineHead h;
    int bad;
    Py_BEGIN_ALLOW_THREADS
    bad = scan_line(r, &h);
    Py_END_ALLOW_THREADS
    if (bad) { PyBuffer_Release(&view); return malformed("line"); }
    PyObject *cols[6];
    Events e;
    if (alloc_events(cols, &e, h.count, k)) { PyBuffer_Release(&view); return NULL; }
    Py_BEGIN_ALLOW_THREADS
    bad = fill_line(r, view.buf, &e, ids, k, &keep);
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (bad) {
        malformed("line");
        for (int c = 0; c < 6; c++) Py_DECREF(cols[c]);
    } else {
        result = Py_BuildValue(
            "(LLy#y#nNNNNNN)", (long long)h.id, (long long)h.ts,
            h.name ? (const char *)h.name : "", (Py_ssize_t)h.name_len,
            h.display ? (const char *)h.display : "", (Py_ssize_t)h.display_len,
            (Py_ssize_t)e.n, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]);
    }
    PyBuffer_Release(&view);
    return result;
}

/* Pass 1 over a batch of lines: their heads and event count; -1 on malformed input. */
static int scan_lines(const Py_buffer *view, const int64_t *spans, size_t n_lines,
                      LineHead *heads, size_t *total) {
    *total = 0;
    for (size_t j = 0; j < n_lines; j++) {
        int64_t o = spans[2 * j], len = spans[2 * j + 1];
        if (o < 0 || len < 0 || o > view->len || len > view->len - o) return -1;
        Reader r = {(const uint8_t *)view->buf + o, (const uint8_t *)view->buf + o + len};
        if (scan_line(r, &heads[j])) return -1;
        *total += heads[j].count;
    }
    return 0;
}

static PyObject *decode_lines(PyObject *self, PyObject *args) {
    Py_buffer view, sv;
    PyObject *wanted, *keep_obj = Py_None, *result = NULL, *names = NULL;
    PyObject *cols[6] = {NULL}, *line_cols[3] = {NULL};
    if (!PyArg_ParseTuple(args, "y*y*O!|O", &view, &sv, &PyTuple_Type, &wanted, &keep_obj))
        return NULL;
    int64_t ids[16];
    size_t k, total = 0, n_lines = (size_t)sv.len / 16;
    Keep keep;
    const int64_t *spans = sv.buf;
    LineHead *heads = malloc((n_lines ? n_lines : 1) * sizeof *heads);
    int bad = 0;
    if (!heads) { PyErr_NoMemory(); goto done; }
    if (parse_wanted(wanted, keep_obj, ids, &k, &keep)) goto done;
    Py_BEGIN_ALLOW_THREADS
    bad = scan_lines(&view, spans, n_lines, heads, &total);
    Py_END_ALLOW_THREADS
    if (bad) { malformed("line"); goto done; }
    Events e;
    if (alloc_events(cols, &e, total, k)) goto done;
    for (int c = 0; c < 3; c++) {
        line_cols[c] = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n_lines + (c == 2)) * 8));
        if (!line_cols[c]) goto done;
    }
    int64_t *lid = (int64_t *)PyBytes_AS_STRING(line_cols[0]);
    int64_t *lts = (int64_t *)PyBytes_AS_STRING(line_cols[1]);
    int64_t *starts = (int64_t *)PyBytes_AS_STRING(line_cols[2]);
    Py_BEGIN_ALLOW_THREADS
    for (size_t j = 0; j < n_lines && !bad; j++) {
        int64_t o = spans[2 * j], len = spans[2 * j + 1];
        Reader r = {(const uint8_t *)view.buf + o, (const uint8_t *)view.buf + o + len};
        lid[j] = heads[j].id;
        lts[j] = heads[j].ts;
        starts[j] = (int64_t)e.n;
        bad = fill_line(r, view.buf, &e, ids, k, &keep);
    }
    starts[n_lines] = (int64_t)e.n;
    Py_END_ALLOW_THREADS
    if (bad) { malformed("line"); goto done; }
    names = PyList_New((Py_ssize_t)n_lines);
    if (!names) goto done;
    for (size_t j = 0; j < n_lines; j++) {
        const LineHead *h = &heads[j];
        PyObject *name = h->display_len
            ? PyBytes_FromStringAndSize((const char *)h->display, (Py_ssize_t)h->display_len)
            : PyBytes_FromStringAndSize(h->name ? (const char *)h->name : "",
                                        (Py_ssize_t)h->name_len);
        if (!name) goto done;
        PyList_SET_ITEM(names, (Py_ssize_t)j, name);
    }
    result = Py_BuildValue("(NNNNnNNNNNN)", line_cols[0], line_cols[1], names, line_cols[2],
                           (Py_ssize_t)e.n, cols[0], cols[1], cols[2], cols[3], cols[4],
                           cols[5]);
    if (result) {
        memset(cols, 0, sizeof cols);
        memset(line_cols, 0, sizeof line_cols);
        names = NULL;
    }
done:
    for (int c = 0; c < 6; c++) Py_XDECREF(cols[c]);
    for (int c = 0; c < 3; c++) Py_XDECREF(line_cols[c]);
    Py_XDECREF(names);
    free(heads);
    PyBuffer_Release(&view);
    PyBuffer_Release(&sv);
    return result;
}

static PyObject *self_times(PyObject *self, PyObject *args) {
    Py_buffer sv, dv, gv = {0};
    if (!PyArg_ParseTuple(args, "y*y*|y*", &sv, &dv, &gv)) return NULL;
    size_t n = (size_t)sv.len / 8;
    const int64_t *g = gv.buf;
    if ((size_t)dv.len / 8 != n || (g && (size_t)gv.len / 8 != n)) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&dv);
        if (gv.buf) PyBuffer_Release(&gv);
        return malformed("columns of different lengths");
    }
    const int64_t *s = sv.buf, *d = dv.buf;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    size_t *stack = malloc((n ? n : 1) * sizeof *stack);
    if (!out || !stack) {
        Py_XDECREF(out);
        free(stack);
        PyBuffer_Release(&sv);
        PyBuffer_Release(&dv);
        if (gv.buf) PyBuffer_Release(&gv);
        return PyErr_NoMemory();
    }
    int64_t *own = (int64_t *)PyBytes_AS_STRING(out);
    size_t top = 0;
    for (size_t i = 0; i < n; i++) {
        own[i] = d[i];
        if (g && i && g[i] != g[i - 1]) top = 0; /* a new line: nothing nests across */
        while (top && s[i] >= s[stack[top - 1]] + d[stack[top - 1]]) top--;
        if (top) own[stack[top - 1]] -= d[i];
        stack[top++] = i;
    }
    free(stack);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&dv);
    if (gv.buf) PyBuffer_Release(&gv);
    return out;
}

static PyMethodDef methods[] = {
    {"split_plane", split_plane, METH_VARARGS,
     "An XPlane's lines (offset, length) and the rest (or an XSpace's planes)."},
    {"decode_line", decode_line, METH_VARARGS, "An XLine's header and event columns."},
    {"decode_lines", decode_lines, METH_VARARGS, "A batch of XLines' heads and event columns."},
    {"self_times", self_times, METH_VARARGS,
     "Durations less directly nested events' (of the same group)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xplane", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xplane(void) { return PyModule_Create(&module); }
