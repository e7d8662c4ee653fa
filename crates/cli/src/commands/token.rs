//! `likewise token <user_id> [--service] [--ttl 1h]`.

use likewise_app::config::Config;
use likewise_core::ids::UserId;
use std::time::Duration;

/// Parse `90s`, `30m`, `1h`, `7d` or a plain number of seconds.
pub fn parse_ttl(s: &str) -> anyhow::Result<Duration> {
    likewise_app::config::parse_duration(s).map_err(|e| anyhow::anyhow!("invalid --ttl: {e}"))
}

pub fn run(cfg: &Config, user: &str, service: bool, ttl: &str) -> anyhow::Result<()> {
    let user: UserId = user.parse().map_err(|_| anyhow::anyhow!("user_id must be a positive decimal ID"))?;
    let ttl = parse_ttl(ttl)?;
    let token =
        likewise_app::tokens::signing_keys(cfg)?.mint(user, service, ttl).map_err(|e| anyhow::anyhow!(e))?;
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
