//! Conformance of the integrity verdicts (`IntegrityStore`).

use crate::Stores;
use likewise_core::ids::UserId;
use likewise_core::integrity::{Decision, Verdict};

fn d(user: u64, verdict: Verdict, at_ms: u64) -> Decision {
    Decision { user: UserId(user), verdict, at_ms }
}

/// The latest verdict per account wins; verdicts page in `(time, account)` order, an
/// account's replaced verdict no longer appears, and IDs above 2^63 keep their order.
pub async fn integrity_verdicts_keep_the_latest_and_page_in_time_order(s: &Stores) {
    let st = &s.integrity;
    let big = u64::MAX - 1;
    assert_eq!(st.decisions(&[UserId(1)]).await.expect("none"), vec![None]);
    st.put_decision(d(1, Verdict::Confirm, 100)).await.expect("put");
    st.put_decision(d(2, Verdict::Confirm, 100)).await.expect("put");
    st.put_decision(d(big, Verdict::Clear, 100)).await.expect("put");
    st.put_decision(d(3, Verdict::Confirm, 50)).await.expect("put");
    st.put_decision(d(1, Verdict::Clear, 200)).await.expect("replace");
    assert_eq!(
        st.decisions(&[UserId(1), UserId(9), UserId(big)]).await.expect("get"),
        vec![Some(d(1, Verdict::Clear, 200)), None, Some(d(big, Verdict::Clear, 100))]
    );
    let all = st.decisions_after((0, UserId(0)), 10).await.expect("page");
    assert_eq!(
        all,
        vec![
            d(3, Verdict::Confirm, 50),
            d(2, Verdict::Confirm, 100),
            d(big, Verdict::Clear, 100),
            d(1, Verdict::Clear, 200)
        ]
    );
    let first = st.decisions_after((0, UserId(0)), 2).await.expect("page 1");
    let last = first.last().expect("two");
    let rest = st.decisions_after((last.at_ms, last.user), 10).await.expect("page 2");
    assert_eq!([first, rest].concat(), all, "pages neither repeat nor skip");
}
