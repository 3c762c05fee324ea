/* The uniform assignor's homogeneous builder in C: the same rules as `_uniform_homogeneous`
 * (Kafka's UniformHomogeneousAssignmentBuilder with the KAFKA-18688 fix), for current assignments
 * in canonical form.
 *
 * Why C: the algorithm is a few array walks, but in Python its cost is dominated by reading tens
 * of thousands of current tuples and building as many output dicts and tuples. Here each is one
 * pass with no intermediate Python objects.
 *
 * Scope: only canonical input is handled here: every current assignment a dict whose values are
 * non-empty tuples of ascending exact ints within the topic, topics in topic order, no partition
 * claimed twice. That is what the coordinator passes (it stores this assignor's own output). For
 * anything else `assign_homogeneous` returns None and the caller takes the Python builders, which
 * clean such input up (and are the reference this module is tested against).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The dict layout of the Python this module is built for (from CPython's own header, installed
 * with it), read only by `value_slots` to write a fresh copy's values in place. Only on
 * 3.11: 3.12's header cannot be included outside CPython's own build (it redeclares public GC
 * calls), and other versions, or an install without the header, go without. */
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && defined(__has_include)
#if __has_include("internal/pycore_dict.h")
#define COHORT_DICT_LAYOUT 1
#define Py_BUILD_CORE 1
#include "internal/pycore_dict.h"
#undef Py_BUILD_CORE
#endif
#endif

/* dict[key] = value with key's hash known (a uuid.UUID hashes in Python code); Python 3.13 made
 * the known-hash call private, and there the key is hashed again. */
static inline int
set_with_hash(PyObject *dict, PyObject *key, PyObject *value, Py_hash_t hash)
{
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_SetItem_KnownHash(dict, key, value, hash);
#else
    (void)hash;
    return PyDict_SetItem(dict, key, value);
#endif
}

/* Topic id object (by address) -> topic index: current assignments normally carry the very
 * objects of the subscription, so most lookups need neither a Python hash nor a compare. */
typedef struct {
    PyObject *key;
    Py_ssize_t index;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    size_t used;
} AddressTable;

static size_t
address_slot(const AddressTable *table, PyObject *key)
{
    uint64_t x = (uint64_t)(uintptr_t)key;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & table->mask;
}

static Py_ssize_t
address_get(const AddressTable *table, PyObject *key)
{
    for (size_t at = address_slot(table, key);; at = (at + 1) & table->mask) {
        if (table->slots[at].key == key)
            return table->slots[at].index;
        if (table->slots[at].key == NULL)
            return -1;
    }
}

static void
address_put(AddressTable *table, PyObject *key, Py_ssize_t index)
{
    if ((table->used + 1) * 2 > table->mask + 1)
        return; /* full enough: later lookups of this key go through the value dict */
    size_t at = address_slot(table, key);
    while (table->slots[at].key != NULL && table->slots[at].key != key)
        at = (at + 1) & table->mask;
    if (table->slots[at].key == NULL)
        table->used++;
    table->slots[at].key = key;
    table->slots[at].index = index;
}

/* An empty table sized for `keys` keys at a quarter full; 0, or -1 with MemoryError set. */
static int
address_init(AddressTable *table, size_t keys)
{
    size_t slots = 16;
    while (slots < keys * 4)
        slots <<= 1;
    table->slots = PyMem_Calloc(slots, sizeof(Slot));
    table->mask = slots - 1;
    table->used = 0;
    if (table->slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int
compare_int32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* What the scan of the current assignments concluded. */
enum { SCAN_OK = 0, SCAN_ERROR = -1, SCAN_NOT_CANONICAL = 1 };

typedef struct {
    Py_ssize_t members, topics;
    int64_t total;
    int64_t *offsets;    /* topics + 1: first global partition number of each topic */
    int32_t *owner;      /* total: 1 + index of the member owning a partition, 0 if nobody */
    int32_t *entries;    /* each member's owned global partitions, ascending, members in order */
    Py_ssize_t *start;   /* members + 1: where each member's entries begin */
    char *not_dict;      /* members: the current assignment is an empty non-dict mapping */
    Py_hash_t *hashes;   /* topics: hash of each topic id, or -1 until needed */
    AddressTable table;
    PyObject *by_value;  /* topic id -> index, built on the first address miss */
    PyObject *by_value_keys; /* the keys found through it (held while their addresses are in the table) */
} Work;

/* Arrays kept from one assignment to the next. A large group's arrays (a few per partition or
 * member, about a megabyte for 100,000 partitions) came from the top of the C heap and went back
 * to the system on every call, which then paid a page fault per 4 kB touched again: 178 faults,
 * a third of a 10,000-member join's CPU. A kept array is lent to one caller at a time (a nested
 * call, possible while a Python attribute is read, gets one of its own) and is not kept past
 * KEPT_MAX bytes. */
typedef struct {
    void *data;
    size_t size;
    int lent;
} Kept;

#define KEPT_MAX ((size_t)8 << 20) /* two million partitions, half a million members */

static Kept kept_owner, kept_entries, kept_start, kept_quotas, kept_unassigned, kept_members;

static void *
borrow(Kept *kept, size_t bytes, int zeroed)
{
    if (kept->lent || bytes > KEPT_MAX)
        return zeroed ? PyMem_Calloc(1, bytes) : PyMem_Malloc(bytes);
    if (kept->size < bytes) {
        void *grown = PyMem_Malloc(bytes); /* nothing of the old content is wanted */
        if (grown == NULL)
            return NULL;
        PyMem_Free(kept->data);
        kept->data = grown;
        kept->size = bytes;
    }
    kept->lent = 1;
    if (zeroed)
        memset(kept->data, 0, bytes);
    return kept->data;
}

static void
give_back(Kept *kept, void *data)
{
    if (data != NULL && data == kept->data && kept->lent)
        kept->lent = 0;
    else
        PyMem_Free(data);
}

#ifdef COHORT_DICT_LAYOUT
/* Where the values of `d`, a dict holding key[0..size) in that order, lie: each value is
 * `stride` bytes after the one before. False unless its table is laid out as that implies:
 * combined, `size` entries, entry i holding key[i]. Only a fresh copy is written into.
 *
 * Why: through the public calls each value costs a lookup of its key and an insert (about 150
 * instructions, two fifths of a hundred-member range assignment) although the copy already holds
 * the keys in a known order. Nothing has seen the copy yet, so no version tag or watcher needs
 * to hear of the change. */
typedef struct {
    char *first;
    size_t stride;
} ValueSlots;

static int
value_slots(PyObject *d, PyObject *const *key, Py_ssize_t size, ValueSlots *slots)
{
    PyDictObject *mp = (PyDictObject *)d;
    PyDictKeysObject *keys = mp->ma_keys;
    if (mp->ma_values != NULL || mp->ma_used != size || keys->dk_nentries != size)
        return 0;
    /* Entries are {hash, key, value} in a general table and {key, value} in a str-keyed one. */
    int general = keys->dk_kind == DICT_KEYS_GENERAL;
    char *entries = general ? (char *)DK_ENTRIES(keys) : (char *)DK_UNICODE_ENTRIES(keys);
    size_t stride = general ? sizeof(PyDictKeyEntry) : sizeof(PyDictUnicodeEntry);
    size_t at_key = general ? offsetof(PyDictKeyEntry, me_key) : offsetof(PyDictUnicodeEntry, me_key);
    size_t at_value = general ? offsetof(PyDictKeyEntry, me_value) : offsetof(PyDictUnicodeEntry, me_value);
    for (Py_ssize_t i = 0; i < size; i++)
        if (*(PyObject **)(entries + (size_t)i * stride + at_key) != key[i])
            return 0;
    slots->first = entries + at_value;
    slots->stride = stride;
    return 1;
}

/* value_slots for a copy to write into: its key table its own, not shared. */
static int
copied_value_slots(PyObject *d, PyObject *const *key, Py_ssize_t size, ValueSlots *slots)
{
    return ((PyDictObject *)d)->ma_keys->dk_refcnt == 1 && value_slots(d, key, size, slots);
}

/* The i-th value of the copy becomes `value` (a new reference, stolen). Its old value is one of
 * the dict it was copied from, which still holds it: dropping it here runs no finaliser. */
static inline void
put_copied_value(const ValueSlots *slots, Py_ssize_t i, PyObject *value)
{
    PyObject **slot = (PyObject **)(slots->first + (size_t)i * slots->stride);
    PyObject *old = *slot;
    *slot = value;
    Py_DECREF(old);
}

/* Every value of the copy becomes `value`; false, nothing changed, if `d` is not laid out so. */
static int
set_copied_values(PyObject *d, PyObject *const *key, Py_ssize_t size, PyObject *value)
{
    ValueSlots slots;
    if (!copied_value_slots(d, key, size, &slots))
        return 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        Py_INCREF(value);
        put_copied_value(&slots, i, value);
    }
    return 1;
}
#endif

/* The index of a topic id not found by address: by value (-1 if unknown, -2 on an error). */
static Py_ssize_t
topic_index(Work *w, PyObject *topic_ids, PyObject *key)
{
    Py_ssize_t t;
    if (w->by_value == NULL) {
        w->by_value = PyDict_New();
        w->by_value_keys = PyList_New(0);
        if (w->by_value == NULL || w->by_value_keys == NULL)
            return -2;
        for (Py_ssize_t i = 0; i < w->topics; i++) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL || PyDict_SetItem(w->by_value, PyList_GET_ITEM(topic_ids, i), index) < 0) {
                Py_XDECREF(index);
                return -2;
            }
            Py_DECREF(index);
        }
    }
    PyObject *found = PyDict_GetItemWithError(w->by_value, key);
    if (found == NULL)
        return PyErr_Occurred() ? -2 : -1;
    t = PyLong_AsSsize_t(found);
    /* Remembered by address from now on; the key is held so that its address stays its own. */
    if (PyList_Append(w->by_value_keys, key) < 0)
        return -2;
    address_put(&w->table, key, t);
    return t;
}

/* A run of consecutive partitions of one topic, (start, ..., start + length - 1), as one shared
 * tuple per (start, length) for short runs near a topic's start: what most members receive. A
 * large group's output then allocates one tuple per distinct run instead of one per member, and
 * the next assignment finds them again. Tuples are immutable, so sharing them between members,
 * groups and calls changes nothing a caller can see but identity. Bounded: at most
 * RUN_MAX_LENGTH x RUN_MAX_START tuples (about 2 MB) for the life of the process. */
#define RUN_MAX_LENGTH 16
#define RUN_MAX_START 1024
static PyObject **run_cache; /* [(length - 1) * RUN_MAX_START + start], each filled when first met */

/* One current entry (topic index t, its partitions): its global partitions appended to the member's. */
static int
scan_entry(Work *w, Py_ssize_t member, Py_ssize_t t, PyObject *value, Py_ssize_t *n, int64_t *previous)
{
    if (!PyTuple_CheckExact(value) || PyTuple_GET_SIZE(value) == 0)
        return SCAN_NOT_CANONICAL;
    int64_t base = w->offsets[t], count = w->offsets[t + 1] - base;
    Py_ssize_t size = PyTuple_GET_SIZE(value);
    PyObject *first = PyTuple_GET_ITEM(value, 0);
    if (run_cache != NULL && size <= RUN_MAX_LENGTH && PyLong_CheckExact(first)) {
        /* One of the shared run tuples this builder hands out (what a steady group's current
         * assignment mostly is): its partitions are known without reading each int. */
        int overflow = 0;
        long long p = PyLong_AsLongLongAndOverflow(first, &overflow);
        if (!overflow && p >= 0 && p < RUN_MAX_START && run_cache[(size - 1) * RUN_MAX_START + p] == value) {
            if (p + size > count || base + p <= *previous)
                return SCAN_NOT_CANONICAL;
            for (int64_t g = base + p; g < base + p + size; g++) {
                if (w->owner[g] != 0)
                    return SCAN_NOT_CANONICAL;
                w->owner[g] = (int32_t)(member + 1);
                w->entries[(*n)++] = (int32_t)g;
            }
            *previous = base + p + size - 1;
            return SCAN_OK;
        }
    }
    for (Py_ssize_t k = 0; k < size; k++) {
        PyObject *item = PyTuple_GET_ITEM(value, k);
        if (!PyLong_CheckExact(item))
            return SCAN_NOT_CANONICAL;
        int overflow = 0;
        long long p = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || p < 0 || p >= count)
            return SCAN_NOT_CANONICAL;
        int64_t g = base + p;
        if (g <= *previous || w->owner[g] != 0)
            return SCAN_NOT_CANONICAL;
        w->owner[g] = (int32_t)(member + 1);
        w->entries[(*n)++] = (int32_t)g;
        *previous = g;
    }
    return SCAN_OK;
}

static int
scan_currents(Work *w, PyObject *currents, PyObject *topic_ids)
{
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < w->members; i++) {
        PyObject *current = PyList_GET_ITEM(currents, i);
        w->start[i] = n;
        if (!PyDict_CheckExact(current)) {
            Py_ssize_t size = PyObject_Length(current);
            if (size < 0)
                return SCAN_ERROR;
            if (size > 0)
                return SCAN_NOT_CANONICAL;
            w->not_dict[i] = 1;
            continue;
        }
        Py_ssize_t position = 0;
        PyObject *key, *value;
        int64_t previous = -1;
        while (PyDict_Next(current, &position, &key, &value)) {
            Py_ssize_t t = address_get(&w->table, key);
            int scanned;
            if (t >= 0) {
                scanned = scan_entry(w, i, t, value, &n, &previous);
            } else {
                /* Found by value: that runs Python code (__hash__, __eq__), which could let go of
                 * the dict's references meanwhile, so the entry is held until it is read. */
                Py_INCREF(key);
                Py_INCREF(value);
                t = topic_index(w, topic_ids, key);
                scanned = t == -2 ? SCAN_ERROR : t < 0 ? SCAN_NOT_CANONICAL : scan_entry(w, i, t, value, &n, &previous);
                Py_DECREF(key);
                Py_DECREF(value);
            }
            if (scanned != SCAN_OK)
                return scanned;
        }
    }
    w->start[w->members] = n;
    return SCAN_OK;
}

static Py_hash_t
topic_hash(Work *w, PyObject *topic_ids, PyObject *hashes, Py_ssize_t t)
{
    if (w->hashes[t] != -1)
        return w->hashes[t];
    Py_hash_t h;
    if (hashes != Py_None) {
        h = PyLong_AsSsize_t(PyList_GET_ITEM(hashes, t));
        if (h == -1 && PyErr_Occurred())
            return -1;
    } else {
        h = PyObject_Hash(PyList_GET_ITEM(topic_ids, t));
    }
    w->hashes[t] = h;
    return h;
}

static PyObject *
run_tuple(PyObject *ints, Py_ssize_t start, Py_ssize_t length)
{
    if (run_cache == NULL) {
        run_cache = PyMem_Calloc((size_t)RUN_MAX_LENGTH * RUN_MAX_START, sizeof(PyObject *));
        if (run_cache == NULL)
            return PyErr_NoMemory();
    }
    PyObject **slot = &run_cache[(length - 1) * RUN_MAX_START + start];
    if (*slot == NULL) {
        PyObject *tuple = PyTuple_GetSlice(ints, start, start + length);
        if (tuple == NULL)
            return NULL;
        PyObject_GC_UnTrack(tuple); /* ints only (a no-op if the slice is `ints` itself) */
        *slot = tuple;
    }
    Py_INCREF(*slot);
    return *slot;
}

/* {topic id: (partitions...)} for ascending global partition numbers. */
static PyObject *
member_dict(Work *w, const int32_t *parts, Py_ssize_t size, PyObject *topic_ids, PyObject *hashes, PyObject *ints)
{
    PyObject *out = PyDict_New();
    if (out == NULL || size == 0)
        return out;
    /* The topic of the first partition: the last topic starting at or before it. */
    Py_ssize_t lo = 0, hi = w->topics;
    while (hi - lo > 1) {
        Py_ssize_t mid = (lo + hi) / 2;
        if (w->offsets[mid] <= parts[0])
            lo = mid;
        else
            hi = mid;
    }
    Py_ssize_t t = lo, k = 0;
    while (k < size) {
        while (parts[k] >= w->offsets[t + 1])
            t++;
        Py_ssize_t end = k;
        while (end < size && parts[end] < w->offsets[t + 1])
            end++;
        Py_ssize_t first = parts[k] - w->offsets[t], length = end - k;
        PyObject *tuple;
        if (length <= RUN_MAX_LENGTH && first < RUN_MAX_START && parts[end - 1] - parts[k] == length - 1) {
            tuple = run_tuple(ints, first, length);
            if (tuple == NULL)
                goto fail;
        } else {
            tuple = PyTuple_New(length);
            if (tuple == NULL)
                goto fail;
            for (Py_ssize_t j = k; j < end; j++) {
                PyObject *item = PyTuple_GET_ITEM(ints, parts[j] - w->offsets[t]);
                Py_INCREF(item);
                PyTuple_SET_ITEM(tuple, j - k, item);
            }
            PyObject_GC_UnTrack(tuple); /* ints only: as the collector itself would on its next pass */
        }
        PyObject *key = PyList_GET_ITEM(topic_ids, t);
        Py_hash_t h = topic_hash(w, topic_ids, hashes, t);
        int rc = h == -1 && PyErr_Occurred() ? -1 : set_with_hash(out, key, tuple, h);
        Py_DECREF(tuple);
        if (rc < 0)
            goto fail;
        k = end;
    }
    /* Holding only topic ids and those tuples, the dict cannot be part of a reference cycle, so the
     * cyclic collector need not track it: with tens of thousands of members, collections walking
     * the fresh output would otherwise cost about as much as building it. (A dict tracks itself
     * again if a container is ever stored in it.) */
    PyObject_GC_UnTrack(out);
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
build(Work *w, PyObject *member_ids, PyObject *currents, PyObject *topic_ids, PyObject *hashes, PyObject *ints,
      PyObject *template)
{
    Py_ssize_t members = w->members;
    int64_t total = w->total;
    int64_t min_quota = total / members, extra_left = total % members;
    Py_ssize_t owned_total = w->start[members];

    /* Quotas and what each member keeps: walking members in order, one offered an extra slot keeps
     * it if it already owns more than min_quota, or if every member left is needed for the extra
     * slots left; otherwise it hands the slot on (KAFKA-18688). A member keeps a prefix of its
     * ascending partitions and revokes the rest. */
    int64_t *kept = borrow(&kept_quotas, sizeof(int64_t) * ((size_t)members * 2 + 1), 0);
    int32_t *unassigned = borrow(&kept_unassigned, sizeof(int32_t) * (size_t)(total + 1), 0);
    int32_t *buffer = PyMem_Malloc(sizeof(int32_t) * (size_t)(min_quota + 2));
    PyObject *result = NULL;
    if (kept == NULL || unassigned == NULL || buffer == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *remaining = kept + members;
    Py_ssize_t free_count = 0;
    for (int64_t g = 0; g < total; g++)
        if (w->owner[g] == 0)
            unassigned[free_count++] = (int32_t)g;
    Py_ssize_t count = free_count, wanted = 0;
    for (Py_ssize_t i = 0; i < members; i++) {
        int64_t owned = w->start[i + 1] - w->start[i], quota = min_quota;
        if (extra_left > 0 && (owned > min_quota || members - i == extra_left)) {
            quota++;
            extra_left--;
        }
        kept[i] = owned < quota ? owned : quota;
        remaining[i] = quota - kept[i];
        wanted += remaining[i];
        for (Py_ssize_t e = w->start[i] + kept[i]; e < w->start[i + 1]; e++)
            unassigned[count++] = w->entries[e];
    }
    if (wanted != count || total - owned_total != free_count) {
        result = Py_None; /* cannot happen for canonical input; let the Python builder judge */
        Py_INCREF(result);
        goto done;
    }

    /* The output: a copy of `template` (the members' dict, in member id order) with each value
     * written in place where it can be, else a dict filled member by member. */
    int in_place = 0;
#ifdef COHORT_DICT_LAYOUT
    ValueSlots slots;
    if (template != NULL && (result = PyDict_Copy(template)) != NULL) {
        in_place = copied_value_slots(result, PySequence_Fast_ITEMS(member_ids), members, &slots);
        if (!in_place)
            Py_CLEAR(result);
    } else if (template != NULL) {
        goto done;
    }
#else
    (void)template;
#endif
    if (!in_place && (result = _PyDict_NewPresized(members)) == NULL)
        goto done;
    Py_ssize_t dealt = 0;
    for (Py_ssize_t i = 0; i < members; i++) {
        PyObject *current = PyList_GET_ITEM(currents, i), *out;
        int64_t owned = w->start[i + 1] - w->start[i];
        if (kept[i] == owned && remaining[i] == 0) {
            if (w->not_dict[i]) {
                out = PyDict_New();
            } else {
                out = current;
                Py_INCREF(out);
            }
        } else {
            Py_ssize_t size = (Py_ssize_t)(kept[i] + remaining[i]);
            memcpy(buffer, w->entries + w->start[i], sizeof(int32_t) * (size_t)kept[i]);
            memcpy(buffer + kept[i], unassigned + dealt, sizeof(int32_t) * (size_t)remaining[i]);
            dealt += remaining[i];
            for (Py_ssize_t k = 1; k < size; k++) {
                if (buffer[k] < buffer[k - 1]) {
                    qsort(buffer, (size_t)size, sizeof(int32_t), compare_int32);
                    break;
                }
            }
            out = member_dict(w, buffer, size, topic_ids, hashes, ints);
        }
        if (out == NULL) {
            Py_CLEAR(result);
            goto done;
        }
#ifdef COHORT_DICT_LAYOUT
        if (in_place) {
            put_copied_value(&slots, i, out); /* the copy is private: no code could reach it since */
            continue;
        }
#endif
        int rc = PyDict_SetItem(result, PyList_GET_ITEM(member_ids, i), out);
        Py_DECREF(out);
        if (rc < 0) {
            Py_CLEAR(result);
            goto done;
        }
    }
    if (in_place && !PyObject_GC_IsTracked(result))
        PyObject_GC_Track(result); /* its values are dicts */
done:
    give_back(&kept_quotas, kept);
    give_back(&kept_unassigned, unassigned);
    PyMem_Free(buffer);
    return result;
}

PyDoc_STRVAR(assign_homogeneous_doc,
"assign_homogeneous(member_ids, currents, topic_ids, counts, hashes, ints) -> dict | None\n\n"
"The homogeneous uniform assignment for members in member id order with their current\n"
"assignments, over topics in topic order with their partition counts. `hashes` is a list of the\n"
"topic ids' hashes or None; `ints` a tuple (0, 1, ...) covering the widest topic. Members whose\n"
"assignment does not change get their current dict back. None when the current assignments are\n"
"not in canonical form (the Python builders handle those).");

static PyObject *
run_homogeneous(PyObject *member_ids, PyObject *currents, PyObject *topic_ids, PyObject *counts, PyObject *hashes,
                PyObject *ints, PyObject *template)
{
    Work w;
    memset(&w, 0, sizeof(w));
    w.members = PyList_GET_SIZE(currents);
    w.topics = PyList_GET_SIZE(topic_ids);
    if (PyList_GET_SIZE(member_ids) != w.members || PyList_GET_SIZE(counts) != w.topics
        || (hashes != Py_None && (!PyList_CheckExact(hashes) || PyList_GET_SIZE(hashes) != w.topics))) {
        PyErr_SetString(PyExc_ValueError, "member ids and currents, topic ids, counts and hashes must match");
        return NULL;
    }
    if (w.members == 0)
        return PyDict_New();

    PyObject *result = NULL;
    w.offsets = PyMem_Malloc(sizeof(int64_t) * (size_t)(w.topics + 1));
    w.hashes = PyMem_Malloc(sizeof(Py_hash_t) * (size_t)(w.topics + 1));
    if (w.offsets == NULL || w.hashes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (address_init(&w.table, (size_t)w.topics) < 0)
        goto done;
    w.offsets[0] = 0;
    int64_t widest = 0;
    for (Py_ssize_t t = 0; t < w.topics; t++) {
        Py_ssize_t count = PyLong_AsSsize_t(PyList_GET_ITEM(counts, t));
        if (count == -1 && PyErr_Occurred())
            goto done;
        if (count < 0) {
            PyErr_SetString(PyExc_ValueError, "a partition count is negative");
            goto done;
        }
        w.offsets[t + 1] = w.offsets[t] + count;
        if (count > widest)
            widest = count;
        w.hashes[t] = -1;
        address_put(&w.table, PyList_GET_ITEM(topic_ids, t), t);
    }
    w.total = w.offsets[w.topics];
    if (w.total >= INT32_MAX) {
        result = Py_None; /* beyond int32 partition numbers: the Python builder */
        Py_INCREF(result);
        goto done;
    }
    if (PyTuple_GET_SIZE(ints) < widest) {
        PyErr_SetString(PyExc_ValueError, "ints does not cover the widest topic");
        goto done;
    }
    w.owner = borrow(&kept_owner, sizeof(int32_t) * ((size_t)w.total + 1), 1);
    w.entries = borrow(&kept_entries, sizeof(int32_t) * (size_t)(w.total + 1), 0);
    w.start = borrow(&kept_start, sizeof(Py_ssize_t) * (size_t)(w.members + 1), 0);
    w.not_dict = PyMem_Calloc((size_t)w.members, 1);
    if (w.owner == NULL || w.entries == NULL || w.start == NULL || w.not_dict == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int scan = scan_currents(&w, currents, topic_ids);
    if (scan == SCAN_ERROR)
        goto done;
    if (scan == SCAN_NOT_CANONICAL) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    result = build(&w, member_ids, currents, topic_ids, hashes, ints, template);
done:
    PyMem_Free(w.offsets);
    PyMem_Free(w.hashes);
    PyMem_Free(w.table.slots);
    give_back(&kept_owner, w.owner);
    give_back(&kept_entries, w.entries);
    give_back(&kept_start, w.start);
    PyMem_Free(w.not_dict);
    Py_XDECREF(w.by_value);
    Py_XDECREF(w.by_value_keys);
    return result;
}

static PyObject *
assign_homogeneous(PyObject *module, PyObject *args)
{
    PyObject *member_ids, *currents, *topic_ids, *counts, *hashes, *ints;
    if (!PyArg_ParseTuple(args, "O!O!O!O!OO!:assign_homogeneous", &PyList_Type, &member_ids, &PyList_Type,
                          &currents, &PyList_Type, &topic_ids, &PyList_Type, &counts, &hashes, &PyTuple_Type,
                          &ints))
        return NULL;
    return run_homogeneous(member_ids, currents, topic_ids, counts, hashes, ints, NULL);
}

PyDoc_STRVAR(assign_homogeneous_members_doc,
"assign_homogeneous_members(members, topic_ids, counts, hashes, ints) -> dict | None | NotImplemented\n\n"
"`assign_homogeneous` for a dict of member id (str) -> member (with an `assignment` attribute),\n"
"as the coordinator keeps a group's view: in member id order, with joiners appended until they\n"
"are a sixteenth of it. The ids are put in order and the current assignments read here, in one\n"
"pass, instead of sorting and mapping them in Python. NotImplemented (found early) when a key is\n"
"not a str or the keys are not in that shape (the caller sorts them, `assign_homogeneous`).");

/* Out-of-order keys taken at the end of the dict: an eighth of it, and at least this many. */
#define TAIL_MIN 64

/* The slot offset of attribute `name` of `type` when it is a plain object slot (__slots__), or -1. */
static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *descr = PyObject_GetAttr((PyObject *)type, name);
    if (descr == NULL) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t offset = -1;
    /* Only a slot of this very type or a base of it: a descriptor borrowed from another class
     * would describe another layout. */
    if (Py_IS_TYPE(descr, &PyMemberDescr_Type) && PyType_IsSubtype(type, PyDescr_TYPE(descr))) {
        PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
        if (member->type == T_OBJECT_EX || member->type == T_OBJECT)
            offset = member->offset;
    }
    Py_DECREF(descr);
    return offset;
}

/* Where a __slots__ attribute sits in the last type read (offset -1: read through getattr). */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t offset;
} SlotCache;

/* `object.name` borrowed from its slot when the object's type keeps it in a plain slot (the
 * assignors' MemberSubscription; the offset found once per type), else NULL (no error set): an
 * unset slot or any other class, which getattr reads. getattr's generic lookup of a member's
 * assignment was about 8 % of a 100-member assignment. */
static inline PyObject *
slot_value(PyObject *object, PyObject *name, SlotCache *cache)
{
    if (Py_TYPE(object) != cache->type) {
        cache->type = Py_TYPE(object);
        cache->offset = slot_offset(cache->type, name);
    }
    return cache->offset >= 0 ? *(PyObject **)((char *)object + cache->offset) : NULL;
}

/* A new reference to `object.name`: `slot_value`, or getattr. */
static PyObject *
read_attribute(PyObject *object, PyObject *name, SlotCache *cache)
{
    PyObject *value = slot_value(object, name, cache);
    if (value == NULL)
        return PyObject_GetAttr(object, name);
    Py_INCREF(value);
    return value;
}

static PyObject *
assign_homogeneous_members(PyObject *module, PyObject *args)
{
    PyObject *members, *topic_ids, *counts, *hashes, *ints;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!:assign_homogeneous_members", &PyDict_Type, &members, &PyList_Type,
                          &topic_ids, &PyList_Type, &counts, &hashes, &PyTuple_Type, &ints))
        return NULL;
    static PyObject *assignment_name = NULL;
    if (assignment_name == NULL && (assignment_name = PyUnicode_InternFromString("assignment")) == NULL)
        return NULL;
    Py_ssize_t n = PyDict_GET_SIZE(members), got = 0, descent = n, tail_max = n / 8 + TAIL_MIN;
    PyObject *result = NULL, *member_ids = NULL, *currents = NULL;
    /* Owned references: each member's id and current assignment, in dict order, then in id order.
     * Reading an attribute may run Python code, so nothing borrowed from the dict is kept. */
    PyObject **keys = borrow(&kept_members, sizeof(PyObject *) * (size_t)(n + 1) * 2, 0);
    if (keys == NULL)
        return PyErr_NoMemory();
    PyObject **values = keys + n + 1;
    Py_ssize_t pos = 0;
    SlotCache slot = {NULL, -1};
    PyObject *key, *value;
    while (got < n && PyDict_Next(members, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key))
            goto not_implemented;
        Py_INCREF(key);
        PyObject *current = read_attribute(value, assignment_name, &slot);
        if (current == NULL) {
            Py_DECREF(key);
            goto done;
        }
        if (descent == n && got > 0 && PyUnicode_Compare(keys[got - 1], key) > 0)
            descent = got; /* the keys before are in order */
        if (got - descent >= tail_max) { /* not a sorted view with joiners appended */
            Py_DECREF(key);
            Py_DECREF(current);
            goto not_implemented;
        }
        keys[got] = key;
        values[got] = current;
        got++;
    }
    if (got != n || PyDict_GET_SIZE(members) != n) {
        PyErr_SetString(PyExc_RuntimeError, "members changed size during the assignment");
        goto done;
    }
    if (descent < n) {
        /* A sorted prefix and a tail (joiners): sort the tail by binary insertion, then merge. */
        Py_ssize_t tail = n - descent;
        PyObject **tk = PyMem_Malloc(sizeof(PyObject *) * (size_t)tail * 2);
        if (tk == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        PyObject **tv = tk + tail;
        for (Py_ssize_t a = 0; a < tail; a++) {
            PyObject *k = keys[descent + a];
            Py_ssize_t lo = 0, hi = a;
            while (lo < hi) {
                Py_ssize_t mid = (lo + hi) / 2;
                if (PyUnicode_Compare(tk[mid], k) > 0)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            memmove(tk + lo + 1, tk + lo, sizeof(PyObject *) * (size_t)(a - lo));
            memmove(tv + lo + 1, tv + lo, sizeof(PyObject *) * (size_t)(a - lo));
            tk[lo] = k;
            tv[lo] = values[descent + a];
        }
        /* merge from the back: the prefix keys[0, descent) and tk[0, tail) into keys[0, n) */
        Py_ssize_t p = descent - 1, t = tail - 1, out = n - 1;
        while (t >= 0) {
            if (p >= 0 && PyUnicode_Compare(keys[p], tk[t]) > 0) {
                keys[out] = keys[p];
                values[out] = values[p];
                p--;
            } else {
                keys[out] = tk[t];
                values[out] = tv[t];
                t--;
            }
            out--;
        }
        PyMem_Free(tk);
    }
    member_ids = PyList_New(n);
    currents = PyList_New(n);
    if (member_ids == NULL || currents == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) { /* the lists take the references over */
        PyList_SET_ITEM(member_ids, i, keys[i]);
        PyList_SET_ITEM(currents, i, values[i]);
    }
    got = 0;
    /* In member id order already, the members' dict is the output's template. */
    result = run_homogeneous(member_ids, currents, topic_ids, counts, hashes, ints, descent == n ? members : NULL);
    goto done;
not_implemented:
    result = Py_NotImplemented;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < got; i++) { /* still ours unless the lists took them */
        Py_DECREF(keys[i]);
        Py_DECREF(values[i]);
    }
    give_back(&kept_members, keys);
    Py_XDECREF(member_ids);
    Py_XDECREF(currents);
    return result;
}

/* ---- The heterogeneous builder's per-partition loops (`_uniform_heterogeneous._Builder`) ----
 *
 * That builder keeps its state in Python lists of ints: owners[t][p] (the member index owning
 * partition p of topic t, -1 for nobody), loads[m] and changed[m]. Its per-partition loops ran
 * as C-level maps of list methods at about 100 ns per partition and step, most of a 50,000
 * partition assignment; these functions run the same loops on those very lists. The Python code
 * around them (topic order, balancing) is unchanged, and its own loops stay the reference these
 * are tested against. */

/* An exact int that fits a Py_ssize_t, into *out; 0 for anything else (no error set). */
static int
exact_index(PyObject *item, Py_ssize_t *out)
{
    if (!PyLong_CheckExact(item))
        return 0;
    Py_ssize_t value = PyLong_AsSsize_t(item);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    *out = value;
    return 1;
}

/* Replace list[i] by a new int; 0 or -1 on an error. */
static int
store_int(PyObject *list, Py_ssize_t i, long long value)
{
    PyObject *item = PyLong_FromLongLong(value);
    if (item == NULL)
        return -1;
    PyObject *old = PyList_GET_ITEM(list, i);
    PyList_SET_ITEM(list, i, item);
    Py_DECREF(old);
    return 0;
}

static void
store_object(PyObject *list, Py_ssize_t i, PyObject *item)
{
    PyObject *old = PyList_GET_ITEM(list, i);
    Py_INCREF(item);
    PyList_SET_ITEM(list, i, item);
    Py_DECREF(old);
}

/* One member's current assignment as read once: per entry its topic index (-1 if unknown) and
 * its partitions, converted, in `parts`. */
typedef struct {
    Py_ssize_t topic, start, size;
} Entry;

typedef struct {
    Entry *entries;
    long long *parts;
    size_t entry_capacity, part_capacity;
} Reading;

static int
reading_reserve(Reading *r, size_t entries, size_t parts)
{
    if (entries > r->entry_capacity) {
        Entry *grown = PyMem_Realloc(r->entries, sizeof(Entry) * entries * 2);
        if (grown == NULL)
            return -1;
        r->entries = grown;
        r->entry_capacity = entries * 2;
    }
    if (parts > r->part_capacity) {
        long long *grown = PyMem_Realloc(r->parts, sizeof(long long) * parts * 2);
        if (grown == NULL)
            return -1;
        r->parts = grown;
        r->part_capacity = parts * 2;
    }
    return 0;
}

/* Reads a member's current assignment (an exact dict) into `r`: the number of entries, or -2 if
 * it is not a dict of exact tuples of ints that fit a long long (the Python loop takes it), or
 * -1 on an error. Everything that can run Python code (a by-value lookup runs the key's __hash__
 * and __eq__) happens here, before anything is written. */
static Py_ssize_t
read_current(PyObject *current, const AddressTable *table, PyObject *by_value, Py_ssize_t topics, Reading *r)
{
    Py_ssize_t pos = 0, count = 0;
    size_t filled = 0;
    PyObject *key, *value;
    if (reading_reserve(r, (size_t)PyDict_GET_SIZE(current), 0) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    while (PyDict_Next(current, &pos, &key, &value)) {
        if (!PyTuple_CheckExact(value) || count >= (Py_ssize_t)r->entry_capacity)
            return -2;
        Py_ssize_t size = PyTuple_GET_SIZE(value);
        if (reading_reserve(r, 0, filled + (size_t)size) < 0) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t k = 0; k < size; k++) {
            PyObject *item = PyTuple_GET_ITEM(value, k);
            int overflow = 0;
            if (!PyLong_CheckExact(item))
                return -2;
            r->parts[filled + (size_t)k] = PyLong_AsLongLongAndOverflow(item, &overflow);
            if (overflow)
                return -2;
        }
        Py_ssize_t t = address_get(table, key);
        if (t < 0) {
            Py_INCREF(key); /* held: the lookup may run Python code */
            PyObject *found = PyDict_GetItemWithError(by_value, key);
            Py_DECREF(key);
            if (found == NULL && PyErr_Occurred())
                return -1;
            if (found == NULL || !exact_index(found, &t) || t < 0 || t >= topics)
                t = -1;
        }
        r->entries[count].topic = t;
        r->entries[count].start = (Py_ssize_t)filled;
        r->entries[count].size = size;
        count++;
        filled += (size_t)size;
    }
    return count;
}

/* Bitmaps of the subscribed topic-index sets, one per distinct set object. */
typedef struct {
    AddressTable table;    /* set object -> bitmap number */
    unsigned char *bits;   /* bitmaps, `stride` bytes each */
    size_t stride, used, capacity;
} SetBits;

/* The bitmap of a set of topic indices; NULL with no error set if it is not a set of ints. */
static const unsigned char *
set_bits(SetBits *b, PyObject *set, Py_ssize_t topics)
{
    Py_ssize_t at = address_get(&b->table, set);
    if (at >= 0)
        return b->bits + (size_t)at * b->stride;
    if (!PyAnySet_CheckExact(set) || (b->table.used + 1) * 2 > b->table.mask + 1)
        return NULL;
    if (b->used == b->capacity) {
        size_t capacity = b->capacity ? b->capacity * 2 : 8;
        unsigned char *bits = PyMem_Realloc(b->bits, capacity * b->stride);
        if (bits == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        b->bits = bits;
        b->capacity = capacity;
    }
    unsigned char *mine = b->bits + b->used * b->stride;
    memset(mine, 0, b->stride);
    PyObject *iterator = PyObject_GetIter(set), *item;
    if (iterator == NULL)
        return NULL;
    while ((item = PyIter_Next(iterator)) != NULL) {
        Py_ssize_t t;
        if (exact_index(item, &t) && t >= 0 && t < topics)
            mine[t >> 3] |= (unsigned char)(1u << (t & 7));
        Py_DECREF(item);
    }
    Py_DECREF(iterator);
    if (PyErr_Occurred())
        return NULL;
    address_put(&b->table, set, (Py_ssize_t)b->used);
    b->used++;
    return mine;
}

PyDoc_STRVAR(hetero_keep_current_doc,
"hetero_keep_current(currents, start, subscribed, topic_ids, by_value, owners, loads, changed) -> int\n\n"
"_Builder.keep_current for the members from `start` on, in place; returns the index of the first\n"
"member it leaves to the Python loop (a current assignment that is not a dict of tuples of ints),\n"
"or len(currents) when it did them all.");

static PyObject *
hetero_keep_current(PyObject *self, PyObject *args)
{
    PyObject *currents, *subscribed, *topic_ids, *by_value, *owners, *loads, *changed;
    Py_ssize_t start;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!O!O!O!", &PyList_Type, &currents, &start, &PyList_Type, &subscribed,
                          &PyList_Type, &topic_ids, &PyDict_Type, &by_value, &PyList_Type, &owners,
                          &PyList_Type, &loads, &PyList_Type, &changed))
        return NULL;
    Py_ssize_t members = PyList_GET_SIZE(currents), topics = PyList_GET_SIZE(topic_ids);
    if (PyList_GET_SIZE(subscribed) != members || PyList_GET_SIZE(loads) != members
        || PyList_GET_SIZE(changed) != members || PyList_GET_SIZE(owners) != topics || start < 0) {
        PyErr_SetString(PyExc_ValueError, "currents, subscribed, loads and changed, or topic ids and owners, must match");
        return NULL;
    }
    for (Py_ssize_t t = 0; t < topics; t++) {
        if (!PyList_CheckExact(PyList_GET_ITEM(owners, t))) {
            PyErr_SetString(PyExc_TypeError, "owners must be lists");
            return NULL;
        }
    }
    AddressTable table = {NULL, 0, 0};
    SetBits sets;
    Reading reading;
    memset(&sets, 0, sizeof(sets));
    memset(&reading, 0, sizeof(reading));
    sets.stride = (size_t)topics / 8 + 1;
    PyObject *result = NULL, *me = NULL;
    if (address_init(&table, (size_t)topics) < 0
        || address_init(&sets.table, (size_t)(members - (start < members ? start : members)) / 2 + 1) < 0)
        goto done;
    for (Py_ssize_t t = 0; t < topics; t++)
        address_put(&table, PyList_GET_ITEM(topic_ids, t), t);

    Py_ssize_t i;
    for (i = start; i < members; i++) {
        PyObject *current = PyList_GET_ITEM(currents, i);
        if (!PyDict_CheckExact(current))
            break;
        if (PyDict_GET_SIZE(current) == 0)
            continue;
        Py_INCREF(current); /* reading it may run Python code (a key's __eq__) */
        Py_ssize_t entries = read_current(current, &table, by_value, topics, &reading);
        Py_DECREF(current);
        if (entries == -1)
            goto done;
        if (entries == -2)
            break;
        const unsigned char *bits = set_bits(&sets, PyList_GET_ITEM(subscribed, i), topics);
        if (bits == NULL) {
            if (PyErr_Occurred())
                goto done;
            break;
        }
        int is_changed = 0;
        long long count = 0;
        Py_CLEAR(me);
        for (Py_ssize_t e = 0; e < entries; e++) {
            Py_ssize_t t = reading.entries[e].topic, size = reading.entries[e].size;
            if (t < 0 || !(bits[t >> 3] & (1u << (t & 7))) || size == 0) {
                is_changed = 1;
                continue;
            }
            PyObject *owner = PyList_GET_ITEM(owners, t);
            Py_ssize_t n = PyList_GET_SIZE(owner);
            const long long *parts = reading.parts + reading.entries[e].start;
            long long previous = -1;
            for (Py_ssize_t k = 0; k < size; k++) {
                long long p = parts[k];
                if (p <= previous)
                    is_changed = 1;
                previous = p;
                Py_ssize_t o;
                if (p >= 0 && p < n && exact_index(PyList_GET_ITEM(owner, (Py_ssize_t)p), &o) && o == -1) {
                    if (me == NULL && (me = PyLong_FromSsize_t(i)) == NULL)
                        goto done;
                    store_object(owner, (Py_ssize_t)p, me);
                    count++;
                } else {
                    is_changed = 1;
                }
            }
        }
        if (count) {
            Py_ssize_t load;
            if (!exact_index(PyList_GET_ITEM(loads, i), &load)) {
                PyErr_SetString(PyExc_TypeError, "loads must be ints");
                goto done;
            }
            if (store_int(loads, i, (long long)load + count) < 0)
                goto done;
        }
        if (is_changed)
            store_object(changed, i, Py_True);
    }
    result = PyLong_FromSsize_t(i);
done:
    Py_XDECREF(me);
    PyMem_Free(table.slots);
    PyMem_Free(sets.table.slots);
    PyMem_Free(sets.bits);
    PyMem_Free(reading.entries);
    PyMem_Free(reading.parts);
    return result;
}

typedef struct {
    long long load;
    Py_ssize_t position; /* in the topic's subscriber list (ascending member indices) */
    Py_ssize_t member;
} Subscriber;

static int
compare_subscribers(const void *a, const void *b)
{
    const Subscriber *x = a, *y = b;
    if (x->load != y->load)
        return (x->load > y->load) - (x->load < y->load);
    return (x->position > y->position) - (x->position < y->position);
}

PyDoc_STRVAR(hetero_assign_free_doc,
"hetero_assign_free(owner, free, subscribers, loads, changed) -> None\n\n"
"_Builder.assign_unassigned for one topic, in place: its unowned partitions `free` (a list, or\n"
"None for all of them in order) go to its subscribers sorted by (load, member index), served\n"
"round-robin over the least-loaded range, which widens as its level rises.");

static PyObject *
hetero_assign_free(PyObject *self, PyObject *args)
{
    PyObject *owner, *free, *subscribers, *loads, *changed;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!OO!O!O!", &PyList_Type, &owner, &free, &PyList_Type, &subscribers,
                          &PyList_Type, &loads, &PyList_Type, &changed))
        return NULL;
    if (free != Py_None && !PyList_CheckExact(free)) {
        PyErr_SetString(PyExc_TypeError, "free must be a list or None");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(owner), count = PyList_GET_SIZE(subscribers);
    Py_ssize_t need = free == Py_None ? n : PyList_GET_SIZE(free), members = PyList_GET_SIZE(loads);
    if (need == 0)
        Py_RETURN_NONE;
    if (count == 0 || PyList_GET_SIZE(changed) != members) {
        PyErr_SetString(PyExc_ValueError, "a topic with free partitions needs subscribers; loads and changed must match");
        return NULL;
    }
    Subscriber *ordered = PyMem_Malloc(sizeof(Subscriber) * (size_t)count);
    Py_ssize_t *picks = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)need * 2), *where = picks + need;
    long long *added = PyMem_Calloc((size_t)count, sizeof(long long));
    PyObject *result = NULL;
    if (ordered == NULL || picks == NULL || added == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        Py_ssize_t m, load;
        if (!exact_index(PyList_GET_ITEM(subscribers, j), &m) || m < 0 || m >= members
            || !exact_index(PyList_GET_ITEM(loads, m), &load)) {
            PyErr_SetString(PyExc_ValueError, "subscribers must be member indices with int loads");
            goto done;
        }
        ordered[j].load = load;
        ordered[j].position = j;
        ordered[j].member = m;
    }
    qsort(ordered, (size_t)count, sizeof(Subscriber), compare_subscribers);
    Py_ssize_t picked = 0, end = 0;
    long long level = ordered[0].load - 1;
    while (picked < need) {
        level++;
        while (end < count && ordered[end].load == level)
            end++;
        Py_ssize_t take = end < need - picked ? end : need - picked;
        for (Py_ssize_t k = 0; k < take; k++)
            picks[picked++] = k;
    }
    for (Py_ssize_t k = 0; k < need; k++) { /* every partition checked before anything is written */
        where[k] = k;
        if (free != Py_None
            && (!exact_index(PyList_GET_ITEM(free, k), &where[k]) || where[k] < 0 || where[k] >= n)) {
            PyErr_SetString(PyExc_ValueError, "free partitions must be ints within the topic");
            goto done;
        }
    }
    for (Py_ssize_t k = 0; k < need; k++) {
        store_object(owner, where[k], PyList_GET_ITEM(subscribers, ordered[picks[k]].position));
        added[picks[k]]++;
    }
    for (Py_ssize_t j = 0; j < count; j++) {
        if (added[j] == 0)
            continue;
        if (store_int(loads, ordered[j].member, ordered[j].load + added[j]) < 0)
            goto done;
        store_object(changed, ordered[j].member, Py_True);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(ordered);
    PyMem_Free(picks);
    PyMem_Free(added);
    return result;
}

PyDoc_STRVAR(hetero_scatter_doc,
"hetero_scatter(targets, owner, changed, topic_id, singles) -> bool\n\n"
"_Builder.changed_assignments for one topic: each changed owner's partitions of it, ascending,\n"
"as targets[owner][topic_id] (one-partition entries share the tuples of `singles`). False, with\n"
"nothing written, when a partition has no owner.");

static PyObject *
hetero_scatter(PyObject *self, PyObject *args)
{
    PyObject *targets, *owner, *changed, *key, *singles;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!", &PyList_Type, &targets, &PyList_Type, &owner, &PyList_Type, &changed,
                          &key, &PyTuple_Type, &singles))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(owner), members = PyList_GET_SIZE(targets);
    if (PyList_GET_SIZE(changed) != members) {
        PyErr_SetString(PyExc_ValueError, "targets and changed must match");
        return NULL;
    }
    Py_ssize_t *held = PyMem_Calloc((size_t)members + 1, sizeof(Py_ssize_t));
    Py_ssize_t *of = PyMem_Malloc(sizeof(Py_ssize_t) * ((size_t)n + 1));
    PyObject **tuples = NULL, *result = NULL;
    if (held == NULL || of == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t writes = 0;
    for (Py_ssize_t p = 0; p < n; p++) {
        Py_ssize_t o;
        if (!exact_index(PyList_GET_ITEM(owner, p), &o) || o < -1 || o >= members) {
            PyErr_SetString(PyExc_ValueError, "owners must be member indices or -1");
            goto done;
        }
        if (o == -1) {
            result = Py_False;
            Py_INCREF(result);
            goto done;
        }
        int c = PyObject_IsTrue(PyList_GET_ITEM(changed, o));
        if (c < 0)
            goto done;
        of[p] = c ? o : -1;
        if (c) {
            if (!PyDict_CheckExact(PyList_GET_ITEM(targets, o))) {
                PyErr_SetString(PyExc_TypeError, "a changed member's target must be a dict");
                goto done;
            }
            held[o]++;
            writes++;
        }
    }
    if (writes) {
        Py_hash_t hash = PyObject_Hash(key);
        if (hash == -1 && PyErr_Occurred())
            goto done;
        tuples = PyMem_Calloc((size_t)members + 1, sizeof(PyObject *));
        if (tuples == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t p = 0; p < n; p++) {
            Py_ssize_t o = of[p];
            if (o < 0)
                continue;
            PyObject *value;
            if (tuples[o] == NULL && held[o] == 1 && p < PyTuple_GET_SIZE(singles)) {
                value = PyTuple_GET_ITEM(singles, p);
                Py_INCREF(value);
            } else {
                if (tuples[o] == NULL) {
                    if ((tuples[o] = PyTuple_New(held[o])) == NULL)
                        goto done;
                    held[o] = 0; /* from now on: how many are filled */
                }
                PyObject *item = PyLong_FromSsize_t(p);
                if (item == NULL)
                    goto done;
                PyTuple_SET_ITEM(tuples[o], held[o]++, item);
                if (held[o] < PyTuple_GET_SIZE(tuples[o]))
                    continue;
                value = tuples[o];
                tuples[o] = NULL;
                PyObject_GC_UnTrack(value); /* ints only, as for the homogeneous builder's tuples */
            }
            int rc = set_with_hash(PyList_GET_ITEM(targets, o), key, value, hash);
            Py_DECREF(value);
            if (rc < 0)
                goto done;
        }
    }
    result = Py_True;
    Py_INCREF(result);
done:
    if (tuples != NULL) {
        for (Py_ssize_t o = 0; o < members; o++)
            Py_XDECREF(tuples[o]);
        PyMem_Free(tuples);
    }
    PyMem_Free(held);
    PyMem_Free(of);
    return result;
}

PyDoc_STRVAR(values_by_hash_doc,
"values_by_hash(mapping, keys, hashes) -> list\n\n"
"[mapping.get(key) for key in keys], each looked up with its given hash (hash(key), computed by\n"
"the caller once and kept): a uuid.UUID computes its hash in Python code on every lookup.");

static PyObject *
values_by_hash(PyObject *self, PyObject *args)
{
    PyObject *mapping, *keys, *hashes;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O!O!", &PyDict_Type, &mapping, &PyList_Type, &keys, &PyList_Type, &hashes))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(hashes) != n) {
        PyErr_SetString(PyExc_ValueError, "keys and hashes must match");
        return NULL;
    }
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *value;
        Py_ssize_t hash = PyLong_AsSsize_t(PyList_GET_ITEM(hashes, i));
        if (hash == -1 && PyErr_Occurred())
            goto fail;
#if PY_VERSION_HEX < 0x030D0000
        value = _PyDict_GetItem_KnownHash(mapping, key, (Py_hash_t)hash);
#else
        (void)hash;
        value = PyDict_GetItemWithError(mapping, key);
#endif
        if (value == NULL) {
            if (PyErr_Occurred())
                goto fail;
            value = Py_None;
        }
        Py_INCREF(value);
        PyList_SET_ITEM(out, i, value);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

PyDoc_STRVAR(fromkeys_each_doc,
"fromkeys_each(keys, values) -> list | NotImplemented\n\n"
"[dict.fromkeys(keys, value) for value in values], keys a dict: the first dict is built with the\n"
"keys' stored hashes, every other one is a copy of it (the key table copied whole) whose values\n"
"are then written where its entries lie (on Python 3.11; set key by key elsewhere, or if\n"
"a copy is not laid out as expected). A dict whose value is a tuple of ints is left\n"
"untracked by the cyclic collector, as `member_dict`'s are. NotImplemented on Python 3.13 and\n"
"later, which keep the known-hash calls private.");

/* Whether `value` is a tuple holding ints only (it cannot be part of a reference cycle). */
static int
int_tuple(PyObject *value)
{
    if (!PyTuple_CheckExact(value))
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++)
        if (!PyLong_CheckExact(PyTuple_GET_ITEM(value, i)))
            return 0;
    return 1;
}

static PyObject *
fromkeys_each(PyObject *self, PyObject *args)
{
    PyObject *keys, *values;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!O", &PyDict_Type, &keys, &values))
        return NULL;
#if PY_VERSION_HEX >= 0x030D0000
    (void)keys;
    (void)values;
    Py_RETURN_NOTIMPLEMENTED;
#else
    PyObject *seq = PySequence_Fast(values, "fromkeys_each: values must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), size = PyDict_GET_SIZE(keys);
    PyObject *out = PyList_New(n);
    PyObject **key = PyMem_Malloc(sizeof(PyObject *) * (size_t)(size ? size : 1));
    Py_hash_t *hash = PyMem_Malloc(sizeof(Py_hash_t) * (size_t)(size ? size : 1));
    PyObject *first = NULL; /* the first dict built: the others are copies of it */
    Py_ssize_t pos = 0, i = 0, held = 0;
    PyObject *k, *v;
    Py_hash_t h;
    if (out == NULL || key == NULL || hash == NULL) {
        if (out != NULL)
            PyErr_NoMemory();
        goto fail;
    }
    /* Held, as the values are: comparing keys of equal hashes runs their __eq__, which could
     * change `keys` or `values`. */
    while (held < size && _PyDict_Next(keys, &pos, &k, &v, &h)) {
        Py_INCREF(k);
        key[held] = k;
        hash[held++] = h;
    }
    size = held;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *value = PySequence_Fast_GET_ITEM(seq, j);
        PyObject *d = first == NULL ? _PyDict_NewPresized(size) : PyDict_Copy(first);
        if (d == NULL)
            goto fail;
        PyList_SET_ITEM(out, j, d);
        Py_INCREF(value);
        int rc = 0, placed = 0;
#ifdef COHORT_DICT_LAYOUT
        placed = first != NULL && set_copied_values(d, key, size, value);
#endif
        for (i = 0; i < size && rc == 0 && !placed; i++)
            rc = set_with_hash(d, key[i], value, hash[i]);
        if (rc == 0 && int_tuple(value))
            PyObject_GC_UnTrack(d); /* topic ids and a tuple of ints: no cycle through it */
        else if (rc == 0 && placed && !PyObject_GC_IsTracked(d))
            PyObject_GC_Track(d); /* as an insert of a value that may hold a cycle tracks it */
        Py_DECREF(value);
        if (rc < 0)
            goto fail;
        if (first == NULL)
            first = d;
    }
    for (i = 0; i < held; i++)
        Py_DECREF(key[i]);
    PyMem_Free(key);
    PyMem_Free(hash);
    Py_DECREF(seq);
    return out;
fail:
    for (i = 0; i < held; i++)
        Py_DECREF(key[i]);
    PyMem_Free(key);
    PyMem_Free(hash);
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
#endif
}

PyDoc_STRVAR(copy_with_values_doc,
"copy_with_values(template, keys, values) -> dict | NotImplemented\n\n"
"{keys[i]: values[i]}, with a new empty dict for every key past the values, made as a copy of\n"
"`template` (a dict whose keys are `keys`, in that order) with the values written where its\n"
"entries lie. NotImplemented when `template` is not such a dict (another order, a hole left by a\n"
"deleted key), or where CPython's dict layout is not known (any Python but 3.11): the caller\n"
"builds the dict itself then. Inserting a hundred member ids one by one cost a tenth of a\n"
"hundred-member range assignment.");

static PyObject *
copy_with_values(PyObject *self, PyObject *args)
{
    PyObject *template, *keys, *values;
    (void)self;
    if (!PyArg_ParseTuple(args, "OO!O!", &template, &PyList_Type, &keys, &PyList_Type, &values))
        return NULL;
#ifndef COHORT_DICT_LAYOUT
    Py_RETURN_NOTIMPLEMENTED;
#else
    Py_ssize_t n = PyList_GET_SIZE(keys), given = PyList_GET_SIZE(values), made = 0;
    ValueSlots slots;
    if (!PyDict_CheckExact(template) || PyDict_GET_SIZE(template) != n || given > n)
        Py_RETURN_NOTIMPLEMENTED;
    if (n == 0)
        return PyDict_New();
    if (!value_slots(template, PySequence_Fast_ITEMS(keys), n, &slots))
        Py_RETURN_NOTIMPLEMENTED; /* another order or a hole: known before anything is made */
    /* Every new value is held first and the copy made last: allocating can run a collection and
     * finalisers (Python code, which could change the lists), writing into the copy cannot. */
    PyObject **news = PyMem_Malloc(sizeof(PyObject *) * (size_t)n);
    PyObject *d = NULL;
    if (news == NULL)
        return PyErr_NoMemory();
    for (; made < given; made++) {
        news[made] = PyList_GET_ITEM(values, made);
        Py_INCREF(news[made]);
    }
    for (; made < n; made++)
        if ((news[made] = PyDict_New()) == NULL)
            goto fail;
    if ((d = PyDict_Copy(template)) == NULL)
        goto fail;
    if (PyList_GET_SIZE(keys) != n || !copied_value_slots(d, PySequence_Fast_ITEMS(keys), n, &slots)) {
        for (Py_ssize_t i = 0; i < made; i++)
            Py_DECREF(news[i]);
        PyMem_Free(news);
        Py_DECREF(d);
        Py_RETURN_NOTIMPLEMENTED;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        put_copied_value(&slots, i, news[i]); /* the copy now holds what `news` held */
    PyMem_Free(news);
    if (!PyObject_GC_IsTracked(d))
        PyObject_GC_Track(d); /* its values are dicts */
    return d;
fail:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(news[i]);
    PyMem_Free(news);
    return NULL;
#endif
}

PyDoc_STRVAR(all_none_doc,
"all_none(objects, first, second) -> bool\n\n"
"Whether attributes `first` and `second` are None on every object of the list. Objects of a\n"
"__slots__ class (the assignors' MemberSubscription) are read at their slots' offsets, any other\n"
"object through getattr. A Python loop over a hundred members' two attributes cost about a fifth\n"
"of a small group's range assignment.");

static PyObject *
all_none(PyObject *self, PyObject *args)
{
    PyObject *objects, *first, *second;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!UU", &PyList_Type, &objects, &first, &second))
        return NULL;
    PyObject *names[2] = {first, second};
    SlotCache slots[2] = {{NULL, -1}, {NULL, -1}};
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); i++) {
        PyObject *item = PyList_GET_ITEM(objects, i);
        for (int k = 0; k < 2; k++) {
            PyObject *value = slot_value(item, names[k], &slots[k]);
            int none;
            if (value != NULL) {
                none = value == Py_None;
            } else {
                if ((value = PyObject_GetAttr(item, names[k])) == NULL)
                    return NULL;
                none = value == Py_None;
                Py_DECREF(value);
            }
            if (!none)
                Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"assign_homogeneous", assign_homogeneous, METH_VARARGS, assign_homogeneous_doc},
    {"assign_homogeneous_members", assign_homogeneous_members, METH_VARARGS, assign_homogeneous_members_doc},
    {"hetero_keep_current", hetero_keep_current, METH_VARARGS, hetero_keep_current_doc},
    {"hetero_assign_free", hetero_assign_free, METH_VARARGS, hetero_assign_free_doc},
    {"hetero_scatter", hetero_scatter, METH_VARARGS, hetero_scatter_doc},
    {"values_by_hash", values_by_hash, METH_VARARGS, values_by_hash_doc},
    {"all_none", all_none, METH_VARARGS, all_none_doc},
    {"fromkeys_each", fromkeys_each, METH_VARARGS, fromkeys_each_doc},
    {"copy_with_values", copy_with_values, METH_VARARGS, copy_with_values_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "cohort.assignors._uniform_native",
    "The uniform assignor's homogeneous builder for canonical input, and the heterogeneous builder's per-partition loops, in C.", -1, methods,
};

PyMODINIT_FUNC
PyInit__uniform_native(void)
{
    return PyModule_Create(&module);
}
