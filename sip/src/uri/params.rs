//! RFC 3261 §19.1.4 for what the key leaves out: URI parameters and header components.

use super::Params;
use super::canonical::SipRest;
use super::escape::{decoded_lower, eq_decoded_ci};

/// URI parameters that never match when present in only one of two URIs (RFC 3261 §19.1.4):
/// "A user, ttl, or method uri-parameter appearing in only one URI never matches", "A URI
/// that includes an maddr parameter will not match a URI that contains no maddr parameter",
/// and "A URI omitting any component with a default value will not match a URI explicitly
/// containing that component with its default value. […] The same is true for the
/// transport-parameter" — which the section's examples confirm: `sip:bob@biloxi.com` and
/// `sip:bob@biloxi.com;transport=udp` are "not equivalent".
pub const STRICT_PARAMS: [&str; 5] = ["user", "ttl", "method", "maddr", "transport"];

/// A canonical URI parameter or header: lower-case name and decoded, lower-case value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CanonicalParam {
    /// Name, decoded and lower-case.
    pub name: Box<[u8]>,
    /// Value, decoded and lower-case; `None` for a bare name.
    pub value: Option<Box<[u8]>>,
}

/// The parameters of `params` in canonical form (for the policy side of a comparison).
pub fn canonical_params(params: Params<'_>) -> Vec<CanonicalParam> {
    params
        .iter()
        .map(|(n, v)| CanonicalParam {
            name: decoded_lower(n).collect(),
            value: v.map(|v| decoded_lower(v).collect()),
        })
        .collect()
}

/// The header components of a SIP URI (`a=b&c=d`) in canonical form.
pub fn canonical_headers(headers: &str) -> Vec<CanonicalParam> {
    canonical_params_sep(headers, '&')
}

fn canonical_params_sep(s: &str, sep: char) -> Vec<CanonicalParam> {
    s.split(sep)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, v) = match p.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (p, None),
            };
            CanonicalParam {
                name: decoded_lower(n).collect(),
                value: v.map(|v| decoded_lower(v).collect()),
            }
        })
        .collect()
}

fn value_eq(raw: Option<&str>, canon: &Option<Box<[u8]>>) -> bool {
    match (raw, canon) {
        (None, None) => true,
        (Some(r), Some(c)) => eq_decoded_ci(r, c),
        _ => false,
    }
}

/// RFC 3261 §19.1.4 for the parts the key leaves out: do the parameters and headers of a
/// request's SIP URI agree with a policy URI's canonical ones?
pub fn params_and_headers_match(
    request: &SipRest<'_>,
    policy_params: &[CanonicalParam],
    policy_headers: &[CanonicalParam],
) -> bool {
    params_and_headers_match_with(request, policy_params, policy_headers, &STRICT_PARAMS)
}

/// URI parameters that never match when present in only one URI when comparing *entities*
/// (a rule's `target-sip-entity` with a request's next hop): [`STRICT_PARAMS`] but
/// `transport`, since RFC 7200 §5.3.3 names "the next-hop SIP entity" and the transport a
/// request travels over to it does not make it another entity.
pub const ENTITY_STRICT_PARAMS: [&str; 4] = ["user", "ttl", "method", "maddr"];

/// [`params_and_headers_match`] with another list of parameters that must be present in both
/// URIs or neither.
pub fn params_and_headers_match_with(
    request: &SipRest<'_>,
    policy_params: &[CanonicalParam],
    policy_headers: &[CanonicalParam],
    strict_params: &[&str],
) -> bool {
    for (name, value) in request.params.iter() {
        match policy_params.iter().find(|p| eq_decoded_ci(name, &p.name)) {
            Some(p) => {
                if !value_eq(value, &p.value) {
                    return false;
                }
            }
            None => {
                if strict_params
                    .iter()
                    .any(|s| eq_decoded_ci(name, s.as_bytes()))
                {
                    return false;
                }
            }
        }
    }
    for p in policy_params {
        let strict = strict_params.iter().any(|s| s.as_bytes() == &*p.name);
        if strict
            && !request
                .params
                .iter()
                .any(|(n, _)| eq_decoded_ci(n, &p.name))
        {
            return false;
        }
    }
    let request_headers = request.headers.split('&').filter(|h| !h.is_empty());
    if request_headers.clone().count() != policy_headers.len() {
        return false;
    }
    request_headers.into_iter().all(|h| {
        let (n, v) = match h.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (h, None),
        };
        policy_headers
            .iter()
            .any(|p| eq_decoded_ci(n, &p.name) && value_eq(v, &p.value))
    })
}
