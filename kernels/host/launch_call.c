/* _nvfp4_launch_call: the eager fast path's one call into the kernel library, as a CPython
 * extension function instead of a ctypes call.
 *
 * Why: on the H200 machines a ctypes call of nvfp4_launch_packed, with the ctypes array writes
 * of the per-call launch arguments before it, took 0.5-1.7 us more than this function doing the
 * same writes and the same call (benchmarks/NOTES.md, "host time"); a decode call's whole host
 * budget is 10 us. The function takes plain integers (METH_FASTCALL: no tuple, no
 * argument conversion objects), writes them into the caller's argument words and calls the
 * library's entry through a function pointer handed over once by bind().
 *
 * It needs no CUDA header: the word indices come from nvfp4_kernels.cuda_backend (which checks
 * the struct's size against the library) through bind(), and the target is an address. The
 * GIL is released around the library call, as ctypes does, so a launch that blocks (a full
 * launch queue) never stalls the process's other Python threads.
 *
 * Built by nvfp4_kernels.build.build_launch_call (plain C compiler, Python's headers); when it
 * cannot be built, nvfp4_kernels.cuda_backend falls back to ctypes with the same arguments. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

typedef int (*packed_launch_fn)(int32_t kernel, const void* args);

enum { SLOT_A, SLOT_OUT, SLOT_WORKSPACE, SLOT_COUNTERS, SLOT_STREAM, SLOT_G, SLOTS };

static packed_launch_fn target = NULL;
static Py_ssize_t word_index[SLOTS];
static Py_ssize_t word_count = 0;

static PyObject* bind(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3) {
    PyErr_Format(PyExc_TypeError, "bind(function_address, word_indices, word_count) takes 3 arguments, got %zd",
                 nargs);
    return NULL;
  }
  void* fn = PyLong_AsVoidPtr(args[0]);
  if (fn == NULL) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bind: the function address is 0");
    return NULL;
  }
  Py_ssize_t count = PyLong_AsSsize_t(args[2]);
  if (count == -1 && PyErr_Occurred()) return NULL;
  PyObject* seq = PySequence_Fast(args[1], "bind: word_indices must be a sequence of 6 ints (a, out, workspace, "
                                           "counters, stream, g)");
  if (seq == NULL) return NULL;
  if (PySequence_Fast_GET_SIZE(seq) != SLOTS) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "bind: word_indices needs %d entries (a, out, workspace, counters, stream, g)", SLOTS);
    return NULL;
  }
  Py_ssize_t indices[SLOTS];
  for (int i = 0; i < SLOTS; ++i) {
    indices[i] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, i));
    if (indices[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return NULL;
    }
    if (indices[i] < 0 || indices[i] >= count) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "bind: word index %zd is outside the %zd argument words", indices[i], count);
      return NULL;
    }
  }
  Py_DECREF(seq);
  for (int i = 0; i < SLOTS; ++i) word_index[i] = indices[i];
  word_count = count;
  target = (packed_launch_fn)fn;
  Py_RETURN_NONE;
}

/* launch(kernel, words, address, a, out, workspace, counters, stream, g) -> cudaError_t as an
 * int. ``words`` is the ctypes array at ``address`` (unused here: the ctypes fallback writes
 * through it); the six pointers go to their words, then the library launches. */
static PyObject* launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  if (nargs != 3 + SLOTS) {
    PyErr_Format(PyExc_TypeError,
                 "launch(kernel, words, address, a, out, workspace, counters, stream, g) takes 9 arguments, got %zd",
                 nargs);
    return NULL;
  }
  if (target == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "launch: bind() has not been called with the library's nvfp4_launch_packed");
    return NULL;
  }
  const long kernel = PyLong_AsLong(args[0]);
  uint64_t* words = (uint64_t*)PyLong_AsVoidPtr(args[2]);
  uint64_t value[SLOTS];
  for (int i = 0; i < SLOTS; ++i) value[i] = PyLong_AsUnsignedLongLong(args[3 + i]);
  if (PyErr_Occurred()) return NULL;
  if (words == NULL) {
    PyErr_SetString(PyExc_ValueError, "launch: the argument words' address is 0");
    return NULL;
  }
  for (int i = 0; i < SLOTS; ++i) words[word_index[i]] = value[i];
  int err;
  Py_BEGIN_ALLOW_THREADS
  err = target((int32_t)kernel, words);
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(err);
}

static PyMethodDef methods[] = {
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(function_address, word_indices, word_count): the library's nvfp4_launch_packed and where the per-call "
     "words (a, out, workspace, counters, stream, g) sit in its argument struct."},
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL,
     "launch(kernel, words, address, a, out, workspace, counters, stream, g) -> int: write the per-call words at "
     "address "
     "and launch (the library's cudaError_t)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_nvfp4_launch_call",
                                    "The eager fast path's launch call (see launch_call.c).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__nvfp4_launch_call(void) { return PyModule_Create(&module); }
