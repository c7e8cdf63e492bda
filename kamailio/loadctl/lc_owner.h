/*
 * loadctl module - what the subscriber and notifier processes share
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: the owner-process pattern of lc_subscribe.c and lc_notify.c
 *
 * Each RFC 7200 role runs in one extra process (its "owner"), the only one
 * that calls its libloadctl state machines. Any other process hands it a
 * record in shared memory by writing the pointer into a datagram socketpair
 * created before the fork; the owner sleeps in poll() on the other end with
 * its machines' next timer as timeout, takes each record and frees it.
 */

#ifndef _LOADCTL_OWNER_H_
#define _LOADCTL_OWNER_H_

#include <stdint.h>

#include "loadctl.h"

/* A NUL-terminated string as an lc_str (NULL: absent). */
lc_str lc_cs(const char *s);
/* CLOCK_MONOTONIC, nanoseconds (the clock every state machine is fed). */
uint64_t lc_now_ns(void);
/* The socketpair: others write to [1], the owner reads [0]. 0, or -1 (logged). */
int lc_chan_open(int chan[2]);
/* Hands `rec` (shm) to the owner: 0, or -1 when the channel is full or
 * closed (the caller still owns `rec`). */
int lc_chan_send(int fd, void *rec);
/* The owner: waits for records until `wake_ns` (CLOCK_MONOTONIC), then hands
 * every waiting one to `take` and frees it. */
void lc_chan_serve(int fd, uint64_t wake_ns, void (*take)(void *rec));
/* The main process at shutdown: waits up to 1 s for `*done`, then 20 ms for
 * tm to put the owner's last requests on the wire. */
void lc_wait_done(volatile int *done);

#endif
