//! The CLI's output gate: every line it prints and every log line of the libraries below it is
//! passed through [`dlock::url::redact_message`] with the URLs this run was given, so no client
//! library that logs or echoes its connection string can put a secret on the terminal.

use std::io::Write;
use std::sync::{Arc, PoisonError, RwLock};

use tracing_subscriber::fmt::MakeWriter;

/// The URLs whose secrets must not be printed; cheap to clone, shared by all writers.
#[derive(Clone, Default)]
pub(crate) struct Redactor {
    urls: Arc<RwLock<Vec<String>>>,
}

impl Redactor {
    /// Adds a URL whose secrets are hidden from now on.
    pub(crate) fn add(&self, url: Option<String>) {
        let Some(url) = url.filter(|u| !u.is_empty()) else { return };
        let mut urls = self.urls.write().unwrap_or_else(PoisonError::into_inner);
        if !urls.contains(&url) {
            urls.push(url);
        }
    }

    /// `text` with the secrets of every known URL hidden.
    pub(crate) fn scrub(&self, text: &str) -> String {
        let urls = self.urls.read().unwrap_or_else(PoisonError::into_inner);
        urls.iter().fold(text.to_owned(), |text, url| dlock::url::redact_message(&text, url))
    }

    /// Prints a line on stdout, secrets hidden.
    pub(crate) fn println(&self, text: &str) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", self.scrub(text));
    }

    /// Prints a line on stderr, secrets hidden.
    pub(crate) fn eprintln(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{}", self.scrub(text));
    }
}

/// One log event, buffered so it is scrubbed whole (a secret is never split across writes) and
/// written to stderr when the subscriber drops it.
pub(crate) struct Event {
    redactor: Redactor,
    buf: Vec<u8>,
}

impl Write for Event {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let text = self.redactor.scrub(&String::from_utf8_lossy(&self.buf));
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

impl<'a> MakeWriter<'a> for Redactor {
    type Writer = Event;

    fn make_writer(&'a self) -> Event {
        Event { redactor: self.clone(), buf: Vec::new() }
    }
}
