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
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include "structmember.h"

/* A growing buffer: on the caller's stack to begin with (BUF_ON), on the heap once that is too small. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
    int on_heap;
} Buf;

#define BUF_ON(storage) {(storage), 0, (Py_ssize_t)sizeof(storage), 0}

static int buf_grow(Buf *b, Py_ssize_t more) {
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more) cap *= 2;
    char *data;
    if (b->on_heap || b->data == NULL) {
        data = PyMem_Realloc(b->data, (size_t)cap);
    } else if ((data = PyMem_Malloc((size_t)cap)) != NULL && b->len) {
        memcpy(data, b->data, (size_t)b->len);
    }
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    b->on_heap = 1;
    return 0;
}

/* Room for ``more`` bytes at the end (the test inline, the growing not). */
static inline int buf_reserve(Buf *b, Py_ssize_t more) { return b->len + more <= b->cap ? 0 : buf_grow(b, more); }

static void buf_free(Buf *b) {
    if (b->on_heap) PyMem_Free(b->data);
}

static int put(Buf *b, const void *bytes, Py_ssize_t n) {
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, bytes, (size_t)n);
    b->len += n;
    return 0;
}

static inline int put_byte(Buf *b, unsigned char c) {
    if (buf_reserve(b, 1) < 0) return -1;
    b->data[b->len++] = (char)c;
    return 0;
}

static inline int put_varint(Buf *b, uint64_t v) {
    if (buf_reserve(b, 10) < 0) return -1;
    unsigned char *out = (unsigned char *)b->data + b->len;
    int n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    b->len += n;
    return 0;
}

static int put_fixed64(Buf *b, uint64_t v) { /* little-endian */
    if (buf_reserve(b, 8) < 0) return -1;
    unsigned char *out = (unsigned char *)b->data + b->len;
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (8 * i));
    b->len += 8;
    return 0;
}

static int put_be64(Buf *b, uint64_t v) {
    if (buf_reserve(b, 8) < 0) return -1;
    unsigned char *out = (unsigned char *)b->data + b->len;
    for (int i = 0; i < 8; i++) out[i] = (unsigned char)(v >> (56 - 8 * i));
    b->len += 8;
    return 0;
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
    char items_storage[256], one_storage[128];
    Buf items = BUF_ON(items_storage), one = BUF_ON(one_storage);
    int rc = -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **elements = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t i = 0; i < count; i++) {
        one.len = 0;
        if (put_any_value(&one, elements[i]) < 0 || put_field(&items, 1, one.data, one.len) < 0) goto done;
    }
    rc = put_field(b, 5, items.data, items.len);
done:
    buf_free(&items);
    buf_free(&one);
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

static int varint_size(uint64_t v) {
    int n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* One attribute as a Span's field 9 (KeyValue: key 1, value 2), written straight after its length. */
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
    uint64_t size = 1 + (uint64_t)varint_size((uint64_t)kn) + (uint64_t)kn + 1 +
                    (uint64_t)varint_size((uint64_t)scratch->len) + (uint64_t)scratch->len;
    if (put_byte(b, 9 << 3 | 2) < 0 || put_varint(b, size) < 0 || put_field(b, 1, k, kn) < 0) return -1;
    return put_field(b, 2, scratch->data, scratch->len);
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

/* A field that may be missing (a span made with __new__ alone, or a member deleted) read as None. */
static inline PyObject *or_none(PyObject *field) { return field != NULL ? field : Py_None; }
static PyObject *S_error_type;   /* "error.type" */
static PyObject *EMPTY = NULL, *ZERO = NULL, *SIXTY_FOUR = NULL; /* "", 0, 64: made once (the module's init) */

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* what time.time_ns() reads */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Set every field of a span (made now, or initialised again): references taken, the clock read. */
static void span_fill(SpanObject *self, PyObject *trace_id, PyObject *span_id, int sampled, PyObject *tracestate,
                      PyObject *parent_id, PyObject *name, int kind, PyObject *attributes, PyObject *links,
                      PyObject *sink, int remote, PyObject *statics) {
    Py_XSETREF(self->trace_id, Py_NewRef(trace_id));
    Py_XSETREF(self->span_id, Py_NewRef(span_id));
    Py_XSETREF(self->parent_id, Py_NewRef(parent_id));
    Py_XSETREF(self->tracestate, Py_NewRef(tracestate));
    Py_XSETREF(self->name, Py_NewRef(name));
    Py_XSETREF(self->attributes, Py_NewRef(attributes));
    Py_XSETREF(self->links, Py_NewRef(links));
    Py_XSETREF(self->statics, Py_NewRef(statics));
    Py_XSETREF(self->status_message, Py_NewRef(EMPTY));
    Py_XSETREF(self->sink, sink == Py_None ? NULL : Py_NewRef(sink));
    Py_CLEAR(self->token);
    self->sampled = (char)sampled;
    self->remote = (char)remote;
    self->kind = kind;
    self->status_code = 0;
    self->start_ns = now_ns();
    self->end_ns = 0;
}

static int Span_init(SpanObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"trace_id", "span_id", "sampled", "tracestate", "parent_id", "name", "kind",
                            "attributes", "links", "sink", "remote", "statics", NULL};
    PyObject *trace_id, *span_id, *tracestate, *parent_id, *name, *attributes, *links, *sink, *statics = Py_None;
    int sampled, kind, remote = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOpOOOiOOO|pO", names, &trace_id, &span_id, &sampled, &tracestate,
                                     &parent_id, &name, &kind, &attributes, &links, &sink, &remote, &statics))
        return -1;
    span_fill(self, trace_id, span_id, sampled, tracestate, parent_id, name, kind, attributes, links, sink, remote,
              statics);
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
    if (self->sink != NULL && PyObject_SetItem(or_none(self->attributes), args[0], args[1]) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Span_set_attributes(SpanObject *self, PyObject *values) {
    if (self->sink != NULL) {
        if (self->attributes != NULL && PyDict_CheckExact(self->attributes)) {
            if (PyDict_Update(self->attributes, values) < 0) return NULL;
        } else {
            PyObject *done = PyObject_CallMethod(or_none(self->attributes), "update", "O", values);
            if (done == NULL) return NULL;
            Py_DECREF(done);
        }
    }
    Py_RETURN_NONE;
}

/* ``statik`` appended to the span's Static blocks (a list made for the first); -1 on error. */
static int statics_append(SpanObject *self, PyObject *statik) {
    if (self->statics == NULL || self->statics == Py_None) {
        PyObject *list = PyList_New(1);
        if (list == NULL) return -1;
        PyList_SET_ITEM(list, 0, Py_NewRef(statik));
        Py_XSETREF(self->statics, list);
        return 0;
    }
    if (PyList_Check(self->statics)) return PyList_Append(self->statics, statik);
    PyObject *done = PyObject_CallMethod(self->statics, "append", "O", statik);
    Py_XDECREF(done);
    return done == NULL ? -1 : 0;
}

static PyObject *Span_add_static(SpanObject *self, PyObject *statik) {
    if (self->sink != NULL && statics_append(self, statik) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Span_set_error(SpanObject *self, PyObject *code) {
    if (self->sink == NULL) Py_RETURN_NONE;
    if (PyObject_SetItem(or_none(self->attributes), S_error_type, code) < 0) return NULL;
    self->status_code = SPAN_ERROR;
    Py_INCREF(code);
    Py_XSETREF(self->status_message, code);
    Py_RETURN_NONE;
}

static int u64_of(PyObject *number, uint64_t *out) { /* the low 64 bits */
    *out = (uint64_t)PyLong_AsUnsignedLongLongMask(number);
    return (*out == (uint64_t)-1 && PyErr_Occurred()) ? -1 : 0;
}

/* The trace id last split (a strong reference: an int does not change, and while it is held no other object
 * has its address) and its halves: the spans of a trace share their trace id object, and each is split when it
 * is encoded and for every traceparent sent on. */
static PyObject *HALVES_OF = NULL;
static uint64_t HALVES_HI, HALVES_LOW;

static int trace_halves(PyObject *trace_id, uint64_t *hi, uint64_t *low) {
    if (trace_id == HALVES_OF) {
        *hi = HALVES_HI;
        *low = HALVES_LOW;
        return 0;
    }
    if (u64_of(trace_id, low) < 0) return -1;
    PyObject *high = PyNumber_Rshift(trace_id, SIXTY_FOUR);
    if (high == NULL) return -1;
    int rc = u64_of(high, hi);
    Py_DECREF(high);
    if (rc == 0) {
        Py_XSETREF(HALVES_OF, Py_NewRef(trace_id));
        HALVES_HI = *hi;
        HALVES_LOW = *low;
    }
    return rc;
}

/* The 16 lower-case hex digits of v at out. */
static void put_hex64(char *out, uint64_t v) {
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--) {
        out[i] = digits[v & 15];
        v >>= 4;
    }
}

static PyObject *Span_traceparent(SpanObject *self, PyObject *unused) {
    uint64_t hi, low, span_id;
    if (trace_halves(or_none(self->trace_id), &hi, &low) < 0 || u64_of(or_none(self->span_id), &span_id) < 0)
        return NULL;
    /* 00-{trace id: 32 hex}-{span id: 16 hex}-{flags}, written into the new str (snprintf took ten times as long) */
    PyObject *text = PyUnicode_New(55, 127);
    if (text == NULL) return NULL;
    char *out = (char *)PyUnicode_1BYTE_DATA(text);
    memcpy(out, "00-", 3);
    put_hex64(out + 3, hi);
    put_hex64(out + 19, low);
    out[35] = '-';
    put_hex64(out + 36, span_id);
    memcpy(out + 52, self->sampled ? "-01" : "-00", 3);
    return text;
}

static PyTypeObject SinkType;
static PyObject *sink_take(PyObject *sink, PyObject *span);

static PyObject *Span_end(SpanObject *self, PyObject *unused) {
    PyObject *sink = self->sink;
    if (sink != NULL) {
        self->sink = NULL; /* the reference is now ours */
        self->end_ns = now_ns();
        PyObject *done = Py_IS_TYPE(sink, &SinkType) ? sink_take(sink, (PyObject *)self)
                                                     : PyObject_CallOneArg(sink, (PyObject *)self);
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

static PyTypeObject *SPAN_CLASS = NULL; /* the class of new spans (bind()): tracing.CSpan */

/* A Span of this module: the class of new spans (one comparison), else any subclass (a walk of its MRO). */
static inline int is_span(PyObject *o) { return Py_TYPE(o) == SPAN_CLASS || PyObject_TypeCheck(o, &SpanType); }

static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyContextVar_CheckExact(args[0]) || !PyType_Check(args[1]) ||
        !PyType_IsSubtype((PyTypeObject *)args[1], &SpanType)) {
        PyErr_SetString(PyExc_TypeError, "bind(current span's ContextVar, a subclass of Span)");
        return NULL;
    }
    Py_XSETREF(CURRENT, Py_NewRef(args[0]));
    Py_XSETREF(SPAN_CLASS, (PyTypeObject *)Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* The ids: xoshiro256** (https://prng.di.unimi.it/), seeded from the kernel's random source (getrandom) on first
 * use and again in a forked child (pthread_atfork), as random.getrandbits (the Python spans' source, a Mersenne
 * Twister) is: random, not secret (W3C Trace Context asks ids to be random, not unguessable). Called with the GIL
 * held. */
static uint64_t RNG[4];
static int RNG_SEEDED = 0;

static void rng_forked(void) { RNG_SEEDED = 0; }

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static int rng_next(uint64_t *out) {
    if (!RNG_SEEDED) {
        size_t got = 0;
        while (got < sizeof RNG) {
            ssize_t n = getrandom((char *)RNG + got, sizeof RNG - got, 0);
            if (n < 0) {
                if (errno == EINTR) continue;
                PyErr_SetFromErrno(PyExc_OSError);
                return -1;
            }
            got += (size_t)n;
        }
        if ((RNG[0] | RNG[1] | RNG[2] | RNG[3]) == 0) RNG[0] = 1; /* the one state it must not have */
        RNG_SEEDED = 1;
    }
    uint64_t result = rotl(RNG[1] * 5, 7) * 9, t = RNG[1] << 17;
    RNG[2] ^= RNG[0];
    RNG[3] ^= RNG[1];
    RNG[1] ^= RNG[2];
    RNG[0] ^= RNG[3];
    RNG[2] ^= t;
    RNG[3] = rotl(RNG[3], 45);
    *out = result;
    return 0;
}

static int need_bound(void) {
    if (SPAN_CLASS == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "dockyard_core._spans.bind() was not called");
        return -1;
    }
    return 0;
}

/* A new span of SPAN_CLASS, its fields set without parsing arguments (span_fill). */
static PyObject *new_span(PyObject *trace_id, PyObject *span_id, int sampled, PyObject *tracestate, PyObject *parent_id,
                          PyObject *name, int kind, PyObject *attributes, PyObject *links, PyObject *sink, int remote,
                          PyObject *statics) {
    SpanObject *span = (SpanObject *)SPAN_CLASS->tp_alloc(SPAN_CLASS, 0);
    if (span != NULL)
        span_fill(span, trace_id, span_id, sampled, tracestate, parent_id, name, kind, attributes, links, sink, remote,
                  statics);
    return (PyObject *)span;
}

/* A new random id of 64 bits (a span's) or 128 (a trace's), never 0 (an invalid id in W3C Trace Context). */
static PyObject *random_id(int bits) {
    uint64_t hi = 0, low = 0;
    do {
        if (rng_next(&low) < 0 || (bits > 64 && rng_next(&hi) < 0)) return NULL;
    } while (hi == 0 && low == 0);
    if (bits <= 64) return PyLong_FromUnsignedLongLong(low);
    unsigned char bytes[16];
    for (int i = 0; i < 8; i++) {
        bytes[i] = (unsigned char)(low >> (8 * i));
        bytes[8 + i] = (unsigned char)(hi >> (8 * i));
    }
    return _PyLong_FromByteArray(bytes, 16, 1, 0); /* little-endian, unsigned */
}

/* --- the tracer ----------------------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *sample, *sink;
    int follows_parent; /* the sampler says (its follows_parent attribute) that a local parent's decision, and a
                           remote one's when sampled, is its answer: then it is not called for those */
} TracerObject;

static PyObject *S_follows_parent;

static int Tracer_init(TracerObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"sample", "sink", NULL};
    PyObject *sample, *sink;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", names, &sample, &sink)) return -1;
    PyObject *follows = NULL;
#if PY_VERSION_HEX >= 0x030D0000
    if (PyObject_GetOptionalAttr(sample, S_follows_parent, &follows) < 0) return -1;
#else
    if (_PyObject_LookupAttr(sample, S_follows_parent, &follows) < 0) return -1;
#endif
    self->follows_parent = follows == NULL ? 0 : PyObject_IsTrue(follows);
    Py_XDECREF(follows);
    if (self->follows_parent < 0) return -1;
    Py_XSETREF(self->sample, Py_NewRef(sample));
    Py_XSETREF(self->sink, Py_NewRef(sink));
    return 0;
}

static int Tracer_traverse(TracerObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->sample);
    Py_VISIT(self->sink);
    return 0;
}

static int Tracer_clear(TracerObject *self) {
    Py_CLEAR(self->sample);
    Py_CLEAR(self->sink);
    return 0;
}

static void Tracer_dealloc(TracerObject *self) {
    PyObject_GC_UnTrack(self);
    Tracer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

#define START_ARGS 7
static PyObject *START_NAMES[START_ARGS]; /* name, kind, attributes, links, parent, use_current, static */

/* A new span, the child of (trace_id, parent_id, tracestate), sampled or not as decided: start_span's last step. All
 * arguments borrowed; ``attributes``, ``links`` and ``statik`` None where not given. */
static PyObject *start_child(TracerObject *self, PyObject *name, int kind, PyObject *attributes, PyObject *links,
                             PyObject *trace_id, PyObject *parent_id, PyObject *tracestate, int sampled,
                             PyObject *statik) {
    PyObject *span_id = random_id(64), *result = NULL;
    if (span_id == NULL) return NULL;
    if (sampled) {
        PyObject *own = attributes == Py_None ? PyDict_New() : Py_NewRef(attributes);
        PyObject *statics = statik == Py_None ? Py_NewRef(Py_None) : PyList_New(1);
        if (own != NULL && statics != NULL) {
            if (statik != Py_None) PyList_SET_ITEM(statics, 0, Py_NewRef(statik));
            result = new_span(trace_id, span_id, 1, tracestate, parent_id, name, kind, own, links, self->sink, 0,
                              statics);
        }
        Py_XDECREF(own);
        Py_XDECREF(statics);
    } else {
        PyObject *own = PyDict_New();
        if (own != NULL)
            result = new_span(trace_id, span_id, 0, tracestate, parent_id, name, kind, own, Py_None, Py_None, 0, Py_None);
        Py_XDECREF(own);
    }
    Py_DECREF(span_id);
    return result;
}

/* start_span's work, its arguments parsed: ``attributes``, ``links``, ``parent`` and ``statik`` may be NULL (not given);
 * all borrowed. */
static PyObject *tracer_start(TracerObject *self, PyObject *name, int kind, PyObject *attributes, PyObject *links,
                              PyObject *given_parent, int use_current, PyObject *statik) {
    if (need_bound() < 0 || need_current() < 0) return NULL;
    if (self->sample == NULL || self->sink == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the tracer was not initialised");
        return NULL;
    }
    if (attributes == NULL) attributes = Py_None;
    if (links == NULL) links = Py_None;
    if (statik == NULL) statik = Py_None;
    PyObject *parent = Py_NewRef(given_parent != NULL ? given_parent : Py_None);
    PyObject *trace_id = NULL, *parent_id = NULL, *tracestate = NULL, *result = NULL;
    if (parent == Py_None && use_current) {
        Py_DECREF(parent);
        if (PyContextVar_Get(CURRENT, Py_None, &parent) < 0) {
            parent = NULL;
            goto done;
        }
    }
    if (parent == Py_None) {
        if ((trace_id = random_id(128)) == NULL) goto done;
        parent_id = Py_NewRef(ZERO);
        tracestate = Py_NewRef(EMPTY);
    } else if (is_span(parent)) {
        SpanObject *p = (SpanObject *)parent;
        trace_id = Py_NewRef(or_none(p->trace_id));
        parent_id = Py_NewRef(or_none(p->span_id));
        tracestate = Py_NewRef(or_none(p->tracestate));
    } else if ((trace_id = PyObject_GetAttrString(parent, "trace_id")) == NULL ||
               (parent_id = PyObject_GetAttrString(parent, "span_id")) == NULL ||
               (tracestate = PyObject_GetAttrString(parent, "tracestate")) == NULL) {
        goto done;
    }
    int sampled;
    if (self->follows_parent && is_span(parent) &&
        (!((SpanObject *)parent)->remote || ((SpanObject *)parent)->sampled)) {
        sampled = ((SpanObject *)parent)->sampled; /* what the parent-based sampler would answer */
    } else {
        PyObject *decide[2] = {parent, trace_id};
        PyObject *decision = PyObject_Vectorcall(self->sample, decide, 2, NULL);
        if (decision == NULL) goto done;
        sampled = PyObject_IsTrue(decision);
        Py_DECREF(decision);
    }
    if (sampled >= 0)
        result = start_child(self, name, kind, attributes, links, trace_id, parent_id, tracestate, sampled, statik);
done:
    Py_XDECREF(parent);
    Py_XDECREF(trace_id);
    Py_XDECREF(parent_id);
    Py_XDECREF(tracestate);
    return result;
}

static PyObject *Tracer_start_span(TracerObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *given[START_ARGS] = {NULL};
    if (nargs > START_ARGS) {
        PyErr_SetString(PyExc_TypeError, "start_span() takes at most 7 arguments");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++) given[i] = args[i];
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < START_ARGS && found < 0; i++)
            if (key == START_NAMES[i]) found = i;
        for (int i = 0; i < START_ARGS && found < 0; i++) {
            int same = PyUnicode_Compare(key, START_NAMES[i]);
            if (same == -1 && PyErr_Occurred()) return NULL;
            if (same == 0) found = i;
        }
        if (found < 0 || given[found] != NULL) {
            PyErr_Format(PyExc_TypeError, "start_span() got an unexpected or repeated argument %R", key);
            return NULL;
        }
        given[found] = args[nargs + k];
    }
    if (given[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "start_span() needs a name");
        return NULL;
    }
    int kind = 1; /* INTERNAL */
    if (given[1] != NULL) {
        kind = (int)PyLong_AsLong(given[1]);
        if (kind == -1 && PyErr_Occurred()) return NULL;
    }
    int use_current = given[5] == NULL ? 1 : PyObject_IsTrue(given[5]);
    if (use_current < 0) return NULL;
    return tracer_start(self, given[0], kind, given[2], given[3], given[4], use_current, given[6]);
}

static PyMethodDef Tracer_methods[] = {
    {"start_span", (PyCFunction)(void (*)(void))Tracer_start_span, METH_FASTCALL | METH_KEYWORDS,
     "start_span(name, kind=INTERNAL, attributes=None, links=None, parent=None, use_current=True, static=None)"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Tracer_members[] = {
    {"sample", T_OBJECT, offsetof(TracerObject, sample), 0, NULL},
    {"sink", T_OBJECT, offsetof(TracerObject, sink), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject TracerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dockyard_core._spans.Tracer",
    .tp_basicsize = sizeof(TracerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A tracer (dockyard_core.tracing.Tracer's base in C).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Tracer_init,
    .tp_dealloc = (destructor)Tracer_dealloc,
    .tp_traverse = (traverseproc)Tracer_traverse,
    .tp_clear = (inquiry)Tracer_clear,
    .tp_methods = Tracer_methods,
    .tp_members = Tracer_members,
};

/* --- a caller's traceparent ------------------------------------------------------------------------ */

/* A hex digit's value, or -1. Upper case too: extract() reads an ASCII traceparent as it is, which is the same as
 * reading it lowered (py_extract lowers it first). */
static int hex_digit(Py_UCS4 c) {
    if (c >= '0' && c <= '9') return (int)(c - '0');
    if (c >= 'a' && c <= 'f') return (int)(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return (int)(c - 'A' + 10);
    return -1;
}

/* The text extract() reads: a str's characters [start, start + n). */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t start, n;
} Text;

static Py_UCS4 text_at(const Text *text, Py_ssize_t i) { return PyUnicode_READ(text->kind, text->data, text->start + i); }

/* The hex digits of text[at, at + count) as a number (count <= 16); -1 when one is not a digit. */
static int hex_field(const Text *text, Py_ssize_t at, int count, uint64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < count; i++) {
        int digit = hex_digit(text_at(text, at + i));
        if (digit < 0) return -1;
        value = value << 4 | (uint64_t)digit;
    }
    *out = value;
    return 0;
}

/* A caller's traceparent as read: its trace id's halves, its span id, its flags. */
typedef struct {
    uint64_t hi, low, span, flags;
} Parent;

/* Reads a W3C traceparent (a str) as tracing.py_extract does: 1 when valid (``out`` filled), 0 when not, -1 on
 * error. */
static int read_traceparent(PyObject *traceparent, Parent *out) {
    PyObject *text = NULL; /* py_extract's traceparent.strip().lower(), where the traceparent is not ASCII */
    Text read;
    if (PyUnicode_Check(traceparent) && PyUnicode_IS_ASCII(traceparent)) {
        /* as it is (what a caller sends): strip's whitespace skipped here, its upper case read as lower by
         * hex_digit; lowering changes nothing else that is checked below (the dashes, a newline) */
        const Py_UCS1 *chars = PyUnicode_1BYTE_DATA(traceparent);
        Py_ssize_t from = 0, to = PyUnicode_GET_LENGTH(traceparent);
        while (from < to && Py_UNICODE_ISSPACE(chars[from])) from++;
        while (to > from && Py_UNICODE_ISSPACE(chars[to - 1])) to--;
        read = (Text){PyUnicode_1BYTE_KIND, chars, from, to - from};
    } else {
        PyObject *stripped = PyObject_CallMethod(traceparent, "strip", NULL);
        if (stripped == NULL) return -1;
        text = PyObject_CallMethod(stripped, "lower", NULL);
        Py_DECREF(stripped);
        if (text == NULL) return -1;
        if (!PyUnicode_Check(text)) {
            PyErr_SetString(PyExc_TypeError, "a traceparent is a str");
            Py_DECREF(text);
            return -1;
        }
        read = (Text){PyUnicode_KIND(text), PyUnicode_DATA(text), 0, PyUnicode_GET_LENGTH(text)};
    }
    int valid = 0;
    Py_ssize_t n = read.n;
    uint64_t version;
    /* version-traceid-parentid-flags, then for a later version "-" and anything on one line */
    if (n < 55 || text_at(&read, 2) != '-' || text_at(&read, 35) != '-' || text_at(&read, 52) != '-' ||
        hex_field(&read, 0, 2, &version) < 0 || hex_field(&read, 3, 16, &out->hi) < 0 ||
        hex_field(&read, 19, 16, &out->low) < 0 || hex_field(&read, 36, 16, &out->span) < 0 ||
        hex_field(&read, 53, 2, &out->flags) < 0)
        goto done;
    if (n > 55) {
        int bad = text_at(&read, 55) != '-';
        for (Py_ssize_t i = 56; i < n && !bad; i++) bad = text_at(&read, i) == '\n';
        if (bad || version == 0) goto done;
    }
    valid = !(version == 0xff || (out->hi == 0 && out->low == 0) || out->span == 0);
done:
    Py_XDECREF(text);
    return valid;
}

/* The trace id of two halves. */
static PyObject *trace_id_of(uint64_t hi, uint64_t low) {
    unsigned char bytes[16];
    for (int i = 0; i < 8; i++) {
        bytes[i] = (unsigned char)(low >> (8 * i));
        bytes[8 + i] = (unsigned char)(hi >> (8 * i));
    }
    return _PyLong_FromByteArray(bytes, 16, 1, 0); /* little-endian, unsigned */
}

/* A caller's tracestate as kept (its first 512 characters; "" when None). */
static PyObject *remote_state(PyObject *tracestate) {
    if (tracestate == NULL || tracestate == Py_None) return Py_NewRef(EMPTY);
    if (!PyUnicode_Check(tracestate)) {
        PyErr_SetString(PyExc_TypeError, "a tracestate is a str");
        return NULL;
    }
    return PyUnicode_Substring(tracestate, 0, 512);
}

/* The remote parent span a valid traceparent (as read) and its tracestate (a str, None or NULL) name. */
static PyObject *remote_parent(const Parent *parent, PyObject *tracestate) {
    PyObject *result = NULL, *trace_id = trace_id_of(parent->hi, parent->low), *span_id = NULL, *state = NULL,
             *attributes = NULL;
    if (trace_id != NULL && (span_id = PyLong_FromUnsignedLongLong(parent->span)) != NULL &&
        (state = remote_state(tracestate)) != NULL && (attributes = PyDict_New()) != NULL)
        result = new_span(trace_id, span_id, (int)(parent->flags & 1), state, ZERO, EMPTY, 2 /* SERVER */, attributes,
                          Py_None, Py_None, 1, Py_None);
    Py_XDECREF(trace_id);
    Py_XDECREF(span_id);
    Py_XDECREF(state);
    Py_XDECREF(attributes);
    return result;
}

/* extract(traceparent, tracestate=None): tracing.py_extract's answer, a remote parent span or None. */
static PyObject *extract(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "extract(traceparent, tracestate=None)");
        return NULL;
    }
    if (need_bound() < 0) return NULL;
    int given = PyObject_IsTrue(args[0]);
    if (given <= 0) return given < 0 ? NULL : Py_NewRef(Py_None);
    Parent parent;
    int valid = read_traceparent(args[0], &parent);
    if (valid <= 0) return valid < 0 ? NULL : Py_NewRef(Py_None);
    return remote_parent(&parent, nargs < 2 ? NULL : args[1]);
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
    if (is_span(span)) {
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
    char scratch_storage[256];
    Buf scratch = BUF_ON(scratch_storage);
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
        char status_storage[128];
        Buf status = BUF_ON(status_storage);
        int failed = 0;
        int has_message = PyObject_IsTrue(f->status_message);
        if (has_message < 0) failed = 1;
        if (!failed && has_message) failed = put_text_field(&status, 2, f->status_message, 1) < 0;
        if (!failed) failed = put_byte(&status, 0x18) < 0 || put_varint(&status, f->status_code) < 0;
        if (!failed) failed = put_field(out, 15, status.data, status.len) < 0;
        buf_free(&status);
        if (failed) goto done;
    }
    rc = 0;
done:
    buf_free(&scratch);
    return rc;
}

static PyObject *span_field(PyObject *module, PyObject *span) {
    int has_links;
    if (is_span(span)) {
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
    char storage[2048]; /* a turn's spans take a few hundred bytes: on the heap only when larger */
    Buf body = BUF_ON(storage);
    int failed = fields_of(span, &fields) < 0 || encode(&body, &fields) < 0;
    fields_release(&fields);
    if (failed) {
        buf_free(&body);
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
    buf_free(&body);
    return result;
}


/* --- the exporter's queue ------------------------------------------------------------------------- */

/* Sink(queue, max_queue, max_batch, wake, full, slow): what a span that ends is handed to, the C form of
 * dockyard_core.otlp.BatchExporter.__call__: a span is appended to ``queue`` (a deque) as it is, for the export
 * thread to encode, ``wake()`` called when it holds a batch; when it is full the span is dropped and ``full()``
 * called; a span the C encoder leaves (links, or not one of this module's) is handed to ``slow(span)`` (the
 * exporter's Python path, which encodes it now). */
typedef struct {
    PyObject_HEAD
    PyObject *queue, *wake, *full, *slow;
    PyObject *append; /* queue.append, looked up once */
    Py_ssize_t max_queue, max_batch;
} SinkObject;

static PyObject *S_append;
static PyObject *span_field(PyObject *module, PyObject *span);

static PyObject *sink_take(PyObject *self_, PyObject *span) {
    SinkObject *self = (SinkObject *)self_;
    if (self->queue == NULL || self->append == NULL || self->wake == NULL || self->full == NULL ||
        self->slow == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the sink was not initialised");
        return NULL;
    }
    Py_ssize_t held = PyObject_Size(self->queue);
    if (held < 0) return NULL;
    if (held >= self->max_queue) return PyObject_CallNoArgs(self->full);
    if (!is_span(span) || ((SpanObject *)span)->links != Py_None)
        return PyObject_CallOneArg(self->slow, span); /* encoded now, in Python (links) */
    /* Held as it is, encoded by the export thread with the rest of its batch (BatchExporter.encoded): in the
     * turn's thread, between the rest of a turn's work, encoding a turn's spans took about 6 us, in a batch about 4
     * (docs/benchmarks.md, "Tracing: the hooks of a turn in C, and spans encoded by the export thread"). An ended
     * span changes no more, and refers to nothing that refers back to it: it and its list of Static blocks leave
     * the garbage collector's lists, so that the hundreds held until their batch goes are not promoted from
     * generation to generation. */
    SpanObject *ended = (SpanObject *)span;
    if (ended->statics != NULL && PyList_CheckExact(ended->statics) && PyObject_GC_IsTracked(ended->statics))
        PyObject_GC_UnTrack(ended->statics);
    if (PyObject_GC_IsTracked(span)) PyObject_GC_UnTrack(span);
    PyObject *done = PyObject_CallOneArg(self->append, span);
    if (done == NULL) return NULL;
    Py_DECREF(done);
    if (held + 1 >= self->max_batch) return PyObject_CallNoArgs(self->wake);
    Py_RETURN_NONE;
}

static PyObject *Sink_call(PyObject *self, PyObject *args, PyObject *kwds) {
    PyObject *span;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "a sink takes one span");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "sink", 1, 1, &span)) return NULL;
    return sink_take(self, span);
}

static int Sink_init(SinkObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"queue", "max_queue", "max_batch", "wake", "full", "slow", NULL};
    PyObject *queue, *wake, *full, *slow;
    Py_ssize_t max_queue, max_batch;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnnOOO", names, &queue, &max_queue, &max_batch, &wake, &full, &slow))
        return -1;
    PyObject *append = PyObject_GetAttr(queue, S_append);
    if (append == NULL) return -1;
    Py_XSETREF(self->append, append);
    Py_XSETREF(self->queue, Py_NewRef(queue));
    Py_XSETREF(self->wake, Py_NewRef(wake));
    Py_XSETREF(self->full, Py_NewRef(full));
    Py_XSETREF(self->slow, Py_NewRef(slow));
    self->max_queue = max_queue;
    self->max_batch = max_batch;
    return 0;
}

static int Sink_traverse(SinkObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->queue);
    Py_VISIT(self->append);
    Py_VISIT(self->wake);
    Py_VISIT(self->full);
    Py_VISIT(self->slow);
    return 0;
}

static int Sink_clear(SinkObject *self) {
    Py_CLEAR(self->queue);
    Py_CLEAR(self->append);
    Py_CLEAR(self->wake);
    Py_CLEAR(self->full);
    Py_CLEAR(self->slow);
    return 0;
}

static void Sink_dealloc(SinkObject *self) {
    PyObject_GC_UnTrack(self);
    Sink_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject SinkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dockyard_core._spans.Sink",
    .tp_basicsize = sizeof(SinkObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Sink(queue, max_queue, max_batch, wake, full, slow): BatchExporter.__call__ in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sink_init,
    .tp_call = Sink_call,
    .tp_dealloc = (destructor)Sink_dealloc,
    .tp_traverse = (traverseproc)Sink_traverse,
    .tp_clear = (inquiry)Sink_clear,
};

/* --- the facade's hooks ---------------------------------------------------------------------------- */

/* Hooks(tracer, python, statics, noop, capture_content): the C form of the hooks of a turn in
 * dockyard_api.runtime.tracing (request, request_done, turn, turn_done, agent, chat, chat_done, inject), which that
 * module binds in place of its Python functions while tracing is on with a C tracer. Each does what its Python form
 * does on the common path and hands any other case to it as it is (``python``: a dict of the Python forms by name):
 * a request with a query, a turn outside a request, a turn with guardrail actions or captured content, a model call
 * that offers tools, a span that is not one of this module's. ``statics``: the module's cached factories of
 * ``Static`` attributes by hook (request, response, turn, agent, chat), called with the same arguments as there.
 * Once ``off`` is set (tracing stopped or another tracer put in use), every call goes to the Python form, which
 * reads the module's tracer of the moment. Why: the hooks' Python frames, dict building and lookups were most of
 * what a traced turn still cost (docs/benchmarks.md, "Tracing: the hooks of a turn in C"). */
enum { H_REQUEST, H_REQUEST_DONE, H_TURN, H_TURN_DONE, H_AGENT, H_CHAT, H_CHAT_DONE, H_INJECT, H_COUNT };
static const char *HOOK_NAMES[H_COUNT] = {"request", "request_done", "turn", "turn_done",
                                          "agent", "chat", "chat_done", "inject"};
enum { F_REQUEST, F_RESPONSE, F_TURN, F_AGENT, F_CHAT, F_COUNT };
static const char *FACTORY_NAMES[F_COUNT] = {"request", "response", "turn", "agent", "chat"};

typedef struct {
    PyObject_HEAD
    TracerObject *tracer;
    PyObject *python[H_COUNT];
    PyObject *factories[F_COUNT];
    PyObject *caches[F_COUNT]; /* per factory: its first argument -> a list of (the other arguments..., Static) */
    PyObject *noop;
    int capture_content;
    char off;
} HooksObject;

#define KIND_SERVER 2
#define KIND_CLIENT 3

static PyObject *S_headers, *S_method, *S_path, *S_scheme, *S_query_string, *S_http, *S_app, *S_namespace,
    *S_conversation, *S_agent, *S_tokens, *S_input, *S_output, *S_tools_used, *S_guardrails, *S_session_id,
    *S_agent_name, *S_input_tokens, *S_output_tokens, *S_dockyard_tools_used, *S_tools, *S_model, *S_max_tokens,
    *S_temperature, *S_top_p, *S_stream, *S_finish_reasons, *S_tool_calls, *S_traceparent_key,
    *EMPTY_TUPLE;

static int Hooks_init(HooksObject *self, PyObject *args, PyObject *kwds) {
    static char *names[] = {"tracer", "python", "statics", "noop", "capture_content", NULL};
    PyObject *tracer, *python, *statics, *noop;
    int capture;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!O!O!Op", names, &TracerType, &tracer, &PyDict_Type, &python,
                                     &PyDict_Type, &statics, &noop, &capture))
        return -1;
    for (int i = 0; i < H_COUNT; i++) {
        PyObject *hook = PyDict_GetItemString(python, HOOK_NAMES[i]);
        if (hook == NULL) {
            PyErr_Format(PyExc_KeyError, "Hooks: no Python form of %s", HOOK_NAMES[i]);
            return -1;
        }
        Py_XSETREF(self->python[i], Py_NewRef(hook));
    }
    for (int i = 0; i < F_COUNT; i++) {
        PyObject *factory = PyDict_GetItemString(statics, FACTORY_NAMES[i]);
        if (factory == NULL) {
            PyErr_Format(PyExc_KeyError, "Hooks: no factory of the %s attributes", FACTORY_NAMES[i]);
            return -1;
        }
        Py_XSETREF(self->factories[i], Py_NewRef(factory));
        PyObject *cache = PyDict_New();
        if (cache == NULL) return -1;
        Py_XSETREF(self->caches[i], cache);
    }
    Py_XSETREF(self->tracer, (TracerObject *)Py_NewRef(tracer));
    Py_XSETREF(self->noop, Py_NewRef(noop));
    self->capture_content = capture;
    self->off = 0;
    return 0;
}

static int Hooks_traverse(HooksObject *self, visitproc visit, void *arg) {
    Py_VISIT(self->tracer);
    for (int i = 0; i < H_COUNT; i++) Py_VISIT(self->python[i]);
    for (int i = 0; i < F_COUNT; i++) Py_VISIT(self->factories[i]);
    for (int i = 0; i < F_COUNT; i++) Py_VISIT(self->caches[i]);
    Py_VISIT(self->noop);
    return 0;
}

static int Hooks_clear(HooksObject *self) {
    Py_CLEAR(self->tracer);
    for (int i = 0; i < H_COUNT; i++) Py_CLEAR(self->python[i]);
    for (int i = 0; i < F_COUNT; i++) Py_CLEAR(self->factories[i]);
    for (int i = 0; i < F_COUNT; i++) Py_CLEAR(self->caches[i]);
    Py_CLEAR(self->noop);
    return 0;
}

static void Hooks_dealloc(HooksObject *self) {
    PyObject_GC_UnTrack(self);
    Hooks_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The Python form of hook ``which`` called with the same arguments. */
static PyObject *python_form(HooksObject *self, int which, PyObject *const *args, Py_ssize_t nargs) {
    if (self->python[which] == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the hooks were not initialised");
        return NULL;
    }
    return PyObject_Vectorcall(self->python[which], args, (size_t)nargs, NULL);
}

/* Whether the C path may run: initialised (its tracer too), on, bound. */
static inline int ready(HooksObject *self) {
    return !self->off && self->tracer != NULL && self->tracer->sample != NULL && self->tracer->sink != NULL &&
           self->noop != NULL && CURRENT != NULL && SPAN_CLASS != NULL;
}

/* The current span (a new reference; None outside any), or NULL on error. */
static PyObject *current_span(void) {
    PyObject *span;
    if (PyContextVar_Get(CURRENT, Py_None, &span) < 0) return NULL;
    return span;
}

#define CACHE_KEYS 4096 /* keys kept per factory: the cache is emptied when it holds more */
#define CACHE_WAYS 16    /* entries kept per key (the oldest dropped) */
/* The argument each factory's answers are kept by: the request's path, the response's route, the turn's
 * environment, the agent's name, the model call's base URL. */
static const int CACHE_KEY[F_COUNT] = {1, 1, 2, 0, 0};

/* factory(*args): the factory's own (lru_cache) answer, kept here by one of its arguments with all of them compared
 * as the lru_cache compares them (==): a dict lookup by a str whose hash is kept, where the factory's cache made,
 * hashed and compared a tuple of them (a float's hash computed each time). */
static PyObject *make_static(HooksObject *self, int which, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *cache = self->caches[which], *key = args[CACHE_KEY[which]];
    PyObject *entries = cache == NULL ? NULL : PyDict_GetItemWithError(cache, key); /* borrowed */
    if (entries == NULL && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL; /* unhashable: the factory tells */
        PyErr_Clear();
        return PyObject_Vectorcall(self->factories[which], args, (size_t)nargs, NULL);
    }
    if (entries != NULL) {
        for (Py_ssize_t e = PyList_GET_SIZE(entries) - 1; e >= 0; e--) {
            PyObject *entry = PyList_GET_ITEM(entries, e);
            int same = 1;
            for (Py_ssize_t i = 0; i < nargs && same > 0; i++) {
                PyObject *kept = PyTuple_GET_ITEM(entry, i);
                same = kept == args[i] ? 1 : PyObject_RichCompareBool(kept, args[i], Py_EQ);
            }
            if (same < 0) return NULL;
            if (same) return Py_NewRef(PyTuple_GET_ITEM(entry, nargs));
        }
    }
    PyObject *statik = PyObject_Vectorcall(self->factories[which], args, (size_t)nargs, NULL);
    if (statik == NULL || cache == NULL) return statik;
    PyObject *entry = PyTuple_New(nargs + 1);
    if (entry == NULL) goto failed;
    for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(entry, i, Py_NewRef(args[i]));
    PyTuple_SET_ITEM(entry, nargs, Py_NewRef(statik));
    if (entries == NULL) {
        if (PyDict_GET_SIZE(cache) >= CACHE_KEYS) PyDict_Clear(cache);
        entries = PyList_New(0);
        int rc = entries == NULL ? -1 : PyDict_SetItem(cache, key, entries);
        Py_XDECREF(entries); /* the dict holds it */
        if (rc < 0) goto failed;
    }
    if (PyList_GET_SIZE(entries) >= CACHE_WAYS && PyList_SetSlice(entries, 0, 1, NULL) < 0) goto failed;
    if (PyList_Append(entries, entry) < 0) goto failed;
    Py_DECREF(entry);
    return statik;
failed:
    Py_XDECREF(entry);
    Py_DECREF(statik);
    return NULL;
}

/* A Static's ``name`` (a new reference). */
static PyObject *static_name(PyObject *statik) { return PyObject_GetAttr(statik, S_name); }

/* request(scope): the request's SERVER span, current from here. */
static PyObject *Hooks_request(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 1 || !ready(self) || !PyDict_CheckExact(args[0])) return python_form(self, H_REQUEST, args, nargs);
    PyObject *scope = args[0];
    PyObject *query = PyDict_GetItemWithError(scope, S_query_string);
    if (query == NULL && PyErr_Occurred()) return NULL;
    if (query != NULL) {
        int has = PyObject_IsTrue(query);
        if (has < 0) return NULL;
        if (has) return python_form(self, H_REQUEST, args, nargs); /* url.query: the names only, in Python */
    }
    PyObject *headers = PyDict_GetItemWithError(scope, S_headers);
    if (headers == NULL && PyErr_Occurred()) return NULL;
    if (headers != NULL && headers != Py_None && !PyList_CheckExact(headers) && !PyTuple_CheckExact(headers))
        return python_form(self, H_REQUEST, args, nargs);
    PyObject *traceparent = NULL, *tracestate = NULL; /* borrowed bytes */
    Py_ssize_t count = headers == NULL || headers == Py_None ? 0 : PySequence_Fast_GET_SIZE(headers);
    PyObject **items = count ? PySequence_Fast_ITEMS(headers) : NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *pair = items[i];
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyBytes_CheckExact(PyTuple_GET_ITEM(pair, 0)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(pair, 1)))
            return python_form(self, H_REQUEST, args, nargs);
        PyObject *name = PyTuple_GET_ITEM(pair, 0);
        Py_ssize_t n = PyBytes_GET_SIZE(name);
        if (n == 11 && memcmp(PyBytes_AS_STRING(name), "traceparent", 11) == 0)
            traceparent = PyTuple_GET_ITEM(pair, 1);
        else if (n == 10 && memcmp(PyBytes_AS_STRING(name), "tracestate", 10) == 0)
            tracestate = PyTuple_GET_ITEM(pair, 1);
    }
    PyObject *method = PyDict_GetItemWithError(scope, S_method);
    PyObject *path = method == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(scope, S_path);
    PyObject *scheme = path == NULL && PyErr_Occurred() ? NULL : PyDict_GetItemWithError(scope, S_scheme);
    if (scheme == NULL && PyErr_Occurred()) return NULL;
    PyObject *key[3] = {method != NULL ? method : EMPTY, path != NULL ? path : EMPTY, scheme != NULL ? scheme : S_http};
    PyObject *parent = NULL, *texts[2] = {NULL, NULL}, *statik = NULL, *span = NULL;
    Parent read;
    int sampled_caller = 0; /* a valid traceparent marked sampled, and a parent-based sampler: no parent span made */
    if (traceparent != NULL && PyBytes_GET_SIZE(traceparent)) {
        texts[0] = PyUnicode_DecodeLatin1(PyBytes_AS_STRING(traceparent), PyBytes_GET_SIZE(traceparent), NULL);
        if (texts[0] == NULL) goto done;
        if (tracestate != NULL) {
            texts[1] = PyUnicode_DecodeLatin1(PyBytes_AS_STRING(tracestate), PyBytes_GET_SIZE(tracestate), NULL);
            if (texts[1] == NULL) goto done;
        }
        int valid = read_traceparent(texts[0], &read);
        if (valid < 0) goto done;
        sampled_caller = valid && (read.flags & 1) && self->tracer->follows_parent;
        if (valid && !sampled_caller && (parent = remote_parent(&read, texts[1])) == NULL) goto done;
    }
    if ((statik = make_static(self, F_REQUEST, key, 3)) == NULL) goto done;
    if (sampled_caller) { /* what tracer_start does with the remote parent extract would make */
        PyObject *trace_id = trace_id_of(read.hi, read.low), *parent_id = NULL, *state = NULL;
        if (trace_id != NULL && (parent_id = PyLong_FromUnsignedLongLong(read.span)) != NULL &&
            (state = remote_state(texts[1])) != NULL)
            span = start_child(self->tracer, key[0], KIND_SERVER, Py_None, Py_None, trace_id, parent_id, state, 1,
                               statik);
        Py_XDECREF(trace_id);
        Py_XDECREF(parent_id);
        Py_XDECREF(state);
    } else {
        span = tracer_start(self->tracer, key[0], KIND_SERVER, NULL, NULL, parent, 0, statik); /* NULL: a root */
    }
    if (span != NULL) {
        PyObject *activated = Span_activate((SpanObject *)span, NULL);
        if (activated == NULL) Py_CLEAR(span);
        Py_XDECREF(activated);
    }
done:
    Py_XDECREF(texts[0]);
    Py_XDECREF(texts[1]);
    Py_XDECREF(parent);
    Py_XDECREF(statik);
    return span;
}

/* request_done(span, route, status): the route's name and attributes, an error from 500 on; the span ends. */
static PyObject *Hooks_request_done(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !ready(self) || !is_span(args[0]) || !PyLong_CheckExact(args[2]))
        return python_form(self, H_REQUEST_DONE, args, nargs);
    SpanObject *span = (SpanObject *)args[0];
    if (span->sink != NULL) {
        PyObject *key[3] = {or_none(span->name), args[1], args[2]};
        PyObject *statik = make_static(self, F_RESPONSE, key, 3);
        if (statik == NULL) return NULL;
        PyObject *name = static_name(statik);
        int failed = name == NULL || statics_append(span, statik) < 0;
        Py_DECREF(statik);
        if (failed) {
            Py_XDECREF(name);
            return NULL;
        }
        Py_XSETREF(span->name, name);
        long status = PyLong_AsLong(args[2]);
        if (status == -1 && PyErr_Occurred()) return NULL;
        if (status >= 500) {
            PyObject *code = PyObject_Str(args[2]);
            PyObject *done = code == NULL ? NULL : Span_set_error(span, code);
            Py_XDECREF(code);
            if (done == NULL) return NULL;
            Py_DECREF(done);
        }
    }
    return Span_finish(span, NULL);
}

/* turn(env, version, session): the request's span gets the turn's attributes and is answered; None when the trace
 * is not sampled; anything else (a turn outside a request, a second one in it) in Python. */
static PyObject *Hooks_turn(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !ready(self)) return python_form(self, H_TURN, args, nargs);
    PyObject *current = current_span();
    if (current == NULL) return NULL;
    if (current == Py_None || !is_span(current)) {
        Py_DECREF(current);
        return python_form(self, H_TURN, args, nargs);
    }
    SpanObject *span = (SpanObject *)current;
    if (!span->sampled) {
        Py_DECREF(current);
        Py_RETURN_NONE;
    }
    int own = span->kind == KIND_SERVER && span->sink != NULL && span->attributes != NULL &&
              PyDict_CheckExact(span->attributes);
    if (own) {
        int has = PyDict_Contains(span->attributes, S_conversation);
        if (has < 0) {
            Py_DECREF(current);
            return NULL;
        }
        own = !has;
    }
    if (!own) {
        Py_DECREF(current);
        return python_form(self, H_TURN, args, nargs);
    }
    PyObject *env = args[0], *key[4] = {NULL, args[1], NULL, NULL}, *statik = NULL;
    if ((key[0] = PyObject_GetAttr(env, S_app)) != NULL && (key[2] = PyObject_GetAttr(env, S_name)) != NULL &&
        (key[3] = PyObject_GetAttr(env, S_namespace)) != NULL)
        statik = make_static(self, F_TURN, key, 4);
    Py_XDECREF(key[0]);
    Py_XDECREF(key[2]);
    Py_XDECREF(key[3]);
    if (statik == NULL || statics_append(span, statik) < 0 || PyDict_SetItem(span->attributes, S_conversation, args[2]) < 0) {
        Py_XDECREF(statik);
        Py_DECREF(current);
        return NULL;
    }
    Py_DECREF(statik);
    return current;
}

/* body[name] (borrowed) or NULL with no error set when it is missing. */
static inline PyObject *item(PyObject *body, PyObject *name) { return PyDict_GetItemWithError(body, name); }

/* turn_done(traced, body, pii, key, message, answer): the answer's attributes on the request's span; with guardrail
 * actions, content to capture, a turn span of its own or any surprise, in Python. */
static PyObject *Hooks_turn_done(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !ready(self) || !is_span(args[0]) || !PyDict_CheckExact(args[1]) ||
        (self->capture_content && args[2] != Py_None))
        return python_form(self, H_TURN_DONE, args, nargs);
    SpanObject *span = (SpanObject *)args[0];
    PyObject *body = args[1];
    PyObject *agent = item(body, S_agent), *tokens = item(body, S_tokens), *tools = item(body, S_tools_used),
             *guardrails = item(body, S_guardrails), *session = item(body, S_session_id);
    if (PyErr_Occurred()) return NULL;
    if (span->kind != KIND_SERVER || agent == NULL || tokens == NULL || tools == NULL || guardrails == NULL ||
        session == NULL || !PyDict_CheckExact(tokens) || (guardrails != Py_None && !PyList_CheckExact(guardrails)) ||
        (guardrails != Py_None && PyList_GET_SIZE(guardrails)))
        return python_form(self, H_TURN_DONE, args, nargs);
    PyObject *tokens_in = item(tokens, S_input), *tokens_out = item(tokens, S_output);
    if (PyErr_Occurred()) return NULL;
    if (tokens_in == NULL || tokens_out == NULL) return python_form(self, H_TURN_DONE, args, nargs);
    int any_tools = PyObject_IsTrue(tools);
    if (any_tools < 0) return NULL;
    if (span->sink == NULL) Py_RETURN_NONE;
    PyObject *attributes = or_none(span->attributes);
    if (!PyDict_CheckExact(attributes)) return python_form(self, H_TURN_DONE, args, nargs);
    if (PyDict_SetItem(attributes, S_agent_name, agent) < 0 || PyDict_SetItem(attributes, S_input_tokens, tokens_in) < 0 ||
        PyDict_SetItem(attributes, S_output_tokens, tokens_out) < 0)
        return NULL;
    if (any_tools) {
        PyObject *names = PySequence_List(tools);
        if (names == NULL) return NULL;
        int rc = PyDict_SetItem(attributes, S_dockyard_tools_used, names);
        Py_DECREF(names);
        if (rc < 0) return NULL;
    }
    Py_RETURN_NONE;
}

/* Whether the trace is one the sampler left out (1), not (0), or the current span is not one of this module's (-2);
 * -1 on error. */
static int left_out(void) {
    PyObject *current = current_span();
    if (current == NULL) return -1;
    int answer = current == Py_None ? 0 : !is_span(current) ? -2 : !((SpanObject *)current)->sampled;
    Py_DECREF(current);
    return answer;
}

/* agent(name, model, session): the invoke_agent span (enter it), the null context when not sampled. */
static PyObject *Hooks_agent(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !ready(self)) return python_form(self, H_AGENT, args, nargs);
    int out = left_out();
    if (out == -2) return python_form(self, H_AGENT, args, nargs);
    if (out < 0) return NULL;
    if (out) return Py_NewRef(self->noop);
    int session = PyObject_IsTrue(args[2]);
    if (session < 0) return NULL;
    PyObject *attributes = NULL;
    if (session) {
        if ((attributes = PyDict_New()) == NULL) return NULL;
        if (PyDict_SetItem(attributes, S_conversation, args[2]) < 0) {
            Py_DECREF(attributes);
            return NULL;
        }
    }
    PyObject *statik = make_static(self, F_AGENT, args, 2), *name = NULL, *span = NULL;
    if (statik != NULL && (name = static_name(statik)) != NULL)
        span = tracer_start(self->tracer, name, 1, attributes, NULL, NULL, 1, statik);
    Py_XDECREF(attributes);
    Py_XDECREF(statik);
    Py_XDECREF(name);
    return span;
}

/* chat(base_url, body, step=0): the model call's CLIENT span (not made current), None when not sampled; a call that
 * offers tools in Python. */
static PyObject *Hooks_chat(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 2 || nargs > 3 || !ready(self) || !PyDict_CheckExact(args[1]))
        return python_form(self, H_CHAT, args, nargs);
    int out = left_out();
    if (out == -2) return python_form(self, H_CHAT, args, nargs);
    if (out < 0) return NULL;
    if (out) Py_RETURN_NONE;
    PyObject *body = args[1];
    PyObject *tools = item(body, S_tools);
    if (tools == NULL && PyErr_Occurred()) return NULL;
    if (tools != NULL) {
        int any = PyObject_IsTrue(tools);
        if (any < 0) return NULL;
        if (any) return python_form(self, H_CHAT, args, nargs);
    }
    PyObject *key[8] = {args[0], item(body, S_model), item(body, S_max_tokens), item(body, S_temperature),
                        item(body, S_top_p), item(body, S_stream), EMPTY_TUPLE, nargs == 3 ? args[2] : ZERO};
    if (PyErr_Occurred()) return NULL;
    for (int i = 1; i < 6; i++)
        if (key[i] == NULL) key[i] = Py_None;
    PyObject *statik = make_static(self, F_CHAT, key, 8), *name = NULL, *span = NULL;
    if (statik != NULL && (name = static_name(statik)) != NULL)
        span = tracer_start(self->tracer, name, KIND_CLIENT, NULL, NULL, NULL, 1, statik);
    Py_XDECREF(statik);
    Py_XDECREF(name);
    return span;
}

/* chat_done(span, tokens_in, tokens_out, finish, calls): the answer's attributes; the span ends. */
static PyObject *Hooks_chat_done(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs == 5 && args[0] == Py_None) Py_RETURN_NONE;
    if (nargs != 5 || !ready(self) || !is_span(args[0])) return python_form(self, H_CHAT_DONE, args, nargs);
    SpanObject *span = (SpanObject *)args[0];
    int finish = PyObject_IsTrue(args[3]), calls = finish < 0 ? -1 : PyObject_IsTrue(args[4]);
    if (calls < 0) return NULL;
    if (span->sink == NULL) Py_RETURN_NONE;
    PyObject *attributes = or_none(span->attributes);
    if (!PyDict_CheckExact(attributes)) return python_form(self, H_CHAT_DONE, args, nargs);
    if (PyDict_SetItem(attributes, S_input_tokens, args[1]) < 0 || PyDict_SetItem(attributes, S_output_tokens, args[2]) < 0)
        return NULL;
    if (finish) {
        PyObject *reasons = PyList_New(1);
        if (reasons == NULL) return NULL;
        PyList_SET_ITEM(reasons, 0, Py_NewRef(args[3]));
        int rc = PyDict_SetItem(attributes, S_finish_reasons, reasons);
        Py_DECREF(reasons);
        if (rc < 0) return NULL;
    }
    if (calls && PyDict_SetItem(attributes, S_tool_calls, args[4]) < 0) return NULL;
    return Span_end(span, NULL);
}

/* inject(headers, span=None): the traceparent (and tracestate) of ``span``, or else of the current span, on an
 * outgoing request. */
static PyObject *Hooks_inject(HooksObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs < 1 || nargs > 2 || !ready(self)) return python_form(self, H_INJECT, args, nargs);
    PyObject *current = nargs == 2 && args[1] != Py_None ? Py_NewRef(args[1]) : current_span();
    if (current == NULL) return NULL;
    if (current == Py_None) {
        Py_DECREF(current);
        Py_RETURN_NONE;
    }
    if (!is_span(current)) {
        Py_DECREF(current);
        return python_form(self, H_INJECT, args, nargs);
    }
    SpanObject *span = (SpanObject *)current;
    PyObject *parent = Span_traceparent(span, NULL);
    int rc = parent == NULL ? -1 : PyObject_SetItem(args[0], S_traceparent_key, parent);
    Py_XDECREF(parent);
    if (rc == 0 && span->tracestate != NULL) {
        int has = PyObject_IsTrue(span->tracestate);
        rc = has < 0 ? -1 : has ? PyObject_SetItem(args[0], S_tracestate, span->tracestate) : 0;
    }
    Py_DECREF(current);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

#define HOOK(name, doc) {#name, (PyCFunction)(void (*)(void))Hooks_##name, METH_FASTCALL, doc}
static PyMethodDef Hooks_methods[] = {
    HOOK(request, "request(scope): dockyard_api.runtime.tracing.request's C form."),
    HOOK(request_done, "request_done(span, route, status)"),
    HOOK(turn, "turn(env, version, session)"),
    HOOK(turn_done, "turn_done(traced, body, pii, key, message, answer)"),
    HOOK(agent, "agent(name, model, session)"),
    HOOK(chat, "chat(base_url, body, step=0)"),
    HOOK(chat_done, "chat_done(span, tokens_in, tokens_out, finish, calls)"),
    HOOK(inject, "inject(headers, span=None)"),
    {NULL, NULL, 0, NULL},
};
#undef HOOK

static PyMemberDef Hooks_members[] = {
    {"off", T_BOOL, offsetof(HooksObject, off), 0, "Every call in Python from now on (tracing stopped or replaced)."},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject HooksType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dockyard_core._spans.Hooks",
    .tp_basicsize = sizeof(HooksObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Hooks(tracer, python, statics, noop, capture_content): the C form of dockyard_api.runtime.tracing's "
              "hooks of a turn.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Hooks_init,
    .tp_dealloc = (destructor)Hooks_dealloc,
    .tp_traverse = (traverseproc)Hooks_traverse,
    .tp_clear = (inquiry)Hooks_clear,
    .tp_methods = Hooks_methods,
    .tp_members = Hooks_members,
};

/* encode_batch(batch): (the batch's spans encoded, bytes kept as they are; the items the C encoder leaves or fails
 * on, for the Python encoder to encode or tell about): BatchExporter.encoded's loop, run in the export thread. */
static PyObject *encode_batch(PyObject *module, PyObject *batch) {
    if (!PyList_Check(batch)) {
        PyErr_SetString(PyExc_TypeError, "encode_batch(list)");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(batch);
    PyObject *encoded = PyList_New(0), *rest = PyList_New(0), *result = NULL;
    if (encoded == NULL || rest == NULL) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(batch) && i < count; i++) {
        PyObject *item = PyList_GET_ITEM(batch, i);
        if (PyBytes_CheckExact(item)) {
            if (PyList_Append(encoded, item) < 0) goto done;
            continue;
        }
        PyObject *one = span_field(NULL, item);
        if (one == NULL) PyErr_Clear(); /* the Python encoder tells why */
        int rc = one == NULL || one == Py_None ? PyList_Append(rest, item) : PyList_Append(encoded, one);
        Py_XDECREF(one);
        if (rc < 0) goto done;
    }
    result = PyTuple_Pack(2, encoded, rest);
done:
    Py_XDECREF(encoded);
    Py_XDECREF(rest);
    return result;
}

static PyMethodDef methods[] = {
    {"encode_batch", encode_batch, METH_O,
     "encode_batch(batch) -> (encoded, rest): the spans encoded (bytes kept), and the items left to Python."},
    {"span", span_field, METH_O,
     "span(span) -> bytes | None: the finished span as field 2 of ScopeSpans (None for a span with links)."},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(current, span_class): the ContextVar of the current span, the class of new spans."},
    {"extract", (PyCFunction)(void (*)(void))extract, METH_FASTCALL,
     "extract(traceparent, tracestate=None): the remote parent a W3C traceparent names (None when absent or not "
     "valid)."},
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
    INTERN(START_NAMES[0], "name")
    INTERN(START_NAMES[1], "kind")
    INTERN(START_NAMES[2], "attributes")
    INTERN(START_NAMES[3], "links")
    INTERN(START_NAMES[4], "parent")
    INTERN(START_NAMES[5], "use_current")
    INTERN(START_NAMES[6], "static")
    INTERN(EMPTY, "")
    INTERN(S_append, "append")
    INTERN(S_follows_parent, "follows_parent")
    INTERN(S_headers, "headers")
    INTERN(S_method, "method")
    INTERN(S_path, "path")
    INTERN(S_scheme, "scheme")
    INTERN(S_query_string, "query_string")
    INTERN(S_http, "http")
    INTERN(S_app, "app")
    INTERN(S_namespace, "namespace")
    INTERN(S_conversation, "gen_ai.conversation.id")
    INTERN(S_agent, "agent")
    INTERN(S_tokens, "tokens")
    INTERN(S_input, "input")
    INTERN(S_output, "output")
    INTERN(S_tools_used, "tools_used")
    INTERN(S_guardrails, "guardrails")
    INTERN(S_session_id, "session_id")
    INTERN(S_agent_name, "gen_ai.agent.name")
    INTERN(S_input_tokens, "gen_ai.usage.input_tokens")
    INTERN(S_output_tokens, "gen_ai.usage.output_tokens")
    INTERN(S_dockyard_tools_used, "dockyard.tools_used")
    INTERN(S_tools, "tools")
    INTERN(S_model, "model")
    INTERN(S_max_tokens, "max_tokens")
    INTERN(S_temperature, "temperature")
    INTERN(S_top_p, "top_p")
    INTERN(S_stream, "stream")
    INTERN(S_finish_reasons, "gen_ai.response.finish_reasons")
    INTERN(S_tool_calls, "dockyard.tool_calls")
    INTERN(S_traceparent_key, "traceparent")
#undef INTERN
    if ((EMPTY_TUPLE = PyTuple_New(0)) == NULL) return NULL;
    if ((ZERO = PyLong_FromLong(0)) == NULL || (SIXTY_FOUR = PyLong_FromLong(64)) == NULL) return NULL;
    if (pthread_atfork(NULL, NULL, rng_forked) != 0) {
        PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed");
        return NULL;
    }
    if (PyType_Ready(&SpanType) < 0 || PyType_Ready(&TracerType) < 0 || PyType_Ready(&SinkType) < 0 ||
        PyType_Ready(&HooksType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    PyTypeObject *types[] = {&SpanType, &TracerType, &SinkType, &HooksType};
    for (int i = 0; i < 4; i++)
        if (PyModule_AddType(m, types[i]) < 0) { /* named by tp_name's last part: Span, Tracer, Sink, Hooks */
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
