//! # libloadctl — the C ABI of loadctl
//!
//! Conventions (after rustls-ffi):
//! - Every name starts with `lc_`. Handles (`lc_engine`, `lc_worker`) are opaque and come in
//!   `_new`/`_attach` … `_free` pairs; `_free(NULL)` does nothing.
//! - Fallible calls return an [`lc_result`]; outputs are the last parameters and are written only
//!   on success (the few exceptions say so). Every pointer is checked for NULL.
//! - **Integers, checked.** Every enum-like value (results, transports, methods, verdicts,
//!   event kinds, classes, disciplines, flags) crosses the boundary as a fixed-width integer
//!   type (`typedef uint32_t lc_transport;`) with `#define`d values, never as a C or Rust
//!   `enum`: structs do not depend on the C compiler's enum size, and no value a C caller can
//!   pass is undefined behaviour on the Rust side. Every value passed in — as a parameter or a
//!   struct field — is checked before anything happens: an undeclared value (or flag bit) is
//!   `LC_RESULT_INVALID_ARGUMENT`, and nothing changes and no output is written.
//!   `lc_result_text` takes any integer (`"unknown result code"` for an undeclared one).
//!   Values the library writes are always declared ones; switch on them with a `default`.
//!   The helpers that do the checking are in one place (`abi.rs`, after rustls-ffi's cast and
//!   try macros).
//! - Every exported function runs inside a panic boundary: no unwinding crosses into C; a panic
//!   is reported as `LC_RESULT_PANIC`. The boundary also records every failing call's message
//!   as the calling thread's last error (`lc_last_error`).
//! - Strings are pointer + length ([`lc_str`]); SIP bytes need not be UTF-8. A `const` handle
//!   argument means the call does not change it.
//! - An `lc_engine` may be used from any thread. An `lc_worker` is used by one thread at a time
//!   (typically one per worker thread or process). `lc_scheduler`, `lc_detector`,
//!   `lc_oc_client` and `lc_oc_server` may be used from any number of threads at once; an
//!   `lc_oc_shard` by one thread at a time. An `lc_scanned_sip` is only read by the calls that
//!   take it, from any number of threads at once.
//!
//! Modules: [`engine`] (configuration, policies, stats), [`worker`] (classification),
//! [`event`] (the load-control event package: subscriber and notifier handles), [`prsm`]
//! (overload-safe scheduling: the two-queue scheduler and the retransmission detector),
//! [`overload`] (feedback overload control, RFC 7339 / RFC 7415: client and server),
//! [`scanned`] (a raw request scanned once for the detector, the category and classification),
//! [`error`] (`lc_last_error`: the calling thread's message for its last failing call).

#![warn(missing_docs)]
#![allow(non_camel_case_types)]

#[macro_use]
mod abi;
pub mod cells;
pub mod engine;
pub mod error;
pub mod event;
pub mod overload;
pub mod prsm;
pub mod scanned;
pub mod wire;
pub mod worker;

use std::ffi::c_char;

use abi::{FromC, Out, OutBuf};

/// A result code: one of the `LC_RESULT_*` values. Codes are never reused; bands: 0–99
/// general, 100–199 policy, 200–299 runtime, 300–399 raw SIP, 400–499 scheduling (PRSM),
/// 500–599 shared memory (cell tables). `lc_result_text` describes any value, declared or not.
pub type lc_result = u32;

/// Success.
pub const LC_RESULT_OK: lc_result = 0;
/// A required pointer was NULL.
pub const LC_RESULT_NULL_PARAMETER: lc_result = 1;
/// A bug: Rust code panicked (nothing unwound into C).
pub const LC_RESULT_PANIC: lc_result = 2;
/// A string that must be UTF-8 is not.
pub const LC_RESULT_INVALID_UTF8: lc_result = 3;
/// The caller's buffer is too small (the needed size is reported where documented).
pub const LC_RESULT_BUFFER_TOO_SMALL: lc_result = 4;
/// An argument is out of range.
pub const LC_RESULT_INVALID_ARGUMENT: lc_result = 5;
/// Nothing to return (no message to send, no event, no timer).
pub const LC_RESULT_EMPTY: lc_result = 6;
/// The policy document does not validate (`lc_policy_check` says why).
pub const LC_RESULT_INVALID_POLICY: lc_result = 100;
/// `lc_engine_publish` was given a partial document.
pub const LC_RESULT_NOT_FULL: lc_result = 101;
/// A partial document does not carry the current version + 1: re-SUBSCRIBE.
pub const LC_RESULT_VERSION_GAP: lc_result = 102;
/// A partial document for a source without a policy.
pub const LC_RESULT_NO_BASE: lc_result = 103;
/// A partial document deletes a rule the source does not have.
pub const LC_RESULT_UNKNOWN_RULE: lc_result = 104;
/// All sources together would exceed the rule limit.
pub const LC_RESULT_TOO_MANY_RULES: lc_result = 105;
/// No policy from that source.
pub const LC_RESULT_UNKNOWN_SOURCE: lc_result = 106;
/// The worker thread could not be pinned to the core asked for.
pub const LC_RESULT_PIN_FAILED: lc_result = 200;
/// The SIP message ends inside its header section.
pub const LC_RESULT_SIP_TRUNCATED: lc_result = 300;
/// The SIP request line is malformed.
pub const LC_RESULT_SIP_BAD_REQUEST_LINE: lc_result = 301;
/// A SIP response where a request was expected.
pub const LC_RESULT_SIP_NOT_A_REQUEST: lc_result = 302;
/// A malformed SIP header line.
pub const LC_RESULT_SIP_BAD_HEADER: lc_result = 303;
/// From, To, Call-ID or CSeq is missing.
pub const LC_RESULT_SIP_MISSING_HEADER: lc_result = 304;
/// A malformed CSeq header.
pub const LC_RESULT_SIP_BAD_CSEQ: lc_result = 305;
/// The SIP request has no Via header (its transaction cannot be identified).
pub const LC_RESULT_SIP_MISSING_VIA: lc_result = 306;
/// The top Via header is not `SIP/2.0/transport sent-by;params`.
pub const LC_RESULT_SIP_BAD_VIA: lc_result = 307;
/// A SIP message this handle does not take: another method than SUBSCRIBE / NOTIFY, or a
/// message meant for the other end of the package.
pub const LC_RESULT_SIP_OTHER_MESSAGE: lc_result = 308;
/// The scheduler queue for that class is full: the item was not queued (tail drop).
pub const LC_RESULT_QUEUE_FULL: lc_result = 400;
/// The region is not a usable cell table: NULL, not 64-byte aligned, smaller than two
/// slots, or (when attaching) not formatted by `lc_cell_table_format` with this size.
pub const LC_RESULT_CELL_TABLE_INVALID: lc_result = 500;
/// The shared cell table has no free cell for a new rule: the policy was not published.
pub const LC_RESULT_CELL_TABLE_FULL: lc_result = 501;
/// The shared cell table's lock stayed held for 2 s (a process died holding it?).
pub const LC_RESULT_CELL_TABLE_BUSY: lc_result = 502;
/// Overload-control feedback in a Via breaks RFC 7339 (grammar, a loss above 100, several or
/// unoffered algorithms, a parameter twice): the values in force are unchanged.
pub const LC_RESULT_OC_BAD_FEEDBACK: lc_result = 600;
/// The overload-control client's hop table has no room for another next hop.
pub const LC_RESULT_OC_TABLE_FULL: lc_result = 601;

c_enum! {
    /// The result codes inside the crate (`Code::X.to_c()` is `LC_RESULT_X`).
    pub(crate) enum Code: lc_result {
        Ok = LC_RESULT_OK,
        NullParameter = LC_RESULT_NULL_PARAMETER,
        Panic = LC_RESULT_PANIC,
        InvalidUtf8 = LC_RESULT_INVALID_UTF8,
        BufferTooSmall = LC_RESULT_BUFFER_TOO_SMALL,
        InvalidArgument = LC_RESULT_INVALID_ARGUMENT,
        Empty = LC_RESULT_EMPTY,
        InvalidPolicy = LC_RESULT_INVALID_POLICY,
        NotFull = LC_RESULT_NOT_FULL,
        VersionGap = LC_RESULT_VERSION_GAP,
        NoBase = LC_RESULT_NO_BASE,
        UnknownRule = LC_RESULT_UNKNOWN_RULE,
        TooManyRules = LC_RESULT_TOO_MANY_RULES,
        UnknownSource = LC_RESULT_UNKNOWN_SOURCE,
        PinFailed = LC_RESULT_PIN_FAILED,
        SipTruncated = LC_RESULT_SIP_TRUNCATED,
        SipBadRequestLine = LC_RESULT_SIP_BAD_REQUEST_LINE,
        SipNotARequest = LC_RESULT_SIP_NOT_A_REQUEST,
        SipBadHeader = LC_RESULT_SIP_BAD_HEADER,
        SipMissingHeader = LC_RESULT_SIP_MISSING_HEADER,
        SipBadCseq = LC_RESULT_SIP_BAD_CSEQ,
        SipMissingVia = LC_RESULT_SIP_MISSING_VIA,
        SipBadVia = LC_RESULT_SIP_BAD_VIA,
        SipOtherMessage = LC_RESULT_SIP_OTHER_MESSAGE,
        QueueFull = LC_RESULT_QUEUE_FULL,
        CellTableInvalid = LC_RESULT_CELL_TABLE_INVALID,
        CellTableFull = LC_RESULT_CELL_TABLE_FULL,
        CellTableBusy = LC_RESULT_CELL_TABLE_BUSY,
        OcBadFeedback = LC_RESULT_OC_BAD_FEEDBACK,
        OcTableFull = LC_RESULT_OC_TABLE_FULL,
    }
}

/// A byte string borrowed from its owner: `ptr` NULL (and `len` 0) means absent.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_str {
    /// First byte, or NULL.
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
}

impl lc_str {
    /// The absent string.
    pub(crate) const NONE: lc_str = lc_str {
        ptr: std::ptr::null(),
        len: 0,
    };

    /// A static string.
    pub(crate) fn from_static(s: &'static str) -> Self {
        Self::from_bytes(s.as_bytes())
    }

    fn from_bytes(b: &[u8]) -> Self {
        lc_str {
            ptr: b.as_ptr(),
            len: b.len(),
        }
    }

    /// The bytes, or `None` when absent.
    ///
    /// # Safety
    /// `ptr` must be NULL or point to `len` readable bytes that outlive the returned slice.
    unsafe fn bytes<'a>(self) -> Option<&'a [u8]> {
        if self.ptr.is_null() {
            None
        } else {
            // SAFETY: non-null, and the caller promises `len` readable bytes for 'a.
            Some(unsafe { std::slice::from_raw_parts(self.ptr, self.len) })
        }
    }
}

/// Runs `body` inside a panic boundary, turning a panic into `LC_RESULT_PANIC`: every exported
/// function's body runs in one (`lc_last_error` in its own, which does not record). Bodies
/// return a [`Code`], converted here to the C integer. A code other than `Ok` becomes the
/// thread's last error ([`error`]): the body's detail, else the code's text, else (a panic)
/// the panic's message when it is a string.
fn boundary(body: impl FnOnce() -> Code) -> lc_result {
    let (code, panic_text) = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(code) => (code, None),
        Err(payload) => (Code::Panic, error::panic_text(payload.as_ref())),
    };
    error::finish(code, panic_text);
    code.to_c()
}

impl Code {
    /// The static, NUL-terminated description `lc_result_text` returns.
    fn text(self) -> &'static [u8] {
        match self {
            Code::Ok => b"ok\0",
            Code::NullParameter => b"a required pointer was NULL\0",
            Code::Panic => b"internal error (panic caught at the C boundary)\0",
            Code::InvalidUtf8 => b"a string that must be UTF-8 is not\0",
            Code::BufferTooSmall => b"the buffer is too small\0",
            Code::InvalidArgument => b"an argument is out of range\0",
            Code::Empty => b"nothing to return\0",
            Code::InvalidPolicy => b"the policy document does not validate\0",
            Code::NotFull => b"a full policy document was expected\0",
            Code::VersionGap => {
                b"the partial document does not follow the current version: re-SUBSCRIBE\0"
            }
            Code::NoBase => b"a partial document for a source without a policy\0",
            Code::UnknownRule => b"the partial document deletes an unknown rule\0",
            Code::TooManyRules => b"too many rules\0",
            Code::UnknownSource => b"no policy from that source\0",
            Code::PinFailed => b"the thread could not be pinned to that core\0",
            Code::SipTruncated => b"the SIP message ends inside its header section\0",
            Code::SipBadRequestLine => b"malformed SIP request line\0",
            Code::SipNotARequest => b"a SIP response, not a request\0",
            Code::SipBadHeader => b"malformed SIP header line\0",
            Code::SipMissingHeader => b"a SIP request without From, To, Call-ID or CSeq\0",
            Code::SipBadCseq => b"malformed CSeq header\0",
            Code::SipMissingVia => b"a SIP request without a Via header\0",
            Code::SipBadVia => b"malformed top Via header\0",
            Code::SipOtherMessage => b"a SIP message this handle does not take\0",
            Code::QueueFull => b"the scheduler queue is full (tail drop)\0",
            Code::CellTableInvalid => {
                b"the region is not a usable cell table (NULL, misaligned, too small or not formatted)\0"
            }
            Code::CellTableFull => b"the shared cell table has no free cell for a new rule\0",
            Code::CellTableBusy => {
                b"the shared cell table's lock stayed held (did a process die holding it?)\0"
            }
            Code::OcBadFeedback => b"overload-control feedback breaks RFC 7339\0",
            Code::OcTableFull => b"the overload-control hop table is full\0",
        }
    }
}

/// What `lc_result_text` says about a value that is no `LC_RESULT_*` code.
const UNKNOWN_RESULT_TEXT: &[u8] = b"unknown result code\0";

/// A static, NUL-terminated description of a result code. Total: any value a caller passes,
/// declared or not, gets a text (`"unknown result code"` for a value that is no
/// `LC_RESULT_*`).
#[unsafe(no_mangle)]
pub extern "C" fn lc_result_text(result: lc_result) -> *const c_char {
    Code::from_c(result)
        .map_or(UNKNOWN_RESULT_TEXT, Code::text)
        .as_ptr()
        .cast()
}

/// Frees a handle made by `Box::into_raw` (the body of every `_free`); NULL is a no-op.
///
/// # Safety
/// `handle` must be NULL or come from `Box::into_raw` of this type, and be freed only once.
unsafe fn free_box<T>(handle: *mut T) -> Code {
    if !handle.is_null() {
        // SAFETY: by the caller's contract.
        drop(unsafe { Box::from_raw(handle) });
    }
    Code::Ok
}

/// The library version (`MAJOR.MINOR.PATCH`), static and NUL-terminated; equals
/// `LC_VERSION` in the header this library was built with.
#[unsafe(no_mangle)]
pub extern "C" fn lc_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Parses a decimal version component at compile time (Cargo sets `CARGO_PKG_VERSION_*`).
const fn version_component(digits: &str) -> u32 {
    let bytes = digits.as_bytes();
    assert!(!bytes.is_empty(), "empty version component");
    let mut value = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        assert!(
            bytes[i].is_ascii_digit(),
            "version component is not decimal"
        );
        value = value * 10 + (bytes[i] - b'0') as u32;
        i += 1;
    }
    value
}

/// `MAJOR × 10000 + MINOR × 100 + PATCH` of this crate; the build fails when MINOR or PATCH
/// reaches 100 (the number would be ambiguous) or MAJOR does not fit.
const VERSION_NUMBER: u32 = {
    let major = version_component(env!("CARGO_PKG_VERSION_MAJOR"));
    let minor = version_component(env!("CARGO_PKG_VERSION_MINOR"));
    let patch = version_component(env!("CARGO_PKG_VERSION_PATCH"));
    assert!(
        minor < 100 && patch < 100,
        "lc_version_number needs MINOR and PATCH below 100"
    );
    assert!(
        major <= 429_495,
        "lc_version_number needs MAJOR × 10000 to fit in 32 bits"
    );
    major * 10_000 + minor * 100 + patch
};

/// The library version as one number, `MAJOR × 10000 + MINOR × 100 + PATCH` (0.1.0 is 100):
/// the same formula as `LC_VERSION_NUMBER` in the header. Compare the two to detect, at run
/// time, a shared library older than the header a program was built with
/// (`lc_version_number() < LC_VERSION_NUMBER`). Cannot fail.
#[unsafe(no_mangle)]
pub extern "C" fn lc_version_number() -> u32 {
    VERSION_NUMBER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_codes_round_trip_and_nothing_else_is_one() {
        let mut declared = 0;
        for v in (0..=1000).chain([99_999, 0x8000_0000, u32::MAX]) {
            match Code::from_c(v) {
                Some(code) => {
                    declared += 1;
                    assert_eq!(code.to_c(), v);
                    assert_ne!(code.text(), UNKNOWN_RESULT_TEXT);
                }
                // SAFETY: lc_result_text returns a static NUL-terminated string.
                None => assert_eq!(
                    unsafe { std::ffi::CStr::from_ptr(lc_result_text(v)) }.to_bytes_with_nul(),
                    UNKNOWN_RESULT_TEXT
                ),
            }
        }
        assert_eq!(
            declared, 30,
            "a code was added: add it to ffi/tests/test_abi_values.c"
        );
    }

    /// The version macros are typed into ffi/cbindgen.toml (cbindgen cannot read Cargo's
    /// version): this test is what keeps them equal to Cargo.toml's `version`.
    #[test]
    fn header_version_macros_match_the_crate() {
        let header = include_str!("../../include/loadctl.h");
        let expected = [
            format!("#define LC_VERSION \"{}\"\n", env!("CARGO_PKG_VERSION")),
            format!(
                "#define LC_VERSION_MAJOR {}\n",
                env!("CARGO_PKG_VERSION_MAJOR")
            ),
            format!(
                "#define LC_VERSION_MINOR {}\n",
                env!("CARGO_PKG_VERSION_MINOR")
            ),
            format!(
                "#define LC_VERSION_PATCH {}\n",
                env!("CARGO_PKG_VERSION_PATCH")
            ),
            "#define LC_VERSION_NUMBER (LC_VERSION_MAJOR * 10000 + LC_VERSION_MINOR * 100 + \
             LC_VERSION_PATCH)\n"
                .to_string(),
        ];
        for line in &expected {
            assert!(
                header.contains(line.as_str()),
                "include/loadctl.h lacks {}: update ffi/cbindgen.toml, then `make header`",
                line.trim_end()
            );
        }
    }

    #[test]
    fn version_number_follows_the_crate_version() {
        let number = |digits: &str| -> u32 {
            digits
                .parse()
                .expect("Cargo's version components are decimal")
        };
        let expected = number(env!("CARGO_PKG_VERSION_MAJOR")) * 10_000
            + number(env!("CARGO_PKG_VERSION_MINOR")) * 100
            + number(env!("CARGO_PKG_VERSION_PATCH"));
        assert_eq!(super::lc_version_number(), expected);
        assert_eq!(super::version_component("0"), 0);
        assert_eq!(super::version_component("42"), 42);
        // SAFETY: lc_version returns a static NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(super::lc_version()) };
        assert_eq!(text.to_str(), Ok(env!("CARGO_PKG_VERSION")));
    }
}
