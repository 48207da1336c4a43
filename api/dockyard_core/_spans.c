/* Dockyard's spans in C: the span type (dockyard_core.tracing.Span's base where this was built) and the encoding
 * of a finished span as an OTLP ``Span`` message, framed as field 2 of ``ScopeSpans``: the C form of
 * dockyard_core.otlp.Encoder.span (the same bytes; tests/unit/core/test_otlp.py compares them), and of the
 * Python span class dockyard_core.tracing.PySpan (tests/unit/core/test_tracing.py runs on both).
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
#include <time.h>
#include "structmember.h"

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


/* --- the span type -------------------------------------------------------------------------------- */

#define SPAN_ERROR 2 /* OTLP's status code of a failed span */

typedef struct {
    PyObject_HEAD
    PyObject *trace_id, *span_id, *parent_id; /* ints */
    PyObject *tracestate, *name;              /* str */
    PyObject *attributes;                     /* dict */
    PyObject *statics, *links;                /* list or None */
    PyObject *status_message;                 /* str */
    PyObject *sink;                           /* the exporter while recording, else NULL */
    PyObject *token;                          /* the context variable's token while current, else NULL */
    int kind, status_code;
    char sampled, remote;
    long long start_ns, end_ns;
} SpanObject;

static PyObject *CURRENT = NULL; /* the ContextVar of the current span (bind()) */
static PyObject *S_error_type;   /* "error.type" */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* what time.time_ns() reads */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int Span_init(SpanObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"trace_id", "span_id", "sampled", "tracestate", "parent_id", "name", "kind",
                            "attributes", "links", "sink", "remote", "statics", NULL};
    PyObject *trace_id, *span_id, *tracestate, *parent_id, *name, *attributes, *links, *sink, *statics = Py_None;
    int sampled, kind, remote = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOpOOOiOOO|pO", names, &trace_id, &span_id, &sampled, &tracestate,
                                     &parent_id, &name, &kind, &attributes, &links, &sink, &remote, &statics))
        return -1;
    Py_INCREF(trace_id);
    Py_XSETREF(self->trace_id, trace_id);
    Py_INCREF(span_id);
    Py_XSETREF(self->span_id, span_id);
    Py_INCREF(parent_id);
    Py_XSETREF(self->parent_id, parent_id);
    Py_INCREF(tracestate);
    Py_XSETREF(self->tracestate, tracestate);
    Py_INCREF(name);
    Py_XSETREF(self->name, name);
    Py_INCREF(attributes);
    Py_XSETREF(self->attributes, attributes);
    Py_INCREF(links);
    Py_XSETREF(self->links, links);
    Py_INCREF(statics);
    Py_XSETREF(self->statics, statics);
    Py_XSETREF(self->status_message, PyUnicode_FromStringAndSize("", 0));
    if (self->status_message == NULL) return -1;
    if (sink == Py_None) {
        Py_CLEAR(self->sink);
    } else {
        Py_INCREF(sink);
        Py_XSETREF(self->sink, sink);
    }
    Py_CLEAR(self->token);
    self->sampled = (char)sampled;
    self->remote = (char)remote;
    self->kind = kind;
    self->status_code = 0;
    self->start_ns = now_ns();
    self->end_ns = 0;
    return 0;
}

static int Span_traverse(SpanObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->trace_id);
    Py_VISIT(self->span_id);
    Py_VISIT(self->parent_id);
    Py_VISIT(self->tracestate);
    Py_VISIT(self->name);
    Py_VISIT(self->attributes);
    Py_VISIT(self->statics);
    Py_VISIT(self->links);
    Py_VISIT(self->status_message);
    Py_VISIT(self->sink);
    Py_VISIT(self->token);
    return 0;
}

static int Span_clear(SpanObject *self) {
    Py_CLEAR(self->trace_id);
    Py_CLEAR(self->span_id);
    Py_CLEAR(self->parent_id);
    Py_CLEAR(self->tracestate);
    Py_CLEAR(self->name);
    Py_CLEAR(self->attributes);
    Py_CLEAR(self->statics);
    Py_CLEAR(self->links);
    Py_CLEAR(self->status_message);
    Py_CLEAR(self->sink);
    Py_CLEAR(self->token);
    return 0;
}

static void Span_dealloc(SpanObject *self) {
    PyObject_GC_UnTrack(self);
    Span_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Span_recording(SpanObject *self, void *closure) { return PyBool_FromLong(self->sink != NULL); }

static PyObject *Span_set_attribute(SpanObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_attribute(key, value)");
        return NULL;
    }
    if (self->sink != NULL && PyObject_SetItem(self->attributes, args[0], args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Span_set_attributes(SpanObject *self, PyObject *values) {
    if (self->sink != NULL) {
        if (PyDict_CheckExact(self->attributes)) {
            if (PyDict_Update(self->attributes, values) < 0) return NULL;
        } else {
            PyObject *done = PyObject_CallMethod(self->attributes, "update", "O", values);
            if (done == NULL) return NULL;
            Py_DECREF(done);
        }
    }
    Py_RETURN_NONE;
}

static PyObject *Span_add_static(SpanObject *self, PyObject *statik) {
    if (self->sink == NULL) Py_RETURN_NONE;
    if (self->statics == NULL || self->statics == Py_None) {
        PyObject *list = PyList_New(1);
        if (list == NULL) return NULL;
        Py_INCREF(statik);
        PyList_SET_ITEM(list, 0, statik);
        Py_XSETREF(self->statics, list);
    } else if (PyList_Check(self->statics)) {
        if (PyList_Append(self->statics, statik) < 0) return NULL;
    } else {
        PyObject *done = PyObject_CallMethod(self->statics, "append", "O", statik);
        if (done == NULL) return NULL;
        Py_DECREF(done);
    }
    Py_RETURN_NONE;
}

static PyObject *Span_set_error(SpanObject *self, PyObject *code) {
    if (self->sink == NULL) Py_RETURN_NONE;
    if (PyObject_SetItem(self->attributes, S_error_type, code) < 0) return NULL;
    self->status_code = SPAN_ERROR;
    Py_INCREF(code);
    Py_XSETREF(self->status_message, code);
    Py_RETURN_NONE;
}

static int u64_of(PyObject *number, uint64_t *out) { /* the low 64 bits */
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(number);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

static int trace_halves(PyObject *trace_id, uint64_t *hi, uint64_t *low) {
    if (u64_of(trace_id, low) < 0) return -1;
    PyObject *sixty_four = PyLong_FromLong(64);
    if (sixty_four == NULL) return -1;
    PyObject *high = PyNumber_Rshift(trace_id, sixty_four);
    Py_DECREF(sixty_four);
    if (high == NULL) return -1;
    int rc = u64_of(high, hi);
    Py_DECREF(high);
    return rc;
}

static PyObject *Span_traceparent(SpanObject *self, PyObject *unused) {
    uint64_t hi, low, span_id;
    if (trace_halves(self->trace_id, &hi, &low) < 0 || u64_of(self->span_id, &span_id) < 0) return NULL;
    char text[64];
    int n = snprintf(text, sizeof text, "00-%016llx%016llx-%016llx-%s", (unsigned long long)hi, (unsigned long long)low,
                     (unsigned long long)span_id, self->sampled ? "01" : "00");
    return PyUnicode_FromStringAndSize(text, n);
}

static PyObject *Span_end(SpanObject *self, PyObject *unused) {
    PyObject *sink = self->sink;
    if (sink != NULL) {
        self->sink = NULL; /* the reference is now ours */
        self->end_ns = now_ns();
        PyObject *done = PyObject_CallOneArg(sink, (PyObject *)self);
        Py_DECREF(sink);
        if (done == NULL) return NULL;
        Py_DECREF(done);
    }
    Py_RETURN_NONE;
}

static int need_current(void) {
    if (CURRENT == NULL) PyErr_SetString(PyExc_RuntimeError, "dockyard_core._spans.bind() was not called");
    return CURRENT == NULL ? -1 : 0;
}

static PyObject *Span_activate(SpanObject *self, PyObject *unused) {
    if (need_current() < 0) return NULL;
    PyObject *token = PyContextVar_Set(CURRENT, (PyObject *)self);
    if (token == NULL) return NULL;
    Py_XSETREF(self->token, token);
    Py_RETURN_NONE;
}

static PyObject *Span_finish(SpanObject *self, PyObject *unused) {
    if (self->token != NULL) {
        PyObject *token = self->token;
        self->token = NULL;
        int rc = PyContextVar_Reset(CURRENT, token);
        Py_DECREF(token);
        if (rc < 0) return NULL;
    }
    return Span_end(self, NULL);
}

static PyObject *Span_enter(SpanObject *self, PyObject *unused) {
    if (Span_activate(self, NULL) == NULL) return NULL;
    Py_INCREF(self);
    return (PyObject *)self;
}

static PyObject *Span_exit(SpanObject *self, PyObject *const *args, Py_ssize_t nargs) { return Span_finish(self, NULL); }

static PyMethodDef Span_methods[] = {
    {"set_attribute", (PyCFunction)(void (*)(void))Span_set_attribute, METH_FASTCALL, NULL},
    {"set_attributes", (PyCFunction)Span_set_attributes, METH_O, NULL},
    {"add_static", (PyCFunction)Span_add_static, METH_O,
     "Attributes made and encoded once (Static); never also set one by one."},
    {"set_error", (PyCFunction)Span_set_error, METH_O,
     "The span failed with code (error.type and an error status; never an exception's message)."},
    {"traceparent", (PyCFunction)Span_traceparent, METH_NOARGS, NULL},
    {"end", (PyCFunction)Span_end, METH_NOARGS, NULL},
    {"activate", (PyCFunction)Span_activate, METH_NOARGS, NULL},
    {"finish", (PyCFunction)Span_finish, METH_NOARGS, "Stop being the current span (the one before is again) and end."},
    {"__enter__", (PyCFunction)Span_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Span_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Span_members[] = {
    {"trace_id", T_OBJECT, offsetof(SpanObject, trace_id), 0, NULL},
    {"span_id", T_OBJECT, offsetof(SpanObject, span_id), 0, NULL},
    {"parent_id", T_OBJECT, offsetof(SpanObject, parent_id), 0, NULL},
    {"tracestate", T_OBJECT, offsetof(SpanObject, tracestate), 0, NULL},
    {"name", T_OBJECT, offsetof(SpanObject, name), 0, NULL},
    {"attributes", T_OBJECT, offsetof(SpanObject, attributes), 0, NULL},
    {"statics", T_OBJECT, offsetof(SpanObject, statics), 0, NULL},
    {"links", T_OBJECT, offsetof(SpanObject, links), 0, NULL},
    {"status_message", T_OBJECT, offsetof(SpanObject, status_message), 0, NULL},
    {"kind", T_INT, offsetof(SpanObject, kind), 0, NULL},
    {"status_code", T_INT, offsetof(SpanObject, status_code), 0, NULL},
    {"sampled", T_BOOL, offsetof(SpanObject, sampled), 0, NULL},
    {"remote", T_BOOL, offsetof(SpanObject, remote), 0, NULL},
    {"start_ns", T_LONGLONG, offsetof(SpanObject, start_ns), 0, NULL},
    {"end_ns", T_LONGLONG, offsetof(SpanObject, end_ns), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Span_getset[] = {
    {"recording", (getter)Span_recording, NULL, "Whether the span records (sampled and not yet ended).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject SpanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dockyard_core._spans.Span",
    .tp_basicsize = sizeof(SpanObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A span (dockyard_core.tracing.Span's base in C).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Span_init,
    .tp_dealloc = (destructor)Span_dealloc,
    .tp_traverse = (traverseproc)Span_traverse,
    .tp_clear = (inquiry)Span_clear,
    .tp_methods = Span_methods,
    .tp_members = Span_members,
    .tp_getset = Span_getset,
};

static PyObject *bind(PyObject *module, PyObject *var) {
    if (!PyContextVar_CheckExact(var)) {
        PyErr_SetString(PyExc_TypeError, "bind() takes the ContextVar of the current span");
        return NULL;
    }
    Py_INCREF(var);
    Py_XSETREF(CURRENT, var);
    Py_RETURN_NONE;
}

/* --- encoding ------------------------------------------------------------------------------------- */

static PyObject *S_trace_id, *S_span_id, *S_parent_id, *S_tracestate, *S_name, *S_kind, *S_start_ns, *S_end_ns,
    *S_statics, *S_encoded, *S_attributes, *S_links, *S_status_code, *S_status_message;

/* What the encoder reads of a finished span (new references): straight from a Span of this module, else by
 * attribute (any object with the fields of dockyard_core.otlp.FinishedSpan, e.g. tracing.PySpan). */
typedef struct {
    PyObject *trace_id, *span_id, *parent_id, *tracestate, *name, *statics, *attributes, *status_message;
    uint64_t kind, start_ns, end_ns, status_code;
} Fields;

static void fields_release(Fields *f) {
    Py_XDECREF(f->trace_id);
    Py_XDECREF(f->span_id);
    Py_XDECREF(f->parent_id);
    Py_XDECREF(f->tracestate);
    Py_XDECREF(f->name);
    Py_XDECREF(f->statics);
    Py_XDECREF(f->attributes);
    Py_XDECREF(f->status_message);
}

static int number_of(PyObject *span, PyObject *name, uint64_t *out) {
    PyObject *v = PyObject_GetAttr(span, name);
    if (v == NULL) return -1;
    int rc = u64_of(v, out);
    Py_DECREF(v);
    return rc;
}

static int fields_of(PyObject *span, Fields *f) {
    memset(f, 0, sizeof *f);
    if (PyObject_TypeCheck(span, &SpanType)) {
        SpanObject *s = (SpanObject *)span;
        PyObject *objects[] = {s->trace_id, s->span_id,    s->parent_id,  s->tracestate,
                               s->name,     s->statics,    s->attributes, s->status_message};
        for (int i = 0; i < 8; i++)
            if (objects[i] == NULL) {
                PyErr_SetString(PyExc_ValueError, "the span was not initialised");
                return -1;
            }
        f->trace_id = Py_NewRef(s->trace_id);
        f->span_id = Py_NewRef(s->span_id);
        f->parent_id = Py_NewRef(s->parent_id);
        f->tracestate = Py_NewRef(s->tracestate);
        f->name = Py_NewRef(s->name);
        f->statics = Py_NewRef(s->statics);
        f->attributes = Py_NewRef(s->attributes);
        f->status_message = Py_NewRef(s->status_message);
        f->kind = (uint64_t)(int64_t)s->kind;
        f->start_ns = (uint64_t)s->start_ns;
        f->end_ns = (uint64_t)s->end_ns;
        f->status_code = (uint64_t)(int64_t)s->status_code;
        return 0;
    }
    if ((f->trace_id = PyObject_GetAttr(span, S_trace_id)) == NULL ||
        (f->span_id = PyObject_GetAttr(span, S_span_id)) == NULL ||
        (f->parent_id = PyObject_GetAttr(span, S_parent_id)) == NULL ||
        (f->tracestate = PyObject_GetAttr(span, S_tracestate)) == NULL ||
        (f->name = PyObject_GetAttr(span, S_name)) == NULL ||
        (f->statics = PyObject_GetAttr(span, S_statics)) == NULL ||
        (f->attributes = PyObject_GetAttr(span, S_attributes)) == NULL ||
        (f->status_message = PyObject_GetAttr(span, S_status_message)) == NULL ||
        number_of(span, S_kind, &f->kind) < 0 || number_of(span, S_start_ns, &f->start_ns) < 0 ||
        number_of(span, S_end_ns, &f->end_ns) < 0 || number_of(span, S_status_code, &f->status_code) < 0)
        return -1;
    return 0;
}

static int encode(Buf *out, Fields *f) {
    Buf scratch = {0};
    uint64_t hi, low, span_id, parent_id;
    int rc = -1;

    if (trace_halves(f->trace_id, &hi, &low) < 0 || u64_of(f->span_id, &span_id) < 0) goto done;
    /* trace_id (1: 16 bytes, big-endian), span_id (2: 8 bytes) */
    if (put_byte(out, 0x0A) < 0 || put_byte(out, 0x10) < 0 || put_be64(out, hi) < 0 || put_be64(out, low) < 0 ||
        put_byte(out, 0x12) < 0 || put_byte(out, 0x08) < 0 || put_be64(out, span_id) < 0)
        goto done;
    int has_state = PyObject_IsTrue(f->tracestate);
    if (has_state < 0 || (has_state && put_text_field(out, 3, f->tracestate, 0) < 0)) goto done;
    if (u64_of(f->parent_id, &parent_id) < 0) goto done;
    if (parent_id && (put_byte(out, 0x22) < 0 || put_byte(out, 0x08) < 0 || put_be64(out, parent_id) < 0)) goto done;
    /* name (5), kind (6) */
    if (!PyUnicode_Check(f->name)) {
        PyErr_SetString(PyExc_TypeError, "a span's name must be a str");
        goto done;
    }
    if (put_text_field(out, 5, f->name, 1) < 0 || put_byte(out, 0x30) < 0 || put_varint(out, f->kind) < 0) goto done;
    /* start_time_unix_nano (7), end_time_unix_nano (8): fixed64 */
    if (put_byte(out, 0x39) < 0 || put_fixed64(out, f->start_ns) < 0 || put_byte(out, 0x41) < 0 ||
        put_fixed64(out, f->end_ns) < 0)
        goto done;
    /* attributes (9): the static blocks' encoded fields, then the span's own */
    if (f->statics != Py_None) {
        PyObject *seq = PySequence_Fast(f->statics, "statics must be a sequence");
        if (seq == NULL) goto done;
        Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *encoded = PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), S_encoded);
            int failed = encoded == NULL;
            if (!failed && !PyBytes_Check(encoded)) {
                PyErr_SetString(PyExc_TypeError, "a static block's encoded must be bytes");
                failed = 1;
            }
            if (!failed) failed = put(out, PyBytes_AS_STRING(encoded), PyBytes_GET_SIZE(encoded)) < 0;
            Py_XDECREF(encoded);
            if (failed) {
                Py_DECREF(seq);
                goto done;
            }
        }
        Py_DECREF(seq);
    }
    if (!PyDict_Check(f->attributes)) {
        PyErr_SetString(PyExc_TypeError, "a span's attributes must be a dict");
        goto done;
    }
    {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        while (PyDict_Next(f->attributes, &pos, &key, &value)) {
            if (put_attribute(out, &scratch, key, value) < 0) goto done;
        }
    }
    /* status (15): message (2), code (3) */
    if (f->status_code) {
        Buf status = {0};
        int failed = 0;
        int has_message = PyObject_IsTrue(f->status_message);
        if (has_message < 0) failed = 1;
        if (!failed && has_message) failed = put_text_field(&status, 2, f->status_message, 1) < 0;
        if (!failed) failed = put_byte(&status, 0x18) < 0 || put_varint(&status, f->status_code) < 0;
        if (!failed) failed = put_field(out, 15, status.data, status.len) < 0;
        PyMem_Free(status.data);
        if (failed) goto done;
    }
    rc = 0;
done:
    PyMem_Free(scratch.data);
    return rc;
}

static PyObject *span_field(PyObject *module, PyObject *span) {
    int has_links;
    if (PyObject_TypeCheck(span, &SpanType)) {
        PyObject *links = ((SpanObject *)span)->links;
        has_links = links == NULL ? 0 : PyObject_IsTrue(links);
    } else {
        PyObject *links = PyObject_GetAttr(span, S_links);
        if (links == NULL) return NULL;
        has_links = PyObject_IsTrue(links);
        Py_DECREF(links);
    }
    if (has_links < 0) return NULL;
    if (has_links) Py_RETURN_NONE; /* left to the Python encoder */
    Fields fields;
    Buf body = {0};
    int failed = fields_of(span, &fields) < 0 || encode(&body, &fields) < 0;
    fields_release(&fields);
    if (failed) {
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
     "span(span) -> bytes | None: the finished span as field 2 of ScopeSpans (None for a span with links)."},
    {"bind", bind, METH_O, "bind(contextvar): the ContextVar that holds the current span."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_spans", "Dockyard's spans in C.", -1, methods, NULL,
                                    NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__spans(void) {
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
    INTERN(S_error_type, "error.type")
#undef INTERN
    if (PyType_Ready(&SpanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&SpanType);
    if (PyModule_AddObject(m, "Span", (PyObject *)&SpanType) < 0) {
        Py_DECREF(&SpanType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
