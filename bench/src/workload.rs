//! The standard workload, generated in code from a seed so every run sees the same bytes.
//!
//! Policy mix (`carrier` policies, exact proportions even for 10 rules): 80 % `to` many-tel prefixes (4–9 digits after the country
//! code, many countries, nested prefixes), 10 % `from` many-domain rules with excepts, 5 %
//! exact `one` ids, 5 % request-uri prefixes restricted to INVITE; about one rule in twenty
//! carries a target-sip-entity and one in twenty a validity window. Actions: ~70 % rate,
//! ~20 % percent, ~10 % window; alt-actions ~80 % reject, ~10 % redirect, ~10 % drop.

use loadctl::policy::*;

/// A small, fast, seedable generator (SplitMix64): the workload must not depend on a crate's
/// algorithm changing between versions.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// A string of `len` decimal digits.
    pub fn digits(&mut self, len: usize) -> String {
        (0..len)
            .map(|_| char::from(b'0' + self.below(10) as u8))
            .collect()
    }

    /// One of `items`.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// Country codes the number prefixes are drawn from.
pub const COUNTRY_CODES: &[&str] = &[
    "1", "7", "20", "27", "30", "31", "32", "33", "34", "36", "39", "40", "41", "43", "44", "45",
    "46", "47", "48", "49", "52", "55", "61", "62", "64", "65", "81", "82", "86", "90", "91",
    "351", "353", "358", "420", "852", "971", "972",
];

/// A carrier-scale full policy of `rules` rules, deterministic for `seed`.
pub fn carrier_policy(rules: usize, seed: u64) -> Ruleset {
    let mut rng = Rng::new(seed);
    let mut prefixes: Vec<String> = Vec::new();
    // The kinds are dealt in exact proportions and shuffled, so a small policy has the same
    // mix of header fields as a large one (80 to-tel, 10 from-domain, 5 one, 5 request-uri).
    let mut kinds: Vec<u64> = (0..rules as u64)
        .map(|i| (i * 100 + 50) / rules.max(1) as u64)
        .collect();
    for i in (1..kinds.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        kinds.swap(i, j);
    }
    let out: Vec<Rule> = (0..rules)
        .map(|i| {
            let kind = kinds[i];
            let mut conditions = Conditions::default();
            let sip = if kind < 80 {
                // Nested prefixes: one time in four, extend an earlier prefix.
                let prefix = if !prefixes.is_empty() && rng.chance(25) {
                    let base = rng.pick(&prefixes).clone();
                    {
                        let n = 1 + rng.below(2) as usize;
                        format!("{base}{}", rng.digits(n))
                    }
                } else {
                    let cc = rng.pick(COUNTRY_CODES);
                    {
                        let n = 4 + rng.below(6) as usize;
                        format!("+{cc}-{}", rng.digits(n))
                    }
                };
                prefixes.push(prefix.clone());
                let mut except = Vec::new();
                if rng.chance(5) {
                    except.push(ExceptTel::Prefix(tel(&format!(
                        "{prefix}{}",
                        rng.digits(2)
                    ))));
                }
                SipIdentity {
                    to: Some(set(Identity::ManyTel {
                        prefix: Some(tel(&prefix)),
                        except,
                    })),
                    ..SipIdentity::default()
                }
            } else if kind < 90 {
                let except = (0..rng.below(3))
                    .map(|_| {
                        Except::Id(uri(&format!(
                            "sip:vip{}@dom{i}.example.net",
                            rng.below(1000)
                        )))
                    })
                    .collect();
                SipIdentity {
                    from: Some(set(Identity::Many {
                        domain: Some(Domain::new(&format!("dom{i}.example.net")).expect("domain")),
                        except,
                    })),
                    ..SipIdentity::default()
                }
            } else if kind < 95 {
                SipIdentity {
                    to: Some(set(Identity::One(uri(&format!(
                        "sip:user{i}@svc.example.com"
                    ))))),
                    ..SipIdentity::default()
                }
            } else {
                conditions.method = Some(Method::Invite);
                let cc = rng.pick(COUNTRY_CODES);
                let n = 3 + rng.below(4) as usize;
                SipIdentity {
                    request_uri: Some(set(Identity::ManyTel {
                        prefix: Some(tel(&format!("+{cc}{}", rng.digits(n)))),
                        except: Vec::new(),
                    })),
                    ..SipIdentity::default()
                }
            };
            conditions.call_identity = Some(CallIdentity {
                sip: NonEmpty::one(sip),
            });
            if rng.chance(5) {
                conditions.target_sip_entity =
                    Some(uri(&format!("sip:sbc{}.example.com", rng.below(8))));
            }
            if rng.chance(5) {
                let from = Timestamp::from_unix(1_700_000_000 + rng.below(10_000_000) as i64, 0);
                let until = Timestamp::from_unix(
                    from.unix_seconds() + 3600 * (1 + rng.below(48) as i64),
                    0,
                );
                conditions.validity = Some(Validity {
                    intervals: NonEmpty::one(Interval::new(from, until).expect("ordered")),
                });
            }
            Rule {
                id: RuleId::new(&format!("r{i}")).expect("id"),
                conditions,
                accept: accept(&mut rng),
            }
        })
        .collect();
    Ruleset::full(0, out).expect("ids are unique")
}

fn accept(rng: &mut Rng) -> Accept {
    let kind = rng.below(100);
    let limit = if kind < 70 {
        Limit::Rate(Rate::new((1 + rng.below(500)) as f64).expect("rate"))
    } else if kind < 90 {
        Limit::Percent(Percent::new(rng.below(101) as f64).expect("percent"))
    } else {
        Limit::Window(1 + rng.below(100) as u32)
    };
    let alt = rng.below(100);
    let alt_action = if alt < 80 {
        AltAction::Reject
    } else if alt < 90 {
        AltAction::Redirect(NonEmpty::one(uri("sip:overflow@ivr.example.com")))
    } else {
        AltAction::Drop
    };
    Accept { limit, alt_action }
}

fn set(identity: Identity) -> IdentitySet {
    IdentitySet {
        identities: NonEmpty::one(identity),
    }
}

fn uri(s: &str) -> Uri {
    Uri::new(s).expect("generated URIs are valid")
}

fn tel(s: &str) -> TelPrefix {
    TelPrefix::new(s).expect("generated prefixes are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carrier_policy_is_deterministic_valid_and_mixed() {
        let a = carrier_policy(2_000, 7);
        assert_eq!(a, carrier_policy(2_000, 7));
        assert_ne!(a, carrier_policy(2_000, 8));
        let text = write(&a);
        let back = read(text.as_bytes(), &Limits::default()).expect("valid");
        assert_eq!(back.ruleset, a);
        let rules = a.rules().expect("full");
        let tel_to = rules
            .iter()
            .filter(|r| {
                let sip = r.conditions.call_identity.as_ref().expect("ci").sip.first();
                matches!(
                    sip.to.as_ref().map(|s| s.identities.first()),
                    Some(Identity::ManyTel { .. })
                )
            })
            .count();
        // ~80 % to many-tel, within sampling noise.
        assert!((1_500..1_700).contains(&tel_to), "{tel_to}");
        let rates = rules
            .iter()
            .filter(|r| matches!(r.accept.limit, Limit::Rate(_)))
            .count();
        assert!((1_300..1_500).contains(&rates), "{rates}");
    }

    #[test]
    fn hot_requests_match_the_rule_they_aim_at() {
        let policy = hot_policy();
        let engine = loadctl::Engine::new(loadctl::EngineConfig::default().with_shards(1));
        engine
            .publish(&loadctl::runtime::Source::local("t"), policy.clone())
            .expect("publish");
        let mut shard = engine.attach();
        let requests = hot_requests(&policy, &[0, 1, 2, 3], 400, 1);
        assert_eq!(requests.len(), 400);
        let mut seen = [0; 4];
        for (k, r) in &requests {
            let d = shard.classify(&r.as_request(loadctl::runtime::Time {
                monotonic_ns: 0,
                unix_ns: 0,
            }));
            let id = d.rule.map(|r| r.id().as_str().to_owned());
            assert_eq!(id.as_deref(), Some(hot_rules()[*k].0), "{r:?}");
            // Return the window slot (a window of 256 would fill before the 400 requests end).
            if let Some(t) = d.ticket {
                shard.complete(t);
            }
            seen[*k] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }
}

/// A request of the workload, owning its header values as a SIP stack would hold them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedRequest {
    /// Method.
    pub method: &'static str,
    /// From header value.
    pub from: String,
    /// To header value.
    pub to: String,
    /// Request-URI.
    pub request_uri: String,
    /// P-Asserted-Identity header value.
    pub p_asserted_identity: Option<String>,
    /// Target entity.
    pub target: Option<String>,
    /// Outside a dialog.
    pub initial: bool,
    /// Transport.
    pub transport: loadctl::runtime::Transport,
}

impl OwnedRequest {
    /// The request as a raw SIP message, the way it arrives on the wire (request line, Via,
    /// Max-Forwards, From, To with a tag when in-dialog, Call-ID, CSeq, P-Asserted-Identity when
    /// present, Contact, Content-Type, Content-Length). `n` varies the Via branch and Call-ID.
    pub fn to_sip(&self, n: usize) -> Vec<u8> {
        let mut m = format!(
            "{} {} SIP/2.0\r\nVia: SIP/2.0/UDP 192.0.2.{};branch=z9hG4bK{n:08x}\r\nMax-Forwards: 70\r\nFrom: {}\r\nTo: {}{}\r\nCall-ID: {n:x}@192.0.2.1\r\nCSeq: 1 {}\r\n",
            self.method,
            self.request_uri,
            n % 250,
            self.from,
            self.to,
            if self.initial { "" } else { ";tag=d1" },
            self.method
        );
        if let Some(p) = &self.p_asserted_identity {
            m.push_str(&format!("P-Asserted-Identity: {p}\r\n"));
        }
        m.push_str("Contact: <sip:caller@192.0.2.1:5060>\r\nContent-Type: application/sdp\r\nContent-Length: 0\r\n\r\n");
        m.into_bytes()
    }

    /// Borrowed view for the engine, at time `time`.
    pub fn as_request(&self, time: loadctl::runtime::Time) -> loadctl::runtime::Request<'_> {
        loadctl::runtime::Request {
            method: self.method,
            identities: loadctl::compile::Identities {
                from: Some(&self.from),
                to: Some(&self.to),
                request_uri: Some(&self.request_uri),
                p_asserted_identity: self.p_asserted_identity.as_deref().into(),
                target: self.target.as_deref(),
            },
            transport: self.transport,
            initial: self.initial,
            // The harness's in-dialog requests stand for dialogs the caller keeps.
            known_dialog: !self.initial,
            source: None,
            event: None,
            time: Some(time),
            resource_priority: loadctl::sip::HeaderValues::NONE,
        }
    }
}

const NAMES: &[&str] = &[
    "Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi",
];

/// Writes a global number's digits with visual separators, sometimes.
fn pretty_number(rng: &mut Rng, digits: &str) -> String {
    match rng.below(3) {
        0 => format!("+{digits}"),
        1 => {
            let (a, b) = digits.split_at(digits.len().min(2));
            format!("+{a}-{b}")
        }
        _ => {
            let (a, rest) = digits.split_at(digits.len().min(1));
            let (b, c) = rest.split_at(rest.len().min(3));
            format!("+{a}({b}){c}")
        }
    }
}

/// A number URI as header value: `tel:` or a `user=phone` SIP URI, with display name and tag.
fn number_header(rng: &mut Rng, digits: &str) -> String {
    let n = pretty_number(rng, digits);
    let name = rng.pick(NAMES);
    if rng.chance(50) {
        format!("\"{name}\" <tel:{n}>;tag={:x}", rng.next_u64())
    } else {
        format!(
            "\"{name}\" <sip:{n}@gw{}.carrier.example;user=phone>;tag={:x}",
            rng.below(4),
            rng.next_u64()
        )
    }
}

/// `n` requests for `policy` (deterministic for `seed`): ~60 % INVITEs aimed at some rule,
/// ~30 % INVITEs matching none, ~10 % exempt (ACK, BYE, in-dialog) or other methods.
pub fn requests(policy: &Ruleset, n: usize, seed: u64) -> Vec<OwnedRequest> {
    let mut rng = Rng::new(seed);
    let rules = policy.rules().unwrap_or(&[]);
    (0..n)
        .map(|_| {
            let kind = rng.below(100);
            let mut r = initial_invite(&mut rng);
            if kind < 60 && !rules.is_empty() {
                let rule = rng.pick(rules);
                aim_at(&mut rng, rule, &mut r);
            } else if kind >= 90 {
                r.method = *rng.pick(&["ACK", "BYE", "OPTIONS", "REGISTER", "MESSAGE", "NOTIFY"]);
                r.initial = !matches!(r.method, "ACK" | "BYE") && rng.chance(70);
            }
            r
        })
        .collect()
}

/// An initial INVITE to a number no rule of the generated policies covers (`+999…`), with the
/// header values a SIP stack would hold.
fn initial_invite(rng: &mut Rng) -> OwnedRequest {
    let caller = format!(
        "\"{}\" <sip:user{}@customers{}.example.org;transport=tcp>;tag={:x}",
        rng.pick(NAMES),
        rng.below(100_000),
        rng.below(50),
        rng.next_u64()
    );
    let callee = format!("999{}", rng.digits(8));
    OwnedRequest {
        method: "INVITE",
        from: caller,
        to: number_header(rng, &callee),
        request_uri: format!("sip:+999{}@core.example;user=phone", rng.digits(8)),
        p_asserted_identity: rng
            .chance(30)
            .then(|| format!("<sip:pai{}@trusted.example>", rng.below(1000))),
        target: rng
            .chance(20)
            .then(|| format!("sip:sbc{}.example.com", rng.below(8))),
        initial: true,
        transport: if rng.chance(70) {
            loadctl::runtime::Transport::Udp
        } else {
            loadctl::runtime::Transport::Tcp
        },
    }
}

/// Rewrites the header a rule's first `<sip>` block looks at so the request hits it.
fn aim_at(rng: &mut Rng, rule: &Rule, r: &mut OwnedRequest) {
    let Some(ci) = &rule.conditions.call_identity else {
        return;
    };
    for (field, set) in ci.sip.first().fields() {
        let value = match set.identities.first() {
            Identity::ManyTel { prefix, .. } => {
                let digits = prefix
                    .as_ref()
                    .and_then(TelPrefix::digits)
                    .unwrap_or_default();
                let digits = digits.trim_start_matches('+');
                let fill = 12usize.saturating_sub(digits.len()).max(2);
                let number = format!("{digits}{}", rng.digits(fill));
                number_header(rng, &number)
            }
            Identity::Many {
                domain: Some(d), ..
            } => {
                format!(
                    "<sip:caller{}@{d}>;tag={:x}",
                    rng.below(10_000),
                    rng.next_u64()
                )
            }
            Identity::Many { domain: None, .. } => continue,
            Identity::One(uri) => {
                format!("\"{}\" <{uri}>;tag={:x}", rng.pick(NAMES), rng.next_u64())
            }
        };
        match field {
            Field::From => r.from = value,
            Field::To => r.to = value,
            Field::RequestUri => {
                r.request_uri = loadctl::uri::header_uris(&value)
                    .next()
                    .and_then(Result::ok)
                    .unwrap_or_default()
                    .to_owned()
            }
            Field::PAssertedIdentity => r.p_asserted_identity = Some(value),
        }
    }
    if let Some(t) = &rule.conditions.target_sip_entity {
        r.target = Some(t.to_string());
    }
}

/// The `small-10` policy: ten rules of the carrier mix.
pub fn small_policy(seed: u64) -> Ruleset {
    carrier_policy(10, seed)
}

/// The rate of the hot-rule policy's fast rule: ⌊200,000/s · 0.5 ms⌋ = 100 tokens per lease
/// at the engine's default lease period.
pub const HOT_RATE: f64 = 200_000.0;

/// The rate of the hot-rule policy's slow rule: below 2,000/s a lease is one token.
pub const HOT_SLOW: f64 = 1_000.0;

/// The rules of the hot-rule policy ([`hot_policy`]), in its order, with their limits, so the
/// harness can state the bounds their shared cells obey. The fourth, a percent rule admitting
/// everything, keeps no shared state: the control the three others are compared with.
pub fn hot_rules() -> [(&'static str, Limit); 4] {
    [
        ("hot-rate", Limit::Rate(Rate::new(HOT_RATE).expect("rate"))),
        ("hot-slow", Limit::Rate(Rate::new(HOT_SLOW).expect("rate"))),
        ("hot-window", Limit::Window(HOT_WINDOW)),
        (
            "hot-local",
            Limit::Percent(Percent::new(100.0).expect("percent")),
        ),
    ]
}

/// The window of the hot-rule policy's window rule: room for four transactions in flight per
/// thread on 64 threads, so that rule admits every request it is offered and its cell sees
/// its worst case, a take and a return per request.
pub const HOT_WINDOW: u32 = 256;

/// The hot-rule policy: four rules every request of [`hot_requests`] matches one of, by the
/// To number's prefix (`+44 20…` → `hot-rate`, `+44 30…` → `hot-slow`, `+44 40…` →
/// `hot-window`, `+44 50…` → `hot-local`, limits as [`hot_rules`] says), all refusing with a
/// reject.
pub fn hot_policy() -> Ruleset {
    let rules = hot_rules()
        .into_iter()
        .zip(["+44-20", "+44-30", "+44-40", "+44-50"])
        .map(|((id, limit), prefix)| Rule {
            id: RuleId::new(id).expect("id"),
            conditions: Conditions {
                call_identity: Some(CallIdentity {
                    sip: NonEmpty::one(SipIdentity {
                        to: Some(set(Identity::ManyTel {
                            prefix: Some(tel(prefix)),
                            except: Vec::new(),
                        })),
                        ..SipIdentity::default()
                    }),
                }),
                ..Conditions::default()
            },
            accept: Accept {
                limit,
                alt_action: AltAction::Reject,
            },
        })
        .collect();
    Ruleset::full(0, rules).expect("ids are unique")
}

/// `n` initial INVITEs for `policy` (deterministic for `seed`), each aimed at one of the rules
/// at the indexes `aim` (chosen uniformly) and paired with that index.
pub fn hot_requests(
    policy: &Ruleset,
    aim: &[usize],
    n: usize,
    seed: u64,
) -> Vec<(usize, OwnedRequest)> {
    let mut rng = Rng::new(seed);
    let rules = policy.rules().unwrap_or(&[]);
    (0..n)
        .filter_map(|_| {
            let k = *rng.pick(aim);
            let mut r = initial_invite(&mut rng);
            aim_at(&mut rng, rules.get(k)?, &mut r);
            Some((k, r))
        })
        .collect()
}
