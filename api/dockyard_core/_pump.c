/* The file data of a chunk upload, from the socket to the chunk's file without the GIL (dockyard_core._pump).
 *
 * dockyard_api.server.RawBody reads the rest of an upload's body in a thread of its own. In Python every read of
 * it took the GIL back four to five times (the socket's poll and recv, the delimiter search, the write, the
 * writeback hint), each time against the event loop's thread and the other uploads' readers. pump() does the
 * same reads and writes in one call that holds no GIL while the body is plain file data: it returns to Python
 * only with a read that Python must take (one that holds the multipart delimiter or the start of one at its end,
 * or more bytes than the chunk may still take), at the end of the body, or when the client is gone or silent.
 * What it writes is exactly what dockyard_api.public.imports.chunks.ChunkUpload._take_raw would write (tests
 * compare the two).
 *
 * Optional, like _spans.c: where it was not built, the reads go through Python as before. */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum { DONE = 0, PIECE = 1, CLOSED = 2, SILENT = 3, SOCKET_ERROR = 4, WRITE_ERROR = 5 };

/* Whether the piece holds no delimiter and does not end with the start of one: then it is file data as it is. */
static int plain(const char *piece, Py_ssize_t n, const char *delimiter, Py_ssize_t k) {
    if (k == 0) return 0;
    if (memmem(piece, (size_t)n, delimiter, (size_t)k) != NULL) return 0;
    Py_ssize_t from = n - k + 1 > 0 ? n - k + 1 : 0; /* a start of the delimiter cut by the piece's end */
    for (Py_ssize_t at = from; at < n; at++) {
        if (piece[at] == delimiter[0] && memcmp(piece + at, delimiter, (size_t)(n - at)) == 0) return 0;
    }
    return 1;
}

/* Write all n bytes at the file's current end; 0 or an errno. */
static int write_all(int fd, const char *data, Py_ssize_t n) {
    while (n > 0) {
        ssize_t done = write(fd, data, (size_t)n);
        if (done < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        data += done;
        n -= done;
    }
    return 0;
}

/* One read of the socket into buffer (at most want bytes): > 0 bytes read, or -status. */
static Py_ssize_t receive(int sock, char *buffer, Py_ssize_t want, int timeout_ms, int *error) {
    for (;;) {
        ssize_t got = recv(sock, buffer, (size_t)want, 0);
        if (got > 0) return got;
        if (got == 0) return -CLOSED;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            *error = errno;
            return -SOCKET_ERROR;
        }
        struct pollfd ready = {.fd = sock, .events = POLLIN};
        int polled = poll(&ready, 1, timeout_ms);
        if (polled == 0) return -SILENT;
        if (polled < 0 && errno != EINTR) {
            *error = errno;
            return -SOCKET_ERROR;
        }
    }
}

static PyObject *pump(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "pump(sock, buffer, left, file, offset, room, delimiter, advise, timeout_ms) takes 9 arguments");
        return NULL;
    }
    int sock = (int)PyLong_AsLong(args[0]);
    Py_ssize_t left = PyLong_AsSsize_t(args[2]);
    int file = (int)PyLong_AsLong(args[3]);
    long long offset = PyLong_AsLongLong(args[4]);
    Py_ssize_t room = PyLong_AsSsize_t(args[5]);
    int advise = PyObject_IsTrue(args[7]);
    int timeout_ms = (int)PyLong_AsLong(args[8]);
    if (PyErr_Occurred()) return NULL;
    Py_buffer buffer, delimiter;
    if (PyObject_GetBuffer(args[1], &buffer, PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[6], &delimiter, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buffer);
        return NULL;
    }
    int status = DONE, error = 0;
    Py_ssize_t piece = 0, written = 0;
    char *data = buffer.buf;
    Py_BEGIN_ALLOW_THREADS
    while (left > 0) {
        Py_ssize_t got = receive(sock, data, left < buffer.len ? left : buffer.len, timeout_ms, &error);
        if (got < 0) {
            status = (int)-got;
            break;
        }
        left -= got;
        if (got > room - written || !plain(data, got, delimiter.buf, delimiter.len)) {
            status = PIECE; /* Python takes it: the parser, or the chunk's limit */
            piece = got;
            break;
        }
        error = write_all(file, data, got);
        if (error) {
            status = WRITE_ERROR;
            break;
        }
        if (advise) posix_fadvise(file, (off_t)(offset + written), (off_t)got, POSIX_FADV_DONTNEED);
        written += got;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&delimiter);
    PyBuffer_Release(&buffer);
    return Py_BuildValue("(innni)", status, left, piece, written, error);
}

static PyObject *is_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "plain(piece, delimiter) takes two arguments");
        return NULL;
    }
    Py_buffer piece, delimiter;
    if (PyObject_GetBuffer(args[0], &piece, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(args[1], &delimiter, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&piece);
        return NULL;
    }
    int answer = plain(piece.buf, piece.len, delimiter.buf, delimiter.len);
    PyBuffer_Release(&delimiter);
    PyBuffer_Release(&piece);
    return PyBool_FromLong(answer);
}

static PyMethodDef methods[] = {
    {"pump", (PyCFunction)(void (*)(void))pump, METH_FASTCALL,
     "pump(sock, buffer, left, file, offset, room, delimiter, advise, timeout_ms) -> (status, left, piece, written, "
     "errno): read the socket into buffer and append every read that is plain file data to file, without the GIL."},
    {"plain", (PyCFunction)(void (*)(void))is_plain, METH_FASTCALL,
     "plain(piece, delimiter) -> bool: no delimiter in piece, and no start of one at its end (pump's test)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pump", "A chunk upload's file data from the socket to the file without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__pump(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DONE", DONE) < 0 || PyModule_AddIntConstant(m, "PIECE", PIECE) < 0 ||
        PyModule_AddIntConstant(m, "CLOSED", CLOSED) < 0 || PyModule_AddIntConstant(m, "SILENT", SILENT) < 0 ||
        PyModule_AddIntConstant(m, "SOCKET_ERROR", SOCKET_ERROR) < 0 ||
        PyModule_AddIntConstant(m, "WRITE_ERROR", WRITE_ERROR) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
