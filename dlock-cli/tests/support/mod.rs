//! What the tool's own test binaries share: the `dlock` binary run apart from the caller's dlock
//! configuration. Each binary uses a part of it, hence the allowances.
#![allow(dead_code, unreachable_pub)]

use std::process::{Command, Output};

/// The `dlock` binary with `args`, blind to the caller's `DLOCK_URL` and `DLOCK_CONFIG`: a
/// developer's own would otherwise choose the backend or the settings under test.
pub fn dlock(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_dlock"));
    c.args(args).env_remove("DLOCK_URL").env_remove("DLOCK_CONFIG");
    c
}

/// `dlock` with `args` run to its end.
pub fn output(args: &[&str]) -> Output {
    dlock(args).output().expect("the dlock binary runs")
}

/// `dlock` with `args` fails and its stderr says `says`.
pub fn assert_refused(args: &[&str], says: &str) {
    let out = output(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "dlock {args:?} succeeded: {stderr}");
    assert!(stderr.contains(says), "dlock {args:?} does not say {says:?}: {stderr}");
}
