//! Reports of a comment: each reporter counts once.
//!
//! A comment's report count is the number of distinct people who reported it. A repeated
//! report (a retry, or the same person giving another reason) changes nothing, so the first
//! reason stands. Each engine reads, with the comment's reports held still (a lock, or a
//! transaction holding the count row), whether the reporter's row exists and the stored
//! count, calls [`report`], and writes the row and the new count only when the report counts.

/// What recording one report does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOutcome {
    /// The report is the reporter's first of this comment: store its row and the new count.
    pub counted: bool,
    /// The comment's distinct reports after this one.
    pub count: u32,
}

/// Record a report of a comment that has `count` distinct reports so far, by a reporter who
/// has (`already_reported`) or has not reported it before.
pub fn report(already_reported: bool, count: u32) -> ReportOutcome {
    if already_reported {
        ReportOutcome { counted: false, count }
    } else {
        ReportOutcome { counted: true, count: count.saturating_add(1) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_first_report_counts_and_a_repeat_does_not() {
        assert_eq!(report(false, 0), ReportOutcome { counted: true, count: 1 });
        assert_eq!(report(true, 1), ReportOutcome { counted: false, count: 1 });
        assert_eq!(report(false, 4), ReportOutcome { counted: true, count: 5 });
    }

    #[test]
    fn the_count_never_wraps() {
        assert_eq!(report(false, u32::MAX).count, u32::MAX);
    }

    proptest! {
        #[test]
        fn the_count_is_the_number_of_distinct_reporters(reporters in proptest::collection::vec(0u8..10, 0..50)) {
            let mut rows = BTreeSet::new();
            let mut count = 0;
            for r in reporters {
                let out = report(rows.contains(&r), count);
                prop_assert_eq!(out.counted, !rows.contains(&r));
                if out.counted {
                    rows.insert(r);
                }
                count = out.count;
                prop_assert_eq!(count as usize, rows.len());
            }
        }
    }
}
