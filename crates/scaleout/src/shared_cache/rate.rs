//! A shared rate limiter: GCRA (the "generic cell rate algorithm") in one Lua script, so the
//! check and the update are atomic and use Redis's clock, never a node's.

use super::{Redis, redis_err};
use async_trait::async_trait;
use likewise_core::StoreResult;
use likewise_core::ports::SharedRateLimiter;

/// KEYS[1]: the key. ARGV: emission interval (ms), burst. Returns -1 when allowed, else the
/// milliseconds until the next action would be.
const GCRA: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local interval = tonumber(ARGV[1])
local limit = interval * tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local new_tat = tat + interval
if new_tat - now > limit then return new_tat - now - limit end
redis.call('SET', KEYS[1], new_tat, 'PX', math.max(1, new_tat - now))
return -1
";

/// GCRA limits in Redis.
pub struct RedisRateLimiter {
    redis: Redis,
    script: redis::Script,
}

impl RedisRateLimiter {
    /// A limiter on `redis`.
    pub fn new(redis: Redis) -> Self {
        RedisRateLimiter { redis, script: redis::Script::new(GCRA) }
    }
}

#[async_trait]
impl SharedRateLimiter for RedisRateLimiter {
    async fn check(&self, key: &str, burst: u32, per_minute: u32) -> StoreResult<Option<u64>> {
        let interval = 60_000 / u64::from(per_minute.max(1));
        let k = self.redis.key(&format!("rl:{key}"));
        let mut pipe = self.redis.servers.pipe();
        pipe.add(
            &k,
            redis::cmd("EVALSHA")
                .arg(self.script.get_hash())
                .arg(1)
                .arg(&k)
                .arg(interval)
                .arg(burst.max(1))
                .clone(),
        );
        let answers = pipe.query_loading(Some(&self.script)).await.map_err(redis_err)?;
        let wait: i64 = answers.first().map_or(Ok(-1), redis::from_redis_value).map_err(redis_err)?;
        Ok((wait >= 0).then_some(wait as u64))
    }
}
