//! `bench hot-post --url ... --client wrk`: the three HTTP phases driven by wrk, the client
//! the performance target names ("the same server's /healthz rate measured with wrk").
//!
//! Why a second client: on this 2-core machine the client shares the CPU with the server, so
//! a heavier client lowers every rate it measures. With the built-in (hyper) client the like
//! phase and the /healthz phase each pay that client; comparing likes measured one way with
//! /healthz measured by wrk would compare two different clients. Here every phase is wrk
//! (2 threads, the same connections): plain wrk for /healthz, and small Lua scripts for the
//! like and feed phases whose requests (each liker's own token) are built once in `init`,
//! so wrk's per-request cost stays close to its plain mode.
//!
//! Exactness: wrk cannot say which like requests the server processed when it stops (some are
//! in flight), so the check is the product's invariant itself: the post's `like_count`
//! equals its like rows, counted by paging `/v1/posts/{id}/likers`, and lies between the
//! responses wrk counted and the requests it generated.

use crate::hot_post::{HotPostArgs, Remote, print_ratios};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

/// Likes: each thread takes every `nthreads`-th token; out of tokens, the thread stops.
const LIKE_LUA: &str = r#"
local counter = 0
local threads = {}
function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end
function init(args)
  local path, nthreads, file = args[1], tonumber(args[2]), args[3]
  reqs, idx, sent = {}, 0, 0
  local i = 0
  for line in io.lines(file) do
    if i % nthreads == tid then
      reqs[#reqs + 1] = wrk.format("PUT", path, {["Authorization"] = "Bearer " .. line})
    end
    i = i + 1
  end
end
function request()
  idx = idx + 1
  local r = reqs[idx]
  if r == nil then
    wrk.thread:stop()
    return wrk.format("GET", "/healthz")
  end
  sent = sent + 1
  return r
end
function done(summary, latency, requests)
  local generated = 0
  for _, t in ipairs(threads) do generated = generated + t:get("sent") end
  io.write(string.format("likewise-generated %d\n", generated))
end
"#;

/// Feed pages: the viewers' tokens in turn.
const FEED_LUA: &str = r#"
function init(args)
  local path, file = args[1], args[2]
  reqs, idx = {}, 0
  for line in io.lines(file) do
    reqs[#reqs + 1] = wrk.format("GET", path, {["Authorization"] = "Bearer " .. line})
  end
end
function request()
  idx = idx % #reqs + 1
  return reqs[idx]
end
"#;

/// What one wrk run reported.
#[derive(Debug, Default, PartialEq)]
struct WrkReport {
    rate: f64,
    completed: u64,
    non_2xx: u64,
    errors: u64,
    generated: Option<u64>,
    latency: String,
}

fn parse(out: &str) -> anyhow::Result<WrkReport> {
    let mut r = WrkReport::default();
    let mut pct = Vec::new();
    for line in out.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Requests/sec:", v] => r.rate = v.parse()?,
            [n, "requests", "in", ..] => r.completed = n.parse()?,
            ["Non-2xx", "or", "3xx", "responses:", n] => r.non_2xx = n.parse()?,
            ["Socket", "errors:", rest @ ..] => {
                r.errors = rest.iter().filter_map(|w| w.trim_end_matches(',').parse::<u64>().ok()).sum()
            }
            ["likewise-generated", n] => r.generated = Some(n.parse()?),
            [p @ ("50%" | "90%" | "99%"), v] => pct.push(format!("p{} {v}", p.trim_end_matches('%'))),
            _ => {}
        }
    }
    anyhow::ensure!(r.rate > 0.0 && r.completed > 0, "could not read wrk's report:\n{out}");
    r.latency = pct.join("  ");
    Ok(r)
}

/// Run wrk for `secs` seconds with `conns` connections on 2 threads; `script` with its args.
fn run(url: &str, conns: usize, secs: u64, script: Option<(&Path, &[String])>) -> anyhow::Result<WrkReport> {
    let mut cmd = std::process::Command::new("wrk");
    cmd.args(["-t2", &format!("-c{}", conns.max(2)), &format!("-d{secs}s"), "--latency"]);
    if let Some((path, _)) = script {
        cmd.arg("-s").arg(path);
    }
    cmd.arg(url);
    if let Some((_, args)) = script {
        cmd.arg("--").args(args);
    }
    let out = cmd.output().map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            anyhow::anyhow!("wrk is not installed (apt-get install wrk), or use --client builtin")
        }
        _ => anyhow::anyhow!("running wrk: {e}"),
    })?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "wrk failed: {}{}", text, String::from_utf8_lossy(&out.stderr));
    parse(&text)
}

/// The tokens of the run's first `n` users, one a line, for the Lua scripts to read.
fn write_tokens(path: &Path, setup: &Remote, n: u64) -> anyhow::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for i in 0..n {
        writeln!(f, "{}", setup.mint(setup.user_base + i, false)?)?;
    }
    f.flush()?;
    Ok(())
}

/// The hot-post run with wrk as the client (see the module documentation).
pub async fn hot_post(base: &str, a: &HotPostArgs) -> anyhow::Result<()> {
    let setup = Remote::prepare(base, a).await?;
    let base = setup.client.base();
    let dir = tempfile::tempdir()?;
    let (like_lua, feed_lua) = (dir.path().join("like.lua"), dir.path().join("feed.lua"));
    std::fs::write(&like_lua, LIKE_LUA)?;
    std::fs::write(&feed_lua, FEED_LUA)?;
    let (likers_file, viewers_file) = (dir.path().join("likers.txt"), dir.path().join("viewers.txt"));
    write_tokens(&likers_file, &setup, a.likers)?;
    write_tokens(&viewers_file, &setup, 1000)?;
    let secs = a.phase_seconds;

    let health = run(&format!("{base}/healthz"), a.concurrency, secs, None)?;
    println!("/healthz (wrk): {:.0} req/s   latency {}", health.rate, health.latency);

    let args = [format!("/v1/posts/{}/like", setup.hot), "2".to_string(), likers_file.display().to_string()];
    let likes = run(base, a.concurrency, secs, Some((&like_lua, &args)))?;
    let last_write = Instant::now();
    let generated = likes.generated.unwrap_or(0);
    println!(
        "likes on one post (wrk): {:.0} likes/s   latency {}   ({} answered, {} generated, {} not 2xx, {} socket errors)",
        likes.rate, likes.latency, likes.completed, generated, likes.non_2xx, likes.errors
    );
    if generated >= a.likers {
        println!(
            "note: every liker was used before the phase ended, so likes/s is understated; raise --likers"
        );
    }

    let converged = settle(&setup, last_write).await?;

    let args = [setup.feed_path(), viewers_file.display().to_string()];
    let feed = run(base, a.concurrency, secs, Some((&feed_lua, &args)))?;
    println!("20-post feed pages (wrk): {:.0} pages/s   latency {}", feed.rate, feed.latency);
    print_ratios(likes.rate, feed.rate, health.rate);
    anyhow::ensure!(likes.non_2xx == 0 && feed.non_2xx == 0, "some requests were not answered 2xx");
    let Some((rows, after)) = converged else {
        anyhow::bail!("like_count did NOT settle at the like rows within 30 s");
    };
    println!(
        "count converged to the like rows ({rows}) within {:.0} ms of the last like",
        after.as_secs_f64() * 1e3
    );
    anyhow::ensure!(
        likes.completed <= rows && rows <= generated,
        "rows {rows} outside [answered {}, generated {generated}]",
        likes.completed
    );
    println!("check: final count == like rows, answered <= rows <= generated  OK");
    Ok(())
}

/// Wait up to 30 s after `last_write` for the count to settle at the like rows; the rows and
/// how long it took.
async fn settle(setup: &Remote, last_write: Instant) -> anyhow::Result<Option<(u64, Duration)>> {
    let author = setup.mint(setup.author, false)?;
    loop {
        let rows = setup.client.likers(setup.hot, &author).await?.len() as u64;
        let count = setup.client.like_count(setup.hot, &author).await?;
        if count == Some(rows) {
            return Ok(Some((rows, last_write.elapsed())));
        }
        if last_write.elapsed() > Duration::from_secs(30) {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrks_report() {
        let out = "Running 5s test @ http://127.0.0.1:1\n  2 threads and 64 connections\n\
            \x20 Latency Distribution\n     50%    1.20ms\n     75%    2.00ms\n     90%    3.10ms\n     99%   12.50ms\n\
            \x20 199942 requests in 5.00s, 26.12MB read\n\
            \x20 Socket errors: connect 0, read 3, write 1, timeout 2\n\
            \x20 Non-2xx or 3xx responses: 7\nRequests/sec:  39988.40\nTransfer/sec:      5.22MB\n\
            likewise-generated 200000\n";
        let r = parse(out).expect("parse");
        assert_eq!((r.completed, r.non_2xx, r.errors, r.generated), (199_942, 7, 6, Some(200_000)));
        assert!((r.rate - 39_988.40).abs() < 1e-6);
        assert_eq!(r.latency, "p50 1.20ms  p90 3.10ms  p99 12.50ms");
        assert!(parse("wrk: connection refused").is_err());
    }
}
