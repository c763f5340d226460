/* Native decoder of StepStats wire bytes into columns: analyzer/ingest's fast path.
 *
 * Why: the Python protobuf walk costs ~7 us per NodeExecStats (attribute reads), which
 * caps ingest near 100k node stats/s. This decoder reads the wire format directly into
 * growable column buffers, interns strings and shapes (they repeat every step), and
 * releases the GIL while it works, so threads decode step files in parallel.
 *
 * Scope: the canonical encoding TensorFlow writes. Anything else (a singular message field
 * seen twice, a known field with an unexpected wire type, groups, invalid UTF-8, malformed
 * or truncated input) makes add() fail and leaves the decoder as it was before the call;
 * ingest then walks that file with protobuf, which is the arbiter of what is valid.
 *
 * Field numbers: analyzer/proto/step_stats.proto, tensor_description.proto,
 * tensor_shape.proto, allocation_description.proto.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ growable buffers */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *v, size_t n) {
    if (n == 0) return 0; /* memcpy of nothing from or to a NULL buffer is still UB */
    if (buf_reserve(b, n)) return -1;
    memcpy(b->data + b->len, v, n);
    b->len += n;
    return 0;
}

#define PUT(buf, type, value)                       \
    do {                                            \
        type v_ = (type)(value);                    \
        if (buf_put(&(buf), &v_, sizeof v_)) return ERR_NOMEM; \
    } while (0)

/* ------------------------------------------------------------------ columns */

enum { ERR_OK = 0, ERR_BAIL = -1, ERR_NOMEM = -2 };

/* The order of each table's columns is the order of the names in the *_COLS tables below,
 * exported as the module's COLUMNS; their names and types are analyzer/schema.py's (string
 * columns as u4 codes), which tests/test_schema.py checks. */
enum {
    N_STEP, N_EXEC, N_ALL_START_US, N_OP_START_US, N_OP_END_US,
    N_ALL_END_US, N_SCHED_US, N_START_NS, N_OP_START_NS, N_OP_END_NS, N_ALL_END_NS,
    N_SCHED_NS, N_THREAD, N_MEM_TOTAL, N_MEM_PEAK, N_MEM_LIVE, N_INUSE, N_TEMP, N_PERSIST,
    N_OUT_BYTES, N_KEY, N_COLS
};
enum { O_STEP, O_EXEC, O_SLOT, O_KEY, O_REQ, O_ALLOC, O_ALLOC_ID, O_PTR, O_COLS };
enum { M_STEP, M_EXEC, M_ALLOCATOR, M_TOTAL, M_PEAK, M_LIVE, M_INUSE, M_COLS };
enum { A_STEP, A_EXEC, A_ALLOCATOR, A_US, A_BYTES, A_COLS };
enum { T_STEP, T_LANE, T_THREAD, T_NAME, T_COLS };

typedef struct {
    const char *name;
    const char *type; /* numpy dtype string: i8 i4 u4 u8 */
} ColSpec;

static const ColSpec NODE_COLS[N_COLS] = {
    {"step", "i8"}, {"exec_idx", "u4"}, {"all_start_us", "i8"}, {"op_start_rel_us", "i8"},
    {"op_end_rel_us", "i8"}, {"all_end_rel_us", "i8"}, {"scheduled_us", "i8"},
    {"start_ns", "i8"}, {"op_start_rel_ns", "i8"}, {"op_end_rel_ns", "i8"},
    {"all_end_rel_ns", "i8"}, {"scheduled_ns", "i8"}, {"thread_id", "u4"},
    {"mem_total_bytes", "i8"}, {"mem_peak_bytes", "i8"}, {"mem_live_bytes", "i8"},
    {"allocator_bytes_in_use", "i8"}, {"temp_bytes", "i8"}, {"persistent_bytes", "i8"},
    {"output_bytes", "i8"}, {"key_id", "u4"},
};
static const ColSpec OUTPUT_COLS[O_COLS] = {
    {"step", "i8"}, {"exec_idx", "u4"}, {"slot", "i4"}, {"out_key", "u4"},
    {"requested_bytes", "i8"}, {"allocated_bytes", "i8"}, {"allocation_id", "i8"},
    {"ptr", "u8"},
};
static const ColSpec MEMORY_COLS[M_COLS] = {
    {"step", "i8"}, {"exec_idx", "u4"}, {"allocator_name", "u4"}, {"total_bytes", "i8"},
    {"peak_bytes", "i8"}, {"live_bytes", "i8"}, {"allocator_bytes_in_use", "i8"},
};
static const ColSpec ALLOC_COLS[A_COLS] = {
    {"step", "i8"}, {"exec_idx", "u4"}, {"allocator_name", "u4"}, {"alloc_us", "i8"},
    {"alloc_bytes", "i8"},
};
static const ColSpec THREAD_COLS[T_COLS] = {
    {"step", "i8"}, {"lane", "u4"}, {"thread_id", "u4"}, {"name", "u4"},
};

/* ------------------------------------------------------------------ interning */

typedef struct {
    uint64_t hash;
    uint32_t offset, len; /* into the table's arena */
    uint32_t code;        /* index + 1; 0 = empty slot */
} Slot;

typedef struct {
    Slot *slots;
    size_t n_slots, count;
    Buf arena;   /* the interned bytes */
    Buf entries; /* per code: uint32 offset, uint32 len */
} Interner;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t k;
        memcpy(&k, p, 8);
        h = (h ^ (k * 0xC4CEB9FE1A85EC53ull)) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    uint64_t k = 0;
    memcpy(&k, p, n);
    h = (h ^ (k * 0xC4CEB9FE1A85EC53ull)) * 0x9E3779B97F4A7C15ull;
    h ^= h >> 32;
    return h;
}

static int interner_grow(Interner *t) {
    size_t n = t->n_slots ? t->n_slots * 2 : 1024;
    Slot *slots = calloc(n, sizeof(Slot));
    if (!slots) return -1;
    for (size_t i = 0; i < t->n_slots; i++) {
        Slot s = t->slots[i];
        if (!s.code) continue;
        size_t j = s.hash & (n - 1);
        while (slots[j].code) j = (j + 1) & (n - 1);
        slots[j] = s;
    }
    free(t->slots);
    t->slots = slots;
    t->n_slots = n;
    return 0;
}

typedef int (*Validator)(const uint8_t *p, size_t n);

/* The code of `p[0:n]`, added if new (after `valid` accepts it); < 0 on error. */
static int64_t intern(Interner *t, const uint8_t *p, size_t n, Validator valid) {
    if (n > UINT32_MAX) return ERR_BAIL;
    if ((t->count + 1) * 2 > t->n_slots && interner_grow(t)) return ERR_NOMEM;
    uint64_t h = hash_bytes(p, n);
    size_t mask = t->n_slots - 1, j = h & mask;
    for (;;) {
        Slot *s = &t->slots[j];
        if (!s->code) break;
        if (s->hash == h && s->len == n
            && (n == 0 || memcmp(t->arena.data + s->offset, p, n) == 0))
            return s->code - 1;
        j = (j + 1) & mask;
    }
    if (valid && valid(p, n)) return ERR_BAIL;
    if (t->arena.len + n > UINT32_MAX || t->count >= UINT32_MAX - 1) return ERR_BAIL;
    uint32_t offset = (uint32_t)t->arena.len;
    if (buf_put(&t->arena, p, n)) return ERR_NOMEM;
    uint32_t entry[2] = {offset, (uint32_t)n};
    if (buf_put(&t->entries, entry, sizeof entry)) return ERR_NOMEM;
    Slot *s = &t->slots[j];
    s->hash = h;
    s->offset = offset;
    s->len = (uint32_t)n;
    s->code = (uint32_t)(++t->count);
    return s->code - 1;
}

static void interner_free(Interner *t) {
    free(t->slots);
    free(t->arena.data);
    free(t->entries.data);
    memset(t, 0, sizeof *t);
}

/* 0 when p[0:n] is valid UTF-8 (as protobuf requires of proto3 strings). */
static int invalid_utf8(const uint8_t *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t len;
        uint32_t cp;
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return 1;
        if (i + len > n) return 1;
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) return 1;
            cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)
            || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 1;
        i += len;
    }
    return 0;
}

/* ------------------------------------------------------------------ wire reading */

typedef struct {
    const uint8_t *p, *end;
} Reader;

static inline int read_varint(Reader *r, uint64_t *out) {
    if (r->p < r->end && *r->p < 0x80) { /* one byte: most keys, lengths and values */
        *out = *r->p++;
        return 0;
    }
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (r->p >= r->end) return ERR_BAIL;
        uint8_t b = *r->p++;
        if (shift == 63 && b > 1) return ERR_BAIL; /* more than 64 bits */
        v |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = v;
            return 0;
        }
    }
    return ERR_BAIL;
}

/* Next field: its number and wire type; for wire type 2 also its payload. */
typedef struct {
    uint32_t number, wire;
    uint64_t value;       /* wire type 0 */
    Reader sub;           /* wire type 2 */
} Field;

static inline int next_field(Reader *r, Field *f) {
    uint64_t key;
    if (read_varint(r, &key)) return ERR_BAIL;
    f->number = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    if (f->number == 0 || (key >> 3) > 0x1FFFFFFF) return ERR_BAIL;
    switch (f->wire) {
    case 0:
        return read_varint(r, &f->value);
    case 1:
        if (r->end - r->p < 8) return ERR_BAIL;
        r->p += 8;
        return 0;
    case 5:
        if (r->end - r->p < 4) return ERR_BAIL;
        r->p += 4;
        return 0;
    case 2: {
        uint64_t n;
        if (read_varint(r, &n)) return ERR_BAIL;
        if (n > (uint64_t)(r->end - r->p)) return ERR_BAIL;
        f->sub.p = r->p;
        f->sub.end = r->p + n;
        r->p += n;
        return 0;
    }
    default: /* groups: not in these messages; let protobuf decide */
        return ERR_BAIL;
    }
}

/* A known field must have its declared wire type, else we leave the file to protobuf. */
#define EXPECT(f, w) \
    do { if ((f).wire != (w)) return ERR_BAIL; } while (0)
#define CHECK(call) \
    do { int rc_ = (call); if (rc_) return rc_; } while (0)

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

/* A finished column: owns its malloc'd buffer and exposes it through the buffer protocol,
 * so numpy (and polars after it) view the decoded values without a copy. */
typedef struct {
    PyObject_HEAD
    char *data;
    Py_ssize_t len;
} Column;

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
    .tp_name = "analyzer._stepstats.Column",
    .tp_basicsize = sizeof(Column),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one decoded column (read-only buffer).",
    .tp_dealloc = (destructor)column_dealloc,
    .tp_as_buffer = &column_as_buffer,
};

/* Hands the buffer over to a Column; the Buf is left empty. */
static PyObject *take_column(Buf *b) {
    Column *c = PyObject_New(Column, &ColumnType);
    if (!c) return NULL;
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
        PyObject *data = take_column(&cols[i]);
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
    .tp_name = "analyzer._stepstats.Decoder",
    .tp_basicsize = sizeof(Decoder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Accumulates the columns of many StepStats messages (one thread at a time).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)decoder_dealloc,
    .tp_methods = decoder_methods,
    .tp_members = decoder_members,
};

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

/* A 64-bit digest of n bytes at ~10 GB/s: four independent lanes of hash_bytes's step
 * (one multiply chain each, so they run in parallel), combined so that a change of any
 * one 8-byte word always changes the result (every step is a bijection of the lane given
 * the word, and the combination is one of each lane given the others). Detects damage;
 * not cryptographic. */
static uint64_t hash_wide(const uint8_t *p, size_t n) {
    const uint64_t m1 = 0xC4CEB9FE1A85EC53ull, m2 = 0x9E3779B97F4A7C15ull;
    uint64_t h[4] = {n, n ^ 0xFF51AFD7ED558CCDull, n + m1, n + m2};
    while (n >= 32) {
        for (int i = 0; i < 4; i++) {
            uint64_t k;
            memcpy(&k, p + 8 * i, 8);
            h[i] = (h[i] ^ (k * m1)) * m2;
            h[i] ^= h[i] >> 29;
        }
        p += 32;
        n -= 32;
    }
    uint64_t tail = hash_bytes(p, n);
    uint64_t out = tail;
    for (int i = 0; i < 4; i++) out = (out * m2) + (h[i] ^ (h[i] >> 31));
    return out;
}

static PyObject *checksum(PyObject *Py_UNUSED(module), PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE)) return NULL;
    uint64_t h;
    Py_BEGIN_ALLOW_THREADS
    h = hash_wide((const uint8_t *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(h);
}

static PyMethodDef module_methods[] = {
    {"split_run_metadata", split_run_metadata, METH_O,
     "split_run_metadata(raw: bytes-like) -> (stats, graphs)\n\n"
     "RunMetadata's non-empty step_stats occurrences and distinct non-empty partition\n"
     "graphs (function graphs' included), as (start, end) offsets into `raw`, in order.\n"
     "ValueError naming the problem for wire data no valid RunMetadata holds."},
    {"checksum", checksum, METH_O,
     "checksum(data: bytes-like) -> int: a 64-bit digest of the bytes (not cryptographic:\n"
     "it detects damage; ~10 GB/s, without the GIL)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_stepstats",
    .m_doc = "Native StepStats wire decoder (see analyzer/ingest/stepwalk.py).",
    .m_size = -1,
    .m_methods = module_methods,
};

/* ((name, numpy dtype), ...) of a table, in the decoder's column order. */
static PyObject *spec_tuple(const ColSpec *spec, int n) {
    PyObject *out = PyTuple_New(n);
    if (!out) return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(ss)", spec[i].name, spec[i].type);
        if (!pair) { Py_DECREF(out); return NULL; }
        PyTuple_SET_ITEM(out, i, pair);
    }
    return out;
}

/* COLUMNS: per table finish() returns, its columns (name, numpy dtype) in this order;
 * tests/test_schema.py checks them against analyzer/schema.py. */
static PyObject *columns_dict(void) {
    return Py_BuildValue("{sNsNsNsNsN}",
                         "nodes", spec_tuple(NODE_COLS, N_COLS),
                         "outputs", spec_tuple(OUTPUT_COLS, O_COLS),
                         "memory", spec_tuple(MEMORY_COLS, M_COLS),
                         "allocations", spec_tuple(ALLOC_COLS, A_COLS),
                         "threads", spec_tuple(THREAD_COLS, T_COLS));
}

PyMODINIT_FUNC PyInit__stepstats(void) {
    if (PyType_Ready(&DecoderType) < 0 || PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    PyObject *columns = columns_dict();
    if (!columns || PyModule_AddObject(m, "COLUMNS", columns) < 0) {
        Py_XDECREF(columns);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&DecoderType);
    if (PyModule_AddObject(m, "Decoder", (PyObject *)&DecoderType) < 0) {
        Py_DECREF(&DecoderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
