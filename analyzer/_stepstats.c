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
 *
 * Layout: one translation unit (so the compiler inlines the wire reader into the walk),
 * its parts in stepstats_c/, one job each, included below in dependency order.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "stepstats_c/columns.h"
#include "stepstats_c/intern.h"
#include "stepstats_c/wire.h"
#include "stepstats_c/walk.h"
#include "stepstats_c/pytypes.h"
#include "stepstats_c/split.h"
#include "stepstats_c/checksum.h"

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
