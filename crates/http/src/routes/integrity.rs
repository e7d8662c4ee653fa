//! Integrity: accounts flagged as like farms or bot rings, and moderators' verdicts on them
//! (docs/api.md, "Trending and integrity"). Service role only.

use crate::AppState;
use crate::auth::Service;
use crate::dto::{
    IntegrityAction, IntegrityDecisionBody, IntegrityEvidence, IntegrityFlagDto, IntegrityPage,
    IntegrityReason, rfc3339_ms,
};
use crate::error::{ApiError, ApiResult};
use crate::extract::{JsonBody, PathParams, QueryParams};
use crate::paging::{PageQuery, parse_limit};
use axum::Json;
use axum::extract::State;
use likewise_core::ids::UserId;
use likewise_core::integrity::{Evidence, Reason, Verdict};
use likewise_service::integrity::FlagView;
use std::sync::Arc;

const INTEGRITY_CURSOR: u8 = 7;

fn to_dto(v: FlagView) -> IntegrityFlagDto {
    let evidence = match v.flag.evidence {
        Evidence::Ring { partners, shared_targets, span_ms, sample_partners } => IntegrityEvidence {
            partners: Some(partners),
            shared_targets: Some(shared_targets),
            span_seconds: Some(span_ms as f64 / 1_000.0),
            sample_partner_ids: Some(sample_partners.iter().map(u64::to_string).collect()),
            ..Default::default()
        },
        Evidence::Rate { likes, window_s, active_seconds } => IntegrityEvidence {
            likes: Some(likes),
            window_seconds: Some(window_s),
            active_seconds: Some(active_seconds),
            likes_per_minute: Some((f64::from(likes) * 60.0 / window_s.max(1) as f64 * 10.0).round() / 10.0),
            ..Default::default()
        },
    };
    IntegrityFlagDto {
        user_id: UserId(v.flag.user),
        reason: match v.flag.reason {
            Reason::LockstepRing => IntegrityReason::LockstepRing,
            Reason::NewAccountsRing => IntegrityReason::NewAccountsRing,
            Reason::InhumanRate => IntegrityReason::InhumanRate,
        },
        evidence,
        flagged_at: rfc3339_ms(v.flag.flagged_at_ms),
        likes_discounted: v.likes_discounted,
        decision: v.decision.map(|d| match d.verdict {
            Verdict::Confirm => IntegrityAction::Confirm,
            Verdict::Clear => IntegrityAction::Clear,
        }),
    }
}

/// Accounts flagged by the integrity consumer, newest first (service role).
#[utoipa::path(get, path = "/v1/moderation/integrity", operation_id = "list_integrity_flags", tag = "moderation",
    params(PageQuery),
    responses((status = 200, body = IntegrityPage), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn list(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    QueryParams(q): QueryParams<PageQuery>,
) -> ApiResult<Json<IntegrityPage>> {
    let limit = parse_limit(q.limit.as_deref())?;
    let after = match q.cursor.as_deref() {
        None => None,
        Some(c) => {
            let p = state.cursors.open(INTEGRITY_CURSOR, c)?;
            let a: [u8; 16] = p.as_slice().try_into().map_err(|_| ApiError::invalid("invalid cursor"))?;
            let (at, user) = a.split_at(8);
            let n = |b: &[u8]| {
                b.try_into().map(u64::from_be_bytes).map_err(|_| ApiError::invalid("invalid cursor"))
            };
            Some((n(at)?, n(user)?))
        }
    };
    let (items, next) = state.svc.integrity.list(after, limit).await?;
    Ok(Json(IntegrityPage {
        items: items.into_iter().map(to_dto).collect(),
        next_cursor: next.map(|(at, user)| {
            let mut p = at.to_be_bytes().to_vec();
            p.extend_from_slice(&user.to_be_bytes());
            state.cursors.seal(INTEGRITY_CURSOR, &p)
        }),
    }))
}

/// Confirm a flagged account as a farm or bot (its likes leave displayed counts when
/// `integrity.discount_flagged` is on), or clear it (service role).
#[utoipa::path(post, path = "/v1/moderation/integrity/{user_id}", operation_id = "decide_integrity_flag", tag = "moderation",
    params(("user_id" = String, Path)), request_body = IntegrityDecisionBody,
    responses((status = 200, body = IntegrityFlagDto), (status = 400, body = crate::error::ErrorBody),
        (status = 401, body = crate::error::ErrorBody), (status = 403, body = crate::error::ErrorBody),
        (status = 404, body = crate::error::ErrorBody), (status = 422, body = crate::error::ErrorBody)),
    security(("bearer" = [])))]
pub async fn decide(
    State(state): State<Arc<AppState>>,
    _svc: Service,
    PathParams(user): PathParams<UserId>,
    JsonBody(body): JsonBody<IntegrityDecisionBody>,
) -> ApiResult<Json<IntegrityFlagDto>> {
    let verdict = match body.action {
        IntegrityAction::Confirm => Verdict::Confirm,
        IntegrityAction::Clear => Verdict::Clear,
    };
    let v = state.svc.integrity.decide(user, verdict, likewise_service::now_ms()).await?;
    Ok(Json(to_dto(v)))
}
