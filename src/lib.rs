//! dlock
