/* dialogs.c: a fixed table of the dialogs set up through the edge (dialogs.h).
 *
 * Keyed by a 64-bit hash of the Call-ID and the two tags (in byte order, so a request from
 * either side finds it), 4-way set associative; a new dialog takes a free or expired slot of its
 * set, else the one least recently used. The memory is fixed whatever the peers send, and only
 * the next hop's answers to INVITEs add dialogs (handle.c checks where a response came from). Shared by the edge's threads: each slot is two
 * relaxed atomics (a torn pair at worst loses one entry, which only costs that dialog its
 * in-dialog standing). */
#define _GNU_SOURCE /* clock_gettime (sipmsg.h) */

#include "dialogs.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sipmsg.h"

struct dialogs {
    size_t sets;
    _Atomic uint64_t *key;
    _Atomic uint32_t *seen; /* second of the monotonic clock it was last used, + 1 (0: free) */
};

enum { WAYS = 4 };

dialogs_t *dialogs_new(size_t slots) {
    if (slots < WAYS || (slots & (slots - 1))) return NULL;
    dialogs_t *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->sets = slots / WAYS;
    d->key = calloc(slots, sizeof *d->key);
    d->seen = calloc(slots, sizeof *d->seen);
    if (!d->key || !d->seen) {
        dialogs_free(d);
        return NULL;
    }
    return d;
}

void dialogs_free(dialogs_t *d) {
    if (!d) return;
    free((void *)d->key);
    free((void *)d->seen);
    free(d);
}

static uint64_t fnv(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull; /* a separator, so "ab"+"c" is not "a"+"bc" */
}

/* The dialog key of a request or response from its Call-ID, From and To values (0: it names
 * no dialog: no Call-ID or a tag missing). */
static uint64_t dialog_key_of(const char *c, size_t cl, const char *f, size_t fl, const char *t, size_t tl) {
    size_t ftl = 0, ttl = 0;
    const char *tt = t ? header_tag(t, tl, &ttl) : NULL;
    if (!tt || !c || !cl || !f) return 0;
    const char *ft = header_tag(f, fl, &ftl);
    if (!ft) return 0;
    size_t n = ftl < ttl ? ftl : ttl;
    int cmp = memcmp(ft, tt, n);
    if (cmp > 0 || (cmp == 0 && ftl > ttl)) { /* the two tags in byte order */
        const char *x = ft;
        ft = tt;
        tt = x;
        size_t y = ftl;
        ftl = ttl;
        ttl = y;
    }
    uint64_t h = fnv(0xcbf29ce484222325ull, c, cl);
    h = fnv(h, ft, ftl);
    h = fnv(h, tt, ttl);
    return h ? h : 1;
}

static uint32_t second(uint64_t now_ns) {
    return (uint32_t)(now_ns / 1000000000ull) + 1;
}

/* Kept: used within DIALOG_IDLE_S (a `seen` a little after `now`, stored by a thread whose
 * clock crossed the second first, is recent too). */
static int live(uint32_t seen, uint32_t now) {
    return seen && (int32_t)(now - seen) < (int32_t)DIALOG_IDLE_S;
}

void dialogs_answered(dialogs_t *d, const char *msg, size_t len, uint64_t now_ns) {
    unsigned status = status_code(msg, len);
    /* a 2xx, or a 1xx with a To tag (an early dialog: its PRACK and UPDATE, RFC 3262, 3311) */
    if (!d || status < 101 || status > 299) return;
    msg_ids f;
    find_ids(msg, len, &f);
    /* CSeq: 1*DIGIT LWS Method */
    const char *q = f.cseq;
    size_t ql = f.cseq_len, k = 0;
    while (k < ql && q[k] >= '0' && q[k] <= '9') k++;
    while (k < ql && (q[k] == ' ' || q[k] == '\t')) k++;
    if (!q || ql - k < 6 || strncmp(q + k, "INVITE", 6) != 0) return;
    if (ql - k > 6 && q[k + 6] != ' ' && q[k + 6] != '\t' && q[k + 6] != '\r') return;
    uint64_t key = dialog_key_of(f.call_id, f.call_id_len, f.from, f.from_len, f.to, f.to_len);
    if (!key) return;
    uint32_t now = second(now_ns);
    size_t base = (size_t)(key % d->sets) * WAYS, victim = base;
    uint32_t oldest = UINT32_MAX;
    for (size_t i = base; i < base + WAYS; i++) {
        uint32_t seen = atomic_load_explicit(&d->seen[i], memory_order_relaxed);
        if (atomic_load_explicit(&d->key[i], memory_order_relaxed) == key && live(seen, now)) {
            atomic_store_explicit(&d->seen[i], now, memory_order_relaxed);
            return; /* a retransmitted 2xx, or a refresh */
        }
        uint32_t age = live(seen, now) ? seen : 0; /* free and expired slots first */
        if (age < oldest) {
            oldest = age;
            victim = i;
        }
    }
    atomic_store_explicit(&d->key[victim], key, memory_order_relaxed);
    atomic_store_explicit(&d->seen[victim], now, memory_order_relaxed);
}

int dialogs_known(dialogs_t *d, const char *call_id, size_t call_id_len, const char *from, size_t from_len, const char *to,
                  size_t to_len, uint64_t now_ns) {
    if (!d) return 0;
    uint64_t key = dialog_key_of(call_id, call_id_len, from, from_len, to, to_len);
    if (!key) return 0;
    uint32_t now = second(now_ns);
    size_t base = (size_t)(key % d->sets) * WAYS;
    for (size_t i = base; i < base + WAYS; i++) {
        if (atomic_load_explicit(&d->key[i], memory_order_relaxed) != key) continue;
        if (!live(atomic_load_explicit(&d->seen[i], memory_order_relaxed), now)) return 0;
        atomic_store_explicit(&d->seen[i], now, memory_order_relaxed);
        return 1;
    }
    return 0;
}

size_t dialogs_count(const dialogs_t *d, uint64_t now_ns) {
    if (!d) return 0;
    uint32_t now = second(now_ns);
    size_t n = 0;
    for (size_t i = 0; i < d->sets * WAYS; i++) {
        n += live(atomic_load_explicit((_Atomic uint32_t *)&d->seen[i], memory_order_relaxed), now);
    }
    return n;
}
