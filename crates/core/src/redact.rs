//! Connection strings with their secrets hidden, for logs and error messages. One rule for
//! every engine's URL (PostgreSQL, Redis, NATS, the trace collector), so that no log line
//! shows a password whichever setting it names.
//!
//! - A URL's user info: `name:password@` keeps the name (`name:***@`); a lone user part is a
//!   token (NATS, HTTP) and is hidden whole (`***@`), except for PostgreSQL, where it is the
//!   role's name and a password never travels without a `:`.
//! - `password=` in a URL's query, or in a libpq `key=value` string, becomes `password=***`.
//! - A comma-separated list of URLs (NATS servers) is redacted part by part.

/// `conn` with every credential replaced by `***`.
pub fn redact(conn: &str) -> String {
    if !conn.contains("://") {
        return hide_pairs(conn, ' ');
    }
    conn.split(',').map(redact_part).collect::<Vec<_>>().join(",")
}

/// One URL, or the host list's continuation after a comma (`h2:5432/db?password=x`).
fn redact_part(part: &str) -> String {
    let (scheme, rest) = match part.split_once("://") {
        Some((s, r)) => (Some(s), r),
        None => (None, part),
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match (scheme, authority.rsplit_once('@')) {
        (Some(s), Some((user, host))) => match user.split_once(':') {
            Some((name, _)) => format!("{name}:***@{host}"),
            None if matches!(s, "postgres" | "postgresql") => format!("{user}@{host}"),
            None => format!("***@{host}"),
        },
        _ => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => format!("{path}?{}", hide_pairs(query, '&')),
        None => tail.to_string(),
    };
    match scheme {
        Some(s) => format!("{s}://{authority}{tail}"),
        None => format!("{authority}{tail}"),
    }
}

/// `key=value` pairs split by `sep`, with the `password` pair's value hidden.
fn hide_pairs(pairs: &str, sep: char) -> String {
    pairs
        .split(sep)
        .map(|p| match p.split_once('=') {
            Some((k, _)) if k.trim().eq_ignore_ascii_case("password") => format!("{k}=***"),
            _ => p.to_string(),
        })
        .collect::<Vec<_>>()
        .join(&sep.to_string())
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn postgres_passwords_are_hidden_and_role_names_kept() {
        assert_eq!(
            redact("postgres://app:s3cret@db:5432/x?sslmode=require"),
            "postgres://app:***@db:5432/x?sslmode=require"
        );
        assert_eq!(redact("postgres://app@db/x?password=s3cret"), "postgres://app@db/x?password=***");
        assert_eq!(redact("postgresql://app@db/x"), "postgresql://app@db/x");
        assert_eq!(redact("host=db user=app password=s3cret"), "host=db user=app password=***");
        assert_eq!(redact("postgres://db/x"), "postgres://db/x");
        assert_eq!(
            redact("postgres://u:pw@h1,h2:5432/db?password=pw"),
            "postgres://u:***@h1,h2:5432/db?password=***"
        );
    }

    #[test]
    fn tokens_and_passwords_in_other_urls_are_hidden() {
        assert_eq!(
            redact("nats://tok@n1:4222,nats://u:pw@n2:4222"),
            "nats://***@n1:4222,nats://u:***@n2:4222"
        );
        assert_eq!(redact("redis://:pw@127.0.0.1:6379/0"), "redis://:***@127.0.0.1:6379/0");
        assert_eq!(redact("rediss://user:pw@cache/1"), "rediss://user:***@cache/1");
        assert_eq!(
            redact("http://user:pw@127.0.0.1:4318/v1/traces"),
            "http://user:***@127.0.0.1:4318/v1/traces"
        );
        assert_eq!(redact("http://u@h"), "http://***@h");
    }

    #[test]
    fn an_at_sign_outside_the_authority_is_not_user_info() {
        assert_eq!(redact("http://127.0.0.1:4318/a@b"), "http://127.0.0.1:4318/a@b");
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(redact("redis://h/0?x=a@b"), "redis://h/0?x=a@b");
    }
}
