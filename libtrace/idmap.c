/*
 * idmap.c - open addressing with linear probing, kept at most 5/8 full so
 * probe sequences stay short. Growing rehashes from the stored hashes, so the
 * caller's objects are never consulted while growing.
 */
#include "idmap.h"

#include <assert.h>
#include <stdlib.h>

uint32_t idmap_find(const struct idmap *m, uint64_t hash, idmap_eq_fn eq, const void *key)
{
        if (!m->slots)
                return 0;
        /* The map is never full, so the probe ends at an empty slot. */
        for (size_t i = (size_t)hash & m->mask;; i = (i + 1) & m->mask) {
                const struct idmap_slot *s = &m->slots[i];
                if (s->id == 0)
                        return 0;
                if (s->hash == hash && eq(key, s->id))
                        return s->id;
        }
}

static void place(struct idmap_slot *slots, size_t mask, uint64_t hash, uint32_t id)
{
        size_t i = (size_t)hash & mask;
        while (slots[i].id != 0)
                i = (i + 1) & mask;
        slots[i].hash = hash;
        slots[i].id = id;
}

static int grow(struct idmap *m)
{
        size_t cap = m->slots ? (m->mask + 1) * 2 : 64;
        if (cap == 0 || cap > SIZE_MAX / sizeof(struct idmap_slot))
                return -1;
        struct idmap_slot *slots = calloc(cap, sizeof(*slots));
        if (!slots)
                return -1;
        if (m->slots) {
                for (size_t i = 0; i <= m->mask; i++)
                        if (m->slots[i].id != 0)
                                place(slots, cap - 1, m->slots[i].hash, m->slots[i].id);
                free(m->slots);
        }
        m->slots = slots;
        m->mask = cap - 1;
        return 0;
}

int idmap_insert(struct idmap *m, uint64_t hash, uint32_t id)
{
        assert(id != 0);
        if (!m->slots || (m->count + 1) * 8 > (m->mask + 1) * 5) {
                if (grow(m) < 0)
                        return -1;
        }
        place(m->slots, m->mask, hash, id);
        m->count++;
        return 0;
}

/*
 * Linear probing without tombstones: the entries after the hole that could
 * not sit where they wanted because of it move back into it (backward
 * shift), so every probe still ends at the first empty slot.
 */
void idmap_remove(struct idmap *m, uint64_t hash, uint32_t id)
{
        if (!m->slots)
                return;
        size_t i = (size_t)hash & m->mask;
        while (m->slots[i].id != id) {
                if (m->slots[i].id == 0)
                        return;
                i = (i + 1) & m->mask;
        }
        for (size_t j = i;;) {
                j = (j + 1) & m->mask;
                if (m->slots[j].id == 0)
                        break;
                size_t home = (size_t)m->slots[j].hash & m->mask;
                /* Stays when its home lies cyclically in (i, j]. */
                bool stays = i < j ? (i < home && home <= j) : (i < home || home <= j);
                if (!stays) {
                        m->slots[i] = m->slots[j];
                        i = j;
                }
        }
        m->slots[i].id = 0;
        m->slots[i].hash = 0;
        m->count--;
}

void idmap_free(struct idmap *m)
{
        free(m->slots);
        m->slots = NULL;
        m->mask = 0;
        m->count = 0;
}
