//! Using a lock table that already exists only if it is what dlock creates.
//!
//! `CREATE TABLE IF NOT EXISTS` adopts whatever table of that name the session finds first —
//! on PostgreSQL anywhere on the `search_path`, where before version 15 every user may create
//! tables in `public`. Someone who creates it first, with other columns, a trigger or a rule,
//! controls the tokens (a trigger can hand every grant token 1) and, on PostgreSQL, runs code
//! with the privileges of the lock user. So before any lock statement runs, each table is
//! checked: its columns (names and types) are exactly those of dlock's `CREATE TABLE`, it has no
//! trigger (and on PostgreSQL no rule and is a plain table), and on PostgreSQL its owner is the
//! connecting user, a role it belongs to, or a superuser. MySQL has no table owners: any user
//! with `CREATE` on the database can make the table first, so there the columns, the triggers
//! and the kind of table are checked: a `BASE TABLE` with dlock's engine (InnoDB), not a view
//! (whose columns look right while a trigger on the table behind it rewrites the tokens) nor
//! another engine (MyISAM has no transactions and no row locks) — and
//! `information_schema.TRIGGERS` shows a table's triggers only to a user with the `TRIGGER`
//! privilege on it. SQLite files are guarded by file permissions.

use lock_core::LockError;

/// Who owns an existing table, as far as the database says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The connecting user, a role it belongs to, or a superuser.
    Trusted,
    /// Anyone else (the role's name).
    Other(String),
    /// The database has no table owners (MySQL, SQLite).
    NotTracked,
}

/// What an existing table looks like, as the dialect reads it from the catalog.
#[derive(Debug)]
pub(crate) struct TableFacts {
    /// Where the table was found (`schema.table`), for messages.
    pub(crate) found_as: String,
    /// Column names and types, as the catalog spells them.
    pub(crate) columns: Vec<(String, String)>,
    pub(crate) owner: Owner,
    /// Triggers, rules, or "not a plain table": anything that runs code or changes what a
    /// statement does.
    pub(crate) hooks: Vec<String>,
}

/// The engine every MySQL/MariaDB table of dlock's is created with (`ENGINE=InnoDB`).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
const MYSQL_ENGINE: &str = "InnoDB";

/// MySQL/MariaDB: what `information_schema.TABLES` says `schema.table` is, as hooks for
/// [`judge`] (empty for a `BASE TABLE` of dlock's engine). The dialect adds them to the triggers.
#[cfg(feature = "mysql")]
pub(crate) async fn mysql_table_kind(
    c: &mut sqlx::MySqlConnection,
    schema: Option<&str>,
    table: &str,
) -> Result<Vec<String>, sqlx::Error> {
    let row = sqlx::query_as::<_, (String, Option<String>)>(
        "SELECT CAST(TABLE_TYPE AS CHAR), CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ?",
    )
    .bind(schema)
    .bind(table)
    .fetch_optional(&mut *c)
    .await?;
    Ok(match row {
        Some((table_type, engine)) => mysql_kind_hooks(&table_type, engine.as_deref()),
        // Gone since it was found: the next statement creates dlock's own.
        None => Vec::new(),
    })
}

/// The objections to a MySQL/MariaDB table of this `TABLE_TYPE` and `ENGINE`.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn mysql_kind_hooks(table_type: &str, engine: Option<&str>) -> Vec<String> {
    if !table_type.eq_ignore_ascii_case("BASE TABLE") {
        return vec![format!(
            "table type {table_type:?}: it is not a base table (a view's columns can look right while what is behind \
             it, a trigger on its table, decides the tokens)"
        )];
    }
    match engine {
        Some(e) if e.eq_ignore_ascii_case(MYSQL_ENGINE) => Vec::new(),
        other => vec![format!(
            "engine {:?} (dlock's tables are {MYSQL_ENGINE}: transactions and row locks keep the tokens rising)",
            other.unwrap_or("none")
        )],
    }
}

/// The columns (name, type) a `CREATE TABLE` statement of ours declares, lower case.
fn declared_columns(ddl: &str) -> Vec<(String, String)> {
    let (Some(open), Some(close)) = (ddl.find('('), ddl.rfind(')')) else { return Vec::new() };
    let body = ddl.get(open + 1..close).unwrap_or("");
    let (mut items, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, ch) in body.char_indices() {
        match ch {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&body[start..]);
    items
        .into_iter()
        .filter_map(|item| {
            let mut words = item.split_whitespace();
            let (name, ty) = (words.next()?, words.next()?);
            (!name.eq_ignore_ascii_case("PRIMARY")).then(|| (name.to_ascii_lowercase(), normalize_type(ty)))
        })
        .collect()
}

/// `BIGINT`, `bigint(20)` (MariaDB's display width) → `bigint`; other types lower case as given.
fn normalize_type(ty: &str) -> String {
    let ty = ty.trim().to_ascii_lowercase();
    match ty.split_once('(') {
        Some((base, _)) if base.ends_with("int") => base.to_owned(),
        _ => ty,
    }
}

/// Refuses a table that is not what `ddl` creates, with a `Config` error that says why and what
/// to do.
pub(crate) fn judge(label: &str, ddl: &str, facts: &TableFacts) -> Result<(), LockError> {
    let refuse = |why: String| {
        Err(LockError::config(format!(
            "{label}: the existing table {} is not one dlock can trust: {why}; someone may have created it first to \
             control the locks (table squatting). Drop it if it is not yours, or name a table in a schema only \
             trusted users can create in, schema-qualified (table = \"schema.table\")",
            facts.found_as
        )))
    };
    if let Owner::Other(role) = &facts.owner {
        return refuse(format!(
            "it is owned by role {role:?}, which is neither the connecting user, a role it belongs to, nor a \
             superuser (create the tables as this user, or as a superuser, or ALTER TABLE … OWNER TO this user)"
        ));
    }
    if !facts.hooks.is_empty() {
        return refuse(format!("it has {} (dlock's tables have none)", facts.hooks.join(", ")));
    }
    let mut want = declared_columns(ddl);
    let mut have: Vec<(String, String)> =
        facts.columns.iter().map(|(n, t)| (n.to_ascii_lowercase(), normalize_type(t))).collect();
    want.sort();
    have.sort();
    if want != have {
        let show =
            |cols: &[(String, String)]| cols.iter().map(|(n, t)| format!("{n} {t}")).collect::<Vec<_>>().join(", ");
        return refuse(format!("its columns are ({}), dlock's are ({})", show(&have), show(&want)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG: &str =
        "CREATE TABLE IF NOT EXISTS \"s\".\"t\" (name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, owner TEXT, \
                      fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)";
    const MY: &str = "CREATE TABLE IF NOT EXISTS `c` (kind VARCHAR(8) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                      name VARBINARY(255) NOT NULL, fence BIGINT NOT NULL, PRIMARY KEY (kind, name)) ENGINE=InnoDB";

    fn facts(columns: &[(&str, &str)], owner: Owner, hooks: &[&str]) -> TableFacts {
        TableFacts {
            found_as: "s.t".into(),
            columns: columns.iter().map(|(n, t)| (n.to_string(), t.to_string())).collect(),
            owner,
            hooks: hooks.iter().map(|h| h.to_string()).collect(),
        }
    }

    #[test]
    fn mysql_adopts_only_base_tables_of_its_engine() {
        assert!(mysql_kind_hooks("BASE TABLE", Some("InnoDB")).is_empty());
        assert!(mysql_kind_hooks("base table", Some("innodb")).is_empty());
        for (table_type, engine, says) in [
            ("VIEW", None, "not a base table"),
            ("SYSTEM VIEW", Some("MEMORY"), "not a base table"),
            ("SEQUENCE", Some("InnoDB"), "not a base table"),
            ("BASE TABLE", Some("MyISAM"), "engine \"MyISAM\""),
            ("BASE TABLE", Some("MEMORY"), "engine \"MEMORY\""),
            ("BASE TABLE", None, "engine \"none\""),
        ] {
            let hooks = mysql_kind_hooks(table_type, engine);
            assert!(hooks.len() == 1 && hooks[0].contains(says), "{table_type} {engine:?}: {hooks:?}");
            let judged = judge("my", MY, &facts(&[("kind", "varchar(8)")], Owner::NotTracked, &[&hooks[0]]));
            assert!(matches!(judged, Err(LockError::Config { reason }) if reason.contains(says)));
        }
    }

    #[test]
    fn columns_of_our_ddl() {
        assert_eq!(
            declared_columns(MY),
            [("kind", "varchar(8)"), ("name", "varbinary(255)"), ("fence", "bigint")]
                .map(|(n, t)| (n.to_owned(), t.to_owned()))
        );
        assert_eq!(declared_columns(PG).len(), 4);
    }

    #[test]
    fn only_our_own_tables_pass() {
        let ours = [("name", "text"), ("owner", "text"), ("fence", "bigint"), ("expires_at", "bigint")];
        assert!(judge("pg", PG, &facts(&ours, Owner::Trusted, &[])).is_ok());
        let maria = [("kind", "varchar(8)"), ("fence", "bigint(20)"), ("name", "varbinary(255)")];
        assert!(judge("my", MY, &facts(&maria, Owner::NotTracked, &[])).is_ok());
        for (f, says) in [
            (facts(&ours, Owner::Other("mallory".into()), &[]), "owned by role \"mallory\""),
            (facts(&ours, Owner::Trusted, &["trigger t1"]), "trigger t1"),
            (facts(&ours[..3], Owner::Trusted, &[]), "its columns are"),
            (
                facts(
                    &[("name", "text"), ("owner", "text"), ("fence", "text"), ("expires_at", "bigint")],
                    Owner::Trusted,
                    &[],
                ),
                "fence text",
            ),
        ] {
            match judge("pg", PG, &f) {
                Err(LockError::Config { reason }) => {
                    assert!(reason.contains(says) && reason.contains("squatting"), "{reason}")
                }
                other => panic!("{f:?}: {other:?}"),
            }
        }
    }
}
