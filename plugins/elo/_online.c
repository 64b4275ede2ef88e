/* The online-Elo bootstrap, compiled: R rounds side by side, one battle a step.

   The same arithmetic as ratings._RoundsPrep.run (the numpy loop, used when this module could
   not be built): ratings are float32 in half-log-odds units relative to the start, the
   expected score is 0.5 + 0.5 tanh(r_a - r_b), and a battle moves A by
   (K/2)(2s - 1 - tanh(r_a - r_b)) and B by the opposite. numpy spends ~11 µs a step on eight
   calls over 1,000 rounds; here a step costs ~12 ns a round, draws included. Only the buffer
   protocol is used (no numpy headers), so any C compiler builds it; a failed build leaves
   the numpy loop in charge. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* tanh through expf: glibc's expf is several times faster than its tanhf, and 1 - 2/(1 + e^2x)
   is the same function (float32 rounding either way, as in the numpy loop) */
#define TANH(x) (1.0f - 2.0f / (1.0f + expf(2.0f * (x))))

static int
get(PyObject *obj, Py_buffer *view, int writable, const char *fmt, Py_ssize_t itemsize,
    const char *name)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->itemsize != itemsize || view->format == NULL || strcmp(view->format, fmt) != 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a contiguous array of '%s' items", name, fmt);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* splitmix64 (Steele, Lea & Flood 2014; Java's SplittableRandom): one 64-bit state per round. */
static inline uint64_t
next64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A uniform integer in [0, n): Lemire's multiply-and-reject (2019), exact, as numpy's own. */
static inline uint64_t
below(uint64_t *state, uint64_t n)
{
    __uint128_t m = (__uint128_t)next64(state) * n;
    uint64_t low = (uint64_t)m;
    if (low < n) {
        uint64_t threshold = (0 - n) % n;
        while (low < threshold) {
            m = (__uint128_t)next64(state) * n;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

typedef struct {
    int32_t a, b;
    float s;
} battle;

PyDoc_STRVAR(bootstrap_doc,
"bootstrap(state, a, b, score, seeds, half_k, models)\n\n"
"Online Elo for R = len(seeds) rounds, each on len(a) battles drawn uniformly with\n"
"replacement (in draw order) by its own splitmix64 stream seeded from seeds (uint64);\n"
"state is float32 (R*models), updated in place; a and b are int32 model indices per battle,\n"
"score is float32 2s-1 per battle.");

static PyObject *
bootstrap(PyObject *self, PyObject *args)
{
    PyObject *o_state, *o_a, *o_b, *o_s, *o_seeds;
    float half_k;
    Py_ssize_t models;
    if (!PyArg_ParseTuple(args, "OOOOOfn", &o_state, &o_a, &o_b, &o_s, &o_seeds, &half_k,
                          &models))
        return NULL;
    Py_buffer state, a, b, s, seeds;
    if (get(o_state, &state, 1, "f", 4, "state") < 0)
        return NULL;
    if (get(o_a, &a, 0, "i", 4, "a") < 0)
        goto fail_a;
    if (get(o_b, &b, 0, "i", 4, "b") < 0)
        goto fail_b;
    if (get(o_s, &s, 0, "f", 4, "score") < 0)
        goto fail_s;
    if (PyObject_GetBuffer(o_seeds, &seeds, PyBUF_C_CONTIGUOUS) < 0)
        goto fail_seeds;

    Py_ssize_t n = a.len / 4, rounds = seeds.len / 8;
    battle *packed = NULL;
    uint64_t *streams = NULL;
    if (b.len / 4 != n || s.len / 4 != n || models <= 0 || seeds.len % 8 != 0
        || state.len / 4 != rounds * models) {
        PyErr_SetString(PyExc_ValueError, "arrays of mismatched sizes");
        goto fail;
    }
    const int32_t *ia = a.buf, *ib = b.buf;
    const float *sc = s.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (ia[i] < 0 || ia[i] >= models || ib[i] < 0 || ib[i] >= models) {
            PyErr_SetString(PyExc_IndexError, "a model index is out of range");
            goto fail;
        }
    }
    if (n == 0 || rounds == 0)
        goto done;
    /* one cache line read per draw instead of three */
    packed = PyMem_Malloc(sizeof(battle) * n);
    streams = PyMem_Malloc(sizeof(uint64_t) * rounds);
    if (packed == NULL || streams == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        packed[i] = (battle){ia[i], ib[i], sc[i]};
    memcpy(streams, seeds.buf, sizeof(uint64_t) * rounds);
    float *r = state.buf;
    Py_BEGIN_ALLOW_THREADS
    /* step-major, as the numpy loop: the rounds are independent, so a step's updates overlap
       in the CPU instead of waiting on each other as one round's would */
    for (Py_ssize_t t = 0; t < n; t++) {
        float *base = r;
        for (Py_ssize_t k = 0; k < rounds; k++, base += models) {
            const battle *x = packed + below(streams + k, (uint64_t)n);
            float *pa = base + x->a, *pb = base + x->b;
            float delta = half_k * (x->s - TANH(*pa - *pb));
            *pa += delta;
            *pb -= delta;
        }
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(packed);
    PyMem_Free(streams);
    PyBuffer_Release(&seeds);
    PyBuffer_Release(&s);
    PyBuffer_Release(&b);
    PyBuffer_Release(&a);
    PyBuffer_Release(&state);
    Py_RETURN_NONE;

fail:
    PyMem_Free(packed);
    PyMem_Free(streams);
    PyBuffer_Release(&seeds);
fail_seeds:
    PyBuffer_Release(&s);
fail_s:
    PyBuffer_Release(&b);
fail_b:
    PyBuffer_Release(&a);
fail_a:
    PyBuffer_Release(&state);
    return NULL;
}

static PyMethodDef methods[] = {
    {"bootstrap", bootstrap, METH_VARARGS, bootstrap_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_online", "The online-Elo bootstrap's compiled inner loop.", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__online(void)
{
    return PyModule_Create(&module);
}
