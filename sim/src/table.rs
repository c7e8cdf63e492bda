//! CSV output: a row per serialisable value, its fields as columns in declaration order
//! (RFC 4180 quoting), so a field added to a result type becomes a column by itself.

/// A JSON object's members in the order they were written (`serde_json::Value` sorts them).
struct Fields(Vec<(String, serde_json::Value)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Members;
        impl<'de> serde::de::Visitor<'de> for Members {
            type Value = Fields;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Fields, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry()? {
                    members.push(member);
                }
                Ok(Fields(members))
            }
        }
        d.deserialize_map(Members)
    }
}

/// Every field of `m`, named, in declaration order (through its `Serialize`, so a field added
/// to [`Metrics`] gets a column without touching this module).
pub(crate) fn fields(
    m: &impl serde::Serialize,
) -> Result<Vec<(String, serde_json::Value)>, String> {
    let json = serde_json::to_string(m).map_err(|e| format!("metrics to CSV: {e}"))?;
    let Fields(members) =
        serde_json::from_str(&json).map_err(|e| format!("metrics to CSV: {e}"))?;
    Ok(members)
}

/// One CSV cell (RFC 4180 quoting when needed).
pub(crate) fn cell(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// A CSV table: a header of `lead` (when given) and every field of `T` in declaration order,
/// then a row per item: its lead cell (when `lead` is given), then its fields.
pub(crate) fn csv_table<'a, T: serde::Serialize + Default + 'a>(
    lead: Option<&str>,
    rows: impl IntoIterator<Item = (String, &'a T)>,
) -> Result<String, String> {
    let header = fields(&T::default())?;
    let mut text = String::new();
    let names = lead
        .into_iter()
        .chain(header.iter().map(|(n, _)| n.as_str()));
    text.push_str(&names.map(cell).collect::<Vec<_>>().join(","));
    text.push('\n');
    for (first, row) in rows {
        let mut cells: Vec<String> = lead.map(|_| cell(&first)).into_iter().collect();
        for (_, value) in fields(row)? {
            cells.push(match value {
                serde_json::Value::String(s) => cell(&s),
                serde_json::Value::Null => String::new(),
                v => cell(&v.to_string()),
            });
        }
        text.push_str(&cells.join(","));
        text.push('\n');
    }
    Ok(text)
}
