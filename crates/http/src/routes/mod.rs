//! Route handlers, one file per resource. Each handler parses at the edge, calls the
//! service, and maps the result; errors go through [`crate::error::ApiError`].

pub mod analytics;
pub mod comments;
pub mod events;
pub mod integrity;
pub mod likes;
pub mod me;
pub mod moderation;
pub mod notifications;
pub mod ops;
pub mod posts;
pub mod trending;
pub mod upstream;
pub mod views;
