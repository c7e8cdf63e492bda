/*
 * loadctl module - the owners' requests through tm
 *
 * Copyright (C) 2026 the loadctl authors
 *
 * This file is part of the loadctl Kamailio module, distributed under the
 * same terms as Kamailio (GPL-2.0-or-later).
 */

/*!
 * \file
 * \brief loadctl :: a state machine's request sent through tm in its dialog
 *
 * The subscriber's SUBSCRIBEs and the notifier's NOTIFYs leave through tm's
 * UAC API: a dialog made with new_dlg_uac from the machine's Call-ID,
 * From-tag, CSeq, From and To URIs, the To-tag inside a dialog, the route set
 * (RFC 3261 §12.2.1.1: the machine's Route value becomes tm's route set, its
 * Request-URI tm's remote target, and tm's calculate_hooks() picks the next
 * hop), then t_uac with the role's headers. tm adds the Via and retransmits;
 * the final response, or tm's own (a 408 without bytes), goes back to the
 * owner as an LC_REC_RESPONSE record, from whichever process tm runs the
 * callback in.
 */

#ifndef _LOADCTL_UAC_H_
#define _LOADCTL_UAC_H_

#include <stdint.h>

#include "../../core/str.h"
#include "../../modules/tm/tm_load.h"

#include "loadctl.h"
#include "lc_owner.h"

/* Sends `method` as the machine's message `m` describes it, with `hdrs`
 * (CRLF-terminated) and `body` (NULL: none). The response record carries
 * `param`. `who` starts the log lines ("subscription to sip:…"). 0, or -1
 * (logged): nothing went out. */
int lc_uac_send(lc_owner_t *o, const char *method, const lc_sip_message *m,
		str *hdrs, str *body, uintptr_t param, const char *who);

/* The owner's tm_cb: hands the final response to a `method` to `o`. */
void lc_uac_response(lc_owner_t *o, struct tmcb_params *ps, const char *method);

/* A final response to the machine's request (`method`, Call-ID, CSeq) that
 * no peer sent: tm's 408, or what a request that never left counts as. The
 * rest absent (Expires, Min-Expires and Retry-After -1). */
void lc_uac_local_response(lc_sip_message *resp, uint16_t status,
		lc_method method, lc_str call_id, uint32_t cseq);

#endif
