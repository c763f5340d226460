/* The timed runs and memory of a tfprof ProfileProto, read straight from its wire bytes.

Walking ProfileNode.execs (map<int64, ExecProfile>) with protobuf's Python objects costs
~0.5 s for 1,000 steps of 224 nodes (one Python object per ExecProfile, ExecTime and
Tuple); this reads the same fields in one pass and returns columns:

  runs(raw) -> (node, step, lane, start, dur,                       # one row per Tuple
                mem_node, mem_step, requested, peak, residual,      # one row per
                allocator_bytes_in_use, output_bytes,               # ExecProfile with memory
                lanes)                                              # lane index -> str

int64 columns as bytes (numpy.frombuffer). `node` is the nodes map key; a step's memory
is summed over its memory_execs (allocator_bytes_in_use: the largest), as
analyzer/sources/tfprof.py's Python walk does. ValueError on malformed input. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct { const uint8_t *p, *end; } Reader;
typedef struct { int64_t *d; size_t n, cap; } Col;
typedef struct { uint32_t number, wire; uint64_t v; Reader sub; } Field;

#define MAX_LANES 4096
typedef struct {
    Col c[12];
    const uint8_t *lane_p[MAX_LANES];
    size_t lane_n[MAX_LANES];
    int lanes;
    const char *error;
} Out;

enum { NODE, STEP, LANE, START, DUR, M_NODE, M_STEP, M_REQ, M_PEAK, M_RES, M_ALLOC, M_OUT };

static int put(Col *c, int64_t v) {
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 1024;
        int64_t *d = realloc(c->d, cap * sizeof(int64_t));
        if (!d) return -1;
        c->d = d;
        c->cap = cap;
    }
    c->d[c->n++] = v;
    return 0;
}

static inline int varint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *out = v; return 0; }
    }
    return -1;
}

/* 1: a field read, 0: end of message, -1: malformed */
static int next_field(Reader *r, Field *f) {
    uint64_t tag, n;
    if (r->p >= r->end) return 0;
    if (varint(r, &tag)) return -1;
    f->number = (uint32_t)(tag >> 3);
    f->wire = (uint32_t)(tag & 7);
    switch (f->wire) {
    case 0: return varint(r, &f->v) ? -1 : 1;
    case 1: if (r->end - r->p < 8) return -1; r->p += 8; return 1;
    case 5: if (r->end - r->p < 4) return -1; r->p += 4; return 1;
    case 2:
        if (varint(r, &n) || n > (uint64_t)(r->end - r->p)) return -1;
        f->sub.p = r->p;
        f->sub.end = r->p + n;
        r->p += n;
        return 1;
    default: return -1;
    }
}

/* a map entry: key (field 1, varint or bytes) and value (field 2, bytes) */
static int map_entry(Reader r, uint64_t *key, Reader *key_bytes, Reader *value) {
    Field f;
    int rc;
    *key = 0;
    key_bytes->p = key_bytes->end = r.p;
    value->p = value->end = r.p;
    while ((rc = next_field(&r, &f)) == 1) {
        if (f.number == 1 && f.wire == 0) *key = f.v;
        else if (f.number == 1 && f.wire == 2) *key_bytes = f.sub;
        else if (f.number == 2 && f.wire == 2) *value = f.sub;
    }
    return rc;
}

static int lane_index(Out *o, Reader s) {
    size_t n = (size_t)(s.end - s.p);
    for (int i = 0; i < o->lanes; i++)
        if (o->lane_n[i] == n && memcmp(o->lane_p[i], s.p, n) == 0) return i;
    if (o->lanes == MAX_LANES) { o->error = "too many device lanes"; return -1; }
    o->lane_p[o->lanes] = s.p;
    o->lane_n[o->lanes] = n;
    return o->lanes++;
}

/* Tuple: exactly two int64_values (start, duration), packed or not */
static int tuple_pair(Out *o, Reader r, int64_t pair[2]) {
    Field f;
    int rc, count = 0;
    while ((rc = next_field(&r, &f)) == 1) {
        if (f.number != 1) continue;
        if (f.wire == 0) {
            if (count < 2) pair[count] = (int64_t)f.v;
            count++;
        } else if (f.wire == 2) {
            uint64_t v;
            while (f.sub.p < f.sub.end) {
                if (varint(&f.sub, &v)) return -1;
                if (count < 2) pair[count] = (int64_t)v;
                count++;
            }
        }
    }
    if (rc < 0) return -1;
    if (count != 2) { o->error = "a run time that is not (start, duration)"; return -1; }
    return 0;
}

static int exec_times(Out *o, Reader entry, uint64_t node, uint64_t step) {
    uint64_t unused;
    Reader lane, value;
    Field f;
    int rc, idx;
    if (map_entry(entry, &unused, &lane, &value) < 0) return -1;
    idx = lane_index(o, lane);
    if (idx < 0) return -1;
    while ((rc = next_field(&value, &f)) == 1) {
        int64_t pair[2];
        if (f.number != 1 || f.wire != 2) continue;
        if (tuple_pair(o, f.sub, pair)) return -1;
        if (put(&o->c[NODE], (int64_t)node) || put(&o->c[STEP], (int64_t)step)
            || put(&o->c[LANE], idx) || put(&o->c[START], pair[0])
            || put(&o->c[DUR], pair[1])) { o->error = "out of memory"; return -1; }
    }
    return rc;
}

static int exec_profile(Out *o, Reader r, uint64_t node, uint64_t step) {
    Field f, g;
    int rc, rc2, memories = 0;
    int64_t req = 0, peak = 0, res = 0, alloc = 0, out = 0;
    while ((rc = next_field(&r, &f)) == 1) {
        if (f.wire != 2) continue;
        if (f.number == 4 || f.number == 5) {
            if (exec_times(o, f.sub, node, step)) return -1;
        } else if (f.number == 7) {
            int64_t m_alloc = 0;
            while ((rc2 = next_field(&f.sub, &g)) == 1) {
                if (g.wire != 0) continue;
                switch (g.number) {
                case 6: req += (int64_t)g.v; break;
                case 7: peak += (int64_t)g.v; break;
                case 8: res += (int64_t)g.v; break;
                case 9: out += (int64_t)g.v; break;
                case 10: m_alloc = (int64_t)g.v; break;
                }
            }
            if (rc2 < 0) return -1;
            if (memories == 0 || m_alloc > alloc) alloc = m_alloc;
            memories++;
        }
    }
    if (rc < 0) return -1;
    if (memories && (put(&o->c[M_NODE], (int64_t)node) || put(&o->c[M_STEP], (int64_t)step)
                     || put(&o->c[M_REQ], req) || put(&o->c[M_PEAK], peak)
                     || put(&o->c[M_RES], res) || put(&o->c[M_ALLOC], alloc)
                     || put(&o->c[M_OUT], out))) {
        o->error = "out of memory";
        return -1;
    }
    return 0;
}

static int profile_node(Out *o, Reader r, uint64_t node) {
    Field f;
    int rc;
    while ((rc = next_field(&r, &f)) == 1) {
        uint64_t step;
        Reader unused, value;
        if (f.number != 12 || f.wire != 2) continue;
        if (map_entry(f.sub, &step, &unused, &value) < 0) return -1;
        if (exec_profile(o, value, node, step)) return -1;
    }
    return rc;
}

static int profile(Out *o, Reader r) {
    Field f;
    int rc;
    while ((rc = next_field(&r, &f)) == 1) {
        uint64_t node;
        Reader unused, value;
        if (f.number != 1 || f.wire != 2) continue;
        if (map_entry(f.sub, &node, &unused, &value) < 0) return -1;
        if (profile_node(o, value, node)) return -1;
    }
    return rc;
}

static PyObject *runs(PyObject *Py_UNUSED(module), PyObject *arg) {
    Py_buffer view;
    Out *o;
    PyObject *result = NULL, *lanes = NULL;
    int rc;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    o = calloc(1, sizeof(Out));
    if (!o) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    Py_BEGIN_ALLOW_THREADS
    rc = profile(o, r);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        PyErr_SetString(PyExc_ValueError, o->error ? o->error : "malformed protobuf");
        goto done;
    }
    lanes = PyList_New(o->lanes);
    if (!lanes) goto done;
    for (int i = 0; i < o->lanes; i++) {
        PyObject *s = PyUnicode_DecodeUTF8((const char *)o->lane_p[i],
                                           (Py_ssize_t)o->lane_n[i], "strict");
        if (!s) goto done;
        PyList_SET_ITEM(lanes, i, s);
    }
    result = PyTuple_New(13);
    if (!result) goto done;
    for (int i = 0; i < 12; i++) {
        PyObject *b = PyBytes_FromStringAndSize(o->c[i].d ? (const char *)o->c[i].d : "",
                                                (Py_ssize_t)(o->c[i].n * sizeof(int64_t)));
        if (!b) { Py_CLEAR(result); goto done; }
        PyTuple_SET_ITEM(result, i, b);
    }
    PyTuple_SET_ITEM(result, 12, lanes);
    lanes = NULL;
done:
    Py_XDECREF(lanes);
    for (int i = 0; i < 12; i++) free(o->c[i].d);
    free(o);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"runs", runs, METH_O, "runs(raw) -> int64 columns of a ProfileProto's runs and memory"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_tfprof",
                                    "A ProfileProto's runs, read from its wire bytes.", -1,
                                    methods};

PyMODINIT_FUNC PyInit__tfprof(void) { return PyModule_Create(&module); }
