//! ZooKeeper backend for dlock. (not built yet).
