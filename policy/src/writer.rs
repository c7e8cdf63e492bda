//! The canonical writer: [`Ruleset`] → `application/load-control+xml` body.
//!
//! The output follows the layout of RFC 7200's own examples (common-policy as the default
//! namespace, load-control elements with the `lc:` prefix), two-space indentation, attributes
//! in a fixed order. Reading the output back gives the same [`Ruleset`].

use std::fmt::Write as _;

use quick_xml::escape::escape;

use super::model::*;

/// Serialises `ruleset` as a complete XML document (with declaration and trailing newline).
pub fn write(ruleset: &Ruleset) -> String {
    let mut w = Writer {
        out: String::with_capacity(256 + ruleset.len() * 400),
        indent: 0,
    };
    w.out
        .push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    w.line(&format!(
        "<ruleset xmlns=\"{}\" xmlns:lc=\"{}\" version=\"{}\" state=\"{}\">",
        super::COMMON_POLICY_NS,
        super::LOAD_CONTROL_NS,
        ruleset.version(),
        ruleset.state()
    ));
    w.indent += 1;
    match ruleset.body() {
        Body::Full(rules) => rules.iter().for_each(|r| w.rule(r)),
        Body::Partial(changes) => {
            for change in changes {
                match change {
                    Change::Put(rule) => w.rule(rule),
                    Change::Delete(id) => {
                        w.line(&format!("<rule id=\"{}\">", escape(id.as_str())));
                        w.indent += 1;
                        w.line("<actions/>");
                        w.indent -= 1;
                        w.line("</rule>");
                    }
                }
            }
        }
    }
    w.indent -= 1;
    w.line("</ruleset>");
    w.out
}

struct Writer {
    out: String,
    indent: usize,
}

impl Writer {
    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("  ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// `<open>` … `</close>` around what `inner` writes, one level deeper.
    fn block(&mut self, open: &str, close: &str, inner: impl FnOnce(&mut Self)) {
        self.line(open);
        self.indent += 1;
        inner(self);
        self.indent -= 1;
        self.line(close);
    }

    fn rule(&mut self, rule: &Rule) {
        let open = format!("<rule id=\"{}\">", escape(rule.id.as_str()));
        self.block(&open, "</rule>", |w| {
            w.conditions(&rule.conditions);
            w.block("<actions>", "</actions>", |w| w.accept(&rule.accept));
        });
    }

    fn conditions(&mut self, c: &Conditions) {
        let empty = c.call_identity.is_none()
            && c.method.is_none()
            && c.target_sip_entity.is_none()
            && c.validity.is_none()
            && c.unsupported.is_empty();
        if empty {
            return;
        }
        self.block("<conditions>", "</conditions>", |w| {
            if let Some(ci) = &c.call_identity {
                w.block("<lc:call-identity>", "</lc:call-identity>", |w| {
                    for sip in &ci.sip {
                        w.block("<lc:sip>", "</lc:sip>", |w| {
                            for (field, set) in sip.fields() {
                                let name = field.element();
                                w.block(&format!("<lc:{name}>"), &format!("</lc:{name}>"), |w| {
                                    set.identities.iter().for_each(|i| w.identity(i));
                                });
                            }
                        });
                    }
                });
            }
            if let Some(m) = &c.method {
                w.line(&format!("<method>{}</method>", escape(m.as_str())));
            }
            if let Some(t) = &c.target_sip_entity {
                w.line(&format!(
                    "<lc:target-sip-entity>{}</lc:target-sip-entity>",
                    escape(t.as_str())
                ));
            }
            if let Some(v) = &c.validity {
                w.block("<validity>", "</validity>", |w| {
                    for i in &v.intervals {
                        w.line(&format!("<from>{}</from>", i.from()));
                        w.line(&format!("<until>{}</until>", i.until()));
                    }
                });
            }
            for (n, f) in c.unsupported.iter().enumerate() {
                match f.namespace() {
                    Some(ns) => w.line(&format!(
                        "<x{n}:{} xmlns:x{n}=\"{}\"/>",
                        f.name(),
                        escape(ns)
                    )),
                    None => w.line(&format!("<{} xmlns=\"\"/>", f.name())),
                }
            }
        });
    }

    fn identity(&mut self, identity: &Identity) {
        match identity {
            Identity::One(uri) => self.line(&format!("<one id=\"{}\"/>", escape(uri.as_str()))),
            Identity::Many { domain, except } => {
                let attr = domain
                    .as_ref()
                    .map(|d| format!(" domain=\"{}\"", escape(d.as_str())))
                    .unwrap_or_default();
                let excepts: Vec<String> = except
                    .iter()
                    .map(|e| match e {
                        Except::Domain(d) => format!("<except domain=\"{}\"/>", escape(d.as_str())),
                        Except::Id(u) => format!("<except id=\"{}\"/>", escape(u.as_str())),
                    })
                    .collect();
                self.with_children(&format!("many{attr}"), "many", &excepts);
            }
            Identity::ManyTel { prefix, except } => {
                let excepts: Vec<String> = except
                    .iter()
                    .map(|e| match e {
                        ExceptTel::Prefix(p) => {
                            format!("<except-tel prefix=\"{}\"/>", escape(p.as_str()))
                        }
                        ExceptTel::Id(u) => format!("<except-tel id=\"{}\"/>", escape(u.as_str())),
                    })
                    .collect();
                let open = match prefix {
                    Some(p) => format!("many-tel prefix=\"{}\"", escape(p.as_str())),
                    None => "many-tel".to_owned(),
                };
                self.with_children(&open, "many-tel", &excepts);
            }
        }
    }

    /// `<open/>` when there are no children, else the children inside `<open>`…`</name>`.
    fn with_children(&mut self, open: &str, name: &str, children: &[String]) {
        if children.is_empty() {
            self.line(&format!("<{open}/>"));
        } else {
            self.block(&format!("<{open}>"), &format!("</{name}>"), |w| {
                children.iter().for_each(|c| w.line(c));
            });
        }
    }

    fn accept(&mut self, accept: &Accept) {
        let mut open = format!("<lc:accept alt-action=\"{}\"", accept.alt_action.as_str());
        if let AltAction::Redirect(targets) = &accept.alt_action {
            let joined: Vec<&str> = targets.iter().map(Uri::as_str).collect();
            let _ = write!(open, " alt-target=\"{}\"", escape(joined.join(" ")));
        }
        open.push('>');
        self.block(&open, "</lc:accept>", |w| match accept.limit {
            Limit::Rate(r) => w.line(&format!("<lc:rate>{}</lc:rate>", r.per_second())),
            Limit::Percent(p) => w.line(&format!("<lc:percent>{}</lc:percent>", p.value())),
            Limit::Window(n) => w.line(&format!("<lc:win>{n}</lc:win>")),
        });
    }
}
