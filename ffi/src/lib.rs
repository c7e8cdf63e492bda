//! # libloadctl — the C ABI of loadctl
//!
//! Conventions (after rustls-ffi):
//! - Every name starts with `lc_`. Handles (`lc_engine`, `lc_worker`) are opaque and come in
//!   `_new`/`_attach` … `_free` pairs; `_free(NULL)` does nothing.
//! - Fallible calls return an [`lc_result`]; outputs are the last parameters and are written only
//!   on success (the few exceptions say so). Every pointer is checked for NULL.
//! - Every exported function runs inside a panic boundary: no unwinding crosses into C; a panic
//!   is reported as `LC_RESULT_PANIC`.
//! - Strings are pointer + length ([`lc_str`]); SIP bytes need not be UTF-8. A `const` handle
//!   argument means the call does not change it.
//! - An `lc_engine` may be used from any thread. An `lc_worker` is used by one thread at a time
//!   (typically one per worker thread or process). `lc_scheduler` and `lc_detector` may be used
//!   from any number of threads at once.
//!
//! Modules: [`engine`] (configuration, policies, stats), [`worker`] (classification),
//! [`event`] (the load-control event package: subscriber and notifier handles), [`prsm`]
//! (overload-safe scheduling: the two-queue scheduler and the retransmission detector).

#![warn(missing_docs)]
#![allow(non_camel_case_types)]

pub mod cells;
pub mod engine;
pub mod event;
pub mod prsm;
pub mod wire;
pub mod worker;

use std::ffi::c_char;

/// Result codes. Codes are never reused; bands: 0–99 general, 100–199 policy, 200–299 runtime,
/// 300–399 raw SIP, 400–499 scheduling (PRSM), 500–599 shared memory (cell tables).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum lc_result {
    /// Success.
    Ok = 0,
    /// A required pointer was NULL.
    NullParameter = 1,
    /// A bug: Rust code panicked (nothing unwound into C).
    Panic = 2,
    /// A string that must be UTF-8 is not.
    InvalidUtf8 = 3,
    /// The caller's buffer is too small (the needed size is reported where documented).
    BufferTooSmall = 4,
    /// An argument is out of range.
    InvalidArgument = 5,
    /// Nothing to return (no message to send, no event, no timer).
    Empty = 6,
    /// The policy document does not validate (`lc_policy_check` says why).
    InvalidPolicy = 100,
    /// `lc_engine_publish` was given a partial document.
    NotFull = 101,
    /// A partial document does not carry the current version + 1: re-SUBSCRIBE.
    VersionGap = 102,
    /// A partial document for a source without a policy.
    NoBase = 103,
    /// A partial document deletes a rule the source does not have.
    UnknownRule = 104,
    /// All sources together would exceed the rule limit.
    TooManyRules = 105,
    /// No policy from that source.
    UnknownSource = 106,
    /// The worker thread could not be pinned to the core asked for.
    PinFailed = 200,
    /// The SIP message ends inside its header section.
    SipTruncated = 300,
    /// The SIP request line is malformed.
    SipBadRequestLine = 301,
    /// A SIP response where a request was expected.
    SipNotARequest = 302,
    /// A malformed SIP header line.
    SipBadHeader = 303,
    /// From, To, Call-ID or CSeq is missing.
    SipMissingHeader = 304,
    /// A malformed CSeq header.
    SipBadCseq = 305,
    /// The SIP request has no Via header (its transaction cannot be identified).
    SipMissingVia = 306,
    /// The top Via header is not `SIP/2.0/transport sent-by;params`.
    SipBadVia = 307,
    /// A SIP message this handle does not take: another method than SUBSCRIBE / NOTIFY, or a
    /// message meant for the other end of the package.
    SipOtherMessage = 308,
    /// The scheduler queue for that class is full: the item was not queued (tail drop).
    QueueFull = 400,
    /// The region is not a usable cell table: NULL, not 64-byte aligned, smaller than two
    /// slots, or (when attaching) not formatted by `lc_cell_table_format` with this size.
    CellTableInvalid = 500,
    /// The shared cell table has no free cell for a new rule: the policy was not published.
    CellTableFull = 501,
    /// The shared cell table's lock stayed held for 2 s (a process died holding it?).
    CellTableBusy = 502,
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

/// Runs `body` inside a panic boundary, turning a panic into `LC_RESULT_PANIC`.
fn boundary(body: impl FnOnce() -> lc_result) -> lc_result {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(lc_result::Panic)
}

/// A static, NUL-terminated description of a result code.
#[unsafe(no_mangle)]
pub extern "C" fn lc_result_text(result: lc_result) -> *const c_char {
    let text: &'static [u8] = match result {
        lc_result::Ok => b"ok\0",
        lc_result::NullParameter => b"a required pointer was NULL\0",
        lc_result::Panic => b"internal error (panic caught at the C boundary)\0",
        lc_result::InvalidUtf8 => b"a string that must be UTF-8 is not\0",
        lc_result::BufferTooSmall => b"the buffer is too small\0",
        lc_result::InvalidArgument => b"an argument is out of range\0",
        lc_result::Empty => b"nothing to return\0",
        lc_result::InvalidPolicy => b"the policy document does not validate\0",
        lc_result::NotFull => b"a full policy document was expected\0",
        lc_result::VersionGap => {
            b"the partial document does not follow the current version: re-SUBSCRIBE\0"
        }
        lc_result::NoBase => b"a partial document for a source without a policy\0",
        lc_result::UnknownRule => b"the partial document deletes an unknown rule\0",
        lc_result::TooManyRules => b"too many rules\0",
        lc_result::UnknownSource => b"no policy from that source\0",
        lc_result::PinFailed => b"the thread could not be pinned to that core\0",
        lc_result::SipTruncated => b"the SIP message ends inside its header section\0",
        lc_result::SipBadRequestLine => b"malformed SIP request line\0",
        lc_result::SipNotARequest => b"a SIP response, not a request\0",
        lc_result::SipBadHeader => b"malformed SIP header line\0",
        lc_result::SipMissingHeader => b"a SIP request without From, To, Call-ID or CSeq\0",
        lc_result::SipBadCseq => b"malformed CSeq header\0",
        lc_result::SipMissingVia => b"a SIP request without a Via header\0",
        lc_result::SipBadVia => b"malformed top Via header\0",
        lc_result::SipOtherMessage => b"a SIP message this handle does not take\0",
        lc_result::QueueFull => b"the scheduler queue is full (tail drop)\0",
        lc_result::CellTableInvalid => {
            b"the region is not a usable cell table (NULL, misaligned, too small or not formatted)\0"
        }
        lc_result::CellTableFull => b"the shared cell table has no free cell for a new rule\0",
        lc_result::CellTableBusy => {
            b"the shared cell table's lock stayed held (did a process die holding it?)\0"
        }
    };
    text.as_ptr().cast()
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

/// Copies `text` into a caller buffer: writes `*written` (the full length, also when the
/// buffer is too small) and returns `BufferTooSmall` when `text` does not fit.
///
/// # Safety
/// `buf` must point to `cap` writable bytes (or be NULL with `cap` 0); `written` must be valid.
unsafe fn copy_out(text: &[u8], buf: *mut u8, cap: usize, written: *mut usize) -> lc_result {
    // SAFETY: the caller checked `written` for NULL and promises it is writable.
    unsafe { *written = text.len() };
    if text.len() > cap || (buf.is_null() && !text.is_empty()) {
        return lc_result::BufferTooSmall;
    }
    if !text.is_empty() {
        // SAFETY: `buf` has room for `cap` ≥ len bytes and cannot overlap our own string.
        unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), buf, text.len()) };
    }
    lc_result::Ok
}

#[cfg(test)]
mod tests {
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
