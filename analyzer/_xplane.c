/* Native decoding of XSpace wire bytes (TF2/JAX profiles): the xplane source's fast path.
 *
 * Why: walking XEvent messages with protobuf costs several microseconds per event (and
 * holds the whole parsed tree, 2-3x the file, in memory); a big profile has tens of
 * millions of events. These functions read the wire format of the file's bytes (mapped,
 * not copied) directly into columns:
 *   split_plane(buf)             -> (list of (offset, length) of its lines, the plane's
 *                                   other bytes: name and metadata, for protobuf)
 *   decode_line(buf, stat_ids)   -> (id, timestamp_ns, name, display_name, n,
 *                                   metadata_id, offset_ps, duration_ps, stats)
 *       columns as int64 bytes; `stats` is n x len(stat_ids) int64: the integer value
 *       (int64, uint64 or ref) of each wanted stat of each event, ABSENT where the event
 *       has none, OTHER where its value is a string, bytes or double; and `hashes`, same
 *       shape: a hash of each string value (0 elsewhere), by which the caller tells
 *       strings apart and reads one event per distinct string with protobuf; and `at`,
 *       n x 2: where each event's bytes start in the line, and their length.
 *   self_times(start, dur)       -> each event's duration less its directly nested events'
 *       (events sorted by start, longer first at equal starts; int64 bytes in and out).
 * Malformed input raises ValueError; the caller turns it into a one-line error.
 * Field numbers: analyzer/proto/xplane.proto.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ABSENT INT64_MIN
#define OTHER (INT64_MIN + 1)

typedef struct {
    const uint8_t *p, *end;
} Reader;

static int varint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Skips a field's value of `wire` type; -1 on malformed input. */
static int skip(Reader *r, int wire) {
    uint64_t n;
    switch (wire) {
    case 0: return varint(r, &n);
    case 1: if (r->end - r->p < 8) return -1; r->p += 8; return 0;
    case 2:
        if (varint(r, &n) || (uint64_t)(r->end - r->p) < n) return -1;
        r->p += n;
        return 0;
    case 5: if (r->end - r->p < 4) return -1; r->p += 4; return 0;
    default: return -1;
    }
}

/* A length-delimited value: sets *sub to it. */
static int sub(Reader *r, Reader *out) {
    uint64_t n;
    if (varint(r, &n) || (uint64_t)(r->end - r->p) < n) return -1;
    out->p = r->p;
    out->end = r->p + n;
    r->p += n;
    return 0;
}

static PyObject *malformed(const char *what) {
    PyErr_Format(PyExc_ValueError, "malformed XSpace (%s)", what);
    return NULL;
}

static PyObject *split_plane(PyObject *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    Reader r = {view.buf, (const uint8_t *)view.buf + view.len};
    PyObject *lines = PyList_New(0);
    char *rest = malloc(view.len ? view.len : 1);
    size_t rest_len = 0;
    if (!lines || !rest) goto nomem;
    while (r.p < r.end) {
        const uint8_t *start = r.p;
        uint64_t key;
        if (varint(&r, &key)) goto bad;
        if ((key >> 3) == 3 && (key & 7) == 2) {
            Reader line;
            if (sub(&r, &line)) goto bad;
            PyObject *item = Py_BuildValue(
                "(nn)", (Py_ssize_t)(line.p - (const uint8_t *)view.buf),
                (Py_ssize_t)(line.end - line.p));
            if (!item || PyList_Append(lines, item)) { Py_XDECREF(item); goto nomem; }
            Py_DECREF(item);
        } else {
            if (skip(&r, (int)(key & 7))) goto bad;
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
    return malformed("plane");
nomem:
    Py_XDECREF(lines);
    free(rest);
    PyBuffer_Release(&view);
    return PyErr_NoMemory();
}

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

static int events_grow_to(Events *e, size_t k, size_t cap);

static int events_grow(Events *e, size_t k) {
    if (e->n < e->cap) return 0;
    return events_grow_to(e, k, e->cap ? e->cap * 2 : 1024);
}

static int events_grow_to(Events *e, size_t k, size_t cap) {
    int64_t *a = realloc(e->mid, cap * 8), *b, *c, *d;
    if (!a) return -1;
    e->mid = a;
    if (!(b = realloc(e->off, cap * 8))) return -1;
    e->off = b;
    if (!(c = realloc(e->dur, cap * 8))) return -1;
    e->dur = c;
    if (!(d = realloc(e->stats, cap * 8 * (k ? k : 1)))) return -1;
    e->stats = d;
    if (!(d = realloc(e->hashes, cap * 8 * (k ? k : 1)))) return -1;
    e->hashes = d;
    if (!(d = realloc(e->at, cap * 8 * 2))) return -1;
    e->at = d;
    e->cap = cap;
    return 0;
}

/* One XEvent's fields into row `i`; -1 on malformed input. */
static int decode_event(Reader *r, Events *e, const int64_t *ids, size_t k) {
    size_t i = e->n;
    int64_t *row = e->stats + i * k, *hrow = e->hashes + i * k;
    e->mid[i] = 0;
    e->off[i] = 0;
    e->dur[i] = 0;
    for (size_t j = 0; j < k; j++) {
        row[j] = ABSENT;
        hrow[j] = 0;
    }
    while (r->p < r->end) {
        uint64_t key, v;
        if (varint(r, &key)) return -1;
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (wire == 0 && (field == 1 || field == 2 || field == 3 || field == 5)) {
            if (varint(r, &v)) return -1;
            if (field == 1) e->mid[i] = (int64_t)v;
            else if (field == 2) e->off[i] = (int64_t)v;
            else if (field == 3) e->dur[i] = (int64_t)v;
        } else if (field == 4 && wire == 2) {
            Reader st;
            if (sub(r, &st)) return -1;
            int64_t stat_id = 0, value = OTHER, hash = 0;
            while (st.p < st.end) {
                uint64_t skey, sv;
                if (varint(&st, &skey)) return -1;
                int sf = (int)(skey >> 3), sw = (int)(skey & 7);
                if (sw == 0 && sf == 1) {
                    if (varint(&st, &sv)) return -1;
                    stat_id = (int64_t)sv;
                } else if (sw == 0 && (sf == 3 || sf == 4 || sf == 7)) {
                    if (varint(&st, &sv)) return -1;
                    value = (int64_t)sv;
                } else if (sw == 2 && (sf == 5 || sf == 6)) {
                    Reader text;
                    if (sub(&st, &text)) return -1;
                    value = OTHER;
                    /* Hashed only for a wanted stat (its id comes first, canonically). */
                    int want = stat_id == 0;
                    for (size_t j = 0; j < k && !want; j++) want = ids[j] == stat_id;
                    hash = want ? fnv1a(text.p, text.end) : 0;
                } else {
                    if (skip(&st, sw)) return -1;
                    value = OTHER;
                    hash = 0;
                }
            }
            for (size_t j = 0; j < k; j++)
                if (ids[j] == stat_id) {
                    row[j] = value;
                    hrow[j] = value == OTHER ? hash : 0;
                }
        } else if (skip(r, wire)) {
            return -1;
        }
    }
    e->n++;
    return 0;
}

static PyObject *col(const int64_t *data, size_t n) {
    return PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)(n * 8));
}

static PyObject *decode_line(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *wanted;
    if (!PyArg_ParseTuple(args, "y*O!", &view, &PyTuple_Type, &wanted)) return NULL;
    size_t k = (size_t)PyTuple_GET_SIZE(wanted);
    int64_t ids[16];
    if (k > 16) { PyBuffer_Release(&view); return malformed("too many stats asked"); }
    for (size_t j = 0; j < k; j++) {
        ids[j] = PyLong_AsLongLong(PyTuple_GET_ITEM(wanted, j));
        if (ids[j] == -1 && PyErr_Occurred()) { PyBuffer_Release(&view); return NULL; }
    }
    Reader r = {view.buf, (const uint8_t *)view.buf + view.len};
    Events e = {0};
    /* Room for about as many events as the line holds, so that columns rarely regrow
     * (a failure here is met again, and reported, by the first events_grow). */
    if ((size_t)view.len / 48 > 1024) (void)events_grow_to(&e, k, (size_t)view.len / 48);
    int64_t line_id = 0, ts = 0;
    const uint8_t *name = NULL, *display = NULL;
    size_t name_len = 0, display_len = 0;
    int bad = 0, nomem = 0;
    Py_BEGIN_ALLOW_THREADS
    while (r.p < r.end && !bad && !nomem) {
        uint64_t key, v;
        if (varint(&r, &key)) { bad = 1; break; }
        int field = (int)(key >> 3), wire = (int)(key & 7);
        if (wire == 0 && (field == 1 || field == 3)) {
            if (varint(&r, &v)) { bad = 1; break; }
            if (field == 1) line_id = (int64_t)v; else ts = (int64_t)v;
        } else if (wire == 2 && (field == 2 || field == 11 || field == 4)) {
            Reader s;
            if (sub(&r, &s)) { bad = 1; break; }
            if (field == 2) { name = s.p; name_len = (size_t)(s.end - s.p); }
            else if (field == 11) { display = s.p; display_len = (size_t)(s.end - s.p); }
            else {
                if (events_grow(&e, k)) { nomem = 1; break; }
                e.at[2 * e.n] = (int64_t)(s.p - (const uint8_t *)view.buf);
                e.at[2 * e.n + 1] = (int64_t)(s.end - s.p);
                if (decode_event(&s, &e, ids, k)) bad = 1;
            }
        } else if (skip(&r, wire)) {
            bad = 1;
        }
    }
    Py_END_ALLOW_THREADS
    PyObject *result = NULL;
    if (bad) malformed("line");
    else if (nomem) PyErr_NoMemory();
    else
        result = Py_BuildValue(
            "(LLy#y#nNNNNNN)", (long long)line_id, (long long)ts,
            name ? (const char *)name : "", (Py_ssize_t)name_len,
            display ? (const char *)display : "", (Py_ssize_t)display_len,
            (Py_ssize_t)e.n, col(e.mid, e.n), col(e.off, e.n), col(e.dur, e.n),
            col(e.stats, e.n * k), col(e.hashes, e.n * k), col(e.at, e.n * 2));
    free(e.mid);
    free(e.at);
    free(e.hashes);
    free(e.off);
    free(e.dur);
    free(e.stats);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *self_times(PyObject *self, PyObject *args) {
    Py_buffer sv, dv;
    if (!PyArg_ParseTuple(args, "y*y*", &sv, &dv)) return NULL;
    size_t n = (size_t)sv.len / 8;
    if ((size_t)dv.len / 8 != n) {
        PyBuffer_Release(&sv);
        PyBuffer_Release(&dv);
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
        return PyErr_NoMemory();
    }
    int64_t *own = (int64_t *)PyBytes_AS_STRING(out);
    size_t top = 0;
    for (size_t i = 0; i < n; i++) {
        own[i] = d[i];
        while (top && s[i] >= s[stack[top - 1]] + d[stack[top - 1]]) top--;
        if (top) own[stack[top - 1]] -= d[i];
        stack[top++] = i;
    }
    free(stack);
    PyBuffer_Release(&sv);
    PyBuffer_Release(&dv);
    return out;
}

static PyMethodDef methods[] = {
    {"split_plane", split_plane, METH_VARARGS, "An XPlane's lines (offset, length) and the rest."},
    {"decode_line", decode_line, METH_VARARGS, "An XLine's header and event columns."},
    {"self_times", self_times, METH_VARARGS, "Durations less directly nested events'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_xplane", NULL, -1, methods};

PyMODINIT_FUNC PyInit__xplane(void) { return PyModule_Create(&module); }
