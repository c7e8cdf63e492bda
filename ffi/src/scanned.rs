//! `lc_scanned_sip`: a raw SIP request scanned once (`lc_sip_scan`) for every call that reads
//! it — the retransmission detector (`lc_detector_observe_scanned`,
//! `lc_detector_forget_scanned`), overload control's category (`lc_oc_category_scanned`) and
//! classification (`lc_classify_scanned`) — where each `*_sip` call scans the message again.
//!
//! The struct is the caller's, fixed-size and opaque, so it lives on the stack and nothing is
//! allocated. `lc_sip_scan` writes a `Scan` into it (the scanner's fields and the From and To
//! URIs, all slices of the caller's message) behind a tag word; every call that reads it checks
//! the tag first, so a zeroed struct, or one whose scan failed, is an error and never read as a
//! scan. The slices borrow the caller's message: it must stay unchanged and readable for as
//! long as the scan is used, which the header says and nothing here can check.

use loadctl::runtime::{Request, Time, Transport};
use loadctl::sip::{self, SipRequest};

use crate::worker::sip_error_detail;
use crate::{Code, boundary, lc_result};

/// A raw SIP request scanned by `lc_sip_scan`, for `lc_detector_observe_scanned`,
/// `lc_detector_forget_scanned`, `lc_oc_category_scanned` and `lc_classify_scanned`. The
/// caller owns it (on the stack is fine: 512 bytes, no allocation, nothing to free); its
/// contents are private: fill it only with `lc_sip_scan`, never write into it. A copy (`=` or
/// `memcpy`) is as good as the original.
///
/// **It borrows the message.** The scan points into the `msg` bytes given to `lc_sip_scan`:
/// they must stay unchanged and readable until the last call that uses the scan (or a copy of
/// it) has returned. Changing, reusing or freeing them first is undefined behaviour, as a
/// dangling pointer would be; scan the new message instead.
///
/// **Checked before use.** A struct that is zeroed, or was filled by a failed `lc_sip_scan`,
/// is refused by every call with `LC_RESULT_INVALID_ARGUMENT` (naming it in `lc_last_error`),
/// never read as a scan. Uninitialised memory is a caller error that is refused the same way as
/// long as its first 8 bytes do not hold the tag a successful scan writes — which memory left
/// over from an earlier scan of another message does: zero it (`= {0}`) where that may happen.
///
/// Read-only for the calls that take it: any number of threads may use one scan at once.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lc_scanned_sip {
    /// Private: written by `lc_sip_scan`, read by the calls that take the scan.
    pub opaque: [u64; 64],
}

/// A scanned request as the calls read it: what the detector keys on, and what overload
/// control's category and classification build their [`Request`] from. Both of those need the
/// From and To URIs, so they are found once, here.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Scan<'a> {
    /// The scanner's fields.
    pub(crate) sip: SipRequest<'a>,
    from: Option<&'a str>,
    to: Option<&'a str>,
}

impl<'a> Scan<'a> {
    /// The scan of a request the scanner read.
    pub(crate) fn new(sip: SipRequest<'a>) -> Self {
        Scan {
            sip,
            from: sip::uri_part(sip.from),
            to: sip::uri_part(sip.to),
        }
    }

    /// The request [`Request::from_sip`] makes of it.
    pub(crate) fn request(&self, transport: Transport, time: Option<Time>) -> Request<'a> {
        Request::from_sip_with_uris(&self.sip, self.from, self.to, transport, time)
    }
}

/// What `lc_sip_scan` writes at the start of an `lc_scanned_sip`: the tag, then the scan.
#[repr(C)]
#[derive(Clone, Copy)]
struct Stored<'a> {
    tag: u64,
    scan: Scan<'a>,
}

/// The tag of a successful scan of this layout ("lc_scan" and a layout number: a library that
/// stores something else writes another).
const SCANNED: u64 = 0x6c63_5f73_6361_6e01;
/// The tag `lc_sip_scan` leaves when the scan failed, so that the struct is not taken for an
/// earlier scan still in its memory.
const FAILED: u64 = 0x6c63_5f73_6361_6eff;

const _: () = assert!(size_of::<Stored<'static>>() <= size_of::<lc_scanned_sip>());
const _: () = assert!(align_of::<Stored<'static>>() <= align_of::<lc_scanned_sip>());

/// The scan in `scanned`, checked: `NullParameter` for NULL, `InvalidArgument` when the tag is
/// not a successful scan's (zeroed, a failed scan, or no scan at all).
///
/// # Safety
/// `scanned` NULL or readable for one `lc_scanned_sip`, which `lc_sip_scan` filled when its
/// tag says so, and whose message is still unchanged and readable during `'a`.
pub(crate) unsafe fn load<'a>(scanned: *const lc_scanned_sip) -> Result<Scan<'a>, Code> {
    if scanned.is_null() {
        return Err(crate::abi::null("scanned"));
    }
    let stored = scanned.cast::<Stored<'a>>();
    // SAFETY: readable for one lc_scanned_sip (the caller's contract), which begins with the
    // tag word; any bit pattern is a valid u64, so this reads no value the caller could make
    // invalid.
    let tag = unsafe { (&raw const (*stored).tag).read() };
    match tag {
        // SAFETY: the tag is a successful scan's: `lc_sip_scan` wrote a whole `Stored` there
        // (size and alignment fit, asserted above), which a copy of the struct keeps, and its
        // slices point into the message the caller keeps unchanged and readable.
        SCANNED => Ok(unsafe { stored.read() }.scan),
        FAILED => Err(crate::abi::invalid(
            "scanned",
            "its lc_sip_scan failed: there is no scan to use",
        )),
        other => Err(crate::abi::invalid(
            "scanned",
            format_args!("not filled by lc_sip_scan (tag {other:#x}: zeroed or uninitialised)"),
        )),
    }
}

/// Scans a raw SIP request (`len` bytes: request line and headers; a body is ignored) once, into
/// `*scanned`, for the calls that take an `lc_scanned_sip`: the same scan `lc_classify_sip_opts`,
/// `lc_oc_category_sip` and `lc_detector_observe_sip` each make of the message, so that a
/// caller that makes several of them on one request scans it once. No allocation.
///
/// The scan borrows `msg`: keep the bytes unchanged and readable until the last call that uses
/// the scan has returned (see `lc_scanned_sip`).
///
/// Errors: a malformed message gets the `LC_RESULT_SIP_*` code those calls give it
/// (`lc_last_error` says what is malformed). Then `*scanned` is marked as a failed scan (an
/// exception to outputs written only on success): the calls that take it refuse it with
/// `LC_RESULT_INVALID_ARGUMENT` rather than use an earlier scan still in its memory. A request
/// without a usable top Via scans (only the detector needs one: its calls give
/// `LC_RESULT_SIP_MISSING_VIA` / `LC_RESULT_SIP_BAD_VIA`).
///
/// # Safety
/// `msg` readable for `len` bytes (and kept unchanged and readable while the scan is used);
/// `scanned` writable for one `lc_scanned_sip`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_sip_scan(
    msg: *const u8,
    len: usize,
    scanned: *mut lc_scanned_sip,
) -> lc_result {
    boundary(|| {
        let bytes = try_slice!(msg, len);
        let mut out = try_out!(scanned);
        let stored = out.as_mut_ptr().cast::<Stored<'_>>();
        match sip::scan(bytes) {
            Ok(request) => {
                let scan = Scan::new(request);
                // SAFETY: `stored` is writable for one lc_scanned_sip (Out's contract), which
                // holds a `Stored` (size and alignment asserted above).
                unsafe { stored.write(Stored { tag: SCANNED, scan }) };
                Code::Ok
            }
            Err(e) => {
                // SAFETY: as above; only the tag word is written.
                unsafe { (&raw mut (*stored).tag).write(FAILED) };
                sip_error_detail(e)
            }
        }
    })
}

#[cfg(test)]
mod tests;
