//! Gives the shared library the SONAME it is installed under (`libloadctl.so.0`), whatever
//! Cargo names the file.
fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libloadctl.so.0");
    }
}
