//! `loadctl explain`: for a person, how one request is classified and why.

use loadctl::compile::{CompiledPolicy, Identities, Miss, Scratch, compile, describe_canonical};
use loadctl::policy::Ruleset;
use loadctl::runtime::{Exemptions, Request, Time, Transport};
use loadctl::uri::{SipUserNumbers, UriRef, header_uris, parse, unread_number};

/// The request as given on the command line.
pub struct Args<'a> {
    /// Policy file.
    pub policy: &'a str,
    /// Method.
    pub method: &'a str,
    /// Header values and target.
    pub identities: Identities<'a>,
    /// Transport name.
    pub transport: &'a str,
    /// Wall-clock time.
    pub now: Option<&'a str>,
    /// Event header.
    pub event: Option<&'a str>,
    /// In-dialog request.
    pub in_dialog: bool,
    /// The address the request came from (for `--priority-peers`).
    pub source: Option<std::net::IpAddr>,
    /// Resource-Priority header value (lines joined with commas).
    pub resource_priority: Option<&'a str>,
    /// What is let through before any rule is tried.
    pub exemptions: Exemptions,
    /// How SIP user parts without `user=phone` are read.
    pub numbers: SipUserNumbers,
}

/// Prints the explanation; returns the exit code.
pub fn run(args: &Args<'_>) -> u8 {
    let Some(transport) = Transport::parse(args.transport) else {
        eprintln!(
            "loadctl: --transport {:?}: expected udp, tcp, tls, sctp, ws or wss",
            args.transport
        );
        return 2;
    };
    let unix_ns = match crate::policy_file::wall_clock(args.now) {
        Ok(t) => t,
        Err(code) => return code,
    };
    let (ruleset, policy) = match crate::policy_file::load(args.policy, args.numbers) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let request = Request {
        method: args.method,
        identities: args.identities,
        transport,
        initial: !args.in_dialog,
        // --in-dialog explains a request of a dialog the caller keeps.
        known_dialog: args.in_dialog,
        source: args.source,
        event: args.event,
        time: Some(Time {
            monotonic_ns: 0,
            unix_ns,
        }),
        resource_priority: args.resource_priority.into(),
    };
    let ids = &args.identities;
    println!(
        "request: {} over {}, {}",
        args.method,
        args.transport.to_ascii_lowercase(),
        if args.in_dialog {
            "in-dialog"
        } else {
            "initial"
        }
    );
    let mut scratch = Scratch::default();
    let view = policy.view(
        &Identities {
            from: ids.from,
            to: ids.to,
            request_uri: ids.request_uri,
            p_asserted_identity: ids.p_asserted_identity,
            target: ids.target,
        },
        &mut scratch,
    );
    let pai: Option<String> = (!ids.p_asserted_identity.is_empty()).then(|| {
        ids.p_asserted_identity
            .lines()
            .map(String::from_utf8_lossy)
            .collect::<Vec<_>>()
            .join(", ")
    });
    let all_fields = [
        ("from", ids.from, 0usize),
        ("to", ids.to, 1),
        ("request-uri", ids.request_uri, 2),
        ("p-asserted-identity", pai.as_deref(), 3),
    ];
    for (name, raw, slot) in all_fields {
        match raw {
            None => println!("  {name}: (absent)"),
            Some(raw) => {
                let canon: Vec<String> = view.fields[slot]
                    .iter()
                    .flatten()
                    .map(describe_canonical)
                    .collect();
                let shown = if canon.is_empty() {
                    if policy_uses(&policy, slot) {
                        "(no valid SIP/tel URI)".to_owned()
                    } else {
                        "(no rule looks at it)".to_owned()
                    }
                } else {
                    canon.join(" | ")
                };
                println!("  {name}: {raw}\n      canonical: {shown}");
            }
        }
    }
    if let Some(rp) = args.resource_priority {
        println!("  resource-priority: {rp}");
    }
    match (ids.target, &view.target) {
        (None, _) => println!("  target: (absent)"),
        (Some(raw), Some(c)) => println!(
            "  target: {raw}\n      canonical: {}",
            describe_canonical(c)
        ),
        (Some(raw), None) => println!(
            "  target: {raw}\n      canonical: (no rule names a target, or not a valid URI)"
        ),
    }
    if let Some(reason) = request.is_exempt(&args.exemptions.normalized()) {
        println!("exempt ({}): {}", reason.as_str(), reason.describe());
        println!("decision: accept (exempt)");
        return 0;
    }
    println!("rules, in order (the first that matches decides):");
    let mut matched = None;
    for (i, rule) in policy.rules().iter().enumerate() {
        match policy.check(i, args.method, unix_ns, &view) {
            Ok(()) => {
                println!(
                    "  {}. {}: MATCH -> {}",
                    i + 1,
                    rule.id(),
                    rule.rule().accept
                );
                matched = Some(i);
                break;
            }
            Err(Miss::CallIdentity) => {
                let blocks: Vec<String> = policy
                    .explain_rule(i, &view)
                    .iter()
                    .enumerate()
                    .map(|(b, fields)| {
                        let f: Vec<String> = fields
                            .iter()
                            .map(|(field, ok)| {
                                format!(
                                    "{} {}",
                                    field.element(),
                                    if *ok { "matches" } else { "does not match" }
                                )
                            })
                            .collect();
                        format!("<sip> #{}: {}", b + 1, f.join(", "))
                    })
                    .collect();
                println!(
                    "  {}. {}: no - {} ({})",
                    i + 1,
                    rule.id(),
                    Miss::CallIdentity.describe(),
                    blocks.join("; ")
                );
            }
            Err(miss) => println!("  {}. {}: no - {}", i + 1, rule.id(), miss.describe()),
        }
    }
    if let Some(i) = matched {
        let rest = policy.len() - i - 1;
        if rest > 0 {
            println!(
                "  ({rest} later rule{} not evaluated)",
                if rest == 1 { " is" } else { "s are" }
            );
        }
    }
    let unread: Vec<&str> = all_fields
        .iter()
        .filter(|(_, raw, slot)| {
            raw.is_some_and(|v| field_uris(v, *slot).any(|u| unread_number(u, args.numbers)))
        })
        .map(|(name, _, _)| *name)
        .collect();
    if !unread.is_empty() {
        explain_unread(&unread, &ruleset, &policy, args, unix_ns, matched);
    }
    let mut shard = match crate::policy_file::shard(ruleset, &args.exemptions, args.numbers) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let d = shard.classify(&request);
    let status = d.status().map(|s| format!(" ({s})")).unwrap_or_default();
    match d.rule {
        None => println!("decision: accept (no rule matches)"),
        Some(r) => {
            println!(
                "decision: {}{status} by rule {} (first request, fresh limiter state)",
                d.verdict.as_str(),
                r.id()
            );
            for t in d.targets() {
                println!("  contact: <{t}>");
            }
        }
    }
    0
}

/// The URIs of a field's value as the engine reads them: the Request-URI is one URI (its
/// `;` parameters are its own), the others header values (the first URI; the first two of
/// P-Asserted-Identity).
fn field_uris(value: &str, slot: usize) -> impl Iterator<Item = UriRef<'_>> {
    let texts: Vec<&str> = if slot == 2 {
        vec![value.trim().trim_start_matches('<').trim_end_matches('>')]
    } else {
        header_uris(value)
            .take(if slot == 3 { 2 } else { 1 })
            .flatten()
            .collect()
    };
    texts.into_iter().filter_map(|t| parse(t).ok())
}

/// Says which fields hold a number-like SIP user part the setting did not read and, for each
/// setting that reads more, which rules would match then that do not now, and the first match.
fn explain_unread(
    fields: &[&str],
    ruleset: &Ruleset,
    policy: &CompiledPolicy,
    args: &Args<'_>,
    unix_ns: i128,
    matched: Option<usize>,
) {
    println!(
        "note: the user part of {} looks like a telephone number, not read as one under --sip-user-numbers {} (without ;user=phone, RFC 3261 §19.1.1)",
        fields.join(", "),
        args.numbers
    );
    if !policy.compares_numbers() {
        println!("  (no rule compares telephone numbers)");
        return;
    }
    let name = |p: &CompiledPolicy, i: Option<usize>| {
        i.and_then(|i| p.rules().get(i))
            .map_or("no rule".to_owned(), |r| format!("rule {}", r.id()))
    };
    let mut scratch = Scratch::default();
    let now_view = policy.view(&args.identities, &mut scratch);
    let now_ok: Vec<bool> = (0..policy.len())
        .map(|i| policy.check(i, args.method, unix_ns, &now_view).is_ok())
        .collect();
    let mut any = false;
    let lenient = SipUserNumbers::ALL
        .into_iter()
        .skip_while(|&n| n != args.numbers)
        .skip(1);
    for other in lenient {
        let Ok(p) = compile(ruleset, &crate::policy_file::compile_config(other)) else {
            continue;
        };
        let mut scratch = Scratch::default();
        let view = p.view(&args.identities, &mut scratch);
        let gained: Vec<String> = (0..p.len())
            .filter(|&i| !now_ok[i] && p.check(i, args.method, unix_ns, &view).is_ok())
            .map(|i| p.rules()[i].id().to_string())
            .collect();
        if gained.is_empty() {
            continue;
        }
        any = true;
        let first = (0..p.len()).find(|&i| p.check(i, args.method, unix_ns, &view).is_ok());
        println!(
            "  under --sip-user-numbers {other}: {} would match too; the first match would be {} (now: {})",
            gained.join(", "),
            name(&p, first),
            name(policy, matched)
        );
    }
    if !any {
        println!("  no setting that reads more numbers makes another rule match");
    }
}

fn policy_uses(policy: &loadctl::compile::CompiledPolicy, slot: usize) -> bool {
    let field = [
        loadctl::policy::Field::From,
        loadctl::policy::Field::To,
        loadctl::policy::Field::RequestUri,
        loadctl::policy::Field::PAssertedIdentity,
    ][slot];
    policy.rules().iter().any(|r| {
        r.rule()
            .conditions
            .call_identity
            .iter()
            .flat_map(|ci| ci.sip.iter())
            .any(|sip| sip.fields().any(|(f, _)| f == field))
    })
}
