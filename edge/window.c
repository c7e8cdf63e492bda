/* window.c: window admissions (RFC 7200 window rules) waiting for their final response: a
 * ticket is kept per transaction, by Call-ID and CSeq number, until a final response for it
 * passes back, or for Timer B (32 s); and the hashes the edge keys transactions with. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "edge.h"
#include "oc.h"
#include "window.h"

#define EXPIRE_EVERY_NS 100000000ull

unsigned long hash_bytes(const char *a, size_t alen, const char *b, size_t blen) {
    unsigned long h = 1469598103934665603ul;
    for (size_t i = 0; i < alen; i++) h = (h ^ (unsigned char)a[i]) * 1099511628211ul;
    h = (h ^ 0xff) * 1099511628211ul;
    for (size_t i = 0; i < blen; i++) h = (h ^ (unsigned char)b[i]) * 1099511628211ul;
    return h ? h : 1;
}

unsigned long transaction_hash_of(const char *call_id, size_t call_id_len, const char *cseq, size_t cseq_len) {
    size_t num = 0;
    while (num < cseq_len && cseq[num] >= '0' && cseq[num] <= '9') num++;
    return hash_bytes(call_id ? call_id : "", call_id_len, cseq ? cseq : "", num);
}

unsigned long transaction_hash(const char *msg, size_t len) {
    msg_ids f;
    find_ids(msg, len, &f);
    return transaction_hash_of(f.call_id, f.call_id_len, f.cseq, f.cseq_len);
}

/* The tables are shared by the workers (edge.h: a response reaches whichever worker the kernel
 * gives the next hop's datagrams), in stripes chosen by the hash, each open-addressed with
 * linear probing under its own lock. A slot is EMPTY (a probe stops there), LIVE, or GONE
 * (released: a probe goes on past it, an insert may reuse it). Most traffic holds no window
 * slot, so a response looks up nothing, and takes no lock, while there is none. */
enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_GONE = 2 };

static _Atomic size_t windows_live; /* LIVE slots in all stripes */

static window_stripe_t *stripe_of(edge_t *e, unsigned long h) { return &e->windows[(h >> 32) % WINDOW_STRIPES]; }

window_stripe_t *windows_new(void) {
    window_stripe_t *t = calloc(WINDOW_STRIPES, sizeof *t);
    for (size_t k = 0; t && k < WINDOW_STRIPES; k++) pthread_mutex_init(&t[k].mu, NULL);
    return t;
}

void remember(worker_t *w, unsigned long h, lc_ticket t) {
    window_stripe_t *s = stripe_of(w->e, h);
    pthread_mutex_lock(&s->mu);
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &s->slot[(h + k) % PENDING];
        if (p->used != SLOT_LIVE) {
            if (p->used == SLOT_GONE) s->gone--;
            p->used = SLOT_LIVE;
            p->hash = h;
            p->ticket = t;
            p->deadline_ns = now_ns() + TIMER_B_NS;
            s->live++;
            atomic_fetch_add_explicit(&windows_live, 1, memory_order_relaxed);
            pthread_mutex_unlock(&s->mu);
            return;
        }
    }
    pthread_mutex_unlock(&s->mu);
    lc_complete(w->lw, &t); /* stripe full: release at once rather than leak */
}

/* Under the stripe's lock. */
static void forget_slot(worker_t *w, window_stripe_t *s, pending_t *p) {
    lc_complete(w->lw, &p->ticket);
    p->used = SLOT_GONE;
    s->live--;
    s->gone++;
    atomic_fetch_sub_explicit(&windows_live, 1, memory_order_relaxed);
}

void release(worker_t *w, unsigned long h) {
    if (atomic_load_explicit(&windows_live, memory_order_relaxed) == 0) return;
    window_stripe_t *s = stripe_of(w->e, h);
    pthread_mutex_lock(&s->mu);
    for (size_t k = 0; s->live && k < PENDING; k++) {
        pending_t *p = &s->slot[(h + k) % PENDING];
        if (p->used == SLOT_EMPTY) break;
        if (p->used == SLOT_LIVE && p->hash == h) {
            forget_slot(w, s, p);
            break;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* Releases a stripe's admissions whose response never came (Timer B), and clears the released
 * slots out of its probe chains once they are a quarter of it. Under the stripe's lock. */
static void expire_stripe(worker_t *w, window_stripe_t *s, uint64_t now) {
    for (size_t k = 0; k < PENDING && s->live; k++) {
        if (s->slot[k].used == SLOT_LIVE && s->slot[k].deadline_ns <= now) forget_slot(w, s, &s->slot[k]);
    }
    if (s->gone <= PENDING / 4) return;
    static _Thread_local pending_t keep[PENDING];
    size_t n = 0;
    for (size_t k = 0; k < PENDING; k++) {
        if (s->slot[k].used == SLOT_LIVE) keep[n++] = s->slot[k];
    }
    memset(s->slot, 0, sizeof s->slot);
    s->gone = 0;
    for (size_t k = 0; k < n; k++) {
        for (size_t j = 0; j < PENDING; j++) {
            pending_t *p = &s->slot[(keep[k].hash + j) % PENDING];
            if (p->used == SLOT_EMPTY) {
                *p = keep[k];
                break;
            }
        }
    }
}

/* The timers of the shared tables, at most every 100 ms per worker: each worker serves its
 * share of the stripes and of the overload-control waits, so the work does not grow with the
 * number of workers on any one of them. */
void expire(worker_t *w) {
    uint64_t now = now_ns();
    if (now < w->next_expire_ns) return;
    w->next_expire_ns = now + EXPIRE_EVERY_NS;
    oc_expire(w, now);
    edge_t *e = w->e;
    unsigned n = e->nudp + e->ntcp;
    for (size_t k = w->index; k < WINDOW_STRIPES; k += n) {
        window_stripe_t *s = &e->windows[k];
        pthread_mutex_lock(&s->mu);
        if (s->live || s->gone) expire_stripe(w, s, now);
        pthread_mutex_unlock(&s->mu);
    }
}

/* Releases every admission still held (at exit, the workers stopped). */
void window_finish(worker_t *w) {
    for (size_t k = 0; k < WINDOW_STRIPES; k++) {
        window_stripe_t *s = &w->e->windows[k];
        for (size_t j = 0; j < PENDING; j++) {
            if (s->slot[j].used == SLOT_LIVE) lc_complete(w->lw, &s->slot[j].ticket);
        }
        pthread_mutex_destroy(&s->mu);
    }
    free(w->e->windows);
    w->e->windows = NULL;
}
