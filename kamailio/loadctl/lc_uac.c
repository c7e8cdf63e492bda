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
 * \brief loadctl :: requests through tm (see lc_uac.h)
 */

#include <string.h>

#include "../../core/dprint.h"
#include "../../core/ut.h"
#include "../../core/mem/shm_mem.h"
#include "../../core/parser/msg_parser.h"
#include "../../core/parser/parse_rr.h"

#include "lc_uac.h"

static str lc_s(lc_str v)
{
	str s;
	s.s = (char *)v.ptr;
	s.len = (int)v.len;
	return s;
}

int lc_uac_send(lc_owner_t *o, const char *method, const lc_sip_message *m,
		str *hdrs, str *body, uintptr_t param, const char *who)
{
	struct tm_binds *tmb = o->tmb;
	str meth, callid, ftag, furi, turi, ruri, totag;
	dlg_t *dlg = NULL;
	uac_req_t uac_r;
	int ret;

	meth.s = (char *)method;
	meth.len = (int)strlen(method);
	callid = lc_s(m->call_id);
	ftag = lc_s(m->from_tag);
	furi = lc_s(m->from_uri);
	turi = lc_s(m->to_uri);
	ruri = lc_s(m->request_uri);

	if(tmb->new_dlg_uac(&callid, &ftag, m->cseq, &furi, &turi, &dlg) < 0
			|| dlg == NULL) {
		LM_ERR("%s: cannot create the dialog\n", who);
		goto failed;
	}
	if(m->to_tag.ptr && m->to_tag.len > 0) {
		totag = lc_s(m->to_tag);
		if(shm_str_dup(&dlg->id.rem_tag, &totag) < 0)
			goto failed;
		dlg->state = DLG_CONFIRMED;
	}
	if(m->route.ptr && m->route.len > 0) {
		/* tm wants the route set parsed, in shared memory */
		rr_t *rs = NULL;
		int bad;
		bad = parse_rr_body((char *)m->route.ptr, (int)m->route.len, &rs) < 0
			  || shm_duplicate_rr(&dlg->route_set, rs) < 0;
		if(rs)
			free_rr(&rs);
		if(bad) {
			LM_ERR("%s: cannot use the route set %.*s\n", who,
					(int)m->route.len, (const char *)m->route.ptr);
			goto failed;
		}
	}
	if(ruri.len > 0) {
		/* the remote target: the peer's URI on a new subscription, the
		 * Contact it sent inside the dialog */
		if(shm_str_dup(&dlg->rem_target, &ruri) < 0
				|| tmb->calculate_hooks(dlg) < 0) {
			LM_ERR("%s: cannot use the remote target %.*s\n", who, ruri.len,
					ruri.s);
			goto failed;
		}
	}
	set_uac_req(&uac_r, &meth, hdrs, body && body->len > 0 ? body : NULL, dlg,
			TMCB_LOCAL_COMPLETED, o->tm_cb, (void *)param);
	ret = tmb->t_uac(&uac_r);
	tmb->free_dlg(dlg);
	dlg = NULL;
	if(ret < 0) {
		LM_ERR("%s: tm could not send the %s (%d)\n", who, method, ret);
		goto failed;
	}
	return 0;
failed:
	if(dlg)
		tmb->free_dlg(dlg);
	return -1;
}

void lc_uac_response(lc_owner_t *o, struct tmcb_params *ps, const char *method)
{
	lc_rec_t *rec;

	if(ps == NULL)
		return;
	if(ps->rpl && ps->rpl != FAKED_REPLY)
		rec = lc_rec_new(o, LC_REC_RESPONSE, ps->rpl->buf, ps->rpl->len);
	else
		rec = lc_rec_new(o, LC_REC_RESPONSE, NULL, 0);
	if(rec == NULL)
		return;
	rec->status = ps->code;
	rec->param = ps->param ? (uintptr_t)*ps->param : 0;
	if(lc_owner_hand(o, rec) < 0)
		LM_ERR("cannot hand a %s response to the %s process\n", method,
				o->role);
}

void lc_uac_local_response(lc_sip_message *resp, uint16_t status,
		lc_method method, lc_str call_id, uint32_t cseq)
{
	memset(resp, 0, sizeof(*resp));
	resp->status = status;
	resp->method = method;
	resp->call_id = call_id;
	resp->cseq = cseq;
	resp->expires = resp->min_expires = resp->retry_after = -1;
}
