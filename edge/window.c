/* window.c: window admissions (RFC 7200 window rules) waiting for their final response: a
 * ticket is kept per transaction, by Call-ID and CSeq number, until a final response for it
 * passes back, or for Timer B (32 s); and the hashes the edge keys transactions with. */
#define _GNU_SOURCE /* struct mmsghdr (edge.h), clock_gettime */

#include <stdint.h>
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

/* Call-ID and CSeq number identify the transaction for window tickets. */
unsigned long transaction_hash(const char *msg, size_t len) {
    size_t cl = 0, sl = 0;
    size_t c = find_header(msg, len, "Call-ID", "i", &cl);
    size_t s = find_header(msg, len, "CSeq", NULL, &sl);
    size_t num = 0;
    while (num < sl && msg[s + num] >= '0' && msg[s + num] <= '9') num++;
    return hash_bytes(msg + c, cl, msg + s, num);
}

/* Each worker has its own table: a final response comes back on the transport its request
 * left on, so on the same thread. The table is open-addressed with linear probing. A slot is
 * EMPTY (a probe stops there), LIVE, or GONE (released: a probe goes on past it, an insert may
 * reuse it). Most traffic holds no window slot, so a response looks up nothing when the table
 * is empty. */
enum { SLOT_EMPTY = 0, SLOT_LIVE = 1, SLOT_GONE = 2 };

void remember(worker_t *w, unsigned long h, lc_ticket t) {
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &w->pending[(h + k) % PENDING];
        if (p->used != SLOT_LIVE) {
            if (p->used == SLOT_GONE) w->pending_gone--;
            p->used = SLOT_LIVE;
            p->hash = h;
            p->ticket = t;
            p->deadline_ns = now_ns() + TIMER_B_NS;
            w->pending_live++;
            return;
        }
    }
    lc_complete(w->lw, &t); /* table full: release at once rather than leak */
}

static void forget_slot(worker_t *w, pending_t *p) {
    lc_complete(w->lw, &p->ticket);
    p->used = SLOT_GONE;
    w->pending_live--;
    w->pending_gone++;
}

void release(worker_t *w, unsigned long h) {
    if (w->pending_live == 0) return;
    for (size_t k = 0; k < PENDING; k++) {
        pending_t *p = &w->pending[(h + k) % PENDING];
        if (p->used == SLOT_EMPTY) return;
        if (p->used == SLOT_LIVE && p->hash == h) {
            forget_slot(w, p);
            return;
        }
    }
}

/* Releases admissions whose response never came (Timer B), at most every 100 ms, and clears
 * the released slots out of the probe chains once they are a quarter of the table. */
void expire(worker_t *w) {
    uint64_t now = now_ns();
    if (now < w->next_expire_ns) return;
    w->next_expire_ns = now + EXPIRE_EVERY_NS;
    oc_expire(w, now);
    if (w->pending_live == 0 && w->pending_gone == 0) return;
    for (size_t k = 0; k < PENDING; k++) {
        if (w->pending[k].used == SLOT_LIVE && w->pending[k].deadline_ns <= now) forget_slot(w, &w->pending[k]);
    }
    if (w->pending_gone > PENDING / 4) {
        size_t n = 0;
        for (size_t k = 0; k < PENDING; k++) {
            if (w->pending[k].used == SLOT_LIVE) w->rehash[n++] = w->pending[k];
        }
        memset(w->pending, 0, sizeof w->pending);
        w->pending_live = w->pending_gone = 0;
        for (size_t k = 0; k < n; k++) {
            for (size_t j = 0; j < PENDING; j++) {
                pending_t *p = &w->pending[(w->rehash[k].hash + j) % PENDING];
                if (p->used == SLOT_EMPTY) {
                    *p = w->rehash[k];
                    w->pending_live++;
                    break;
                }
            }
        }
    }
}

/* Releases every admission still held (at exit). */
void window_finish(worker_t *w) {
    for (size_t s = 0; s < PENDING; s++) {
        if (w->pending[s].used == SLOT_LIVE) lc_complete(w->lw, &w->pending[s].ticket);
    }
}
