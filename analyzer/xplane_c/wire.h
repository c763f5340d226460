/* The wire reader of analyzer/_xplane.c: varints, tags, lengths, skipping a field
 * (groups included) and UTF-8, each refusing exactly what protobuf (upb) refuses (see
 * _xplane.c's header). #included into that one translation unit. */
#ifndef RUNLENS_XPLANE_WIRE_H
#define RUNLENS_XPLANE_WIRE_H

#include <stdint.h>
#include <string.h>

/* protobuf's depth limit counts messages and groups from the root (the XSpace): a plane
 * is at depth 1, a line 2, an event 3, a stat 4. */
#define DEPTH_LIMIT 100

typedef struct {
    const uint8_t *p, *end;
} Reader;

static int varint(Reader *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) { /* at most 10 bytes */
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

/* A tag: at most 5 bytes, below 2^32, field number not 0 (as protobuf). */
static int tag(Reader *r, uint32_t *field, int *wire) {
    uint64_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (v > 0xFFFFFFFFu || (v >> 3) == 0) return -1;
            *field = (uint32_t)(v >> 3);
            *wire = (int)(v & 7);
            return 0;
        }
    }
    return -1;
}

/* A length-delimited value: its length (at most 5 bytes, within the buffer) -> *sub. */
static int sub(Reader *r, Reader *out) {
    uint64_t n = 0;
    for (int i = 0;; i++) {
        if (i == 5 || r->p >= r->end) return -1;
        uint8_t b = *r->p++;
        n |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) break;
    }
    if ((uint64_t)(r->end - r->p) < n) return -1;
    out->p = r->p;
    out->end = r->p + n;
    r->p += n;
    return 0;
}

/* Skips the value of a field of `wire` type (a group to its matching end, at most
 * `depth` more levels deep); -1 on malformed input. */
static int skip(Reader *r, uint32_t field, int wire, int depth) {
    uint64_t n;
    Reader s;
    switch (wire) {
    case 0: return varint(r, &n);
    case 1: if (r->end - r->p < 8) return -1; r->p += 8; return 0;
    case 2: return sub(r, &s);
    case 5: if (r->end - r->p < 4) return -1; r->p += 4; return 0;
    case 3:
        if (depth <= 0) return -1;
        for (;;) {
            uint32_t f;
            int w;
            if (tag(r, &f, &w)) return -1;
            if (w == 4) return f == field ? 0 : -1;
            if (skip(r, f, w, depth - 1)) return -1;
        }
    default: return -1; /* 4: an end of group without its start; 6, 7 */
    }
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), as protobuf
 * checks string fields. */
static int utf8_ok(const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        if (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if (!(w & 0x8080808080808080ULL)) {
                p += 8;
                continue;
            }
        }
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1f; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0f; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        if (end - p <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3f);
        }
        if (n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) return 0;
        if (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) return 0;
        p += n + 1;
    }
    return 1;
}

#endif
