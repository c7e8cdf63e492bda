//! Any bytes as a policy document: never a panic; a document that reads writes back to text
//! that reads to the same ruleset.
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadctl::policy::{Limits, read, write};

fuzz_target!(|data: &[u8]| {
    if let Ok(doc) = read(data, &Limits::default()) {
        let text = write(&doc.ruleset);
        let again = read(text.as_bytes(), &Limits::default())
            .unwrap_or_else(|e| panic!("written document does not read back: {e}\n{text}"));
        assert_eq!(again.ruleset, doc.ruleset, "round trip changed the ruleset");
    }
});
