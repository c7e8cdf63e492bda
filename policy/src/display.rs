//! One-line, human-readable renderings of rules for `loadctl check` and `loadctl explain`.
//!
//! The format is for people, not for parsing: `to in {tel:+1-212-555-1234}; method INVITE
//! -> accept rate 100/s, else reject`.

use std::fmt;

use super::model::*;

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Identity::One(uri) => write!(f, "{uri}"),
            Identity::Many { domain, except } => {
                match domain {
                    Some(d) => write!(f, "any@{d}")?,
                    None => f.write_str("anyone")?,
                }
                list(
                    f,
                    " except ",
                    except.iter().map(|e| match e {
                        Except::Domain(d) => format!("@{d}"),
                        Except::Id(u) => u.to_string(),
                    }),
                )
            }
            Identity::ManyTel { prefix, except } => {
                match prefix {
                    Some(prefix) => write!(f, "{prefix}*")?,
                    None => f.write_str("any number")?,
                }
                list(
                    f,
                    " except ",
                    except.iter().map(|e| match e {
                        ExceptTel::Prefix(p) => format!("{p}*"),
                        ExceptTel::Id(u) => u.to_string(),
                    }),
                )
            }
        }
    }
}

/// Writes ` except {a, b}` when there are items.
fn list(
    f: &mut fmt::Formatter<'_>,
    lead: &str,
    items: impl Iterator<Item = String>,
) -> fmt::Result {
    let items: Vec<String> = items.collect();
    if items.is_empty() {
        return Ok(());
    }
    write!(f, "{lead}{{{}}}", items.join(", "))
}

impl fmt::Display for SipIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .fields()
            .map(|(field, set)| {
                let ids: Vec<String> = set.identities.iter().map(ToString::to_string).collect();
                format!("{} in {{{}}}", field.element(), ids.join(", "))
            })
            .collect();
        f.write_str(&parts.join(" and "))
    }
}

impl fmt::Display for Conditions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(ci) = &self.call_identity {
            let sips: Vec<String> = ci.sip.iter().map(ToString::to_string).collect();
            parts.push(if sips.len() == 1 {
                sips.concat()
            } else {
                format!("({})", sips.join(") or ("))
            });
        }
        match &self.method {
            Some(m) => parts.push(format!("method {m}")),
            None => parts.push("method INVITE|MESSAGE|REGISTER|SUBSCRIBE|OPTIONS|PUBLISH".into()),
        }
        if let Some(t) = &self.target_sip_entity {
            parts.push(format!("target {t}"));
        }
        if let Some(v) = &self.validity {
            let spans: Vec<String> = v
                .intervals
                .iter()
                .map(|i| {
                    let empty = if i.is_empty() { " (empty)" } else { "" };
                    format!("{}/{}{empty}", i.from(), i.until())
                })
                .collect();
            parts.push(format!("valid {}", spans.join(" or ")));
        }
        for u in &self.unsupported {
            parts.push(format!("never matches (unsupported condition {u})"));
        }
        f.write_str(&parts.join("; "))
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Rate(r) => write!(f, "rate {}/s", r.per_second()),
            Limit::Percent(p) => write!(f, "{}%", p.value()),
            Limit::Window(w) => write!(f, "window {w}"),
        }
    }
}

impl fmt::Display for AltAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AltAction::Reject => f.write_str("reject (503)"),
            AltAction::Drop => f.write_str("drop"),
            AltAction::Redirect(targets) => {
                let t: Vec<&str> = targets.iter().map(Uri::as_str).collect();
                write!(f, "redirect to {}", t.join(" "))
            }
        }
    }
}

impl fmt::Display for Accept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "accept {}, else {}", self.limit, self.alt_action)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} -> {}", self.id, self.conditions, self.accept)
    }
}
