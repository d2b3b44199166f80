/*
 * idmap.h - the open-addressing hash index behind the writer's interning of
 * strings, frames, stacks and threads. The index stores only (hash, id)
 * pairs; the objects themselves live in the caller's arrays, and equality is
 * decided by a callback that compares the key with object `id`. Ids are
 * non-zero (0 marks an empty slot). Internal to libtrace.
 */
#ifndef PYFLAME_IDMAP_H
#define PYFLAME_IDMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct idmap_slot {
        uint64_t hash;
        uint32_t id; /* 0: empty */
};

/* Zero-initialise; release with idmap_free(). */
struct idmap {
        struct idmap_slot *slots;
        size_t mask; /* capacity - 1; capacity is a power of two */
        size_t count;
};

/* Does object `id` equal the key the caller is looking up? */
typedef bool (*idmap_eq_fn)(const void *key, uint32_t id);

/*
 * Look up the object equal to `key` (whose hash is `hash`). Returns its id, or
 * 0 when absent.
 */
uint32_t idmap_find(const struct idmap *m, uint64_t hash, idmap_eq_fn eq, const void *key);

/*
 * Add `id` (non-zero, not yet present) under `hash`. Returns 0, or -1 when out
 * of memory (the map is then unchanged).
 */
int idmap_insert(struct idmap *m, uint64_t hash, uint32_t id);

/* Remove `id`, stored under `hash` (nothing when absent). */
void idmap_remove(struct idmap *m, uint64_t hash, uint32_t id);

void idmap_free(struct idmap *m);

#endif
