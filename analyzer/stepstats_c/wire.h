/* The protobuf wire format: varints and fields, and the macros that leave a file to
 * protobuf (ERR_BAIL) when it is not in the canonical subset read here.
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

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
