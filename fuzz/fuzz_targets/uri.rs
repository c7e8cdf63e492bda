//! Any text as a header value: extracting its URIs, parsing and canonicalising them never
//! panics, the canonical parts are slices of the key's buffer that agree with the key, and
//! canonicalising is deterministic (a reused buffer gives the same result as a fresh one).
#![no_main]

use libfuzzer_sys::fuzz_target;
use loadctl::uri::{canonicalize, header_uris, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut reused = b"left over from an earlier call".to_vec();
    for uri in header_uris(text).take(4).flatten() {
        let Ok(parsed) = parse(uri) else {
            continue;
        };
        let mut fresh = Vec::new();
        let a = canonicalize(parsed, &mut fresh);
        let (key, host, number, sip) =
            (a.key.to_vec(), a.host.map(<[u8]>::to_vec), a.number, a.sip);
        let number = number.map(|n| (n.digits.to_vec(), n.global, n.context.map(<[u8]>::to_vec)));
        let b = canonicalize(parsed, &mut reused);
        assert_eq!(b.key, &key[..]);
        assert_eq!(b.host.map(<[u8]>::to_vec), host);
        assert_eq!(
            b.number
                .map(|n| (n.digits.to_vec(), n.global, n.context.map(<[u8]>::to_vec))),
            number
        );
        assert_eq!(b.sip, sip);
        if let Some(n) = b.number {
            assert!(
                n.digits
                    .iter()
                    .all(|d| !matches!(d, b'-' | b'.' | b'(' | b')'))
            );
        }
    }
});
