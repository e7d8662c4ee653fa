//! `likewise token <user_id> [--service] [--ttl 1h]`.

use crate::config::Config;
use crate::secret;
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use std::time::Duration;

/// Parse `90s`, `30m`, `1h`, `7d` or a plain number of seconds.
pub fn parse_ttl(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: u64 =
        num.parse().map_err(|_| anyhow::anyhow!("invalid --ttl {s:?}: expected e.g. 30m, 1h, 7d"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => anyhow::bail!("invalid --ttl unit {unit:?}: use s, m, h or d"),
    };
    anyhow::ensure!(secs > 0, "--ttl must be positive");
    Ok(Duration::from_secs(secs))
}

pub fn run(cfg: &Config, user: &str, service: bool, ttl: &str) -> anyhow::Result<()> {
    let user: UserId = user.parse().map_err(|_| anyhow::anyhow!("user_id must be a positive decimal ID"))?;
    let ttl = parse_ttl(ttl)?;
    let secret = secret::load_or_create(cfg.auth.secret.as_deref(), &cfg.store.data_dir, false)?;
    let token = TokenKeys::new(&secret).mint(user, service, ttl).map_err(|e| anyhow::anyhow!(e))?;
    println!("{token}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_ttl;

    #[test]
    fn ttls_parse() {
        assert_eq!(parse_ttl("1h").ok().map(|d| d.as_secs()), Some(3600));
        assert_eq!(parse_ttl("90").ok().map(|d| d.as_secs()), Some(90));
        assert_eq!(parse_ttl("7d").ok().map(|d| d.as_secs()), Some(604_800));
        for bad in ["", "h", "1y", "0", "-1h"] {
            assert!(parse_ttl(bad).is_err(), "{bad}");
        }
    }
}
