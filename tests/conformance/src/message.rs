//! A small SIP message reader of the suite's own, independent of loadctl's scanners: the
//! expectations look at what went on the wire through it, so a scanner bug cannot hide itself.

/// A SIP message split into its start line, header lines (folds joined, compact names
/// expanded) and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The first line.
    pub start: String,
    /// (canonical name, value) per header line, in order.
    pub headers: Vec<(String, String)>,
    /// The body (after the empty line).
    pub body: Vec<u8>,
}

/// The long name of a compact header name (RFC 3261 §7.3.3, RFC 6665 §8.2), capitalised as
/// usual; other names keep their spelling.
fn canonical(name: &str) -> String {
    let long = match name.to_ascii_lowercase().as_str() {
        "i" | "call-id" => "Call-ID",
        "m" | "contact" => "Contact",
        "l" | "content-length" => "Content-Length",
        "c" | "content-type" => "Content-Type",
        "f" | "from" => "From",
        "t" | "to" => "To",
        "v" | "via" => "Via",
        "o" | "event" => "Event",
        "u" | "allow-events" => "Allow-Events",
        "cseq" => "CSeq",
        "route" => "Route",
        "record-route" => "Record-Route",
        "expires" => "Expires",
        "min-expires" => "Min-Expires",
        "subscription-state" => "Subscription-State",
        "accept" => "Accept",
        "retry-after" => "Retry-After",
        _ => return name.to_owned(),
    };
    long.to_owned()
}

/// Splits a comma-separated header value into its elements (commas inside quotes or `<>` do
/// not split), trimmed.
pub fn list(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut quoted, mut angle, mut start) = (false, false, 0);
    let b = value.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if quoted => i += 1,
            b'"' => quoted = !quoted,
            b'<' if !quoted => angle = true,
            b'>' if !quoted => angle = false,
            b',' if !quoted && !angle => {
                out.push(value[start..i].trim().to_owned());
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(value[start..].trim().to_owned());
    out.retain(|s| !s.is_empty());
    out
}

impl Message {
    /// Reads a message (lines end in CRLF or LF).
    pub fn parse(bytes: &[u8]) -> Result<Self, String> {
        let text_end = find_blank(bytes).ok_or("no empty line after the headers")?;
        let head = std::str::from_utf8(&bytes[..text_end.0])
            .map_err(|_| "the header section is not UTF-8".to_owned())?;
        let mut lines = head.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
        let start = lines.next().unwrap_or("").to_owned();
        let mut headers: Vec<(String, String)> = Vec::new();
        for l in lines {
            if l.starts_with([' ', '\t']) {
                let Some(last) = headers.last_mut() else {
                    return Err("a folded line before the first header".into());
                };
                last.1.push(' ');
                last.1.push_str(l.trim());
                continue;
            }
            let (name, value) = l
                .split_once(':')
                .ok_or_else(|| format!("a header line without a colon: {l:?}"))?;
            headers.push((canonical(name.trim()), value.trim().to_owned()));
        }
        Ok(Self {
            start,
            headers,
            body: bytes[text_end.1..].to_vec(),
        })
    }

    /// True for a response.
    pub fn is_response(&self) -> bool {
        self.start.starts_with("SIP/")
    }

    /// The status code of a response.
    pub fn status(&self) -> Option<u16> {
        self.is_response()
            .then(|| self.start.split(' ').nth(1)?.parse().ok())
            .flatten()
    }

    /// The method of a request.
    pub fn method(&self) -> Option<&str> {
        (!self.is_response()).then(|| self.start.split(' ').next().unwrap_or(""))
    }

    /// The Request-URI of a request.
    pub fn request_uri(&self) -> Option<&str> {
        (!self.is_response()).then(|| self.start.split(' ').nth(1).unwrap_or(""))
    }

    /// Every line's value of a header (name compared case-insensitively, compact forms too).
    pub fn all(&self, name: &str) -> Vec<&str> {
        let name = canonical(name);
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The first line's value of a header.
    pub fn first(&self, name: &str) -> Option<&str> {
        self.all(name).into_iter().next()
    }

    /// Every element of a header across lines (RFC 3261 §7.3.1), joined by `, `.
    pub fn joined(&self, name: &str) -> String {
        self.all(name)
            .into_iter()
            .flat_map(list)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The message as text, for reports.
    pub fn display(&self) -> String {
        let mut s = self.start.clone();
        for (n, v) in &self.headers {
            s.push_str(&format!("\n    {n}: {v}"));
        }
        if !self.body.is_empty() {
            s.push_str(&format!(
                "\n    <body, {} bytes>\n    {}",
                self.body.len(),
                String::from_utf8_lossy(&self.body).replace('\n', "\n    ")
            ));
        }
        s
    }
}

/// Where the header section ends: (end of the headers, start of the body).
fn find_blank(b: &[u8]) -> Option<(usize, usize)> {
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\n' {
            if b.get(i + 1) == Some(&b'\n') {
                return Some((i, i + 2));
            }
            if b.get(i + 1) == Some(&b'\r') && b.get(i + 2) == Some(&b'\n') {
                return Some((i, i + 3));
            }
        }
        i += 1;
    }
    None
}

/// The `tag` parameter of a From/To value.
pub fn tag_of(value: &str) -> Option<String> {
    let params = match value.rfind('>') {
        Some(i) => &value[i + 1..],
        None => value.split_once(';').map_or("", |(_, p)| p),
    };
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        k.trim()
            .eq_ignore_ascii_case("tag")
            .then(|| v.trim().to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_folds_compact_names_lists_and_body() {
        let m = Message::parse(
            b"NOTIFY sip:a@b SIP/2.0\r\nv: SIP/2.0/UDP h;branch=z9hG4bK1\r\nRoute: <sip:p1;lr>,\r\n <sip:p2;lr>\r\nroute: <sip:p3;lr>\r\nf: <sip:n@x>;tag=7\r\n\r\nbody",
        )
        .expect("parses");
        assert_eq!(m.method(), Some("NOTIFY"));
        assert_eq!(m.request_uri(), Some("sip:a@b"));
        assert_eq!(m.joined("Route"), "<sip:p1;lr>, <sip:p2;lr>, <sip:p3;lr>");
        assert_eq!(m.first("Via"), Some("SIP/2.0/UDP h;branch=z9hG4bK1"));
        assert_eq!(tag_of(m.first("From").unwrap_or("")).as_deref(), Some("7"));
        assert_eq!(m.body, b"body");
        assert_eq!(tag_of("sip:a@b;tag=x"), Some("x".into()));
        assert_eq!(tag_of("<sip:a@b;tag=x>"), None);
    }
}
