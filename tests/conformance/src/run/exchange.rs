//! Exchange vectors: a scripted peer and loadctl's subscriber or notifier trading SIP messages
//! in simulated time, each message loadctl sends checked against the RFC's words.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::classify::{classify_lines, sip_text, wall0};
use super::{StepError, broken};
use crate::adapter::{self, Clock, Side};
use crate::message::{Message, list, tag_of};
use crate::vector::{Section, Vector};

struct Exchange {
    side: Box<dyn Side>,
    now_ns: u64,
    wall0: i128,
    /// What loadctl sent (with when) and the vector has not looked at yet.
    outbox: VecDeque<(u64, Vec<u8>)>,
    /// When loadctl sent the last message an `expect` matched, per (method, Call-ID).
    last_sent: HashMap<(String, String), u64>,
    /// `req.*` from the last request loadctl sent and `resp.*` from its last response.
    vars: HashMap<String, String>,
    /// The last request of loadctl's that an `expect` matched (for `reply`).
    last_request: Option<Message>,
    /// Last document version seen per Call-ID (for `@doc: version=next`).
    versions: HashMap<String, u32>,
    /// The policy a plain RFC 7200 subscriber would hold after each NOTIFY matched: full
    /// replaces, partial adds or replaces by rule id (§4.11). Per Call-ID.
    views: HashMap<String, Vec<(String, String)>>,
}

fn step_err(s: &Section, expected: impl Into<String>, got: impl Into<String>) -> StepError {
    StepError {
        line: s.line,
        step: format!("--- {} {}", s.name, s.args).trim_end().to_owned(),
        expected: expected.into(),
        got: got.into(),
    }
}

impl Exchange {
    fn substitute(&self, s: &Section, line: &str) -> Result<String, StepError> {
        let mut out = String::new();
        let mut rest = line;
        while let Some(i) = rest.find("${") {
            out.push_str(&rest[..i]);
            let after = &rest[i + 2..];
            let end = after
                .find('}')
                .ok_or_else(|| broken(s.line, format!("unclosed ${{ in {line:?}")))?;
            let name = &after[..end];
            let value = self.vars.get(name).ok_or_else(|| {
                broken(
                    s.line,
                    format!("no variable {name:?} yet (known: {:?})", {
                        let mut k: Vec<_> = self.vars.keys().collect();
                        k.sort();
                        k
                    }),
                )
            })?;
            out.push_str(value);
            rest = &after[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }

    fn substituted(&self, s: &Section) -> Result<Vec<String>, StepError> {
        s.lines.iter().map(|l| self.substitute(s, l)).collect()
    }

    fn drain(&mut self) {
        let now = self.now_ns;
        let sent = self.side.transmit();
        self.outbox.extend(sent.into_iter().map(|m| (now, m)));
    }

    fn feed(&mut self, s: &Section, bytes: Vec<u8>) -> Result<(), StepError> {
        match self.side.receive(self.now_ns, &bytes) {
            Ok(Some(resp)) => self.outbox.push_back((self.now_ns, resp)),
            Ok(None) => {}
            Err(e) => {
                return Err(step_err(
                    s,
                    "loadctl reads the peer's message",
                    format!("{e}\n{}", String::from_utf8_lossy(&bytes)),
                ));
            }
        }
        self.drain();
        Ok(())
    }

    fn advance(&mut self, to_ns: u64) {
        for _ in 0..100_000 {
            match self.side.poll_timeout() {
                Some(t) if t <= to_ns => {
                    self.now_ns = self.now_ns.max(t);
                    self.side.handle_timeout(self.now_ns);
                    self.drain();
                }
                _ => break,
            }
        }
        self.now_ns = self.now_ns.max(to_ns);
    }

    fn capture(&mut self, m: &Message) {
        let prefix = if m.is_response() { "resp" } else { "req" };
        let mut set = |k: &str, v: Option<String>| {
            let name = format!("{prefix}.{k}");
            match v {
                Some(v) => self.vars.insert(name, v),
                None => self.vars.remove(&name),
            };
        };
        set("ruri", m.request_uri().map(str::to_owned));
        set("call-id", m.first("Call-ID").map(str::to_owned));
        set("from", m.first("From").map(str::to_owned));
        set("to", m.first("To").map(str::to_owned));
        set("from-tag", m.first("From").and_then(tag_of));
        set("to-tag", m.first("To").and_then(tag_of));
        set(
            "cseq",
            m.first("CSeq")
                .and_then(|c| c.split_whitespace().next())
                .map(str::to_owned),
        );
        set("contact", m.first("Contact").map(str::to_owned));
        set(
            "contact-uri",
            m.first("Contact").map(|c| {
                let c = c.trim();
                match (c.find('<'), c.find('>')) {
                    (Some(a), Some(b)) if a < b => c[a + 1..b].to_owned(),
                    _ => c.split(';').next().unwrap_or(c).to_owned(),
                }
            }),
        );
    }

    /// Builds the peer's response to the last request loadctl sent (RFC 3261 §8.2.6.2: Via,
    /// From, Call-ID, CSeq copied; To copied unless the section gives one).
    fn reply(&self, s: &Section) -> Result<Vec<u8>, StepError> {
        let req = self
            .last_request
            .as_ref()
            .ok_or_else(|| broken(s.line, "reply: no request of loadctl's was expected yet"))?;
        let status: u16 = s
            .args
            .split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .ok_or_else(|| broken(s.line, "reply needs a status code"))?;
        let extra = self.substituted(s)?;
        let overrides = |name: &str| {
            extra.iter().any(|l| {
                l.split_once(':')
                    .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            })
        };
        let reason = s.args.split_once(' ').map_or("Reason", |(_, r)| r.trim());
        let mut lines = vec![format!("SIP/2.0 {status} {reason}")];
        for via in req.all("Via") {
            lines.push(format!("Via: {via}"));
        }
        for h in ["From", "To", "Call-ID", "CSeq"] {
            if !overrides(h)
                && let Some(v) = req.first(h)
            {
                lines.push(format!("{h}: {v}"));
            }
        }
        let length = overrides("Content-Length");
        lines.extend(extra);
        if !length {
            lines.push("Content-Length: 0".into());
        }
        Ok(sip_text(&lines))
    }

    fn expect(&mut self, s: &Section) -> Result<(), StepError> {
        let lines = self.substituted(s)?;
        let Some((sent_at, bytes)) = self.outbox.pop_front() else {
            return Err(step_err(s, lines.join("\n"), "loadctl sent nothing"));
        };
        let m = Message::parse(&bytes).map_err(|e| {
            step_err(
                s,
                "a SIP message",
                format!("{e}: {}", String::from_utf8_lossy(&bytes)),
            )
        })?;
        let shown = || m.display();
        let mut doc_checked = None;
        for (i, line) in lines.iter().enumerate() {
            if i == 0 {
                if !start_line_matches(line, &m) {
                    return Err(step_err(s, format!("start line {line:?}"), shown()));
                }
                continue;
            }
            if line.trim().is_empty() {
                continue;
            }
            if let Some(rest) = line.strip_prefix('@') {
                let (what, arg) = rest.split_once(':').unwrap_or((rest, ""));
                let arg = arg.trim();
                match what.trim() {
                    "body" => {
                        let ok = match arg {
                            "empty" => m.body.is_empty(),
                            "present" => !m.body.is_empty(),
                            _ => return Err(broken(s.line, "@body: empty | present")),
                        };
                        if !ok {
                            return Err(step_err(s, format!("a body that is {arg}"), shown()));
                        }
                    }
                    "spacing" => {
                        let secs: f64 = arg
                            .parse()
                            .map_err(|_| broken(s.line, "@spacing: SECONDS"))?;
                        let key = (
                            m.method().unwrap_or("").to_owned(),
                            m.first("Call-ID").unwrap_or("").to_owned(),
                        );
                        if let Some(&before) = self.last_sent.get(&key) {
                            let gap = sent_at.saturating_sub(before);
                            if (gap as f64) < secs * 1e9 {
                                return Err(step_err(
                                    s,
                                    format!("sent at least {secs} s after the previous {}", key.0),
                                    format!("sent {} s after it\n{}", gap as f64 / 1e9, shown()),
                                ));
                            }
                        }
                    }
                    "doc" => {
                        let summary = adapter::summary(&m.body).map_err(|e| {
                            step_err(s, "a load-control document", format!("{e}\n{}", shown()))
                        })?;
                        self.check_doc(s, arg, &m, &summary)?;
                        doc_checked = Some(summary);
                    }
                    "view" => {
                        let call = m.first("Call-ID").unwrap_or("").to_owned();
                        if doc_checked.is_none() && !m.body.is_empty() {
                            let summary = adapter::summary(&m.body)
                                .map_err(|e| step_err(s, "a load-control document", e))?;
                            self.apply_view(&call, &summary);
                            doc_checked = Some(summary);
                        }
                        let view = self.views.get(&call).cloned().unwrap_or_default();
                        let got: Vec<String> =
                            view.iter().map(|(id, l)| format!("{id}/{l}")).collect();
                        let want: Vec<&str> = arg.split_whitespace().collect();
                        if got != want {
                            return Err(step_err(
                                s,
                                format!("an RFC 7200 subscriber then holds: {}", want.join(" ")),
                                format!("it holds: {}\n{}", got.join(" "), shown()),
                            ));
                        }
                    }
                    other => return Err(broken(s.line, format!("unknown check @{other}"))),
                }
                continue;
            }
            header_matches(line, &m)
                .map_err(|why| step_err(s, line.clone(), format!("{why}\n{}", shown())))?;
        }
        // Every NOTIFY with a document updates the peer's view, checked or not.
        if doc_checked.is_none()
            && m.method() == Some("NOTIFY")
            && !m.body.is_empty()
            && let Ok(summary) = adapter::summary(&m.body)
        {
            let call = m.first("Call-ID").unwrap_or("").to_owned();
            self.versions.insert(call.clone(), summary.version);
            self.apply_view(&call, &summary);
        }
        self.capture(&m);
        if let Some(method) = m.method() {
            let call = m.first("Call-ID").unwrap_or("").to_owned();
            self.last_sent.insert((method.to_owned(), call), sent_at);
        }
        if !m.is_response() {
            self.last_request = Some(m);
        }
        Ok(())
    }

    fn apply_view(&mut self, call: &str, summary: &adapter::Summary) {
        let view = self.views.entry(call.to_owned()).or_default();
        if summary.state == "full" {
            *view = summary.rules.clone();
            return;
        }
        for (id, limit) in &summary.rules {
            match view.iter_mut().find(|(i, _)| i == id) {
                Some(slot) => slot.1 = limit.clone(),
                None => view.push((id.clone(), limit.clone())),
            }
        }
    }

    fn check_doc(
        &mut self,
        s: &Section,
        arg: &str,
        m: &Message,
        summary: &adapter::Summary,
    ) -> Result<(), StepError> {
        let call = m.first("Call-ID").unwrap_or("").to_owned();
        let previous = self.versions.get(&call).copied();
        for want in arg.split_whitespace() {
            let (k, v) = want
                .split_once('=')
                .ok_or_else(|| broken(s.line, format!("@doc: {want:?} is not key=value")))?;
            let ok = match k {
                "state" => summary.state == v,
                "version" if v == "next" => match previous {
                    Some(p) => u64::from(summary.version) == u64::from(p) + 1,
                    None => true,
                },
                "version" => v.parse::<u32>().ok() == Some(summary.version),
                "rules" => {
                    let ids: Vec<&str> = summary.rules.iter().map(|(i, _)| i.as_str()).collect();
                    let want: Vec<&str> = v.split(',').filter(|x| !x.is_empty()).collect();
                    ids == want
                }
                _ => return Err(broken(s.line, format!("@doc: unknown key {k:?}"))),
            };
            if !ok {
                let prev = previous.map_or("none".to_owned(), |p| p.to_string());
                return Err(step_err(
                    s,
                    format!("a document with {want} (previous version on this dialog: {prev})"),
                    format!(
                        "version {}, {}, rules {:?}\n{}",
                        summary.version,
                        summary.state,
                        summary.rules,
                        m.display()
                    ),
                ));
            }
        }
        self.versions.insert(call.clone(), summary.version);
        self.apply_view(&call, summary);
        Ok(())
    }
}

fn start_line_matches(pattern: &str, m: &Message) -> bool {
    let p: Vec<&str> = pattern.split_whitespace().collect();
    if let Some(status) = p.first().filter(|w| w.starts_with("SIP/")).and(p.get(1)) {
        return m.status().map(|s| s.to_string()).as_deref() == Some(*status);
    }
    match p.as_slice() {
        [method] => m.method() == Some(*method),
        [method, uri, ..] => {
            m.method() == Some(*method) && (*uri == "*" || m.request_uri() == Some(*uri))
        }
        _ => false,
    }
}

/// `Name: value` (a line equals it, or all elements across lines joined equal it),
/// `Name: ~text` (a line contains it), `Name: !~text` (no line contains it), `Name: != value`
/// (present, no line equals it), `!Name` (absent).
fn header_matches(pattern: &str, m: &Message) -> Result<(), String> {
    if let Some(name) = pattern.strip_prefix('!') {
        let lines = m.all(name.trim());
        return if lines.is_empty() {
            Ok(())
        } else {
            Err(format!("{} is present", name.trim()))
        };
    }
    let (name, want) = pattern
        .split_once(':')
        .ok_or_else(|| format!("not a header pattern: {pattern:?}"))?;
    let (name, want) = (name.trim(), want.trim());
    let lines = m.all(name);
    if let Some(text) = want.strip_prefix("!~") {
        return match lines.iter().find(|l| l.contains(text.trim())) {
            None => Ok(()),
            Some(l) => Err(format!("{name}: {l}")),
        };
    }
    if lines.is_empty() {
        return Err(format!("no {name} header"));
    }
    let ok = if let Some(text) = want.strip_prefix('~') {
        lines.iter().any(|l| l.contains(text.trim()))
    } else if let Some(text) = want.strip_prefix("!=") {
        lines.iter().all(|l| *l != text.trim())
    } else {
        let want_list = list(want).join(", ");
        lines.contains(&want) || m.joined(name) == want_list
    };
    if ok {
        Ok(())
    } else {
        Err(format!("{name}: {}", lines.join(" | ")))
    }
}

pub(super) fn exchange(v: &Vector) -> Result<(), StepError> {
    let keys: BTreeMap<String, String> = v.keys.clone();
    let side = match v.key("role") {
        Some("subscriber") => adapter::subscriber(&keys, 0),
        Some("notifier") => adapter::notifier(&keys),
        _ => return Err(broken(v.line, "role: subscriber | notifier")),
    }
    .map_err(|e| broken(v.line, e))?;
    let mut x = Exchange {
        side,
        now_ns: 0,
        wall0: wall0(v)?,
        outbox: VecDeque::new(),
        last_sent: HashMap::new(),
        vars: HashMap::new(),
        last_request: None,
        versions: HashMap::new(),
        views: HashMap::new(),
    };
    x.drain();
    for s in &v.sections {
        match s.name.as_str() {
            "send" => {
                let (bytes, expect_status) = {
                    let lines = x.substituted(s)?;
                    let status = match s.args.strip_prefix("=>") {
                        Some(st) => Some(
                            st.trim()
                                .parse::<u16>()
                                .map_err(|_| broken(s.line, "send => STATUS"))?,
                        ),
                        None if s.args.is_empty() => None,
                        None => return Err(broken(s.line, "send takes only `=> STATUS`")),
                    };
                    (sip_text(&lines), status)
                };
                x.feed(s, bytes)?;
                if let Some(status) = expect_status {
                    let pattern = Section {
                        name: "expect".into(),
                        args: String::new(),
                        lines: vec![format!("SIP/2.0 {status}")],
                        line: s.line,
                    };
                    x.expect(&pattern).map_err(|mut e| {
                        e.step = format!("the response to --- send (line {})", s.line);
                        e
                    })?;
                }
            }
            "reply" => {
                let bytes = x.reply(s)?;
                x.feed(s, bytes)?;
            }
            "expect" => x.expect(s)?,
            "quiet" => {
                if let Some((_, next)) = x.outbox.front() {
                    let shown = Message::parse(next).map_or_else(
                        |_| String::from_utf8_lossy(next).into_owned(),
                        |m| m.display(),
                    );
                    return Err(step_err(
                        s,
                        "loadctl sends nothing",
                        format!("it sent {shown}"),
                    ));
                }
            }
            "wait" => {
                let secs: f64 = s
                    .args
                    .trim_end_matches('s')
                    .trim()
                    .parse()
                    .map_err(|_| broken(s.line, "wait SECONDS"))?;
                let to = x.now_ns + (secs * 1e9).round() as u64;
                x.advance(to);
            }
            "unsubscribe" => {
                x.side
                    .local(x.now_ns, "unsubscribe", "")
                    .map_err(|e| broken(s.line, e))?;
                x.drain();
            }
            "set-policy" => {
                let arg = if s.args == "none" {
                    "none".to_owned()
                } else {
                    s.text()
                };
                x.side
                    .local(x.now_ns, "set-policy", &arg)
                    .map_err(|e| broken(s.line, e))?;
                x.drain();
            }
            "classify" => {
                let (now, wall) = (x.now_ns, x.wall0);
                let transport = v.key("transport").unwrap_or("udp").to_owned();
                let c = x
                    .side
                    .classifier()
                    .ok_or_else(|| broken(s.line, "classify needs role: subscriber"))?;
                classify_lines(s, c, &transport, |_| Clock {
                    monotonic_ns: now,
                    unix_ns: wall + i128::from(now),
                })
                .map_err(|mut e| {
                    e.step = format!("--- classify at {} s: {}", now as f64 / 1e9, e.step);
                    e
                })?;
            }
            other => return Err(broken(s.line, format!("unknown step --- {other}"))),
        }
    }
    Ok(())
}
