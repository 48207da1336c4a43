/* One finished span as an OTLP ``Span`` message, framed as field 2 of ``ScopeSpans``: the C form of
 * dockyard_core.otlp.Encoder.span (the same bytes; tests/unit/core/test_otlp.py compares them).
 *
 * Why in C: encoding is most of what a traced turn costs the facade beyond the untraced one. In the
 * facade's process, between requests that evict the interpreter's caches, the three spans of a turn took
 * about 26 us to encode in Python (docs/benchmarks.md, "Tracing: where a traced turn's CPU goes"). Built
 * when a C compiler is at hand (an optional extension, pyproject.toml); without it the Python encoder is
 * used, with the same output.
 *
 * It reads the span's slots (trace_id, span_id, parent_id, tracestate, name, kind, start_ns, end_ns,
 * statics, attributes, status_code, status_message) and answers None for a span with links: those are
 * left to the Python encoder (rare: an evaluation's turn). */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const void *bytes, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, bytes, (size_t)n);
    b->len += n;
    return 0;
}

static int put_byte(Buf *b, unsigned char c) { return put(b, &c, 1); }

static int put_varint(Buf *b, uint64_t v) {
    unsigned char out[10];
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return put(b, out, n);
}

static int put_fixed64(Buf *b, uint64_t v) { /* little-endian */
    unsigned char out[8];
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (8 * i));
    return put(b, out, 8);
}

static int put_be64(Buf *b, uint64_t v) {
    unsigned char out[8];
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (56 - 8 * i));
    return put(b, out, 8);
}

/* A length-delimited field (tag, length, payload). */
static int put_field(Buf *b, unsigned int number, const char *payload, Py_ssize_t n) {
    if (put_varint(b, (uint64_t)number << 3 | 2) < 0 || put_varint(b, (uint64_t)n) < 0) return -1;
    return put(b, payload, n);
}

/* ``text`` as UTF-8: strict (a key, the tracestate) or with ``replace`` (values, names: a lone surrogate
 * becomes '?', as str.encode("utf-8", "replace") does). *keep: a new reference to release, or NULL. */
static const char *utf8(PyObject *text, Py_ssize_t *n, int replace, PyObject **keep) {
    *keep = NULL;
    const char *s = PyUnicode_AsUTF8AndSize(text, n);
    if (s != NULL || !replace) return s;
    PyErr_Clear();
    PyObject *encoded = PyUnicode_AsEncodedString(text, "utf-8", "replace");
    if (encoded == NULL) return NULL;
    *keep = encoded;
    *n = PyBytes_GET_SIZE(encoded);
    return PyBytes_AS_STRING(encoded);
}

static int put_text_field(Buf *b, unsigned int number, PyObject *text, int replace) {
    Py_ssize_t n;
    PyObject *keep;
    const char *s = utf8(text, &n, replace, &keep);
    if (s == NULL) return -1;
    int rc = put_field(b, number, s, n);
    Py_XDECREF(keep);
    return rc;
}

static int put_any_value(Buf *b, PyObject *value);

static int put_array(Buf *b, PyObject *seq) {
    /* ArrayValue (AnyValue field 5): repeated AnyValue values (field 1) */
    Buf items = {0}, one = {0};
    int rc = -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **elements = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        one.len = 0;
        if (put_any_value(&one, elements[i]) < 0 || put_field(&items, 1, one.data, one.len) < 0) goto done;
    }
    rc = put_field(b, 5, items.data, items.len);
done:
    PyMem_Free(items.data);
    PyMem_Free(one.data);
    return rc;
}

/* An AnyValue message (not framed), as otlp._any_value writes it. */
static int put_any_value(Buf *b, PyObject *value) {
    if (PyBool_Check(value)) {
        unsigned char out[2] = {0x10, value == Py_True ? 1 : 0};
        return put(b, out, 2);
    }
    if (PyLong_Check(value)) {
        uint64_t v = (uint64_t)PyLong_AsUnsignedLongLongMask(value); /* two's complement in 64 bits */
        if (v == (uint64_t)-1 && PyErr_Occurred()) return -1;
        return put_byte(b, 0x18) < 0 ? -1 : put_varint(b, v);
    }
    if (PyFloat_Check(value)) {
        double d = PyFloat_AS_DOUBLE(value);
        uint64_t bits;
        memcpy(&bits, &d, 8);
        return put_byte(b, 0x21) < 0 ? -1 : put_fixed64(b, bits);
    }
    if (PyUnicode_Check(value)) return put_text_field(b, 1, value, 1);
    if (PyList_Check(value) || PyTuple_Check(value)) return put_array(b, value);
    PyObject *text = PyObject_Str(value);
    if (text == NULL) return -1;
    int rc = put_text_field(b, 1, text, 1);
    Py_DECREF(text);
    return rc;
}

/* One attribute as a Span's field 9 (KeyValue: key 1, value 2). */
static int put_attribute(Buf *b, Buf *scratch, PyObject *key, PyObject *value) {
    Py_ssize_t kn;
    PyObject *keep;
    if (!PyUnicode_Check(key)) {
        PyErr_SetString(PyExc_TypeError, "an attribute's key must be a str");
        return -1;
    }
    const char *k = utf8(key, &kn, 0, &keep);
    if (k == NULL) return -1;
    scratch->len = 0;
    if (put_any_value(scratch, value) < 0) return -1;
    Buf kv = {0};
    int rc = -1;
    if (put_field(&kv, 1, k, kn) == 0 && put_field(&kv, 2, scratch->data, scratch->len) == 0)
        rc = put_field(b, 9, kv.data, kv.len);
    PyMem_Free(kv.data);
    return rc;
}

static PyObject *S_trace_id, *S_span_id, *S_parent_id, *S_tracestate, *S_name, *S_kind, *S_start_ns, *S_end_ns,
    *S_statics, *S_encoded, *S_attributes, *S_links, *S_status_code, *S_status_message;

static int get_u64(PyObject *span, PyObject *name, uint64_t *out) {
    PyObject *v = PyObject_GetAttr(span, name);
    if (v == NULL) return -1;
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(v);
    Py_DECREF(v);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static int encode(Buf *out, PyObject *span) {
    PyObject *trace_id = NULL, *high = NULL, *v = NULL;
    Buf scratch = {0};
    uint64_t low, hi, span_id, parent_id, kind, start_ns, end_ns, status_code;
    int rc = -1;

    trace_id = PyObject_GetAttr(span, S_trace_id);
    if (trace_id == NULL) goto done;
    low = (uint64_t)PyLong_AsUnsignedLongLongMask(trace_id);
    if (low == (uint64_t)-1 && PyErr_Occurred()) goto done;
    PyObject *sixty_four = PyLong_FromLong(64);
    if (sixty_four == NULL) goto done;
    high = PyNumber_Rshift(trace_id, sixty_four);
    Py_DECREF(sixty_four);
    if (high == NULL) goto done;
    hi = (uint64_t)PyLong_AsUnsignedLongLongMask(high);
    if (hi == (uint64_t)-1 && PyErr_Occurred()) goto done;
    if (get_u64(span, S_span_id, &span_id) < 0) goto done;
    /* trace_id (1: 16 bytes, big-endian), span_id (2: 8 bytes) */
    if (put_byte(out, 0x0A) < 0 || put_byte(out, 0x10) < 0 || put_be64(out, hi) < 0 || put_be64(out, low) < 0 ||
        put_byte(out, 0x12) < 0 || put_byte(out, 0x08) < 0 || put_be64(out, span_id) < 0)
        goto done;
    if ((v = PyObject_GetAttr(span, S_tracestate)) == NULL) goto done;
    if (PyObject_IsTrue(v) == 1 && put_text_field(out, 3, v, 0) < 0) goto done;
    Py_CLEAR(v);
    if (get_u64(span, S_parent_id, &parent_id) < 0) goto done;
    if (parent_id && (put_byte(out, 0x22) < 0 || put_byte(out, 0x08) < 0 || put_be64(out, parent_id) < 0)) goto done;
    /* name (5), kind (6) */
    if ((v = PyObject_GetAttr(span, S_name)) == NULL) goto done;
    if (!PyUnicode_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "a span's name must be a str");
        goto done;
    }
    if (put_text_field(out, 5, v, 1) < 0) goto done;
    Py_CLEAR(v);
    if (get_u64(span, S_kind, &kind) < 0 || put_byte(out, 0x30) < 0 || put_varint(out, kind) < 0) goto done;
    /* start_time_unix_nano (7), end_time_unix_nano (8): fixed64 */
    if (get_u64(span, S_start_ns, &start_ns) < 0 || get_u64(span, S_end_ns, &end_ns) < 0) goto done;
    if (put_byte(out, 0x39) < 0 || put_fixed64(out, start_ns) < 0 || put_byte(out, 0x41) < 0 ||
        put_fixed64(out, end_ns) < 0)
        goto done;
    /* attributes (9): the static blocks' encoded fields, then the span's own */
    if ((v = PyObject_GetAttr(span, S_statics)) == NULL) goto done;
    if (v != Py_None) {
        PyObject *seq = PySequence_Fast(v, "statics must be a sequence");
        if (seq == NULL) goto done;
        Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *encoded = PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), S_encoded);
            if (encoded == NULL || !PyBytes_Check(encoded)) {
                if (encoded != NULL) PyErr_SetString(PyExc_TypeError, "a static block's encoded must be bytes");
                Py_XDECREF(encoded);
                Py_DECREF(seq);
                goto done;
            }
            int failed = put(out, PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded));
            Py_DECREF(encoded);
            if (failed < 0) {
                Py_DECREF(seq);
                goto done;
            }
        }
        Py_DECREF(seq);
    }
    Py_CLEAR(v);
    if ((v = PyObject_GetAttr(span, S_attributes)) == NULL) goto done;
    if (!PyDict_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "a span's attributes must be a dict");
        goto done;
    }
    {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(v, &pos, &key, &value)) {
            if (put_attribute(out, &scratch, key, value) < 0) goto done;
        }
    }
    Py_CLEAR(v);
    /* status (15): message (2), code (3) */
    if (get_u64(span, S_status_code, &status_code) < 0) goto done;
    if (status_code) {
        Buf status = {0};
        int failed = 0;
        if ((v = PyObject_GetAttr(span, S_status_message)) == NULL) goto done;
        if (PyObject_IsTrue(v) == 1) failed = put_text_field(&status, 2, v, 1);
        if (!failed) failed = put_byte(&status, 0x18) < 0 || put_varint(&status, status_code) < 0;
        if (!failed) failed = put_field(out, 15, status.data, status.len);
        PyMem_Free(status.data);
        if (failed) goto done;
        Py_CLEAR(v);
    }
    rc = 0;
done:
    Py_XDECREF(trace_id);
    Py_XDECREF(high);
    Py_XDECREF(v);
    PyMem_Free(scratch.data);
    return rc;
}

static PyObject *span_field(PyObject *module, PyObject *span) {
    PyObject *links = PyObject_GetAttr(span, S_links);
    if (links == NULL) return NULL;
    int has_links = PyObject_IsTrue(links);
    Py_DECREF(links);
    if (has_links < 0) return NULL;
    if (has_links) Py_RETURN_NONE; /* left to the Python encoder */
    Buf body = {0};
    if (encode(&body, span) < 0) {
        PyMem_Free(body.data);
        return NULL;
    }
    /* framed as field 2 of ScopeSpans */
    unsigned char head[11];
    int n = 0;
    uint64_t size = (uint64_t)body.len;
    head[n++] = 0x12;
    while (size >= 0x80) {
        head[n++] = (unsigned char)((size & 0x7F) | 0x80);
        size >>= 7;
    }
    head[n++] = (unsigned char)size;
    PyObject *result = PyBytes_FromStringAndSize(NULL, n + body.len);
    if (result != NULL) {
        memcpy(PyBytes_AS_STRING(result), head, (size_t)n);
        if (body.len) memcpy(PyBytes_AS_STRING(result) + n, body.data, (size_t)body.len);
    }
    PyMem_Free(body.data);
    return result;
}

static PyMethodDef methods[] = {
    {"span", span_field, METH_O,
     "span(span) -> bytes | None: the span as field 2 of ScopeSpans (None for a span with links)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlp_span", "OTLP span encoding in C.", -1, methods};

PyMODINIT_FUNC PyInit__otlp_span(void) {
#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL;
    INTERN(S_trace_id, "trace_id")
    INTERN(S_span_id, "span_id")
    INTERN(S_parent_id, "parent_id")
    INTERN(S_tracestate, "tracestate")
    INTERN(S_name, "name")
    INTERN(S_kind, "kind")
    INTERN(S_start_ns, "start_ns")
    INTERN(S_end_ns, "end_ns")
    INTERN(S_statics, "statics")
    INTERN(S_encoded, "encoded")
    INTERN(S_attributes, "attributes")
    INTERN(S_links, "links")
    INTERN(S_status_code, "status_code")
    INTERN(S_status_message, "status_message")
#undef INTERN
    return PyModule_Create(&module);
}
