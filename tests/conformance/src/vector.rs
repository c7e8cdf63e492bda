//! The vector file format: parsing only (see the crate's README.md for the format).
//!
//! A file holds vectors; a vector is a `=== name` line, `key: value` lines (a value continues on
//! following lines that start with white space), then sections, each a `--- name args` line and
//! the lines up to the next section or vector. Lines starting with `#` are comments anywhere.

use std::collections::BTreeMap;

/// One section of a vector: its name, the rest of its header line, and its lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The word after `---`.
    pub name: String,
    /// The rest of the `---` line, trimmed.
    pub args: String,
    /// The content lines (comments removed, trailing empty lines dropped).
    pub lines: Vec<String>,
    /// 1-based line number of the `---` line in the file.
    pub line: usize,
}

impl Section {
    /// The content joined with `\n`.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

/// One vector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vector {
    /// The file it came from (its name only).
    pub file: String,
    /// The name after `===`.
    pub name: String,
    /// 1-based line number of the `===` line.
    pub line: usize,
    /// The `key: value` lines.
    pub keys: BTreeMap<String, String>,
    /// The sections in order.
    pub sections: Vec<Section>,
}

impl Vector {
    /// A key's value.
    pub fn key(&self, k: &str) -> Option<&str> {
        self.keys.get(k).map(String::as_str)
    }

    /// The citation: `rfc` and `quote` (every vector must have both).
    pub fn citation(&self) -> String {
        format!(
            "{}: \"{}\"",
            self.key("rfc").unwrap_or("(no rfc key)"),
            self.key("quote").unwrap_or("(no quote key)")
        )
    }

    /// The first section with this name.
    pub fn section(&self, name: &str) -> Option<&Section> {
        self.sections.iter().find(|s| s.name == name)
    }
}

/// Parses a vector file. `file` is its name, for reports.
pub fn parse(file: &str, text: &str) -> Result<Vec<Vector>, String> {
    let mut out: Vec<Vector> = Vec::new();
    let mut last_key: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        if raw.starts_with('#') {
            continue;
        }
        if let Some(name) = raw.strip_prefix("===") {
            let name = name.trim();
            if name.is_empty() {
                return Err(format!("{file}:{n}: a vector needs a name after ==="));
            }
            out.push(Vector {
                file: file.to_owned(),
                name: name.to_owned(),
                line: n,
                keys: BTreeMap::new(),
                sections: Vec::new(),
            });
            last_key = None;
            continue;
        }
        let Some(v) = out.last_mut() else {
            if raw.trim().is_empty() {
                continue;
            }
            return Err(format!("{file}:{n}: text before the first === vector line"));
        };
        if let Some(rest) = raw.strip_prefix("---") {
            let rest = rest.trim();
            let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            if name.is_empty() {
                return Err(format!("{file}:{n}: a section needs a name after ---"));
            }
            v.sections.push(Section {
                name: name.to_owned(),
                args: args.trim().to_owned(),
                lines: Vec::new(),
                line: n,
            });
            continue;
        }
        if let Some(s) = v.sections.last_mut() {
            s.lines.push(raw.to_owned());
            continue;
        }
        // The vector's keys.
        if raw.trim().is_empty() {
            last_key = None;
            continue;
        }
        if raw.starts_with([' ', '\t']) {
            let Some(k) = &last_key else {
                return Err(format!("{file}:{n}: a continuation line without a key"));
            };
            let value = v.keys.entry(k.clone()).or_default();
            value.push(' ');
            value.push_str(raw.trim());
            continue;
        }
        let Some((k, value)) = raw.split_once(':') else {
            return Err(format!(
                "{file}:{n}: expected `key: value`, a --- section or ==="
            ));
        };
        let k = k.trim().to_ascii_lowercase();
        if v.keys.insert(k.clone(), value.trim().to_owned()).is_some() {
            return Err(format!("{file}:{n}: key {k:?} given twice"));
        }
        last_key = Some(k);
    }
    for v in &mut out {
        for s in &mut v.sections {
            while s.lines.last().is_some_and(|l| l.trim().is_empty()) {
                s.lines.pop();
            }
        }
        for required in ["kind", "rfc", "quote"] {
            if v.key(required).is_none_or(str::is_empty) {
                return Err(format!(
                    "{file}:{}: vector {:?} lacks the key {required:?}",
                    v.line, v.name
                ));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_continuations_sections_and_comments() {
        let text = "# file comment\n=== one\nkind: document\nrfc: RFC 7200 §6\nquote: Versions MUST\n  be representable\n--- document\n<ruleset/>\n# inside\n\n=== two\nkind: classify\nrfc: X\nquote: Y\n--- policy a b\nx\n";
        let v = parse("f.vec", text).expect("parses");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].key("quote"), Some("Versions MUST be representable"));
        assert_eq!(v[0].sections[0].lines, ["<ruleset/>"]);
        assert_eq!(v[1].sections[0].args, "a b");
        assert!(
            parse("f", "=== x\nkind: a\n").is_err(),
            "rfc and quote are required"
        );
        assert!(parse("f", "junk\n").is_err());
    }
}
