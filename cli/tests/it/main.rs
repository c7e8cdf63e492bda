//! The `loadctl` command as a user runs it, one test binary: `check`, `classify` / `explain`,
//! `simulate`.

mod check;
mod classify;
mod common;
mod simulate;
