//! Classification vectors: request lines (`REQUEST => EXPECTED` as JSON) and SIP text, each
//! against the vector's policy at the vector's time.

use serde_json::Value;

use super::{StepError, broken};
use crate::adapter::{self, Classifier, Clock};
use crate::vector::{Section, Vector};

pub(super) fn wall0(v: &Vector) -> Result<i128, StepError> {
    adapter::wall_clock(v.key("now").unwrap_or("2026-01-01T00:00:00Z"))
        .map_err(|e| broken(v.line, e))
}

fn classifier(v: &Vector) -> Result<Classifier, StepError> {
    let policy = v
        .section("policy")
        .ok_or_else(|| broken(v.line, "no --- policy section"))?;
    Classifier::new(
        policy.text().as_bytes(),
        v.key("priority-peers"),
        v.key("to-tag-is-dialog") == Some("true"),
    )
    .map_err(|e| StepError {
        line: policy.line,
        step: "reading the policy".into(),
        expected: "a valid policy".into(),
        got: e,
    })
}

/// `REQUEST => EXPECTED`: two JSON objects.
fn request_line(line: &str) -> Result<(Value, Value), String> {
    let mut stream = serde_json::Deserializer::from_str(line).into_iter::<Value>();
    let req = stream
        .next()
        .ok_or("expected a JSON request")?
        .map_err(|e| format!("request: {e}"))?;
    let rest = line[stream.byte_offset()..].trim_start();
    let rest = rest
        .strip_prefix("=>")
        .ok_or("expected `=>` and the expected decision after the request")?;
    let expected: Value = serde_json::from_str(rest).map_err(|e| format!("expected: {e}"))?;
    check_expected_shape(&expected)?;
    Ok((req, expected))
}

fn check_expected_shape(expected: &Value) -> Result<(), String> {
    for k in ["action", "rule", "status"] {
        if expected.get(k).is_none() {
            return Err(format!("the expected decision must give {k:?}"));
        }
    }
    Ok(())
}

/// Compares the keys the expectation gives.
fn decision_matches(expected: &Value, got: &Value) -> bool {
    expected.as_object().is_some_and(|o| {
        o.iter()
            .all(|(k, v)| got.get(k).unwrap_or(&Value::Null) == v)
    })
}

fn seconds_ns(t: &Value) -> Result<u64, String> {
    match t {
        Value::Null => Ok(0),
        Value::Number(n) => n
            .as_f64()
            .filter(|s| (0.0..1e9).contains(s))
            .map(|s| (s * 1e9).round() as u64)
            .ok_or_else(|| format!("\"t\" {n} is not seconds ≥ 0")),
        other => Err(format!("\"t\" must be a number, not {other}")),
    }
}

pub(super) fn classify_lines(
    section: &Section,
    c: &mut Classifier,
    transport: &str,
    mut clock: impl FnMut(u64) -> Clock,
) -> Result<(), StepError> {
    let mut mismatches = Vec::new();
    for (i, line) in section.lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let n = section.line + 1 + i;
        let (req, expected) = request_line(line).map_err(|e| broken(n, e))?;
        let t = seconds_ns(req.get("t").unwrap_or(&Value::Null)).map_err(|e| broken(n, e))?;
        let got = c
            .classify_json(&req, transport, clock(t))
            .map_err(|e| broken(n, e))?;
        if !decision_matches(&expected, &got) {
            mismatches.push((n, req, expected, got));
        }
    }
    if mismatches.is_empty() {
        return Ok(());
    }
    let first = mismatches[0].0;
    let mut expected = String::new();
    let mut got = String::new();
    for (n, req, e, g) in &mismatches {
        expected.push_str(&format!("line {n}: {req}\n  => {e}\n"));
        got.push_str(&format!("line {n}: {g}\n"));
    }
    Err(StepError {
        line: first,
        step: format!("{} of the requests", mismatches.len()),
        expected: expected.trim_end().to_owned(),
        got: got.trim_end().to_owned(),
    })
}

pub(super) fn classify(v: &Vector) -> Result<(), StepError> {
    let wall = wall0(v)?;
    let mut c = classifier(v)?;
    let requests = v
        .section("requests")
        .ok_or_else(|| broken(v.line, "no --- requests section"))?;
    let transport = v.key("transport").unwrap_or("udp");
    classify_lines(requests, &mut c, transport, |t| Clock {
        monotonic_ns: t,
        unix_ns: wall + i128::from(t),
    })
}

/// The SIP text of a section: lines joined with CRLF; without an empty line the header section
/// is closed; `Content-Length: auto` gets the body's length.
pub(super) fn sip_text(lines: &[String]) -> Vec<u8> {
    let blank = lines.iter().position(|l| l.trim().is_empty());
    let (head, body) = match blank {
        Some(i) => (&lines[..i], lines[i + 1..].join("\r\n")),
        None => (lines, String::new()),
    };
    let mut out = String::new();
    for l in head {
        let is_auto = l.split_once(':').is_some_and(|(n, v)| {
            matches!(
                n.trim().to_ascii_lowercase().as_str(),
                "content-length" | "l"
            ) && v.trim() == "auto"
        });
        if is_auto {
            out.push_str(&format!("Content-Length: {}", body.len()));
        } else {
            out.push_str(l);
        }
        out.push_str("\r\n");
    }
    out.push_str("\r\n");
    out.push_str(&body);
    out.into_bytes()
}

pub(super) fn sip(v: &Vector) -> Result<(), StepError> {
    let wall = wall0(v)?;
    let mut c = classifier(v)?;
    let transport = v.key("transport").unwrap_or("udp");
    let source = match v.key("source") {
        None => None,
        Some(a) => Some(
            a.parse::<std::net::IpAddr>()
                .map_err(|_| broken(v.line, format!("source {a:?} is not an IP address")))?,
        ),
    };
    let mut n = 0;
    for s in v.sections.iter().filter(|s| s.name == "message") {
        n += 1;
        let expected_text = s
            .args
            .strip_prefix("=>")
            .ok_or_else(|| broken(s.line, "--- message needs `=> {expected decision}`"))?;
        let expected: Value = serde_json::from_str(expected_text.trim())
            .map_err(|e| broken(s.line, format!("expected: {e}")))?;
        if expected.get("error").is_none() {
            check_expected_shape(&expected).map_err(|e| broken(s.line, e))?;
        }
        let got = c.classify_sip(
            &sip_text(&s.lines),
            transport,
            source,
            Clock {
                monotonic_ns: 0,
                unix_ns: wall,
            },
        );
        let ok = match expected.get("error") {
            // Any scanner error will do when the vector expects one.
            Some(_) => got.get("error").is_some(),
            None => decision_matches(&expected, &got),
        };
        if !ok {
            return Err(StepError {
                line: s.line,
                step: format!("message {n}"),
                expected: expected.to_string(),
                got: got.to_string(),
            });
        }
    }
    if n == 0 {
        return Err(broken(v.line, "no --- message section"));
    }
    Ok(())
}
