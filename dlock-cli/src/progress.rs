//! Progress of the long commands (`conformance`, `bench`) on stderr: a progress bar when stderr
//! is a terminal, one plain line per finished step otherwise (logs, CI). Every line passes the
//! redactor; stdout stays free for the report.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::redactor::Redactor;

/// Progress through `total` steps.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    out: Redactor,
}

impl Progress {
    /// A bar when stderr is a terminal (and `DLOCK_PROGRESS` is not `plain`), plain lines otherwise.
    pub(crate) fn new(total: usize, out: &Redactor) -> Progress {
        let plain = std::env::var("DLOCK_PROGRESS").is_ok_and(|v| v == "plain");
        let bar = (std::io::stderr().is_terminal() && !plain).then(|| {
            let bar = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {wide_msg}") {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress { bar, out: out.clone() }
    }

    /// A step began (shown on the bar; a plain line only when `plain_line` is given).
    pub(crate) fn started(&self, what: &str, plain_line: Option<&str>) {
        match &self.bar {
            Some(bar) => bar.set_message(self.out.scrub(what)),
            None => {
                if let Some(line) = plain_line {
                    self.out.eprintln(line);
                }
            }
        }
    }

    /// A step ended: the bar moves on and `line` is printed above it when `show` (always in
    /// plain mode).
    pub(crate) fn finished(&self, line: &str, show: bool) {
        match &self.bar {
            Some(bar) => {
                if show {
                    bar.println(self.out.scrub(line));
                }
                bar.inc(1);
            }
            None => self.out.eprintln(line),
        }
    }

    /// Removes the bar before the report is printed.
    pub(crate) fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
