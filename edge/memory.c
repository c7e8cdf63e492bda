/* memory.c: the decision memory, so that a retransmission gets what its original got.
 *
 * Over UDP a UAC sends a request again until it hears back (Timer A/E). Every
 * request but ACK and CANCEL is shown once to libloadctl's retransmission detector (RFC 3261
 * transaction key, remembered 64·T1); only originals are classified. What was done with one
 * (forwarded, answered 503, shed for overload control, dropped) is remembered per worker in a
 * 4-way set-associative table (DECIDED entries, 32 s), and its retransmissions get the same without
 * being classified again: forwarded with the same branch (RFC 3261 §16.11: "a retransmitted
 * request MUST be forwarded to the same destination each time it is processed"), or the same
 * 503. So a retransmission takes no second rate token and no second window slot (RFC 7200
 * limits new requests; a window slot is per transaction), and the retransmitted INVITE of an
 * admitted call is not answered 503 while the UAS has the original. A retransmission whose
 * decision is not remembered (evicted, its original before a restart, or a 302: its Contacts
 * are not kept) is classified like an original; SIGUSR1 counts originals, retransmissions,
 * repeated and unremembered ones. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <stdatomic.h>
#include <stdint.h>

#include "edge.h"
#include "memory.h"
#include "window.h"

/* The key of a request's transaction in the decision memory: Call-ID, CSeq (number and method)
 * and the top Via's branch, as sv_check found them. The detector's RFC 3261 key (branch,
 * sent-by, method, CSeq number) is not exposed; this one is the same for every copy of a
 * request, and the memory is asked only about requests the detector has already called
 * retransmissions. The Call-ID keeps apart requests of RFC 2543 clients, whose branches may be
 * missing or not unique. */
unsigned long decision_key(const sv_result *sv) {
    unsigned long h = hash_bytes(sv->call_id.p ? sv->call_id.p : "", sv->call_id.n, sv->cseq.p ? sv->cseq.p : "", sv->cseq.n);
    return h ^ (hash_bytes(sv->branch.p ? sv->branch.p : "", sv->branch.n, "", 0) * 0x9e3779b97f4a7c15ul);
}

/* The decision-memory entry of transaction `key` in the calling worker's own table: its own
 * when it has one, else the oldest of its set (the one a new decision replaces). */
decided_t *decision_slot(decided_t *table, unsigned long key) {
    decided_t *set = &table[(key % (DECIDED / DECIDED_WAYS)) * DECIDED_WAYS];
    decided_t *oldest = &set[0];
    uint64_t oldest_info = UINT64_MAX;
    for (int i = 0; i < DECIDED_WAYS; i++) {
        if (atomic_load_explicit(&set[i].hash, memory_order_relaxed) == key) return &set[i];
        uint64_t info = atomic_load_explicit(&set[i].info, memory_order_relaxed);
        if (info < oldest_info) {
            oldest = &set[i];
            oldest_info = info;
        }
    }
    return oldest;
}

/* Transaction `key`'s entry in `table`, read consistently although its worker may be writing it
 * (the hash is the sequence: read before and after the rest): 1 and *out, or 0. */
static int decision_read(decided_t *table, unsigned long key, decision_t *out) {
    decided_t *set = &table[(key % (DECIDED / DECIDED_WAYS)) * DECIDED_WAYS];
    for (int i = 0; i < DECIDED_WAYS; i++) {
        if (atomic_load_explicit(&set[i].hash, memory_order_acquire) != key) continue;
        uint64_t info = atomic_load_explicit(&set[i].info, memory_order_relaxed);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&set[i].hash, memory_order_relaxed) != key) return 0;
        out->kind = (int)(info & 0xff);
        out->status = (unsigned)((info >> 8) & 0xffff);
        out->at_ns = (info >> 24) * 1000000ull;
        return out->kind != DM_NONE;
    }
    return 0;
}

/* What was done with transaction `key`'s original: in the worker's own memory, where the
 * kernel's reuseport hash keeps a source's retransmissions, else in another UDP worker's (the
 * source's port changed: a NAT rebinding, a client's new socket). */
int decision_recall(worker_t *w, unsigned long key, decision_t *out) {
    if (decision_read(w->decided, key, out)) return 1;
    for (unsigned k = 0; k < w->e->nudp; k++) {
        worker_t *o = w->e->udps[k];
        if (o != w && decision_read(o->decided, key, out)) return 1;
    }
    return 0;
}

/* Records what was done with a request for its retransmissions (`slot` NULL: the request was
 * not observed by the detector, nothing is recorded). Only the slot's own worker writes it. */
void record_decision(decided_t *slot, unsigned long key, int kind, unsigned status, uint64_t now) {
    if (!slot) return;
    atomic_store_explicit(&slot->hash, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&slot->info, (now / 1000000ull) << 24 | (uint64_t)(status & 0xffff) << 8 | (uint64_t)(kind & 0xff),
                          memory_order_relaxed);
    atomic_store_explicit(&slot->hash, key, memory_order_release);
}
