/* The floor of a replayed call (tools.enqueue's "kernel alone" rows): the same kernel, grid and
   parameters as a bound launch (mpiring.cuda.launcher.BoundLaunch), launched on one stream with
   one cuLaunchKernel call through a function pointer, nothing of mpiring around it.

   Launch(launch, function, grid, block, stream, params, keep): addresses as ints (launch: a
   function with cuLaunchKernel's signature, e.g. the driver's from
   mpiring.call.hot_replay.compiled().cuda_launch_address(), or a test's ctypes callback;
   params: the kernelParams pointer array; stream 0 is the default stream), keep: any object
   kept alive with it (the owner of params). run() launches once; a nonzero CUresult raises
   RuntimeError naming it.

   Plain C against Python.h, as mpiring/call/_hotpath.c; built at run time into a temporary
   folder by tools/launch_floor.py (tools.build_hotpath.build): not part of the package. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* cuLaunchKernel's signature (cuda.h), with CUfunction and CUstream as plain pointers. */
typedef int (*launch_kernel_t)(void *function, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                               unsigned block_x, unsigned block_y, unsigned block_z,
                               unsigned shared_bytes, void *stream, void **params, void **extra);

typedef struct {
    PyObject_HEAD
    launch_kernel_t launch;  /* NULL until __init__ completed: run() refuses */
    void *function;
    unsigned grid, block;
    void *stream;
    void **params;
    PyObject *keep;          /* owner of the memory params points into */
} Launch;

static void Launch_dealloc(Launch *self) {
    Py_XDECREF(self->keep);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* An address from a Python int (an O& converter): 0 to 2**64 - 1, else a clear ValueError. */
static int address_arg(PyObject *obj, void *out) {
    PyObject *index = PyNumber_Index(obj);
    unsigned long long value = index == NULL ? 0 : PyLong_AsUnsignedLongLong(index);
    Py_XDECREF(index);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "Launch: an address must be an int from 0 to 2**64 - 1, got %R", obj);
        return 0;
    }
    *(unsigned long long *)out = value;
    return 1;
}

static int Launch_init(Launch *self, PyObject *args, PyObject *kwargs) {
    static char *names[] = {"launch", "function", "grid", "block", "stream", "params", "keep", NULL};
    unsigned long long launch, function, stream, params;
    long long grid, block;
    PyObject *keep;
    self->launch = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&O&LLO&O&O", names, address_arg, &launch, address_arg,
                                     &function, &grid, &block, address_arg, &stream, address_arg, &params,
                                     &keep))
        return -1;
    if (launch == 0 || function == 0 || params == 0) {
        PyErr_Format(PyExc_ValueError, "Launch: launch, function and params must be nonzero addresses "
                                       "(got launch=%llu, function=%llu, params=%llu)", launch, function, params);
        return -1;
    }
    if (grid < 1 || grid > UINT32_MAX || block < 1 || block > UINT32_MAX) {
        PyErr_Format(PyExc_ValueError, "Launch: grid and block must be 1 to %u (got grid=%lld, block=%lld)",
                     (unsigned)UINT32_MAX, grid, block);
        return -1;
    }
    self->function = (void *)(uintptr_t)function;
    self->grid = (unsigned)grid;
    self->block = (unsigned)block;
    self->stream = (void *)(uintptr_t)stream;
    self->params = (void **)(uintptr_t)params;
    Py_XSETREF(self->keep, Py_NewRef(keep));
    self->launch = (launch_kernel_t)(uintptr_t)launch;
    return 0;
}

static PyObject *Launch_run(Launch *self, PyObject *Py_UNUSED(ignored)) {
    if (self->launch == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Launch: __init__ did not complete");
        return NULL;
    }
    int status;
    Py_BEGIN_ALLOW_THREADS /* as CuPy's launchKernel and the compiled replay */
    status = self->launch(self->function, self->grid, 1, 1, self->block, 1, 1, 0, self->stream, self->params,
                          NULL);
    Py_END_ALLOW_THREADS
    if (status != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed: CUresult %d", status);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef Launch_methods[] = {
    {"run", (PyCFunction)Launch_run, METH_NOARGS,
     "Launch once (one cuLaunchKernel call); RuntimeError naming the CUresult if it fails."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "_launch_floor.Launch",
    .tp_doc = PyDoc_STR("Launch(launch, function, grid, block, stream, params, keep): one kernel launch, "
                        "every argument fixed; run() makes it."),
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Launch_init,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_methods = Launch_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_launch_floor",
    "A kernel launch with one C call: the floor of a replayed call (tools/csrc/launch_floor.c).", -1, NULL,
    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__launch_floor(void) {
    if (PyType_Ready(&LaunchType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Launch", (PyObject *)&LaunchType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
