//! The background emulator of `wanblk netem up`: the topology is created by
//! the command, then a detached `wanblk netem run --name NAME` process runs
//! the release loop and records itself as the owner, so `down` (or a later
//! sweep, if it died) removes everything.
//!
//! Files in `/run/wanblk-netem/NAME/`: `state.json` (owner pid and start
//! time, namespaces), `config.json`, `daemon` (marks a daemon owner),
//! `ready`, `stats.json` (every 500 ms), `emulator.log`.

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::emulator::{self, Shared};
use crate::scenario::ScenarioConfig;
use crate::stats::Stats;
use crate::topology::{self, CreateOptions, Topology};
use crate::{Error, Result};

/// Creates the topology for `cfg` and starts `exe netem run --name NAME` in
/// the background; returns when the loop serves its queues.
///
/// # Errors
/// As [`Scenario::start`](crate::Scenario::start); the daemon's log tail if it fails to start.
pub fn up(cfg: &ScenarioConfig, exe: &Path) -> Result<Topology> {
    topology::preflight()?;
    for name in topology::sweep_stale() {
        eprintln!("wanblk netem: removed stale emulator {name}");
    }
    let opts = CreateOptions { endpoint_sysctls: cfg.endpoint_sysctls(), emulator_cpu: cfg.emulator_cpu };
    let topo = topology::create(&cfg.name, &opts)?;
    let dir = topo.run_dir();
    let started = (|| {
        topology::write_json(&dir.join("config.json"), cfg)?;
        let log =
            fs::File::create(dir.join("emulator.log")).map_err(|e| Error::io("create emulator.log", e))?;
        let log2 = log.try_clone().map_err(|e| Error::io("dup emulator.log", e))?;
        let mut child = {
            use std::os::unix::process::CommandExt;
            Command::new(exe)
                .args(["netem", "run", "--name", &cfg.name])
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log2)
                .process_group(0)
                .spawn()
                .map_err(|e| Error::io(format!("start {}", exe.display()), e))?
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if dir.join("ready").exists() {
                return Ok(());
            }
            if let Ok(Some(status)) = child.try_wait() {
                let log = fs::read_to_string(dir.join("emulator.log")).unwrap_or_default();
                return Err(Error::Stopped(format!("emulator exited ({status}): {}", log.trim())));
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Error::Stopped("emulator not ready after 10 s".into()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    })();
    match started {
        Ok(()) => Ok(topo),
        Err(e) => {
            let _ = topology::destroy(&cfg.name);
            Err(e)
        }
    }
}

/// The daemon's body (`wanblk netem run --name NAME`): becomes the owner,
/// runs the loop until killed.
///
/// # Errors
/// No such emulator; the loop failing.
pub fn run(name: &str) -> Result<()> {
    let dir = topology::run_dir(name);
    let text = fs::read_to_string(dir.join("config.json")).map_err(|_| Error::NotFound(name.to_string()))?;
    let cfg: ScenarioConfig = serde_json::from_str(&text).map_err(|e| Error::Config(e.to_string()))?;
    let topo = Topology::named(name);
    fs::write(dir.join("daemon"), std::process::id().to_string())
        .map_err(|e| Error::io("write daemon marker", e))?;
    topology::set_owner(name, std::process::id())?;
    let ecfg = crate::scenario_emulator_config(&cfg, &topo.router_ns);
    let shared = Arc::new(Shared::new(ecfg.threads()));
    *shared.stats_path.lock().expect("path lock") = Some(dir.join("stats.json"));
    let mut threads = Vec::new();
    for slot in 0..ecfg.threads() {
        let (sh, ec) = (Arc::clone(&shared), ecfg.clone());
        threads.push(
            std::thread::Builder::new()
                .name(format!("netem-{slot}"))
                .spawn(move || emulator::run(&ec, &sh, slot))
                .map_err(|e| Error::io("spawn the emulator thread", e))?,
        );
    }
    shared.wait_ready(Duration::from_secs(10))?;
    // Counters from the start, so `stats` right after `up` reads zeroes
    // rather than failing on a file the loop writes only 500 ms later.
    topology::write_json(&dir.join("stats.json"), &shared.snapshot())?;
    fs::write(dir.join("ready"), "").map_err(|e| Error::io("write ready marker", e))?;
    for t in threads {
        match t.join() {
            Ok(r) => r?,
            Err(_) => return Err(Error::Stopped("the release loop panicked".into())),
        }
    }
    Ok(())
}

/// The counters the daemon of emulator `name` wrote last (at most 500 ms old).
///
/// # Errors
/// [`Error::NotFound`]; [`Error::Stopped`] if its owner is gone.
pub fn stats(name: &str) -> Result<Stats> {
    let st = topology::read_state(name)?;
    if !topology::owner_alive(&st) {
        return Err(Error::Stopped(format!(
            "the emulator of `{name}` is not running (wanblk netem down --name {name})"
        )));
    }
    let p = topology::run_dir(name).join("stats.json");
    let text = fs::read_to_string(&p).map_err(|e| Error::io(format!("read {}", p.display()), e))?;
    serde_json::from_str(&text).map_err(|e| Error::Config(e.to_string()))
}

/// The stored configuration of emulator `name`.
///
/// # Errors
/// [`Error::NotFound`].
pub fn config(name: &str) -> Result<ScenarioConfig> {
    let text = fs::read_to_string(topology::run_dir(name).join("config.json"))
        .map_err(|_| Error::NotFound(name.to_string()))?;
    serde_json::from_str(&text).map_err(|e| Error::Config(e.to_string()))
}
