// loadctl e2e: the request route in JavaScript (KEMI), for loadctl-kemi.cfg. Test only: the
// next hop is whatever the caller put in an X-Next-Hop header.
function ksr_request_route() {
	// RFC 7200 NOTIFYs for the module's subscriptions: answered by the subscriber process
	if (KSR.is_method("NOTIFY") && String(KSR.hdr.get("Event")).indexOf("load-control") == 0) {
		KSR.loadctl.lc_handle_notify();
		KSR.x.exit();
	}
	var r = KSR.loadctl.lc_classify();
	if (r < 0) {
		// -1 reject, -2 redirect, -3 drop (no answer), -4 error
		if (r != -3 && r != -4) {
			KSR.loadctl.lc_reply();
		}
		KSR.x.exit();
	}
	KSR.hdr.append("X-LC: " + KSR.pv.get("$lc(verdict)") + " " + KSR.pv.get("$lc(rule)") + " " + r + "\r\n");
	KSR.setdsturi(KSR.hdr.get("X-Next-Hop"));
	KSR.forward();
}
