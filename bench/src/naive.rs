//! The baseline peer: a literal RFC 4745 / RFC 7200 evaluator, as a straightforward
//! implementation would write it.
//!
//! It walks the rules in document order for every request, canonicalises the request's URIs
//! and the rule's URIs into fresh `String`s at each comparison, and keeps every rule's limiter in
//! one `Mutex<HashMap<String, _>>`. Its decisions equal the engine's (a test checks this on the
//! standard workload), so the benchmark compares cost, not semantics.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use loadctl::policy::{
    AltAction, Except, ExceptTel, Field, Identity, Rule, Ruleset, TelPrefix, Uri,
};
use loadctl::runtime::{Exemptions, Request, Time, Verdict};
use loadctl::uri::{self, UriRef};

/// A canonical URI as owned strings.
struct Canon {
    key: String,
    host: Option<String>,
    /// (digits, global, phone-context)
    number: Option<(String, bool, Option<String>)>,
    /// The URI text, to re-parse for parameter comparison.
    text: String,
}

fn canon_of_text(text: &str) -> Option<Canon> {
    let parsed = uri::parse(text).ok()?;
    let mut buf = Vec::new();
    let c = uri::canonicalize(parsed, &mut buf);
    Some(Canon {
        key: String::from_utf8_lossy(c.key).into_owned(),
        host: c.host.map(|h| String::from_utf8_lossy(h).into_owned()),
        number: c.number.map(|n| {
            (
                String::from_utf8_lossy(n.digits).into_owned(),
                n.global,
                n.context.map(|x| String::from_utf8_lossy(x).into_owned()),
            )
        }),
        text: text.to_owned(),
    })
}

fn header_canons(value: Option<&str>) -> Vec<Canon> {
    let Some(v) = value else { return Vec::new() };
    uri::header_uris(v)
        .take(2)
        .filter_map(Result::ok)
        .filter_map(canon_of_text)
        .collect()
}

/// The first two values of a list header (every line), each a name-addr or addr-spec.
fn list_canons(values: loadctl::sip::HeaderValues<'_>) -> Vec<Canon> {
    values
        .values()
        .take(2)
        .filter_map(|v| uri_canon(loadctl::sip::uri_part(v)).into_iter().next())
        .collect()
}

fn uri_canon(value: Option<&str>) -> Vec<Canon> {
    let Some(v) = value else { return Vec::new() };
    let v = v.trim();
    let text = match v.strip_prefix('<') {
        Some(inner) => inner.split('>').next().unwrap_or(""),
        None => v,
    };
    canon_of_text(text).into_iter().collect()
}

fn uri_eq(policy: &Uri, req: &Canon) -> bool {
    uri_eq_with(policy, req, &uri::STRICT_PARAMS)
}

/// Equality of entities (a target): a transport in only one URI does not count.
fn entity_eq(policy: &Uri, req: &Canon) -> bool {
    uri_eq_with(policy, req, &uri::ENTITY_STRICT_PARAMS)
}

fn uri_eq_with(policy: &Uri, req: &Canon, strict: &[&str]) -> bool {
    let Some(p) = canon_of_text(policy.as_str()) else {
        return false;
    };
    if p.key != req.key {
        return false;
    }
    match (
        policy.parsed(),
        uri::parse(&req.text),
        &p.number,
        &req.number,
    ) {
        (UriRef::Sip(ps), Ok(UriRef::Sip(rs)), None, None) => uri::params_and_headers_match_with(
            &uri::SipRest {
                params: rs.params,
                headers: rs.headers,
            },
            &uri::canonical_params(ps.params),
            &uri::canonical_headers(ps.headers),
            strict,
        ),
        _ => true,
    }
}

fn prefix_matches(prefix: &TelPrefix, req: &Canon) -> bool {
    let Some((digits, global, ctx)) = &req.number else {
        return false;
    };
    let (p_digits, p_global, p_context) = match prefix.digits() {
        Some(d) => (
            Some(d.trim_start_matches('+').to_owned()),
            d.starts_with('+'),
            d,
        ),
        None => (None, false, prefix.as_str().to_lowercase()),
    };
    if *global {
        return p_global && p_digits.is_some_and(|d| digits.starts_with(&d));
    }
    ctx.as_deref() == Some(p_context.as_str())
        || (!p_global && p_digits.is_some_and(|d| digits.starts_with(&d)))
}

fn identity_matches(id: &Identity, req: &Canon) -> bool {
    match id {
        Identity::One(u) => uri_eq(u, req),
        Identity::Many { domain, except } => {
            // Without a domain, any identity that has a domain part (RFC 7200 §5.3.1).
            let in_domain = match domain {
                None => req.host.is_some(),
                Some(d) => req.host.as_deref() == Some(d.as_str().to_lowercase().as_str()),
            };
            in_domain
                && !except.iter().any(|e| match e {
                    Except::Domain(d) => {
                        req.host.as_deref() == Some(d.as_str().to_lowercase().as_str())
                    }
                    Except::Id(u) => uri_eq(u, req),
                })
        }
        Identity::ManyTel { prefix, except } => {
            // No prefix: any telephone number (RFC 7200 §6 makes `prefix` optional).
            req.number.is_some()
                && prefix.as_ref().is_none_or(|p| prefix_matches(p, req))
                && !except.iter().any(|e| match e {
                    ExceptTel::Prefix(p) => prefix_matches(p, req),
                    ExceptTel::Id(u) => uri_eq(u, req),
                })
        }
    }
}

/// The literal evaluator.
pub struct NaiveEvaluator {
    rules: Vec<Rule>,
    exemptions: Exemptions,
    limiters: Mutex<HashMap<String, Limiter>>,
    tolerance: Duration,
}

impl NaiveEvaluator {
    /// An evaluator for a full policy, with the engine's default exemptions.
    pub fn new(policy: &Ruleset, tolerance: Duration) -> Self {
        Self::with_exemptions(policy, tolerance, &Exemptions::default())
    }

    /// An evaluator for a full policy that lets `exemptions` through as the engine does.
    pub fn with_exemptions(policy: &Ruleset, tolerance: Duration, exemptions: &Exemptions) -> Self {
        Self {
            exemptions: exemptions.normalized(),
            rules: policy
                .rules()
                .unwrap_or(&[])
                .iter()
                .map(|r| Rule::clone(r))
                .collect(),
            limiters: Mutex::new(HashMap::new()),
            tolerance,
        }
    }

    fn rule_matches(rule: &Rule, req: &Request<'_>, time: Time) -> bool {
        let c = &rule.conditions;
        if c.never_matches() {
            return false;
        }
        let method_ok = match &c.method {
            Some(m) => m.as_str() == req.method,
            None => loadctl::compile::DEFAULT_METHODS.contains(&req.method),
        };
        if !method_ok {
            return false;
        }
        if let Some(v) = &c.validity {
            let now = loadctl::policy::Timestamp::from_unix(
                (time.unix_ns.div_euclid(1_000_000_000)) as i64,
                time.unix_ns.rem_euclid(1_000_000_000) as u32,
            );
            if !v.contains(&now) {
                return false;
            }
        }
        if let Some(t) = &c.target_sip_entity {
            let target = uri_canon(req.identities.target);
            if !target.iter().any(|x| entity_eq(t, x)) {
                return false;
            }
        }
        let Some(ci) = &c.call_identity else {
            return true;
        };
        ci.sip.iter().any(|sip| {
            sip.fields().all(|(field, set)| {
                let values = match field {
                    Field::From => header_canons(req.identities.from),
                    Field::To => header_canons(req.identities.to),
                    Field::RequestUri => uri_canon(req.identities.request_uri),
                    Field::PAssertedIdentity => list_canons(req.identities.p_asserted_identity),
                };
                values
                    .iter()
                    .any(|v| set.identities.iter().any(|id| identity_matches(id, v)))
            })
        })
    }

    /// Decides one request: the verdict and the matched rule's id. The request must carry its
    /// time.
    pub fn classify(&self, req: &Request<'_>) -> (Verdict, Option<String>) {
        let time = req.time.unwrap_or_default();
        if req.is_exempt(&self.exemptions).is_some() {
            return (Verdict::Accept, None);
        }
        for rule in &self.rules {
            if !Self::rule_matches(rule, req, time) {
                continue;
            }
            let id = rule.id.to_string();
            let mut limiters = self.limiters.lock().unwrap_or_else(|p| p.into_inner());
            let limiter = limiters
                .entry(id.clone())
                .or_insert_with(|| Limiter::new(&rule.accept.limit, self.tolerance));
            if limiter.try_acquire(time.monotonic_ns) {
                return (Verdict::Accept, Some(id));
            }
            let verdict = match &rule.accept.alt_action {
                AltAction::Reject => Verdict::Reject,
                AltAction::Drop if req.transport.is_reliable() => Verdict::Drop,
                AltAction::Drop => Verdict::Reject,
                AltAction::Redirect(_) => Verdict::Redirect,
            };
            return (verdict, Some(id));
        }
        (Verdict::Accept, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{carrier_policy, requests};
    use loadctl::runtime::{Engine, EngineConfig};

    #[test]
    fn naive_and_engine_agree_on_the_standard_workload() {
        let policy = carrier_policy(2_000, 42);
        let reqs = requests(&policy, 3_000, 7);
        let naive = NaiveEvaluator::new(&policy, Duration::from_millis(100));
        let engine = Engine::from_ruleset(policy.clone(), EngineConfig::default().with_shards(1))
            .expect("publishes");
        let mut shard = engine.attach();
        let mut matched = 0;
        for (i, r) in reqs.iter().enumerate() {
            let time = Time {
                monotonic_ns: i as u64 * 200_000,
                unix_ns: 1_705_000_000_000_000_000,
            };
            let req = r.as_request(time);
            let (verdict, rule) = naive.classify(&req);
            let d = shard.classify(&req);
            assert_eq!(
                (d.verdict, d.rule.map(|r| r.id().to_string())),
                (verdict, rule.clone()),
                "request {i}: {r:?}"
            );
            matched += usize::from(rule.is_some());
        }
        // The workload aims ~60 % at rules; some miss on method, target or validity.
        assert!(matched > reqs.len() * 45 / 100, "{matched}");
    }
}

/// One owner's GCRA (no atomics, no leases) over the engine's arithmetic
/// (`loadctl::limit`): what a single-threaded limiter costs, beside the engine's shared one.
#[derive(Clone, Debug)]
pub struct RateGate {
    interval_ns: Option<u64>,
    tolerance_ns: u64,
    tat_ns: u64,
}

impl RateGate {
    /// A gate admitting `per_second` on average with burst tolerance `tolerance`.
    pub fn new(per_second: f64, tolerance: Duration) -> Self {
        let interval_ns = loadctl::limit::interval_ns(per_second);
        RateGate {
            interval_ns,
            tolerance_ns: interval_ns.map_or(0, |t| {
                loadctl::limit::tolerance_ns(t, per_second, tolerance)
            }),
            tat_ns: 0,
        }
    }

    /// Admits one request at `now_ns` if the rate allows, and accounts for it.
    #[inline]
    pub fn try_acquire(&mut self, now_ns: u64) -> bool {
        let Some(interval) = self.interval_ns else {
            return false;
        };
        let (k, _, tat) =
            loadctl::limit::gcra_lease(self.tat_ns, now_ns, interval, self.tolerance_ns, 0, 1);
        self.tat_ns = tat;
        k == 1
    }
}

/// A rule's limiter in the naive peer. It never completes a transaction, so a window only
/// fills: a count of what it admitted, up to its size.
#[derive(Clone, Debug)]
enum Limiter {
    Rate(RateGate),
    Percent { step: u32, accumulator: u32 },
    Window { size: u32, taken: u32 },
}

impl Limiter {
    fn new(limit: &loadctl::policy::Limit, tolerance: Duration) -> Self {
        match *limit {
            loadctl::policy::Limit::Rate(r) => {
                Limiter::Rate(RateGate::new(r.per_second(), tolerance))
            }
            loadctl::policy::Limit::Percent(p) => Limiter::Percent {
                step: loadctl::limit::percent_step(p.value()),
                accumulator: 0,
            },
            loadctl::policy::Limit::Window(size) => Limiter::Window { size, taken: 0 },
        }
    }

    fn try_acquire(&mut self, now_ns: u64) -> bool {
        match self {
            Limiter::Rate(g) => g.try_acquire(now_ns),
            Limiter::Percent { step, accumulator } => {
                let (admit, next) = loadctl::limit::percent_advance(*step, *accumulator);
                *accumulator = next;
                admit
            }
            Limiter::Window { size, taken } => {
                let admit = taken < size;
                *taken += u32::from(admit);
                admit
            }
        }
    }
}
