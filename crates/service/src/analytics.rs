//! Per-post hourly aggregates of the event log and of the hourly unique-viewer sketches: the
//! rows of the analytics export (`likewise export analytics`, and
//! `GET /v1/analytics/hourly` on a live node).
//!
//! A row is one (post, UTC hour) that had any like, unlike, comment event or view. Summed over
//! every hour since the post's first event, `likes - unlikes` is the post's like rows and
//! `comments_visible_delta` its visible comment count.
//!
//! The log is read from its retained start up to its head as it was when the read began, so
//! a read on a live node (or of a live stream) ends although writes go on.

use likewise_core::error::{StoreError, StoreResult};
use likewise_core::event::{Event, EventKind};
use likewise_core::hourly_views::{self, HOUR_MS, hour_of};
use likewise_core::like::TargetKind;
use likewise_core::ports::{EventLog, HourlyViews, ViewStore};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Events read from the log per call.
const READ_BATCH: usize = 10_000;
/// Sketches read per call.
const VIEWS_PAGE: usize = 10_000;
/// The longest span one export covers: its rows are held in memory until it is written.
pub const MAX_SPAN_HOURS: u64 = 24 * 366;

/// The hours an export covers: `[since_ms, until_ms)`, both whole UTC hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The first hour's start (milliseconds since the Unix epoch).
    pub since_ms: u64,
    /// The end: the start of the first hour not covered.
    pub until_ms: u64,
}

/// Parse a time given as RFC 3339 (`2026-12-04T10:00:00Z`, any offset) or as a plain date
/// (`2026-12-04`, midnight UTC): milliseconds since the Unix epoch. `name` names the value
/// in the error (`--since`, `since`).
pub fn parse_time(name: &str, s: &str) -> Result<u64, String> {
    let s = s.trim();
    let parsed = if s.len() == 10 && s.as_bytes().get(4) == Some(&b'-') {
        OffsetDateTime::parse(&format!("{s}T00:00:00Z"), &Rfc3339)
    } else {
        OffsetDateTime::parse(s, &Rfc3339)
    };
    let t = parsed.map_err(|e| {
        format!(
            "{name} {s:?} is not a time: give RFC 3339 (2026-12-04T10:00:00Z) or a date (2026-12-04) ({e})"
        )
    })?;
    let ms = t.unix_timestamp_nanos() / 1_000_000;
    let ms = u64::try_from(ms).map_err(|_| format!("{name} {s:?} lies before 1970"))?;
    if ms > LAST_MS {
        return Err(format!("{name} {s:?} lies after the year 9999"));
    }
    Ok(ms)
}

/// 9999-12-31T23:59:59.999Z: the last instant RFC 3339 can write.
const LAST_MS: u64 = 253_402_300_799_999;

impl Span {
    /// The span from `since` to `until` (see [`parse_time`]), each truncated to its whole UTC
    /// hour. `names` are the two values' names in errors.
    pub fn parse(since: &str, until: &str, names: (&str, &str)) -> Result<Span, String> {
        let (s, u) = (parse_time(names.0, since)?, parse_time(names.1, until)?);
        if u <= s {
            return Err(format!("{} ({until}) must be later than {} ({since})", names.1, names.0));
        }
        let span = Span { since_ms: hour_of(s), until_ms: hour_of(u) };
        if span.until_ms <= span.since_ms {
            return Err(format!(
                "{} {since} and {} {until} lie in the same hour: the export covers whole UTC hours \
                 [since, until) truncated to the hour, so give an {} at least in the next hour",
                names.0, names.1, names.1
            ));
        }
        if (span.until_ms - span.since_ms) / HOUR_MS > MAX_SPAN_HOURS {
            return Err(format!(
                "{} to {} spans more than {MAX_SPAN_HOURS} hours (366 days): export it in parts",
                names.0, names.1
            ));
        }
        Ok(span)
    }

    /// Does the span cover this instant?
    pub fn covers(&self, ts_ms: u64) -> bool {
        (self.since_ms..self.until_ms).contains(&ts_ms)
    }
}

/// RFC 3339 of an instant (whole seconds or finer, UTC).
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
    pub fn add_views(&mut self, v: &HourlyViews) -> StoreResult<()> {
        if !self.span.covers(v.hour_ms) || !v.hour_ms.is_multiple_of(HOUR_MS) {
            return Ok(());
        }
        let n = hourly_views::estimate(&v.sketch).map_err(|e| StoreError::Corrupt {
            keyspace: "hourly_views",
            detail: format!("post {} at {}: {e}", v.post.0, rfc3339(v.hour_ms)),
        })?;
        self.row(v.hour_ms, v.post.0).unique_viewers = i64::try_from(n).unwrap_or(i64::MAX);
        Ok(())
    }

    /// The rows, sorted by hour, then post.
    pub fn into_rows(self) -> Vec<HourRow> {
        self.rows.into_values().collect()
    }
}

/// An export's rows and what the log it read retained.
#[derive(Debug)]
pub struct Report {
    /// Sorted by hour, then post.
    pub rows: Vec<HourRow>,
    /// When the oldest retained event was written, if the log had been truncated (events
    /// before it are gone: its hour and the hours before it are incomplete). `None`: complete from the first
    /// event ever written, or nothing retained at all (see `nothing_retained`).
    pub retained_from_ms: Option<u64>,
    /// The log had events once but retains none: likes, unlikes and comments are missing.
    pub nothing_retained: bool,
}

impl Report {
    /// The warning an export prints about the hours its log no longer covers, if any.
    pub fn warning(&self, span: &Span) -> Option<String> {
        match self.retained_from_ms {
            Some(ts) if ts > span.since_ms => Some(format!(
                "the event log retains events from {} on (aggregator.retain_events); likes, unlikes and \
                 comments before it are missing from the export (the hours before {} and part of that \
                 hour)",
                rfc3339(ts),
                rfc3339(hour_of(ts))
            )),
            _ if self.nothing_retained => Some(
                "the event log retains no events (aggregator.retain_events); the export holds unique \
                 viewers only"
                    .into(),
            ),
            _ => None,
        }
    }
}

/// Read `events` from its retained start up to its head of now, and the span's hourly view
/// sketches, into the span's rows. `progress(done, total)` is told the events read so far.
/// `ack` says whether to acknowledge what was read (a stream consumer must, or the server
/// stops delivering; the embedded log keeps no position for this reader).
pub async fn hourly(
    events: &dyn EventLog,
    views: &dyn ViewStore,
    span: Span,
    ack: bool,
    mut progress: impl FnMut(u64, u64),
) -> StoreResult<Report> {
    let mut agg = Aggregate::new(span);
    let head = events.head().await?;
    let (mut after, mut first) = (0u64, None);
    while after < head {
        let batch = events.read_after(after, READ_BATCH).await?;
        let Some(last) = batch.last() else { break };
        after = last.seq;
        first = first.or(batch.first().map(|e| (e.seq, e.ts_ms)));
        for e in batch.iter().filter(|e| e.seq <= head) {
            agg.add_event(e);
        }
        if ack {
            events.committed(after).await?;
        }
        // Counted from the oldest retained event: a truncated log has fewer to read.
        let from = first.map_or(1, |(seq, _)| seq);
        progress(after.min(head) + 1 - from, (head + 1).saturating_sub(from));
    }
    let mut page = None;
    loop {
        let views = views.hourly_views(span.since_ms, span.until_ms, page, VIEWS_PAGE).await?;
        let Some(last) = views.last() else { break };
        page = Some((last.hour_ms, last.post));
        for v in &views {
            agg.add_views(v)?;
        }
    }
    Ok(Report {
        rows: agg.into_rows(),
        retained_from_ms: first.filter(|(seq, _)| *seq > 1).map(|(_, ts)| ts),
        nothing_retained: first.is_none() && head > 0,
    })
}

#[cfg(test)]
mod tests;
