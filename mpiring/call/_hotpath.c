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
#define MAX_DEPTH 16     /* agreement lines per rank (mpiring.node.signals.AGREE_DEPTH) */
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

/* run()'s body: an outcome, or -1 with an exception set (an object never initialised). */
static int hot_outcome(HotReplay *self) {
    if (!self->initialised) {
        PyErr_SetString(PyExc_RuntimeError, "HotReplay.run() of an object whose __init__ did not complete");
        return -1;
    }
    void *stream = NULL;
    if (ready(self, &stream) <= 0)
        return FALLBACK;
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
        return LAUNCH_FAILED;
    }
    *self->replayed += 1;
    /* CallCheck.after: the GPU check counts the calls it skipped in MM_COUNT; Python raises
       what it has not raised yet (it knows the count it raised: a changed word suffices). */
    if (self->skipped != NULL) {
        int64_t skipped = load_relaxed(self->skipped);
        if (skipped != self->skipped_seen) {
            self->skipped_seen = skipped;
            return REPLAYED_REPORT;
        }
    }
    return REPLAYED;
}

static PyObject *HotReplay_run(HotReplay *self, PyObject *Py_UNUSED(ignored)) {
    int outcome = hot_outcome(self);
    return outcome < 0 ? NULL : PyLong_FromLong(outcome);
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

/* ---- CallLock: the communicator's lock, which CallTable.run takes without a Python call ----

   Communicator's calls, close() and synchronize() hold its lock, taken without waiting
   (acquire(False): a second thread's call raises ConcurrentCallError). threading.Lock's
   acquire(False) parses its arguments as keywords at every call; this lock is the same
   PyThread lock with a cheap acquire, and CallTable.run takes it directly. */

typedef struct {
    PyObject_HEAD
    PyThread_type_lock lock;
    int held;
} CallLock;

static PyTypeObject CallLockType;

static int lock_try(CallLock *l) {
    if (!PyThread_acquire_lock(l->lock, NOWAIT_LOCK))
        return 0;
    l->held = 1;
    return 1;
}

static void lock_release(CallLock *l) {
    l->held = 0;
    PyThread_release_lock(l->lock);
}

static PyObject *CallLock_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwargs)) {
    CallLock *l = (CallLock *)type->tp_alloc(type, 0);
    if (l == NULL)
        return NULL;
    l->lock = PyThread_allocate_lock();
    if (l->lock == NULL) {
        Py_DECREF(l);
        return PyErr_NoMemory();
    }
    return (PyObject *)l;
}

static void CallLock_dealloc(CallLock *l) {
    if (l->lock != NULL) {
        if (l->held)
            lock_release(l);
        PyThread_free_lock(l->lock);
    }
    Py_TYPE(l)->tp_free((PyObject *)l);
}

static PyObject *lock_acquire(CallLock *l, int blocking) {
    if (lock_try(l))
        Py_RETURN_TRUE;
    if (!blocking)
        Py_RETURN_FALSE;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(l->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
    l->held = 1;
    Py_RETURN_TRUE;
}

static PyObject *CallLock_acquire(CallLock *l, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    Py_ssize_t given = nargs + (kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames));
    if (given > 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) == 1
                      && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "blocking") != 0)) {
        PyErr_SetString(PyExc_TypeError, "CallLock.acquire takes one argument, blocking");
        return NULL;
    }
    int blocking = given == 0 ? 1 : PyObject_IsTrue(args[0]);
    return blocking < 0 ? NULL : lock_acquire(l, blocking);
}

static PyObject *CallLock_release(CallLock *l, PyObject *Py_UNUSED(ignored)) {
    if (!l->held) {
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    lock_release(l);
    Py_RETURN_NONE;
}

static PyObject *CallLock_locked(CallLock *l, PyObject *Py_UNUSED(ignored)) {
    return PyBool_FromLong(l->held);
}

static PyObject *CallLock_enter(CallLock *l, PyObject *Py_UNUSED(ignored)) {
    return lock_acquire(l, 1);
}

static PyObject *CallLock_exit(CallLock *l, PyObject *Py_UNUSED(args)) {
    return CallLock_release(l, NULL);
}

static PyMethodDef CallLock_methods[] = {
    {"acquire", (PyCFunction)(void (*)(void))CallLock_acquire, METH_FASTCALL | METH_KEYWORDS,
     "acquire(blocking=True): True once held; False where blocking is false and it is held elsewhere."},
    {"release", (PyCFunction)CallLock_release, METH_NOARGS, "Release it (RuntimeError if not held)."},
    {"locked", (PyCFunction)CallLock_locked, METH_NOARGS, "Whether it is held."},
    {"__enter__", (PyCFunction)CallLock_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)CallLock_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL}};

static PyTypeObject CallLockType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpiring.call._hotpath.CallLock",
    .tp_doc = PyDoc_STR("A communicator's lock (threading.Lock's acquire/release), taken by CallTable.run in C."),
    .tp_basicsize = sizeof(CallLock),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = CallLock_new,
    .tp_dealloc = (destructor)CallLock_dealloc,
    .tp_methods = CallLock_methods,
};

/* ---- CallTable: the call's key read off its arrays, the lookup, the replay, in one C call ----

   Before a HotReplay runs, Python read the call's key off its arrays (CallKeys.key: the
   pointer, shape, strides and dtype of recvbuf and sendbuf, the op, the algorithm, the
   batches, the collective) and looked its plan up (Dispatcher.planned): about as much host
   time as the whole compiled replay. A CallTable (one per communicator) reads the same
   fields in C and finds the HotReplay of that shape in a table of its own, which Python fills
   (learn) from the plans whose replays it ran, and empties whenever the plans go
   (Dispatcher.clear, the algorithm table's version). Its key is never coarser than Python's:

   - recvbuf and sendbuf must be exactly the array type (CuPy's ndarray); their pointer
     (data.ptr), shape and strides must be ints (at most MAX_DIMS of each), compared by value;
     their dtype by identity;
   - sendbuf None or MPI.IN_PLACE is "in place", as in Python;
   - the collective, op and algorithm by identity, batches None or an int by value.

   Every object compared by identity is held by the entries that name it, so no other object
   can take its address while an entry holds it: equal identities are the same object, equal
   to itself in Python's key. So equal keys here are equal keys there, and the replay found is
   the one Python would find (a shape Python keys alike under two identities, e.g. MPI.SUM and
   "sum", is two entries here). Anything that is no key here (another type, a tensor, a float
   batches, an attribute that raises) is no entry: Python runs the call, and raises what it
   raises. run() takes the communicator's lock as _collective does (the same lock object, its
   acquire(False)), answers None where it did nothing (no entry, the lock busy: Python's
   _collective runs the call) and True where the call is done; what is not a plain replay
   (HotReplay's other outcomes) it hands to Replayer.finish under the lock, as _collective does:
   a False there (the full path must run it: nothing was done) is None here. */

#define MAX_DIMS 8          /* an array's dimensions the table keys (more: Python's key only) */
#define TABLE_SLOTS 8192    /* open addressing (pointers to entries), a power of two */
#define TABLE_ENTRIES 4096  /* entries held (dispatch.PLAN_ENTRIES): a learn beyond drops them all */

/* Every field 8 bytes wide (no padding): keys are compared with memcmp after a memset. */
typedef struct {
    int64_t ptr;
    PyObject *dtype;        /* identity; owned while a key is read, and by an entry */
    int64_t shape_n, strides_n;
    int64_t shape[MAX_DIMS], strides[MAX_DIMS];
} BufferKey;

typedef struct {
    uint64_t hash;
    PyObject *collective, *op, *algorithm; /* identity; borrowed while read, owned by an entry */
    int64_t batches, has_batches;          /* has_batches 0: None */
    int64_t in_place;
    BufferKey recv, send;                  /* send all zero in place */
} CallKey;

typedef struct {
    CallKey key;
    PyObject *replay;       /* the Python Replay (dispatch.Replay): what Replayer.finish takes */
    HotReplay *hot;         /* its compiled form */
} Entry;

typedef struct {
    PyTypeObject *type;     /* the type last read (owned), or NULL */
    unsigned int tag;       /* its tp_version_tag then */
    PyObject *descr;        /* its data descriptor of the name (owned), or NULL: PyObject_GetAttr */
} AttrCache;

typedef struct {
    PyObject_HEAD
    PyObject *array_type;   /* the type keyed (exactly; None: none) */
    PyObject *in_place;     /* MPI.IN_PLACE */
    const int64_t *version; /* the algorithm table's version word (mpiring.algorithms) */
    int64_t learned_version; /* the version the entries were learned at */
    CallLock *lock;         /* the communicator's lock, taken directly; or NULL and: */
    PyObject *acquire, *release; /* another lock's bound methods (threading.Lock) */
    PyObject *finish;       /* Replayer.finish(replay, outcome) -> bool */
    PyObject *keep;         /* owner of the version word */
    Entry **slots;          /* TABLE_SLOTS pointers; an entry is allocated when learned */
    Py_ssize_t entries;
    AttrCache data, ptr, shape, strides, dtype; /* how the key's attributes are read (get_attr) */
} CallTable;

static PyObject *str_data, *str_ptr, *str_shape, *str_strides, *str_dtype;

/* obj.name as PyObject_GetAttr reads it, without its generic lookup where it can: for a type
   whose getattr is the generic one, a data descriptor found on the type wins over anything
   else (PyObject_GenericGetAttr), so its __get__ is called directly. Kept per type, and looked
   up again whenever the type (or a base) is modified: CPython then gives it a new version tag
   (0 while it has none: then every read looks up). */
static PyObject *get_attr(AttrCache *c, PyObject *obj, PyObject *name) {
    PyTypeObject *type = Py_TYPE(obj);
    if (type != c->type || type->tp_version_tag != c->tag || c->tag == 0) {
        Py_CLEAR(c->descr);
        Py_XSETREF(c->type, (PyTypeObject *)Py_NewRef((PyObject *)type));
        PyObject *descr = NULL;
        if (type->tp_getattro == PyObject_GenericGetAttr) {
            descr = _PyType_Lookup(type, name); /* borrowed; gives the type a version tag */
            if (descr != NULL && (Py_TYPE(descr)->tp_descr_get == NULL || Py_TYPE(descr)->tp_descr_set == NULL))
                descr = NULL; /* not a data descriptor: the instance's dict may hold the name */
        }
        c->descr = Py_XNewRef(descr);
        c->tag = type->tp_version_tag;
    }
    if (c->descr != NULL)
        return Py_TYPE(c->descr)->tp_descr_get(c->descr, obj, (PyObject *)type);
    return PyObject_GetAttr(obj, name);
}

static void clear_attr(AttrCache *c) {
    Py_CLEAR(c->type);
    Py_CLEAR(c->descr);
    c->tag = 0;
}

static uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
}

/* An exact int that fits int64 (1), or none (0, no exception left). */
static int int64_of(PyObject *obj, int64_t *out) {
    if (!PyLong_CheckExact(obj))
        return 0;
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    *out = value;
    return 1;
}

/* A tuple of at most MAX_DIMS exact ints (1), or not (0). */
static int dims_of(PyObject *obj, int64_t *out, int64_t *n) {
    if (obj == NULL || !PyTuple_CheckExact(obj) || PyTuple_GET_SIZE(obj) > MAX_DIMS)
        return 0;
    *n = PyTuple_GET_SIZE(obj);
    for (Py_ssize_t i = 0; i < *n; i++)
        if (!int64_of(PyTuple_GET_ITEM(obj, i), &out[i]))
            return 0;
    return 1;
}

/* What CallKeys.key reads off one array: 1 keyed (key->dtype owned), 0 not (no exception left:
   Python reads it again and raises there), -1 an exception that is no Exception (e.g.
   KeyboardInterrupt, raised by Python code a getter ran): it propagates. */
static int read_buffer(CallTable *t, PyObject *buf, BufferKey *key) {
    if ((PyObject *)Py_TYPE(buf) != t->array_type)
        return 0;
    PyObject *data = get_attr(&t->data, buf, str_data);
    PyObject *ptr = data == NULL ? NULL : get_attr(&t->ptr, data, str_ptr);
    Py_XDECREF(data);
    int ok = ptr != NULL && int64_of(ptr, &key->ptr);
    Py_XDECREF(ptr);
    if (ok) {
        PyObject *shape = get_attr(&t->shape, buf, str_shape);
        ok = dims_of(shape, key->shape, &key->shape_n);
        Py_XDECREF(shape);
    }
    if (ok) {
        PyObject *strides = get_attr(&t->strides, buf, str_strides);
        ok = dims_of(strides, key->strides, &key->strides_n);
        Py_XDECREF(strides);
    }
    if (ok) {
        key->dtype = get_attr(&t->dtype, buf, str_dtype);
        ok = key->dtype != NULL;
    }
    if (!ok && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_Exception))
            return -1;
        PyErr_Clear(); /* Python reads it again, and raises there */
    }
    return ok;
}

static void release_key(CallKey *key) {
    Py_CLEAR(key->recv.dtype);
    Py_CLEAR(key->send.dtype);
}

static uint64_t hash_buffer(uint64_t h, const BufferKey *b) {
    h = mix(mix(mix(h, (uint64_t)b->ptr), (uint64_t)(uintptr_t)b->dtype), (uint64_t)b->shape_n);
    for (int64_t i = 0; i < b->shape_n; i++)
        h = mix(h, (uint64_t)b->shape[i]);
    for (int64_t i = 0; i < b->strides_n; i++)
        h = mix(h, (uint64_t)b->strides[i]);
    return h;
}

/* The key of a call (collective, sendbuf, recvbuf, op, algorithm, batches): 1, with the dtypes
   owned (release_key), or 0: no key (nothing owned, no exception left), or -1 (read_buffer). */
static int read_call(CallTable *t, PyObject *const *args, CallKey *key) {
    memset(key, 0, sizeof(*key));
    PyObject *send = args[1], *algorithm = args[4], *batches = args[5];
    if (!(algorithm == Py_None || PyUnicode_CheckExact(algorithm)))
        return 0;
    if (batches != Py_None) {
        if (!int64_of(batches, &key->batches))
            return 0;
        key->has_batches = 1;
    }
    key->collective = args[0];
    key->op = args[3];
    key->algorithm = algorithm;
    int read = read_buffer(t, args[2], &key->recv);
    if (read <= 0)
        return read;
    key->in_place = send == Py_None || send == t->in_place;
    if (!key->in_place && (read = read_buffer(t, send, &key->send)) <= 0) {
        release_key(key);
        return read;
    }
    uint64_t h = mix(mix(mix(0, (uint64_t)(uintptr_t)key->collective), (uint64_t)(uintptr_t)key->op),
                     (uint64_t)(uintptr_t)key->algorithm);
    h = mix(mix(mix(h, (uint64_t)key->batches), (uint64_t)key->has_batches), (uint64_t)key->in_place);
    key->hash = hash_buffer(hash_buffer(h, &key->recv), &key->send);
    return 1;
}

/* The slot holding ``key``'s entry, or the empty slot where it would go. */
static Entry **slot_of(CallTable *t, const CallKey *key) {
    size_t mask = TABLE_SLOTS - 1;
    for (size_t i = (size_t)key->hash & mask;; i = (i + 1) & mask) {
        Entry *e = t->slots[i];
        if (e == NULL || (e->key.hash == key->hash && memcmp(&e->key, key, sizeof(*key)) == 0))
            return &t->slots[i];
    }
}

static void empty_slot(CallTable *t, Entry **slot) {
    /* Emptied before the references go: a finalizer they run finds the table consistent. */
    Entry *gone = *slot;
    *slot = NULL;
    t->entries--;
    Py_XDECREF(gone->key.collective);
    Py_XDECREF(gone->key.op);
    Py_XDECREF(gone->key.algorithm);
    Py_XDECREF(gone->key.recv.dtype);
    Py_XDECREF(gone->key.send.dtype);
    Py_XDECREF(gone->replay);
    Py_XDECREF((PyObject *)gone->hot);
    PyMem_Free(gone);
}

static void clear_entries(CallTable *t) {
    if (t->slots == NULL)
        return;
    for (size_t i = 0; i < TABLE_SLOTS && t->entries > 0; i++)
        if (t->slots[i] != NULL)
            empty_slot(t, &t->slots[i]);
}

static int CallTable_traverse(CallTable *t, visitproc visit, void *arg) {
    Py_VISIT(t->array_type);
    Py_VISIT(t->in_place);
    Py_VISIT((PyObject *)t->lock);
    Py_VISIT(t->acquire);
    Py_VISIT(t->release);
    Py_VISIT(t->finish);
    Py_VISIT(t->keep);
    AttrCache *caches[] = {&t->data, &t->ptr, &t->shape, &t->strides, &t->dtype};
    for (size_t i = 0; i < sizeof(caches) / sizeof(caches[0]); i++) {
        Py_VISIT((PyObject *)caches[i]->type);
        Py_VISIT(caches[i]->descr);
    }
    if (t->slots != NULL)
        for (size_t i = 0; i < TABLE_SLOTS; i++) {
            Entry *e = t->slots[i];
            if (e == NULL)
                continue;
            Py_VISIT(e->key.collective);
            Py_VISIT(e->key.op);
            Py_VISIT(e->key.algorithm);
            Py_VISIT(e->key.recv.dtype);
            Py_VISIT(e->key.send.dtype);
            Py_VISIT(e->replay);
            Py_VISIT((PyObject *)e->hot);
        }
    return 0;
}

static int CallTable_clear_refs(CallTable *t) {
    clear_entries(t);
    Py_CLEAR(t->array_type);
    Py_CLEAR(t->in_place);
    Py_CLEAR(t->lock);
    Py_CLEAR(t->acquire);
    Py_CLEAR(t->release);
    Py_CLEAR(t->finish);
    Py_CLEAR(t->keep);
    AttrCache *caches[] = {&t->data, &t->ptr, &t->shape, &t->strides, &t->dtype};
    for (size_t i = 0; i < sizeof(caches) / sizeof(caches[0]); i++)
        clear_attr(caches[i]);
    return 0;
}

static void CallTable_dealloc(CallTable *t) {
    PyObject_GC_UnTrack(t);
    CallTable_clear_refs(t);
    PyMem_Free(t->slots);
    t->slots = NULL;
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static int CallTable_init(CallTable *t, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"array_type", "in_place", "version", "lock", "finish", "keep", NULL};
    PyObject *array_type, *in_place, *lock, *finish, *keep;
    unsigned long long version;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOKOOO", names, &array_type, &in_place, &version, &lock,
                                     &finish, &keep))
        return -1;
    if (checked_word("version", (void *)(uintptr_t)version))
        return -1;
    if (array_type != Py_None && !PyType_Check(array_type)) {
        PyErr_SetString(PyExc_TypeError, "CallTable: array_type must be a type or None");
        return -1;
    }
    if (!PyCallable_Check(finish)) {
        PyErr_SetString(PyExc_TypeError, "CallTable: finish must be callable");
        return -1;
    }
    PyObject *acquire = NULL, *release = NULL;
    if (!Py_IS_TYPE(lock, &CallLockType)) {
        acquire = PyObject_GetAttrString(lock, "acquire");
        release = acquire == NULL ? NULL : PyObject_GetAttrString(lock, "release");
        if (release == NULL) {
            Py_XDECREF(acquire);
            return -1;
        }
    }
    if (t->slots == NULL) {
        t->slots = PyMem_Calloc(TABLE_SLOTS, sizeof(Entry *));
        if (t->slots == NULL) {
            Py_XDECREF(acquire);
            Py_XDECREF(release);
            PyErr_NoMemory();
            return -1;
        }
    }
    clear_entries(t);
    Py_XSETREF(t->array_type, Py_NewRef(array_type));
    Py_XSETREF(t->in_place, Py_NewRef(in_place));
    Py_XSETREF(t->lock, Py_IS_TYPE(lock, &CallLockType) ? (CallLock *)Py_NewRef(lock) : NULL);
    Py_XSETREF(t->acquire, acquire);
    Py_XSETREF(t->release, release);
    Py_XSETREF(t->finish, Py_NewRef(finish));
    Py_XSETREF(t->keep, Py_NewRef(keep));
    t->version = (const int64_t *)(uintptr_t)version;
    t->learned_version = *t->version;
    return 0;
}

static int table_ready(CallTable *t) {
    if (t->slots == NULL || (t->lock == NULL && t->acquire == NULL)) {
        PyErr_SetString(PyExc_RuntimeError, "CallTable used before its __init__ completed");
        return 0;
    }
    return 1;
}

/* The entry of the call's shape, or NULL: none (no key, or none learned), or an exception set
   (read_call's -1). Drops every entry where the algorithm table changed since they were learned. */
static Entry *lookup(CallTable *t, PyObject *const *args) {
    if (t->entries == 0)
        return NULL;
    if (*t->version != t->learned_version) {
        clear_entries(t);
        return NULL;
    }
    CallKey key;
    if (read_call(t, args, &key) <= 0)
        return NULL;
    Entry *e = *slot_of(t, &key);
    release_key(&key);
    return e;
}

/* Under the lock: True (done), None (nothing done), NULL (raised). */
static PyObject *locked_run(CallTable *t, PyObject *const *args) {
    Entry *e = lookup(t, args);
    if (e == NULL)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    /* Held across the run: a callback it makes (capturing, the current stream) may clear the table. */
    PyObject *replay = Py_NewRef(e->replay);
    HotReplay *hot = (HotReplay *)Py_NewRef((PyObject *)e->hot);
    int outcome = hot_outcome(hot);
    PyObject *result = NULL;
    if (outcome == REPLAYED) {
        result = Py_NewRef(Py_True);
    } else if (outcome >= 0) { /* Replayer.finish, as _collective calls it */
        PyObject *code = PyLong_FromLong(outcome);
        PyObject *done = code == NULL ? NULL : PyObject_CallFunctionObjArgs(t->finish, replay, code, NULL);
        Py_XDECREF(code);
        int truth = done == NULL ? -1 : PyObject_IsTrue(done);
        Py_XDECREF(done);
        if (truth >= 0)
            result = Py_NewRef(truth ? Py_True : Py_None);
    }
    Py_DECREF(replay);
    Py_DECREF((PyObject *)hot);
    return result;
}

static PyObject *CallTable_run(CallTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "CallTable.run takes (collective, sendbuf, recvbuf, op, algorithm, "
                                      "batches), got %zd arguments", nargs);
        return NULL;
    }
    if (!table_ready(t))
        return NULL;
    if (t->entries == 0) /* nothing learned yet: no lock, no key */
        Py_RETURN_NONE;
    if (t->lock != NULL) { /* the CallLock, directly: no Python call on the way */
        if (!lock_try(t->lock)) /* another thread's call: _collective raises ConcurrentCallError */
            Py_RETURN_NONE;
        PyObject *result = locked_run(t, args);
        lock_release(t->lock);
        return result;
    }
    PyObject *stack[2] = {NULL, Py_False}; /* lock.acquire(False), as _collective */
    PyObject *got = PyObject_Vectorcall(t->acquire, stack + 1, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    if (got == NULL)
        return NULL;
    int locked = got == Py_True;
    Py_DECREF(got);
    if (!locked) /* another thread's call: _collective raises ConcurrentCallError */
        Py_RETURN_NONE;
    PyObject *result = locked_run(t, args);
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *raised = result == NULL ? PyErr_GetRaisedException() : NULL;
#else
    PyObject *type = NULL, *value = NULL, *trace = NULL;
    if (result == NULL)
        PyErr_Fetch(&type, &value, &trace);
#endif
    PyObject *released = PyObject_CallNoArgs(t->release);
    if (released == NULL) { /* (never: the lock is held) the release's error wins */
        Py_XDECREF(result);
#if PY_VERSION_HEX >= 0x030C0000
        Py_XDECREF(raised);
#else
        Py_XDECREF(type), Py_XDECREF(value), Py_XDECREF(trace);
#endif
        return NULL;
    }
    Py_DECREF(released);
#if PY_VERSION_HEX >= 0x030C0000
    if (raised != NULL)
        PyErr_SetRaisedException(raised);
#else
    if (result == NULL)
        PyErr_Restore(type, value, trace);
#endif
    return result;
}

static PyObject *CallTable_learn(CallTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "CallTable.learn takes (collective, sendbuf, recvbuf, op, algorithm, "
                                      "batches, replay, hot), got %zd arguments", nargs);
        return NULL;
    }
    if (!table_ready(t))
        return NULL;
    if (!Py_IS_TYPE(args[7], &HotReplayType)) {
        PyErr_SetString(PyExc_TypeError, "CallTable.learn: hot must be a HotReplay");
        return NULL;
    }
    CallKey key;
    int read = read_call(t, args, &key);
    if (read <= 0)
        return read < 0 ? NULL : Py_NewRef(Py_False);
    if (*t->version != t->learned_version || t->entries >= TABLE_ENTRIES) {
        clear_entries(t);
        t->learned_version = *t->version;
    }
    Entry **slot = slot_of(t, &key);
    Entry *e = *slot;
    if (e != NULL) { /* (a shape learned again: the same replay, or its plan's new one) */
        PyObject *replay = e->replay, *hot = (PyObject *)e->hot;
        e->replay = Py_NewRef(args[6]);
        e->hot = (HotReplay *)Py_NewRef(args[7]);
        release_key(&key);
        Py_DECREF(replay); /* (last: a finalizer may empty the table) */
        Py_DECREF(hot);
        Py_RETURN_TRUE;
    }
    e = PyMem_Malloc(sizeof(Entry));
    if (e == NULL) {
        release_key(&key);
        return PyErr_NoMemory();
    }
    e->key = key; /* the dtypes' references move into the entry */
    Py_INCREF(key.collective);
    Py_INCREF(key.op);
    Py_INCREF(key.algorithm);
    e->replay = Py_NewRef(args[6]);
    e->hot = (HotReplay *)Py_NewRef(args[7]);
    *slot = e;
    t->entries++;
    Py_RETURN_TRUE;
}

static PyObject *CallTable_find(CallTable *t, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "CallTable.find takes (collective, sendbuf, recvbuf, op, algorithm, "
                                      "batches), got %zd arguments", nargs);
        return NULL;
    }
    if (!table_ready(t))
        return NULL;
    Entry *e = lookup(t, args);
    if (e == NULL && PyErr_Occurred())
        return NULL;
    return Py_NewRef(e == NULL ? Py_None : e->replay);
}

static PyObject *CallTable_clear(CallTable *t, PyObject *Py_UNUSED(ignored)) {
    clear_entries(t);
    Py_RETURN_NONE;
}

static Py_ssize_t CallTable_len(CallTable *t) {
    return t->entries;
}

static PyObject *CallTable_get_array_type(CallTable *t, void *Py_UNUSED(closure)) {
    return Py_NewRef(t->array_type == NULL ? Py_None : t->array_type);
}

static int CallTable_set_array_type(CallTable *t, PyObject *value, void *Py_UNUSED(closure)) {
    if (value == NULL || (value != Py_None && !PyType_Check(value))) {
        PyErr_SetString(PyExc_TypeError, "CallTable.array_type must be a type or None");
        return -1;
    }
    clear_entries(t); /* learned under the old type */
    Py_XSETREF(t->array_type, Py_NewRef(value));
    return 0;
}

static PyMethodDef CallTable_methods[] = {
    {"run", (PyCFunction)(void (*)(void))CallTable_run, METH_FASTCALL,
     "run(collective, sendbuf, recvbuf, op, algorithm, batches): the call replayed (True), or "
     "None: nothing done, _collective runs it."},
    {"learn", (PyCFunction)(void (*)(void))CallTable_learn, METH_FASTCALL,
     "learn(collective, sendbuf, recvbuf, op, algorithm, batches, replay, hot): hold the replay "
     "Python found for this call's shape; False where the call has no key here."},
    {"find", (PyCFunction)(void (*)(void))CallTable_find, METH_FASTCALL,
     "find(collective, sendbuf, recvbuf, op, algorithm, batches): the replay held for this "
     "call's shape, or None (tests)."},
    {"clear", (PyCFunction)CallTable_clear, METH_NOARGS, "Drop every entry."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef CallTable_getset[] = {
    {"array_type", (getter)CallTable_get_array_type, (setter)CallTable_set_array_type,
     "The array type keyed (exactly); setting it drops every entry.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods CallTable_sequence = {.sq_length = (lenfunc)CallTable_len};

static PyTypeObject CallTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mpiring.call._hotpath.CallTable",
    .tp_doc = PyDoc_STR("A communicator's compiled key, lookup and replay of its calls (mpiring.call.hot_replay)."),
    .tp_basicsize = sizeof(CallTable),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)CallTable_init,
    .tp_dealloc = (destructor)CallTable_dealloc,
    .tp_traverse = (traverseproc)CallTable_traverse,
    .tp_clear = (inquiry)CallTable_clear_refs,
    .tp_methods = CallTable_methods,
    .tp_getset = CallTable_getset,
    .tp_as_sequence = &CallTable_sequence,
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
    if (PyType_Ready(&HotReplayType) < 0 || PyType_Ready(&CallTableType) < 0 || PyType_Ready(&CallLockType) < 0)
        return NULL;
    struct { PyObject **name; const char *text; } interned[] = {
        {&str_data, "data"}, {&str_ptr, "ptr"}, {&str_shape, "shape"}, {&str_strides, "strides"},
        {&str_dtype, "dtype"}};
    for (size_t i = 0; i < sizeof(interned) / sizeof(interned[0]); i++)
        if (*interned[i].name == NULL && (*interned[i].name = PyUnicode_InternFromString(interned[i].text)) == NULL)
            return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "HotReplay", (PyObject *)&HotReplayType) < 0
        || PyModule_AddObjectRef(m, "CallTable", (PyObject *)&CallTableType) < 0
        || PyModule_AddObjectRef(m, "CallLock", (PyObject *)&CallLockType) < 0
        || PyModule_AddIntConstant(m, "MAX_DIMS", MAX_DIMS) < 0
        || PyModule_AddIntConstant(m, "TABLE_ENTRIES", TABLE_ENTRIES) < 0
        || PyModule_AddIntConstant(m, "FALLBACK", FALLBACK) < 0
        || PyModule_AddIntConstant(m, "REPLAYED", REPLAYED) < 0
        || PyModule_AddIntConstant(m, "REPLAYED_REPORT", REPLAYED_REPORT) < 0
        || PyModule_AddIntConstant(m, "LAUNCH_FAILED", LAUNCH_FAILED) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
