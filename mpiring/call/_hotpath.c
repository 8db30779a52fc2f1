/* The compiled eager replay (mpiring.call.hot_replay): one HotReplay per bound replay.

   A call of a shape seen before is replayed (mpiring/call/replay.py); in Python that is some
   forty function calls (the health checks, the agreement check's post, the stream order, the
   launch, the skipped-call report). A HotReplay holds every address those steps touch, fixed
   when the replay is bound, and does the common case in one C call, HotReplay.run():

     1. health: the communicator's REFUSING word (failed or closed), the GPU status block's
        STATE word, the watchdog's FAILED word, every node peer's FAILED counter on the control
        board;  a capture begun since (the replay's ``capturing``, where it has one);
     2. the agreement check's post: does line k % D still wait for the slowest rank?
     3. the stream order: is CuPy's current stream the one the latest call ran on?
   Everything so far only reads (but for refreshing the all-posted count that step 2 keeps, as
   AgreementCheck._wait_all does). Anything unusual answers FALLBACK with nothing done, and the
   Python replay (mpiring.call.hot_replay.Replayer.python, the reference) runs the call: it
   raises the failure, waits for the slowest rank, or orders the streams, exactly as before.
     4. commit: write the descriptor line, release-store the count (the post), launch with
        one cuLaunchKernel through a function pointer, count the replay;
     5. the skipped-call report: has the GPU check skipped calls since the last look?

   run() returns one of the small ints below (cached by CPython: nothing is allocated).
   Plain C against Python.h (the GPU nodes have gcc and Python's headers, nothing else);
   built by setup.py (optional) or tools/build_hotpath.py. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* run()'s outcomes (mirrored by mpiring.call.hot_replay, which checks them at import). */
enum {
    FALLBACK = 0,        /* nothing done: run the Python replay */
    REPLAYED = 1,        /* posted, launched, counted: done */
    REPLAYED_REPORT = 2, /* done, and the GPU check skipped calls since: raise its report */
    LAUNCH_FAILED = 3    /* posted, then cuLaunchKernel failed (launch_status says how) */
};

#define MAX_PEERS 512    /* node ranks whose FAILED words are read (a GPU node has at most 8) */
#define MAX_DEPTH 8      /* agreement lines per rank (mpiring.node.signals.AGREE: 4) */
#define MAX_LINE_WORDS 16 /* a descriptor line: AGREE_LINES * COUNTER_STRIDE int64 words */

/* cuLaunchKernel's signature (cuda.h), with CUfunction and CUstream as plain pointers. */
typedef int (*launch_kernel_t)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                               unsigned block_x, unsigned block_y, unsigned block_z,
                               unsigned shared_bytes, void *stream, void **params, void **extra);

typedef struct {
    PyObject_HEAD
    int initialised;               /* __init__ completed: run() may read the words below */
    /* 1. health: words read at every call (nonzero: fall back) */
    const int64_t *refusing;       /* the communicator failed or closed */
    const int64_t *gpu_state;      /* status block STATE (kernels write it over PCIe); NULL: none */
    const int64_t *watchdog_failed; /* the watchdog recorded an error; NULL: none */
    const int64_t *peer_failed[MAX_PEERS]; /* other node ranks' FAILED counters */
    Py_ssize_t peers;
    PyObject *capturing;           /* callable -> bool, or NULL: a capture changes nothing */
    /* 2. the agreement post (posts == 0: the replay posts nothing) */
    int posts;
    int64_t *progress;             /* AgreementCheck's words: [0] calls entered, [1] all posted */
    int64_t *lines[MAX_DEPTH];     /* this rank's descriptor line of check k at lines[k % depth] */
    Py_ssize_t depth;
    int64_t line[MAX_LINE_WORDS];  /* the descriptor this replay posts */
    Py_ssize_t line_words;
    int64_t *count;                /* this rank's CALLS counter on the board */
    const int64_t *all_counts[MAX_PEERS]; /* every board rank's CALLS counter (this one's too) */
    Py_ssize_t ranks;
    /* 3. the stream order */
    PyObject *current_stream;      /* callable -> CuPy's current stream object */
    PyObject *stream_order;        /* list [latest call's stream object, its handle (int)] */
    /* 4. the launch */
    launch_kernel_t launch;
    void *function;
    unsigned grid, block;
    void **params;
    int64_t *replayed;             /* the communicator's count of replayed calls */
    int launch_status;             /* the CUresult of the launch that failed */
    /* 5. the skipped-call report */
    const int64_t *skipped;        /* status block MM_COUNT; NULL: the GPU check is not on */
    int64_t skipped_seen;          /* MM_COUNT when this replay last handed it to Python */
    PyObject *keep;                /* owners of the memory above (arrays, the bound launch) */
} HotReplay;

static int64_t load_relaxed(const int64_t *word) {
    return __atomic_load_n(word, __ATOMIC_RELAXED);
}

/* A word's address from a Python int (0 -> NULL). */
static int address_of(PyObject *obj, void **out) {
    unsigned long long value = PyLong_AsUnsignedLongLong(obj);
    if (value == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *out = (void *)(uintptr_t)value;
    return 0;
}

static int checked_word(const char *what, void *address) {
    if (address == NULL || ((uintptr_t)address % 8) != 0) {
        PyErr_Format(PyExc_ValueError, "HotReplay: %s must be the address of an aligned int64 word", what);
        return -1;
    }
    return 0;
}

/* Up to MAX_PEERS aligned int64 words' addresses from a sequence of Python ints. */
static int addresses(const char *what, PyObject *given, const int64_t **words, Py_ssize_t *n) {
    PyObject *seq = PySequence_Fast(given, "HotReplay: expected a sequence of addresses");
    if (seq == NULL)
        return -1;
    *n = PySequence_Fast_GET_SIZE(seq);
    int ok = 0;
    if (*n > MAX_PEERS) {
        PyErr_Format(PyExc_ValueError, "HotReplay: %zd words of %s, at most %d", *n, what, MAX_PEERS);
        ok = -1;
    }
    for (Py_ssize_t i = 0; ok == 0 && i < *n; i++) {
        void *word;
        if (address_of(PySequence_Fast_GET_ITEM(seq, i), &word) || checked_word(what, word))
            ok = -1;
        else
            words[i] = (const int64_t *)word;
    }
    Py_DECREF(seq);
    return ok;
}

static void HotReplay_dealloc(HotReplay *self) {
    Py_XDECREF(self->capturing);
    Py_XDECREF(self->current_stream);
    Py_XDECREF(self->stream_order);
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int HotReplay_init(HotReplay *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"refusing", "gpu_state", "watchdog_failed", "peer_failed", "capturing",
                            "progress", "lines", "line", "count", "all_counts", "current_stream", "stream_order",
                            "launch", "function", "grid", "block", "params", "replayed", "skipped",
                            "keep", NULL};
    unsigned long long refusing, gpu_state, watchdog_failed, progress, count, launch, function,
        params, replayed, skipped;
    unsigned int grid, block;
    PyObject *peer_failed, *capturing, *lines, *all_counts, *current_stream, *stream_order, *keep;
    Py_buffer line;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKKOOKOy*KOOOKKIIKKKO", names, &refusing, &gpu_state,
                                     &watchdog_failed, &peer_failed, &capturing, &progress, &lines, &line,
                                     &count, &all_counts, &current_stream, &stream_order, &launch, &function, &grid,
                                     &block, &params, &replayed, &skipped, &keep))
        return -1;
    int ok = -1;
    self->initialised = 0;
    self->refusing = (const int64_t *)(uintptr_t)refusing;
    self->gpu_state = (const int64_t *)(uintptr_t)gpu_state;
    self->watchdog_failed = (const int64_t *)(uintptr_t)watchdog_failed;
    self->progress = (int64_t *)(uintptr_t)progress;
    self->count = (int64_t *)(uintptr_t)count;
    self->function = (void *)(uintptr_t)function;
    self->params = (void **)(uintptr_t)params;
    self->replayed = (int64_t *)(uintptr_t)replayed;
    self->skipped = (const int64_t *)(uintptr_t)skipped;
    self->skipped_seen = -1; /* the first replay hands any count to Python, which knows what it raised */
    self->grid = grid;
    self->block = block;
    self->launch = (launch_kernel_t)(uintptr_t)launch;
    if (checked_word("refusing", (void *)self->refusing) || checked_word("replayed", self->replayed))
        goto done;
    if ((gpu_state && checked_word("gpu_state", (void *)self->gpu_state))
        || (watchdog_failed && checked_word("watchdog_failed", (void *)self->watchdog_failed))
        || (skipped && checked_word("skipped", (void *)self->skipped)))
        goto done;
    if (self->launch == NULL || self->params == NULL || grid == 0 || block == 0) {
        PyErr_SetString(PyExc_ValueError, "HotReplay: launch, params, grid and block must be nonzero");
        goto done;
    }
    if (addresses("peer_failed", peer_failed, self->peer_failed, &self->peers) < 0)
        goto done;
    /* the agreement post: the line, where it goes, the count that announces it */
    self->posts = line.len > 0;
    if (self->posts) {
        if (line.len % 8 != 0 || line.len > (Py_ssize_t)sizeof(self->line)) {
            PyErr_Format(PyExc_ValueError, "HotReplay: line of %zd bytes: whole int64 words, at most %zu bytes",
                         line.len, sizeof(self->line));
            goto done;
        }
        memcpy(self->line, line.buf, (size_t)line.len);
        self->line_words = line.len / 8;
        if (checked_word("progress", self->progress) || checked_word("count", self->count))
            goto done;
        PyObject *slots = PySequence_Fast(lines, "HotReplay: lines must be a sequence of addresses");
        if (slots == NULL)
            goto done;
        self->depth = PySequence_Fast_GET_SIZE(slots);
        if (self->depth < 1 || self->depth > MAX_DEPTH) {
            PyErr_Format(PyExc_ValueError, "HotReplay: %zd agreement lines, 1 to %d", self->depth, MAX_DEPTH);
            Py_DECREF(slots);
            goto done;
        }
        for (Py_ssize_t i = 0; i < self->depth; i++) {
            void *word;
            if (address_of(PySequence_Fast_GET_ITEM(slots, i), &word) || checked_word("lines", word)) {
                Py_DECREF(slots);
                goto done;
            }
            self->lines[i] = (int64_t *)word;
        }
        Py_DECREF(slots);
        if (addresses("all_counts", all_counts, self->all_counts, &self->ranks) < 0)
            goto done;
    }
    if (!PyCallable_Check(current_stream) || !PyList_Check(stream_order) || PyList_GET_SIZE(stream_order) != 2) {
        PyErr_SetString(PyExc_TypeError, "HotReplay: current_stream must be callable and stream_order "
                                         "a list [stream, handle]");
        goto done;
    }
    if (capturing != Py_None && !PyCallable_Check(capturing)) {
        PyErr_SetString(PyExc_TypeError, "HotReplay: capturing must be callable or None");
        goto done;
    }
    Py_XSETREF(self->capturing, capturing == Py_None ? NULL : Py_NewRef(capturing));
    Py_XSETREF(self->current_stream, Py_NewRef(current_stream));
    Py_XSETREF(self->stream_order, Py_NewRef(stream_order));
    Py_XSETREF(self->keep, Py_NewRef(keep));
    self->initialised = 1;
    ok = 0;
done:
    PyBuffer_Release(&line);
    return ok;
}

/* Steps 1-3: whether the call can be replayed here without Python (reads only). 1: yes,
   0: no (fall back), -1: an error that is not the call's (none today; kept for the API). */
static int ready(HotReplay *self, void **stream) {
    if (load_relaxed(self->refusing))
        return 0;
    /* A capture begun since may pick another row: the full path decides (Replayer.python). */
    if (self->capturing != NULL) {
        PyObject *capturing = PyObject_CallNoArgs(self->capturing);
        if (capturing == NULL) {
            PyErr_Clear(); /* the Python replay asks again, and raises there */
            return 0;
        }
        int truth = PyObject_IsTrue(capturing);
        Py_DECREF(capturing);
        if (truth != 0) {
            PyErr_Clear();
            return 0;
        }
    }
    /* What GpuBackend.failure() and ControlBoard.peer_error() read: any nonzero word means the
       Python replay must build and raise the error (and mark the communicator failed). */
    if ((self->gpu_state != NULL && load_relaxed(self->gpu_state))
        || (self->watchdog_failed != NULL && load_relaxed(self->watchdog_failed)))
        return 0;
    for (Py_ssize_t i = 0; i < self->peers; i++)
        if (load_relaxed(self->peer_failed[i]))
            return 0;
    /* AgreementCheck._store: line k % D is free once every rank posted k - D + 1; until the
       rank last saw that, Python waits (bounded) for the slowest rank. */
    if (self->posts) {
        int64_t last_use = self->progress[0] + 1 - (int64_t)self->depth + 1;
        if (self->progress[1] < last_use) {
            /* _wait_all's first look, which most often finds every rank there: the least count,
               acquired (the line write below must not move before these reads), kept as
               AgreementCheck keeps it (ahead, later looks skip). Short of it: Python waits. */
            int64_t least = INT64_MAX;
            for (Py_ssize_t i = 0; i < self->ranks; i++) {
                int64_t seen = __atomic_load_n(self->all_counts[i], __ATOMIC_ACQUIRE);
                least = seen < least ? seen : least;
            }
            if (least < last_use)
                return 0;
            self->progress[1] = least;
        }
    }
    /* GpuBackend.ordered_stream: a call on another stream than the latest call's first makes
       it wait for that one (events, in Python). The list holds the latest stream, so an equal
       identity is that very stream, never a new object at a recycled address. */
    PyObject *current = PyObject_CallNoArgs(self->current_stream);
    if (current == NULL) {
        PyErr_Clear(); /* the Python replay reads it again, and raises there */
        return 0;
    }
    PyObject *order = self->stream_order;
    int same = PyList_GET_SIZE(order) == 2 && PyList_GET_ITEM(order, 0) == current;
    Py_DECREF(current);
    if (!same)
        return 0;
    *stream = PyLong_AsVoidPtr(PyList_GET_ITEM(order, 1));
    if (*stream == NULL && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static PyObject *HotReplay_run(HotReplay *self, PyObject *Py_UNUSED(ignored)) {
    if (!self->initialised) {
        PyErr_SetString(PyExc_RuntimeError, "HotReplay.run() of an object whose __init__ did not complete");
        return NULL;
    }
    void *stream = NULL;
    if (ready(self, &stream) <= 0)
        return PyLong_FromLong(FALLBACK);
    if (self->posts) {
        /* AgreementCheck.post, for check k: the descriptor into this rank's line k % D, then k
           into its CALLS counter. Inter-process ordering rule: the peers (other processes on
           this node) read the count, fence, then read the line, so the line's words must be
           visible before the count: a release store (Python: MPI_Win_sync, then a plain store). */
        int64_t k = self->progress[0] + 1;
        self->progress[0] = k; /* this rank's own bookkeeping: the calls it entered */
        int64_t *slot = self->lines[k % self->depth];
        for (Py_ssize_t i = 0; i < self->line_words; i++)
            __atomic_store_n(&slot[i], self->line[i], __ATOMIC_RELAXED);
        __atomic_store_n(self->count, k, __ATOMIC_RELEASE);
    }
    int status;
    Py_BEGIN_ALLOW_THREADS /* as CuPy's launchKernel: the watchdog thread may run meanwhile */
    status = self->launch(self->function, self->grid, 1, 1, self->block, 1, 1, 0, stream, self->params, NULL);
    Py_END_ALLOW_THREADS
    if (status != 0) {
        self->launch_status = status;
        return PyLong_FromLong(LAUNCH_FAILED);
    }
    *self->replayed += 1;
    /* CallCheck.after: the GPU check counts the calls it skipped in MM_COUNT; Python raises
       what it has not raised yet (it knows the count it raised: a changed word suffices). */
    if (self->skipped != NULL) {
        int64_t skipped = load_relaxed(self->skipped);
        if (skipped != self->skipped_seen) {
            self->skipped_seen = skipped;
            return PyLong_FromLong(REPLAYED_REPORT);
        }
    }
    return PyLong_FromLong(REPLAYED);
}

static PyObject *HotReplay_get_launch_status(HotReplay *self, void *Py_UNUSED(closure)) {
    return PyLong_FromLong(self->launch_status);
}

static PyObject *HotReplay_get_posts(HotReplay *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->posts);
}

static PyMethodDef HotReplay_methods[] = {
    {"run", (PyCFunction)HotReplay_run, METH_NOARGS,
     "Replay the call: an outcome (FALLBACK: nothing done, REPLAYED, REPLAYED_REPORT, LAUNCH_FAILED)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef HotReplay_getset[] = {
    {"launch_status", (getter)HotReplay_get_launch_status, NULL,
     "The CUresult of the latest launch that failed (0: none failed).", NULL},
    {"posts", (getter)HotReplay_get_posts, NULL, "Whether the replay posts the agreement check.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject HotReplayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpiring.call._hotpath.HotReplay",
    .tp_doc = PyDoc_STR("One bound replay, compiled: every address fixed once (mpiring.call.hot_replay)."),
    .tp_basicsize = sizeof(HotReplay),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)HotReplay_init,
    .tp_dealloc = (destructor)HotReplay_dealloc,
    .tp_methods = HotReplay_methods,
    .tp_getset = HotReplay_getset,
};

/* The address of the driver's cuLaunchKernel, from the libcuda.so.1 the process loaded (CuPy's). */
static PyObject *cuda_launch_address(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (library == NULL) {
        PyErr_Format(PyExc_OSError, "the compiled replay cannot load libcuda.so.1: %s", dlerror());
        return NULL;
    }
    void *symbol = dlsym(library, "cuLaunchKernel"); /* the library stays loaded: CuPy holds it too */
    if (symbol == NULL) {
        PyErr_Format(PyExc_OSError, "libcuda.so.1 has no cuLaunchKernel: %s", dlerror());
        return NULL;
    }
    return PyLong_FromVoidPtr(symbol);
}

/* A launch that does nothing and succeeds: the floor of a replay, for benchmarks without a GPU. */
static int noop_launch(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                       unsigned block_y, unsigned block_z, unsigned shared_bytes, void *stream, void **params,
                       void **extra) {
    (void)function, (void)grid_x, (void)grid_y, (void)grid_z, (void)block_x, (void)block_y, (void)block_z;
    (void)shared_bytes, (void)stream, (void)params, (void)extra;
    return 0;
}

static PyObject *noop_launch_address(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored)) {
    launch_kernel_t launch = noop_launch;
    return PyLong_FromVoidPtr((void *)(uintptr_t)launch);
}

static PyMethodDef module_methods[] = {
    {"cuda_launch_address", cuda_launch_address, METH_NOARGS,
     "The address of cuLaunchKernel in libcuda.so.1 (OSError where there is no driver)."},
    {"noop_launch_address", noop_launch_address, METH_NOARGS,
     "The address of a launch that does nothing and answers success (benchmarks: tools/replay_bench.py)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_hotpath",
    "The compiled eager replay of mpiring.call.hot_replay (see _hotpath.c).", -1, module_methods,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__hotpath(void) {
    if (PyType_Ready(&HotReplayType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "HotReplay", (PyObject *)&HotReplayType) < 0
        || PyModule_AddIntConstant(m, "FALLBACK", FALLBACK) < 0
        || PyModule_AddIntConstant(m, "REPLAYED", REPLAYED) < 0
        || PyModule_AddIntConstant(m, "REPLAYED_REPORT", REPLAYED_REPORT) < 0
        || PyModule_AddIntConstant(m, "LAUNCH_FAILED", LAUNCH_FAILED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
