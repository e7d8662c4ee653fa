//! NATS over TLS with credentials: a `nats-server` with JetStream started by each test (TLS,
//! certificates made for the test, a user and password or a token). Fails, never skips,
//! without nats-server or openssl.

use super::*;
use crate::stream::JetStream;
use crate::stream::bus::NatsBus;
use crate::tls::testing::{NATS_PASSWORD, NATS_USER, TestServer};
use likewise_core::event::{Event, pack};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::Target;
use likewise_core::ports::EventLog;
use likewise_core::ports::cluster::{
    Broadcast, Bus, BusMessage, EventStream, Invalidation, OutboxRow, Scope,
};

fn options(server: &TestServer, user_info: &str) -> StreamOptions {
    StreamOptions {
        url: format!("tls://{user_info}localhost:{}", server.port),
        ca_file: Some(server.ca.clone()),
        prefix: format!("lwtls_{:016x}", rand::random::<u64>()),
        ..Default::default()
    }
}

fn password() -> String {
    format!("{NATS_USER}:{NATS_PASSWORD}@")
}

async fn connect_err(opts: &StreamOptions) -> String {
    match JetStream::connect(opts).await {
        Ok(_) => panic!("connected with {opts:?}"),
        Err(e) => e.to_string(),
    }
}

/// An outbox row of `n` likes of `post` by users `first..first + n`.
fn row(seq: u64, post: u64, first: u64, n: u64) -> OutboxRow {
    let events: Vec<Event> = (first..first + n)
        .map(|u| Event::like(0, true, Target::post(post), UserId(9), UserId(u), 0, post))
        .collect();
    OutboxRow { seq, part: (post % crate::stream::PARTITIONS) as u16, body: pack(&events) }
}

/// Read `log` past `after` until `want` events came (a fetch returns what has arrived).
async fn read(log: &dyn EventLog, after: u64, want: usize) -> Vec<Event> {
    let mut got: Vec<Event> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while got.len() < want {
        assert!(tokio::time::Instant::now() < deadline, "only {} of {want} events came", got.len());
        let from = got.last().map_or(after, |e| e.seq);
        got.extend(log.read_after(from, 100).await.expect("read"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_the_consumers_and_the_bus_work_over_tls_with_a_user_and_password() {
    let server = TestServer::nats_with_password();
    let js = JetStream::connect(&options(&server, &password())).await.expect("tls:// with user and password");

    // The relay's publishes: two shards' rows; a re-publish (a relay restarted before its
    // bookkeeping) is answered with the first sequences.
    let rows0 = [row(1, 10, 100, 3), row(2, 11, 200, 2)];
    let seqs = js.publish(0, &rows0).await.expect("publish shard 0");
    assert_eq!(js.publish(0, &rows0).await.expect("re-publish"), seqs, "duplicates are dropped");
    js.publish(1, &[row(1, 13, 300, 1)]).await.expect("publish shard 1");
    assert_eq!(js.head().await.expect("head"), 3);

    // A shard's consumer (the aggregator's) and one of every shard (the notifier's).
    let shard0 = js.consumer("agg_0", Scope::Shard(0), 0).await.expect("consumer");
    let got = read(shard0.as_ref(), 0, 5).await;
    let actors: Vec<u64> = got.iter().map(|e| e.actor.0).collect();
    assert_eq!(actors, vec![100, 101, 102, 200, 201]);
    let last = got.last().expect("events").seq;
    shard0.committed(last).await.expect("commit");
    let all = js.consumer("notifier", Scope::All, 0).await.expect("consumer");
    assert_eq!(read(all.as_ref(), 0, 6).await.len(), 6);
    // A consumer re-created at its committed offset reads only what came after it.
    js.publish(0, &[row(3, 10, 400, 1)]).await.expect("publish");
    let again = js.consumer("agg_0", Scope::Shard(0), last).await.expect("consumer");
    let after: Vec<u64> = read(again.as_ref(), last, 1).await.iter().map(|e| e.actor.0).collect();
    assert_eq!(after, vec![400]);

    // The cluster bus between two nodes on their own connections.
    let other = JetStream::connect(&options(&server, &password())).await.expect("second node");
    let a = NatsBus::new(js.client.clone(), js.prefix.clone(), 1);
    let b = NatsBus::new(other.client.clone(), js.prefix.clone(), 2);
    let mut inbox = b.subscribe().await.expect("subscribe");
    other.client.flush().await.expect("flush");
    // The bus is fire and forget: send again until one arrives (on a loaded machine the
    // subscription can take a moment to reach the server's routing).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let msg = loop {
        a.invalidate(Invalidation::Post(PostId(10)));
        if let Ok(msg) = tokio::time::timeout(Duration::from_millis(500), inbox.recv()).await {
            break msg;
        }
        assert!(tokio::time::Instant::now() < deadline, "no bus message over TLS in 20 s");
    };
    assert_eq!(msg, Some(BusMessage::Invalidate(Invalidation::Post(PostId(10)))));

    js.delete().await.expect("delete stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_in_the_url_is_accepted_and_wrong_credentials_say_so() {
    let server = TestServer::nats_with_token("t0ken-s3cret");
    let js = JetStream::connect(&options(&server, "t0ken-s3cret@")).await.expect("tls:// with a token");
    js.delete().await.expect("delete stream");

    let e = connect_err(&options(&server, "not-the-token@")).await;
    assert!(e.contains("NATS refused the token"), "{e}");
    assert!(!e.contains("not-the-token"), "the token is never shown: {e}");
    let e = connect_err(&options(&server, "")).await;
    assert!(e.contains("requires credentials"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_or_an_untrusted_certificate_fails_with_a_clear_message() {
    let server = TestServer::nats_with_password();
    let e = connect_err(&options(&server, &format!("{NATS_USER}:wrong-pass@"))).await;
    assert!(e.contains(&format!("NATS refused the credentials for user {NATS_USER}")), "{e}");
    assert!(!e.contains("wrong-pass"), "{e}");

    let e = connect_err(&StreamOptions {
        ca_file: Some(server.other_ca.clone()),
        ..options(&server, &password())
    })
    .await;
    assert!(e.contains("TLS to NATS") && e.to_lowercase().contains("unknownissuer"), "{e}");
    let url = format!("tls://{}127.0.0.1:{}", password(), server.port);
    let e = connect_err(&StreamOptions { url, ..options(&server, "") }).await;
    assert!(e.contains("TLS to NATS") && e.contains("not valid for name"), "the host name is checked: {e}");
    // Without a CA file the system's roots are used: they do not know the test's CA.
    let e = connect_err(&StreamOptions { ca_file: None, ..options(&server, &password()) }).await;
    assert!(e.to_lowercase().contains("unknownissuer"), "{e}");
    assert!(!e.contains(NATS_PASSWORD), "{e}");
}

#[test]
fn credentials_are_taken_out_of_the_urls() {
    let (addrs, auth) = servers("tls://app:p%40ss@nats1:4222, tls://app:p%40ss@nats2:4222").expect("parse");
    assert_eq!(auth, Auth::UserPassword("app".into(), "p@ss".into()));
    let bare: Vec<String> = addrs.into_iter().map(|a| a.into_inner().to_string()).collect();
    assert_eq!(bare, vec!["tls://nats1:4222", "tls://nats2:4222"]);
    assert_eq!(servers("nats://tok@nats:4222").expect("parse").1, Auth::Token("tok".into()));
    assert_eq!(servers("nats://127.0.0.1:4222").expect("parse").1, Auth::None);
    let e = servers("tls://a:b@n1:4222,tls://c:d@n2:4222").expect_err("two users");
    assert!(e.contains("different credentials") && !e.contains(":b@") && !e.contains(":d@"), "{e}");
}

#[test]
fn urls_are_shown_without_their_credentials() {
    assert_eq!(redact("tls://app:s3cret@nats:4222"), "tls://app:***@nats:4222");
    assert_eq!(redact("tls://t0ken@nats:4222,nats://n2:4222"), "tls://***@nats:4222,nats://n2:4222");
    let opts = StreamOptions { url: "tls://t0ken@nats:4222".into(), ..Default::default() };
    assert!(!format!("{opts:?}").contains("t0ken"));
}

/// A signed NATS JWT: `claims` (with `nats`) about `subject`, issued by `issuer`.
fn jwt(issuer: &nkeys::KeyPair, subject: &str, name: &str, nats: serde_json::Value) -> String {
    use base64::Engine;
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs();
    let claims = serde_json::json!({
        "jti": format!("{:032X}", rand::random::<u128>()),
        "iat": now,
        "iss": issuer.public_key(),
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    let head = b64(br#"{"typ":"JWT","alg":"ed25519-nkey"}"#);
    let signed = format!("{head}.{}", b64(claims.to_string().as_bytes()));
    let sig = issuer.sign(signed.as_bytes()).expect("sign");
    format!("{signed}.{}", b64(&sig))
}

/// An operator, an account with JetStream and a user of it, as `nsc` would make them: the
/// server's configuration lines and files, and the user's `.creds` text.
fn operator_world() -> (String, Vec<(&'static str, String)>, String) {
    let (operator, system, account, user) = (
        nkeys::KeyPair::new_operator(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_account(),
        nkeys::KeyPair::new_user(),
    );
    // JetStream needs a system account.
    let op = jwt(
        &operator,
        &operator.public_key(),
        "op",
        serde_json::json!({"type": "operator", "version": 2, "system_account": system.public_key()}),
    );
    let unlimited = serde_json::json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
        "conn": -1, "leaf": -1, "mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1,
    });
    let sys =
        jwt(&operator, &system.public_key(), "SYS", serde_json::json!({"type": "account", "version": 2}));
    let acc = jwt(
        &operator,
        &account.public_key(),
        "likewise",
        serde_json::json!({"limits": unlimited, "type": "account", "version": 2}),
    );
    let usr = jwt(
        &account,
        &user.public_key(),
        "node",
        serde_json::json!({"pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2}),
    );
    let conf = format!(
        "operator: \"op.jwt\"\nsystem_account: {sp}\nresolver: MEMORY\n\
         resolver_preload: {{\n  {sp}: \"{sys}\"\n  {ap}: \"{acc}\"\n}}",
        sp = system.public_key(),
        ap = account.public_key()
    );
    let creds = format!(
        "-----BEGIN NATS USER JWT-----\n{usr}\n------END NATS USER JWT------\n\n\
         -----BEGIN USER NKEY SEED-----\n{}\n------END USER NKEY SEED------\n",
        user.seed().expect("seed")
    );
    (conf, vec![("op.jwt", op)], creds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_nkey_jwt_creds_file_logs_in_and_the_stream_works() {
    let (conf, files, creds) = operator_world();
    let files: Vec<(&str, &str)> = files.iter().map(|(n, t)| (*n, t.as_str())).collect();
    let server = TestServer::nats_configured(&conf, &files);
    let creds_file = server.dir().join("node.creds");
    std::fs::write(&creds_file, creds).expect("write creds");

    let opts = StreamOptions { creds_file: Some(creds_file.clone()), ..options(&server, "") };
    let js = JetStream::connect(&opts).await.expect("tls:// with a creds file");
    js.publish(0, &[row(1, 10, 100, 2)]).await.expect("publish");
    let log = js.consumer("agg_0", Scope::Shard(0), 0).await.expect("consumer");
    assert_eq!(read(log.as_ref(), 0, 2).await.len(), 2);
    js.delete().await.expect("delete stream");

    // Another operator's user is refused, with the file named.
    let (_, _, stranger) = operator_world();
    let other = server.dir().join("stranger.creds");
    std::fs::write(&other, stranger).expect("write creds");
    let e = connect_err(&StreamOptions { creds_file: Some(other), ..options(&server, "") }).await;
    assert!(
        e.contains("NATS refused the credentials of stream.nats_creds_file") && e.contains("stranger.creds"),
        "{e}"
    );
    let e =
        connect_err(&StreamOptions { creds_file: Some(creds_file), ..options(&server, &password()) }).await;
    assert!(e.contains("give one"), "{e}");
}
