/* tessera._native: the stats pages and the configuration parser for Python, through the very C
 * code tessera-stat and the shim use (statspage/reader.c, listing.c, keys.c; config/), so a page
 * is trusted, validated and read consistently by the same rules, and a counter or a policy name
 * is spelled once.
 *
 *   stats(pid=None, device=None, dir=None) -> Stats    one slot's counters (memory_stats names)
 *   processes(dir=None, stale=False) -> [tuple]        the pages this user may read
 *   check_config(text=None) -> (config, source, notes) the configuration a process would run with
 *   KEYS, PLUGGABLE, VERSION; PageError, ConfigError
 *
 * The calling process's own page is opened once (trust checked), then read from a read-only
 * mapping of it (ts_page_map): a call copies one slot under its sequence lock and validates it,
 * with no system call, so a training loop can log it every step. Any other page is opened, judged
 * and read anew at each call, with pread, as tessera-stat reads it. Everything runs under the
 * GIL: the cache of the own page needs no lock of its own.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "statspage/keys.h"
#include "statspage/listing.h"
#include "statspage/reader.h"

#ifndef TESSERA_VERSION
#define TESSERA_VERSION "unknown"
#endif

static PyObject *PageError;   /* tessera.PageError: .kind (ts_page_status_name), .pid */
static PyObject *ConfigError; /* tessera.ConfigError */
static PyObject *KEYS;        /* tuple of str: key i names counter word i */
static PyObject *KEY_INDEX;   /* dict: name -> index */

/* --- Stats: one slot's counters, a read-only mapping ----------------------------------------- */

typedef struct StatsObject {
    PyObject_HEAD
    int pid;
    int device;
    Py_ssize_t nkeys;  /* counters the writer maintains: keys [0, nkeys) */
    PyObject *state;   /* "live" or "stale" */
    PyObject *reason;  /* why, one sentence */
    int64_t words[TS_STATS_KEYS];
} StatsObject;

static PyTypeObject StatsType;

static void stats_dealloc(StatsObject *s)
{
    Py_XDECREF(s->state);
    Py_XDECREF(s->reason);
    Py_TYPE(s)->tp_free((PyObject *)s);
}

static Py_ssize_t stats_len(StatsObject *s)
{
    return s->nkeys;
}

/* index of key in this object, or -1 (no exception set) */
static Py_ssize_t stats_index(StatsObject *s, PyObject *key)
{
    PyObject *i = PyDict_GetItemWithError(KEY_INDEX, key);
    if (!i)
        return -1;
    Py_ssize_t k = PyLong_AsSsize_t(i);
    return k < s->nkeys ? k : -1;
}

static PyObject *stats_getitem(StatsObject *s, PyObject *key)
{
    Py_ssize_t k = stats_index(s, key);
    if (k < 0) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return PyLong_FromLongLong(s->words[k]);
}

static int stats_contains(StatsObject *s, PyObject *key)
{
    Py_ssize_t k = stats_index(s, key);
    return k >= 0 ? 1 : PyErr_Occurred() ? -1 : 0;
}

static PyObject *stats_keys(StatsObject *s, PyObject *unused)
{
    (void)unused;
    return PyTuple_GetSlice(KEYS, 0, s->nkeys);
}

static PyObject *stats_iter(StatsObject *s)
{
    PyObject *keys = stats_keys(s, NULL);
    if (!keys)
        return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyObject *stats_values(StatsObject *s, PyObject *unused)
{
    (void)unused;
    PyObject *out = PyList_New(s->nkeys);
    for (Py_ssize_t k = 0; out && k < s->nkeys; k++) {
        PyObject *v = PyLong_FromLongLong(s->words[k]);
        if (!v) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, v);
    }
    return out;
}

static PyObject *stats_items(StatsObject *s, PyObject *unused)
{
    (void)unused;
    PyObject *out = PyList_New(s->nkeys);
    for (Py_ssize_t k = 0; out && k < s->nkeys; k++) {
        PyObject *pair = Py_BuildValue("(OL)", PyTuple_GET_ITEM(KEYS, k), (long long)s->words[k]);
        if (!pair) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, k, pair);
    }
    return out;
}

static PyObject *stats_get(StatsObject *s, PyObject *args)
{
    PyObject *key, *dflt = Py_None;
    if (!PyArg_UnpackTuple(args, "get", 1, 2, &key, &dflt))
        return NULL;
    Py_ssize_t k = stats_index(s, key);
    if (k >= 0)
        return PyLong_FromLongLong(s->words[k]);
    if (PyErr_Occurred())
        return NULL;
    Py_INCREF(dflt);
    return dflt;
}

static PyObject *stats_to_dict(StatsObject *s, PyObject *unused)
{
    (void)unused;
    PyObject *d = PyDict_New();
    for (Py_ssize_t k = 0; d && k < s->nkeys; k++) {
        PyObject *v = PyLong_FromLongLong(s->words[k]);
        if (!v || PyDict_SetItem(d, PyTuple_GET_ITEM(KEYS, k), v) != 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            break;
        }
        Py_DECREF(v);
    }
    return d;
}

/* word k of s, 0 when the writer does not maintain it */
static long long stats_word(const StatsObject *s, size_t offset)
{
    Py_ssize_t k = (Py_ssize_t)(offset / sizeof(int64_t));
    return k < s->nkeys ? (long long)s->words[k] : 0;
}

static PyObject *stats_repr(StatsObject *s)
{
    return PyUnicode_FromFormat(
        "<tessera.Stats pid=%d device=%d %U: %zd counters, allocated_bytes.all.current=%lld "
        "reserved_bytes.all.current=%lld>",
        s->pid, s->device, s->state, s->nkeys,
        stats_word(s, offsetof(tessera_device_stats, allocated_bytes)),
        stats_word(s, offsetof(tessera_device_stats, reserved_bytes)));
}

static PyMappingMethods stats_as_mapping = {
    .mp_length = (lenfunc)stats_len,
    .mp_subscript = (binaryfunc)stats_getitem,
};

static PySequenceMethods stats_as_sequence = {
    .sq_contains = (objobjproc)stats_contains,
};

static PyMethodDef stats_methods[] = {
    {"keys", (PyCFunction)stats_keys, METH_NOARGS, "The counter names, in the page's order."},
    {"values", (PyCFunction)stats_values, METH_NOARGS, "The counter values, in key order."},
    {"items", (PyCFunction)stats_items, METH_NOARGS, "(name, value) pairs, in key order."},
    {"get", (PyCFunction)stats_get, METH_VARARGS, "get(key, default=None)"},
    {"to_dict", (PyCFunction)stats_to_dict, METH_NOARGS,
     "A plain dict (for json.dumps and loggers that want one)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef stats_members[] = {
    {"pid", T_INT, offsetof(StatsObject, pid), READONLY, "the process the page belongs to"},
    {"device", T_INT, offsetof(StatsObject, device), READONLY, "the device ordinal of the slot"},
    {"state", T_OBJECT, offsetof(StatsObject, state), READONLY,
     "'live', or 'stale': the process is gone and these are the last numbers its page holds"},
    {"state_reason", T_OBJECT, offsetof(StatsObject, reason), READONLY, "why, one sentence"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject StatsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tessera.Stats",
    .tp_doc = "One device slot's counters, read consistently from a stats page: a read-only "
              "mapping from torch.cuda.memory_stats() names to integers.",
    .tp_basicsize = sizeof(StatsObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)stats_dealloc,
    .tp_repr = (reprfunc)stats_repr,
    .tp_as_mapping = &stats_as_mapping,
    .tp_as_sequence = &stats_as_sequence,
    .tp_iter = (getiterfunc)stats_iter,
    .tp_methods = stats_methods,
    .tp_members = stats_members,
};

/* --- errors ---------------------------------------------------------------------------------- */

static PyObject *raise_page(int status, int pid, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static PyObject *raise_page(int status, int pid, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyObject *e = PyObject_CallFunction(PageError, "s", msg);
    if (!e)
        return NULL;
    PyObject *kind = PyUnicode_FromString(ts_page_status_name(status));
    PyObject *p = PyLong_FromLong(pid);
    if (kind && p && PyObject_SetAttrString(e, "kind", kind) == 0 &&
        PyObject_SetAttrString(e, "pid", p) == 0)
        PyErr_SetObject(PageError, e);
    Py_XDECREF(kind);
    Py_XDECREF(p);
    Py_DECREF(e);
    return NULL;
}

/* --- reading a slot -------------------------------------------------------------------------- */

/* The slot to read: the given device's, else device 0's, else the lowest device in use. A mapped
 * page (the process's own) is peeked at, each slot's state and device (two loads); another
 * process's page is read slot by slot, and a slot that does not validate fails the call as it
 * fails tessera-stat PID (*status, pg->error). The chosen slot is then copied and validated whole.
 * -1 when no active slot matches, or on an error (*status not TS_PAGE_OK). */
static int slot_choose(ts_page *pg, int device, int *status)
{
    const tessera_page_header *h = &pg->hdr;
    int best = -1, best_dev = INT_MAX;
    *status = TS_PAGE_OK;
    for (uint32_t k = 0; k < h->slot_count; k++) {
        uint32_t state;
        int32_t dev;
        if (pg->mapped) {
            const tessera_page_slot_head *head =
                (const void *)(pg->mem + h->header_size + (size_t)k * h->slot_size);
            state = __atomic_load_n(&head->state, __ATOMIC_ACQUIRE);
            dev = __atomic_load_n(&head->device, __ATOMIC_RELAXED);
        } else {
            tessera_page_slot_head head;
            int st = ts_page_snapshot(pg, k, &head, NULL, NULL);
            if (st == TS_PAGE_EEMPTY)
                continue;
            if (st != TS_PAGE_OK) {
                *status = st;
                return -1;
            }
            state = head.state;
            dev = head.device;
        }
        if (state != TESSERA_SLOT_ACTIVE)
            continue;
        if (device >= 0 ? dev == device : dev < best_dev) {
            best = (int)k;
            best_dev = dev;
        }
    }
    return best;
}

/* A Stats of pg's slot for device (-1: see slot_choose), or NULL with PageError set. */
static PyObject *slot_read(ts_page *pg, int pid, int device, PyObject *state, PyObject *reason)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        int choice;
        int k = slot_choose(pg, device, &choice);
        if (choice != TS_PAGE_OK)
            return raise_page(choice, pid, "%s: %s", pg->path, pg->error);
        if (k < 0) {
            if (device >= 0)
                return raise_page(TS_PAGE_EEMPTY, pid,
                                  "pid %d has no device %d in use through tessera", pid, device);
            return raise_page(TS_PAGE_EEMPTY, pid, "pid %d has no device in use through tessera",
                              pid);
        }
        tessera_page_slot_head head;
        int st = ts_page_snapshot(pg, (uint32_t)k, &head, NULL, NULL);
        if (st == TS_PAGE_EEMPTY || (st == TS_PAGE_OK && device >= 0 && head.device != device))
            continue; /* the slot was released (and maybe claimed again) since the peek */
        if (st != TS_PAGE_OK)
            return raise_page(st, pid, "%s: %s", pg->path, pg->error);
        StatsObject *s = PyObject_New(StatsObject, &StatsType);
        if (!s)
            return NULL;
        s->pid = pid;
        s->device = head.device;
        uint32_t words = pg->hdr.stats_words;
        s->nkeys = (Py_ssize_t)(words < TS_STATS_KEYS ? words : TS_STATS_KEYS);
        memcpy(s->words, &head.stats, (size_t)s->nkeys * sizeof(int64_t));
        Py_INCREF(state);
        Py_INCREF(reason);
        s->state = state;
        s->reason = reason;
        return (PyObject *)s;
    }
    return raise_page(TS_PAGE_EBUSY, pid, "%s: slots kept changing while being read", pg->path);
}

/* The calling process's own page, opened once per process (a forked child opens its own: the
 * fork handler below forgets the parent's, so a call needs no getpid). */
static struct {
    pid_t pid;             /* whose page pg is; 0: none open */
    bool default_dir;      /* opened in ts_statspage_dir() for a call that named no directory */
    char dir[PATH_MAX];    /* the directory it was opened in */
    ts_page pg;
} own;

static void own_forget_in_child(void)
{
    own.pid = 0; /* the parent's mapping stays mapped in the child, harmless; closed at reopen */
    own.default_dir = false;
}

static PyObject *LIVE, *OWN_REASON, *STALE;

static void own_close(void)
{
    if (own.pid)
        ts_page_close(&own.pg);
    own.pid = 0;
}

static PyObject *own_stats(const char *dir, int device, bool default_dir)
{
    pid_t me = getpid();
    if (own.pid != me || strcmp(own.dir, dir) != 0) {
        own_close();
        own.default_dir = false;
        int st = ts_page_open_pid(&own.pg, dir, (int)me);
        if (st != TS_PAGE_OK) {
            ts_page_close(&own.pg);
            if (st == TS_PAGE_ENOENT)
                return raise_page(st, (int)me,
                                  "no stats page for this process (pid %d) in %s: tessera has "
                                  "served no CUDA allocation here yet, or it is not loaded "
                                  "(tessera run, LD_PRELOAD, tessera.torch.enable())",
                                  (int)me, dir);
            return raise_page(st, (int)me, "%s: %s", own.pg.path, own.pg.error);
        }
        (void)ts_page_map(&own.pg); /* refused (another user's file): pread, as before */
        own.pid = me;
        snprintf(own.dir, sizeof own.dir, "%s", dir);
        own.default_dir = default_dir;
    }
    return slot_read(&own.pg, (int)me, device, LIVE, OWN_REASON);
}

/* Another process's page: opened, trusted, judged and read anew, as tessera-stat reads it. */
static PyObject *other_stats(const char *dir, int pid, int device)
{
    ts_page pg;
    ts_page_init(&pg);
    int st = ts_page_open_pid(&pg, dir, pid);
    if (st != TS_PAGE_OK) {
        PyObject *r = st == TS_PAGE_ENOENT
                          ? raise_page(st, pid, "no stats page for pid %d in %s", pid, dir)
                          : raise_page(st, pid, "%s: %s", pg.path, pg.error);
        ts_page_close(&pg);
        return r;
    }
    char why[192];
    int owner = ts_page_owner_state(&pg.hdr, why, sizeof why);
    PyObject *out = NULL;
    if (owner == TS_OWNER_UNKNOWN) { /* never shown as a live process's numbers */
        out = raise_page(TS_PAGE_EUNTRUSTED, pid, "%s: unverified: %s", pg.path, why);
    } else {
        PyObject *reason = PyUnicode_FromString(why);
        if (reason)
            out = slot_read(&pg, pid, device, ts_owner_is_stale(owner) ? STALE : LIVE, reason);
        Py_XDECREF(reason);
    }
    ts_page_close(&pg);
    return out;
}

static PyObject *py_stats(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    /* the training loop's call, stats() every step: no argument to parse, no system call */
    if (own.pid && own.default_dir && PyTuple_GET_SIZE(args) == 0 && (!kw || !PyDict_GET_SIZE(kw)))
        return slot_read(&own.pg, (int)own.pid, -1, LIVE, OWN_REASON);
    static char *names[] = {"pid", "device", "dir", NULL};
    PyObject *pid_obj = Py_None, *dev_obj = Py_None;
    const char *dir = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOz:stats", names, &pid_obj, &dev_obj, &dir))
        return NULL;
    int device = -1;
    if (dev_obj != Py_None) {
        long d = PyLong_AsLong(dev_obj);
        if (d == -1 && PyErr_Occurred())
            return NULL;
        if (d < 0 || d > 65535) {
            PyErr_Format(PyExc_ValueError, "device %ld: a device ordinal is 0 to 65535", d);
            return NULL;
        }
        device = (int)d;
    }
    bool default_dir = !dir;
    if (!dir)
        dir = ts_statspage_dir();
    if (pid_obj == Py_None)
        return own_stats(dir, device, default_dir);
    long pid = PyLong_AsLong(pid_obj);
    if (pid == -1 && PyErr_Occurred())
        return NULL;
    if (pid <= 0 || pid > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "pid %ld: a process id is a positive integer", pid);
        return NULL;
    }
    if (pid == (long)getpid())
        return own_stats(dir, device, default_dir);
    return other_stats(dir, (int)pid, device);
}

/* --- the pages this user may read ------------------------------------------------------------ */

static PyObject *view_tuple(const ts_proc_view *v)
{
    PyObject *devs = PyList_New(0);
    for (uint32_t k = 0; devs && k < v->nslots; k++) {
        if (v->slots[k].status != TS_PAGE_OK)
            continue;
        PyObject *d = PyLong_FromLong(v->slots[k].head.device);
        if (!d || PyList_Append(devs, d) != 0)
            Py_CLEAR(devs);
        Py_XDECREF(d);
    }
    if (!devs)
        return NULL;
    PyObject *t = Py_BuildValue("(iy#Nssy#y#)", v->pid, v->hdr.cmdline,
                                (Py_ssize_t)strnlen(v->hdr.cmdline, sizeof v->hdr.cmdline),
                                PyList_AsTuple(devs), ts_owner_state_name(v->owner), v->owner_why,
                                v->hdr.version,
                                (Py_ssize_t)strnlen(v->hdr.version, sizeof v->hdr.version),
                                v->hdr.config,
                                (Py_ssize_t)strnlen(v->hdr.config, sizeof v->hdr.config));
    Py_DECREF(devs);
    return t;
}

static PyObject *py_processes(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"dir", "stale", NULL};
    const char *dir = NULL;
    int stale = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zp:processes", names, &dir, &stale))
        return NULL;
    if (!dir)
        dir = ts_statspage_dir();
    ts_views vs;
    int e = ts_views_load_all(dir, &vs);
    if (e) {
        errno = e;
        return PyErr_SetFromErrnoWithFilename(PyExc_OSError, dir);
    }
    PyObject *out = PyList_New(0);
    for (size_t i = 0; out && i < vs.n; i++) {
        const ts_proc_view *v = &vs.v[i];
        /* only what tessera-stat shows as a process: readable, trusted, its owner verified */
        if (v->status != TS_PAGE_OK || v->owner == TS_OWNER_UNKNOWN)
            continue;
        if (ts_owner_is_stale(v->owner) && !stale)
            continue;
        PyObject *t = view_tuple(v);
        if (!t || PyList_Append(out, t) != 0)
            Py_CLEAR(out);
        Py_XDECREF(t);
    }
    ts_views_free(&vs);
    return out;
}

/* --- the configuration ----------------------------------------------------------------------- */

static void note_collect(void *user, const char *message)
{
    PyObject *s = PyUnicode_DecodeUTF8(message, (Py_ssize_t)strlen(message), "replace");
    if (!s || PyList_Append((PyObject *)user, s) != 0)
        PyErr_Clear(); /* a note lost is not worth failing the check */
    Py_XDECREF(s);
}

static PyObject *py_check_config(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *names[] = {"text", NULL};
    const char *text = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|z:check_config", names, &text))
        return NULL;
    PyObject *notes = PyList_New(0);
    if (!notes)
        return NULL;
    ts_config cfg;
    ts_config_diag diag;
    const char *source = "TESSERA_ALLOC_CONF";
    int rc = text ? ts_config_parse(&cfg, text, source, TS_CONFIG_STRICT, &diag, note_collect,
                                    notes)
                  : ts_config_from_env(&cfg, &source, &diag, note_collect, notes);
    if (rc != 0) {
        Py_DECREF(notes);
        PyErr_SetString(ConfigError, diag.message);
        return NULL;
    }
    char formatted[4096];
    ts_config_format(&cfg, formatted, sizeof formatted);
    return Py_BuildValue("(szN)", formatted, source, notes);
}

/* --- the module ------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"stats", (PyCFunction)(void (*)(void))py_stats, METH_VARARGS | METH_KEYWORDS,
     "stats(pid=None, device=None, dir=None) -> Stats\n\n"
     "The counters of one device slot of a stats page, with torch.cuda.memory_stats() names.\n"
     "pid None: this process's own page. device None: device 0 if in use, else the lowest\n"
     "device in use. dir None: $TESSERA_STATS_DIR, else /dev/shm. Raises PageError."},
    {"processes", (PyCFunction)(void (*)(void))py_processes, METH_VARARGS | METH_KEYWORDS,
     "processes(dir=None, stale=False) -> [(pid, command, devices, state, state_reason, version, "
     "config)]"},
    {"check_config", (PyCFunction)(void (*)(void))py_check_config, METH_VARARGS | METH_KEYWORDS,
     "check_config(text=None) -> (config, source, notes)\n\n"
     "Parse text strictly as TESSERA_ALLOC_CONF, or (text None) the environment as a process\n"
     "under tessera would. Raises ConfigError with tessera's one-line message."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tessera._native", "tessera's stats pages and configuration, in C.",
    -1, methods, NULL, NULL, NULL, NULL,
};

static int keys_build(void)
{
    KEYS = PyTuple_New((Py_ssize_t)TS_STATS_KEYS);
    KEY_INDEX = PyDict_New();
    if (!KEYS || !KEY_INDEX)
        return -1;
    for (size_t i = 0; i < TS_STATS_KEYS; i++) {
        PyObject *k = PyUnicode_InternFromString(ts_stats_key_name(i));
        PyObject *v = PyLong_FromSize_t(i);
        if (!k || !v || PyDict_SetItem(KEY_INDEX, k, v) != 0) {
            Py_XDECREF(k);
            Py_XDECREF(v);
            return -1;
        }
        Py_DECREF(v);
        PyTuple_SET_ITEM(KEYS, (Py_ssize_t)i, k);
    }
    return 0;
}

/* The names of exports.def, for tessera.torch (the library functions PyTorch looks up). */
static PyObject *pluggable_names(void)
{
    static const char *const names[] = {
#define TS_EXPORT_API(name, ret, params) #name,
#include "shim/exports.def"
    };
    PyObject *t = PyTuple_New((Py_ssize_t)(sizeof names / sizeof names[0]));
    for (size_t i = 0; t && i < sizeof names / sizeof names[0]; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) {
            Py_CLEAR(t);
            break;
        }
        PyTuple_SET_ITEM(t, (Py_ssize_t)i, s);
    }
    return t;
}

PyMODINIT_FUNC PyInit__native(void); /* the one exported name */
PyMODINIT_FUNC PyInit__native(void)
{
    if (PyType_Ready(&StatsType) < 0)
        return NULL;
    if (pthread_atfork(NULL, NULL, own_forget_in_child) != 0)
        return PyErr_NoMemory();
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    PageError = PyErr_NewExceptionWithDoc(
        "tessera.PageError",
        "A stats page that cannot be read or trusted: .kind says why (missing, untrusted, "
        "corrupt, truncated, foreign, newer-layout, older-layout, busy, not-ready, empty, "
        "unreadable), .pid whose page it is.",
        NULL, NULL);
    ConfigError = PyErr_NewExceptionWithDoc(
        "tessera.ConfigError", "A configuration tessera's strict parser refuses.",
        PyExc_ValueError, NULL);
    LIVE = PyUnicode_InternFromString("live");
    STALE = PyUnicode_InternFromString("stale");
    OWN_REASON = PyUnicode_InternFromString("this process");
    PyObject *plug = pluggable_names();
    if (!PageError || !ConfigError || !LIVE || !STALE || !OWN_REASON || !plug ||
        keys_build() != 0 || PyModule_AddObject(m, "PageError", PageError) != 0 ||
        PyModule_AddObject(m, "ConfigError", ConfigError) != 0 ||
        PyModule_AddObject(m, "KEYS", KEYS) != 0 ||
        PyModule_AddObject(m, "PLUGGABLE", plug) != 0 ||
        PyModule_AddStringConstant(m, "VERSION", TESSERA_VERSION) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(PageError);
    Py_INCREF(ConfigError);
    Py_INCREF(KEYS);
    Py_INCREF(&StatsType);
    if (PyModule_AddObject(m, "Stats", (PyObject *)&StatsType) != 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
