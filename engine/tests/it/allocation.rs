//! One capacity shared by demand among several subscribers, in simulated time: a notifier with
//! an allocation, real subscribers each enforcing its share on its own engine, a network that
//! delays every message, and traffic at each edge whose admitted part the notifier observes.
//! Expected values come from max-min fairness (water-filling), not from the code's output.

use std::sync::Arc;

use crate::common::NS;
use loadctl::compile::Identities;
use loadctl::event::allocator::AllocatorConfig;
use loadctl::event::notifier::{Authorization, Notifier, NotifierConfig};
use loadctl::event::subscriber::{Subscriber, SubscriberConfig};
use loadctl::event::*;
use loadctl::policy::{self, Limit, Limits, Rule, Uri};
use loadctl::runtime::{Engine, EngineConfig, Request, Shard, Time, Transport, Verdict};

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const NOTIFIER: &str = "sip:sbc.example.com";

fn uri(s: &str) -> Uri {
    Uri::new(s).expect("uri")
}

/// The class shared: INVITEs to +1-212 (the rate is the allocator's to set).
fn template() -> Rule {
    let doc = format!(
        "<ruleset {NS} version=\"0\" state=\"full\"><rule id=\"hotline\"><conditions><lc:call-identity><lc:sip><lc:to>\
         <many-tel prefix=\"+1-212\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept><lc:rate>1</lc:rate></lc:accept></actions></rule></ruleset>"
    );
    let rules: Vec<Arc<Rule>> = policy::read(doc.as_bytes(), &Limits::default())
        .expect("valid")
        .ruleset
        .rules()
        .expect("full")
        .to_vec();
    rules[0].as_ref().clone()
}

enum Msg {
    Subscribe(usize, EventRequest),
    SubscribeAnswer(usize, Response),
    Notify(usize, EventRequest),
    NotifyAnswer(usize, Response),
}

struct Edge {
    uri: String,
    engine: Engine,
    shard: Shard,
    sub: Subscriber,
    /// Offered requests/s.
    demand: f64,
    next_arrival: u64,
    /// NOTIFY arrival times.
    notifies: Vec<u64>,
    /// NOTIFYs that arrived with `Subscription-State: terminated`.
    terminated: u32,
    /// Extra one-way delay of every message to and from this edge.
    slow: u64,
    /// Every answer this edge gives to a NOTIFY is lost (while set).
    deaf: bool,
    first_notify_rate: Option<Option<f64>>,
    admitted: u64,
}

struct World {
    now: u64,
    notifier: Notifier,
    edges: Vec<Edge>,
    net: Vec<(u64, Msg)>,
    /// One-way delay of a message: `delay` plus up to `spread` more (uniform, per message, so
    /// messages to different subscribers overtake each other).
    delay: u64,
    spread: u64,
    /// One NOTIFY answer in this many is lost (0: none).
    lose_answers: u64,
    sent_answers: u64,
    /// The bound the enforced shares are checked against (the capacity; after a decrease, the
    /// old one until `bound_until`).
    capacity: f64,
    bound: f64,
    bound_until: u64,
    /// Each gap between two requests of an edge is its mean times 1 ± this (uniform), as
    /// SIPp's pacing and the network make it.
    jitter: f64,
    rng: u64,
}

fn enforced(e: &Engine) -> Option<f64> {
    let p = e.source_policy(NOTIFIER)?;
    match p.rules()?.first()?.accept.limit {
        Limit::Rate(r) => Some(r.per_second()),
        _ => None,
    }
}

impl World {
    fn new(capacity: f64, edges: usize, delay: u64) -> World {
        let mut notifier =
            Notifier::new(NotifierConfig::new(uri(NOTIFIER), "n", Authorization::Any));
        notifier
            .set_capacity(0, capacity, template(), AllocatorConfig::default())
            .expect("capacity");
        let edges = (0..edges)
            .map(|i| {
                let engine = Engine::new(EngineConfig::default().with_shards(1));
                let u = format!("sip:edge{i}.example.net");
                let mut c = SubscriberConfig::new(
                    uri(NOTIFIER),
                    uri(&u),
                    &format!("c{i}"),
                    &format!("t{i}"),
                );
                c.scope_to_notifier = false;
                Edge {
                    uri: u,
                    shard: engine.attach(),
                    sub: Subscriber::new(c, engine.clone(), 0),
                    engine,
                    demand: 0.0,
                    next_arrival: 0,
                    notifies: Vec::new(),
                    terminated: 0,
                    slow: 0,
                    deaf: false,
                    first_notify_rate: None,
                    admitted: 0,
                }
            })
            .collect();
        World {
            now: 0,
            notifier,
            edges,
            net: Vec::new(),
            delay,
            spread: 0,
            lose_answers: 0,
            sent_answers: 0,
            capacity,
            bound: capacity,
            bound_until: 0,
            jitter: 0.3,
            rng: 0x9e37_79b9_7f4a_7c15,
        }
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    fn send(&mut self, m: Msg) {
        if let Msg::NotifyAnswer(k, _) = m {
            self.sent_answers += 1;
            if self.lose_answers > 0 && self.sent_answers.is_multiple_of(self.lose_answers) {
                return;
            }
            if self.edges[k].deaf {
                return;
            }
        }
        let spread = if self.spread > 0 {
            self.rand() % self.spread
        } else {
            0
        };
        let (Msg::Subscribe(k, _)
        | Msg::SubscribeAnswer(k, _)
        | Msg::Notify(k, _)
        | Msg::NotifyAnswer(k, _)) = m;
        let slow = self.edges[k].slow;
        self.net.push((self.now + self.delay + spread + slow, m));
    }

    /// Changes the capacity; the enforced shares may exceed the new one only until the
    /// decreases are delivered: the pacing (1 s) and the round trips, and when the previous
    /// NOTIFY's answer was lost, that NOTIFY's transaction timeout first (one NOTIFY is
    /// outstanding per subscription; 32 s, after which the subscription ends).
    fn set_capacity(&mut self, capacity: f64) {
        self.bound = self.capacity.max(capacity);
        let lost = if self.lose_answers > 0 { 32 * S } else { 0 };
        self.bound_until = self.now + lost + 2 * S + 2 * (self.delay + self.spread);
        self.capacity = capacity;
        self.notifier
            .set_capacity(self.now, capacity, template(), AllocatorConfig::default())
            .expect("capacity");
    }

    /// Advances to `until` in 1 ms steps, checking at every step that the shares the edges
    /// enforce add up to at most the capacity.
    fn run_until(&mut self, until: u64) {
        while self.now < until {
            self.now += MS;
            self.step();
            let total: f64 = self.edges.iter().filter_map(|e| enforced(&e.engine)).sum();
            let bound = if self.now < self.bound_until {
                self.bound
            } else {
                self.capacity
            };
            assert!(
                total <= bound + 1e-9,
                "t={} ms: enforced shares add up to {total} > {bound}",
                self.now / MS,
            );
        }
    }

    fn step(&mut self) {
        let now = self.now;
        // Messages due, in the order they arrive.
        let mut due = Vec::new();
        let mut i = 0;
        while i < self.net.len() {
            if self.net[i].0 <= now {
                due.push(self.net.remove(i));
            } else {
                i += 1;
            }
        }
        due.sort_by_key(|d| d.0);
        for (_, m) in due {
            match m {
                Msg::Subscribe(k, req) => {
                    let r = self.notifier.handle_subscribe(now, &req);
                    self.send(Msg::SubscribeAnswer(k, r));
                }
                Msg::SubscribeAnswer(k, r) => self.edges[k].sub.handle_response(now, &r),
                Msg::Notify(k, req) => {
                    let e = &mut self.edges[k];
                    let r = e.sub.handle_notify(now, &req);
                    e.notifies.push(now);
                    if req
                        .subscription_state
                        .as_deref()
                        .is_some_and(|s| s.starts_with("terminated"))
                    {
                        e.terminated += 1;
                    }
                    if e.first_notify_rate.is_none() {
                        e.first_notify_rate = Some(enforced(&e.engine));
                    }
                    self.send(Msg::NotifyAnswer(k, r));
                }
                Msg::NotifyAnswer(_, r) => self.notifier.handle_response(now, &r),
            }
        }
        // Timers.
        if self.notifier.poll_timeout().is_some_and(|t| t <= now) {
            self.notifier.handle_timeout(now);
        }
        for k in 0..self.edges.len() {
            let e = &mut self.edges[k];
            if e.sub.poll_timeout().is_some_and(|t| t <= now) {
                e.sub.handle_timeout(now);
            }
            while let Some(req) = self.edges[k].sub.poll_transmit() {
                self.send(Msg::Subscribe(k, req));
            }
        }
        while let Some(req) = self.notifier.poll_transmit() {
            let k = self
                .edges
                .iter()
                .position(|e| req.to.uri.as_str() == e.uri)
                .expect("a known edge");
            self.send(Msg::Notify(k, req));
        }
        // Traffic: jittered arrivals; the notifier sees what each edge admits.
        for k in 0..self.edges.len() {
            let e = &mut self.edges[k];
            if e.demand <= 0.0 {
                e.next_arrival = now;
                continue;
            }
            while e.next_arrival <= now {
                let t = e.next_arrival;
                self.rng ^= self.rng << 13;
                self.rng ^= self.rng >> 7;
                self.rng ^= self.rng << 17;
                let u = (self.rng >> 11) as f64 / (1u64 << 53) as f64;
                let gap = S as f64 / e.demand * (1.0 + self.jitter * (2.0 * u - 1.0));
                e.next_arrival += gap as u64;
                let req = Request {
                    method: "INVITE",
                    identities: Identities {
                        to: Some("<tel:+1-212-555-0100>"),
                        ..Identities::default()
                    },
                    transport: Transport::Tcp,
                    initial: true,
                    event: None,
                    time: Some(Time {
                        monotonic_ns: t,
                        unix_ns: 1_700_000_000_000_000_000,
                    }),
                    ..Request::default()
                };
                if e.shard.classify(&req).verdict == Verdict::Accept {
                    e.admitted += 1;
                    // False only after the edge's subscription ended (its terminated NOTIFY may
                    // still be on its way).
                    self.notifier.observe(t, &uri(&e.uri), 1);
                }
            }
        }
    }

    /// Edge `k` subscribes again: a new dialog on the same engine.
    fn resubscribe(&mut self, k: usize, n: u64) {
        let e = &mut self.edges[k];
        let mut c = SubscriberConfig::new(
            uri(NOTIFIER),
            uri(&e.uri),
            &format!("c{k}-{n}"),
            &format!("t{k}-{n}"),
        );
        c.scope_to_notifier = false;
        e.sub = Subscriber::new(c, e.engine.clone(), self.now);
    }

    fn demands(&mut self, d: &[f64]) {
        for (e, &d) in self.edges.iter_mut().zip(d) {
            if e.demand <= 0.0 {
                e.next_arrival = self.now;
            }
            e.demand = d;
        }
    }

    fn shares(&self) -> Vec<f64> {
        self.edges
            .iter()
            .map(|e| enforced(&e.engine).unwrap_or(-1.0))
            .collect()
    }
}

fn within(got: &[f64], want: &[f64], tolerance: f64) -> bool {
    got.iter()
        .zip(want)
        .all(|(g, w)| (g - w).abs() <= tolerance * w)
}

#[test]
fn shares_follow_demand_to_max_min_fairness() {
    // Eight runs, each with its own arrival jitter.
    for seed in 1..=8u64 {
        follow_demand(seed);
    }
}

fn follow_demand(seed: u64) {
    let mut w = World::new(120.0, 3, 20 * MS);
    w.rng ^= seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    w.demands(&[40.0, 40.0, 40.0]);
    w.run_until(5 * S);
    // Each edge's first NOTIFY already carried a share (not a bodyless NOTIFY).
    for e in &w.edges {
        assert!(
            matches!(e.first_notify_rate, Some(Some(_))),
            "{}: {:?}",
            e.uri,
            e.first_notify_rate
        );
    }
    // Equal demand above the equal split: the equal split.
    assert!(
        within(&w.shares(), &[40.0, 40.0, 40.0], 0.05),
        "{:?}",
        w.shares()
    );

    // Water-filling of 120 over demands (10, 60, 130): 10, then (120 − 10) / 2 = 55 each.
    // The donor's share carries its headroom (10 × 1.15, taken from the other two) and the
    // noise of measuring 10 jittered requests a second (within the 5 % hysteresis).
    w.demands(&[10.0, 60.0, 130.0]);
    w.run_until(8 * S);
    let want = [10.0, 55.0, 55.0];
    let headroom = 1.0 + AllocatorConfig::default().headroom;
    let fair = |s: &[f64]| {
        s[0] >= 10.0 && s[0] <= 10.0 * headroom * 1.1 && within(&s[1..], &want[1..], 0.05)
    };
    assert!(fair(&w.shares()), "after 3 s: {:?}", w.shares());
    // And it stays there; what each edge lets through is the max-min fair rate ± 5 %.
    let notifies_before: usize = w.edges.iter().map(|e| e.notifies.len()).sum();
    let admitted_before: Vec<u64> = w.edges.iter().map(|e| e.admitted).collect();
    for t in 9..=14 {
        w.run_until(t * S);
        assert!(fair(&w.shares()), "t={t} s: {:?}", w.shares());
    }
    let rates: Vec<f64> = w
        .edges
        .iter()
        .zip(&admitted_before)
        .map(|(e, b)| (e.admitted - b) as f64 / 6.0)
        .collect();
    assert!(
        within(&rates, &want, 0.05),
        "admitted per second: {rates:?}"
    );
    let notifies_after: usize = w.edges.iter().map(|e| e.notifies.len()).sum();
    assert!(
        notifies_after - notifies_before <= 6,
        "seed {seed}: steady demand, yet {} NOTIFYs in 6 s",
        notifies_after - notifies_before
    );

    // The third edge goes idle while the second wants more than there is: within 3 s the
    // idle share is reclaimed (down to the least share) and the second edge has what the
    // first does not use.
    w.demands(&[10.0, 130.0, 0.0]);
    w.run_until(17 * S);
    let s = w.shares();
    let least = AllocatorConfig::default().min_share;
    assert!(s[2] <= least * 1.05, "idle edge keeps {s:?}");
    assert!(s[1] >= 0.95 * (120.0 - s[0] - least), "busy edge has {s:?}");

    // No subscriber got two NOTIFYs less than a second apart (RFC 7200 §4.10).
    for e in &w.edges {
        for pair in e.notifies.windows(2) {
            assert!(pair[1] - pair[0] >= S, "{}: NOTIFYs at {pair:?}", e.uri);
        }
    }
}

#[test]
fn enforced_shares_never_exceed_the_capacity_with_churn_and_slow_notifies() {
    // Eight edges, demands that change every few seconds, subscriptions that end and start
    // again, the capacity lowered and raised, messages taking 50–400 ms each way (overtaking
    // each other), and one NOTIFY answer in seven lost: `run_until` checks the sum of what the
    // edges enforce at every millisecond.
    let mut w = World::new(200.0, 8, 50 * MS);
    w.spread = 350 * MS;
    w.lose_answers = 7;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut rand = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut gone: Option<usize> = None;
    for round in 0..24u64 {
        let d: Vec<f64> = (0..8)
            .map(|_| [0.0, 5.0, 20.0, 60.0, 150.0][rand(5) as usize])
            .collect();
        w.demands(&d);
        if let Some(k) = gone.take() {
            // It subscribes again (a new dialog).
            w.resubscribe(k, round);
        } else if round % 4 == 3 {
            // One edge unsubscribes; its share goes to the others.
            let k = rand(8) as usize;
            w.edges[k].sub.unsubscribe(w.now);
            gone = Some(k);
        }
        if round == 8 {
            w.set_capacity(120.0);
        }
        if round == 16 {
            w.set_capacity(300.0);
        }
        w.run_until(w.now + (2 + rand(3)) * S);
    }
    let admitted: u64 = w.edges.iter().map(|e| e.admitted).sum();
    assert!(admitted > 0);
}

#[test]
fn a_share_whose_answer_was_lost_counts_until_the_unsubscribe_is_answered() {
    // Two edges share R = 100; edge 0's messages take 300 ms more each way. Edge 0 grows
    // from 50 as edge 1's demand falls, but its answer to that NOTIFY is lost, so the notifier
    // cannot know whether edge 0 enforces the new share or 50. Then edge 0 unsubscribes: its
    // `terminated` NOTIFY takes 310 ms to arrive, and until it does edge 0 enforces the new
    // share — so edge 1 may not have more than what that leaves until the notifier has the
    // `terminated` NOTIFY's answer (`run_until` also checks the sum at every millisecond).
    // Before: the `terminated` NOTIFY replaced the share in flight, edge 0 counted with 50,
    // and edge 1 got 50 while edge 0 still enforced more.
    let mut w = World::new(100.0, 2, 10 * MS);
    w.edges[0].slow = 300 * MS;
    w.demands(&[100.0, 100.0]);
    w.run_until(10 * S);
    assert!(
        within(&w.shares(), &[50.0, 50.0], 0.01),
        "equal demand, equal shares: {:?}",
        w.shares()
    );
    w.edges[0].deaf = true;
    w.demands(&[100.0, 20.0]);
    w.run_until(16 * S);
    let grown = enforced(&w.edges[0].engine).expect("a share");
    let given_back = enforced(&w.edges[1].engine).expect("a share");
    assert!(
        grown > 55.0 && given_back <= 100.0 - grown,
        "edge 0 grew, edge 1 gave back: {:?}",
        w.shares()
    );
    w.edges[0].deaf = false;
    w.demands(&[0.0, 100.0]);
    let terminated_before = w.edges[0].terminated;
    w.edges[0].sub.unsubscribe(w.now);
    let left = w.now;
    // The unsubscribe (310 ms), the `terminated` NOTIFY (310 ms) and its answer (310 ms):
    // until about `left` + 930 ms edge 1 stays within what edge 0's share leaves.
    while w.now < left + 900 * MS {
        w.run_until(w.now + MS);
        let e0 = enforced(&w.edges[0].engine).unwrap_or(0.0);
        assert!(
            e0 == 0.0 || w.shares()[1] <= 100.0 - grown + 1e-9,
            "t={} ms: edge 0 still enforces {e0}, edge 1 has {:?}",
            (w.now - left) / MS,
            w.shares()
        );
    }
    assert!(w.shares()[1] <= 100.0 - grown + 1e-9, "{:?}", w.shares());
    // Then the whole capacity is edge 1's (its NOTIFYs are paced to one a second).
    w.run_until(left + 4 * S);
    assert!(
        enforced(&w.edges[0].engine).is_none(),
        "edge 0 dropped its share"
    );
    assert!(within(&w.shares()[1..], &[100.0], 0.01), "{:?}", w.shares());
    // RFC 6665 §4.4.1: "A subscription is destroyed after a notifier sends a NOTIFY request
    // with a \"Subscription-State\" of \"terminated\"": one such NOTIFY, not one more.
    assert_eq!(w.edges[0].terminated - terminated_before, 1);
}

#[test]
fn lowering_the_capacity_cuts_every_share_to_its_new_target_not_to_zero() {
    // Three busy edges at 40 of 120; R drops to 60: each goes to 20 as soon as its pacing
    // allows — never lower, never 0 (a decrease adds nothing to what may be enforced).
    let mut w = World::new(120.0, 3, 20 * MS);
    w.demands(&[100.0, 100.0, 100.0]);
    w.run_until(5 * S);
    assert!(
        within(&w.shares(), &[40.0, 40.0, 40.0], 0.01),
        "{:?}",
        w.shares()
    );
    w.set_capacity(60.0);
    for _ in 0..3000 {
        w.run_until(w.now + MS);
        for s in w.shares() {
            assert!(s >= 20.0 * 0.99, "t={} ms: a share of {s}", w.now / MS);
        }
    }
    assert!(
        within(&w.shares(), &[20.0, 20.0, 20.0], 0.01),
        "{:?}",
        w.shares()
    );
}
