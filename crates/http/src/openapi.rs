//! The OpenAPI 3 document, generated from the handlers' annotations.

use crate::{dto, error, routes};
use utoipa::OpenApi;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};

#[derive(OpenApi)]
#[openapi(
    info(title = "Likewise", description = "Likes, counts and feed hydration for a social platform."),
    paths(
        routes::ops::healthz, routes::ops::metrics, routes::ops::openapi,
        routes::upstream::put_user, routes::upstream::put_post, routes::upstream::follow, routes::upstream::unfollow,
        routes::likes::like, routes::likes::unlike, routes::likes::likers,
        routes::posts::posts, routes::posts::post, routes::views::view, routes::views::insights,
        routes::comments::create, routes::comments::list, routes::comments::replies, routes::comments::delete,
        routes::comments::like, routes::comments::unlike,
        routes::moderation::put_hidden_words, routes::moderation::block, routes::moderation::unblock,
        routes::moderation::restrict, routes::moderation::unrestrict, routes::moderation::report,
        routes::moderation::approve, routes::moderation::pin, routes::moderation::unpin,
        routes::moderation::queue, routes::moderation::decide,
        routes::me::put_settings, routes::me::get_settings,
        routes::notifications::inbox, routes::notifications::stream,
    ),
    components(schemas(error::ErrorBody, dto::LikeResponse, dto::PostViewDto, dto::PostsResponse, dto::CommentDto,
        dto::LikerDto, dto::LikersPage, dto::UserPut, dto::PostPut, dto::PostRecord, dto::UserRecord,
        dto::SettingsDto, dto::Health, dto::CommentsSetting, dto::CommentCreate, dto::CommentsPage, dto::HiddenWordsDto,
        dto::ReportReasonDto, dto::ReportCreate, dto::ModerationAction, dto::ModerationDecision, dto::QueueItem,
        dto::QueuePage, dto::InsightsDto, dto::NotificationDto, dto::NotificationsPage)),
    modifiers(&Bearer),
)]
struct ApiDoc;

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let mut http = Http::new(HttpAuthScheme::Bearer);
        http.bearer_format = Some("JWT".into());
        components.add_security_scheme("bearer", SecurityScheme::Http(http));
    }
}

/// The document served at `/openapi.json`.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
