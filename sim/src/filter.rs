//! The other half of loadctl in the simulation: an upstream proxy that enforces the RFC 7200
//! rate rule the overloaded server pushed to it, with the real engine (policy document,
//! compiled snapshot, shard, GCRA) in simulated time.
//!
//! The upstream is transaction-aware: the rule counts original INVITEs; a rejected call gets
//! a 503 at once and its client stops; copies of an admitted call are forwarded uncounted.
//! When the server's capacity changes it pushes the new rate as a partial NOTIFY body
//! (version + 1), applied through [`Engine::apply`] as a subscriber would; [`rate_schedule`]
//! says when.

use loadctl::compile::Identities;
use loadctl::runtime::Source;

use crate::Workload;
use loadctl::runtime::{Engine, EngineConfig, Request, Shard, Time, Transport, Verdict};

/// The wall clock the simulated day starts at (validity periods are not used here).
const UNIX_ORIGIN_NS: i128 = 1_796_000_000_000_000_000;

/// The source name the server's documents are published under.
const SOURCE: &str = "overloaded-server";

/// An upstream applying one `rate` rule to every INVITE.
pub struct UpstreamFilter {
    engine: Engine,
    shard: Shard,
    version: u64,
}

impl std::fmt::Debug for UpstreamFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamFilter").finish_non_exhaustive()
    }
}

/// The policy document the overloaded server pushes: INVITEs above `rate` per second get 503.
/// Version 0 is the full document; later versions are partial updates of the one rule.
pub fn policy_document(rate: f64, version: u64) -> String {
    let state = if version == 0 { "full" } else { "partial" };
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<ruleset xmlns="urn:ietf:params:xml:ns:common-policy"
         xmlns:lc="urn:ietf:params:xml:ns:load-control" version="{version}" state="{state}">
  <rule id="server-overload">
    <conditions><method>INVITE</method></conditions>
    <actions><lc:accept alt-action="reject"><lc:rate>{rate:.3}</lc:rate></lc:accept></actions>
  </rule>
</ruleset>"#
    )
}

/// When the server pushes which rate: `rate` at nominal capacity from the start, and
/// `rate · μ(t)/μ` `delay` seconds after each change of the service rate (the time it takes the
/// server to notice and the NOTIFY to arrive).
pub fn rate_schedule(workload: &Workload, rate: f64, delay: f64) -> Vec<(f64, f64)> {
    let mut changes = vec![(0.0, rate)];
    for s in &workload.service {
        changes.push((s.start + delay, rate * s.rate / workload.mu));
        changes.push((s.end + delay, rate));
    }
    changes.sort_by(|a, b| a.0.total_cmp(&b.0));
    changes
}

/// An [`UpstreamFilter`] whose rate follows a [`rate_schedule`]: the server's NOTIFYs.
pub struct ScheduledFilter {
    filter: UpstreamFilter,
    schedule: Vec<(f64, f64)>,
    /// The next change to apply (the first entry is the rate the filter starts with).
    next: usize,
}

impl std::fmt::Debug for ScheduledFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduledFilter")
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

impl ScheduledFilter {
    /// An upstream enforcing `rate` at the nominal capacity of `workload`, following its
    /// capacity changes `delay` seconds late ([`rate_schedule`]).
    pub fn new(workload: &Workload, rate: f64, delay: f64) -> Result<Self, String> {
        Ok(Self {
            filter: UpstreamFilter::new(rate)?,
            schedule: rate_schedule(workload, rate, delay),
            next: 1,
        })
    }

    /// Decides a new INVITE arriving at `t` (s), after applying every NOTIFY due by then:
    /// true to forward it.
    pub fn admit(&mut self, t: f64) -> Result<bool, String> {
        while let Some(&(at, rate)) = self.schedule.get(self.next)
            && at <= t
        {
            self.filter.set_rate(rate)?;
            self.next += 1;
        }
        Ok(self.filter.admit(t))
    }
}

impl UpstreamFilter {
    /// An upstream enforcing `rate` INVITEs per second, built from the pushed document.
    pub fn new(rate: f64) -> Result<Self, String> {
        let doc = loadctl::policy::read(policy_document(rate, 0).as_bytes(), &Default::default())
            .map_err(|e| format!("the upstream rate rule does not validate: {e}"))?;
        let config = EngineConfig::default().with_shards(1);
        let engine = Engine::new(config);
        engine
            .publish(&Source::local(SOURCE), doc.ruleset)
            .map_err(|e| format!("the upstream rate rule does not compile: {e}"))?;
        let shard = engine.attach();
        Ok(Self {
            engine,
            shard,
            version: 0,
        })
    }

    /// Applies the server's next NOTIFY: a partial document setting the rule to `rate`.
    pub fn set_rate(&mut self, rate: f64) -> Result<(), String> {
        let version = self.version + 1;
        let doc = loadctl::policy::read(
            policy_document(rate, version).as_bytes(),
            &Default::default(),
        )
        .map_err(|e| format!("the upstream update does not validate: {e}"))?;
        self.engine
            .apply(&Source::local(SOURCE), doc.ruleset)
            .map_err(|e| format!("the upstream update was refused: {e}"))?;
        self.version = version;
        Ok(())
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
                p_asserted_identity: loadctl::sip::HeaderValues::NONE,
                target: None,
            },
            transport: Transport::Udp,
            initial: true,
            event: None,
            time: Some(Time {
                monotonic_ns: ns,
                unix_ns: UNIX_ORIGIN_NS + ns as i128,
            }),
            ..Request::default()
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
        // The server slows down and pushes 300/s: the next 10 s admit about 3,000.
        f.set_rate(300.0).expect("partial update");
        let admitted = (30_000..60_000)
            .filter(|i| f.admit(*i as f64 / 3000.0))
            .count();
        assert!((2_950..=3_050).contains(&admitted), "{admitted}");
        assert_eq!(f.version, 1);
    }

    #[test]
    fn schedule_follows_the_service_rate() {
        let w = crate::Scenario::defaults(crate::ScenarioKind::Slowdown).realise(1000.0, 1);
        assert_eq!(
            rate_schedule(&w, 900.0, 1.0),
            [(0.0, 900.0), (21.0, 270.0), (31.0, 900.0)]
        );
    }
}
