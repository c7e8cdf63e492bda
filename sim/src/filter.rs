//! The other half of loadctl in the simulation: an upstream proxy that enforces the RFC 7200
//! rate rule the overloaded server pushed to it, with the real engine (policy document,
//! compiled snapshot, shard, GCRA) in simulated time.
//!
//! The upstream is transaction-aware: the rule counts original INVITEs; a rejected call gets
//! a 503 at once and its client stops; copies of an admitted call are forwarded uncounted.

use loadctl::compile::Identities;
use loadctl::engine::{Engine, EngineConfig, Request, Shard, Time, Transport, Verdict};

/// The wall clock the simulated day starts at (validity periods are not used here).
const UNIX_ORIGIN_NS: i128 = 1_796_000_000_000_000_000;

/// An upstream applying one `rate` rule to every INVITE.
pub struct UpstreamFilter {
    // Keeps the policy alive for the shard.
    _engine: Engine,
    shard: Shard,
}

impl std::fmt::Debug for UpstreamFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamFilter").finish_non_exhaustive()
    }
}

/// The policy document the overloaded server pushes: INVITEs above `rate` per second get 503.
pub fn policy_document(rate: f64) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
         xmlns:lc="urn:ietf:params:xml:ns:load-control" version="0" state="full">
  <rule id="server-overload">
    <conditions><method>INVITE</method></conditions>
    <actions><lc:accept alt-action="reject"><lc:rate>{rate}</lc:rate></lc:accept></actions>
  </rule>
</ruleset>"#
    )
}

impl UpstreamFilter {
    /// An upstream enforcing `rate` INVITEs per second, built from the pushed document.
    pub fn new(rate: f64) -> Result<Self, String> {
        let doc = loadctl::policy::read(policy_document(rate).as_bytes(), &Default::default())
            .map_err(|e| format!("the upstream rate rule does not validate: {e}"))?;
        let config = EngineConfig {
            shards: 1,
            ..EngineConfig::default()
        };
        let engine = Engine::from_ruleset(doc.ruleset, config)
            .map_err(|e| format!("the upstream rate rule does not compile: {e}"))?;
        let shard = engine.attach();
        Ok(Self {
            _engine: engine,
            shard,
        })
    }

    /// Decides a new INVITE arriving at simulated time `t` (seconds): true to forward it.
    pub fn admit(&mut self, t: f64) -> bool {
        let ns = (t * 1e9) as u64;
        let request = Request {
            method: "INVITE",
            identities: Identities {
                from: Some("<sip:caller@clients.example>"),
                to: Some("<sip:service@server.example>"),
                request_uri: Some("sip:service@server.example"),
                p_asserted_identity: None,
                target: None,
            },
            transport: Transport::Udp,
            initial: true,
            event: None,
            time: Some(Time {
                monotonic_ns: ns,
                unix_ns: UNIX_ORIGIN_NS + ns as i128,
            }),
        };
        self.shard.classify(&request).verdict == Verdict::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_the_rule_rate() {
        let mut f = UpstreamFilter::new(800.0).expect("policy");
        // 3,000 INVITEs/s offered for 10 s: about 800/s get through.
        let admitted = (0..30_000).filter(|i| f.admit(*i as f64 / 3000.0)).count();
        assert!((7_900..=8_100).contains(&admitted), "{admitted}");
    }
}
