//! What the suites share: the namespaces of a policy document, documents from rule
//! fragments, a rule on a To prefix, and an INVITE to classify.

use loadctl::compile::Identities;
use loadctl::policy::{Limits, Ruleset, read};
use loadctl::runtime::{Request, Time, Transport};

/// The two namespaces of an RFC 7200 document (common-policy and load-control as `lc:`).
pub const NS: &str = "xmlns=\"urn:ietf:params:xml:ns:common-policy\" xmlns:lc=\"urn:ietf:params:xml:ns:load-control\"";

/// A document of `rules` (XML fragments) with that version and state, read and validated.
pub fn doc(version: u32, state: &str, rules: &str) -> Ruleset {
    let text = format!("<ruleset {NS} version=\"{version}\" state=\"{state}\">{rules}</ruleset>");
    read(text.as_bytes(), &Limits::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"))
        .ruleset
}

/// A full document of version 0 holding `rules`.
pub fn ruleset(rules: &str) -> Ruleset {
    doc(0, "full", rules)
}

/// A rule `id` matching a To number under `prefix`, with the `<actions>` body `accept`.
pub fn to_rule(id: &str, prefix: &str, accept: &str) -> String {
    format!(
        "<rule id=\"{id}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"{prefix}\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions>{accept}</actions></rule>"
    )
}

/// An initial INVITE whose To is `to`, over UDP, at the shard's clock.
pub fn invite(to: &str) -> Request<'_> {
    Request {
        method: "INVITE",
        identities: Identities {
            to: Some(to),
            ..Identities::default()
        },
        transport: Transport::Udp,
        ..Request::default()
    }
}

/// An initial INVITE whose To is `to`, over `transport`, at `monotonic_ns`.
pub fn invite_to(to: &str, transport: Transport, monotonic_ns: u64) -> Request<'_> {
    Request {
        method: "INVITE",
        identities: Identities {
            to: Some(to),
            ..Identities::default()
        },
        transport,
        time: Some(Time {
            monotonic_ns,
            unix_ns: 1_700_000_000_000_000_000,
        }),
        ..Request::default()
    }
}
