/* Growable buffers and the tables the decoder fills: each table's columns (name,
 * numpy dtype) in the order finish() and COLUMNS give them.
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

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
