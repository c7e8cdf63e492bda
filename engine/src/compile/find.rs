//! Finding a request's rule in a compiled policy: the request's canonical view, the candidates
//! the indexes yield, the full check of each in document order, and `explain`'s per-field
//! account.

use super::identity::*;
use super::index::*;
use super::matcher::*;
use super::view::*;
use super::{CompiledPolicy, Identities, Miss, RequestView, Scratch};
use crate::policy::Field;
use crate::uri::{Canonical, Parts, SipUserNumbers};

impl CompiledPolicy {
    /// Canonicalises the fields some rule uses into `scratch`, every part of them (for
    /// [`CompiledPolicy::check`], [`CompiledPolicy::find`] and `explain`).
    pub fn view<'b, 'r>(
        &self,
        ids: &Identities<'r>,
        scratch: &'b mut Scratch,
    ) -> RequestView<'b, 'r> {
        let [f0, t0, r0, p0, p1, tg] = &mut scratch.bufs;
        let mut view = self.fields_view(ids, [f0, t0, r0, p0, p1], None, &mut false);
        if self.matcher.uses_target {
            view.target = ids.target.and_then(|v| uri_canonical(v, tg));
        }
        view
    }

    /// Canonicalises the header fields some rule uses into `bufs` (a view without target).
    /// With `lazy`, only the parts the policy reads on every request are built
    /// ([`Matcher::parts`]), fields are probed before they are parsed, and what the probes find
    /// goes to its candidates; without, all of every field is built. `*unread` is set when
    /// some field is a [`uri::unread_number`].
    #[inline]
    fn fields_view<'b, 'r>(
        &self,
        ids: &Identities<'r>,
        [f0, t0, r0, p0, p1]: [&'b mut Vec<u8>; 5],
        lazy: Option<Lazy<'b, 'r, '_>>,
        unread: &mut bool,
    ) -> RequestView<'b, 'r> {
        let m = &self.matcher;
        let mut view = RequestView::default();
        let mut unused: Keys<'b, 'r> = IN_VIEW;
        let (parts, [kf, kt, kr, kp0, kp1], keys, mut candidates) = match lazy {
            Some((bufs, keys, c)) => (m.parts, bufs.each_mut().map(Some), keys, Some(c)),
            None => (
                [Parts::ALL; 4],
                [None, None, None, None, None],
                &mut unused,
                None,
            ),
        };
        let [lf, lt, lr, lp0, lp1] = keys;
        if m.uses[0] {
            let text = ids.from.and_then(|v| header_text(v, 0));
            let how = (parts[0], m.numbers, &mut *unread);
            let probe = probe_of(m, 0, candidates.as_deref_mut());
            view.fields[0][0] = field(text, how, f0, kf, lf, probe);
        }
        if m.uses[1] {
            let text = ids.to.and_then(|v| header_text(v, 0));
            let how = (parts[1], m.numbers, &mut *unread);
            let probe = probe_of(m, 1, candidates.as_deref_mut());
            view.fields[1][0] = field(text, how, t0, kt, lt, probe);
        }
        if m.uses[2] {
            let text = ids.request_uri.map(bare_text);
            let how = (parts[2], m.numbers, &mut *unread);
            let probe = probe_of(m, 2, candidates.as_deref_mut());
            view.fields[2][0] = field(text, how, r0, kr, lr, probe);
        }
        if m.uses[3] {
            let mut values = ids.p_asserted_identity.values();
            let text = values.next().and_then(element_text);
            let how = (parts[3], m.numbers, &mut *unread);
            let probe = probe_of(m, 3, candidates.as_deref_mut());
            view.fields[3][0] = field(text, how, p0, kp0, lp0, probe);
            let text = values.next().and_then(element_text);
            let how = (parts[3], m.numbers, &mut *unread);
            let probe = probe_of(m, 3, candidates);
            view.fields[3][1] = field(text, how, p1, kp1, lp1, probe);
        }
        view
    }

    /// Checks rule `i` against a request: `Ok` when every condition holds.
    #[inline]
    pub fn check(
        &self,
        i: usize,
        method: &str,
        unix_nanos: i128,
        view: &RequestView<'_, '_>,
    ) -> Result<(), Miss> {
        let mut target = LazyTarget::Ready(view.target);
        self.check_conditions(i, method, method_code(method), unix_nanos, &mut target)?;
        if self.identity_matches(i, &mut { view.fields }, &mut { IN_VIEW }) {
            Ok(())
        } else {
            Err(Miss::CallIdentity)
        }
    }

    /// Every condition but the call-identity, cheapest first, mostly from the dense meta.
    #[inline]
    fn check_conditions(
        &self,
        i: usize,
        method: &str,
        code: Option<u8>,
        unix_nanos: i128,
        target: &mut LazyTarget<'_, '_>,
    ) -> Result<(), Miss> {
        let meta = self.matcher.meta[i];
        if meta.never {
            return Err(Miss::Unsupported);
        }
        let m = &self.matcher;
        let method_ok = if meta.other_method {
            m.extra(&m.conditions[i])
                .and_then(|x| x.method.as_ref())
                .is_some_and(|m| m.as_str() == method)
        } else {
            code.is_some_and(|c| meta.methods & (1 << c) != 0)
        };
        if !method_ok {
            return Err(Miss::Method);
        }
        if !meta.slow {
            return Ok(());
        }
        let Some(r) = m.extra(&m.conditions[i]) else {
            return Ok(());
        };
        if !r.validity.is_empty()
            && !r
                .validity
                .iter()
                .any(|&(f, u)| f <= unix_nanos && unix_nanos < u)
        {
            return Err(Miss::Validity);
        }
        if let Some(t) = &r.target {
            match target.get() {
                None => return Err(Miss::NoTarget),
                Some(c) if !t.matches_entity(c) => return Err(Miss::Target),
                Some(_) => {}
            }
        }
        Ok(())
    }

    #[inline]
    fn identity_matches<'b, 'r>(
        &self,
        i: usize,
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
    ) -> bool {
        let m = &self.matcher;
        let sips = &m.sips[m.conditions[i].sips.range()];
        sips.is_empty() || sips.iter().any(|&sip| self.sip_matches(sip, fields, keys))
    }

    #[inline]
    fn sip_matches<'b, 'r>(
        &self,
        sip: Span,
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
    ) -> bool {
        let m = &self.matcher;
        m.fields[sip.range()].iter().all(|&(f, ids)| {
            Self::field_matches(
                &m.identities[ids.range()],
                fields,
                keys,
                (field_slot(f), m.numbers),
            )
        })
    }

    /// Some value of field `slot` matches some identity of `ids`.
    #[inline]
    fn field_matches<'b, 'r>(
        ids: &[CompiledIdentity],
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
        (slot, numbers): (usize, SipUserNumbers),
    ) -> bool {
        // Only P-Asserted-Identity has a second value.
        let mut spare = LazyKey::InView;
        let [from, to, ruri, pai0, pai1] = keys;
        let keys = match slot {
            0 => [from, &mut spare],
            1 => [to, &mut spare],
            2 => [ruri, &mut spare],
            _ => [pai0, pai1],
        };
        fields[slot].iter_mut().zip(keys).any(|(entry, key)| {
            if let LazyKey::Unread { .. } = key {
                read_unread(entry, key, numbers);
            }
            let Some(parts) = *entry else {
                return false;
            };
            let mut v = Value {
                parts,
                entry,
                key,
                numbers,
            };
            ids.iter().any(|id| id.matches(&mut v))
        })
    }

    /// The first rule (document order) whose conditions all hold, found through the indexes.
    /// `candidates` is scratch space (cleared here).
    #[inline]
    pub fn find(
        &self,
        method: &str,
        unix_nanos: i128,
        view: &RequestView<'_, '_>,
        candidates: &mut Vec<u32>,
    ) -> Option<usize> {
        let mut target = LazyTarget::Ready(view.target);
        let mut keys = IN_VIEW;
        let mut fields = view.fields;
        candidates.clear();
        self.find_in(
            method,
            unix_nanos,
            &mut fields,
            &mut keys,
            &mut target,
            candidates,
        )
    }

    #[inline]
    fn find_in<'b, 'r>(
        &self,
        method: &str,
        unix_nanos: i128,
        fields: &mut Fields<'b, 'r>,
        keys: &mut Keys<'b, 'r>,
        target: &mut LazyTarget<'_, '_>,
        candidates: &mut Vec<u32>,
    ) -> Option<usize> {
        // Candidates already found (by a lazy view's probes) stay.
        for (slot, values) in fields.iter().enumerate() {
            if !self.matcher.uses[slot] {
                continue;
            }
            for c in values.iter().flatten() {
                self.matcher.index[slot].lookup(c, candidates);
            }
        }
        // Entries are `rule << ENTRY_RULE_SHIFT | method << 1 | sufficient` ([`entry`]):
        // sorting orders by rule; `dedup_by` folds hits on one rule into the first, keeping
        // `sufficient` if any of them had it (the method code is the rule's, the same in all).
        candidates.sort_unstable();
        candidates.dedup_by(|later, earlier| {
            let same = *later >> ENTRY_RULE_SHIFT == *earlier >> ENTRY_RULE_SHIFT;
            if same {
                *earlier |= *later & 1;
            }
            same
        });
        let code = method_code(method);
        // Merge with the always-checked rules (ascending); the first rule that holds wins.
        let (mut a, mut b) = (0, 0);
        let (cands, always) = (&candidates[..], &self.matcher.always[..]);
        loop {
            let split = |e: u32| (e >> ENTRY_RULE_SHIFT, (e >> 1) & 0xf, e & 1 == 1);
            let (rule, method_code, sufficient) =
                match (cands.get(a).map(|&e| split(e)), always.get(b)) {
                    (None, None) => return None,
                    (Some(x), None) => {
                        a += 1;
                        x
                    }
                    (None, Some(&y)) => {
                        b += 1;
                        (y, ENTRY_CHECK, false)
                    }
                    (Some(x), Some(&y)) => {
                        if x.0 <= y {
                            a += 1;
                            if x.0 == y {
                                b += 1;
                            }
                            x
                        } else {
                            b += 1;
                            (y, ENTRY_CHECK, false)
                        }
                    }
                };
            let i = rule as usize;
            // A plain rule's method test is in its entry; others read the rule.
            let conditions_ok = match entry_method_ok(method_code, code) {
                Some(ok) => ok,
                None => self
                    .check_conditions(i, method, code, unix_nanos, target)
                    .is_ok(),
            };
            if conditions_ok && (sufficient || self.identity_matches(i, fields, keys)) {
                return Some(i);
            }
        }
    }

    /// Like [`CompiledPolicy::find`] using `scratch` for both the view and candidates.
    pub fn find_with(
        &self,
        method: &str,
        unix_nanos: i128,
        ids: &Identities<'_>,
        scratch: &mut Scratch,
    ) -> Option<usize> {
        let Scratch {
            bufs,
            keys,
            candidates,
            unread_number,
        } = scratch;
        let [f0, t0, r0, p0, p1, tg] = bufs;
        let mut lazy_keys: Keys<'_, '_> = IN_VIEW;
        let mut unread = false;
        candidates.clear();
        let mut view = self.fields_view(
            ids,
            [f0, t0, r0, p0, p1],
            Some((keys, &mut lazy_keys, candidates)),
            &mut unread,
        );
        // The target is canonicalised only if a candidate rule names one.
        let mut target = match self.matcher.uses_target {
            true => LazyTarget::Pending {
                raw: ids.target,
                buf: tg,
            },
            false => LazyTarget::Ready(None),
        };
        let found = self.find_in(
            method,
            unix_nanos,
            &mut view.fields,
            &mut lazy_keys,
            &mut target,
            candidates,
        );
        *unread_number = unread && found.is_none() && self.matcher.compares_numbers;
        found
    }

    /// For `explain`: per `<sip>` block of rule `i`, per field, whether it matched.
    pub fn explain_rule(&self, i: usize, view: &RequestView<'_, '_>) -> Vec<Vec<(Field, bool)>> {
        let m = &self.matcher;

        m.sips[m.conditions[i].sips.range()]
            .iter()
            .map(|sip| {
                m.fields[sip.range()]
                    .iter()
                    .map(|&(f, ids)| {
                        let ids = &m.identities[ids.range()];
                        let (mut fields, mut keys) = (view.fields, IN_VIEW);
                        (
                            f,
                            Self::field_matches(
                                ids,
                                &mut fields,
                                &mut keys,
                                (field_slot(f), m.numbers),
                            ),
                        )
                    })
                    .collect()
            })
            .collect()
    }
}

/// What a lazy view builds with besides the field buffers: where keys built on demand go, how
/// to get each, and the candidates its probes find.
type Lazy<'b, 'r, 'c> = (&'b mut [Vec<u8>; 5], &'c mut Keys<'b, 'r>, &'c mut Vec<u32>);

/// How field `slot` is probed before it is parsed, in a lazy view (`candidates`: where what a
/// probe finds goes).
fn probe_of<'m, 'c>(
    m: &'m Matcher,
    slot: usize,
    candidates: Option<&'c mut Vec<u32>>,
) -> Option<(&'m FieldIndex, Probe, &'c mut Vec<u32>)> {
    candidates.map(|c| (&m.index[slot], m.probe[slot], c))
}

/// Display of a canonical form for people (`explain`).
pub fn describe_canonical(c: &Canonical<'_, '_>) -> String {
    let mut s = String::from_utf8_lossy(c.key).into_owned();
    if let Some(n) = c.number {
        s.push_str(&format!(
            " (number {}{}{})",
            if n.global { "+" } else { "" },
            String::from_utf8_lossy(n.digits),
            n.context
                .map(|x| format!(", phone-context {}", String::from_utf8_lossy(x)))
                .unwrap_or_default()
        ));
    }
    if let Some(h) = c.host
        && c.number.is_some()
    {
        s.push_str(&format!(" host {}", String::from_utf8_lossy(h)));
    }
    s
}
