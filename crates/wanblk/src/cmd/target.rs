//! `wanblk target`: the embedded NBD target. Serves a sparse in-memory disk
//! or a file over TCP and/or a Unix socket until SIGINT or SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::{FileEndpoint, Fill, MemoryEndpoint};
use wanblk_nbd::{NbdServer, NbdUri, ServeOptions};
use wanblk_sys::tcp::TcpOptions;

use crate::units::parse_size;

/// Arguments of `wanblk target`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "\
Each served URI is printed on stdout on its own line as soon as the target listens, e.g.
  nbd://127.0.0.1:10809/disk
  nbd+unix:///disk?socket=/tmp/disk.sock
Scripts can read these lines to connect. The target runs until SIGINT or SIGTERM, then stops
accepting, lets requests in flight finish, removes its socket and pid file, and exits 0.

Examples:
  wanblk target --size 4G --export disk
  wanblk target --file disk.img --create 10G --listen 127.0.0.1:0 --socket /tmp/t.sock
  wanblk target --size 1T --fill random:7 --read-only")]
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
    /// like the seed papers' virtual storage device.
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
    rt.block_on(serve(&args.serve, !args.no_structured_replies, tcp, backend))
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

    let opts = ServeOptions {
        export_name: args.export.clone(),
        description: args.description.clone(),
        read_only: args.read_only,
        structured_replies,
        sparse_reads: args.sparse_reads,
        max_in_flight: args.max_in_flight.max(1),
        tcp,
        ..Default::default()
    };
    let server = NbdServer::new(backend, opts);
    let listen = match (args.listen, &args.socket) {
        (Some(a), _) => Some(a),
        (None, Some(_)) => None,
        (None, None) => Some(SocketAddr::from(([127, 0, 0, 1], wanblk_nbd::DEFAULT_PORT))),
    };

    let mut uris = Vec::new();
    let tcp = match listen {
        Some(addr) => {
            let l = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?;
            let local = l.local_addr()?;
            uris.push(NbdUri::tcp(local.ip().to_string(), local.port(), &args.export));
            Some(l)
        }
        None => None,
    };
    let unix = match &args.socket {
        Some(path) => {
            let l = tokio::net::UnixListener::bind(path)
                .with_context(|| format!("cannot listen on Unix socket {}", path.display()))?;
            uris.push(NbdUri::unix(path, &args.export));
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
    let result = tokio::select! {
        _ = term.recv() => Ok(()),
        _ = int.recv() => Ok(()),
        Some(r) = tasks.join_next() => match r {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(anyhow::Error::from(e).context("listener failed")),
            Err(e) => Err(anyhow::Error::from(e)),
        },
    };
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
