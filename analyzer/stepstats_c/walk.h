/* The walk: StepStats -> DeviceStepStats -> NodeExecStats (with their outputs, memory
 * and allocation records), appending one row per execution to the tables of columns.h.
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

/* ------------------------------------------------------------------ the decoder */

typedef struct {
    PyObject_HEAD
    Buf nodes[N_COLS], outputs[O_COLS], memory[M_COLS], allocs[A_COLS], threads[T_COLS];
    Interner strings, shapes;
    Interner keys; /* (lane, node_name, timeline_label) string codes: 3 x uint32 each */
    Interner out_keys; /* outputs' (dtype, shape code, allocator_name code): 3 x uint32 */
    Buf device_nodes;  /* the current device's nodes: (node_name, timeline_label) codes */
    int64_t step;
    uint32_t exec_idx; /* within the current step */
    int busy;          /* add() is running in another thread */
    size_t expected;   /* bytes of StepStats this decoder will be given (0: unknown) */
    size_t seen;       /* bytes of StepStats added so far */
    Interner tids;     /* (device number, thread id) -> index into tid_rows */
    Buf tid_rows;      /* per tids code: the uint64 row of threads it names */
    uint64_t device_seq; /* DeviceStepStats parsed so far (numbers the map's owners) */
    long added;        /* NodeExecStats added by the last add() */
    long nameless;     /* NodeExecStats without a node name skipped by the last add() */
} Decoder;

static int64_t intern_string(Decoder *d, const Reader *s) {
    return intern(&d->strings, s->p, (size_t)(s->end - s->p), invalid_utf8);
}

/* A TensorShapeProto is valid for us when its dims parse (sizes are read at finish). */
static int shape_ok(const uint8_t *p, size_t n) {
    Reader r = {p, p + n};
    Field f = {0};
    while (r.p < r.end) {
        if (next_field(&r, &f)) return 1;
        if (f.number == 2) { /* dim */
            if (f.wire != 2) return 1;
            Field g = {0};
            while (f.sub.p < f.sub.end) {
                if (next_field(&f.sub, &g)) return 1;
                if (g.number == 1 && g.wire != 0) return 1;
                if (g.number == 2 && (g.wire != 2 || invalid_utf8(g.sub.p, g.sub.end - g.sub.p)))
                    return 1;
            }
        } else if (f.number == 3 && f.wire != 0) {
            return 1;
        }
    }
    return 0;
}

typedef struct {
    int64_t req, alloc, alloc_id;
    uint64_t ptr;
    int64_t allocator;
    int present, seen;
} AllocDesc;

static int parse_alloc_desc(Decoder *d, Reader r, AllocDesc *a) {
    Field f = {0};
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        switch (f.number) {
        case 1: EXPECT(f, 0); a->req = (int64_t)f.value; break;
        case 2: EXPECT(f, 0); a->alloc = (int64_t)f.value; break;
        case 3: {
            EXPECT(f, 2);
            int64_t c = intern_string(d, &f.sub);
            if (c < 0) return (int)c;
            a->allocator = c;
            break;
        }
        case 4: EXPECT(f, 0); a->alloc_id = (int64_t)f.value; break;
        case 5: EXPECT(f, 0); break;
        case 6: EXPECT(f, 0); a->ptr = f.value; break;
        default: break;
        }
    }
    return 0;
}

static int parse_output(Decoder *d, Reader r, int64_t *out_bytes) {
    int32_t slot = 0, dtype = 0;
    int64_t shape = -1;
    int seen_td = 0, seen_shape = 0;
    AllocDesc a = {0, 0, 0, 0, -1, 0, 0};
    Field f = {0}, g = {0};
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        if (f.number == 1) {
            EXPECT(f, 0);
            slot = (int32_t)(uint32_t)f.value;
        } else if (f.number == 3) { /* tensor_description */
            EXPECT(f, 2);
            if (seen_td++) return ERR_BAIL;
            while (f.sub.p < f.sub.end) {
                CHECK(next_field(&f.sub, &g));
                if (g.number == 1) {
                    EXPECT(g, 0);
                    dtype = (int32_t)(uint32_t)g.value;
                } else if (g.number == 2) {
                    EXPECT(g, 2);
                    if (seen_shape++) return ERR_BAIL;
                    shape = intern(&d->shapes, g.sub.p, (size_t)(g.sub.end - g.sub.p), shape_ok);
                    if (shape < 0) return (int)shape;
                } else if (g.number == 4) {
                    EXPECT(g, 2);
                    if (a.seen++) return ERR_BAIL;
                    a.present = 1;
                    CHECK(parse_alloc_desc(d, g.sub, &a));
                }
            }
        }
    }
    if (shape < 0) { /* no shape on the wire: the empty shape */
        shape = intern(&d->shapes, (const uint8_t *)"", 0, NULL);
        if (shape < 0) return (int)shape;
    }
    if (a.allocator < 0) {
        a.allocator = intern(&d->strings, (const uint8_t *)"", 0, NULL);
        if (a.allocator < 0) return (int)a.allocator;
    }
    if (a.present) *out_bytes += a.req > a.alloc ? a.req : a.alloc;
    PUT(d->outputs[O_STEP], int64_t, d->step);
    PUT(d->outputs[O_EXEC], uint32_t, d->exec_idx);
    /* dtype, shape and allocator repeat every step: numbered once, as node keys are. */
    uint32_t triple[3] = {(uint32_t)dtype, (uint32_t)shape, (uint32_t)a.allocator};
    int64_t key = intern(&d->out_keys, (const uint8_t *)triple, sizeof triple, NULL);
    if (key < 0) return (int)key;
    PUT(d->outputs[O_SLOT], int32_t, slot);
    PUT(d->outputs[O_KEY], uint32_t, key);
    PUT(d->outputs[O_REQ], int64_t, a.req);
    PUT(d->outputs[O_ALLOC], int64_t, a.alloc);
    PUT(d->outputs[O_ALLOC_ID], int64_t, a.alloc_id);
    PUT(d->outputs[O_PTR], uint64_t, a.ptr);
    return 0;
}

typedef struct {
    int64_t total, peak, live, inuse;
} MemSums;

static int parse_memory(Decoder *d, Reader r, MemSums *sums) {
    int64_t total = 0, peak = 0, live = 0, inuse = 0, allocator = -1;
    size_t first_record = d->allocs[A_STEP].len / sizeof(int64_t);
    Field f = {0}, g = {0};
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        switch (f.number) {
        case 1: {
            EXPECT(f, 2);
            allocator = intern_string(d, &f.sub);
            if (allocator < 0) return (int)allocator;
            break;
        }
        case 2: EXPECT(f, 0); total = (int64_t)f.value; break;
        case 3: EXPECT(f, 0); peak = (int64_t)f.value; break;
        case 4: EXPECT(f, 0); live = (int64_t)f.value; break;
        case 5: EXPECT(f, 0); inuse = (int64_t)f.value; break;
        case 6: { /* allocation_records */
            EXPECT(f, 2);
            int64_t us = 0, bytes = 0;
            while (f.sub.p < f.sub.end) {
                CHECK(next_field(&f.sub, &g));
                if (g.number == 1) { EXPECT(g, 0); us = (int64_t)g.value; }
                else if (g.number == 2) { EXPECT(g, 0); bytes = (int64_t)g.value; }
            }
            PUT(d->allocs[A_STEP], int64_t, d->step);
            PUT(d->allocs[A_EXEC], uint32_t, d->exec_idx);
            PUT(d->allocs[A_ALLOCATOR], uint32_t, 0); /* filled below */
            PUT(d->allocs[A_US], int64_t, us);
            PUT(d->allocs[A_BYTES], int64_t, bytes);
            break;
        }
        default: break;
        }
    }
    if (allocator < 0) {
        allocator = intern(&d->strings, (const uint8_t *)"", 0, NULL);
        if (allocator < 0) return (int)allocator;
    }
    uint32_t *names = (uint32_t *)d->allocs[A_ALLOCATOR].data;
    size_t n = d->allocs[A_STEP].len / sizeof(int64_t);
    for (size_t i = first_record; i < n; i++) names[i] = (uint32_t)allocator;
    PUT(d->memory[M_STEP], int64_t, d->step);
    PUT(d->memory[M_EXEC], uint32_t, d->exec_idx);
    PUT(d->memory[M_ALLOCATOR], uint32_t, allocator);
    PUT(d->memory[M_TOTAL], int64_t, total);
    PUT(d->memory[M_PEAK], int64_t, peak);
    PUT(d->memory[M_LIVE], int64_t, live);
    PUT(d->memory[M_INUSE], int64_t, inuse);
    sums->total += total;
    sums->peak += peak;
    sums->live += live;
    if (inuse > sums->inuse) sums->inuse = inuse;
    return 0;
}

/* Cut a table's columns back to `rows` rows (each column's item size from its spec). */
static void truncate_rows(Buf *cols, const ColSpec *spec, int n, size_t rows) {
    for (int i = 0; i < n; i++) cols[i].len = rows * (size_t)(spec[i].type[1] - '0');
}

static int parse_node(Decoder *d, Reader r) {
    int64_t v[N_COLS] = {0};
    int64_t name = -1, label = -1;
    size_t name_len = 0;
    /* The rows of the tables a node adds to besides nodes (to drop a nameless node). */
    size_t outputs = d->outputs[O_STEP].len / sizeof(int64_t);
    size_t memory = d->memory[M_STEP].len / sizeof(int64_t);
    size_t allocs = d->allocs[A_STEP].len / sizeof(int64_t);
    int seen_ms = 0;
    MemSums sums = {0, 0, 0, 0};
    int64_t out_bytes = 0;
    Field f = {0}, g = {0};
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        switch (f.number) {
        case 1:
            EXPECT(f, 2);
            name = intern_string(d, &f.sub);
            if (name < 0) return (int)name;
            name_len = (size_t)(f.sub.end - f.sub.p);
            break;
        case 2: EXPECT(f, 0); v[N_ALL_START_US] = (int64_t)f.value; break;
        case 3: EXPECT(f, 0); v[N_OP_START_US] = (int64_t)f.value; break;
        case 4: EXPECT(f, 0); v[N_OP_END_US] = (int64_t)f.value; break;
        case 5: EXPECT(f, 0); v[N_ALL_END_US] = (int64_t)f.value; break;
        case 6: EXPECT(f, 2); CHECK(parse_memory(d, f.sub, &sums)); break;
        case 7: EXPECT(f, 2); CHECK(parse_output(d, f.sub, &out_bytes)); break;
        case 8:
            EXPECT(f, 2);
            label = intern_string(d, &f.sub);
            if (label < 0) return (int)label;
            break;
        case 9: EXPECT(f, 0); v[N_SCHED_US] = (int64_t)f.value; break;
        case 10: EXPECT(f, 0); v[N_THREAD] = (uint32_t)f.value; break;
        case 11: { /* referenced_tensor: not used, but must parse as protobuf would */
            EXPECT(f, 2);
            AllocDesc unused = {0, 0, 0, 0, -1, 0, 0};
            CHECK(parse_alloc_desc(d, f.sub, &unused));
            break;
        }
        case 12: /* memory_stats */
            EXPECT(f, 2);
            if (seen_ms++) return ERR_BAIL;
            while (f.sub.p < f.sub.end) {
                CHECK(next_field(&f.sub, &g));
                if (g.number == 1) { EXPECT(g, 0); v[N_TEMP] = (int64_t)g.value; }
                else if (g.number == 3) { EXPECT(g, 0); v[N_PERSIST] = (int64_t)g.value; }
                else if (g.number == 2 || g.number == 4) { EXPECT(g, 0); }
                else if (g.number == 5 || g.number == 6) {
                    /* repeated int64: packed (2) or not (0); both valid */
                    if (g.wire != 0 && g.wire != 2) return ERR_BAIL;
                    if (g.wire == 2) {
                        uint64_t ignored;
                        while (g.sub.p < g.sub.end) CHECK(read_varint(&g.sub, &ignored));
                    }
                }
            }
            break;
        case 13: EXPECT(f, 0); v[N_START_NS] = (int64_t)f.value; break;
        case 14: EXPECT(f, 0); v[N_OP_START_NS] = (int64_t)f.value; break;
        case 15: EXPECT(f, 0); v[N_OP_END_NS] = (int64_t)f.value; break;
        case 16: EXPECT(f, 0); v[N_ALL_END_NS] = (int64_t)f.value; break;
        case 17: EXPECT(f, 0); v[N_SCHED_NS] = (int64_t)f.value; break;
        default: break;
        }
    }
    if (name_len == 0) {
        /* No node name: not an execution TensorFlow writes (every NodeExecStats names its
         * node). Dropped with what it added, and counted: a file of empty node_stats costs
         * no rows, as ingest's protobuf walk does. */
        truncate_rows(d->outputs, OUTPUT_COLS, O_COLS, outputs);
        truncate_rows(d->memory, MEMORY_COLS, M_COLS, memory);
        truncate_rows(d->allocs, ALLOC_COLS, A_COLS, allocs);
        d->nameless++;
        return 0;
    }
    int64_t empty = -1;
    if (name < 0 || label < 0) {
        empty = intern(&d->strings, (const uint8_t *)"", 0, NULL);
        if (empty < 0) return (int)empty;
    }
    if (v[N_START_NS] == 0) { /* traces from before the nanosecond fields: micros x 1000 */
        for (int c = N_START_NS; c <= N_SCHED_NS; c++)
            v[c] = (int64_t)((uint64_t)v[c - (N_START_NS - N_ALL_START_US)] * 1000u);
    }
    PUT(d->nodes[N_STEP], int64_t, d->step);
    PUT(d->nodes[N_EXEC], uint32_t, d->exec_idx);
    uint32_t strings[2] = {(uint32_t)(name < 0 ? empty : name),
                           (uint32_t)(label < 0 ? empty : label)};
    if (buf_put(&d->device_nodes, strings, sizeof strings)) return ERR_NOMEM;
    for (int c = N_ALL_START_US; c <= N_SCHED_NS; c++) PUT(d->nodes[c], int64_t, v[c]);
    PUT(d->nodes[N_THREAD], uint32_t, v[N_THREAD]);
    PUT(d->nodes[N_MEM_TOTAL], int64_t, sums.total);
    PUT(d->nodes[N_MEM_PEAK], int64_t, sums.peak);
    PUT(d->nodes[N_MEM_LIVE], int64_t, sums.live);
    PUT(d->nodes[N_INUSE], int64_t, sums.inuse);
    PUT(d->nodes[N_TEMP], int64_t, v[N_TEMP]);
    PUT(d->nodes[N_PERSIST], int64_t, v[N_PERSIST]);
    PUT(d->nodes[N_OUT_BYTES], int64_t, out_bytes);
    PUT(d->nodes[N_KEY], uint32_t, 0); /* filled by parse_device */
    d->exec_idx++;
    d->added++;
    return 0;
}

static int parse_device(Decoder *d, Reader r) {
    int64_t lane = -1;
    size_t first_node = d->nodes[N_STEP].len / sizeof(int64_t);
    size_t first_thread = d->threads[T_STEP].len / sizeof(int64_t);
    d->device_nodes.len = 0;
    uint64_t device = d->device_seq++;
    Field f = {0}, g = {0};
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        if (f.number == 1) {
            EXPECT(f, 2);
            lane = intern_string(d, &f.sub);
            if (lane < 0) return (int)lane;
        } else if (f.number == 2) {
            EXPECT(f, 2);
            if (f.sub.p == f.sub.end) { /* an empty NodeExecStats: no name, see parse_node */
                d->nameless++;
                continue;
            }
            CHECK(parse_node(d, f.sub));
        } else if (f.number == 3) { /* thread_names map entry */
            EXPECT(f, 2);
            uint64_t tid = 0;
            int64_t tname = -1;
            while (f.sub.p < f.sub.end) {
                CHECK(next_field(&f.sub, &g));
                if (g.number == 1) { EXPECT(g, 0); tid = (uint32_t)g.value; }
                else if (g.number == 2) {
                    EXPECT(g, 2);
                    tname = intern_string(d, &g.sub);
                    if (tname < 0) return (int)tname;
                }
            }
            if (tname < 0) {
                tname = intern(&d->strings, (const uint8_t *)"", 0, NULL);
                if (tname < 0) return (int)tname;
            }
            /* A map keeps the last value of a key: each thread id's row, found by the id
             * (a scan of the device's rows was quadratic in its map entries). */
            uint64_t owner_tid[2] = {device, tid};
            size_t before = d->tids.count;
            int64_t code = intern(&d->tids, (const uint8_t *)owner_tid, sizeof owner_tid, NULL);
            if (code < 0) return (int)code;
            uint64_t row = (uint64_t)(d->threads[T_STEP].len / sizeof(int64_t));
            if ((size_t)code < before) {
                row = ((const uint64_t *)d->tid_rows.data)[code];
                ((uint32_t *)d->threads[T_NAME].data)[row] = (uint32_t)tname;
            } else {
                if (buf_put(&d->tid_rows, &row, sizeof row)) return ERR_NOMEM;
                PUT(d->threads[T_STEP], int64_t, d->step);
                PUT(d->threads[T_LANE], uint32_t, 0);
                PUT(d->threads[T_THREAD], uint32_t, tid);
                PUT(d->threads[T_NAME], uint32_t, tname);
            }
        }
    }
    if (lane < 0) {
        lane = intern(&d->strings, (const uint8_t *)"", 0, NULL);
        if (lane < 0) return (int)lane;
    }
    const uint32_t *strings = (const uint32_t *)d->device_nodes.data;
    uint32_t *keys = (uint32_t *)d->nodes[N_KEY].data;
    size_t n = d->nodes[N_STEP].len / sizeof(int64_t);
    for (size_t i = first_node; i < n; i++) {
        /* The executions' key: the strings that repeat every step, numbered once here so
         * that ingest never hashes them again (model.py derives everything per key). */
        const uint32_t *name_label = strings + 2 * (i - first_node);
        uint32_t triple[3] = {(uint32_t)lane, name_label[0], name_label[1]};
        int64_t key = intern(&d->keys, (const uint8_t *)triple, sizeof triple, NULL);
        if (key < 0) return (int)key;
        keys[i] = (uint32_t)key;
    }
    uint32_t *lanes = (uint32_t *)d->threads[T_LANE].data;
    n = d->threads[T_STEP].len / sizeof(int64_t);
    for (size_t i = first_thread; i < n; i++) lanes[i] = (uint32_t)lane;
    return 0;
}

static int parse_step_stats(Decoder *d, Reader r, long *devices) {
    Field f = {0};
    while (r.p < r.end) {
        CHECK(next_field(&r, &f));
        if (f.number == 1) {
            EXPECT(f, 2);
            CHECK(parse_device(d, f.sub));
            ++*devices;
        }
    }
    return 0;
}
