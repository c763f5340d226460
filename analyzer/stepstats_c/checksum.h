/* checksum(): the 64-bit content digest the cache keys files by (analyzer/digest.py).
 *
 * Part of analyzer/_stepstats.c's single translation unit (included once, in
 * order, so the compiler still inlines across parts); not a public header. */

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
