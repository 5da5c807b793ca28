//! `wanblk netem`: the long-fat-network emulator (see `docs/netem.md`).

use std::path::PathBuf;
use std::process::Command as Process;
use std::time::Duration;

use anyhow::{Context, bail};
use wanblk_netem::model::units;
use wanblk_netem::scenario::ScenarioConfig;
use wanblk_netem::topology::{self, Topology};
use wanblk_netem::{Profile, Scenario, Side, SysctlProfile, daemon};

const PROFILE_HELP: &str = "\
Profile file: one change per line, `#` starts a comment, times count from `up`:
  at 10s rate 500mbit          both directions
  at 20s fwd delay 100ms       client -> server only (`back`: server -> client)
  at 30s blackout 2s           the link loses everything that arrives for 2 s
  at 35s blackout 1s hold      the link serves nothing for 1 s; packets wait in the queue
  at 40s loss 0.001            random loss probability (or 0.1%)
  at 50s queue 500             drop-tail limit in packets (`queue-bytes 1M`: in bytes)
Changes set a value and hold until the next change.";

/// Subcommands of `wanblk netem`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Create the namespaces (client -- router -- server) and start the emulator in the background.
    #[command(after_help = PROFILE_HELP)]
    Up(UpArgs),
    /// Run a command inside the client, server or router namespace.
    Exec(ExecArgs),
    /// Print per-direction counters.
    Stats(StatsArgs),
    /// Stop the emulator and remove its namespaces (and nothing else).
    Down(DownArgs),
    /// List emulators.
    List,
    /// Run the release loop of an emulator created by `up` (internal: `up` starts it).
    #[command(hide = true)]
    Run {
        /// The emulator's name.
        #[arg(long)]
        name: String,
    },
}

/// `wanblk netem up`.
#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Bottleneck rate, both directions (e.g. 1gbit, 200mbit; 0 = unlimited).
    #[arg(long, value_parser = parse_rate)]
    rate: u64,
    /// Rate of the server -> client direction, if different.
    #[arg(long, value_parser = parse_rate)]
    rate_back: Option<u64>,
    /// One-way delay (e.g. 20ms), both directions unless --delay-back.
    #[arg(long, value_parser = parse_duration)]
    delay: Duration,
    /// One-way delay of the server -> client direction.
    #[arg(long, value_parser = parse_duration)]
    delay_back: Option<Duration>,
    /// Drop-tail queue in packets.
    #[arg(long, group = "q")]
    queue: Option<u32>,
    /// Drop-tail queue in bandwidth-delay products (the default: 1.0).
    #[arg(long, group = "q")]
    queue_bdp: Option<f64>,
    /// Drop-tail queue in bytes (e.g. 1M).
    #[arg(long, group = "q", value_parser = parse_size)]
    queue_bytes: Option<u64>,
    /// Random loss probability (e.g. 0.0001 or 0.01%), both directions unless --loss-back.
    #[arg(long, default_value = "0", value_parser = parse_probability)]
    loss: f64,
    /// Random loss of the server -> client direction.
    #[arg(long, value_parser = parse_probability)]
    loss_back: Option<f64>,
    /// Schedule of changes over time (format below).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// TCP buffers of the endpoints: default (tcp_rmem max 6 MB, tcp_wmem max 4 MB),
    /// bdp (4 x (BDP + queue)), capped:SIZE (e.g. capped:512K), keep.
    #[arg(long, default_value = "default")]
    sysctl_profile: String,
    /// Emulator name (namespaces wbk-NAME-c, wbk-NAME-r, wbk-NAME-s).
    #[arg(long, default_value = "default")]
    name: String,
    /// Seed of the random loss.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// CPU for the release loop (`none`: not pinned). Default: the last CPU.
    #[arg(long)]
    cpu: Option<String>,
    /// Do not use SCHED_FIFO for the release loop.
    #[arg(long)]
    no_rt: bool,
}

/// `wanblk netem exec`.
#[derive(Debug, clap::Args)]
pub(crate) struct ExecArgs {
    /// client, server or router.
    side: String,
    /// Emulator name.
    #[arg(long, default_value = "default")]
    name: String,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    cmd: Vec<String>,
}

/// `wanblk netem stats`.
#[derive(Debug, clap::Args)]
pub(crate) struct StatsArgs {
    /// Emulator name.
    #[arg(long, default_value = "default")]
    name: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// `wanblk netem down`.
#[derive(Debug, clap::Args)]
pub(crate) struct DownArgs {
    /// Emulator name.
    #[arg(long, default_value = "default", conflicts_with = "all")]
    name: String,
    /// Remove every emulator recorded under /run/wanblk-netem.
    #[arg(long)]
    all: bool,
}

fn parse_rate(s: &str) -> Result<u64, String> {
    units::parse_rate(s).map_err(|e| e.to_string())
}
fn parse_duration(s: &str) -> Result<Duration, String> {
    units::parse_duration_ns(s).map(Duration::from_nanos).map_err(|e| e.to_string())
}
fn parse_size(s: &str) -> Result<u64, String> {
    units::parse_size(s).map_err(|e| e.to_string())
}
fn parse_probability(s: &str) -> Result<f64, String> {
    units::parse_probability(s).map_err(|e| e.to_string())
}

fn side(s: &str) -> anyhow::Result<Side> {
    Ok(match s {
        "client" | "c" => Side::Client,
        "server" | "s" => Side::Server,
        "router" | "r" => Side::Router,
        other => bail!("`{other}`: the side is client, server or router"),
    })
}

/// Runs `wanblk netem ...`.
pub(crate) fn run(cmd: Command) -> anyhow::Result<()> {
    match cmd {
        Command::Up(a) => up(a),
        Command::Exec(a) => exec(a),
        Command::Stats(a) => stats(a),
        Command::Down(a) => down(a),
        Command::List => list(),
        Command::Run { name } => Ok(daemon::run(&name)?),
    }
}

fn config(a: &UpArgs) -> anyhow::Result<ScenarioConfig> {
    let mut b = Scenario::builder()
        .name(&a.name)
        .rate_bps(a.rate)
        .delay(a.delay)
        .loss(a.loss)
        .seed(a.seed)
        .sysctl_profile(SysctlProfile::parse(&a.sysctl_profile)?)
        .rt_priority(if a.no_rt { 0 } else { 50 });
    if let Some(r) = a.rate_back {
        b = b.rate_back_bps(r);
    }
    if let Some(d) = a.delay_back {
        b = b.delay_back(d);
    }
    if let Some(l) = a.loss_back {
        b = b.loss_back(l);
    }
    b = match (a.queue, a.queue_bdp, a.queue_bytes) {
        (Some(n), _, _) => b.queue_packets(n),
        (_, Some(f), _) => b.queue_bdp(f),
        (_, _, Some(n)) => b.queue_bytes(n),
        _ => b.queue_bdp(1.0),
    };
    if let Some(p) = &a.profile {
        let text = std::fs::read_to_string(p).with_context(|| format!("read profile {}", p.display()))?;
        b = b.profile(Profile::parse(&text).with_context(|| format!("profile {}", p.display()))?);
    }
    match a.cpu.as_deref() {
        None => {}
        Some("none") => b = b.emulator_cpu(None),
        Some(c) => b = b.emulator_cpu(Some(c.parse().with_context(|| format!("--cpu {c}"))?)),
    }
    Ok(b.config()?)
}

fn up(a: UpArgs) -> anyhow::Result<()> {
    let cfg = config(&a)?;
    let exe = std::env::current_exe().context("find the wanblk executable")?;
    let t = daemon::up(&cfg, &exe)?;
    let st = topology::read_state(&cfg.name)?;
    println!("emulator `{}` is up (pid {})", cfg.name, st.owner_pid);
    println!("  client  {:<15} namespace {}", topology::CLIENT_ADDR, t.client_ns);
    println!("  server  {:<15} namespace {}", topology::SERVER_ADDR, t.server_ns);
    println!("  router  {:<15} namespace {}", "", t.router_ns);
    for (d, p) in [("fwd ", &cfg.fwd), ("back", &cfg.back)] {
        println!(
            "  {d}    rate {}, delay {:.3} ms, loss {}, queue {:?}",
            units::format_rate(p.rate_bps),
            p.delay_ns as f64 / 1e6,
            p.loss,
            p.queue
        );
    }
    println!("run commands with: wanblk netem exec client --name {} -- CMD", cfg.name);
    Ok(())
}

fn exec(a: ExecArgs) -> anyhow::Result<()> {
    let s = side(&a.side)?;
    topology::read_state(&a.name)?;
    let t = Topology::named(&a.name);
    let status = Process::new(topology::which("ip").unwrap_or_else(|| "ip".into()))
        .args(["netns", "exec", t.namespace(s)])
        .args(&a.cmd)
        .status()
        .context("run ip netns exec")?;
    std::process::exit(status.code().unwrap_or(1));
}

fn stats(a: StatsArgs) -> anyhow::Result<()> {
    let st = daemon::stats(&a.name)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&st)?);
    } else {
        print!("{}", st.to_table());
        println!("(kern-drop: NFQUEUE drops in the kernel, queue full + socket full; they should stay 0)");
    }
    Ok(())
}

fn down(a: DownArgs) -> anyhow::Result<()> {
    let names = if a.all { topology::list() } else { vec![a.name] };
    if names.is_empty() {
        println!("no emulators");
    }
    let mut failed = 0;
    for n in names {
        match topology::destroy(&n) {
            Ok(()) => println!("removed `{n}`"),
            Err(e) => {
                eprintln!("wanblk netem: `{n}`: {e}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} emulator(s) could not be removed");
    }
    Ok(())
}

fn list() -> anyhow::Result<()> {
    for n in topology::list() {
        let alive = topology::read_state(&n).map(|s| topology::owner_alive(&s)).unwrap_or(false);
        let cfg = daemon::config(&n).ok();
        let desc = cfg
            .map(|c| {
                format!("{} / {:.1} ms", units::format_rate(c.fwd.rate_bps), c.fwd.delay_ns as f64 / 1e6)
            })
            .unwrap_or_default();
        println!("{n:<24} {:<8} {desc}", if alive { "running" } else { "stale" });
    }
    Ok(())
}
