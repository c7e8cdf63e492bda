//! Gives the shared library the SONAME it is installed under (`libloadctl.so.MAJOR`, the crate's
//! major version), whatever Cargo names the file.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libloadctl.so.{major}");
    }
}
