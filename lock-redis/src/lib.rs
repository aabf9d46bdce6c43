//! Redis single-instance and Redlock backends for dlock. (not built yet).
