/* The Python side: the Decoder type (add/finish, rolled back on a failed add) and the
 * Column type that hands a finished column's buffer to numpy or polars without a copy.
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

/* ------------------------------------------------------------------ Python type */

#define ALL_TABLES(X) \
    X(nodes, N_COLS) X(outputs, O_COLS) X(memory, M_COLS) X(allocs, A_COLS) X(threads, T_COLS)

static void decoder_dealloc(Decoder *d) {
#define FREE_TABLE(t, n) for (int i = 0; i < n; i++) free(d->t[i].data);
    ALL_TABLES(FREE_TABLE)
#undef FREE_TABLE
    interner_free(&d->strings);
    interner_free(&d->shapes);
    interner_free(&d->keys);
    interner_free(&d->out_keys);
    interner_free(&d->tids);
    free(d->tid_rows.data);
    free(d->device_nodes.data);
    Py_TYPE(d)->tp_free((PyObject *)d);
}

/* After the first message, room for what the expected bytes will add at the same rate:
 * growing a column by doubling copies it each time and touches twice the memory. */
static void reserve_expected(Decoder *d, double scale) {
    scale *= 1.05;
#define RESERVE(t, n) \
    for (int i = 0; i < n; i++) \
        if (d->t[i].len) buf_reserve(&d->t[i], (size_t)(d->t[i].len * scale) - d->t[i].len);
    ALL_TABLES(RESERVE)
#undef RESERVE
}

static PyObject *decoder_expect(Decoder *d, PyObject *arg) {
    Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred()) return NULL;
    d->expected = n > 0 ? (size_t)n : 0;
    Py_RETURN_NONE;
}

static PyObject *decoder_add(Decoder *d, PyObject *args) {
    Py_buffer view;
    long long step;
    if (!PyArg_ParseTuple(args, "y*L", &view, &step)) return NULL;
    if (d->busy) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "Decoder.add() called from two threads at once");
        return NULL;
    }
    d->busy = 1;
    size_t saved[N_COLS + O_COLS + M_COLS + A_COLS + T_COLS];
    size_t k = 0;
#define SAVE(t, n) for (int i = 0; i < n; i++) saved[k++] = d->t[i].len;
    ALL_TABLES(SAVE)
#undef SAVE
    int rc;
    long devices = 0;
    Py_BEGIN_ALLOW_THREADS
    d->step = step;
    d->exec_idx = 0;
    d->added = d->nameless = 0;
    Reader r = {(const uint8_t *)view.buf, (const uint8_t *)view.buf + view.len};
    rc = parse_step_stats(d, r, &devices);
    if (!rc && d->seen == 0 && d->expected > (size_t)view.len)
        reserve_expected(d, (double)d->expected / (double)view.len);
    if (!rc) d->seen += (size_t)view.len;
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (rc) { /* roll back to the rows before this call (interned values may stay) */
        k = 0;
#define RESTORE(t, n) for (int i = 0; i < n; i++) d->t[i].len = saved[k++];
        ALL_TABLES(RESTORE)
#undef RESTORE
    }
    d->busy = 0;
    if (rc == ERR_NOMEM) return PyErr_NoMemory();
    if (rc) Py_RETURN_NONE;
    return PyLong_FromLong(devices);
}

/* A finished column: owns its malloc'd buffer and exposes it through the buffer protocol
 * (numpy views it without a copy) and as an Arrow array (__arrow_c_array__, the Arrow
 * PyCapsule interface: polars takes it without a copy and without numpy). */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
    const char *format;  /* Arrow's format of the values: "l", "i", "I" or "L" */
    int itemsize;
} Column;

/* The Arrow C data interface's two structs (arrow.apache.org/docs/format/CDataInterface). */
struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* What an exported array holds: the Column it views (a reference) and its two buffers
 * (no validity bitmap: the values have no nulls). */
typedef struct {
    PyObject *owner;
    const void *buffers[2];
} ArrowHold;

static void arrow_schema_release(struct ArrowSchema *s) { s->release = NULL; }

/* Called by whoever holds the array last, in any thread (polars frees in its own). */
static void arrow_array_release(struct ArrowArray *a) {
    ArrowHold *h = (ArrowHold *)a->private_data;
    PyGILState_STATE g = PyGILState_Ensure();
    Py_XDECREF(h->owner);
    PyGILState_Release(g);
    free(h);
    a->release = NULL;
}

static void arrow_schema_capsule_free(PyObject *capsule) {
    struct ArrowSchema *s = PyCapsule_GetPointer(capsule, "arrow_schema");
    if (s && s->release) s->release(s);
    free(s);
}

static void arrow_array_capsule_free(PyObject *capsule) {
    struct ArrowArray *a = PyCapsule_GetPointer(capsule, "arrow_array");
    if (a && a->release) a->release(a);
    free(a);
}

static PyObject *column_arrow_c_array(Column *c, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"requested_schema", NULL};
    PyObject *requested = Py_None;  /* a request to convert: the values are what they are */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O", names, &requested)) return NULL;
    struct ArrowSchema *s = calloc(1, sizeof *s);
    struct ArrowArray *a = calloc(1, sizeof *a);
    ArrowHold *h = calloc(1, sizeof *h);
    if (!s || !a || !h) {
        free(s);
        free(a);
        free(h);
        return PyErr_NoMemory();
    }
    s->format = c->format;
    s->name = "";
    s->release = arrow_schema_release;
    Py_INCREF(c);
    h->owner = (PyObject *)c;
    h->buffers[0] = NULL;
    h->buffers[1] = c->data ? c->data : "";
    a->length = c->len / c->itemsize;
    a->n_buffers = 2;
    a->buffers = h->buffers;
    a->release = arrow_array_release;
    a->private_data = h;
    PyObject *schema = PyCapsule_New(s, "arrow_schema", arrow_schema_capsule_free);
    if (!schema) {
        s->release(s);
        free(s);
        a->release(a);
        free(a);
        return NULL;
    }
    PyObject *array = PyCapsule_New(a, "arrow_array", arrow_array_capsule_free);
    if (!array) {
        Py_DECREF(schema);
        a->release(a);
        free(a);
        return NULL;
    }
    return Py_BuildValue("(NN)", schema, array);
}

static PyMethodDef column_methods[] = {
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))column_arrow_c_array,
     METH_VARARGS | METH_KEYWORDS, "The values as an Arrow array (PyCapsules), no copy."},
    {NULL, NULL, 0, NULL},
};

static int column_getbuffer(Column *c, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)c, c->data ? c->data : (char *)"", c->len, 1,
                             flags);
}

static void column_dealloc(Column *c) {
    free(c->data);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyBufferProcs column_as_buffer = {.bf_getbuffer = (getbufferproc)column_getbuffer};

static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runlens.analyzer._stepstats.Column",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one decoded column (read-only buffer).",
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_as_buffer,
    .tp_methods = column_methods,
};

/* Arrow's format and the size of a value of a column's type ("i8", "i4", "u4", "u8"). */
static void arrow_format(const char *type, const char **format, int *itemsize) {
    int is_unsigned = type[0] == 'u', wide = type[1] == '8';
    *format = wide ? (is_unsigned ? "L" : "l") : (is_unsigned ? "I" : "i");
    *itemsize = wide ? 8 : 4;
}

/* Hands the buffer over to a Column of `type`; the Buf is left empty. */
static PyObject *take_column(Buf *b, const char *type) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) return NULL;
    arrow_format(type, &c->format, &c->itemsize);
    c->data = b->data;
    c->len = (Py_ssize_t)b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return (PyObject *)c;
}

static PyObject *table_dict(Buf *cols, const ColSpec *spec, int n) {
    PyObject *out = PyDict_New();
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *data = take_column(&cols[i], spec[i].type);
        PyObject *pair = data ? Py_BuildValue("(sN)", spec[i].type, data) : NULL;
        if (!pair || PyDict_SetItemString(out, spec[i].name, pair)) {
            Py_XDECREF(pair);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(pair);
    }
    return out;
}

static PyObject *utf8_string(const uint8_t *p, size_t n) {
    return PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)n, "strict");
}

static PyObject *shape_dims(const uint8_t *p, size_t n) {
    PyObject *dims = PyList_New(0);
    if (!dims) return NULL;
    Reader r = {p, p + n};
    Field f = {0}, g = {0};
    while (r.p < r.end) {
        next_field(&r, &f); /* validated by shape_ok when interned */
        if (f.number != 2) continue;
        int64_t size = 0;
        while (f.sub.p < f.sub.end) {
            next_field(&f.sub, &g);
            if (g.number == 1) size = (int64_t)g.value;
        }
        PyObject *v = PyLong_FromLongLong(size);
        if (!v || PyList_Append(dims, v)) { Py_XDECREF(v); Py_DECREF(dims); return NULL; }
        Py_DECREF(v);
    }
    return dims;
}

/* The interned values in code order, each turned into a Python object by `convert`. */
static PyObject *interned_list(Interner *t, PyObject *(*convert)(const uint8_t *, size_t)) {
    PyObject *out = PyList_New((Py_ssize_t)t->count);
    if (!out) return NULL;
    const uint32_t *e = (const uint32_t *)t->entries.data;
    for (size_t i = 0; i < t->count; i++) {
        PyObject *v = convert((const uint8_t *)t->arena.data + e[2 * i], e[2 * i + 1]);
        if (!v) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)i, v);
    }
    return out;
}

/* The interned values' bytes back to back, in code order (fixed-size keys: a table). */
static PyObject *interned_bytes(Interner *t) {
    return PyBytes_FromStringAndSize(t->arena.data ? t->arena.data : "",
                                     (Py_ssize_t)t->arena.len);
}

static PyObject *decoder_finish(Decoder *d, PyObject *Py_UNUSED(ignored)) {
    if (d->busy) {
        PyErr_SetString(PyExc_RuntimeError, "Decoder.finish() during add()");
        return NULL;
    }
    return Py_BuildValue(
        "{sNsNsNsNsNsNsNsNsN}",
        "nodes", table_dict(d->nodes, NODE_COLS, N_COLS),
        "outputs", table_dict(d->outputs, OUTPUT_COLS, O_COLS),
        "memory", table_dict(d->memory, MEMORY_COLS, M_COLS),
        "allocations", table_dict(d->allocs, ALLOC_COLS, A_COLS),
        "threads", table_dict(d->threads, THREAD_COLS, T_COLS),
        "strings", interned_list(&d->strings, utf8_string),
        "shapes", interned_list(&d->shapes, shape_dims),
        "keys", interned_bytes(&d->keys),
        "output_keys", interned_bytes(&d->out_keys));
}

static PyMethodDef decoder_methods[] = {
    {"expect", (PyCFunction)decoder_expect, METH_O,
     "expect(n: int) -> None\n\n"
     "About n bytes of StepStats will be added: after the first add(), the columns make\n"
     "room for them at once (a hint; a wrong one costs memory or regrowth, not rows)."},
    {"add", (PyCFunction)decoder_add, METH_VARARGS,
     "add(step_stats: bytes-like, step: int) -> int | None\n\n"
     "Append the rows of one StepStats message; returns its number of DeviceStepStats.\n"
     "None (and no rows added) when the bytes are not in the subset this decoder reads:\n"
     "decode that message with protobuf instead."},
    {"finish", (PyCFunction)decoder_finish, METH_NOARGS,
     "finish() -> dict: per table {column: (numpy dtype, buffer)}, plus 'strings' (the\n"
     "interned strings that the u4 string columns index), 'shapes' (lists of dims) and\n"
     "'keys' (bytes: per key_id, the uint32 codes of its lane, node_name, timeline_label)\n"
     "and 'output_keys' (per out_key: dtype number, shape code, allocator_name code).\n"
     "The column buffers are handed over: the decoder's tables are empty afterwards."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef decoder_members[] = {
    {"added", T_LONG, offsetof(Decoder, added), READONLY,
     "NodeExecStats the last add() added"},
    {"nameless", T_LONG, offsetof(Decoder, nameless), READONLY,
     "NodeExecStats without a node name the last add() skipped"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject DecoderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "runlens.analyzer._stepstats.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Accumulates the columns of many StepStats messages (one thread at a time).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)decoder_dealloc,
    .tp_methods = decoder_methods,
    .tp_members = decoder_members,
};
