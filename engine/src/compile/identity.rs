//! A policy's identities compiled to canonical form (`one`, `many`, `many-tel` and their
//! `except`s, RFC 7200 §5.3.1) and how each matches a request field's canonical URI.

use super::view::Value;
use crate::policy::{Except, ExceptTel, Identity, TelPrefix, Uri};
use crate::uri::{self, Canonical, CanonicalParam, Number, Parts, SipUserNumbers};

#[derive(Debug)]
pub(super) enum CompiledIdentity {
    One(CompiledUri),
    Many {
        domain: Option<Box<[u8]>>,
        except: Vec<CompiledExcept>,
    },
    ManyTel {
        /// `None`: any number.
        prefix: Option<TelMatch>,
        except: Vec<CompiledExceptTel>,
    },
}

#[derive(Debug)]
pub(super) enum CompiledExcept {
    Domain(Box<[u8]>),
    Id(CompiledUri),
}

#[derive(Debug)]
pub(super) enum CompiledExceptTel {
    Prefix(TelMatch),
    Id(CompiledUri),
}

/// A policy URI in canonical form.
#[derive(Debug)]
pub(super) struct CompiledUri {
    pub(super) key: Box<[u8]>,
    /// Parameters and headers of a SIP URI not compared as a number.
    pub(super) sip: Option<(Vec<CanonicalParam>, Vec<CanonicalParam>)>,
}

impl CompiledUri {
    pub(super) fn new(uri: &Uri, numbers: SipUserNumbers) -> Self {
        let mut buf = Vec::new();
        let c = uri::canonicalize_with(uri.parsed(), &mut buf, Parts::ALL, numbers);
        let sip = c.sip.map(|s| {
            (
                uri::canonical_params(s.params),
                uri::canonical_headers(s.headers),
            )
        });
        Self {
            key: c.key.into(),
            sip,
        }
    }

    /// RFC 3261 §19.1.4 equality (an identity).
    #[inline]
    pub(super) fn matches(&self, c: &Canonical<'_, '_>) -> bool {
        self.matches_with(c, &uri::STRICT_PARAMS)
    }

    /// The same entity (a target): as [`CompiledUri::matches`] but a transport parameter in
    /// only one URI does not count (see [`uri::ENTITY_STRICT_PARAMS`]).
    #[inline]
    pub(super) fn matches_entity(&self, c: &Canonical<'_, '_>) -> bool {
        self.matches_with(c, &uri::ENTITY_STRICT_PARAMS)
    }

    #[inline]
    fn matches_with(&self, c: &Canonical<'_, '_>, strict: &[&str]) -> bool {
        if *self.key != *c.key {
            return false;
        }
        match (&self.sip, &c.sip) {
            (Some((params, headers)), Some(s)) => {
                uri::params_and_headers_match_with(s, params, headers, strict)
            }
            _ => true,
        }
    }
}

/// A `many-tel` / `except-tel` prefix in canonical form.
#[derive(Debug)]
pub(super) struct TelMatch {
    /// The prefix as a canonical phone-context: `+digits` / `digits` for a numeric prefix, a
    /// lower-case domain otherwise.
    pub(super) context: Box<[u8]>,
    numeric: bool,
    pub(super) global: bool,
}

impl TelMatch {
    pub(super) fn new(prefix: &TelPrefix) -> Self {
        match prefix.digits() {
            Some(d) => Self {
                global: d.starts_with('+'),
                numeric: true,
                context: d.into_bytes().into(),
            },
            None => Self {
                numeric: false,
                global: false,
                context: prefix.as_str().to_ascii_lowercase().into_bytes().into(),
            },
        }
    }

    /// Decimal digits of a numeric prefix (without the `+` of a global one).
    #[inline]
    pub(super) fn digits(&self) -> Option<&[u8]> {
        self.numeric
            .then(|| &self.context[usize::from(self.global)..])
    }

    /// A global number starting with the prefix digits; a local number whose phone-context is
    /// the prefix, or (for a prefix without `+`) whose digits start with it.
    #[inline]
    pub(super) fn matches(&self, n: &Number<'_>) -> bool {
        if n.global {
            return self.global && self.digits().is_some_and(|d| n.digits.starts_with(d));
        }
        n.context == Some(&self.context[..])
            || (!self.global && self.digits().is_some_and(|d| n.digits.starts_with(d)))
    }
}

impl CompiledIdentity {
    pub(super) fn new(identity: &Identity, numbers: SipUserNumbers) -> Self {
        let uri = |u| CompiledUri::new(u, numbers);
        match identity {
            Identity::One(u) => CompiledIdentity::One(uri(u)),
            Identity::Many { domain, except } => CompiledIdentity::Many {
                domain: domain.as_ref().map(|d| lower(d.as_str())),
                except: except
                    .iter()
                    .map(|e| match e {
                        Except::Domain(d) => CompiledExcept::Domain(lower(d.as_str())),
                        Except::Id(u) => CompiledExcept::Id(uri(u)),
                    })
                    .collect(),
            },
            Identity::ManyTel { prefix, except } => CompiledIdentity::ManyTel {
                prefix: prefix.as_ref().map(TelMatch::new),
                except: except
                    .iter()
                    .map(|e| match e {
                        ExceptTel::Prefix(p) => CompiledExceptTel::Prefix(TelMatch::new(p)),
                        ExceptTel::Id(u) => CompiledExceptTel::Id(uri(u)),
                    })
                    .collect(),
            },
        }
    }

    /// Whether the identity matches a request URI: `v.parts` holds the parts the policy reads
    /// on every request for this field ([`Matcher::parts`]: the host where a `many` or
    /// `except domain` may look, the number where a `many-tel` may); `v.key()` gives the key
    /// (and parameters) that `one` and `except id` compare, built on first use.
    #[inline]
    pub(super) fn matches(&self, v: &mut Value<'_, '_, '_>) -> bool {
        let c = v.parts;
        match self {
            CompiledIdentity::One(u) => v.key().is_some_and(|k| u.matches(k)),
            CompiledIdentity::Many { domain, except } => {
                // `<many>` groups identities by their domain part (RFC 7200 §5.3.1: "The
                // 'domain' attribute works well for SIP URIs"; 'tel' URIs are grouped by
                // `<many-tel>`), so even without a domain it matches only identities that
                // have one: the section's own example ORs `<many>` and `<many-tel>` to mean
                // "SIP URIs outside a domain or numbers outside a prefix".
                let in_domain = match domain {
                    None => c.host.is_some(),
                    Some(d) => c.host == Some(&d[..]),
                };
                in_domain
                    && !except.iter().any(|e| match e {
                        CompiledExcept::Domain(d) => c.host == Some(&d[..]),
                        CompiledExcept::Id(u) => v.key().is_some_and(|k| u.matches(k)),
                    })
            }
            CompiledIdentity::ManyTel { prefix, except } => {
                c.number
                    .is_some_and(|n| prefix.as_ref().is_none_or(|p| p.matches(&n)))
                    && !except.iter().any(|e| match e {
                        CompiledExceptTel::Prefix(p) => c.number.is_some_and(|n| p.matches(&n)),
                        CompiledExceptTel::Id(u) => v.key().is_some_and(|k| u.matches(k)),
                    })
            }
        }
    }

    /// An index hit on this identity proves it matches: nothing left to compare.
    pub(super) fn hit_suffices(&self) -> bool {
        match self {
            CompiledIdentity::One(u) => u.sip.is_none(),
            CompiledIdentity::Many { domain, except } => domain.is_some() && except.is_empty(),
            // The trie keeps 255 digits of a prefix: a longer one is checked in full.
            CompiledIdentity::ManyTel { except, prefix } => {
                except.is_empty() && prefix.as_ref().is_some_and(|p| p.context.len() <= 255)
            }
        }
    }

    /// The parts of a request URI [`CompiledIdentity::matches`] reads in `c` (the key it
    /// reads through [`Value::key`], on demand).
    pub(super) fn parts(&self) -> Parts {
        match self {
            CompiledIdentity::One(_) => Parts::default(),
            CompiledIdentity::Many { .. } => Parts {
                host: true,
                ..Parts::default()
            },
            CompiledIdentity::ManyTel { .. } => Parts {
                number: true,
                ..Parts::default()
            },
        }
    }

    /// The identity compares telephone numbers.
    pub(super) fn compares_numbers(&self) -> bool {
        let number = |u: &CompiledUri| u.key.starts_with(b"tel:");
        match self {
            CompiledIdentity::One(u) => number(u),
            CompiledIdentity::Many { except, .. } => except.iter().any(|e| match e {
                CompiledExcept::Id(u) => number(u),
                CompiledExcept::Domain(_) => false,
            }),
            CompiledIdentity::ManyTel { .. } => true,
        }
    }

    pub(super) fn indexable(&self) -> bool {
        !matches!(
            self,
            CompiledIdentity::Many { domain: None, .. }
                | CompiledIdentity::ManyTel { prefix: None, .. }
        )
    }
}

fn lower(s: &str) -> Box<[u8]> {
    s.to_ascii_lowercase().into_bytes().into()
}
