/*
 * loadctl module - the module's counters as Kamailio statistics
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: Kamailio statistics (group "loadctl")
 */

#ifndef _LOADCTL_STATS_H_
#define _LOADCTL_STATS_H_

/* Registers the counters with Kamailio's statistics (mod_init, before the
 * fork): kamcmd stats.get_statistics loadctl:, statsd, xhttp_prom. 0, or -1
 * (logged). */
int lc_stats_register(void);

#endif
