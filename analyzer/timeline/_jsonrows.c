/* Native renderer of rows of JSON text: analyzer/jsonrows.py's fast path.
 *
 * Why: a timeline of 200k node stats is ~86 MB of JSON, one object per event. Rendered
 * with polars (concat_str, then write_csv) that costs ~100 ms of CPU; most of it is
 * copying the same per-node text over and over and converting integers to text. Here a
 * row is a few memcpy calls and two integer conversions, with the GIL released.
 *
 * A row is the concatenation of its segments, each one of
 *   (0, literal: bytes)                                    the same bytes on every row
 *   (1, values: int64 buffer)                              values[row] in decimal
 *   (2, index: int64 buffer, blob: bytes, offsets: int64)  blob[offsets[i]:offsets[i+1]],
 *                                                          i = index[row]
 *   (3, first, item, blob, offsets, dims_first, dims)      a JSON list of the items
 *       first[row]..first[row+1]-1, each "<text>[<dims>]" (the text of item[j] in blob,
 *       already escaped; dims[dims_first[j]..dims_first[j+1]-1] joined by commas), or
 *       null when item[j] < 0: the outputs of an op, "float[32,784]" (all int64 buffers)
 * render(segments, start, stop, prefix, suffix) returns the bytes of rows start..stop-1,
 * each as prefix + segments + suffix. jsonrows.py renders the same rows with polars when
 * this module is not built (tests/test_timeline_render.py checks they agree byte for byte).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int kind;
    const char *lit; /* kind 0 */
    Py_ssize_t lit_len;
    const int64_t *values; /* kind 1: values; kind 2: text index; kind 3: first */
    Py_ssize_t n;
    const char *blob; /* kinds 2, 3 */
    const int64_t *offsets;
    Py_ssize_t texts; /* number of texts: offsets has texts + 1 entries */
    const int64_t *item, *dims_first, *dims; /* kind 3 */
    Py_ssize_t items, ndims;
} Seg;

#define VIEWS 6 /* buffers held per segment, at most */

static const char DIGITS[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Decimal text of v at p; returns the number of bytes (at most 20). */
static inline size_t put_int(char *p, int64_t v) {
    char tmp[24];
    char *end = tmp + sizeof tmp, *q = end;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        unsigned d = (unsigned)(u % 100) * 2;
        u /= 100;
        *--q = DIGITS[d + 1];
        *--q = DIGITS[d];
    }
    if (u >= 10) {
        unsigned d = (unsigned)u * 2;
        *--q = DIGITS[d + 1];
        *--q = DIGITS[d];
    } else {
        *--q = (char)('0' + u);
    }
    if (v < 0) *--q = '-';
    size_t len = (size_t)(end - q);
    memcpy(p, q, len);
    return len;
}

static int get_int64(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    if (view->itemsize != 8 || (strcmp(f, "q") && strcmp(f, "l"))) {
        PyErr_Format(PyExc_TypeError, "render: %s must be an int64 array", what);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *render(PyObject *self, PyObject *args) {
    PyObject *segments;
    Py_ssize_t start, stop;
    Py_buffer prefix, suffix;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!nny*y*", &PyList_Type, &segments, &start, &stop,
                          &prefix, &suffix))
        return NULL;
    Py_ssize_t nseg = PyList_GET_SIZE(segments);
    Seg *segs = PyMem_Calloc((size_t)nseg + 1, sizeof(Seg));
    Py_buffer *views = PyMem_Calloc(VIEWS * (size_t)nseg + 1, sizeof(Py_buffer));
    int *held = PyMem_Calloc(VIEWS * (size_t)nseg + 1, sizeof(int));
    PyObject *out = NULL;
    if (!segs || !views || !held) {
        PyErr_NoMemory();
        goto done;
    }
    if (start < 0 || stop < start) {
        PyErr_SetString(PyExc_ValueError, "render: bad row range");
        goto done;
    }
    Py_ssize_t rows = stop - start;
    /* The fixed bytes of a row (literals, prefix, suffix) and the room for integers. */
    size_t fixed = (size_t)prefix.len + (size_t)suffix.len;
    for (Py_ssize_t s = 0; s < nseg; s++) {
        PyObject *t = PyList_GET_ITEM(segments, s);
        int kind;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) < 2 ||
            (kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0))) < 0 || kind > 3 ||
            PyTuple_GET_SIZE(t) != (kind == 3 ? 7 : kind == 2 ? 4 : 2)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "render: bad segment");
            goto done;
        }
        Seg *g = &segs[s];
        Py_buffer *v = &views[VIEWS * s];
        int *h = &held[VIEWS * s];
        g->kind = kind;
        if (kind == 0) {
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(t, 1), &v[0], PyBUF_SIMPLE) < 0)
                goto done;
            h[0] = 1;
            g->lit = v[0].buf;
            g->lit_len = v[0].len;
            fixed += (size_t)g->lit_len;
            continue;
        }
        if (get_int64(PyTuple_GET_ITEM(t, 1), &v[0], "values")) goto done;
        h[0] = 1;
        g->values = v[0].buf;
        g->n = v[0].len / 8;
        if (g->n < stop + (kind == 3)) {
            PyErr_SetString(PyExc_ValueError, "render: a column is shorter than the rows");
            goto done;
        }
        if (kind == 1) {
            fixed += 20;
            continue;
        }
        int at = kind == 3 ? 2 : 1; /* the blob and its offsets */
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(t, at + 1), &v[1], PyBUF_SIMPLE) < 0)
            goto done;
        h[1] = 1;
        g->blob = v[1].buf;
        if (get_int64(PyTuple_GET_ITEM(t, at + 2), &v[2], "offsets")) goto done;
        h[2] = 1;
        g->offsets = v[2].buf;
        g->texts = v[2].len / 8 - 1;
        if (kind == 3) {
            if (get_int64(PyTuple_GET_ITEM(t, 2), &v[3], "items")) goto done;
            h[3] = 1;
            g->item = v[3].buf;
            g->items = v[3].len / 8;
            if (get_int64(PyTuple_GET_ITEM(t, 5), &v[4], "dims_first")) goto done;
            h[4] = 1;
            g->dims_first = v[4].buf;
            if (get_int64(PyTuple_GET_ITEM(t, 6), &v[5], "dims")) goto done;
            h[5] = 1;
            g->dims = v[5].buf;
            g->ndims = v[5].len / 8;
            if (v[4].len / 8 != g->items + 1 || g->dims_first[0] != 0 ||
                g->dims_first[g->items] != g->ndims) {
                PyErr_SetString(PyExc_ValueError, "render: dims_first does not fit dims");
                goto done;
            }
            for (Py_ssize_t j = 0; j < g->items; j++) {
                if (g->dims_first[j + 1] < g->dims_first[j] || g->item[j] >= g->texts) {
                    PyErr_SetString(PyExc_ValueError, "render: bad dims_first or item");
                    goto done;
                }
            }
        }
        if (g->texts < 0 || g->offsets[0] < 0 || g->offsets[g->texts] > v[1].len) {
            PyErr_SetString(PyExc_ValueError, "render: offsets outside the blob");
            goto done;
        }
        for (Py_ssize_t i = 0; i < g->texts; i++) {
            if (g->offsets[i + 1] < g->offsets[i]) {
                PyErr_SetString(PyExc_ValueError, "render: offsets not ascending");
                goto done;
            }
        }
    }
    /* Exact size of the texts, checking every index. */
    size_t size = fixed * (size_t)rows;
    for (Py_ssize_t s = 0; s < nseg; s++) {
        Seg *g = &segs[s];
        if (g->kind == 3) {
            for (Py_ssize_t r = start; r < stop; r++) {
                int64_t a = g->values[r], b = g->values[r + 1];
                if (a < 0 || b < a || b > g->items) {
                    PyErr_SetString(PyExc_IndexError, "render: item range out of range");
                    goto done;
                }
                size += 2 + (size_t)(b - a); /* brackets and commas (one too many) */
                for (int64_t j = a; j < b; j++) {
                    int64_t i = g->item[j];
                    size += i < 0 ? 4
                                  : 4 + (size_t)(g->offsets[i + 1] - g->offsets[i]) +
                                        21 * (size_t)(g->dims_first[j + 1] - g->dims_first[j]);
                }
            }
            continue;
        }
        if (g->kind != 2) continue;
        for (Py_ssize_t r = start; r < stop; r++) {
            int64_t i = g->values[r];
            if (i < 0 || i >= g->texts) {
                PyErr_SetString(PyExc_IndexError, "render: text index out of range");
                goto done;
            }
            size += (size_t)(g->offsets[i + 1] - g->offsets[i]);
        }
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size);
    if (!out) goto done;
    char *p = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    const char *pre = prefix.buf, *suf = suffix.buf;
    size_t npre = (size_t)prefix.len, nsuf = (size_t)suffix.len;
    for (Py_ssize_t r = start; r < stop; r++) {
        memcpy(p, pre, npre);
        p += npre;
        for (Py_ssize_t s = 0; s < nseg; s++) {
            const Seg *g = &segs[s];
            if (g->kind == 0) {
                memcpy(p, g->lit, (size_t)g->lit_len);
                p += g->lit_len;
            } else if (g->kind == 1) {
                p += put_int(p, g->values[r]);
            } else if (g->kind == 2) {
                int64_t i = g->values[r];
                size_t len = (size_t)(g->offsets[i + 1] - g->offsets[i]);
                memcpy(p, g->blob + g->offsets[i], len);
                p += len;
            } else {
                *p++ = '[';
                for (int64_t j = g->values[r]; j < g->values[r + 1]; j++) {
                    if (j > g->values[r]) *p++ = ',';
                    int64_t i = g->item[j];
                    if (i < 0) {
                        memcpy(p, "null", 4);
                        p += 4;
                        continue;
                    }
                    size_t len = (size_t)(g->offsets[i + 1] - g->offsets[i]);
                    *p++ = '"';
                    memcpy(p, g->blob + g->offsets[i], len);
                    p += len;
                    *p++ = '[';
                    for (int64_t d = g->dims_first[j]; d < g->dims_first[j + 1]; d++) {
                        if (d > g->dims_first[j]) *p++ = ',';
                        p += put_int(p, g->dims[d]);
                    }
                    *p++ = ']';
                    *p++ = '"';
                }
                *p++ = ']';
            }
        }
        memcpy(p, suf, nsuf);
        p += nsuf;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t used = (Py_ssize_t)(p - PyBytes_AS_STRING(out));
    if (used != (Py_ssize_t)size && _PyBytes_Resize(&out, used) < 0) out = NULL;
done:
    for (Py_ssize_t i = 0; held && i < VIEWS * nseg; i++)
        if (held[i]) PyBuffer_Release(&views[i]);
    PyBuffer_Release(&prefix);
    PyBuffer_Release(&suffix);
    PyMem_Free(segs);
    PyMem_Free(views);
    PyMem_Free(held);
    return out;
}

static PyMethodDef methods[] = {
    {"render", render, METH_VARARGS,
     "render(segments, start, stop, prefix, suffix) -> bytes: rows start..stop-1 of JSON "
     "text (see analyzer/jsonrows.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jsonrows",
    "Rows of JSON text from literals, int64 columns and indexed texts.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jsonrows(void) { return PyModule_Create(&module); }
