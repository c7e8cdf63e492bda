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
 * \brief loadctl :: the owner-process pattern (see lc_owner.h)
 */

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>

#include "../../core/dprint.h"
#include "../../core/mem/shm_mem.h"

#include "lc_owner.h"

lc_str lc_cs(const char *s)
{
	lc_str r;
	r.ptr = (const uint8_t *)s;
	r.len = s ? strlen(s) : 0;
	return r;
}

uint64_t lc_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int lc_chan_open(int chan[2])
{
	if(socketpair(AF_UNIX, SOCK_DGRAM, 0, chan) < 0) {
		LM_ERR("socketpair: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

int lc_chan_send(int fd, void *rec)
{
	if(fd < 0
			|| send(fd, &rec, sizeof(rec), MSG_DONTWAIT) != (ssize_t)sizeof(rec))
		return -1;
	return 0;
}

void lc_chan_serve(int fd, uint64_t wake_ns, void (*take)(void *rec))
{
	struct pollfd p;
	void *rec;
	uint64_t now = lc_now_ns();
	int timeout_ms =
			wake_ns > now ? (int)((wake_ns - now + 999999) / 1000000) : 0;

	p.fd = fd;
	p.events = POLLIN;
	p.revents = 0;
	if(poll(&p, 1, timeout_ms) <= 0)
		return;
	while(recv(fd, &rec, sizeof(rec), MSG_DONTWAIT) == (ssize_t)sizeof(rec)) {
		take(rec);
		shm_free(rec);
	}
}

void lc_wait_done(volatile int *done)
{
	int i;

	for(i = 0; i < 100 && !*done; i++)
		usleep(10000);
	usleep(20000);
}
