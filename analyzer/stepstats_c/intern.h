/* Interning: strings, shapes and keys repeat every step, so each distinct value is
 * stored once and the columns hold its uint32 code. Also the UTF-8 check protobuf applies
 * to proto3 strings.
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

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
