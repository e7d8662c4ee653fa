// An example client of the Likewise API, written against the types that `openapi-typescript`
// generates from the served OpenAPI document (`npm run client:types`), and type-checked with
// `tsc --noEmit` in CI (`npm run client:check`).
//
// `calls` holds one call per operation, keyed by operation ID and typed with the document's
// `operations`: a route missing here, a call of a route that is gone, or any drift in a
// route's parameters, request body or response shape fails the type check.
import createClient from "openapi-fetch";
import type { components, operations, paths } from "./generated/likewise.js";

type Schemas = components["schemas"];

/** A client acting with `token` (`likewise token <user_id>`). */
export function likewise(baseUrl: string, token: string) {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
}

type Client = ReturnType<typeof likewise>;

/** What every error response carries (`{"error", "message"}`). */
function describe(e: Schemas["ErrorBody"]): string {
  return `${e.error}: ${e.message}`;
}

const post_id = "42";
const comment_id = "7260000000000001";
const user_id = "8";
const other_id = "9";

/** One call per operation of the API. */
export function calls(api: Client): { [Op in keyof operations]: () => Promise<unknown> } {
  return {
    // Operations.
    get_health: async () => {
      const { data } = await api.GET("/healthz");
      return data?.status satisfies string | undefined;
    },
    get_metrics: async () => {
      const { data } = await api.GET("/metrics", { parseAs: "text" });
      return data;
    },
    get_openapi: async () => {
      const { response } = await api.GET("/openapi.json");
      return response.status;
    },
    list_trending_posts: async () => {
      const { data, error } = await api.GET("/v1/trending", { params: { query: { window: "24h", limit: 10 } } });
      if (error) return describe(error);
      // likes is null where the post hides its count from this viewer.
      return data.items.map((i) => [i.post_id, i.likes, i.comments, i.score] satisfies [string, number | null | undefined, number, number | null | undefined]);
    },
    get_notification_settings: async () => {
      const { data, error } = await api.GET("/v1/me/notification-settings");
      if (error) return describe(error);
      return data.post_liked satisfies "all" | "following" | "off";
    },
    put_notification_settings: async () => {
      const body: Schemas["NotificationSettingsPut"] = { post_liked: "following", commented: "off" };
      const { data, error } = await api.PUT("/v1/me/notification-settings", { body });
      if (error) return describe(error);
      return [data.post_liked, data.comment_liked, data.commented, data.replied];
    },
    get_event_schema: async () => {
      const { response } = await api.GET("/v1/events/schema.json");
      return response.status;
    },

    // Upstream data (service role).
    put_user: async () => {
      const body: Schemas["UserPut"] = { username: "alice", verified: false };
      const { data, error } = await api.PUT("/v1/users/{user_id}", { params: { path: { user_id } }, body });
      if (error) return describe(error);
      return [data.user_id, data.username, data.verified] satisfies [string, string, boolean];
    },
    put_post: async () => {
      const body: Schemas["PostPut"] = { author_id: user_id, hide_like_count: false, comments: "followers" };
      const { data, error } = await api.PUT("/v1/posts/{post_id}", { params: { path: { post_id } }, body });
      if (error) return describe(error);
      return data.comments satisfies "everyone" | "followers" | "off";
    },
    follow_user: async () => {
      const { error } = await api.PUT("/v1/users/{user_id}/follows/{other_id}", {
        params: { path: { user_id, other_id } },
      });
      return error && describe(error);
    },
    unfollow_user: async () => {
      const { error } = await api.DELETE("/v1/users/{user_id}/follows/{other_id}", {
        params: { path: { user_id, other_id } },
      });
      return error && describe(error);
    },

    // Likes.
    like_post: async () => {
      const { data, error } = await api.PUT("/v1/posts/{post_id}/like", { params: { path: { post_id } } });
      if (error) return describe(error);
      return [data.liked, data.changed] satisfies [boolean, boolean];
    },
    unlike_post: async () => {
      const { data, error } = await api.DELETE("/v1/posts/{post_id}/like", { params: { path: { post_id } } });
      if (error) return describe(error);
      return [data.liked, data.changed] satisfies [boolean, boolean];
    },
    like_comment: async () => {
      const { data, error } = await api.PUT("/v1/comments/{comment_id}/like", {
        params: { path: { comment_id } },
      });
      if (error) return describe(error);
      return data.changed satisfies boolean;
    },
    unlike_comment: async () => {
      const { data, error } = await api.DELETE("/v1/comments/{comment_id}/like", {
        params: { path: { comment_id } },
      });
      if (error) return describe(error);
      return data.liked satisfies boolean;
    },
    list_post_likers: async () => {
      const { data, error } = await api.GET("/v1/posts/{post_id}/likers", {
        params: { path: { post_id }, query: { limit: 20 } },
      });
      if (error) return describe(error);
      const first = data.items[0];
      return [first?.user_id, first?.username, first?.liked_at, data.next_cursor] satisfies [
        string | undefined,
        string | undefined,
        string | undefined,
        string | null | undefined,
      ];
    },

    // Reading posts.
    get_posts: async () => {
      const { data, error } = await api.GET("/v1/posts", { params: { query: { ids: "42,43" } } });
      if (error) return describe(error);
      return data.posts.map((p) => [p.post_id, p.like_count, p.like_count_text, p.liked_by] as const);
    },
    get_post: async () => {
      const { data, error } = await api.GET("/v1/posts/{post_id}", { params: { path: { post_id } } });
      if (error) return describe(error);
      const count: number | null | undefined = data.like_count;
      return [count, data.comment_count, data.viewer_has_liked, data.comments_enabled, data.preview_comments];
    },

    // Comments.
    create_comment: async () => {
      const body: Schemas["CommentCreate"] = { text: "Lovely light in this one.", parent_id: comment_id };
      const { data, error } = await api.POST("/v1/posts/{post_id}/comments", {
        params: { path: { post_id } },
        headers: { "Idempotency-Key": "example-1" },
        body,
      });
      if (error) return describe(error);
      return [data.comment_id, data.parent_id, data.reply_to_user_id, data.status] satisfies [
        string,
        string | null | undefined,
        string | null | undefined,
        string,
      ];
    },
    list_comments: async () => {
      const { data, error } = await api.GET("/v1/posts/{post_id}/comments", {
        params: { path: { post_id }, query: { order: "newest", limit: 10 } },
      });
      if (error) return describe(error);
      return data.items.map((c) => [c.author_username, c.text, c.like_count, c.pinned] as const);
    },
    list_replies: async () => {
      const { data, error } = await api.GET("/v1/comments/{comment_id}/replies", {
        params: { path: { comment_id } },
      });
      if (error) return describe(error);
      return data.next_cursor;
    },
    delete_comment: async () => {
      const { error } = await api.DELETE("/v1/comments/{comment_id}", { params: { path: { comment_id } } });
      return error && describe(error);
    },
    pin_comment: async () => {
      const { error } = await api.PUT("/v1/posts/{post_id}/pins/{comment_id}", {
        params: { path: { post_id, comment_id } },
      });
      return error && describe(error);
    },
    unpin_comment: async () => {
      const { error } = await api.DELETE("/v1/posts/{post_id}/pins/{comment_id}", {
        params: { path: { post_id, comment_id } },
      });
      return error && describe(error);
    },
    approve_comment: async () => {
      const { data, error } = await api.POST("/v1/comments/{comment_id}/approve", {
        params: { path: { comment_id } },
      });
      if (error) return describe(error);
      return data.status;
    },
    appeal_comment: async () => {
      const body: Schemas["AppealCreate"] = { message: "it was a quotation" };
      const { error } = await api.POST("/v1/comments/{comment_id}/appeal", {
        params: { path: { comment_id } },
        body,
      });
      return error && describe(error);
    },
    report_comment: async () => {
      const body: Schemas["ReportCreate"] = { reason: "bullying" };
      const { error } = await api.POST("/v1/comments/{comment_id}/reports", {
        params: { path: { comment_id } },
        body,
      });
      return error && describe(error);
    },

    // Viewer settings and moderation.
    get_settings: async () => {
      const { data, error } = await api.GET("/v1/me/settings");
      if (error) return describe(error);
      return data.hide_like_counts satisfies boolean;
    },
    put_settings: async () => {
      const { data, error } = await api.PUT("/v1/me/settings", { body: { hide_like_counts: true } });
      if (error) return describe(error);
      return data.hide_like_counts satisfies boolean;
    },
    put_hidden_words: async () => {
      const { data, error } = await api.PUT("/v1/me/hidden-words", { body: { words: ["spoiler"] } });
      if (error) return describe(error);
      return data.words satisfies string[];
    },
    block_user: async () => {
      const { error } = await api.PUT("/v1/me/blocks/{user_id}", { params: { path: { user_id: other_id } } });
      return error && describe(error);
    },
    unblock_user: async () => {
      const { error } = await api.DELETE("/v1/me/blocks/{user_id}", { params: { path: { user_id: other_id } } });
      return error && describe(error);
    },
    restrict_user: async () => {
      const { error } = await api.PUT("/v1/me/restricts/{user_id}", { params: { path: { user_id: other_id } } });
      return error && describe(error);
    },
    unrestrict_user: async () => {
      const { error } = await api.DELETE("/v1/me/restricts/{user_id}", {
        params: { path: { user_id: other_id } },
      });
      return error && describe(error);
    },
    list_moderation_queue: async () => {
      const { data, error } = await api.GET("/v1/moderation/queue", { params: { query: { limit: 50 } } });
      if (error) return describe(error);
      return data.items.map((i) => [i.comment_id, i.status, i.report_count] as const);
    },
    list_integrity_flags: async () => {
      const { data, error } = await api.GET("/v1/moderation/integrity", { params: { query: { limit: 50 } } });
      if (error) return describe(error);
      return data.items.map((f) => [f.user_id, f.reason, f.likes_discounted] as const);
    },
    decide_integrity_flag: async () => {
      const body: Schemas["IntegrityDecisionBody"] = { action: "clear" };
      const { data, error } = await api.POST("/v1/moderation/integrity/{user_id}", {
        params: { path: { user_id: "1001" } },
        body,
      });
      // A user never flagged answers 404.
      return error ? describe(error) : data;
    },
    analytics_hourly: async () => {
      const { data, error } = await api.GET("/v1/analytics/hourly", {
        params: { query: { since: "2026-12-04", until: "2026-12-05T12:00:00Z" } },
      });
      if (error) return describe(error);
      return data.rows.map((r) => [r.post_id, r.hour, r.likes, r.comments, r.unique_viewers] as const);
    },
    moderate_comment: async () => {
      const body: Schemas["ModerationDecision"] = { action: "hide" };
      const { data, error } = await api.POST("/v1/moderation/comments/{comment_id}", {
        params: { path: { comment_id } },
        body,
      });
      if (error) return describe(error);
      return data;
    },

    // Notifications.
    list_notifications: async () => {
      const { data, error } = await api.GET("/v1/me/notifications");
      if (error) return describe(error);
      return data.items.map((n) => [n.id, n.kind, n.actors, n.actor_count, n.text, n.updated_at] as const);
    },
    stream_notifications: async () => {
      const { data, error } = await api.GET("/v1/me/notifications/stream", {
        headers: { "Last-Event-ID": "0.0" },
        parseAs: "stream",
      });
      if (error) return describe(error);
      return data?.getReader();
    },

    // Views and insights.
    record_post_view: async () => {
      const { error } = await api.POST("/v1/posts/{post_id}/views", { params: { path: { post_id } } });
      return error && describe(error);
    },
    get_post_insights: async () => {
      const { data, error } = await api.GET("/v1/posts/{post_id}/insights", { params: { path: { post_id } } });
      if (error) return describe(error);
      return [data.like_count, data.comment_count, data.unique_viewers] satisfies [number, number, number];
    },
  };
}
