//! PostgreSQL, MySQL/MariaDB and SQLite backends for dlock (sqlx). (not built yet).
