//! The calling thread's last error: a message for every failing call, read with
//! `lc_last_error`.
//!
//! Errno-like: only failing calls set it (in `boundary`, when a body returns a code other
//! than `LC_RESULT_OK`); a successful call leaves it as it was. A body that knows more than
//! its code says (the reader's `LINE:COLUMN` message, a version gap's numbers, which
//! argument is out of range) calls `detail` before it fails; otherwise the message is the
//! code's `lc_result_text`, and a panic gives its payload when that is a string.

use std::borrow::Cow;
use std::cell::RefCell;
use std::fmt::Display;

use crate::{Code, lc_result};

thread_local! {
    /// Detail a body gave for the call in progress on this thread (taken by `boundary`).
    static PENDING: RefCell<Option<String>> = const { RefCell::new(None) };
    /// The message of this thread's last failing call.
    static LAST: RefCell<Option<Cow<'static, str>>> = const { RefCell::new(None) };
}

/// Records `message` as the detail of the call in progress; it becomes the thread's last
/// error if the call fails (a call that succeeds after all discards it).
pub(crate) fn detail(message: impl Display) {
    let message = message.to_string();
    // `try_with`: during thread teardown there is nowhere to keep it, and nothing to read it.
    let _ = PENDING.try_with(|p| *p.borrow_mut() = Some(message));
}

/// [`detail`], then `code`: `return fail(Code::X, format_args!(…))` in a body.
pub(crate) fn fail(code: Code, message: impl Display) -> Code {
    detail(message);
    code
}

/// Ends a call in `boundary`: takes the pending detail and, when `code` is a failure, stores
/// the message (the detail, else `panic_text`, else the code's text) as the last error.
pub(crate) fn finish(code: Code, panic_text: Option<String>) {
    let pending = PENDING.try_with(|p| p.borrow_mut().take()).ok().flatten();
    if code == Code::Ok {
        return;
    }
    let message = match pending.or(panic_text) {
        Some(m) => Cow::Owned(m),
        None => Cow::Borrowed(code.message()),
    };
    let _ = LAST.try_with(|l| *l.borrow_mut() = Some(message));
}

/// The text of a panic payload, when it is a string.
pub(crate) fn panic_text(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())?;
    Some(format!("panic: {text}"))
}

impl Code {
    /// `text` without its NUL (all of them are ASCII).
    fn message(self) -> &'static str {
        let text = self.text();
        std::str::from_utf8(&text[..text.len() - 1]).unwrap_or("")
    }
}

/// Copies the message of this thread's last failing call into `buf` (`cap` bytes) and writes
/// its length into `*written` — the full length even when `buf` is too small, then
/// `LC_RESULT_BUFFER_TOO_SMALL` and `buf` untouched (call again with a larger buffer). The
/// message is UTF-8 and **not** NUL-terminated: use `*written` (`printf("%.*s", (int)n, buf)`).
/// `LC_RESULT_EMPTY` (and `*written` 0) when no call on this thread has failed yet.
///
/// - **Thread-local**: each thread has its own last error; another thread's failures never
///   change it.
/// - **When it is set**: by every `lc_` call that returns a result other than `LC_RESULT_OK`
///   (errno-like: a successful call leaves the previous message in place, so read it right
///   after the failing call). `lc_last_error` itself never changes it, whatever it returns;
///   neither do `lc_result_text`, `lc_version` and `lc_version_number` (which cannot fail).
/// - **Content**: detail where the library has it — a refused policy document gives the
///   reader's `LINE:COLUMN: …` message (with the rule id when there is one), a version gap
///   the expected and received versions, `LC_RESULT_INVALID_ARGUMENT` the argument or field
///   and its value, a raw SIP error what is malformed; otherwise `lc_result_text` of the code.
///   The wording is for people (logs), not for parsing: switch on the `lc_result`.
/// - **Lifetime**: the message is kept until the thread's next failing call or the thread's
///   exit; the bytes copied into `buf` are the caller's.
///
/// ```c
/// uint64_t gen;
/// lc_result r = lc_engine_publish(engine, src, no_notifier, doc, doc_len, &gen);
/// if (r != LC_RESULT_OK) {
///     uint8_t msg[256];
///     size_t n;
///     if (lc_last_error(msg, sizeof msg, &n) == LC_RESULT_OK)
///         fprintf(stderr, "publish: %s: %.*s\n", lc_result_text(r), (int)n, (const char *)msg);
/// }
/// ```
///
/// # Safety
/// `buf` writable for `cap` bytes (or NULL with `cap` 0); `written` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lc_last_error(buf: *mut u8, cap: usize, written: *mut usize) -> lc_result {
    // Its own panic boundary, which does not record: reading the last error must not replace it.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Code {
        // Not `try_buf!`: its NULL detail would wait for (and mislabel) a later failing call.
        // SAFETY: `written` is NULL or writable by contract.
        let out = match unsafe { crate::abi::out(written) } {
            // SAFETY: `buf` is NULL or writable for `cap` bytes by contract.
            Some(w) => unsafe { crate::abi::OutBuf::new(buf, cap, w) },
            None => return Code::NullParameter,
        };
        let last = LAST.try_with(|l| l.borrow().clone()).ok().flatten();
        match last {
            Some(message) => out.deliver(message.as_bytes()),
            None => {
                let _ = out.nothing();
                Code::Empty
            }
        }
    }))
    .unwrap_or(Code::Panic)
    .to_c()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn last() -> (lc_result, String) {
        let mut buf = [0u8; 512];
        let mut n = 0usize;
        // SAFETY: a writable buffer of `buf.len()` bytes and a writable length.
        let r = unsafe { lc_last_error(buf.as_mut_ptr(), buf.len(), &mut n) };
        (
            r,
            String::from_utf8_lossy(&buf[..n.min(buf.len())]).into_owned(),
        )
    }

    #[test]
    fn failing_calls_set_it_and_successful_ones_leave_it() {
        std::thread::spawn(|| {
            assert_eq!(last().0, crate::LC_RESULT_EMPTY);
            assert_eq!(crate::boundary(|| fail(Code::InvalidArgument, "x: 42")), 5);
            assert_eq!(last(), (crate::LC_RESULT_OK, "x: 42".to_owned()));
            assert_eq!(crate::boundary(|| Code::Ok), 0);
            assert_eq!(last().1, "x: 42");
            // Detail given by a call that then succeeds is dropped.
            assert_eq!(crate::boundary(|| fail(Code::Ok, "unused")), 0);
            assert_eq!(crate::boundary(|| Code::NotFull), crate::LC_RESULT_NOT_FULL);
            assert_eq!(last().1, "a full policy document was expected");
            let r = crate::boundary(|| panic!("boom {}", 7));
            assert_eq!(r, crate::LC_RESULT_PANIC);
            assert_eq!(last().1, "panic: boom 7");
            // Too small: the length needed, and the message stays.
            let mut n = 0usize;
            // SAFETY: NULL with cap 0 is allowed; `n` writable.
            let r = unsafe { lc_last_error(std::ptr::null_mut(), 0, &mut n) };
            assert_eq!((r, n), (crate::LC_RESULT_BUFFER_TOO_SMALL, 13));
            assert_eq!(last().1, "panic: boom 7");
        })
        .join()
        .expect("the test thread passed");
    }
}
