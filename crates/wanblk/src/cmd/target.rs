//! `wanblk target`: the embedded NBD target. Serves a sparse in-memory disk
//! or a file over TCP and/or a Unix socket until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{FileEndpoint, Fill, MemoryEndpoint};
use wanblk_nbd::{NbdServer, NbdUri, ServeOptions, ServerTls, TlsServerOptions, UriTls};
use wanblk_sys::tcp::TcpOptions;

use crate::units::{parse_duration, parse_size};

/// Arguments of `wanblk target` (the help text is in `cmd::help`).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Serve a sparse in-memory disk of this size (K, M, G, T suffixes; 1 GiB if no --file).
    #[arg(long, value_parser = parse_size, conflicts_with = "file")]
    size: Option<u64>,
    /// What never-written bytes of the in-memory disk read as: `zero` (holes) or
    /// `random[:SEED]` (deterministic pseudo-random data, reported as allocated).
    #[arg(long, default_value = "zero", value_parser = parse_fill, conflicts_with = "file")]
    fill: Fill,
    /// Accept writes, zeroes and trims to the in-memory disk and drop them
    /// (reads keep returning the fill): a benchmark sink that never grows,
    /// like the virtual storage device of the research this tool builds on.
    #[arg(long, conflicts_with = "file")]
    discard_writes: bool,
    /// Serve this file or block device instead of memory.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// Create --file with this size first (sparse); refuses to overwrite an existing file.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "file")]
    create: Option<u64>,
    #[command(flatten)]
    serve: ServeArgs,
    /// Refuse structured replies (clients then get simple replies and no block status).
    #[arg(long)]
    no_structured_replies: bool,
    /// TCP congestion control for client connections (e.g. cubic, bbr,
    /// reno); the system default otherwise.
    #[arg(long)]
    congestion: Option<String>,
    /// Most client connections at once (the same as --max-clients).
    #[arg(long, value_name = "N", conflicts_with = "max_clients")]
    max_connections: Option<usize>,
}

/// `--tls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TlsMode {
    /// No TLS (NBD_OPT_STARTTLS is refused).
    Off,
    /// TLS offered; clients may still connect in clear text.
    On,
    /// TLS required: clients that do not start TLS are refused.
    Require,
}

/// How and where to serve an export over NBD (shared by `wanblk target`
/// and `wanblk serve`).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ServeArgs {
    /// TCP address to listen on (port 0 picks a free port). Default 127.0.0.1:10809
    /// unless only --socket is given.
    #[arg(long, value_name = "ADDR")]
    listen: Option<SocketAddr>,
    /// Also (or, without --listen, only) listen on this Unix socket.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Export name clients ask for ("" is also accepted as the default export).
    #[arg(long, default_value = "")]
    export: String,
    /// Export description shown by `nbdinfo`.
    #[arg(long, default_value = "wanblk embedded target")]
    description: String,
    /// Refuse writes, trims and zeroing.
    #[arg(long)]
    read_only: bool,
    /// Send zero runs of reads as holes (structured replies only).
    #[arg(long)]
    sparse_reads: bool,
    /// Requests served concurrently per connection.
    #[arg(long, default_value_t = 64)]
    max_in_flight: usize,
    /// Write the process id to this file once listening (removed on exit).
    #[arg(long, value_name = "PATH")]
    pid_file: Option<PathBuf>,
    /// TLS (NBD_OPT_STARTTLS): off, on (offered), or require.
    #[arg(long, value_enum, default_value = "off")]
    tls: TlsMode,
    /// Directory with server-cert.pem and server-key.pem, and optionally
    /// ca-cert.pem to verify client certificates (nbdkit's layout).
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,
    /// Require a client certificate signed by ca-cert.pem.
    #[arg(long)]
    tls_verify_peer: bool,
    /// Serve only clients whose certificate subject is this (repeatable),
    /// e.g. `CN=backup1,O=Example` (attributes in any order; all must
    /// match). Implies client certificates signed by ca-cert.pem.
    #[arg(long = "tls-allow", value_name = "SUBJECT")]
    tls_allow: Vec<String>,
    /// Serve in clear text on an address beyond loopback (refused without
    /// this: anyone who can reach it can read and write the export).
    #[arg(long)]
    insecure: bool,
    /// Most client connections at once. At the limit, the oldest
    /// connection still in its handshake is dropped to make room; when
    /// every connection is past its handshake, new ones are refused.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    max_clients: usize,
    /// Time a client has to finish the NBD handshake (TLS included).
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    handshake_timeout: std::time::Duration,
    /// Close connections with no request in flight for this long (e.g.
    /// 10m), or whose client reads no reply for this long; never by
    /// default (idle sessions of a pool are normal).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    idle_timeout: Option<std::time::Duration>,
    /// Permissions of the --socket file (octal); 0600 lets only this user connect.
    #[arg(long, value_name = "MODE", default_value = "600", value_parser = parse_mode)]
    socket_mode: u32,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    match u32::from_str_radix(s.trim_start_matches("0o"), 8) {
        Ok(m) if m <= 0o777 => Ok(m),
        _ => Err(format!("expected an octal mode such as 600 or 660, got {s:?}")),
    }
}

impl ServeArgs {
    /// The TLS configuration, loaded and checked.
    fn tls(&self) -> anyhow::Result<Option<ServerTls>> {
        let dir = match (self.tls, &self.tls_certificates) {
            (TlsMode::Off, None) => {
                if self.tls_verify_peer || !self.tls_allow.is_empty() {
                    bail!("--tls-verify-peer and --tls-allow need --tls on|require and --tls-certificates");
                }
                return Ok(None);
            }
            (TlsMode::Off, Some(_)) => {
                bail!("--tls-certificates given with --tls off: add --tls require (or on)")
            }
            (mode, None) => bail!(
                "--tls {} needs --tls-certificates DIR (server-cert.pem, server-key.pem)",
                if mode == TlsMode::On { "on" } else { "require" }
            ),
            (_, Some(d)) => d,
        };
        let opts = TlsServerOptions {
            certificates: dir.clone(),
            verify_peer: self.tls_verify_peer,
            allow_subjects: self.tls_allow.clone(),
        };
        Ok(Some(ServerTls::new(&opts).context("--tls-certificates")?))
    }

    /// Refuses (or warns about) clear text beyond loopback.
    fn check_exposure(&self, addr: SocketAddr) -> anyhow::Result<()> {
        if addr.ip().is_loopback() {
            return Ok(());
        }
        match self.tls {
            TlsMode::Require => Ok(()),
            TlsMode::On => {
                tracing::warn!(
                    "listening on {addr} with --tls on: clients that skip TLS read and write the export in clear text; use --tls require"
                );
                Ok(())
            }
            TlsMode::Off if self.insecure => {
                tracing::warn!(
                    "listening on {addr} without TLS (--insecure): anyone who can reach it can read and write the export, and the data crosses the network in clear text"
                );
                Ok(())
            }
            TlsMode::Off => bail!(
                "refusing to listen on {addr} without TLS: anyone who can reach it could read and write the export. \
                 Use --tls require --tls-certificates DIR, listen on 127.0.0.1, or add --insecure"
            ),
        }
    }
}

fn parse_fill(s: &str) -> Result<Fill, String> {
    match s.split_once(':') {
        None if s == "zero" => Ok(Fill::Zero),
        None if s == "random" => Ok(Fill::Random { seed: 0 }),
        Some(("random", seed)) => {
            seed.parse().map(|seed| Fill::Random { seed }).map_err(|_| format!("bad seed in {s:?}"))
        }
        _ => Err(format!("invalid fill {s:?}: expected `zero` or `random[:SEED]`")),
    }
}

fn open_backend(args: &Args) -> anyhow::Result<Arc<dyn Endpoint>> {
    if let Some(path) = &args.file {
        if let Some(size) = args.create {
            if path.exists() {
                bail!("{}: already exists; --create refuses to overwrite it", path.display());
            }
            drop(FileEndpoint::create(path, size)?);
        }
        return Ok(Arc::new(FileEndpoint::open(path, !args.serve.read_only)?));
    }
    let size = args.size.unwrap_or(1 << 30);
    if size == 0 {
        bail!("--size must be more than 0");
    }
    if args.discard_writes {
        return Ok(Arc::new(MemoryEndpoint::sink("memory", size, args.fill)));
    }
    Ok(Arc::new(MemoryEndpoint::new("memory", size, args.fill)))
}

/// Runs `wanblk target`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let backend = open_backend(&args)?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let tcp = TcpOptions { congestion: args.congestion.clone(), ..TcpOptions::default() };
    let mut serve_args = args.serve.clone();
    if let Some(n) = args.max_connections {
        serve_args.max_clients = n;
    }
    rt.block_on(serve(&serve_args, !args.no_structured_replies, tcp, backend))
}

/// Serves `backend` as described by `args` until SIGINT or SIGTERM,
/// printing each URI on stdout as soon as it listens.
///
/// # Errors
/// Cannot listen, or a listener fails.
pub(crate) async fn serve(
    args: &ServeArgs,
    structured_replies: bool,
    tcp: TcpOptions,
    backend: Arc<dyn Endpoint>,
) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};

    let tls = args.tls()?;
    let opts = ServeOptions {
        export_name: args.export.clone(),
        description: args.description.clone(),
        read_only: args.read_only,
        structured_replies,
        sparse_reads: args.sparse_reads,
        max_in_flight: args.max_in_flight.max(1),
        tcp,
        tls_required: args.tls == TlsMode::Require,
        tls,
        max_connections: args.max_clients.max(1),
        handshake_timeout: args.handshake_timeout,
        idle_timeout: args.idle_timeout,
        ..Default::default()
    };
    let server = NbdServer::new(backend, opts);
    let listen = match (args.listen, &args.socket) {
        (Some(a), _) => Some(a),
        (None, Some(_)) => None,
        (None, None) => Some(SocketAddr::from(([127, 0, 0, 1], wanblk_nbd::DEFAULT_PORT))),
    };

    // The URIs printed say how to connect: nbds:// when TLS is required.
    let shown = |u: NbdUri| if args.tls == TlsMode::Require { u.with_tls(UriTls::default()) } else { u };
    let mut uris = Vec::new();
    let tcp = match listen {
        Some(addr) => {
            args.check_exposure(addr)?;
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let local = l.local_addr()?;
            uris.push(shown(NbdUri::tcp(local.ip().to_string(), local.port(), &args.export)));
            Some(l)
        }
        None => None,
    };
    let unix = match &args.socket {
        Some(path) => {
            let l = wanblk_sys::file::bind_unix_private(path, args.socket_mode)
                .and_then(|l| {
                    l.set_nonblocking(true)?;
                    tokio::net::UnixListener::from_std(l)
                })
                .with_context(|| format!("cannot listen on Unix socket {}", path.display()))?;
            uris.push(shown(NbdUri::unix(path, &args.export)));
            Some(l)
        }
        None => None,
    };
    if let Some(p) = &args.pid_file {
        // Written aside and renamed, so a reader never sees it half written.
        let tmp = p.with_extension("pid.tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, p))
            .with_context(|| format!("cannot write pid file {}", p.display()))?;
    }
    {
        let mut out = std::io::stdout().lock();
        for u in &uris {
            writeln!(out, "{u}")?;
        }
        out.flush()?;
    }
    tracing::info!(
        size = server.export().size,
        "serving {}",
        uris.iter().map(|u| u.to_string()).collect::<Vec<_>>().join(" ")
    );

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stopped = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(l) = tcp {
        let (s, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move { s.serve_tcp(l, stopped(rx)).await });
    }
    if let Some(l) = unix {
        let (s, rx) = (server.clone(), stop_rx.clone());
        tasks.spawn(async move { s.serve_unix(l, stopped(rx)).await });
    }

    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    crate::notify::notify("READY=1");
    let result = tokio::select! {
        _ = term.recv() => Ok(()),
        _ = int.recv() => Ok(()),
        Some(r) = tasks.join_next() => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(anyhow::Error::from(e).context("listener failed")),
            Err(e) => Err(anyhow::Error::from(e)),
        },
    };
    crate::notify::notify("STOPPING=1");
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    if let Some(p) = &args.socket {
        let _ = std::fs::remove_file(p);
    }
    if let Some(p) = &args.pid_file {
        let _ = std::fs::remove_file(p);
    }
    result
}
