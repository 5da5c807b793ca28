//! The namespaces, veth pairs, addresses, routes, neighbours, sysctls and
//! NFQUEUE rules of one emulator, and the run-directory records that let
//! `wanblk netem down` (or [`sweep_stale`]) remove exactly what was created.
//!
//! Everything is built with iproute2 (`ip`), `iptables` and `sysctl`; the
//! rules and sysctls live inside the namespaces, so deleting the three
//! namespaces removes all of it.

use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{Error, Result};

/// Where each emulator records its state: `/run/wanblk-netem/NAME/`.
pub const RUN_DIR: &str = "/run/wanblk-netem";
/// Prefix of every namespace the emulator creates.
pub const NS_PREFIX: &str = "wbk-";

/// The client's address (namespace `wbk-NAME-c`, interface `c0`).
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 2);
/// The router's address on the client side (interface `rc`).
pub const ROUTER_CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 1, 1);
/// The router's address on the server side (interface `rs`).
pub const ROUTER_SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 1);
/// The server's address (namespace `wbk-NAME-s`, interface `s0`).
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 2, 2);

/// NFQUEUE number of the client-to-server direction (in the router namespace).
pub const QUEUE_FWD: u16 = 0;
/// NFQUEUE number of the server-to-client direction.
pub const QUEUE_BACK: u16 = 1;

const MAC_C0: &str = "02:77:01:00:00:02";
const MAC_RC: &str = "02:77:01:00:00:01";
const MAC_RS: &str = "02:77:02:00:00:01";
const MAC_S0: &str = "02:77:02:00:00:02";

/// What the run directory records about one emulator (`state.json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// The emulator's name.
    pub name: String,
    /// The process that owns the namespaces (the test process or the daemon).
    pub owner_pid: u32,
    /// That process's start time (field 22 of `/proc/PID/stat`), so a
    /// recycled pid is not mistaken for the owner.
    pub owner_start: u64,
    /// The namespaces created (deleted by `down`).
    pub namespaces: Vec<String>,
}

/// The names of one emulator's namespaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The emulator's name.
    pub name: String,
    /// Client namespace.
    pub client_ns: String,
    /// Router namespace (NFQUEUE rules, the release loop's socket).
    pub router_ns: String,
    /// Server namespace.
    pub server_ns: String,
}

impl Topology {
    /// The names for emulator `name` (nothing is created).
    pub fn named(name: &str) -> Topology {
        Topology {
            name: name.to_string(),
            client_ns: format!("{NS_PREFIX}{name}-c"),
            router_ns: format!("{NS_PREFIX}{name}-r"),
            server_ns: format!("{NS_PREFIX}{name}-s"),
        }
    }

    /// The namespace of `side`.
    pub fn namespace(&self, side: crate::Side) -> &str {
        match side {
            crate::Side::Client => &self.client_ns,
            crate::Side::Router => &self.router_ns,
            crate::Side::Server => &self.server_ns,
        }
    }

    /// The run directory.
    pub fn run_dir(&self) -> PathBuf {
        run_dir(&self.name)
    }
}

/// `/run/wanblk-netem/NAME`.
pub fn run_dir(name: &str) -> PathBuf {
    Path::new(RUN_DIR).join(name)
}

/// Checks root, namespace support and the tools, with messages that say what to do.
///
/// # Errors
/// [`Error::NotRoot`], [`Error::NamespacesUnsupported`], [`Error::ToolMissing`].
pub fn preflight() -> Result<()> {
    if wanblk_sys::sched::geteuid() != 0 {
        return Err(Error::NotRoot);
    }
    if !wanblk_sys::netns::supported() {
        return Err(Error::NamespacesUnsupported);
    }
    for (tool, package) in [("ip", "iproute2"), ("iptables", "iptables"), ("sysctl", "procps")] {
        if which(tool).is_none() {
            return Err(Error::ToolMissing { tool, package });
        }
    }
    Ok(())
}

/// Finds `tool` on `PATH` or in the sbin directories.
pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].iter().map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

/// Checks an emulator name: 1 to 32 of `[a-z0-9-]`.
///
/// # Errors
/// [`Error::Config`].
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok { Ok(()) } else { Err(Error::Config(format!("name `{name}`: use 1 to 32 of a-z, 0-9, -"))) }
}

/// Runs a command, returning its stdout or an [`Error::Command`] with its stderr.
pub(crate) fn run(cmd: &mut Command) -> Result<String> {
    let line = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|e| Error::io(format!("cannot run `{line}`"), e))?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: line,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `tool` by its full path when it is on `PATH` or in an sbin directory
/// (root's `PATH` under sudo or cron may lack `/usr/sbin`).
fn tool(name: &str) -> Command {
    Command::new(which(name).unwrap_or_else(|| PathBuf::from(name)))
}

fn ip(args: &[&str]) -> Result<String> {
    run(tool("ip").args(args))
}

fn in_ns(ns: &str, args: &[&str]) -> Result<String> {
    let prog = which(args[0]).map_or_else(|| args[0].to_string(), |p| p.display().to_string());
    run(tool("ip").args(["netns", "exec", ns, &prog]).args(&args[1..]))
}

/// The start time of process `pid` (`/proc/PID/stat` field 22), if it
/// exists and is not a zombie.
pub fn process_start_time(pid: u32) -> Option<u64> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields after the last ')'.
    let mut rest = s[s.rfind(')')? + 1..].split_whitespace();
    let state = rest.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

/// Whether the owner recorded in `st` is still running.
pub fn owner_alive(st: &State) -> bool {
    process_start_time(st.owner_pid) == Some(st.owner_start)
}

/// Reads `state.json` of emulator `name`.
///
/// # Errors
/// [`Error::NotFound`] if there is none.
pub fn read_state(name: &str) -> Result<State> {
    let p = run_dir(name).join("state.json");
    let text = fs::read_to_string(&p).map_err(|_| Error::NotFound(name.to_string()))?;
    serde_json::from_str(&text).map_err(|e| Error::Config(format!("{}: {e}", p.display())))
}

/// Records `pid` as the owner of emulator `name`.
///
/// # Errors
/// Reading or writing `state.json`.
pub fn set_owner(name: &str, pid: u32) -> Result<()> {
    let mut st = read_state(name)?;
    st.owner_pid = pid;
    st.owner_start = process_start_time(pid).unwrap_or(0);
    write_json(&run_dir(name).join("state.json"), &st)
}

pub(crate) fn write_json<T: serde::Serialize>(path: &Path, v: &T) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let text = serde_json::to_string_pretty(v).map_err(|e| Error::Config(e.to_string()))?;
    fs::write(&tmp, text).map_err(|e| Error::io(format!("write {}", tmp.display()), e))?;
    fs::rename(&tmp, path).map_err(|e| Error::io(format!("rename {}", tmp.display()), e))
}

/// The names of every emulator with a run directory.
pub fn list() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(RUN_DIR)
        .map(|d| d.filter_map(|e| e.ok()).filter_map(|e| e.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Options of [`create`].
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Sysctls for the client and server namespaces (`key`, `value`).
    pub endpoint_sysctls: Vec<(String, String)>,
    /// CPU that runs the release loop: receive processing (RPS) in every
    /// namespace is steered to the other CPUs. `None`: no steering.
    pub emulator_cpu: Option<usize>,
}

/// Creates the namespaces and everything in them for emulator `name`, owned by this process.
///
/// On failure everything created so far is removed again.
///
/// # Errors
/// [`Error::Exists`] if a live emulator has that name; a failing command.
pub fn create(name: &str, opts: &CreateOptions) -> Result<Topology> {
    check_name(name)?;
    preflight()?;
    let t = Topology::named(name);
    let dir = t.run_dir();
    if dir.exists() {
        match read_state(name) {
            Ok(st) if owner_alive(&st) => return Err(Error::Exists(name.to_string())),
            _ => {
                let _ = destroy(name);
            }
        }
    }
    fs::create_dir_all(&dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    let pid = std::process::id();
    let st = State {
        name: name.to_string(),
        owner_pid: pid,
        owner_start: process_start_time(pid).unwrap_or(0),
        namespaces: vec![t.client_ns.clone(), t.router_ns.clone(), t.server_ns.clone()],
    };
    // Recorded before anything exists, so a crash half-way is still swept.
    write_json(&dir.join("state.json"), &st)?;
    match build(&t, opts) {
        Ok(()) => Ok(t),
        Err(e) => {
            let _ = destroy(name);
            Err(e)
        }
    }
}

fn build(t: &Topology, opts: &CreateOptions) -> Result<()> {
    let (c, r, s) = (t.client_ns.as_str(), t.router_ns.as_str(), t.server_ns.as_str());
    for ns in [c, r, s] {
        ip(&["netns", "add", ns])?;
    }
    // veth pairs created inside the namespaces: interface names never collide
    // with other emulators or the host.
    ip(&[
        "-n", r, "link", "add", "rc", "address", MAC_RC, "type", "veth", "peer", "name", "c0", "address",
        MAC_C0, "netns", c,
    ])?;
    ip(&[
        "-n", r, "link", "add", "rs", "address", MAC_RS, "type", "veth", "peer", "name", "s0", "address",
        MAC_S0, "netns", s,
    ])?;
    let cidr = |a: Ipv4Addr| format!("{a}/24");
    ip(&["-n", c, "addr", "add", &cidr(CLIENT_ADDR), "dev", "c0"])?;
    ip(&["-n", r, "addr", "add", &cidr(ROUTER_CLIENT_ADDR), "dev", "rc"])?;
    ip(&["-n", r, "addr", "add", &cidr(ROUTER_SERVER_ADDR), "dev", "rs"])?;
    ip(&["-n", s, "addr", "add", &cidr(SERVER_ADDR), "dev", "s0"])?;

    // Sysctls before the links come up (rp_filter, forwarding).
    let mut common =
        vec!["net.ipv4.conf.all.rp_filter=0".to_string(), "net.ipv4.conf.default.rp_filter=0".to_string()];
    let mut router = common.clone();
    router.extend(
        ["net.ipv4.ip_forward=1", "net.ipv4.conf.rc.rp_filter=0", "net.ipv4.conf.rs.rp_filter=0"]
            .map(String::from),
    );
    in_ns(r, &sysctl_args(&router))?;
    common.push("net.ipv4.tcp_no_metrics_save=1".to_string());
    common.extend(opts.endpoint_sysctls.iter().map(|(k, v)| format!("{k}={v}")));
    for (ns, dev) in [(c, "c0"), (s, "s0")] {
        let mut v = common.clone();
        v.push(format!("net.ipv4.conf.{dev}.rp_filter=0"));
        in_ns(ns, &sysctl_args(&v))?;
    }

    for (ns, dev) in [(c, "lo"), (c, "c0"), (r, "lo"), (r, "rc"), (r, "rs"), (s, "lo"), (s, "s0")] {
        ip(&["-n", ns, "link", "set", dev, "up"])?;
    }
    ip(&["-n", c, "route", "add", "default", "via", &ROUTER_CLIENT_ADDR.to_string()])?;
    ip(&["-n", s, "route", "add", "default", "via", &ROUTER_SERVER_ADDR.to_string()])?;
    for (ns, addr, mac, dev) in [
        (c, ROUTER_CLIENT_ADDR, MAC_RC, "c0"),
        (r, CLIENT_ADDR, MAC_C0, "rc"),
        (r, SERVER_ADDR, MAC_S0, "rs"),
        (s, ROUTER_SERVER_ADDR, MAC_RS, "s0"),
    ] {
        ip(&[
            "-n",
            ns,
            "neigh",
            "replace",
            &addr.to_string(),
            "lladdr",
            mac,
            "dev",
            dev,
            "nud",
            "permanent",
        ])?;
    }

    // MTU-sized packets through the router: no GRO (which would merge them)
    // on the router's interfaces. The kernel segments any GSO packet before
    // queueing it anyway, since the queues do not ask for GSO.
    if which("ethtool").is_some() {
        for dev in ["rc", "rs"] {
            let _ = in_ns(r, &["ethtool", "-K", dev, "gro", "off", "gso", "off", "tso", "off"]);
        }
    }
    // Steer receive processing away from the emulator's CPU.
    if let Some(cpu) = opts.emulator_cpu {
        let n = wanblk_sys::sched::available_cpus().min(64);
        let mask: u64 = ((1u128 << n) - 1) as u64 & !(1u64 << cpu);
        if mask != 0 {
            for (ns, dev) in [(c, "c0"), (r, "rc"), (r, "rs"), (s, "s0")] {
                let path = format!("/sys/class/net/{dev}/queues/rx-0/rps_cpus");
                let _ = in_ns(ns, &["sh", "-c", &format!("echo {mask:x} > {path}")]);
            }
        }
    }

    // One queue per direction. PREROUTING rather than FORWARD: the kernel's
    // receive timestamp is still on the packet there (ip_forward clears it).
    for (dev, q) in [("rc", QUEUE_FWD), ("rs", QUEUE_BACK)] {
        in_ns(
            r,
            &[
                "iptables",
                "-w",
                "-t",
                "mangle",
                "-A",
                "PREROUTING",
                "-i",
                dev,
                "-j",
                "NFQUEUE",
                "--queue-num",
                &q.to_string(),
            ],
        )
        .map_err(|e| match e {
            Error::Io { .. } => Error::ToolMissing { tool: "iptables", package: "iptables" },
            e => e,
        })?;
    }
    Ok(())
}

fn sysctl_args(kv: &[String]) -> Vec<&str> {
    let mut v = vec!["sysctl", "-q", "-w"];
    v.extend(kv.iter().map(String::as_str));
    v
}

/// Removes emulator `name`: stops its daemon if it has one (recorded pid,
/// start time checked), deletes its namespaces (and with them the veths and
/// iptables rules) and its run directory. Touches nothing it did not record.
///
/// # Errors
/// [`Error::NotFound`] if there is no such emulator.
pub fn destroy(name: &str) -> Result<()> {
    let dir = run_dir(name);
    if !dir.exists() {
        return Err(Error::NotFound(name.to_string()));
    }
    let st = read_state(name).ok();
    if let Some(st) = &st
        && st.owner_pid != std::process::id()
        && owner_alive(st)
        && dir.join("daemon").exists()
    {
        let _ = wanblk_sys::process::signal(st.owner_pid, wanblk_sys::process::SIGTERM);
        for _ in 0..100 {
            if !owner_alive(st) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if owner_alive(st) {
            let _ = wanblk_sys::process::signal(st.owner_pid, wanblk_sys::process::SIGKILL);
        }
    }
    let namespaces = st.map(|s| s.namespaces).unwrap_or_else(|| {
        let t = Topology::named(name);
        vec![t.client_ns, t.router_ns, t.server_ns]
    });
    for ns in namespaces {
        if ns.starts_with(NS_PREFIX) && wanblk_sys::netns::path_of(&ns).exists() {
            // Processes started inside (peers, `netem exec`) are not ours to
            // kill; they keep the namespace alive, unnamed, until they exit.
            let pids = pids_in(&ns);
            if !pids.is_empty() {
                tracing::warn!(
                    "namespace {ns} still has processes {pids:?}; it lives on, unnamed, until they exit"
                );
            }
            let _ = ip(&["netns", "del", &ns]);
        }
    }
    fs::remove_dir_all(&dir).map_err(|e| Error::io(format!("remove {}", dir.display()), e))
}

/// The processes inside namespace `ns` (`ip netns pids`).
pub fn pids_in(ns: &str) -> Vec<u32> {
    ip(&["netns", "pids", ns])
        .map(|o| o.split_whitespace().filter_map(|w| w.parse().ok()).collect())
        .unwrap_or_default()
}

/// Removes every emulator whose recorded owner process is gone. Returns their names.
pub fn sweep_stale() -> Vec<String> {
    let mut swept = Vec::new();
    for name in list() {
        let stale = match read_state(&name) {
            Ok(st) => !owner_alive(&st),
            // A directory without a readable state: only if it is older than a
            // minute (a creator may be writing it right now).
            Err(_) => fs::metadata(run_dir(&name))
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|d| d.as_secs() > 60)),
        };
        if stale && destroy(&name).is_ok() {
            swept.push(name);
        }
    }
    swept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let t = Topology::named("t42");
        assert_eq!(t.client_ns, "wbk-t42-c");
        assert_eq!(t.router_ns, "wbk-t42-r");
        assert_eq!(t.run_dir(), PathBuf::from("/run/wanblk-netem/t42"));
        assert!(check_name("a-1").is_ok());
        assert!(check_name("A").is_err());
        assert!(check_name("").is_err());
        assert!(check_name("../x").is_err());
    }

    #[test]
    fn our_own_start_time_is_readable() {
        let st = State {
            name: "x".into(),
            owner_pid: std::process::id(),
            owner_start: process_start_time(std::process::id()).unwrap(),
            namespaces: vec![],
        };
        assert!(owner_alive(&st));
        assert!(!owner_alive(&State { owner_start: st.owner_start + 1, ..st }));
    }
}
