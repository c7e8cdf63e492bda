//! Properties of classification: the rate bound under load, the index agreeing with a
//! rule-by-rule scan, and no allocation on the classify path.

use std::sync::Arc;

use crate::common::{NS, ruleset};
use loadctl::compile::{CompileConfig, CompiledPolicy, Identities, Scratch, compile};
use loadctl::policy::{Limits, read};
use loadctl::runtime::*;
use proptest::prelude::*;

const SECOND: u64 = 1_000_000_000;

/// A shard of a one-shard engine enforcing `rules`.
fn shard_of(rules: &str) -> Shard {
    Engine::from_ruleset(ruleset(rules), EngineConfig::default().with_shards(1))
        .expect("publishes")
        .attach()
}

fn compiled(rules: &str) -> Arc<CompiledPolicy> {
    let doc = format!("<ruleset {NS} version=\"0\" state=\"full\">{rules}</ruleset>");
    let rs = read(doc.as_bytes(), &Limits::default())
        .unwrap_or_else(|e| panic!("{e}\n{doc}"))
        .ruleset;
    Arc::new(compile(&rs, &CompileConfig::default()).expect("full"))
}

fn request(monotonic_ns: u64) -> Request<'static> {
    Request {
        method: "INVITE",
        identities: Identities {
            to: Some("<tel:+1-900-555-0001>"),
            ..Identities::default()
        },
        transport: Transport::Udp,
        initial: true,
        event: None,
        time: Some(Time {
            monotonic_ns,
            unix_ns: 0,
        }),
        ..Request::default()
    }
}

/// Offers `arrivals` (monotonic ns, ascending) to a rate-`r` rule; returns admission times.
fn admit(rate: f64, arrivals: &[u64]) -> Vec<u64> {
    let mut shard = shard_of(&format!(
        "<rule id=\"hot\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1-900\"/></lc:to></lc:sip></lc:call-identity></conditions>\
         <actions><lc:accept><lc:rate>{rate}</lc:rate></lc:accept></actions></rule>"
    ));
    arrivals
        .iter()
        .copied()
        .filter(|&t| shard.classify(&request(t)).verdict == Verdict::Accept)
        .collect()
}

/// The largest number of admissions in any window [t, t + 1 s).
fn max_per_sliding_second(admitted: &[u64]) -> usize {
    let mut best = 0;
    let mut j = 0;
    for i in 0..admitted.len() {
        while j < admitted.len() && admitted[j] < admitted[i] + SECOND {
            j += 1;
        }
        best = best.max(j - i);
    }
    best
}

/// Deterministic exponential inter-arrival times (Poisson process) from a seed.
fn poisson(rate_per_s: f64, duration_ns: u64, seed: u64) -> Vec<u64> {
    let mut state = seed | 1;
    let mut t = 0f64;
    let mut out = Vec::new();
    loop {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let u = ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
        t += -u.ln() / rate_per_s * 1e9;
        if t >= duration_ns as f64 {
            return out;
        }
        out.push(t as u64);
    }
}

fn check_rate_bounds(rate: f64, arrivals: &[u64]) -> Result<(), TestCaseError> {
    let admitted = admit(rate, arrivals);
    let tau = 0.1;
    let burst = (rate * tau).ceil().max(1.0);
    let bound = rate * (1.0 + tau) + 1.0;
    let worst = max_per_sliding_second(&admitted) as f64;
    prop_assert!(
        worst <= bound,
        "rate {rate}: {worst} admitted in one second, bound {bound}"
    );
    let expected = rate * 10.0 + burst;
    let got = admitted.len() as f64;
    prop_assert!(
        (got - expected).abs() <= expected * 0.01,
        "rate {rate}: {got} admitted in 10 s, expected {expected} ± 1 %"
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Offered load 3r, evenly spaced.
    #[test]
    fn rate_bound_under_uniform_overload(rate in 50.0f64..2_000.0) {
        let gap = (1e9 / (3.0 * rate)) as u64;
        let arrivals: Vec<u64> = (0..).map(|i| i * gap).take_while(|&t| t < 10 * SECOND).collect();
        check_rate_bounds(rate, &arrivals)?;
    }

    /// Offered load 3r, Poisson arrivals.
    #[test]
    fn rate_bound_under_poisson_overload(rate in 50.0f64..2_000.0, seed in any::<u64>()) {
        let arrivals = poisson(3.0 * rate, 10 * SECOND, seed);
        check_rate_bounds(rate, &arrivals)?;
    }
}

#[test]
fn tail_drop_contrast_gcra_never_admits_a_seconds_quota_at_once() {
    // 1000/s offered 3000/s: a per-second counter would pass 1000 in the first 333 ms; GCRA
    // passes the burst (100) and then one per millisecond.
    let arrivals: Vec<u64> = (0..30_000u64).map(|i| i * SECOND / 3_000).collect();
    let admitted = admit(1000.0, &arrivals);
    let first_100ms = admitted.iter().filter(|&&t| t < SECOND / 10).count();
    assert!((195..=201).contains(&first_100ms), "{first_100ms}");
}

// ------------------------------------------------------------------ index ≡ scan

const DOMAINS: [&str; 3] = ["a.example", "b.example", "c.example"];
const USERS: [&str; 3] = ["alice", "bob", "carol"];
const PREFIXES: [&str; 6] = ["+1", "+1-212", "+1-212-555", "+44", "555", "a.example"];
const NUMBERS: [&str; 8] = [
    "tel:+12125551234",
    "tel:+1-212-666-0000",
    "tel:+4420",
    "tel:5551234;phone-context=a.example",
    "tel:5559;phone-context=+1-212",
    "tel:77;phone-context=555",
    "tel:0;phone-context=+4-4",
    "sip:+12125550000@gw.b.example;user=phone",
];

fn identity_xml() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..3usize, 0..3usize)
            .prop_map(|(u, d)| format!("<one id=\"sip:{}@{}\"/>", USERS[u], DOMAINS[d])),
        (0..NUMBERS.len()).prop_map(|n| format!("<one id=\"{}\"/>", NUMBERS[n])),
        (0..3usize, proptest::option::of((0..3usize, 0..3usize))).prop_map(|(d, ex)| match ex {
            None => format!("<many domain=\"{}\"/>", DOMAINS[d]),
            Some((u, d2)) => format!(
                "<many domain=\"{}\"><except id=\"sip:{}@{}\"/></many>",
                DOMAINS[d], USERS[u], DOMAINS[d2]
            ),
        }),
        (0..3usize).prop_map(|d| format!("<many><except domain=\"{}\"/></many>", DOMAINS[d])),
        (0..6usize, proptest::option::of(0..6usize)).prop_map(|(p, ex)| match ex {
            None => format!("<many-tel prefix=\"{}\"/>", PREFIXES[p]),
            Some(e) => format!(
                "<many-tel prefix=\"{}\"><except-tel prefix=\"{}\"/></many-tel>",
                PREFIXES[p], PREFIXES[e]
            ),
        }),
    ]
}

fn field_xml() -> impl Strategy<Value = String> {
    (0..4usize, proptest::collection::vec(identity_xml(), 1..3)).prop_map(|(f, ids)| {
        let name = ["from", "to", "request-uri", "p-asserted-identity"][f];
        format!("<lc:{name}>{}</lc:{name}>", ids.concat())
    })
}

/// The `<call-identity>` of a rule with these `<sip>` blocks (none: no element). Duplicate
/// field names within a block are invalid: the first of each is kept.
fn call_identity_xml(sips: Vec<Vec<String>>) -> String {
    let mut c = String::new();
    if !sips.is_empty() {
        c.push_str("<lc:call-identity>");
        for fields in sips {
            let mut seen = std::collections::HashSet::new();
            let fields: String = fields
                .into_iter()
                .filter(|f| seen.insert(f.split('>').next().unwrap_or("").to_owned()))
                .collect();
            c.push_str(&format!("<lc:sip>{fields}</lc:sip>"));
        }
        c.push_str("</lc:call-identity>");
    }
    c
}

fn rule_xml(i: usize) -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(proptest::collection::vec(field_xml(), 1..3), 0..3),
        proptest::option::of(prop_oneof![Just("INVITE"), Just("MESSAGE")]),
        proptest::option::of(0..TARGETS.len()),
    )
        .prop_map(move |(sips, method, target)| {
            let mut c = call_identity_xml(sips);
            if let Some(m) = method {
                c.push_str(&format!("<method>{m}</method>"));
            }
            if let Some(t) = target {
                c.push_str(&format!("<lc:target-sip-entity>{}</lc:target-sip-entity>", TARGETS[t]));
            }
            format!("<rule id=\"r{i}\"><conditions>{c}</conditions><actions><lc:accept><lc:rate>1</lc:rate></lc:accept></actions></rule>")
        })
}

const TARGETS: [&str; 2] = ["sip:sbc1.example", "sip:sbc2.example"];

fn policy_xml() -> impl Strategy<Value = String> {
    (1..12usize)
        .prop_flat_map(|n| (0..n).map(rule_xml).collect::<Vec<_>>())
        .prop_map(|rules| rules.concat())
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..3usize, 0..3usize, any::<bool>()).prop_map(|(u, d, params)| {
            let p = if params { ";transport=tcp" } else { "" };
            format!(
                "\"X\" <sip:{}@{}{p}>;tag=1",
                USERS[u],
                DOMAINS[d].to_uppercase()
            )
        }),
        (0..NUMBERS.len()).prop_map(|n| format!("<{}>", NUMBERS[n])),
        Just("<sip:nobody@nowhere.example>".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn index_finds_the_same_rule_as_a_scan(
        rules in policy_xml(),
        values in proptest::collection::vec((value(), value(), value(), proptest::option::of(value()), any::<bool>(), proptest::option::of(0..TARGETS.len())), 1..20),
    ) {
        let policy = compiled(&rules);
        let mut scratch = Scratch::default();
        for (from, to, ruri, pai, message, target) in &values {
            let method = if *message { "MESSAGE" } else { "INVITE" };
            let request = (method, 0, from.as_str(), to.as_str(), ruri.as_str(), pai.as_deref(), *target);
            index_agrees_with_scan(&policy, &mut scratch, &rules, request)?;
        }
    }
}

/// A request for [`index_agrees_with_scan`]: method, wall-clock time (ns), From, To, the
/// Request-URI header value, P-Asserted-Identity and the target (an index into `TARGETS`).
type ProbeRequest<'a> = (
    &'a str,
    i128,
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
    Option<usize>,
);

/// The rule the indexes find for `request` is the first rule a plain scan of every rule finds.
fn index_agrees_with_scan(
    policy: &CompiledPolicy,
    scratch: &mut Scratch,
    rules: &str,
    (method, now, from, to, ruri, pai, target): ProbeRequest<'_>,
) -> Result<(), TestCaseError> {
    let ruri_uri = loadctl::uri::header_uris(ruri)
        .next()
        .and_then(Result::ok)
        .unwrap_or("");
    let ids = Identities {
        from: Some(from),
        to: Some(to),
        request_uri: Some(ruri_uri),
        p_asserted_identity: pai.into(),
        target: target.map(|t| TARGETS[t]),
    };
    let found = policy.find_with(method, now, &ids, scratch);
    let mut scan_scratch = Scratch::default();
    let view = policy.view(&ids, &mut scan_scratch);
    let scanned = (0..policy.len()).find(|&i| policy.check(i, method, now, &view).is_ok());
    prop_assert_eq!(
        found,
        scanned,
        "{} {} {} {} {:?} {:?}\n{}",
        method,
        from,
        to,
        ruri,
        pai,
        target,
        rules
    );
    Ok(())
}

/// Methods a rule may name and a request may carry: the default set (RFC 7200 §5.2), the other
/// well-known ones, an extension method and a lower-case name (methods are case-sensitive).
const METHODS: [&str; 16] = [
    "INVITE",
    "MESSAGE",
    "REGISTER",
    "SUBSCRIBE",
    "OPTIONS",
    "PUBLISH",
    "ACK",
    "BYE",
    "CANCEL",
    "NOTIFY",
    "INFO",
    "PRACK",
    "UPDATE",
    "REFER",
    "FOO",
    "invite",
];
/// 2023-11-14T22:13:20Z, inside the validity interval below; the other time is outside it.
const INSIDE_NS: i128 = 1_700_000_000 * 1_000_000_000;
const OUTSIDE_NS: i128 = 1_700_004_000 * 1_000_000_000;

/// Like [`rule_xml`], with any method, validity and never-matching conditions too: the index
/// entries of plain rules decide the method test alone, the rest take the full check.
fn any_rule_xml(i: usize) -> impl Strategy<Value = String> {
    (
        proptest::collection::vec(proptest::collection::vec(field_xml(), 1..3), 0..3),
        proptest::option::of(0..METHODS.len()),
        proptest::option::of(0..TARGETS.len()),
        any::<bool>(),
        0..8u8,
    )
        .prop_map(move |(sips, method, target, validity, never)| {
            let mut c = call_identity_xml(sips);
            if let Some(m) = method {
                c.push_str(&format!("<method>{}</method>", METHODS[m]));
            }
            if let Some(t) = target {
                c.push_str(&format!("<lc:target-sip-entity>{}</lc:target-sip-entity>", TARGETS[t]));
            }
            if validity {
                c.push_str("<validity><from>2023-11-14T22:00:00Z</from><until>2023-11-14T23:00:00Z</until></validity>");
            }
            if never == 0 {
                c.push_str("<g:area xmlns:g=\"urn:example:geo\"/>");
            }
            format!("<rule id=\"r{i}\"><conditions>{c}</conditions><actions><lc:accept><lc:rate>1</lc:rate></lc:accept></actions></rule>")
        })
}

fn any_policy_xml() -> impl Strategy<Value = String> {
    (1..12usize)
        .prop_flat_map(|n| (0..n).map(any_rule_xml).collect::<Vec<_>>())
        .prop_map(|rules| rules.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// [`index_finds_the_same_rule_as_a_scan`] over every method (rules and requests),
    /// validity and never-matching rules: an entry's method code must agree with the rule's
    /// full check (with only INVITE and MESSAGE requests, an entry for the default set that
    /// accepted any well-known method would go unnoticed).
    #[test]
    fn index_finds_the_same_rule_as_a_scan_for_every_method(
        rules in any_policy_xml(),
        values in proptest::collection::vec((value(), value(), value(), proptest::option::of(value()), 0..METHODS.len(), any::<bool>(), proptest::option::of(0..TARGETS.len())), 1..20),
    ) {
        let policy = compiled(&rules);
        let mut scratch = Scratch::default();
        for (from, to, ruri, pai, method, inside, target) in &values {
            let now = if *inside { INSIDE_NS } else { OUTSIDE_NS };
            let request = (METHODS[*method], now, from.as_str(), to.as_str(), ruri.as_str(), pai.as_deref(), *target);
            index_agrees_with_scan(&policy, &mut scratch, &rules, request)?;
        }
    }
}

// ------------------------------------------------------------------ lazy ≡ eager

/// Identities that read different parts of one field: exact ids (the key and the
/// parameters), `many` with and without a domain and with except ids and except domains (the
/// host, the key on demand), `many-tel` with and without a prefix and with except prefixes
/// and except ids (the number, the key on demand).
fn mixed_identity_xml() -> impl Strategy<Value = String> {
    let sip_id = (0..3usize, 0..3usize, any::<bool>()).prop_map(|(u, d, transport)| {
        let p = if transport { ";transport=tcp" } else { "" };
        format!("sip:{}@{}{p}", USERS[u], DOMAINS[d])
    });
    let any_id = prop_oneof![
        sip_id.clone(),
        (0..NUMBERS.len()).prop_map(|n| NUMBERS[n].to_string()),
    ];
    let except = prop_oneof![
        any_id
            .clone()
            .prop_map(|id| format!("<except id=\"{id}\"/>")),
        (0..3usize).prop_map(|d| format!("<except domain=\"{}\"/>", DOMAINS[d])),
    ];
    let except_tel = prop_oneof![
        any_id
            .clone()
            .prop_map(|id| format!("<except-tel id=\"{id}\"/>")),
        (0..PREFIXES.len()).prop_map(|p| format!("<except-tel prefix=\"{}\"/>", PREFIXES[p])),
    ];
    prop_oneof![
        any_id.prop_map(|id| format!("<one id=\"{id}\"/>")),
        (
            proptest::option::of(0..3usize),
            proptest::collection::vec(except, 0..3)
        )
            .prop_map(|(d, ex)| {
                let domain = d.map_or(String::new(), |d| format!(" domain=\"{}\"", DOMAINS[d]));
                format!("<many{domain}>{}</many>", ex.concat())
            }),
        (
            proptest::option::of(0..PREFIXES.len()),
            proptest::collection::vec(except_tel, 0..3)
        )
            .prop_map(|(p, ex)| {
                let prefix = p.map_or(String::new(), |p| format!(" prefix=\"{}\"", PREFIXES[p]));
                format!("<many-tel{prefix}>{}</many-tel>", ex.concat())
            }),
    ]
}

/// Rules whose `<sip>` blocks test From and P-Asserted-Identity (and sometimes the
/// Request-URI) with several mixed identities each, so one field is indexed by its key, its
/// host and its number at once and candidates compare keys built on demand.
fn mixed_policy_xml() -> impl Strategy<Value = String> {
    let field = (
        prop_oneof![3 => Just("from"), 3 => Just("p-asserted-identity"), 1 => Just("request-uri")],
        proptest::collection::vec(mixed_identity_xml(), 1..4),
    )
        .prop_map(|(name, ids)| format!("<lc:{name}>{}</lc:{name}>", ids.concat()));
    let rule = proptest::collection::vec(proptest::collection::vec(field, 1..3), 1..3);
    proptest::collection::vec(rule, 1..10).prop_map(rate_rules_xml)
}

/// The first rule whose full check holds on an eager view of `ids` (an INVITE at time 0).
fn scanned(policy: &CompiledPolicy, ids: &Identities<'_>) -> Option<usize> {
    let mut eager = Scratch::default();
    let view = policy.view(ids, &mut eager);
    (0..policy.len()).find(|&i| policy.check(i, "INVITE", 0, &view).is_ok())
}

/// Rate rules `r0`, `r1`, … with the `<sip>` blocks given (each a list of field tests).
fn rate_rules_xml(rules: Vec<Vec<Vec<String>>>) -> String {
    rules
        .into_iter()
        .enumerate()
        .map(|(i, sips)| {
            format!(
                "<rule id=\"r{i}\"><conditions>{}</conditions><actions><lc:accept><lc:rate>1</lc:rate></lc:accept></actions></rule>",
                call_identity_xml(sips)
            )
        })
        .collect()
}

/// Request URIs of every kind a field may hold, valid or not: SIP URIs in any case, with
/// escapes, ports and parameters; `user=phone` SIP URIs whose host is a policy domain; tel
/// URIs; and URIs `uri::parse` refuses (the field then counts as absent, lazily or not).
fn mixed_uri() -> impl Strategy<Value = String> {
    prop_oneof![
        (
            0..3usize,
            0..3usize,
            any::<bool>(),
            proptest::sample::select(
                &["", ";transport=tcp", ";TRANSPORT=TCP", ";user=ip", ";lr"][..]
            ),
            proptest::sample::select(&["", ":5060"][..]),
        )
            .prop_map(|(u, d, upper, param, port)| {
                let host = if upper {
                    DOMAINS[d].to_uppercase()
                } else {
                    DOMAINS[d].to_string()
                };
                format!("sip:{}@{host}{port}{param}", USERS[u])
            }),
        (0..NUMBERS.len()).prop_map(|n| NUMBERS[n].to_string()),
        (0..3usize, any::<bool>()).prop_map(|(d, upper)| {
            let host = if upper {
                DOMAINS[d].to_uppercase()
            } else {
                DOMAINS[d].to_string()
            };
            format!("sip:+1-212-555-1234@{host};user=phone")
        }),
        proptest::sample::select(
            &[
                "sip:%61lice@a.example",
                "sip:alice@%61.example",
                "sip:alice:pw@a.example",
                "sips:alice@a.example",
                "sip:a.example",
                "sip:alice@[2001:db8::1]",
                "tel:+1-212-555-1234;isub=1",
                "urn:service:sos",
                // Refused by `uri::parse`.
                "sip:al ice@a.example",
                "sip:alice@a!.example",
                "sip:alice@a.example:99999",
                "sip:alice@",
                "sip:%6@a.example",
                "tel:",
                "nonsense",
                "",
            ][..]
        )
        .prop_map(str::to_string),
    ]
}

/// A header value holding [`mixed_uri`]s: a name-addr with a tag, a bare URI, or two
/// comma-separated values (for P-Asserted-Identity).
fn mixed_value() -> impl Strategy<Value = String> {
    prop_oneof![
        mixed_uri().prop_map(|u| format!("\"X\" <{u}>;tag=1")),
        mixed_uri().prop_map(|u| format!("<{u}>")),
        (mixed_uri(), mixed_uri()).prop_map(|(a, b)| format!("<{a}>, <{b}>")),
        Just("\"X\" <sip:alice@a.example".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// `find_with` builds only the parts of each field the policy reads on every request and
    /// a candidate's keys on demand; `find` on a complete view builds everything up front. They
    /// find the same rule, and it is the first rule a scan finds, on policies that read the key,
    /// the host and the number of the same field and on URIs `uri::parse` refuses.
    #[test]
    fn lazy_view_finds_the_same_rule_as_an_eager_one(
        rules in mixed_policy_xml(),
        requests in proptest::collection::vec((mixed_value(), mixed_uri(), mixed_value()), 1..20),
    ) {
        let policy = compiled(&rules);
        let mut lazy = Scratch::default();
        for (from, ruri, pai) in &requests {
            let ids = Identities {
                from: Some(from),
                request_uri: Some(ruri),
                p_asserted_identity: Some(pai.as_str()).into(),
                ..Identities::default()
            };
            let found = policy.find_with("INVITE", 0, &ids, &mut lazy);
            let mut eager = Scratch::default();
            let view = policy.view(&ids, &mut eager);
            let eagerly = policy.find("INVITE", 0, &view, &mut Vec::new());
            let scanned = (0..policy.len()).find(|&i| policy.check(i, "INVITE", 0, &view).is_ok());
            prop_assert_eq!(found, eagerly, "{} | {} | {}\n{}", from, ruri, pai, rules);
            prop_assert_eq!(found, scanned, "{} | {} | {}\n{}", from, ruri, pai, rules);
        }
    }
}

/// Rules where only `many` (with and without a domain, with excepts) look at From, in blocks
/// that may also test the Request-URI's number, so the From index finds rules by host alone:
/// `find_with` looks From's host up before parsing From, and a rule found through the
/// Request-URI reads From on demand.
fn host_only_policy_xml() -> impl Strategy<Value = String> {
    let except = prop_oneof![
        (0..3usize, 0..3usize)
            .prop_map(|(u, d)| format!("<except id=\"sip:{}@{}\"/>", USERS[u], DOMAINS[d])),
        (0..3usize).prop_map(|d| format!("<except domain=\"{}\"/>", DOMAINS[d])),
    ];
    let many = (
        proptest::option::of(0..3usize),
        proptest::collection::vec(except, 0..2),
    )
        .prop_map(|(d, ex)| {
            let domain = d.map_or(String::new(), |d| format!(" domain=\"{}\"", DOMAINS[d]));
            format!("<many{domain}>{}</many>", ex.concat())
        });
    let from = proptest::collection::vec(many, 1..3)
        .prop_map(|ids| format!("<lc:from>{}</lc:from>", ids.concat()));
    let ruri = (0..PREFIXES.len()).prop_map(|p| {
        format!(
            "<lc:request-uri><many-tel prefix=\"{}\"/></lc:request-uri>",
            PREFIXES[p]
        )
    });
    let block = (from, proptest::option::of(ruri))
        .prop_map(|(from, ruri)| vec![from].into_iter().chain(ruri).collect::<Vec<_>>());
    let rule = proptest::collection::vec(block, 1..3);
    proptest::collection::vec(rule, 1..8).prop_map(rate_rules_xml)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// A From that only `many` read is looked up by its host before it is parsed, and parsed
    /// on demand when a candidate found another way reads it: `find_with` finds the rule an
    /// eager view and a scan find, for hosts the index holds and does not hold, in any case,
    /// and for From values `uri::parse` refuses.
    #[test]
    fn from_read_by_host_alone_finds_the_same_rule(
        rules in host_only_policy_xml(),
        requests in proptest::collection::vec((mixed_value(), mixed_uri()), 1..20),
    ) {
        let policy = compiled(&rules);
        let mut lazy = Scratch::default();
        for (from, ruri) in &requests {
            let ids = Identities {
                from: Some(from),
                request_uri: Some(ruri),
                ..Identities::default()
            };
            let found = policy.find_with("INVITE", 0, &ids, &mut lazy);
            prop_assert_eq!(found, scanned(&policy, &ids), "{} | {}\n{}", from, ruri, rules);
        }
    }
}

/// Global number prefixes only (so the fields they test are looked up by their number before
/// they are parsed), and local ones beside them in some policies (which then parse).
const GLOBAL_PREFIXES: [&str; 4] = ["+1", "+1-212", "+1-212-555", "+44"];

/// Rules where only `many-tel` (mostly with global prefixes) and `one` with SIP ids look at the
/// Request-URI and To, in blocks that may also test From's domain: `find_with` walks the number
/// of a Request-URI or To before parsing it (taking what it finds as candidates once the URI
/// parses), and a rule found through another field reads it on demand.
fn global_number_policy_xml() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![
        6 => (0..GLOBAL_PREFIXES.len()).prop_map(|p| GLOBAL_PREFIXES[p].to_string()),
        1 => (0..PREFIXES.len()).prop_map(|p| PREFIXES[p].to_string()),
    ];
    let except = (0..GLOBAL_PREFIXES.len())
        .prop_map(|p| format!("<except-tel prefix=\"{}-9\"/>", GLOBAL_PREFIXES[p]));
    let tel = prop_oneof![
        6 => (prefix, proptest::option::of(except)).prop_map(|(p, ex)| {
            format!("<many-tel prefix=\"{p}\">{}</many-tel>", ex.unwrap_or_default())
        }),
        // A key that is no number: numbers are still found by their digits alone.
        1 => (0..3usize).prop_map(|u| format!("<one id=\"sip:{}@a.example\"/>", USERS[u])),
    ];
    let field = (
        prop_oneof![Just("request-uri"), Just("to")],
        proptest::collection::vec(tel, 1..3),
    )
        .prop_map(|(name, ids)| format!("<lc:{name}>{}</lc:{name}>", ids.concat()));
    let from =
        (0..3usize).prop_map(|d| format!("<lc:from><many domain=\"{}\"/></lc:from>", DOMAINS[d]));
    let block = (field, proptest::option::of(from))
        .prop_map(|(field, from)| vec![field].into_iter().chain(from).collect::<Vec<_>>());
    let rule = proptest::collection::vec(block, 1..3);
    proptest::collection::vec(rule, 1..8).prop_map(rate_rules_xml)
}

/// Request-URIs and To URIs holding numbers in every way a field may: tel URIs global and
/// local, with separators, parameters and escapes; SIP URIs with `user=phone` (in any case,
/// followed by headers), with a password, a global or local user part without it, and others.
fn number_uri() -> impl Strategy<Value = String> {
    let digits = proptest::sample::select(
        &[
            "+1-212-555-1234",
            "+1(212)5559",
            "+4420",
            "+12",
            "+19",
            "+1-212-9",
            "+99912345678",
        ][..],
    );
    let form = proptest::sample::select(
        &[
            "tel:{}",
            "sip:{}@a.example;user=phone",
            "SIP:{}@B.EXAMPLE;USER=PHONE;lr",
            "sip:{}@c.example",
            "sip:{}:pw@a.example;user=phone",
            "sip:{}@a.example?x=y;user=phone",
            "sip:{};isub=1@a.example;user=phone",
        ][..],
    );
    prop_oneof![
        3 => (form, digits).prop_map(|(f, d)| f.replace("{}", d)),
        1 => proptest::sample::select(
            &[
                "tel:5551234;phone-context=+1-212",
                "tel:+1-212%35551234",
                "sip:+1%32125551234@a.example;user=phone",
                "sip:2125551234@a.example",
                "sip:alice@a.example",
                "sip:+1212@[::1];user=phone",
                "sip:a.example;user=phone",
                "urn:service:sos",
                "tel:+1 212",
                // Clean numbers in URIs `uri::parse` refuses.
                "sip:+1-212-555-1234@a!b.example;user=phone",
                "tel:+1-212-555-1234;x=\"y\"",
                "nonsense",
            ][..]
        )
        .prop_map(str::to_string),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

    /// A Request-URI or To that only `many-tel` with global prefixes read is walked by its
    /// number before it is parsed, and parsed on demand when a candidate found another way
    /// reads it: `find_with` finds the rule a scan finds, and notes a number-like user part
    /// left unread exactly when a parsed field holds one, under every reading of SIP user
    /// parts.
    #[test]
    fn numbers_read_before_parsing_find_the_same_rule(
        rules in global_number_policy_xml(),
        requests in proptest::collection::vec(
            (number_uri(), number_uri(), mixed_value(), any::<bool>()), 1..20,
        ),
        numbers in proptest::sample::select(&loadctl::uri::SipUserNumbers::ALL[..]),
    ) {
        let doc = format!("<ruleset {NS} version=\"0\" state=\"full\">{rules}</ruleset>");
        let rs = read(doc.as_bytes(), &Limits::default()).expect("valid").ruleset;
        let config = CompileConfig::default().with_sip_user_numbers(numbers);
        let policy = compile(&rs, &config).expect("full");
        let mut lazy = Scratch::default();
        for (ruri, to, from, angle) in &requests {
            let to = if *angle { format!("\"T\" <{to}>;tag=2") } else { to.clone() };
            let ids = Identities {
                from: Some(from),
                to: Some(&to),
                request_uri: Some(ruri),
                ..Identities::default()
            };
            let found = policy.find_with("INVITE", 0, &ids, &mut lazy);
            let scan = scanned(&policy, &ids);
            prop_assert_eq!(found, scan, "{} | {} | {}\n{}", ruri, to, from, rules);
            let unread = |text: Option<&str>| {
                text.and_then(|t| loadctl::uri::parse(t).ok())
                    .is_some_and(|u| loadctl::uri::unread_number(u, numbers))
            };
            // The fields many-tel read note an unread number (From's many read hosts; whether
            // a one reads To's key depends on the anchor its block picks, so those policies
            // are left out here).
            if !rules.contains("<one") {
                let to_text = loadctl::uri::header_uris(&to).next().and_then(Result::ok);
                let expected = found.is_none()
                    && ((rules.contains("<lc:request-uri>") && unread(Some(ruri)))
                        || (rules.contains("<lc:to>") && unread(to_text)));
                prop_assert_eq!(lazy.unread_number(), expected, "{} | {}\n{}", ruri, to, rules);
            }
        }
    }
}

// ------------------------------------------------------------------ no allocation

#[test]
fn classify_does_not_allocate_once_warm() {
    let mut rules = String::new();
    for i in 0..300 {
        rules.push_str(&format!(
            "<rule id=\"tel{i}\"><conditions><lc:call-identity><lc:sip><lc:to><many-tel prefix=\"+1-{:03}\"/></lc:to></lc:sip></lc:call-identity><method>INVITE</method></conditions>\
             <actions><lc:accept alt-action=\"redirect\" alt-target=\"sip:x@ivr.example\"><lc:rate>1</lc:rate></lc:accept></actions></rule>",
            200 + i
        ));
        rules.push_str(&format!(
            "<rule id=\"dom{i}\"><conditions><lc:call-identity><lc:sip><lc:from><many domain=\"d{i}.example\"><except id=\"sip:vip@d{i}.example\"/></many></lc:from></lc:sip></lc:call-identity></conditions>\
             <actions><lc:accept><lc:win>1</lc:win></lc:accept></actions></rule>"
        ));
    }
    rules.push_str("<rule id=\"one\"><conditions><lc:call-identity><lc:sip><lc:request-uri><one id=\"sip:vote@tv.example;transport=udp\"/></lc:request-uri></lc:sip></lc:call-identity><lc:target-sip-entity>sip:sbc.example</lc:target-sip-entity></conditions>\
                    <actions><lc:accept><lc:percent>50</lc:percent></lc:accept></actions></rule>");
    rules.push_str("<rule id=\"pai\"><conditions><lc:call-identity><lc:sip><lc:p-asserted-identity><many/></lc:p-asserted-identity></lc:sip></lc:call-identity></conditions>\
                    <actions><lc:accept alt-action=\"drop\"><lc:rate>1</lc:rate></lc:accept></actions></rule>");
    let mut shard = shard_of(&rules);
    // Four kinds of request, so that every verdict occurs: a tel rule (rate 1, redirect), a
    // domain rule (window 1), the exact R-URI rule (50 %), and the PAI rule (rate 1, drop).
    let requests: Vec<Request<'static>> = (0..600u64)
        .map(|i| {
            let kind = i % 4;
            let to: &'static str = if kind == 0 {
                Box::leak(
                    format!(
                        "\"Callee\" <sip:+1-{:03}-555-{:04}@gw.example;user=phone>;tag=x",
                        200 + i % 10,
                        i
                    )
                    .into_boxed_str(),
                )
            } else {
                "<tel:+44-20-7946-0000>"
            };
            let from: &'static str = if kind == 1 {
                Box::leak(
                    format!("<sip:user{i}@d{}.example;transport=tcp>;tag={i}", i % 10)
                        .into_boxed_str(),
                )
            } else {
                "<sip:someone@elsewhere.example>;tag=1"
            };
            Request {
                method: if i % 7 == 0 { "MESSAGE" } else { "INVITE" },
                identities: Identities {
                    from: Some(from),
                    to: Some(to),
                    request_uri: Some(match (kind, i % 17) {
                        // RFC 3261 §19.1.4: the rule's transport must be in the request too.
                        (2, _) => "sip:vote@TV.example;transport=UDP",
                        (_, 6) => "urn:service:sos.fire",
                        (_, 7) => "sip:a%3Bb@gw.example;maddr=192.0.2.1",
                        (_, 8) => "tel:+1-212-555-1234;isub=7;ext=1-2",
                        _ => "sip:+12125551234@gw.example;user=phone",
                    }),
                    p_asserted_identity: (kind == 3)
                        .then_some("<sip:pai@carrier.example>, <tel:+1-212-555-0000>")
                        .into(),
                    target: Some("<sip:sbc.example>"),
                },
                transport: if i % 8 == 3 {
                    Transport::Udp
                } else {
                    Transport::Tcp
                },
                initial: i % 11 != 0,
                known_dialog: i % 22 == 0,
                source: Some(std::net::IpAddr::from([192, 0, 2, (i % 256) as u8])),
                event: None,
                time: Some(Time {
                    monotonic_ns: i * 100_000,
                    unix_ns: 0,
                }),
                resource_priority: match i % 13 {
                    5 => "dsn.flash, ETS.0".into(),
                    9 => "q735.1".into(),
                    _ => loadctl::sip::HeaderValues::NONE,
                },
            }
        })
        .collect();
    // Raw SIP with list headers on several lines (found again lazily, RFC 3261 §7.3.1).
    const RAW: &[u8] = b"INVITE sip:b@y.example SIP/2.0\r\nTo: <sip:b@y.example>\r\nFrom: <sip:a@x.example>;tag=1\r\n\
P-Asserted-Identity: <sip:pai@carrier.example>\r\nResource-Priority: dsn.flash\r\nCall-ID: r@x\r\nCSeq: 1 INVITE\r\n\
p-asserted-identity:\r\n <tel:+1-212-555-0000>\r\nresource-priority: q735.2, drsn.1\r\n\r\n";
    let raw = loadctl::sip::scan(RAW).expect("valid");
    let mut requests = requests;
    for i in 0..20u64 {
        requests.push(Request::from_sip(
            &raw,
            Transport::Tcp,
            Some(Time {
                monotonic_ns: 60_000_000 + i * 100_000,
                unix_ns: 0,
            }),
        ));
    }
    let mut tickets = Vec::with_capacity(requests.len() * 2);
    let run = |shard: &mut Shard, tickets: &mut Vec<Ticket>| {
        let mut verdicts = [0usize; 4];
        for r in &requests {
            let d = shard.classify(r);
            verdicts[d.verdict as usize] += 1;
            if let Some(t) = d.ticket {
                tickets.push(t);
            }
        }
        for t in tickets.drain(..) {
            shard.complete(t);
        }
        verdicts
    };
    let warm = run(&mut shard, &mut tickets);
    let mut again = [0usize; 4];
    let info = allocation_counter::measure(|| again = run(&mut shard, &mut tickets));
    assert_eq!(info.count_total, 0, "classify allocated: {info:?}");
    // The run did real work: every kind of verdict occurred.
    assert!(warm.iter().all(|&n| n > 0), "{warm:?}");
    assert!(again.iter().all(|&n| n > 0), "{again:?}");
}
