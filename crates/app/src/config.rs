//! Layered configuration: built-in defaults, then a TOML file (`--config`), then
//! `LIKEWISE__SECTION__KEY` environment variables, then the `--listen` / `--data-dir` flags.
//! `likewise.example.toml` at the repository root documents every key.

use anyhow::Context;
use figment::Figment;
use figment::providers::{Env, Format, Serialized, Toml};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The whole configuration.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub store: StoreSection,
    pub write: WriteConfig,
    pub aggregator: AggregatorConfig,
    pub cache: CacheConfig,
    pub auth: AuthConfig,
    pub notifications: NotificationsConfig,
    pub stream: StreamConfig,
    pub limits: LimitsConfig,
    pub log: LogConfig,
    pub export: ExportConfig,
    pub comments: CommentsConfig,
    pub integrity: IntegrityConfig,
    pub telemetry: TelemetryConfig,
}

/// `[telemetry]`: OpenTelemetry traces of requests, group commits and consumer batches,
/// exported over OTLP/HTTP (protobuf). Off while `otlp_endpoint` is unset.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The collector, `http://host:4318` (spans go to its `/v1/traces`) or a full URL with a
    /// path of its own; unset: no traces, and nothing traced is stored.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported spans.
    pub service_name: String,
    /// Share of requests traced, 0 to 1 (a request carrying a sampled `traceparent` is
    /// always traced).
    pub sample_ratio: f64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig { otlp_endpoint: None, service_name: "likewise".into(), sample_ratio: 1.0 }
    }
}

impl TelemetryConfig {
    /// The URL spans are posted to, if traces are on: `otlp_endpoint` with `/v1/traces` when
    /// it names no path. Only plain `http://` (the collector beside the node).
    pub fn traces_url(&self) -> anyhow::Result<Option<axum::http::Uri>> {
        let Some(e) = &self.otlp_endpoint else { return Ok(None) };
        let bad = || format!("telemetry.otlp_endpoint: {e:?} is not a URL like http://collector:4318");
        let uri: axum::http::Uri = e.parse().with_context(bad)?;
        anyhow::ensure!(
            uri.scheme_str() == Some("http") && uri.host().is_some_and(|h| !h.is_empty()),
            "{} (only http:// is supported)",
            bad()
        );
        if matches!(uri.path(), "" | "/") {
            let base = e.trim_end_matches('/');
            return Ok(Some(format!("{base}/v1/traces").parse().with_context(bad)?));
        }
        Ok(Some(uri))
    }

    fn validate(&self) -> anyhow::Result<()> {
        self.traces_url()?;
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.sample_ratio),
            "telemetry.sample_ratio must be between 0 and 1 (got {})",
            self.sample_ratio
        );
        anyhow::ensure!(!self.service_name.is_empty(), "telemetry.service_name must not be empty");
        anyhow::ensure!(
            cfg!(feature = "otlp") || self.otlp_endpoint.is_none(),
            "telemetry.otlp_endpoint is set, but this build has no trace export (the `otlp` cargo feature)"
        );
        Ok(())
    }
}

/// `[comments]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommentsConfig {
    /// How long an `Idempotency-Key` of a comment create is kept (`24h`, `7d`; at least 24 h,
    /// as docs/api.md promises); expired keys are removed by the workers.
    pub idempotency_retention: String,
}

impl Default for CommentsConfig {
    fn default() -> Self {
        CommentsConfig { idempotency_retention: "24h".into() }
    }
}

impl CommentsConfig {
    /// `idempotency_retention` as a duration (at least 24 hours).
    pub fn idempotency_retention(&self) -> anyhow::Result<Duration> {
        let d = parse_duration(&self.idempotency_retention).context("comments.idempotency_retention")?;
        anyhow::ensure!(
            d >= Duration::from_secs(24 * 3600),
            "comments.idempotency_retention must be at least 24h (docs/api.md keeps keys at least 24 h)"
        );
        Ok(d)
    }
}

/// `[export]`: the event log published as public JSON events to other teams' systems. Off
/// while `kafka_brokers` is unset.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportConfig {
    /// `host:port,...` of the Kafka cluster; unset: no export.
    pub kafka_brokers: Option<String>,
    /// The topic events go to.
    pub kafka_topic: String,
    /// How long the broker may take to acknowledge a message before the batch is re-sent.
    pub kafka_message_timeout_ms: u64,
    /// Further librdkafka producer settings, for example `"compression.type" = "zstd"` or
    /// `"security.protocol" = "ssl"`.
    pub kafka_options: std::collections::BTreeMap<String, String>,
    /// Most events per batch.
    pub batch: usize,
}

impl Default for ExportConfig {
    fn default() -> Self {
        ExportConfig {
            kafka_brokers: None,
            kafka_topic: "likewise.events".into(),
            kafka_message_timeout_ms: 30_000,
            kafka_options: Default::default(),
            batch: 5_000,
        }
    }
}

/// `[limits]`: per-user rate limits against abuse (like farms, comment floods).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Sustained likes and unlikes (posts and comments together) per user per minute; 0: off.
    pub likes_per_minute: u32,
    /// Likes a user may make in a quick burst before the sustained rate applies.
    pub like_burst: u32,
    /// Sustained comments per user per minute.
    pub comments_per_minute: u32,
    /// Comments a user may post in a quick burst.
    pub comment_burst: u32,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig { likes_per_minute: 120, like_burst: 300, comments_per_minute: 20, comment_burst: 20 }
    }
}

/// `[integrity]`: the consumer flagging like farms and bot rings (docs/moderation.md).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IntegrityConfig {
    /// Leave confirmed accounts' likes out of displayed like counts (rows are kept).
    pub discount_flagged: bool,
    /// Lockstep rings: members at least...
    pub ring_min_accounts: usize,
    /// ...each with at least this many likes of the ring's shared targets...
    pub ring_min_shared: usize,
    /// ...each within this many seconds of the ring's median time for that target.
    pub lockstep_s: u64,
    /// Likes stay in an account's recent set this long (minutes).
    pub recent_window_min: u64,
    /// Brand-new account rings (accounts first seen within `new_account_h`): members at least.
    pub new_ring_min_accounts: usize,
    /// Their shared likes at least.
    pub new_ring_min_shared: usize,
    /// An account first seen this recently (hours) is brand new.
    pub new_account_h: u64,
    /// Inhuman rate: at least `rate_min_likes` likes in `rate_window_s` seconds...
    pub rate_min_likes: u32,
    /// (the window, seconds)
    pub rate_window_s: u64,
    /// ...with a like in at least this share of its seconds.
    pub rate_active_share: f64,
    /// Accounts whose recent activity is kept in memory at most.
    pub max_tracked_accounts: usize,
}

impl Default for IntegrityConfig {
    fn default() -> Self {
        let d = likewise_core::integrity::IntegrityOptions::default();
        IntegrityConfig {
            discount_flagged: false,
            ring_min_accounts: d.ring_min,
            ring_min_shared: d.min_shared,
            lockstep_s: d.lockstep_ms / 1_000,
            recent_window_min: d.recent_window_ms / 60_000,
            new_ring_min_accounts: d.new_ring_min,
            new_ring_min_shared: d.new_min_shared,
            new_account_h: d.new_account_ms / 3_600_000,
            rate_min_likes: d.rate_min_likes,
            rate_window_s: d.rate_window_ms / 1_000,
            rate_active_share: d.rate_active_share,
            max_tracked_accounts: d.max_users,
        }
    }
}

impl IntegrityConfig {
    /// The detection options.
    pub fn options(&self) -> likewise_core::integrity::IntegrityOptions {
        likewise_core::integrity::IntegrityOptions {
            recent_window_ms: self.recent_window_min.max(1) * 60_000,
            min_shared: self.ring_min_shared.max(2),
            ring_min: self.ring_min_accounts.max(2),
            lockstep_ms: self.lockstep_s * 1_000,
            new_account_ms: self.new_account_h * 3_600_000,
            new_min_shared: self.new_ring_min_shared.max(2),
            new_ring_min: self.new_ring_min_accounts.max(2),
            rate_window_ms: self.rate_window_s.max(1) * 1_000,
            rate_min_likes: self.rate_min_likes.max(1),
            rate_active_share: self.rate_active_share.clamp(0.0, 1.0),
            max_users: self.max_tracked_accounts.max(1),
            ..Default::default()
        }
    }
}

/// `[stream]`: NATS JetStream (backend `postgres`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// NATS server URL(s); required with the PostgreSQL backend. `tls://` for TLS; a user and
    /// password (`tls://user:password@host:4222`) or a token (`tls://token@host:4222`).
    pub nats_url: Option<String>,
    /// CA (PEM) the NATS server's certificate must chain to; makes TLS required. Unset: the
    /// system's roots.
    pub nats_ca_file: Option<PathBuf>,
    /// NKEY/JWT credentials file (`.creds`), instead of credentials in `nats_url`.
    pub nats_creds_file: Option<PathBuf>,
    /// Prefix of subjects, the stream and consumer names (tests isolate runs with it).
    pub prefix: String,
    /// How long events stay in the stream, in hours.
    pub max_age_hours: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            nats_url: None,
            nats_ca_file: None,
            nats_creds_file: None,
            prefix: "likewise".into(),
            max_age_hours: 168,
        }
    }
}

/// `[notifications]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotificationsConfig {
    /// How long like notifications are held (a quick unlike cancels them).
    pub hold_ms: u64,
    /// Most open notification streams per user; one more is a 429.
    pub max_streams_per_user: usize,
    /// Most open notification streams in all; 0: half of `server.max_connections`.
    pub max_streams: usize,
    /// New likes per minute on one post (or comment) past which its author gets no more
    /// live pushes for it that minute (the inbox aggregate still updates); 0: no limit.
    pub live_push_max_likes_per_minute: u64,
    /// Days a notification item is kept after its last update; older items are removed
    /// with their actors in the background. 0: keep every item.
    pub retain_days: i64,
}

impl Default for NotificationsConfig {
    fn default() -> Self {
        NotificationsConfig {
            hold_ms: 5_000,
            max_streams_per_user: 5,
            max_streams: 0,
            live_push_max_likes_per_minute: 1_000,
            retain_days: 30,
        }
    }
}

/// The longest `notifications.retain_days` (a century): a longer one is a mistake, not a plan.
pub const MAX_RETAIN_DAYS: i64 = 36_500;

impl NotificationsConfig {
    /// `retain_days` as a duration; `None` keeps every item (0). Negative or more than
    /// [`MAX_RETAIN_DAYS`] is an error.
    pub fn retention(&self) -> anyhow::Result<Option<Duration>> {
        let d = self.retain_days;
        anyhow::ensure!(
            (0..=MAX_RETAIN_DAYS).contains(&d),
            "notifications.retain_days must be 0 (keep every item) or 1 to {MAX_RETAIN_DAYS} days (got {d})"
        );
        Ok((d > 0).then(|| Duration::from_secs(d as u64 * 86_400)))
    }
}

/// `[server]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub listen: String,
    pub request_timeout_ms: u64,
    /// Admission control at the door: a write expecting to wait more than this share of
    /// `request_timeout_ms` (requests in flight over their answer rate) is answered 503 with
    /// `Retry-After` at once; reads, more than the whole timeout. 0 turns it off.
    pub admission_wait_share: f64,
    pub max_body_bytes: usize,
    /// `all` (API and workers), `api` or `worker`; the last two need the postgres backend.
    pub role: String,
    /// A client must send a request's headers within this (slowloris; keep-alive idle).
    pub header_read_timeout_ms: u64,
    /// Most concurrent connections; past it a new connection is answered 503 and closed.
    pub max_connections: usize,
    /// Browser origins allowed to call the API (CORS), e.g. `https://app.example.com`.
    pub cors_origins: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            request_timeout_ms: 10_000,
            admission_wait_share: 0.5,
            max_body_bytes: 64 * 1024,
            role: "all".into(),
            header_read_timeout_ms: 10_000,
            max_connections: 10_000,
            cors_origins: Vec::new(),
        }
    }
}

/// `[store]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreSection {
    pub backend: String,
    pub data_dir: PathBuf,
    pub cache_mb: u64,
    pub memtable_mb: u64,
    pub max_journal_mb: u64,
    /// Budget of all active memtables together.
    pub write_buffer_mb: u64,
    /// fjall's flush and compaction threads.
    pub engine_threads: usize,
    /// Free space the embedded store keeps on its disk: below it, writes answer 503 with
    /// `Retry-After` until space is freed (0: no check).
    pub min_free_mb: u64,
    /// PostgreSQL databases, one per shard, in shard order (backend `postgres`).
    pub postgres_shards: Vec<String>,
    /// Connections per shard and process.
    pub postgres_pool_size: usize,
    /// A streaming replica per shard, aligned with `postgres_shards` (`""`, or a shorter
    /// list: no replica for that shard); it serves the reads that may lag.
    pub postgres_replicas: Vec<String>,
    /// How far behind its primary (as measured) a replica may be and still serve reads.
    pub postgres_replica_max_lag_ms: u64,
}

impl Default for StoreSection {
    fn default() -> Self {
        StoreSection {
            backend: "embedded".into(),
            data_dir: PathBuf::from("./likewise-data"),
            cache_mb: 256,
            memtable_mb: 32,
            max_journal_mb: 256,
            write_buffer_mb: 64,
            engine_threads: 1,
            min_free_mb: 256,
            postgres_shards: Vec::new(),
            postgres_pool_size: 16,
            postgres_replicas: Vec::new(),
            postgres_replica_max_lag_ms: 1000,
        }
    }
}

/// `[write]`: the group-commit write path.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WriteConfig {
    pub max_batch: usize,
    pub max_delay_us: u64,
    pub max_in_flight: usize,
    /// Parallel writer lanes with the postgres backend (the embedded engine always uses one).
    pub lanes: usize,
}

impl Default for WriteConfig {
    fn default() -> Self {
        WriteConfig { max_batch: 8192, max_delay_us: 0, max_in_flight: 65_536, lanes: 4 }
    }
}

/// `[aggregator]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AggregatorConfig {
    pub window_ms: u64,
    pub reconcile_every_s: u64,
    pub reconcile_hot: usize,
    pub retain_events: u64,
    /// Keep the rank index of the top comment order (off only to measure what it costs: the
    /// top order then misses every change the aggregator would have ranked).
    pub rank_index: bool,
}

impl Default for AggregatorConfig {
    fn default() -> Self {
        AggregatorConfig {
            window_ms: 250,
            reconcile_every_s: 60,
            reconcile_hot: 10,
            retain_events: 10_000_000,
            rank_index: true,
        }
    }
}

/// `[cache]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    pub count_refresh_ms: u64,
    pub count_capacity: usize,
    pub meta_ttl_ms: u64,
    pub meta_capacity: usize,
    pub viewer_capacity: usize,
    pub bloom_max_items: usize,
    /// Redis URL; required with the PostgreSQL backend. `rediss://user:password@host:port/db`
    /// for TLS with an ACL user.
    pub redis_url: Option<String>,
    /// Several Redis servers instead of `redis_url` (client-side sharding): keys are spread
    /// over them by Redis Cluster hash slot. Every node must list the same URLs in the same
    /// order; appending one moves about 1/(n+1) of the keys (cache misses, nothing lost).
    pub redis_urls: Vec<String>,
    /// CA (PEM) a `rediss://` server's certificate must chain to. Unset: the system's roots.
    pub redis_ca_file: Option<PathBuf>,
    /// Prefix of every Redis key (tests isolate runs with it).
    pub redis_prefix: String,
    /// Replicas of each counter key in Redis (hot-key protection).
    pub hot_replicas: u32,
    /// Keys (sorted sets) each own-likes time bucket in Redis is split into, by viewer (see
    /// `shared_cache::likes`): fewer means fewer Redis commands per like, more means smaller keys.
    pub own_likes_shards: u64,
    /// Scale-out: the most likes a viewer's shared liked set in Redis holds (0: no sets;
    /// every feed page without own-likes records reads the reverse index).
    pub liked_filter_max_items: usize,
    /// With the PostgreSQL backend, how long an API node serves a count before reloading it
    /// (the aggregator runs elsewhere and cannot write into this node's cache).
    pub cluster_count_refresh_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            count_refresh_ms: 5_000,
            count_capacity: 200_000,
            meta_ttl_ms: 30_000,
            meta_capacity: 200_000,
            viewer_capacity: 100_000,
            bloom_max_items: 100_000,
            redis_url: None,
            redis_urls: Vec::new(),
            redis_ca_file: None,
            redis_prefix: "likewise".into(),
            hot_replicas: 4,
            own_likes_shards: 16,
            liked_filter_max_items: 8_192,
            cluster_count_refresh_ms: 250,
        }
    }
}

/// `[auth]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// HS256 secret. Unset: a random one is created in the data directory, which signs
    /// tokens unless `jwks_file` is set (then it keys only cursors, and HS256 tokens are
    /// refused).
    pub secret: Option<String>,
    /// Longest token lifetime accepted (`90s`, `30m`, `12h`, `30d`): a token whose `exp` lies
    /// further ahead is refused.
    pub max_token_ttl: String,
    /// The identity provider's public keys, a JWKS document (RS256, ES256 and EdDSA keys,
    /// chosen by `kid`), re-read when it changes.
    pub jwks_file: Option<PathBuf>,
    /// `iss` every token signed by the `jwks_file` keys must carry.
    pub issuer: Option<String>,
    /// A value the `aud` of every token signed by the `jwks_file` keys must carry.
    pub audience: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            secret: None,
            max_token_ttl: "30d".into(),
            jwks_file: None,
            issuer: None,
            audience: None,
        }
    }
}

impl AuthConfig {
    /// `max_token_ttl` as a duration.
    pub fn max_token_ttl(&self) -> anyhow::Result<Duration> {
        parse_duration(&self.max_token_ttl).context("auth.max_token_ttl")
    }

    fn validate(&self) -> anyhow::Result<()> {
        if let Some(s) = &self.secret {
            anyhow::ensure!(s.len() >= 16, "auth.secret must be at least 16 characters");
        }
        self.max_token_ttl()?;
        for (key, v) in [("auth.issuer", &self.issuer), ("auth.audience", &self.audience)] {
            let Some(v) = v else { continue };
            anyhow::ensure!(!v.trim().is_empty(), "{key} must not be empty");
            // They describe the identity provider's tokens; HS256 tokens are this
            // deployment's own and carry neither.
            anyhow::ensure!(
                self.jwks_file.is_some(),
                "{key} needs auth.jwks_file (it applies to its tokens)"
            );
        }
        Ok(())
    }
}

/// Parse `90s`, `30m`, `1h`, `7d` or a plain number of seconds (positive).
pub fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, "s"),
    };
    let n: u64 =
        num.parse().map_err(|_| anyhow::anyhow!("invalid duration {s:?}: expected e.g. 30m, 1h, 7d"))?;
    let unit_secs: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => anyhow::bail!("invalid duration unit {unit:?}: use s, m, h or d"),
    };
    let secs = n.checked_mul(unit_secs).ok_or_else(|| anyhow::anyhow!("duration {s:?} is too long"))?;
    anyhow::ensure!(secs > 0, "duration must be positive");
    Ok(Duration::from_secs(secs))
}

/// `[log]`
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter, e.g. `info` or `likewise=debug,info`. `RUST_LOG` wins when set.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into() }
    }
}

/// Flags that override the layered configuration.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub role: Option<String>,
    pub data_dir: Option<PathBuf>,
}

impl Config {
    /// Load defaults < file < environment < flags.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> anyhow::Result<Config> {
        let mut fig = Figment::from(Serialized::defaults(Config::default()));
        if let Some(f) = file {
            anyhow::ensure!(f.exists(), "config file {} does not exist", f.display());
            fig = fig.merge(Toml::file(f));
        }
        fig = fig.merge(Env::prefixed("LIKEWISE__").split("__"));
        let mut cfg: Config = fig.extract().context("invalid configuration")?;
        if let Some(l) = &overrides.listen {
            cfg.server.listen = l.clone();
        }
        if let Some(r) = &overrides.role {
            cfg.server.role = r.clone();
        }
        if let Some(d) = &overrides.data_dir {
            cfg.store.data_dir = d.clone();
        }
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (1..=likewise_engine::group_commit::MAX_BATCH).contains(&self.write.max_batch),
            "write.max_batch must be between 1 and {}",
            likewise_engine::group_commit::MAX_BATCH
        );
        anyhow::ensure!((1..=64).contains(&self.write.lanes), "write.lanes must be between 1 and 64");
        anyhow::ensure!(self.write.max_in_flight >= 1, "write.max_in_flight must be at least 1");
        anyhow::ensure!(self.aggregator.window_ms >= 1, "aggregator.window_ms must be at least 1");
        anyhow::ensure!(self.store.max_journal_mb >= 64, "store.max_journal_mb must be at least 64");
        anyhow::ensure!(self.store.write_buffer_mb >= 1, "store.write_buffer_mb must be at least 1");
        anyhow::ensure!(
            (1..=16).contains(&self.store.engine_threads),
            "store.engine_threads must be between 1 and 16"
        );
        anyhow::ensure!(self.store.cache_mb >= 1, "store.cache_mb must be at least 1");
        anyhow::ensure!(self.server.request_timeout_ms >= 1, "server.request_timeout_ms must be at least 1");
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.server.admission_wait_share),
            "server.admission_wait_share must be between 0 (no admission control at the door) and 1"
        );
        anyhow::ensure!(
            self.server.header_read_timeout_ms >= 1,
            "server.header_read_timeout_ms must be at least 1"
        );
        anyhow::ensure!(self.server.max_connections >= 1, "server.max_connections must be at least 1");
        anyhow::ensure!(
            self.limits.likes_per_minute == 0 || self.limits.like_burst >= 1,
            "limits.like_burst must be at least 1 when likes are limited"
        );
        anyhow::ensure!(
            self.limits.comments_per_minute >= 1 && self.limits.comment_burst >= 1,
            "limits.comments_per_minute and limits.comment_burst must be at least 1"
        );
        anyhow::ensure!(
            matches!(self.server.role.as_str(), "all" | "api" | "worker"),
            "server.role must be all, api or worker (got {:?})",
            self.server.role
        );
        anyhow::ensure!(
            (1..=65_536).contains(&self.cache.own_likes_shards),
            "cache.own_likes_shards must be between 1 and 65536"
        );
        anyhow::ensure!(
            self.cache.liked_filter_max_items <= 1_000_000,
            "cache.liked_filter_max_items must be at most 1000000 (a set is written whole when built)"
        );
        match self.store.backend.as_str() {
            "embedded" => anyhow::ensure!(
                self.server.role == "all",
                "server.role {:?} needs store.backend = \"postgres\" (the embedded store lives in one process)",
                self.server.role
            ),
            "postgres" => {
                anyhow::ensure!(
                    !self.store.postgres_shards.is_empty(),
                    "store.postgres_shards must list at least one database"
                );
                anyhow::ensure!(
                    self.store.postgres_replicas.len() <= self.store.postgres_shards.len(),
                    "store.postgres_replicas lists {} URLs for {} shards: at most one per shard, in shard \
                     order (\"\" for a shard without one)",
                    self.store.postgres_replicas.len(),
                    self.store.postgres_shards.len()
                );
                anyhow::ensure!(
                    self.store.postgres_replica_max_lag_ms >= 1,
                    "store.postgres_replica_max_lag_ms must be at least 1"
                );
                anyhow::ensure!(
                    self.cache.redis_url.is_some() || !self.cache.redis_urls.is_empty(),
                    "the postgres backend needs cache.redis_url (or cache.redis_urls for several servers)"
                );
                anyhow::ensure!(
                    self.cache.redis_url.is_none() || self.cache.redis_urls.is_empty(),
                    "set cache.redis_url or cache.redis_urls, not both"
                );
                anyhow::ensure!(
                    self.cache.redis_urls.len() <= 255,
                    "cache.redis_urls lists {} servers: at most 255",
                    self.cache.redis_urls.len()
                );
                let mut seen = std::collections::HashSet::new();
                for u in &self.cache.redis_urls {
                    anyhow::ensure!(!u.is_empty(), "cache.redis_urls has an empty URL");
                    anyhow::ensure!(seen.insert(u), "cache.redis_urls lists a server twice");
                }
                anyhow::ensure!(
                    self.auth.secret.is_some(),
                    "the postgres backend needs auth.secret (every node must verify the same tokens and cursors)"
                );
                anyhow::ensure!(self.stream.nats_url.is_some(), "the postgres backend needs stream.nats_url");
                anyhow::ensure!(self.cache.hot_replicas >= 1, "cache.hot_replicas must be at least 1");
                anyhow::ensure!(
                    !self.stream.prefix.is_empty()
                        && self
                            .stream
                            .prefix
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'),
                    "stream.prefix must be letters, digits, '_' or '-'"
                );
            }
            other => anyhow::bail!("store.backend must be \"embedded\" or \"postgres\" (got {other:?})"),
        }
        self.auth.validate()?;
        self.telemetry.validate()?;
        self.comments.idempotency_retention()?;
        self.notifications.retention()?;
        anyhow::ensure!(
            self.notifications.max_streams_per_user >= 1,
            "notifications.max_streams_per_user must be at least 1"
        );
        anyhow::ensure!(
            self.notifications.max_streams < self.server.max_connections,
            "notifications.max_streams must be below server.max_connections (room for ordinary requests)"
        );
        for o in &self.server.cors_origins {
            let ok = (o.starts_with("https://") || o.starts_with("http://"))
                && !o.ends_with('/')
                && !o.contains(['*', ' ', ','])
                && axum::http::HeaderValue::from_str(o).is_ok();
            anyhow::ensure!(ok, "server.cors_origins: {o:?} is not an origin like https://app.example.com");
        }
        Ok(())
    }

    /// Options of the embedded engine and the write path (`likewise_store::open`).
    pub fn store_config(&self) -> likewise_store::StoreConfig {
        likewise_store::StoreConfig {
            data_dir: self.store.data_dir.clone(),
            embedded: likewise_store::embedded::EmbeddedOptions {
                cache_bytes: self.store.cache_mb << 20,
                memtable_bytes: self.store.memtable_mb << 20,
                max_journal_bytes: self.store.max_journal_mb << 20,
                write_buffer_bytes: self.store.write_buffer_mb << 20,
                engine_threads: self.store.engine_threads,
                min_free_bytes: self.store.min_free_mb << 20,
            },
            group_commit: likewise_engine::group_commit::GroupCommitOptions {
                max_batch: self.write.max_batch,
                max_delay: Duration::from_micros(self.write.max_delay_us),
                max_in_flight: self.write.max_in_flight,
                lanes: if self.scaled_out() { self.write.lanes } else { 1 },
            },
        }
    }

    /// True when this process runs on the scale-out engines.
    pub fn scaled_out(&self) -> bool {
        self.store.backend == "postgres"
    }

    /// Read-path options.
    pub fn service_options(&self) -> likewise_service::ServiceOptions {
        let c = &self.cache;
        let refresh = if self.scaled_out() { c.cluster_count_refresh_ms } else { c.count_refresh_ms };
        likewise_service::ServiceOptions {
            count_refresh: Duration::from_millis(refresh),
            local_viewer_cache: !self.scaled_out(),
            live_push_max_likes_per_minute: self.notifications.live_push_max_likes_per_minute,
            discount_flagged: self.integrity.discount_flagged,
            count_capacity: c.count_capacity,
            meta_ttl: Duration::from_millis(c.meta_ttl_ms),
            meta_capacity: c.meta_capacity,
            viewer_capacity: c.viewer_capacity,
            bloom_max_items: c.bloom_max_items,
            moderation: likewise_service::moderation::ModerationOptions {
                likes_per_minute: self.limits.likes_per_minute,
                like_burst: self.limits.like_burst,
                comments_per_minute: self.limits.comments_per_minute,
                comment_burst: self.limits.comment_burst,
                ..Default::default()
            },
            ..likewise_service::ServiceOptions::default()
        }
    }

    /// Aggregator options as configured; the consumers it holds the log for are added from
    /// the workers that run (`WorkerOptions::aggregator_options`).
    pub fn aggregator_options(&self) -> likewise_workers::AggregatorOptions {
        let a = &self.aggregator;
        likewise_workers::AggregatorOptions {
            window: Duration::from_millis(a.window_ms),
            reconcile_every: Duration::from_secs(a.reconcile_every_s.max(1)),
            reconcile_hot: a.reconcile_hot,
            retain_events: a.retain_events,
            rank_index: a.rank_index,
            ..likewise_workers::AggregatorOptions::default()
        }
    }

    /// HTTP options.
    pub fn http_options(&self) -> likewise_http::HttpOptions {
        likewise_http::HttpOptions {
            max_body_bytes: self.server.max_body_bytes,
            request_timeout: Duration::from_millis(self.server.request_timeout_ms),
            admission_wait_share: self.server.admission_wait_share,
            serve: likewise_http::server::ServeOptions {
                header_read_timeout: Duration::from_millis(self.server.header_read_timeout_ms),
                max_connections: self.server.max_connections,
                ..Default::default()
            },
            max_streams_per_user: self.notifications.max_streams_per_user,
            max_streams: self.notifications.max_streams,
            cors_origins: self.server.cors_origins.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_defaults_and_bad_values_fail() {
        let o = Overrides { listen: Some("127.0.0.1:0".into()), data_dir: Some("/tmp/x".into()), role: None };
        let c = Config::load(None, &o).expect("load");
        assert_eq!(c.server.listen, "127.0.0.1:0");
        assert_eq!(c.store.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(c.aggregator.window_ms, 250);
        let api = Overrides { role: Some("api".into()), ..Overrides::default() };
        let e = Config::load(None, &api).expect_err("api role on the embedded store");
        assert!(format!("{e:#}").contains("postgres"), "{e:#}");
    }

    #[test]
    fn stream_caps_token_lifetime_and_cors_origins_are_checked() {
        let mut c = Config::default();
        c.validate().expect("defaults");
        assert_eq!(c.auth.max_token_ttl().ok(), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(c.http_options().stream_cap(), 5_000, "half the connections by default");
        for bad in ["0", "1y", "", "99999999999999999999d"] {
            c.auth.max_token_ttl = bad.into();
            assert!(c.validate().is_err(), "{bad:?}");
        }
        c.auth.max_token_ttl = "12h".into();
        c.notifications.max_streams_per_user = 0;
        assert!(c.validate().is_err());
        c.notifications.max_streams_per_user = 5;
        c.notifications.max_streams = c.server.max_connections;
        assert!(c.validate().is_err(), "streams must leave room for ordinary requests");
        c.notifications.max_streams = 100;
        for bad in
            ["*", "https://app.example.com/", "app.example.com", "https://a.example, https://b.example"]
        {
            c.server.cors_origins = vec![bad.into()];
            assert!(c.validate().is_err(), "{bad:?}");
        }
        c.server.cors_origins = vec!["https://app.example.com".into(), "http://localhost:3000".into()];
        c.validate().expect("valid origins");
        assert_eq!(c.http_options().cors_origins.len(), 2);
    }

    #[test]
    fn issuer_and_audience_need_a_jwks_file_and_a_value() {
        let mut c = Config::default();
        c.auth.issuer = Some("https://idp.example.com".into());
        let e = c.validate().expect_err("an issuer without keys");
        assert!(format!("{e:#}").contains("auth.jwks_file"), "{e:#}");
        c.auth.jwks_file = Some("/etc/likewise/jwks.json".into());
        c.validate().expect("issuer with keys");
        c.auth.audience = Some(" ".into());
        assert!(c.validate().is_err(), "an empty audience");
        c.auth.audience = Some("likewise".into());
        c.validate().expect("issuer and audience with keys");
    }

    #[test]
    fn idempotency_keys_are_kept_at_least_a_day() {
        let mut c = Config::default();
        assert_eq!(c.comments.idempotency_retention().expect("retention"), Duration::from_secs(86_400));
        c.comments.idempotency_retention = "7d".into();
        assert_eq!(c.comments.idempotency_retention().expect("retention"), Duration::from_secs(7 * 86_400));
        for bad in ["23h", "0", "soon"] {
            c.comments.idempotency_retention = bad.into();
            assert!(c.validate().is_err(), "{bad}");
        }
    }

    #[test]
    fn notification_retention_defaults_to_30_days_and_is_checked() {
        let mut c = Config::default();
        let days = |d: u64| Some(Duration::from_secs(d * 86_400));
        assert_eq!(c.notifications.retention().expect("retention"), days(30));
        c.notifications.retain_days = 0;
        c.validate().expect("0 keeps every item");
        assert_eq!(c.notifications.retention().expect("retention"), None);
        c.notifications.retain_days = MAX_RETAIN_DAYS;
        assert_eq!(c.notifications.retention().expect("retention"), days(36_500));
        for bad in [-1, i64::MIN, MAX_RETAIN_DAYS + 1, i64::MAX] {
            c.notifications.retain_days = bad;
            let e = c.validate().expect_err("out of range");
            assert!(format!("{e:#}").contains("notifications.retain_days"), "{bad}: {e:#}");
            assert!(c.notifications.retention().is_err(), "{bad}");
        }
        // From the environment, as an operator sets it.
        let figment = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string("[notifications]\nretain_days = 7"));
        let c: Config = figment.extract().expect("toml");
        assert_eq!(c.notifications.retention().expect("7 days"), days(7));
        let figment = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string("[notifications]\nretain_days = -3"));
        let c: Config = figment.extract().expect("toml");
        assert!(c.validate().is_err(), "negative from a file");
    }

    #[test]
    fn the_trace_endpoint_is_checked_and_gets_the_traces_path() {
        let with = |e: &str| Config {
            telemetry: TelemetryConfig { otlp_endpoint: Some(e.into()), ..Default::default() },
            ..Default::default()
        };
        let url = |e: &str| with(e).telemetry.traces_url().map(|u| u.map(|u| u.to_string()));
        assert_eq!(url("http://otel:4318").ok().flatten().as_deref(), Some("http://otel:4318/v1/traces"));
        assert_eq!(url("http://otel:4318/").ok().flatten().as_deref(), Some("http://otel:4318/v1/traces"));
        assert_eq!(url("http://otel:4318/custom").ok().flatten().as_deref(), Some("http://otel:4318/custom"));
        for bad in ["otel:4318", "https://otel:4318", "http://", "not a url"] {
            let err = with(bad).validate().expect_err(bad).to_string();
            assert!(err.contains("telemetry.otlp_endpoint"), "{bad}: {err}");
        }
        let mut c = Config::default();
        c.telemetry.sample_ratio = 1.5;
        assert!(c.validate().expect_err("ratio").to_string().contains("telemetry.sample_ratio"));
        // Off by default.
        assert_eq!(Config::default().telemetry.traces_url().ok().flatten(), None);
    }

    #[test]
    fn the_example_file_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../likewise.example.toml");
        let c = Config::load(Some(&path), &Overrides::default()).expect("example config");
        assert_eq!(c.store.backend, "embedded");
    }

    #[test]
    fn engine_threads_are_checked_and_reach_the_store() {
        let mut c = Config::default();
        assert_eq!(c.store_config().embedded.engine_threads, 1, "one flush/compaction thread by default");
        for bad in [0, 17] {
            c.store.engine_threads = bad;
            let e = c.validate().expect_err("out of range");
            assert!(format!("{e:#}").contains("store.engine_threads"), "{e:#}");
        }
        c.store.engine_threads = 3;
        c.validate().expect("in range");
        assert_eq!(c.store_config().embedded.engine_threads, 3);
    }

    #[test]
    fn own_likes_shards_are_checked() {
        let mut c = Config::default();
        assert_eq!(c.cache.own_likes_shards, 16);
        for bad in [0, 65_537] {
            c.cache.own_likes_shards = bad;
            let e = c.validate().expect_err("out of range");
            assert!(format!("{e:#}").contains("cache.own_likes_shards"), "{e:#}");
        }
        c.cache.own_likes_shards = 5;
        c.validate().expect("in range");
    }

    #[test]
    fn several_redis_servers_are_listed_once_each_and_not_beside_redis_url() {
        let mut c = Config::default();
        c.store.backend = "postgres".into();
        c.store.postgres_shards = vec!["postgres://db-0/l".into()];
        c.stream.nats_url = Some("nats://127.0.0.1".into());
        c.auth.secret = Some("a-secret-long-enough-for-the-checks-0123456789".into());
        let e = c.validate().expect_err("no Redis");
        assert!(format!("{e:#}").contains("needs cache.redis_url (or cache.redis_urls"), "{e:#}");
        c.cache.redis_urls = vec!["redis://cache-0:6379/0".into(), "redis://cache-1:6379/0".into()];
        c.validate().expect("two servers");
        c.cache.redis_url = Some("redis://127.0.0.1".into());
        let e = c.validate().expect_err("both");
        assert!(format!("{e:#}").contains("not both"), "{e:#}");
        c.cache.redis_url = None;
        c.cache.redis_urls.push("redis://cache-0:6379/0".into());
        let e = c.validate().expect_err("twice");
        assert!(format!("{e:#}").contains("lists a server twice"), "{e:#}");
    }

    #[test]
    fn replicas_may_not_outnumber_the_shards_and_the_lag_bound_is_positive() {
        let mut c = Config::default();
        c.store.backend = "postgres".into();
        c.store.postgres_shards = vec!["postgres://db-0/l".into(), "postgres://db-1/l".into()];
        c.cache.redis_url = Some("redis://127.0.0.1".into());
        c.stream.nats_url = Some("nats://127.0.0.1".into());
        c.auth.secret = Some("a-secret-long-enough-for-the-checks-0123456789".into());
        c.validate().expect("no replicas");
        assert_eq!(c.store.postgres_replica_max_lag_ms, 1000);
        c.store.postgres_replicas = vec!["postgres://db-0-replica/l".into()];
        c.validate().expect("a replica for shard 0 only");
        c.store.postgres_replicas = vec!["".into(), "postgres://db-1-replica/l".into()];
        c.validate().expect("a replica for shard 1 only");
        c.store.postgres_replicas.push("postgres://db-2-replica/l".into());
        let e = c.validate().expect_err("three replicas for two shards");
        assert!(format!("{e:#}").contains("store.postgres_replicas lists 3 URLs for 2 shards"), "{e:#}");
        c.store.postgres_replicas.pop();
        c.store.postgres_replica_max_lag_ms = 0;
        let e = c.validate().expect_err("no lag allowed");
        assert!(format!("{e:#}").contains("store.postgres_replica_max_lag_ms"), "{e:#}");
    }
}
