/* The compiled stream-program executor (mpiring.cuda.streamprog): one C call issues a whole
   program of device operations, where Python would make one binding call per operation.

   A program is an int64 array of records of WIDTH fields (mpiring/cuda/streamprog.py says what
   each field holds): [op, stream, a_base, a, b_base, b, c, d]. Addresses are
   buffers[base] + offset with buffers = {0, input, output}; flag values rounds[base] + offset
   with rounds = {0, scatter, gather}: the only things a call supplies.

   Executor(...) holds the driver's entry points (function pointers: the driver's from
   libcuda.so.1, driver_functions(), or a test's recorders), the wait and write flags, and a
   fold's fixed launch arguments; Executor.run(records, input, output, scatter, gather,
   function, me, ranks, itemsize) issues every record in order and returns None, or
   (index, CUresult) of the first operation that failed (none after it is issued), or
   (index, MALFORMED) for a record it cannot read (checked before anything is issued).

   Plain C against Python.h, as mpiring/call/_hotpath.c; built by setup.py (optional) or
   tools/build_hotpath.py. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

enum { WIDTH = 8 };
enum { OP, STREAM, A_BASE, A, B_BASE, B, C, D };
enum { WAIT = 1, WRITE = 2, COPY = 3, FOLD = 4 };
enum { MALFORMED = -1 };

/* cuda.h's signatures, with CUstream and CUfunction as plain pointers, CUdeviceptr as uint64. */
typedef int (*wait_value_t)(void *stream, uint64_t addr, uint64_t value, unsigned flags);
typedef int (*memcpy_async_t)(uint64_t dst, uint64_t src, size_t bytes, void *stream);
typedef int (*launch_kernel_t)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                               unsigned block_x, unsigned block_y, unsigned block_z,
                               unsigned shared_bytes, void *stream, void **params, void **extra);

typedef struct {
    PyObject_HEAD
    int initialised;
    wait_value_t wait, write; /* cuStreamWaitValue64, cuStreamWriteValue64 */
    memcpy_async_t copy;      /* cuMemcpyAsync */
    launch_kernel_t launch;   /* cuLaunchKernel */
    unsigned wait_flags, write_flags;
    unsigned threads, max_blocks;   /* a fold's block size and its most blocks */
    uint64_t abort, status;         /* a fold's last two arguments */
} Executor;

static int Executor_init(Executor *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"wait", "write", "copy", "launch", "wait_flags", "write_flags", "threads",
                            "max_blocks", "abort", "status", NULL};
    unsigned long long wait, write, copy, launch, abort, status;
    unsigned wait_flags, write_flags, threads, max_blocks;
    self->initialised = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKKKIIIIKK", names, &wait, &write, &copy, &launch,
                                     &wait_flags, &write_flags, &threads, &max_blocks, &abort, &status))
        return -1;
    if (!wait || !write || !copy || !launch || !threads || !max_blocks) {
        PyErr_SetString(PyExc_ValueError, "Executor: the driver functions, threads and max_blocks must be nonzero");
        return -1;
    }
    self->wait = (wait_value_t)(uintptr_t)wait;
    self->write = (wait_value_t)(uintptr_t)write;
    self->copy = (memcpy_async_t)(uintptr_t)copy;
    self->launch = (launch_kernel_t)(uintptr_t)launch;
    self->wait_flags = wait_flags;
    self->write_flags = write_flags;
    self->threads = threads;
    self->max_blocks = max_blocks;
    self->abort = abort;
    self->status = status;
    self->initialised = 1;
    return 0;
}

/* Every record readable: a known op, bases 0..2, no negative size, no wait for a value <= 0
   (the schedule issues none: a device wait takes an unsigned value). -1: all good, else the
   index of the first bad record. */
static Py_ssize_t first_malformed(const int64_t *r, Py_ssize_t n, int64_t scatter, int64_t gather) {
    const int64_t rounds[3] = {0, scatter, gather};
    for (Py_ssize_t i = 0; i < n; i++, r += WIDTH) {
        int64_t op = r[OP];
        if (op < WAIT || op > FOLD || r[A_BASE] < 0 || r[A_BASE] > 2 || r[B_BASE] < 0 || r[B_BASE] > 2)
            return i;
        if (op == WAIT && rounds[r[B_BASE]] + r[B] <= 0)
            return i;
        if ((op == COPY || op == FOLD) && (r[C] < 0 || r[D] < 0))
            return i;
    }
    return -1;
}

static PyObject *Executor_run(Executor *self, PyObject *args) {
    Py_buffer records;
    unsigned long long input, output, function;
    long long scatter, gather;
    int me, ranks;
    unsigned itemsize;
    if (!self->initialised) {
        PyErr_SetString(PyExc_RuntimeError, "Executor.run() of an object whose __init__ did not complete");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*KKLLKiiI", &records, &input, &output, &scatter, &gather, &function, &me,
                          &ranks, &itemsize))
        return NULL;
    if (records.len % (Py_ssize_t)(WIDTH * sizeof(int64_t)) != 0 || itemsize == 0 || itemsize > 16) {
        PyErr_Format(PyExc_ValueError, "Executor.run: %zd bytes of records (whole records of %d int64 "
                     "fields), items of %u bytes", records.len, WIDTH, itemsize);
        PyBuffer_Release(&records);
        return NULL;
    }
    const int64_t *r = (const int64_t *)records.buf;
    Py_ssize_t n = records.len / (Py_ssize_t)(WIDTH * sizeof(int64_t));
    Py_ssize_t bad = first_malformed(r, n, scatter, gather);
    if (bad >= 0) {
        PyBuffer_Release(&records);
        return Py_BuildValue("(ni)", bad, MALFORMED);
    }
    const uint64_t buffers[3] = {0, input, output};
    const int64_t rounds[3] = {0, scatter, gather};
    /* fold_n's parameters (mpiring.cuda.streamprog.FOLD_PARAMS): the driver copies the values
       when cuLaunchKernel returns, so one set of slots serves every fold. */
    uint64_t out = 0, mine = 0, table = 0, abort = self->abort, status = self->status;
    int32_t me32 = me, ranks32 = ranks, vectorized = 0;
    int64_t count = 0;
    void *params[9] = {&out, &mine, &table, &me32, &ranks32, &count, &vectorized, &abort, &status};
    Py_ssize_t failed = -1;
    int result = 0;
    Py_BEGIN_ALLOW_THREADS /* as the Python path's driver calls: the watchdog thread may run meanwhile */
    /* In the records' order: the issue order that cannot deadlock (AllToAllPlan.issue_order). */
    for (Py_ssize_t i = 0; i < n; i++, r += WIDTH) {
        void *stream = (void *)(uintptr_t)r[STREAM];
        switch (r[OP]) {
        case WAIT:
            result = self->wait(stream, (uint64_t)r[A], (uint64_t)(rounds[r[B_BASE]] + r[B]), self->wait_flags);
            break;
        case WRITE:
            result = self->write(stream, (uint64_t)r[A], (uint64_t)(rounds[r[B_BASE]] + r[B]), self->write_flags);
            break;
        case COPY:
            result = self->copy(buffers[r[A_BASE]] + (uint64_t)r[A], buffers[r[B_BASE]] + (uint64_t)r[B],
                                (size_t)r[C], stream);
            break;
        default: { /* FOLD: nothing to launch for no elements (as the Python device) */
            count = r[D];
            if (count == 0)
                break;
            out = buffers[r[A_BASE]] + (uint64_t)r[A];
            mine = buffers[r[B_BASE]] + (uint64_t)r[B];
            table = (uint64_t)r[C];
            /* streamprog.fold_grid: 16-byte loads where both addresses allow them */
            vectorized = ((out | mine) % 16) == 0;
            int64_t per_block = (int64_t)self->threads * (vectorized ? 16 / itemsize : 1);
            int64_t blocks = (count + per_block - 1) / per_block;
            if (blocks > (int64_t)self->max_blocks)
                blocks = self->max_blocks;
            result = self->launch((void *)(uintptr_t)function, (unsigned)blocks, 1, 1, self->threads, 1, 1, 0,
                                  stream, params, NULL);
        }
        }
        if (result != 0) {
            failed = i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&records);
    if (failed >= 0)
        return Py_BuildValue("(ni)", failed, result);
    Py_RETURN_NONE;
}

static PyMethodDef Executor_methods[] = {
    {"run", (PyCFunction)Executor_run, METH_VARARGS,
     "run(records, input, output, scatter, gather, function, me, ranks, itemsize): issue every record; "
     "None, or (index, code) of the first failure."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ExecutorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpiring.cuda._streamprog.Executor",
    .tp_doc = PyDoc_STR("Issues stream programs through driver function pointers (mpiring.cuda.streamprog)."),
    .tp_basicsize = sizeof(Executor),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Executor_init,
    .tp_methods = Executor_methods,
};

/* The driver's entry points, from the libcuda.so.1 the process loaded (CuPy's): the _v2 stream
   memory operations where the driver has them (what cuda.h names cuStreamWaitValue64 since
   CUDA 12), else the first ones. */
static PyObject *driver_functions(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    static const char *wanted[][3] = {{"cuStreamWaitValue64", "cuStreamWaitValue64_v2", "cuStreamWaitValue64"},
                                      {"cuStreamWriteValue64", "cuStreamWriteValue64_v2", "cuStreamWriteValue64"},
                                      {"cuMemcpyAsync", "cuMemcpyAsync", "cuMemcpyAsync"},
                                      {"cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel"}};
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (library == NULL) {
        PyErr_Format(PyExc_OSError, "the compiled stream programs cannot load libcuda.so.1: %s", dlerror());
        return NULL;
    }
    PyObject *found = PyDict_New();
    if (found == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(wanted) / sizeof(wanted[0]); i++) {
        void *symbol = dlsym(library, wanted[i][1]);
        if (symbol == NULL)
            symbol = dlsym(library, wanted[i][2]);
        if (symbol == NULL) {
            PyErr_Format(PyExc_OSError, "libcuda.so.1 has no %s", wanted[i][0]);
            Py_DECREF(found);
            return NULL;
        }
        PyObject *address = PyLong_FromVoidPtr(symbol);
        if (address == NULL || PyDict_SetItemString(found, wanted[i][0], address) < 0) {
            Py_XDECREF(address);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(address);
    }
    return found; /* the library stays loaded: CuPy holds it too */
}

static int noop_wait(void *stream, uint64_t addr, uint64_t value, unsigned flags) {
    (void)stream, (void)addr, (void)value, (void)flags;
    return 0;
}

static int noop_copy(uint64_t dst, uint64_t src, size_t bytes, void *stream) {
    (void)dst, (void)src, (void)bytes, (void)stream;
    return 0;
}

static int noop_launch(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                       unsigned block_y, unsigned block_z, unsigned shared_bytes, void *stream, void **params,
                       void **extra) {
    (void)function, (void)grid_x, (void)grid_y, (void)grid_z, (void)block_x, (void)block_y, (void)block_z;
    (void)shared_bytes, (void)stream, (void)params, (void)extra;
    return 0;
}

/* Entry points that do nothing and succeed: the floor of a program, for benchmarks without a GPU. */
static PyObject *noop_functions(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    wait_value_t wait = noop_wait;
    memcpy_async_t copy = noop_copy;
    launch_kernel_t launch = noop_launch;
    return Py_BuildValue("{sNsNsNsN}", "cuStreamWaitValue64", PyLong_FromVoidPtr((void *)(uintptr_t)wait),
                         "cuStreamWriteValue64", PyLong_FromVoidPtr((void *)(uintptr_t)wait),
                         "cuMemcpyAsync", PyLong_FromVoidPtr((void *)(uintptr_t)copy),
                         "cuLaunchKernel", PyLong_FromVoidPtr((void *)(uintptr_t)launch));
}

static PyMethodDef module_methods[] = {
    {"driver_functions", driver_functions, METH_NOARGS,
     "The driver's entry points by name, from libcuda.so.1 (OSError where there is no driver)."},
    {"noop_functions", noop_functions, METH_NOARGS,
     "Entry points that do nothing and answer success, by the same names (benchmarks without a GPU)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_streamprog",
    "The compiled stream-program executor of mpiring.cuda.streamprog (see _streamprog.c).", -1, module_methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__streamprog(void) {
    if (PyType_Ready(&ExecutorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Executor", (PyObject *)&ExecutorType) < 0
        || PyModule_AddIntConstant(m, "WIDTH", WIDTH) < 0 || PyModule_AddIntConstant(m, "WAIT", WAIT) < 0
        || PyModule_AddIntConstant(m, "WRITE", WRITE) < 0 || PyModule_AddIntConstant(m, "COPY", COPY) < 0
        || PyModule_AddIntConstant(m, "FOLD", FOLD) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
