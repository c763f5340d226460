/* RunMetadata split: where its step_stats and distinct partition graphs are, found
 * without parsing the messages (ingest then decodes only the StepStats).
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

/* ------------------------------------------------------------------ RunMetadata split */

/* Payloads seen so far, by content, without copying them (they point into the buffer). */
typedef struct {
    Slot *slots; /* offset/len into the buffer; code = index + 1 */
    size_t n_slots, count;
} Seen;

/* 1 when buf[off:off+n] was seen before (else remembers it); -1 when out of memory. */
static int seen_before(Seen *t, const uint8_t *base, uint32_t off, uint32_t n) {
    if ((t->count + 1) * 2 > t->n_slots) {
        size_t m = t->n_slots ? t->n_slots * 2 : 64;
        Slot *slots = calloc(m, sizeof(Slot));
        if (!slots) return -1;
        for (size_t i = 0; i < t->n_slots; i++) {
            if (!t->slots[i].code) continue;
            size_t j = t->slots[i].hash & (m - 1);
            while (slots[j].code) j = (j + 1) & (m - 1);
            slots[j] = t->slots[i];
        }
        free(t->slots);
        t->slots = slots;
        t->n_slots = m;
    }
    uint64_t h = hash_bytes(base + off, n);
    size_t mask = t->n_slots - 1, j = h & mask;
    for (; t->slots[j].code; j = (j + 1) & mask) {
        Slot *s = &t->slots[j];
        if (s->hash == h && s->len == n && memcmp(base + s->offset, base + off, n) == 0)
            return 1;
    }
    t->slots[j] = (Slot){h, off, n, (uint32_t)++t->count};
    return 0;
}

typedef struct {
    Buf stats, graphs; /* (uint64 start, uint64 end) pairs */
    Seen seen;
    const char *error;
} Split;

/* The top-level fields of a message, as protobuf's wire format defines them; the ones
 * `want` picks are recorded. Rejects what no valid message holds (field number 0, wire
 * types 6 and 7, groups: TensorFlow writes none), truncation, and varints over 64 bits. */
static int split_fields(Split *sp, const uint8_t *base, Reader r, int depth) {
    Field f = {0};
    while (r.p < r.end) {
        uint64_t key;
        if (read_varint(&r, &key)) { sp->error = "truncated or overlong varint"; return -1; }
        if ((key >> 3) == 0) { sp->error = "field number 0"; return -1; }
        if ((key >> 3) > 0x1FFFFFFF) { sp->error = "field number out of range"; return -1; }
        f.wire = (uint32_t)(key & 7);
        f.number = (uint32_t)(key >> 3);
        if (f.wire == 0) {
            if (read_varint(&r, &f.value)) { sp->error = "truncated varint"; return -1; }
            continue;
        }
        if (f.wire == 1 || f.wire == 5) {
            size_t n = f.wire == 1 ? 8 : 4;
            if ((size_t)(r.end - r.p) < n) { sp->error = "truncated field"; return -1; }
            r.p += n;
            continue;
        }
        if (f.wire != 2) { sp->error = "unsupported wire type"; return -1; }
        uint64_t n;
        if (read_varint(&r, &n)) { sp->error = "truncated length"; return -1; }
        if (n > (uint64_t)(r.end - r.p)) { sp->error = "truncated field"; return -1; }
        Reader sub = {r.p, r.p + n};
        r.p += n;
        if (n == 0) continue; /* an empty message adds nothing */
        uint64_t span[2] = {(uint64_t)(sub.p - base), (uint64_t)(sub.end - base)};
        if (depth == 0 && f.number == 1) { /* step_stats */
            if (buf_put(&sp->stats, span, sizeof span)) return -2;
        } else if ((depth == 0 && f.number == 3) || (depth == 1 && f.number == 1)) {
            /* partition_graphs, function_graphs[].partition_graphs: each distinct once */
            if (n > UINT32_MAX || span[0] > UINT32_MAX) {
                sp->error = "partition graph beyond 4 GiB";
                return -1;
            }
            int seen = seen_before(&sp->seen, base, (uint32_t)span[0], (uint32_t)n);
            if (seen < 0) return -2;
            if (!seen && buf_put(&sp->graphs, span, sizeof span)) return -2;
        } else if (depth == 0 && f.number == 4) { /* function_graphs */
            int rc = split_fields(sp, base, sub, 1);
            if (rc) return rc;
        }
    }
    return 0;
}

static PyObject *spans_list(const Buf *b) {
    size_t n = b->len / (2 * sizeof(uint64_t));
    const uint64_t *v = (const uint64_t *)b->data;
    PyObject *out = PyList_New((Py_ssize_t)n);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *t = Py_BuildValue("(KK)", (unsigned long long)v[2 * i],
                                    (unsigned long long)v[2 * i + 1]);
        if (!t) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    return out;
}

static PyObject *split_run_metadata(PyObject *Py_UNUSED(module), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    Split sp;
    memset(&sp, 0, sizeof sp);
    int rc;
    Py_BEGIN_ALLOW_THREADS
    const uint8_t *base = (const uint8_t *)view.buf;
    Reader r = {base, base + view.len};
    rc = split_fields(&sp, base, r, 0);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (rc == -2) PyErr_NoMemory();
    else if (rc) PyErr_SetString(PyExc_ValueError, sp.error);
    else {
        PyObject *stats = spans_list(&sp.stats), *graphs = spans_list(&sp.graphs);
        if (stats && graphs) out = PyTuple_Pack(2, stats, graphs);
        Py_XDECREF(stats);
        Py_XDECREF(graphs);
    }
    free(sp.stats.data);
    free(sp.graphs.data);
    free(sp.seen.slots);
    return out;
}
