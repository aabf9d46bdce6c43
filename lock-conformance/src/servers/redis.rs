//! Local redis servers for tests (see servers/mod.rs for the provisioning order).
