//! The shared conformance suite, in strict mode, against a fresh local single-member etcd per
//! test (or `DLOCK_TEST_ETCD_URL`), with the server's stop/start/pause and a fault proxy.

mod common;

lock_conformance::conformance_tests!(etcd, || async { common::EtcdFixture::start().await }, strict);
