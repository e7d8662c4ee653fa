//! Reports of a comment: each reporter counts once, and an approval is not undone by the
//! reports it already weighed.
//!
//! A comment's report count is the number of distinct people who reported it. A repeated
//! report (a retry, or the same person giving another reason) changes nothing, so the first
//! reason stands. Each engine reads, with the comment's reports held still (a lock, or a
//! transaction holding the count row), whether the reporter's row exists, the stored count
//! and how many of those reports were already reviewed, calls [`report`], and writes the row
//! and the new count only when the report counts.
//!
//! When the post's author or a moderator approves a comment, every report so far counts as
//! reviewed (the engines record the count at that moment beside it): hiding the comment again
//! takes [`hides`]'s threshold of reporters who had not reported it before the approval.

/// What recording one report does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReportOutcome {
    /// The report is the reporter's first of this comment: store its row and the new count.
    pub counted: bool,
    /// The comment's distinct reports after this one.
    pub count: u32,
    /// Of those, the ones made after the comment was last approved.
    pub unreviewed: u32,
}

/// Record a report of a comment that has `count` distinct reports so far, `reviewed` of them
/// weighed by its last approval, by a reporter who has (`already_reported`) or has not
/// reported it before.
pub fn report(already_reported: bool, count: u32, reviewed: u32) -> ReportOutcome {
    let count = if already_reported { count } else { count.saturating_add(1) };
    ReportOutcome { counted: !already_reported, count, unreviewed: count.saturating_sub(reviewed) }
}

/// Does this report hide a comment that is visible now? Only a report that counted, and only
/// when the reports since the last approval reach `threshold`: a repeat changes nothing, and
/// an approved comment takes a fresh threshold of new reporters.
pub fn hides(outcome: &ReportOutcome, threshold: u32) -> bool {
    outcome.counted && outcome.unreviewed >= threshold
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn a_first_report_counts_and_a_repeat_does_not() {
        assert_eq!(report(false, 0, 0), ReportOutcome { counted: true, count: 1, unreviewed: 1 });
        assert_eq!(report(true, 1, 0), ReportOutcome { counted: false, count: 1, unreviewed: 1 });
        assert_eq!(report(false, 4, 0), ReportOutcome { counted: true, count: 5, unreviewed: 5 });
        assert!(hides(&report(false, 4, 0), 5));
        assert!(!hides(&report(true, 5, 0), 5), "a repeat never hides");
    }

    #[test]
    fn after_an_approval_it_takes_a_fresh_threshold_of_new_reporters() {
        assert!(!hides(&report(true, 5, 5), 5), "a repeat by one of the five");
        assert!(!hides(&report(false, 5, 5), 5), "one new reporter");
        assert_eq!(report(false, 9, 5), ReportOutcome { counted: true, count: 10, unreviewed: 5 });
        assert!(hides(&report(false, 9, 5), 5), "five new reporters");
    }

    #[test]
    fn the_count_never_wraps() {
        assert_eq!(report(false, u32::MAX, 0).count, u32::MAX);
        assert_eq!(report(false, 0, 3).unreviewed, 0, "a reviewed count above the count never wraps");
    }

    proptest! {
        #[test]
        fn the_count_is_the_number_of_distinct_reporters(reporters in proptest::collection::vec(0u8..10, 0..50)) {
            let mut rows = BTreeSet::new();
            let mut count = 0;
            for r in reporters {
                let out = report(rows.contains(&r), count, 0);
                prop_assert_eq!(out.counted, !rows.contains(&r));
                if out.counted {
                    rows.insert(r);
                }
                count = out.count;
                prop_assert_eq!(count as usize, rows.len());
            }
        }

        /// Reports and approvals in any order: a comment is hidden exactly when a reporter new
        /// to it is the threshold-th since the last approval, never by a repeat.
        #[test]
        fn only_new_reporters_since_the_last_approval_hide_a_comment(
            ops in proptest::collection::vec(proptest::option::of(0u8..12), 0..80),
        ) {
            const THRESHOLD: u32 = 3;
            let (mut rows, mut count, mut reviewed) = (BTreeSet::new(), 0u32, 0u32);
            let mut since_approval = BTreeSet::new();
            let mut hidden = false;
            for op in ops {
                match op {
                    Some(r) => {
                        let out = report(rows.contains(&r), count, reviewed);
                        let fresh = !rows.contains(&r);
                        rows.insert(r);
                        if fresh {
                            since_approval.insert(r);
                        }
                        count = out.count;
                        let hide = hides(&out, THRESHOLD);
                        prop_assert_eq!(hide, fresh && since_approval.len() as u32 >= THRESHOLD);
                        prop_assert!(!hide || out.counted, "a repeat report hid the comment");
                        hidden |= hide;
                    }
                    // An approval (only of a hidden comment) weighs every report so far.
                    None if hidden => {
                        hidden = false;
                        reviewed = count;
                        since_approval.clear();
                    }
                    None => {}
                }
            }
        }
    }
}
