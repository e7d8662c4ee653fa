//! The analytics export (`likewise export analytics`): per-post hourly aggregates of the event
//! log and of the hourly unique-viewer sketches, written as one Parquet file.
//!
//! - [`likewise_service::analytics`]: the time range, the rows and how events and sketches
//!   fold into them (shared with a live node's `GET /v1/analytics/hourly`);
//! - this module: the file's name, and the rows a node sends;
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
//! | `unique_viewers` | distinct viewers in the hour: exact up to 1,024, else estimated (HyperLogLog, about 0.8% error) |
//!
//! Summed over every hour since the post's first event, `likes - unlikes` is the post's like
//! rows and `comments_visible_delta` its visible comment count.

#[cfg(feature = "analytics")]
pub mod parquet;

pub use likewise_service::analytics::{HourRow, Span, rfc3339};
use time::OffsetDateTime;

/// The span of `--since` and `--until`.
pub fn span(since: &str, until: &str) -> anyhow::Result<Span> {
    Span::parse(since, until, ("--since", "--until")).map_err(anyhow::Error::msg)
}

/// The file name of the span's export: `likewise-analytics-<since>-<until>.parquet` with
/// compact UTC hours (`20261204T10Z`).
pub fn file_name(span: &Span) -> String {
    format!("likewise-analytics-{}-{}.parquet", compact(span.since_ms), compact(span.until_ms))
}

/// `20261204T10Z` for an hour's start.
fn compact(ms: u64) -> String {
    match OffsetDateTime::from_unix_timestamp((ms / 1000) as i64) {
        Ok(t) => format!("{:04}{:02}{:02}T{:02}Z", t.year(), u8::from(t.month()), t.day(), t.hour()),
        Err(_) => format!("{ms}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_named_by_its_hours() {
        let s = span("2026-12-04T10:59:59Z", "2026-12-04T12:30:00Z").expect("span");
        assert_eq!(file_name(&s), "likewise-analytics-20261204T10Z-20261204T12Z.parquet");
        assert!(
            span("2026-12-04T10:05:00Z", "2026-12-04T10:55:00Z")
                .expect_err("same hour")
                .to_string()
                .contains("same hour")
        );
    }
}
