//! RFC 4475 (SIP Torture Test Messages), every message of its Appendix A archive
//! (`tests/conformance/data/rfc4475/`, see the README there): the valid ones of §3.1.1 scan and classify by
//! their real From / To / Request-URI, as the RFC's text for each says; every other one gives
//! an error or a decision, never a panic.

use loadctl::compile::{CompileConfig, CompiledPolicy, Scratch, compile};
use loadctl::policy::{Limits, read};
use loadctl::runtime::{Engine, EngineConfig, ExemptReason, Request, Time, Transport, Verdict};
use loadctl::sip::{SipError, SipRequest, has_tag, scan, tag, uri_part};
use loadctl::uri::{UriRef, parse};

const NS: &str = "xmlns=\"urn:ietf:params:xml:ns:common-policy\" xmlns:lc=\"urn:ietf:params:xml:ns:load-control\"";

fn message(name: &str) -> Vec<u8> {
    let path = format!("{}/data/rfc4475/{name}.dat", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn scanned(bytes: &[u8]) -> SipRequest<'_> {
    scan(bytes).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(bytes)))
}

/// A policy with one rule per field (each `<many/>`), so a view canonicalises every field.
fn all_fields() -> CompiledPolicy {
    let rules: String = ["from", "to", "request-uri", "p-asserted-identity"]
        .iter()
        .map(|f| {
            format!(
                "<rule id=\"{f}\"><conditions><lc:call-identity><lc:sip><lc:{f}><many/></lc:{f}></lc:sip></lc:call-identity></conditions><actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule>"
            )
        })
        .collect();
    let doc = format!("<ruleset {NS} version=\"0\" state=\"full\">{rules}</ruleset>");
    let read = read(doc.as_bytes(), &Limits::default()).expect("reads");
    compile(&read.ruleset, &CompileConfig::default()).expect("compiles")
}

/// The canonical keys of From, To and the Request-URI of a scanned request.
fn keys(sip: &SipRequest<'_>) -> [Option<Vec<u8>>; 3] {
    let policy = all_fields();
    let mut scratch = Scratch::default();
    let request = Request::from_sip(sip, Transport::Udp, None);
    let view = policy.view(&request.identities, &mut scratch);
    [0, 1, 2].map(|slot| view.fields[slot][0].map(|c| c.key.to_vec()))
}

fn canonical(uri: &str) -> Vec<u8> {
    let mut buf = Vec::new();
    loadctl::uri::canonicalize(parse(uri).expect("valid"), &mut buf)
        .key
        .to_vec()
}

/// Which of three rules — `<one>` on the Request-URI, the To, the From, each naming the URI
/// the RFC's text gives — a request matches, classified as an initial request (the RFC's
/// messages that carry a to-tag would otherwise be in-dialog and never filtered, RFC 7200
/// §5.1). Each rule is alone in its engine, so every field is checked.
fn matches_by_field(bytes: &[u8], ruri: &str, to: &str, from: &str) -> [bool; 3] {
    let sip = scanned(bytes);
    let fields = [("request-uri", ruri), ("to", to), ("from", from)];
    fields.map(|(field, id)| {
        let doc = format!(
            "<ruleset {NS} version=\"0\" state=\"full\"><rule id=\"r\"><conditions><lc:call-identity><lc:sip><lc:{field}><one id=\"{id}\"/></lc:{field}></lc:sip></lc:call-identity></conditions><actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule></ruleset>"
        );
        let ruleset = read(doc.as_bytes(), &Limits::default())
            .unwrap_or_else(|e| panic!("{e}: {doc}"))
            .ruleset;
        let engine = Engine::from_ruleset(
            ruleset,
            EngineConfig::default().with_shards(1),
        )
        .expect("publishes");
        let mut shard = engine.attach();
        let request = Request {
            initial: true,
            ..Request::from_sip(&sip, Transport::Udp, Some(Time::default()))
        };
        let d = shard.classify(&request);
        d.rule.is_some() && d.verdict == Verdict::Reject
    })
}

// ------------------------------------------------------------------ §3.1.1 valid messages

/// §3.1.1.1 "A Short Tortuous INVITE": "All elements should treat this as a well-formed
/// request" — "line folding all over", "LWS between colons, semicolons, header field values",
/// "a mix of short and long form for the same header field name", "integer fields
/// (Max-Forwards and CSeq) with leading zeros", "unknown Request-URI parameter".
#[test]
fn wsinv() {
    let bytes = message("wsinv");
    let r = scanned(&bytes);
    assert_eq!(r.method, "INVITE");
    assert_eq!(
        r.request_uri,
        "sip:vivekg@chair-dnrc.example.com;unknownparam"
    );
    // `cseq: 0009\r\n  INVITE`: a folded value with a leading-zero number.
    assert_eq!((r.cseq, r.cseq_method), (9, &b"INVITE"[..]));
    // "TO :\r\n sip:vivekg@chair-dnrc.example.com ;   tag    = 1918181833n"
    assert_eq!(uri_part(r.to), Some("sip:vivekg@chair-dnrc.example.com"));
    assert_eq!(tag(r.to), Some(&b"1918181833n"[..]));
    assert!(!r.initial);
    // from   : "J Rosenberg \\\""       <sip:jdrosen@example.com>\r\n  ;\r\n  tag = 98asjd8
    assert_eq!(uri_part(r.from), Some("<sip:jdrosen@example.com>"));
    assert_eq!(tag(r.from), Some(&b"98asjd8"[..]));
    assert_eq!(r.call_id, b"wsinv.ndaksdj@192.0.2.1");
    // The topmost Via is the first line's ("Via  : SIP  /   2.0\r\n /UDP\r\n    192.0.2.2;…").
    let via = String::from_utf8_lossy(r.via.expect("via")).into_owned();
    assert!(
        via.starts_with("SIP  /   2.0") && via.ends_with("192.0.2.2;branch=390skdjuw"),
        "{via:?}"
    );
    assert_eq!(
        keys(&r),
        [
            Some(canonical("sip:jdrosen@example.com")),
            Some(canonical("sip:vivekg@chair-dnrc.example.com")),
            Some(canonical("sip:vivekg@chair-dnrc.example.com")),
        ]
    );
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:vivekg@chair-dnrc.example.com;unknownparam",
            "sip:vivekg@chair-dnrc.example.com",
            "sip:jdrosen@example.com"
        ),
        [true; 3]
    );
    // Its To has a tag: where a To tag makes a dialog, never filtered (RFC 7200 §5.1).
    let mut exemptions = loadctl::runtime::Exemptions::default();
    exemptions.to_tag_is_dialog = true;
    let engine = Engine::new(
        EngineConfig::default()
            .with_shards(1)
            .with_exemptions(exemptions),
    );
    let mut shard = engine.attach();
    let d = shard.classify(&Request::from_sip(&r, Transport::Udp, None));
    assert_eq!(d.exempt, Some(ExemptReason::NotFiltered));
}

/// §3.1.1.2 "Wide Range of Valid Characters": "The Method contains non-alpha characters from
/// token. … A method of IN%56ITE is an unknown method", "The Request-URI contains unusual, but
/// legal, characters", the To's "quoted string contains quoted-pair expansions, including a
/// quoted NULL character", the From's name part "contains multiple tokens".
#[test]
fn intmeth() {
    let bytes = message("intmeth");
    let r = scanned(&bytes);
    assert_eq!(r.method, "!interesting-Method0123456789_*+`.%indeed'~");
    let Ok(UriRef::Sip(u)) = parse(r.request_uri) else {
        panic!("{}", r.request_uri)
    };
    assert_eq!(
        u.user,
        Some("1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*")
    );
    assert_eq!(
        u.password,
        Some("&it+has=1,weird!*pas$wo~d_too.(doesn't-it)")
    );
    assert_eq!(u.host, "example.com");
    assert_eq!(
        uri_part(r.to),
        Some("<sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com>")
    );
    assert_eq!(uri_part(r.from), Some("<sip:mundane@example.com>"));
    assert_eq!(tag(r.from), Some(&b"_token~1'+`*%!-."[..]));
    assert_eq!(
        keys(&r),
        [
            Some(canonical("sip:mundane@example.com")),
            Some(canonical(
                "sip:1_unusual.URI~(to-be!sure)&isn't+it$/crazy?,/;;*@example.com"
            )),
            Some(canonical(r.request_uri)),
        ]
    );
}

/// §3.1.1.3 "Valid Use of the % Escaping Mechanism": "The request-URI has
/// sips:user@example.com embedded in its userpart", "The From and To URIs have escaped
/// characters in their userparts", and "The application using the message must treat the
/// % HEX HEX expansions as equivalent to the character being encoded".
#[test]
fn esc01() {
    let bytes = message("esc01");
    let r = scanned(&bytes);
    assert_eq!(r.request_uri, "sip:sips%3Auser%40example.com@example.net");
    assert_eq!(
        keys(&r),
        [
            // %20 is a space: not reserved, so it equals its escape.
            Some(b"sip:I have spaces@example.net".to_vec()),
            // To: sip:%75se%72@example.com is sip:user@example.com.
            Some(b"sip:user@example.com".to_vec()),
            // ':' and '@' are reserved: they stay escaped (RFC 3261 §19.1.4), whatever the
            // case of the hex digits.
            Some(canonical("sip:sips%3auser%40example.com@example.net")),
        ]
    );
    assert_eq!(
        keys(&r)[2].as_deref(),
        Some(&b"sip:sips%3Auser%40example.com@example.net"[..])
    );
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:sips%3Auser%40example.com@example.net",
            "sip:user@example.com",
            "sip:I%20have%20spaces@example.net"
        ),
        [true; 3]
    );
}

/// §3.1.1.4 "Escaped Nulls in URIs": "Implementations must take special care when unescaping
/// the Address-of-Record (AOR) in this request so as to not prematurely shorten the
/// username."
#[test]
fn escnull() {
    let bytes = message("escnull");
    let r = scanned(&bytes);
    assert_eq!(r.method, "REGISTER");
    let user_with_null = b"sip:null-\0-null@example.com".to_vec();
    assert_eq!(
        keys(&r),
        [
            Some(user_with_null.clone()),
            Some(user_with_null),
            Some(b"sip:example.com".to_vec())
        ]
    );
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:example.com",
            "sip:null-%00-null@example.com",
            "sip:null-%00-null@example.com"
        ),
        [true; 3]
    );
}

/// §3.1.1.5 "Use of % When It Is Not an Escape": "The request method is unknown. It is NOT
/// equivalent to REGISTER"; "The display name portion of the To and From header fields is
/// \"%Z%45\"".
#[test]
fn esc02() {
    let bytes = message("esc02");
    let r = scanned(&bytes);
    assert_eq!(r.method, "RE%47IST%45R");
    assert_eq!(uri_part(r.to), Some("<sip:resource@example.com>"));
    assert_eq!(uri_part(r.from), Some("<sip:resource@example.com>"));
    // A rule without <method> covers REGISTER (RFC 7200 §5.2's default set), not this one.
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:registrar.example.com",
            "sip:resource@example.com",
            "sip:resource@example.com"
        ),
        [false; 3]
    );
    assert_eq!(
        keys(&r),
        [
            Some(canonical("sip:resource@example.com")),
            Some(canonical("sip:resource@example.com")),
            Some(canonical("sip:registrar.example.com")),
        ]
    );
}

/// §3.1.1.6 "Message with No LWS between Display Name and <": "Elements should accept this
/// request as well formed."
#[test]
fn lwsdisp() {
    let bytes = message("lwsdisp");
    let r = scanned(&bytes);
    assert_eq!(uri_part(r.from), Some("<sip:caller@example.com>"));
    assert_eq!(tag(r.from), Some(&b"323"[..]));
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:user@example.com",
            "sip:user@example.com",
            "sip:caller@example.com"
        ),
        [true; 3]
    );
}

/// §3.1.1.7 "Long Values in Header Fields": "The To header field has a long display name,
/// and long uri parameter names and values", "The From header field has … a very long tag",
/// many Via values in long and compact form.
#[test]
fn longreq() {
    let bytes = message("longreq");
    let r = scanned(&bytes);
    let long = "long".repeat(20);
    let to = format!(
        "sip:user@example.com:6000;unknownparam1=very{long}value;longparam{}=shortvalue;very{}ParameterNameWithNoValue",
        "name".repeat(25),
        "long".repeat(25)
    );
    assert_eq!(uri_part(r.to), Some(format!("<{to}>").as_str()));
    assert_eq!(
        tag(r.from),
        Some(format!("12{}424", "982".repeat(50)).as_bytes())
    );
    assert_eq!(r.via, Some(&b"SIP/2.0/TCP sip33.example.com"[..]));
    let caller = format!("sip:{}@example.net", "amazinglylongcallername".repeat(5));
    assert_eq!(
        matches_by_field(&bytes, "sip:user@example.com", &to, &caller),
        [true; 3]
    );
    // The port is part of the To's identity.
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:user@example.com",
            "sip:user@example.com",
            &caller
        ),
        [true, false, true]
    );
}

/// §3.1.1.8 "Extra Trailing Octets in a UDP Datagram": "A SIP element receiving this
/// datagram would handle the REGISTER request normally and ignore the extra bits that look
/// like an INVITE request."
#[test]
fn dblreq() {
    let bytes = message("dblreq");
    let r = scanned(&bytes);
    assert_eq!((r.method, r.request_uri), ("REGISTER", "sip:example.com"));
    assert_eq!(r.call_id, b"dblreq.0ha0isndaksdj99sdfafnl3lk233412");
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:example.com",
            "sip:j.user@example.com",
            "sip:j.user@example.com"
        ),
        [true; 3]
    );
    // The INVITE's To is not read.
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:joe@example.com",
            "sip:joe@example.com",
            "sip:caller@example.net"
        ),
        [false; 3]
    );
}

/// §3.1.1.9 "Semicolon-Separated Parameters in URI User Part": "The Request-URI will parse
/// so that the user part is \"user;par=u@example.net\"."
#[test]
fn semiuri() {
    let bytes = message("semiuri");
    let r = scanned(&bytes);
    let Ok(UriRef::Sip(u)) = parse(r.request_uri) else {
        panic!("{}", r.request_uri)
    };
    assert_eq!(u.user, Some("user;par=u%40example.net"));
    assert_eq!(u.host, "example.com");
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:user;par=u%40example.net@example.com",
            "sip:j_user@example.com",
            "sip:caller@example.org"
        ),
        [true; 3]
    );
    // The Accept header folds over three lines: the scan reads past it.
    assert_eq!(
        r.via,
        Some(&b"SIP/2.0/UDP 192.0.2.1;branch=z9hG4bKkdjuw"[..])
    );
}

/// §3.1.1.10 "Varied and Unknown Transport Types": "Parsers must accept this message as well
/// formed."
#[test]
fn transports() {
    let bytes = message("transports");
    let r = scanned(&bytes);
    assert_eq!(
        r.via,
        Some(&b"SIP/2.0/UDP t1.example.com;branch=z9hG4bKkdjuw"[..])
    );
    assert_eq!(r.call_id, b"transports.kijh4akdnaqjkwendsasfdj");
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:user@example.com",
            "sip:user@example.com",
            "sip:caller@example.com"
        ),
        [true; 3]
    );
}

/// §3.1.1.11 "Multipart MIME Message": "Parsers must accept this message as well formed".
#[test]
fn mpart01() {
    let bytes = message("mpart01");
    let r = scanned(&bytes);
    assert_eq!(r.method, "MESSAGE");
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:kumiko@example.org",
            "sip:kumiko@example.org",
            "sip:fluffy@example.com"
        ),
        [true; 3]
    );
}

/// §3.1.1.12 "Unusual Reason Phrase" and §3.1.1.13 "Empty Reason Phrase" are responses
/// ("This 200 response …", "This well-formed response …"): a request scanner says so.
#[test]
fn unreason_and_noreason_are_responses() {
    for name in ["unreason", "noreason"] {
        assert_eq!(scan(&message(name)), Err(SipError::NotARequest), "{name}");
    }
}

// ------------------------------------------------------------------ everything else

/// Every message that is not a valid request: an error or a decision, never a panic. Where
/// the RFC asks for a 400 (or 505) and the scanner reads the faulty part, it is an error.
#[test]
fn invalid_and_other_messages_give_an_error_or_a_decision() {
    let expected_errors: [(&str, SipError); 12] = [
        // §3.1.2.4: "respond with a 400 Bad Request due to the CSeq error" (> 2**32-1).
        ("scalar02", SipError::BadCSeq),
        // §3.1.2.5, §3.1.2.19, §3.3.10: responses.
        ("scalarlg", SipError::NotARequest),
        ("bigcode", SipError::NotARequest),
        ("bcast", SipError::NotARequest),
        // §3.1.2.8 "illegal LWS within the Request-URI", §3.1.2.9 "multiple SP characters
        // between elements of the start line", §3.1.2.10 "SP characters between the
        // SIP-Version field and the CRLF": "acceptable to reject … as malformed".
        ("lwsruri", SipError::BadRequestLine),
        ("lwsstart", SipError::BadRequestLine),
        ("trws", SipError::BadRequestLine),
        // §3.1.2.16 "malformed due to its high version number".
        ("badvers", SipError::BadRequestLine),
        // §3.3.1 "no Call-ID, From, or To header fields".
        ("insuf", SipError::MissingHeader("From")),
        // §3.3.8 "multiple Call-ID, To, From, Max-Forwards, and CSeq values": 400.
        ("multi01", SipError::RepeatedHeader("CSeq")),
        // §3.1.2.15 (baddn): the archived message ends without the empty line that closes
        // its header section.
        ("baddn", SipError::Truncated),
        // The archive's `test.dat` has no SIP-Version in its request line.
        ("test", SipError::BadRequestLine),
    ];
    let valid = [
        "wsinv",
        "intmeth",
        "esc01",
        "escnull",
        "esc02",
        "lwsdisp",
        "longreq",
        "dblreq",
        "semiuri",
        "transports",
        "mpart01",
        "unreason",
        "noreason",
    ];
    let policy = format!(
        "<ruleset {NS} version=\"0\" state=\"full\">{}</ruleset>",
        ["from", "to", "request-uri", "p-asserted-identity"]
            .iter()
            .map(|f| format!("<rule id=\"{f}\"><conditions><lc:call-identity><lc:sip><lc:{f}><many domain=\"example.com\"/></lc:{f}></lc:sip></lc:call-identity></conditions><actions><lc:accept><lc:rate>0</lc:rate></lc:accept></actions></rule>"))
            .collect::<String>()
    );
    let engine = Engine::from_ruleset(
        read(policy.as_bytes(), &Limits::default())
            .expect("reads")
            .ruleset,
        EngineConfig::default().with_shards(1),
    )
    .expect("publishes");
    let mut shard = engine.attach();
    let dir = format!("{}/data/rfc4475", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("the archive is extracted")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter_map(|n| n.strip_suffix(".dat").map(str::to_owned))
        .collect();
    names.sort();
    assert_eq!(names.len(), 50, "the archive holds 50 messages");
    let mut decided = 0;
    for name in names.iter().filter(|n| !valid.contains(&n.as_str())) {
        let bytes = message(name);
        match scan(&bytes) {
            Err(e) => {
                if let Some((_, want)) = expected_errors.iter().find(|(n, _)| n == name) {
                    assert_eq!(&e, want, "{name}");
                }
            }
            Ok(r) => {
                assert!(
                    !expected_errors.iter().any(|(n, _)| n == name),
                    "{name} scanned"
                );
                let d = shard.classify(&Request::from_sip(&r, Transport::Udp, None));
                assert!(
                    matches!(d.verdict, Verdict::Accept | Verdict::Reject),
                    "{name}"
                );
                let _ = (has_tag(r.to), uri_part(r.from));
                decided += 1;
            }
        }
    }
    assert!(decided >= 20, "{decided}");
}

/// §3.1.2.6 "Unterminated Quoted String in Display Name": "An element receiving this request
/// should return a 400 Bad Request error." The scanner does not read display names; the To
/// holds no URI it can take, so no To condition can match it.
#[test]
fn quotbal_has_no_to_uri() {
    let bytes = message("quotbal");
    let r = scanned(&bytes);
    assert_eq!(uri_part(r.to), None);
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:user@example.com",
            "sip:j.user@example.com",
            "sip:caller@example.net"
        ),
        [true, false, true]
    );
}

/// §3.1.2.7 "<> Enclosing Request-URI": "Elements attempting to be liberal with what they
/// accept may choose to ignore the brackets." loadctl does.
#[test]
fn ltgtruri_brackets_are_ignored() {
    let bytes = message("ltgtruri");
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:user@example.com",
            "sip:user@example.com",
            "sip:caller@example.net"
        ),
        [true; 3]
    );
}

/// §3.3.2 "Request-URI with Unknown Scheme" (unkscm) and §3.3.4 "Unknown URI Schemes in
/// Header Fields" (unksm2): classified like any request; a rule on a SIP identity does not
/// match them.
#[test]
fn unknown_schemes_are_not_sip_identities() {
    let bytes = message("unkscm");
    let r = scanned(&bytes);
    assert_eq!(r.request_uri, "nobodyKnowsThisScheme:totallyopaquecontent");
    let bytes = message("unksm2");
    let r = scanned(&bytes);
    assert_eq!(uri_part(r.to), Some("isbn:2983792873"));
    assert_eq!(
        matches_by_field(
            &bytes,
            "sip:example.com",
            "sip:2983792873@example.com",
            "sip:www.example.com"
        ),
        [true, false, false]
    );
}
