//! Finished spans as an OTLP/HTTP request body: an `ExportTraceServiceRequest` in protobuf
//! (opentelemetry-proto's `collector/trace/v1`, `trace/v1`, `common/v1`, `resource/v1`).
//!
//! Written by hand: the message is small and stable (OTLP 1.x), and encoding it directly
//! keeps gRPC (tonic), prost and their generated code out of the build. Only the fields a
//! span of ours can have are written; field numbers are the proto's.

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::SpanData;
use std::time::{SystemTime, UNIX_EPOCH};

/// `span.flags`: the trace flags in bits 0-7, then whether the parent's remoteness is known
/// and whether it is remote.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// The request body for `spans`, all from one process (`resource` attributes) and one
/// instrumentation scope.
pub fn encode_request(resource: &[KeyValue], scope: &str, spans: &[SpanData]) -> Vec<u8> {
    let mut resource_spans = Vec::new();
    message(&mut resource_spans, 1, |r| {
        for kv in resource {
            message(r, 1, |b| key_value(b, kv));
        }
    });
    message(&mut resource_spans, 2, |ss| {
        message(ss, 1, |s| string(s, 1, scope));
        for span in spans {
            message(ss, 2, |b| encode_span(b, span));
        }
    });
    let mut out = Vec::with_capacity(resource_spans.len() + 8);
    bytes(&mut out, 1, &resource_spans);
    out
}

fn encode_span(b: &mut Vec<u8>, s: &SpanData) {
    let cx = &s.span_context;
    bytes(b, 1, &cx.trace_id().to_bytes());
    bytes(b, 2, &cx.span_id().to_bytes());
    if s.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        bytes(b, 4, &s.parent_span_id.to_bytes());
    }
    string(b, 5, &s.name);
    varint_field(b, 6, kind(&s.span_kind));
    fixed64(b, 7, nanos(s.start_time));
    fixed64(b, 8, nanos(s.end_time));
    for kv in &s.attributes {
        message(b, 9, |a| key_value(a, kv));
    }
    for e in s.events.iter() {
        message(b, 11, |m| {
            fixed64(m, 1, nanos(e.timestamp));
            string(m, 2, &e.name);
            for kv in &e.attributes {
                message(m, 3, |a| key_value(a, kv));
            }
        });
    }
    for l in s.links.iter() {
        message(b, 13, |m| {
            bytes(m, 1, &l.span_context.trace_id().to_bytes());
            bytes(m, 2, &l.span_context.span_id().to_bytes());
            for kv in &l.attributes {
                message(m, 4, |a| key_value(a, kv));
            }
            fixed32(m, 6, u32::from(l.span_context.trace_flags().to_u8()) | HAS_IS_REMOTE | IS_REMOTE);
        });
    }
    match &s.status {
        Status::Error { description } => message(b, 15, |m| {
            string(m, 2, description);
            varint_field(m, 3, 2);
        }),
        Status::Ok => message(b, 15, |m| varint_field(m, 3, 1)),
        _ => {}
    }
    let remote = if s.parent_span_is_remote { IS_REMOTE } else { 0 };
    fixed32(b, 16, u32::from(cx.trace_flags().to_u8()) | HAS_IS_REMOTE | remote);
}

/// `Span.SpanKind`.
fn kind(k: &SpanKind) -> u64 {
    match k {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// `KeyValue { key = 1; AnyValue value = 2 }`.
fn key_value(b: &mut Vec<u8>, kv: &KeyValue) {
    string(b, 1, kv.key.as_str());
    message(b, 2, |v| match &kv.value {
        Value::Bool(x) => varint_field(v, 2, u64::from(*x)),
        Value::I64(x) => varint_field(v, 3, *x as u64),
        Value::F64(x) => fixed64(v, 4, x.to_bits()),
        other => string(v, 1, &other.as_str()),
    });
}

fn tag(b: &mut Vec<u8>, field: u32, wire: u8) {
    varint(b, (u64::from(field) << 3) | u64::from(wire));
}

fn varint(b: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        b.push((v as u8) | 0x80);
        v >>= 7;
    }
    b.push(v as u8);
}

fn varint_field(b: &mut Vec<u8>, field: u32, v: u64) {
    tag(b, field, 0);
    varint(b, v);
}

fn fixed64(b: &mut Vec<u8>, field: u32, v: u64) {
    tag(b, field, 1);
    b.extend_from_slice(&v.to_le_bytes());
}

fn fixed32(b: &mut Vec<u8>, field: u32, v: u32) {
    tag(b, field, 5);
    b.extend_from_slice(&v.to_le_bytes());
}

fn bytes(b: &mut Vec<u8>, field: u32, v: &[u8]) {
    tag(b, field, 2);
    varint(b, v.len() as u64);
    b.extend_from_slice(v);
}

fn string(b: &mut Vec<u8>, field: u32, v: &str) {
    bytes(b, field, v.as_bytes());
}

/// A nested message: written to a scratch buffer first, for its length prefix.
fn message(b: &mut Vec<u8>, field: u32, fill: impl FnOnce(&mut Vec<u8>)) {
    let mut inner = Vec::new();
    fill(&mut inner);
    bytes(b, field, &inner);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_nested_lengths_follow_protobuf() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        let mut m = Vec::new();
        message(&mut m, 1, |x| string(x, 1, "service.name"));
        // field 1, wire type 2, length 14 = tag + length + 12 bytes.
        assert_eq!(&m[..4], &[0x0a, 14, 0x0a, 12]);
        let empty = encode_request(&[], "likewise", &[]);
        // One ResourceSpans: an empty Resource and a ScopeSpans naming the scope.
        assert_eq!(empty[0], 0x0a);
        assert!(empty.windows(8).any(|w| w == b"likewise"));
    }
}
