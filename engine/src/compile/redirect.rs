//! RFC 7200 §7's redirect agreement: a notifier's redirect targets must lie in its own domain
//! or on the operator's allow-list ([`CompileConfig::redirect_allow`]).

use super::CompileConfig;
use crate::policy::{AltAction, Rule, Uri};
use crate::uri::UriRef;

/// True when `rule` redirects and a target is outside what a policy from `notifier` may
/// point at (see [`CompileConfig`]); always false for the operator's own policies
/// (`notifier` `None`).
pub fn redirect_refused(rule: &Rule, notifier: Option<&Uri>, config: &CompileConfig) -> bool {
    let (AltAction::Redirect(targets), Some(notifier)) = (&rule.accept.alt_action, notifier) else {
        return false;
    };
    let allow = config.redirect_allow.as_deref().unwrap_or(&[]);
    !targets
        .iter()
        .all(|t| in_own_domain(t, notifier) || target_allowed(t, allow))
}

/// The host of a `sip:`/`sips:` URI, without a trailing dot.
fn sip_host(uri: &Uri) -> Option<&str> {
    match uri.parsed() {
        UriRef::Sip(s) => Some(s.host.strip_suffix('.').unwrap_or(s.host)),
        _ => None,
    }
}

/// An IPv4 address or `[IPv6]` reference rather than a domain name.
fn is_ip_literal(host: &str) -> bool {
    host.starts_with('[') || host.parse::<std::net::Ipv4Addr>().is_ok()
}

/// `host` equals `domain` or is a subdomain of it (ASCII case-insensitive); an IP literal on
/// either side matches only itself.
fn host_in_domain(host: &str, domain: &str) -> bool {
    if host.eq_ignore_ascii_case(domain) {
        return true;
    }
    if domain.is_empty() || is_ip_literal(host) || is_ip_literal(domain) {
        return false;
    }
    let (host, domain) = (host.as_bytes(), domain.as_bytes());
    host.len() > domain.len() + 1
        && host.get(host.len() - domain.len() - 1) == Some(&b'.')
        && host
            .get(host.len() - domain.len()..)
            .is_some_and(|tail| tail.eq_ignore_ascii_case(domain))
}

/// `target` lies in the own domain of `notifier`: the notifier URI's host or a subdomain of
/// it (an IP literal: itself only).
fn in_own_domain(target: &Uri, notifier: &Uri) -> bool {
    match (sip_host(target), sip_host(notifier)) {
        (Some(t), Some(n)) => host_in_domain(t, n),
        _ => false,
    }
}

/// `target` matches an allow-list entry (see [`CompileConfig::redirect_allow`]).
fn target_allowed(target: &Uri, allow: &[String]) -> bool {
    if allow.iter().any(|e| e.trim() == "*") {
        return true;
    }
    let Some(host) = sip_host(target) else {
        return false;
    };
    allow.iter().any(|entry| {
        let entry = entry.trim().trim_start_matches("*.");
        host_in_domain(host, entry.strip_suffix('.').unwrap_or(entry))
    })
}
