//! A hostile PostgreSQL schema for the `search_path` tests: a schema that a role's
//! `search_path` puts ahead of `pg_catalog`, holding operators and functions that shadow the
//! built-in ones, each recording that it ran (and as whom) before it lies. A lock client or the
//! `dlock` tool that names every built-in it uses by schema never runs one of them.

/// The statements that make schema `h`: its `calls (what, who)` table, which anyone may insert
/// into (a planted function runs as its caller) and usable by everyone.
pub fn schema(h: &str) -> Vec<String> {
    vec![
        format!("CREATE SCHEMA {h}"),
        format!("CREATE TABLE {h}.calls (what TEXT, who TEXT)"),
        format!("GRANT USAGE ON SCHEMA {h} TO PUBLIC"),
        format!("GRANT INSERT ON {h}.calls TO PUBLIC"),
    ]
}

/// A function `h.signature` returning `returns` that records `what` and then runs `lie` (the
/// rest of its SQL body, e.g. `SELECT 0::numeric`; empty for `void`).
pub fn function(h: &str, signature: &str, returns: &str, what: &str, lie: &str) -> String {
    format!(
        "CREATE FUNCTION {h}.{signature} RETURNS {returns} LANGUAGE sql AS $$ \
         INSERT INTO {h}.calls VALUES ('{what}', current_user::text); {lie} $$"
    )
}

/// An operator `h.op` on `(left, right)` that calls the planted function `h.function`.
pub fn operator(h: &str, op: &str, left: &str, right: &str, function: &str) -> String {
    format!("CREATE OPERATOR {h}.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = {h}.{function})")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_name_the_schema_and_record_the_call() {
        assert_eq!(schema("x").len(), 4);
        assert_eq!(
            function("x", "now()", "timestamptz", "now()", "SELECT 'epoch'::timestamptz"),
            "CREATE FUNCTION x.now() RETURNS timestamptz LANGUAGE sql AS $$ INSERT INTO x.calls VALUES ('now()', \
             current_user::text); SELECT 'epoch'::timestamptz $$"
        );
        assert_eq!(
            operator("x", "*", "numeric", "integer", "mul"),
            "CREATE OPERATOR x.* (LEFTARG = numeric, RIGHTARG = integer, FUNCTION = x.mul)"
        );
    }
}
