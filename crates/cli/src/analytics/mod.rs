//! The analytics export (`likewise export analytics`): per-post hourly aggregates of the event
//! log and of the hourly unique-viewer sketches, written as one Parquet file.
//!
//! - this module: the time range, the rows and how events and sketches fold into them;
//! - `parquet` (feature `analytics`): the file (schema, column writers, atomic rename).
//!
//! A row is one (post, UTC hour) that had any like, unlike, comment event or view:
//!
//! | column | meaning |
//! |---|---|
//! | `post_id` | the post (uint64) |
//! | `hour` | the hour's start (timestamp, milliseconds, UTC) |
//! | `likes` | `LikeCreated` events on the post itself |
//! | `unlikes` | `LikeRemoved` events on the post itself |
//! | `comments` | `CommentCreated` events on the post: every comment written, held ones too |
//! | `comments_visible_delta` | sum of the comment events' deltas: the net change of the post's visible comment count |
//! | `comment_likes` | `LikeCreated` events on the post's comments |
//! | `comment_unlikes` | `LikeRemoved` events on the post's comments |
//! | `unique_viewers` | estimated distinct viewers in the hour (HyperLogLog, about 0.8% error) |
//!
//! Summed over every hour since the post's first event, `likes - unlikes` is the post's like
//! rows and `comments_visible_delta` its visible comment count.

#[cfg(feature = "analytics")]
pub mod parquet;

use likewise_core::event::{Event, EventKind};
use likewise_core::hourly_views::{self, HOUR_MS, hour_of};
use likewise_core::like::TargetKind;
use likewise_core::ports::HourlyViews;
use std::collections::BTreeMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// The hours an export covers: `[since_ms, until_ms)`, both whole UTC hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first hour's start (milliseconds since the Unix epoch).
    pub since_ms: u64,
    /// The end: the start of the first hour not covered.
    pub until_ms: u64,
}

/// Parse a `--since`/`--until` value: RFC 3339 (`2026-12-04T10:00:00Z`, any offset) or a plain
/// date (`2026-12-04`, midnight UTC). Returns milliseconds since the Unix epoch.
pub fn parse_time(flag: &str, s: &str) -> anyhow::Result<u64> {
    let s = s.trim();
    let parsed = if s.len() == 10 && s.as_bytes().get(4) == Some(&b'-') {
        OffsetDateTime::parse(&format!("{s}T00:00:00Z"), &Rfc3339)
    } else {
        OffsetDateTime::parse(s, &Rfc3339)
    };
    let t = parsed.map_err(|e| {
        anyhow::anyhow!(
            "{flag} {s:?} is not a time: give RFC 3339 (2026-12-04T10:00:00Z) or a date (2026-12-04) ({e})"
        )
    })?;
    let ms = t.unix_timestamp_nanos() / 1_000_000;
    u64::try_from(ms).map_err(|_| anyhow::anyhow!("{flag} {s:?} lies before 1970"))
}

impl Span {
    /// The span of `--since` and `--until`, each truncated to its whole UTC hour.
    pub fn parse(since: &str, until: &str) -> anyhow::Result<Span> {
        let (s, u) = (parse_time("--since", since)?, parse_time("--until", until)?);
        anyhow::ensure!(u > s, "--until ({until}) must be later than --since ({since})");
        let span = Span { since_ms: hour_of(s), until_ms: hour_of(u) };
        anyhow::ensure!(
            span.until_ms > span.since_ms,
            "--since {since} and --until {until} lie in the same hour: the export covers whole UTC hours \
             [since, until) truncated to the hour, so give an --until at least in the next hour"
        );
        Ok(span)
    }

    /// Does the span cover this instant?
    pub fn covers(&self, ts_ms: u64) -> bool {
        (self.since_ms..self.until_ms).contains(&ts_ms)
    }

    /// The file name of the span's export: `likewise-analytics-<since>-<until>.parquet` with
    /// compact UTC hours (`20261204T10Z`).
    pub fn file_name(&self) -> String {
        format!("likewise-analytics-{}-{}.parquet", compact(self.since_ms), compact(self.until_ms))
    }
}

/// `20261204T10Z` for an hour's start.
fn compact(ms: u64) -> String {
    match OffsetDateTime::from_unix_timestamp((ms / 1000) as i64) {
        Ok(t) => format!("{:04}{:02}{:02}T{:02}Z", t.year(), u8::from(t.month()), t.day(), t.hour()),
        Err(_) => format!("{ms}"),
    }
}

/// RFC 3339 of an instant, for messages.
pub fn rfc3339(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&Rfc3339).ok())
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// One post in one hour.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HourRow {
    /// The post.
    pub post: u64,
    /// The hour's start (milliseconds since the Unix epoch).
    pub hour_ms: u64,
    /// Likes created on the post.
    pub likes: i64,
    /// Likes removed from the post.
    pub unlikes: i64,
    /// Comments created on the post (all, held ones too).
    pub comments: i64,
    /// Net change of the post's visible comment count.
    pub comments_visible_delta: i64,
    /// Likes created on the post's comments.
    pub comment_likes: i64,
    /// Likes removed from the post's comments.
    pub comment_unlikes: i64,
    /// Estimated distinct viewers.
    pub unique_viewers: i64,
}

/// The rows of an export, built from events and sketches in any order.
#[derive(Debug)]
pub struct Aggregate {
    span: Span,
    rows: BTreeMap<(u64, u64), HourRow>,
}

impl Aggregate {
    /// No rows yet.
    pub fn new(span: Span) -> Self {
        Aggregate { span, rows: BTreeMap::new() }
    }

    fn row(&mut self, hour_ms: u64, post: u64) -> &mut HourRow {
        self.rows.entry((hour_ms, post)).or_insert(HourRow { post, hour_ms, ..HourRow::default() })
    }

    /// Fold one event in (events outside the span are ignored).
    pub fn add_event(&mut self, e: &Event) {
        if !self.span.covers(e.ts_ms) {
            return;
        }
        let on_post = e.target.kind == TargetKind::Post;
        let row = self.row(hour_of(e.ts_ms), e.post);
        match e.kind {
            EventKind::LikeCreated if on_post => row.likes += 1,
            EventKind::LikeRemoved if on_post => row.unlikes += 1,
            EventKind::LikeCreated => row.comment_likes += 1,
            EventKind::LikeRemoved => row.comment_unlikes += 1,
            EventKind::CommentCreated => {
                row.comments += 1;
                row.comments_visible_delta += i64::from(e.delta);
            }
            EventKind::CommentStatusChanged | EventKind::CommentDeleted => {
                row.comments_visible_delta += i64::from(e.delta);
            }
        }
    }

    /// Set a post-hour's unique viewers from its stored sketch.
    pub fn add_views(&mut self, v: &HourlyViews) -> anyhow::Result<()> {
        if !self.span.covers(v.hour_ms) || !v.hour_ms.is_multiple_of(HOUR_MS) {
            return Ok(());
        }
        let n = hourly_views::estimate(&v.sketch)
            .map_err(|e| anyhow::anyhow!("post {} at {}: {e}", v.post.0, rfc3339(v.hour_ms)))?;
        self.row(v.hour_ms, v.post.0).unique_viewers = i64::try_from(n).unwrap_or(i64::MAX);
        Ok(())
    }

    /// The rows, sorted by hour, then post.
    pub fn into_rows(self) -> Vec<HourRow> {
        self.rows.into_values().collect()
    }
}

#[cfg(test)]
mod tests;
