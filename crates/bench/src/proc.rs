//! What Linux's /proc says about a process: its resident memory and peak, the CPU time it
//! used, and the machine's load average. Elsewhere every reading is `None`.

/// The process whose memory and CPU a benchmark watches.
#[derive(Clone, Copy)]
pub enum RssSource {
    /// This process (the service runs in it).
    This,
    /// Another process on this machine (a running server).
    Pid(u32),
    /// None: the server is elsewhere, or its process ID was not given.
    None,
}

fn status_kib(path: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl RssSource {
    fn path(self, file: &str) -> Option<String> {
        match self {
            RssSource::This => Some(format!("/proc/self/{file}")),
            RssSource::Pid(p) => Some(format!("/proc/{p}/{file}")),
            RssSource::None => None,
        }
    }

    /// Resident memory now, MiB.
    pub fn rss_mib(self) -> Option<f64> {
        status_kib(&self.path("status")?, "VmRSS:").map(|k| k as f64 / 1024.0)
    }

    /// Peak resident memory of the process's life, MiB.
    pub fn hwm_mib(self) -> Option<f64> {
        status_kib(&self.path("status")?, "VmHWM:").map(|k| k as f64 / 1024.0)
    }

    /// CPU seconds (user + system) the process has used, from /proc/PID/stat (clock ticks of
    /// 1/100 s).
    pub fn cpu_seconds(self) -> Option<f64> {
        let stat = std::fs::read_to_string(self.path("stat")?).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
        Some(ticks as f64 / 100.0)
    }
}

/// The machine's 1-minute load average.
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}
