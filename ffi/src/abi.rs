//! The boundary helpers every exported function uses (after rustls-ffi's cast and try macros):
//! each turns one thing a C caller passes into a Rust value or an early `return` of the
//! function body (`boundary`'s closure) with the result code C gets.
//!
//! | helper | gives | on failure |
//! | --- | --- | --- |
//! | `try_ref!(p)` | `&T` from `*const T` / `*mut T` | `LC_RESULT_NULL_PARAMETER` |
//! | `try_mut!(p)` | `&mut T` from `*mut T` | `LC_RESULT_NULL_PARAMETER` |
//! | `try_out!(p)` | an [`Out<T>`] to write once (may be uninitialised memory) | `LC_RESULT_NULL_PARAMETER` |
//! | `try_buf!(buf, cap, written)` | an [`OutBuf`]: a caller's buffer and its length output | `LC_RESULT_NULL_PARAMETER` (`written` NULL) |
//! | `try_slice!(p, len)` | `&[u8]` | `LC_RESULT_NULL_PARAMETER` |
//! | `try_str!(s)` | `&str` from a required [`lc_str`] | `LC_RESULT_NULL_PARAMETER`, `LC_RESULT_INVALID_UTF8` |
//! | `try_value!(v, "what")` | the Rust value ([`FromC`]) an integer names | `LC_RESULT_INVALID_ARGUMENT` |
//! | `try_!(r)` | `v` of `Ok(v)` | the `Err` code |
//!
//! `what` names the argument or field for the thread's last error (`lc_last_error`), as the C
//! caller knows it: `"lc_request.transport"`, `"lc_classify_sip: transport"`.
//!
//! The pointer helpers dereference what the caller passed: they may only be used in an
//! exported `unsafe extern "C"` function whose `# Safety` section makes every non-NULL pointer
//! valid (readable, or writable for outputs) for the duration of the call. Every check of a
//! call runs before anything changes, so a refused call writes no output.
//!
//! The integer-and-check rule: every enum-like value crosses the boundary as a `uint32_t`
//! typedef with `#define`d values (`lc_result`, `lc_transport`, `lc_method`, …), never as a
//! Rust `enum` (a C caller can pass any integer, and a Rust enum holding an undeclared value is
//! undefined behaviour). Inside the crate such values become Rust enums only through
//! [`FromC`], which refuses what is not declared.

use std::mem::MaybeUninit;

use crate::{Code, lc_str};

/// A Rust value that a C integer of the ABI may name.
pub(crate) trait FromC: Sized {
    /// The C constants, for messages: `"LC_TRANSPORT_*"`.
    const C_NAMES: &'static str;

    /// The value `value` names, or `None` when it is not a declared constant.
    fn from_c(value: u32) -> Option<Self>;
}

/// A checked output place of the caller's (from `try_out!`): written at most once and never
/// read, so the caller may pass uninitialised memory.
pub(crate) struct Out<'a, T>(&'a mut MaybeUninit<T>);

impl<T> Out<'_, T> {
    /// Writes the output.
    pub(crate) fn write(self, value: T) {
        self.0.write(value);
    }

    /// The place, for writing a struct field by field (`addr_of_mut!`-style raw writes only:
    /// the memory may be uninitialised, so no reference to a `T` may be made from it).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.0.as_mut_ptr()
    }
}

/// A caller's byte buffer (`buf`, `cap` bytes; NULL with `cap` 0 is allowed) and the output
/// its length goes to (from `try_buf!`).
pub(crate) struct OutBuf<'a> {
    buf: *mut u8,
    cap: usize,
    written: Out<'a, usize>,
}

impl<'a> OutBuf<'a> {
    /// # Safety
    /// `buf` must be NULL or writable for `cap` bytes during `'a`, and not overlap memory the
    /// library owns.
    pub(crate) unsafe fn new(buf: *mut u8, cap: usize, written: Out<'a, usize>) -> Self {
        OutBuf { buf, cap, written }
    }

    /// Copies `bytes` into the buffer and writes their length; when they do not fit, writes
    /// the length needed and returns `BufferTooSmall` (the buffer untouched).
    pub(crate) fn deliver(self, bytes: &[u8]) -> Code {
        self.written.write(bytes.len());
        if bytes.len() > self.cap || (self.buf.is_null() && !bytes.is_empty()) {
            return Code::BufferTooSmall;
        }
        if !bytes.is_empty() {
            // SAFETY: `buf` is writable for `cap` ≥ `bytes.len()` bytes (`new`'s contract) and
            // does not overlap `bytes`, which the library owns.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.buf, bytes.len()) };
        }
        Code::Ok
    }

    /// Writes a length of 0 (nothing to deliver) and returns `Ok`.
    pub(crate) fn nothing(self) -> Code {
        self.written.write(0);
        Code::Ok
    }
}

/// The output place `p`, or `None` when NULL.
///
/// # Safety
/// `p` must be NULL or valid for writes of one `T` (aligned) during `'a`.
pub(crate) unsafe fn out<'a, T>(p: *mut T) -> Option<Out<'a, T>> {
    // SAFETY: by the caller's contract; `MaybeUninit<T>` has `T`'s layout and may hold any
    // bytes, so no initialised value is assumed.
    unsafe { p.cast::<MaybeUninit<T>>().as_mut() }.map(Out)
}

impl lc_str {
    /// A required UTF-8 string: NULL is `NullParameter`, invalid UTF-8 `InvalidUtf8`, each
    /// naming `what` (the argument or field, as C knows it) in the thread's last error.
    ///
    /// # Safety
    /// As for [`lc_str::bytes`].
    pub(crate) unsafe fn to_str<'a>(self, what: &str) -> Result<&'a str, Code> {
        // SAFETY: by the caller's contract.
        match unsafe { self.to_opt_str(what) }? {
            Some(s) => Ok(s),
            None => Err(null(what)),
        }
    }

    /// An optional UTF-8 string: NULL is `None`, invalid UTF-8 `InvalidUtf8` (naming `what`
    /// and the offset of the first bad byte in the thread's last error).
    ///
    /// # Safety
    /// As for [`lc_str::bytes`].
    pub(crate) unsafe fn to_opt_str<'a>(self, what: &str) -> Result<Option<&'a str>, Code> {
        // SAFETY: by the caller's contract.
        match unsafe { self.bytes() } {
            None => Ok(None),
            Some(b) => std::str::from_utf8(b).map(Some).map_err(|e| {
                crate::error::fail(
                    Code::InvalidUtf8,
                    format_args!(
                        "{what}: not UTF-8 (invalid byte at offset {} of {})",
                        e.valid_up_to(),
                        b.len()
                    ),
                )
            }),
        }
    }
}

/// A Rust duration as the nanoseconds (or, with [`millis`], milliseconds) a C struct carries,
/// saturating: the C side counts time in fixed-width integers, the Rust API in `Duration`.
pub(crate) fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// See [`nanos`].
pub(crate) fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `flags` when it sets no bit outside `known`, else `InvalidArgument` (with `what`, the
/// argument or field, and the value as the call's error detail).
pub(crate) fn checked_flags(flags: u32, known: u32, what: &str) -> Result<u32, Code> {
    if flags & !known == 0 {
        Ok(flags)
    } else {
        Err(crate::error::fail(
            Code::InvalidArgument,
            format_args!(
                "{what}: {flags:#x} sets undeclared bits {:#x}",
                flags & !known
            ),
        ))
    }
}

/// The value a C integer names, else `InvalidArgument` (with `what`, the argument or field,
/// and the value as the call's error detail).
pub(crate) fn checked<T: FromC>(value: u32, what: &str) -> Result<T, Code> {
    T::from_c(value).ok_or_else(|| {
        crate::error::fail(
            Code::InvalidArgument,
            format_args!("{what}: {value} is not an {} value", T::C_NAMES),
        )
    })
}

/// `NullParameter`, naming `what` (the argument or field) as the call's error detail.
pub(crate) fn null(what: &str) -> Code {
    crate::error::fail(
        Code::NullParameter,
        format_args!("{what}: NULL where a pointer is required"),
    )
}

/// A C boolean (`uint8_t`): 0 is false, 1 true; anything else `InvalidArgument` naming `what`.
/// (A Rust `bool` holding another value is undefined behaviour, so C booleans cross as bytes.)
pub(crate) fn checked_bool(value: u8, what: &str) -> Result<bool, Code> {
    match value {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(invalid(what, format_args!("{v} is not a boolean (0 or 1)"))),
    }
}

/// `InvalidArgument`, with `what` and why as the call's error detail.
pub(crate) fn invalid(what: &str, why: impl std::fmt::Display) -> Code {
    crate::error::fail(Code::InvalidArgument, format_args!("{what}: {why}"))
}

/// A private Rust enum mirroring a set of `#define`d C constants: `#[repr(u32)]`, each variant
/// equal to its constant, with `to_c` and a [`FromC`] impl that refuses undeclared values.
/// (cbindgen does not expand macros: the C side sees only the typedef and the constants.)
macro_rules! c_enum {
    ($(#[$m:meta])* $vis:vis enum $name:ident: $ty:ty { $($var:ident = $c:path,)* }) => {
        $(#[$m])*
        #[repr(u32)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $(
                #[allow(missing_docs)]
                $var = $c,
            )*
        }

        impl $name {
            /// The C value.
            #[allow(dead_code)]
            pub(crate) const fn to_c(self) -> $ty {
                self as $ty
            }
        }

        impl $crate::abi::FromC for $name {
            const C_NAMES: &'static str = stringify!($ty);

            fn from_c(value: u32) -> Option<Self> {
                match value {
                    $($c => Some(Self::$var),)*
                    _ => None,
                }
            }
        }
    };
}

/// `v` for `Ok(v)`; for `Err(code)` returns `code` from the enclosing body.
macro_rules! try_ {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(code) => return code,
        }
    };
}

/// The caller's pointer as a shared reference; NULL returns `NullParameter` from the body.
macro_rules! try_ref {
    ($p:expr) => {{
        let p = $p;
        // SAFETY: used only in exported functions whose contract makes a non-NULL pointer
        // valid for reads during the call (see the `abi` module).
        match unsafe { p.as_ref() } {
            Some(r) => r,
            None => return $crate::abi::null(stringify!($p)),
        }
    }};
}

/// The caller's pointer as an exclusive reference; NULL returns `NullParameter` from the body.
macro_rules! try_mut {
    ($p:expr) => {{
        let p = $p;
        // SAFETY: used only in exported functions whose contract makes a non-NULL pointer
        // valid and exclusively the callee's during the call (see the `abi` module).
        match unsafe { p.as_mut() } {
            Some(r) => r,
            None => return $crate::abi::null(stringify!($p)),
        }
    }};
}

/// The caller's output pointer as an [`Out`]; NULL returns `NullParameter` from the body.
macro_rules! try_out {
    ($p:expr) => {{
        let p = $p;
        // SAFETY: used only in exported functions whose contract makes a non-NULL output
        // pointer writable during the call (see the `abi` module).
        match unsafe { $crate::abi::out(p) } {
            Some(o) => o,
            None => return $crate::abi::null(stringify!($p)),
        }
    }};
}

/// The caller's buffer `buf` (`cap` bytes) and its length output `written` as an [`OutBuf`];
/// a NULL `written` returns `NullParameter` from the body.
macro_rules! try_buf {
    ($buf:expr, $cap:expr, $written:expr) => {{
        let written = try_out!($written);
        // SAFETY: used only in exported functions whose contract makes `buf` NULL or writable
        // for `cap` bytes during the call (see the `abi` module).
        unsafe { $crate::abi::OutBuf::new($buf, $cap, written) }
    }};
}

/// `len` bytes at the caller's pointer; NULL returns `NullParameter` from the body.
macro_rules! try_slice {
    ($p:expr, $len:expr) => {{
        let (p, len): (*const u8, usize) = ($p, $len);
        if p.is_null() {
            return $crate::abi::null(stringify!($p));
        }
        // SAFETY: non-NULL; used only in exported functions whose contract makes it readable
        // for `len` bytes during the call (see the `abi` module).
        unsafe { std::slice::from_raw_parts(p, len) }
    }};
}

/// A required UTF-8 [`lc_str`] of the caller's: NULL returns `NullParameter`, invalid UTF-8
/// `InvalidUtf8` from the body.
macro_rules! try_str {
    ($s:expr) => {{
        let s: $crate::lc_str = $s;
        // SAFETY: used only in exported functions whose contract makes the string NULL or
        // readable during the call (see the `abi` module).
        try_!(unsafe { s.to_str(stringify!($s)) })
    }};
}

/// The Rust value ([`FromC`]) a C integer names; an undeclared value returns
/// `InvalidArgument` from the body, naming `what` (the argument or field) and the value in
/// the thread's last error.
macro_rules! try_value {
    ($v:expr, $what:expr) => {
        try_!($crate::abi::checked($v, $what))
    };
}
