//! Backend URLs: the one redactor ([`lock_core::backend::redact`]) every URL shown to a person
//! goes through, and [`Scheme`], the backend a URL names (the table behind it is in
//! `registry.rs`).

pub use lock_core::backend::redact::{redact_error, redact_message, redact_url, UrlParts};

pub use crate::scheme::Scheme;
