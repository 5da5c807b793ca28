//! `wanblk info LOCATION [--json] [--list]`: what a store is (size, block
//! sizes, flags, multi-conn, allocation), the exports an NBD server offers,
//! or the targets and LUNs an iSCSI portal offers. The JSON layout is
//! [`SCHEMA_VERSION`], described in docs/info-schema.md.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use wanblk_blockdev::Endpoint;
use wanblk_blockdev::local::FileEndpoint;
use wanblk_nbd::{NbdConnector, NbdOptions, NbdSession, NbdUri};
use wanblk_nbd_proto::consts::tflags;

use crate::cmd::session::{ClientTlsArgs, parse_secret_file};
use crate::image::Format;
use crate::local_server::LocalServer;
use crate::location::{Location, shown};

/// The layout of `wanblk info --json` (docs/info-schema.md).
pub(crate) const SCHEMA_VERSION: u32 = 1;

/// Arguments of `wanblk info` (the help text is in `cmd::help`).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The store: a location (see LOCATIONS in --help). With --list, an NBD
    /// server (nbd://HOST[:PORT], nbd+unix:///?socket=PATH) or an iSCSI
    /// portal (iscsi://HOST[:PORT]).
    location: String,
    /// Print one JSON object (layout: docs/info-schema.md).
    #[arg(long)]
    json: bool,
    /// List the exports of an NBD server, or the targets, portals and LUNs
    /// of an iSCSI portal.
    #[arg(long)]
    list: bool,
    /// Longest time the allocation scan (block status over the whole store)
    /// may take; a store scanned only in part says how far it got. 0 skips
    /// the scan.
    #[arg(long, value_name = "SECS", default_value_t = 10.0)]
    scan_time: f64,
    /// TLS settings for nbds:// (the URI's tls-* parameters win).
    #[command(flatten)]
    tls: ClientTlsArgs,
    /// iSCSI InitiatorName (default as for `wanblk copy`).
    #[arg(long, value_name = "IQN")]
    initiator_name: Option<String>,
    /// File holding the iSCSI CHAP secret of the user named in the URI;
    /// else WANBLK_ISCSI_PASSWORD.
    #[arg(long, value_name = "FILE", value_parser = parse_secret_file)]
    secret_file: Option<wanblk_iscsi::Secret>,
    /// Mutual CHAP: file holding the target's secret; else
    /// WANBLK_ISCSI_TARGET_PASSWORD.
    #[arg(long, value_name = "FILE", value_parser = parse_secret_file)]
    target_secret_file: Option<wanblk_iscsi::Secret>,
    /// Mutual CHAP: the user name the target must answer with.
    #[arg(long, value_name = "NAME")]
    target_user: Option<String>,
}

/// Block size constraints, bytes.
#[derive(Debug, Clone, Copy, Serialize)]
struct BlockSizes {
    minimum: u32,
    preferred: u32,
    maximum: u32,
}

/// How much of the store is allocated.
#[derive(Debug, Clone, Serialize, Default)]
struct Allocation {
    /// Bytes from the start the scan covered.
    scanned_bytes: u64,
    /// The whole store was scanned.
    complete: bool,
    /// Allocated bytes that hold data.
    data_bytes: u64,
    /// Allocated bytes that read as zeroes.
    zero_bytes: u64,
    /// Unallocated bytes (holes; they read as zeroes).
    hole_bytes: u64,
    /// Runs of one state the store reported.
    extents: u64,
}

/// NBD details.
#[derive(Debug, Clone, Serialize)]
struct NbdDetails {
    export_name: String,
    description: Option<String>,
    transmission_flags: u16,
    flag_names: Vec<&'static str>,
    structured_replies: bool,
    block_sizes_from_server: bool,
    base_allocation: bool,
}

/// iSCSI details.
#[derive(Debug, Clone, Serialize)]
struct IscsiDetails {
    target: String,
    lun: u16,
    vendor: String,
    product: String,
    block_length: u32,
}

/// Local file details.
#[derive(Debug, Clone, Serialize)]
struct FileDetails {
    path: String,
    image_format: Option<&'static str>,
}

/// `wanblk info --json` of one store.
#[derive(Debug, Clone, Serialize)]
struct Info {
    schema_version: u32,
    location: String,
    protocol: &'static str,
    size: u64,
    block_sizes: BlockSizes,
    read_only: bool,
    multi_conn: bool,
    can_flush: bool,
    can_fua: bool,
    can_trim: bool,
    can_zero: bool,
    can_block_status: bool,
    allocation: Option<Allocation>,
    nbd: Option<NbdDetails>,
    iscsi: Option<IscsiDetails>,
    file: Option<FileDetails>,
}

/// One export of `--list` on an NBD server.
#[derive(Debug, Clone, Serialize)]
struct Export {
    name: String,
    description: String,
    uri: String,
    size: Option<u64>,
    read_only: Option<bool>,
    multi_conn: Option<bool>,
    block_sizes: Option<BlockSizes>,
    error: Option<String>,
}

/// One LUN of an iSCSI target.
#[derive(Debug, Clone, Serialize)]
struct Lun {
    lun: u16,
    uri: String,
    size: Option<u64>,
    block_length: Option<u32>,
    vendor: Option<String>,
    product: Option<String>,
    error: Option<String>,
}

/// One target of `--list` on an iSCSI portal.
#[derive(Debug, Clone, Serialize)]
struct Target {
    name: String,
    portals: Vec<String>,
    luns: Vec<Lun>,
    error: Option<String>,
}

/// `wanblk info --list --json`.
#[derive(Debug, Clone, Serialize)]
struct Listing {
    schema_version: u32,
    location: String,
    protocol: &'static str,
    exports: Option<Vec<Export>>,
    targets: Option<Vec<Target>>,
}

/// Runs `wanblk info`.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(info(args))
}

async fn info(args: Args) -> anyhow::Result<()> {
    let scan = Duration::try_from_secs_f64(args.scan_time.max(0.0))
        .map_err(|_| anyhow::anyhow!("--scan-time {}: not a number of seconds", args.scan_time))?;
    let loc = Location::parse(&args.location)?;
    let shown_loc = shown(&args.location);
    let out = if args.list {
        let listing = match &loc {
            Location::Remote(uri) if uri.to_ascii_lowercase().starts_with("iscsi://") => {
                list_iscsi(uri, &shown_loc, iscsi_options(&args)).await?
            }
            Location::Remote(uri) => list_nbd(uri, &shown_loc, &nbd_options(&args)).await?,
            _ => bail!("--list needs an NBD server (nbd://, nbd+unix://) or an iSCSI portal (iscsi://)"),
        };
        if args.json { serde_json::to_string_pretty(&listing)? } else { listing_text(&listing) }
    } else {
        let info = match &loc {
            Location::Remote(uri) if uri.to_ascii_lowercase().starts_with("iscsi://") => {
                iscsi_info(uri, &shown_loc, scan, iscsi_options(&args)).await?
            }
            Location::Remote(uri) => {
                let connector =
                    NbdConnector::new(uri, nbd_options(&args)).map_err(|e| anyhow::anyhow!("{e}"))?;
                let session = connector.open().await?;
                nbd_info(session, &shown_loc, scan).await?
            }
            Location::Command(argv) => {
                let (mut server, session) = LocalServer::start(argv, NbdOptions::default()).await?;
                let info = nbd_info(session, &shown_loc, scan).await;
                server.stop().await;
                info?
            }
            Location::File(path) => {
                let ep = FileEndpoint::open(path, false)?;
                let mut info = describe(&ep, &shown_loc, "file", scan).await;
                // Opened read-only to look at it: say whether it could be written.
                info.read_only = std::fs::metadata(path).map(|m| m.permissions().readonly()).unwrap_or(true);
                info.file = Some(FileDetails {
                    path: path.display().to_string(),
                    image_format: Format::of_file(path).map(Format::qemu_name),
                });
                info
            }
            Location::Null(_) | Location::Random { .. } | Location::Stdio => {
                bail!("{shown_loc}: info takes nbd://, nbd+unix://, iscsi://, a file or [ CMD ]")
            }
        };
        if args.json { serde_json::to_string_pretty(&info)? } else { info_text(&info) }
    };
    println!("{out}");
    Ok(())
}

/// What every endpoint tells: size, block sizes, capabilities, and the
/// allocation scanned for at most `scan`.
async fn describe(ep: &dyn Endpoint, location: &str, protocol: &'static str, scan: Duration) -> Info {
    let caps = ep.capabilities();
    let bs = caps.block_sizes;
    let allocation =
        if caps.can_block_status && !scan.is_zero() { Some(allocation(ep, scan).await) } else { None };
    Info {
        schema_version: SCHEMA_VERSION,
        location: location.to_string(),
        protocol,
        size: ep.size(),
        block_sizes: BlockSizes { minimum: bs.minimum, preferred: bs.preferred, maximum: bs.maximum },
        read_only: caps.read_only,
        multi_conn: caps.can_multi_conn,
        can_flush: caps.can_flush,
        can_fua: caps.can_fua,
        can_trim: caps.can_trim,
        can_zero: caps.can_zero,
        can_block_status: caps.can_block_status,
        allocation,
        nbd: None,
        iscsi: None,
        file: None,
    }
}

/// Block status over the store from its start until it is all covered or
/// `limit` has passed.
async fn allocation(ep: &dyn Endpoint, limit: Duration) -> Allocation {
    let deadline = tokio::time::Instant::now() + limit;
    let size = ep.size();
    let mut a = Allocation::default();
    while a.scanned_bytes < size {
        let len = (size - a.scanned_bytes).min(1 << 30);
        let asked = ep.block_status(a.scanned_bytes, len);
        let Ok(Ok(extents)) = tokio::time::timeout_at(deadline, asked).await else { break };
        let mut at = a.scanned_bytes;
        for e in &extents {
            if e.offset != at || e.length == 0 || at + e.length > size {
                break;
            }
            match (e.hole, e.zero) {
                (true, _) => a.hole_bytes += e.length,
                (false, true) => a.zero_bytes += e.length,
                (false, false) => a.data_bytes += e.length,
            }
            a.extents += 1;
            at += e.length;
        }
        if at == a.scanned_bytes {
            break;
        }
        a.scanned_bytes = at;
    }
    a.complete = a.scanned_bytes >= size;
    a
}

fn flag_names(flags: u16) -> Vec<&'static str> {
    [
        (tflags::READ_ONLY, "read_only"),
        (tflags::SEND_FLUSH, "flush"),
        (tflags::SEND_FUA, "fua"),
        (tflags::ROTATIONAL, "rotational"),
        (tflags::SEND_TRIM, "trim"),
        (tflags::SEND_WRITE_ZEROES, "write_zeroes"),
        (tflags::SEND_DF, "df"),
        (tflags::CAN_MULTI_CONN, "multi_conn"),
        (tflags::SEND_RESIZE, "resize"),
        (tflags::SEND_CACHE, "cache"),
        (tflags::SEND_FAST_ZERO, "fast_zero"),
    ]
    .into_iter()
    .filter(|(f, _)| flags & f != 0)
    .map(|(_, n)| n)
    .collect()
}

async fn nbd_info(session: NbdSession, location: &str, scan: Duration) -> anyhow::Result<Info> {
    let session = Arc::new(session);
    let mut info = describe(&*session, location, "nbd", scan).await;
    let n = session.negotiated();
    info.nbd = Some(NbdDetails {
        export_name: n.export_name.clone(),
        description: n.description.clone(),
        transmission_flags: n.flags,
        flag_names: flag_names(n.flags),
        structured_replies: n.structured_replies,
        block_sizes_from_server: n.block_sizes_from_server,
        base_allocation: n.base_allocation.is_some(),
    });
    let _ = session.close().await;
    Ok(info)
}

/// The iSCSI login options from the identity flags.
fn iscsi_options(args: &Args) -> wanblk_iscsi::IscsiOptions {
    let o = wanblk_iscsi::IscsiOptions {
        login_timeout: Duration::from_secs(15),
        secret: args.secret_file.clone(),
        target_user: args.target_user.clone(),
        target_secret: args.target_secret_file.clone(),
        ..Default::default()
    };
    match &args.initiator_name {
        Some(n) => wanblk_iscsi::IscsiOptions { initiator_name: n.clone(), ..o },
        None => o,
    }
}

async fn iscsi_info(
    uri: &str,
    location: &str,
    scan: Duration,
    opts: wanblk_iscsi::IscsiOptions,
) -> anyhow::Result<Info> {
    let c = wanblk_iscsi::IscsiConnector::new(uri, opts)?;
    let ep = c.connect_endpoint().await?;
    let mut info = describe(&*ep, location, "iscsi", scan).await;
    let (vendor, product) = ep.product();
    info.iscsi = Some(IscsiDetails {
        target: c.uri().target.clone(),
        lun: c.uri().lun,
        vendor,
        product,
        block_length: ep.block_len(),
    });
    let _ = ep.close().await;
    Ok(info)
}

/// The NBD client's options: defaults with the TLS flags.
fn nbd_options(args: &Args) -> NbdOptions {
    NbdOptions { tls: args.tls.options(), ..NbdOptions::default() }
}

async fn list_nbd(uri: &str, location: &str, opts: &NbdOptions) -> anyhow::Result<Listing> {
    let base: NbdUri = uri.parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let lister = NbdConnector::from_uri(base.clone(), opts.clone()).map_err(|e| anyhow::anyhow!("{e}"))?;
    let names = lister.list_exports().await.context("listing exports (NBD_OPT_LIST)")?;
    let mut exports = Vec::new();
    for (name, description) in names {
        let one = NbdUri { export: name.clone(), ..base.clone() };
        let mut e = Export {
            name,
            description,
            uri: one.to_string(),
            size: None,
            read_only: None,
            multi_conn: None,
            block_sizes: None,
            error: None,
        };
        let connector = match NbdConnector::from_uri(one, opts.clone()) {
            Ok(c) => c,
            Err(err) => {
                e.error = Some(err.to_string());
                exports.push(e);
                continue;
            }
        };
        match connector.info().await {
            Ok(n) => {
                e.size = Some(n.size);
                e.read_only = Some(n.read_only());
                e.multi_conn = Some(n.has(tflags::CAN_MULTI_CONN));
                let b = n.block_sizes;
                e.block_sizes =
                    Some(BlockSizes { minimum: b.minimum, preferred: b.preferred, maximum: b.maximum });
            }
            Err(err) => e.error = Some(err.kind.to_string()),
        }
        exports.push(e);
    }
    Ok(Listing {
        schema_version: SCHEMA_VERSION,
        location: location.to_string(),
        protocol: "nbd",
        exports: Some(exports),
        targets: None,
    })
}

async fn list_iscsi(uri: &str, location: &str, opts: wanblk_iscsi::IscsiOptions) -> anyhow::Result<Listing> {
    let portal = wanblk_iscsi::IscsiConnector::for_portal(uri, opts.clone())?;
    let p = portal.uri().clone();
    let found = match portal.discover().await {
        Ok(found) => found,
        // Portals often ask no CHAP for discovery (iscsiadm's default is
        // none) while the targets do: then try it without credentials.
        Err(e) if p.user.is_some() => {
            let anonymous = wanblk_iscsi::IscsiOptions {
                secret: None,
                target_user: None,
                target_secret: None,
                ..opts.clone()
            };
            let plain =
                wanblk_iscsi::IscsiConnector::for_portal(&format!("iscsi://{}", p.address()), anonymous);
            match plain {
                Ok(c) => c.discover().await.map_err(|_| e).context("SendTargets discovery")?,
                Err(_) => return Err(anyhow::Error::from(e).context("SendTargets discovery")),
            }
        }
        Err(e) => return Err(anyhow::Error::from(e).context("SendTargets discovery")),
    };
    // Credentials, if any, go along to each target's login (never shown):
    // the user in the URI, a password from the URI as the secret.
    let auth = p.user.as_ref().map_or(String::new(), |u| format!("{u}@"));
    let opts = match (&p.password, &opts.secret) {
        (Some(pw), None) => {
            wanblk_iscsi::IscsiOptions { secret: Some(wanblk_iscsi::Secret::new(pw.as_bytes())), ..opts }
        }
        _ => opts,
    };
    let mut targets = Vec::new();
    for t in found {
        let mut target =
            Target { name: t.name.clone(), portals: t.addresses.clone(), luns: Vec::new(), error: None };
        let with_lun = |lun: u16| format!("iscsi://{auth}{}/{}/{lun}", p.address(), t.name);
        let shown_lun = |lun: u16| format!("iscsi://{}/{}/{lun}", p.address(), t.name);
        match wanblk_iscsi::IscsiConnector::new(&with_lun(0), opts.clone()) {
            Ok(c) => match c.report_luns().await {
                Ok(luns) => {
                    for lun in luns {
                        target.luns.push(lun_info(&with_lun(lun), shown_lun(lun), lun, opts.clone()).await);
                    }
                }
                Err(e) => target.error = Some(format!("REPORT LUNS: {}", e.kind)),
            },
            Err(e) => target.error = Some(e.kind.to_string()),
        }
        targets.push(target);
    }
    Ok(Listing {
        schema_version: SCHEMA_VERSION,
        location: location.to_string(),
        protocol: "iscsi",
        exports: None,
        targets: Some(targets),
    })
}

async fn lun_info(uri: &str, shown_uri: String, lun: u16, opts: wanblk_iscsi::IscsiOptions) -> Lun {
    let mut l =
        Lun { lun, uri: shown_uri, size: None, block_length: None, vendor: None, product: None, error: None };
    let opened = match wanblk_iscsi::IscsiConnector::new(uri, opts) {
        Ok(c) => c.connect_endpoint().await,
        Err(e) => Err(e),
    };
    match opened {
        Ok(ep) => {
            let (vendor, product) = ep.product();
            (l.size, l.block_length, l.vendor, l.product) =
                (Some(ep.size()), Some(ep.block_len()), Some(vendor), Some(product));
            let _ = ep.close().await;
        }
        Err(e) => l.error = Some(e.kind.to_string()),
    }
    l
}

fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 { format!("{bytes} bytes") } else { format!("{bytes} ({v:.1} {})", UNITS[u]) }
}

fn yes(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn info_text(i: &Info) -> String {
    let mut out = vec![
        format!("location:        {}", i.location),
        format!("protocol:        {}", i.protocol),
        format!("size:            {}", human(i.size)),
        format!(
            "block sizes:     minimum {}, preferred {}, maximum {}",
            i.block_sizes.minimum, i.block_sizes.preferred, i.block_sizes.maximum
        ),
        format!("read-only:       {}", yes(i.read_only)),
        format!("multi-conn:      {}", yes(i.multi_conn)),
        format!(
            "supports:        flush {}, fua {}, trim {}, zeroing {}, block status {}",
            yes(i.can_flush),
            yes(i.can_fua),
            yes(i.can_trim),
            yes(i.can_zero),
            yes(i.can_block_status)
        ),
    ];
    if let Some(n) = &i.nbd {
        out.push(format!("export name:     {:?}", n.export_name));
        if let Some(d) = &n.description {
            out.push(format!("description:     {d}"));
        }
        out.push(format!("flags:           {:#06x} {}", n.transmission_flags, n.flag_names.join(" ")));
        out.push(format!("structured:      {}", yes(n.structured_replies)));
    }
    if let Some(s) = &i.iscsi {
        out.push(format!("target:          {}", s.target));
        out.push(format!("lun:             {}", s.lun));
        out.push(format!("vendor/product:  {} {}", s.vendor, s.product));
        out.push(format!("block length:    {}", s.block_length));
    }
    if let Some(f) = &i.file {
        out.push(format!("image format:    {}", f.image_format.unwrap_or("none recognised (raw)")));
    }
    match &i.allocation {
        Some(a) => {
            let scope = if a.complete {
                "whole store".to_string()
            } else {
                format!("first {} only: the scan ran out of time (--scan-time)", human(a.scanned_bytes))
            };
            out.push(format!(
                "allocation:      data {}, zeroes {}, holes {} ({} extents; {scope})",
                human(a.data_bytes),
                human(a.zero_bytes),
                human(a.hole_bytes),
                a.extents
            ));
        }
        None if i.can_block_status => out.push("allocation:      not scanned (--scan-time 0)".to_string()),
        None => out.push("allocation:      unknown (the store does not report it)".to_string()),
    }
    out.join("\n")
}

fn listing_text(l: &Listing) -> String {
    let mut out = Vec::new();
    for e in l.exports.iter().flatten() {
        let name = if e.name.is_empty() { "\"\" (default)".to_string() } else { format!("{:?}", e.name) };
        out.push(format!("export {name}: {}", e.uri));
        if !e.description.is_empty() {
            out.push(format!("  description: {}", e.description));
        }
        if let Some(s) = e.size {
            out.push(format!("  size: {}", human(s)));
        }
        if let (Some(ro), Some(mc)) = (e.read_only, e.multi_conn) {
            out.push(format!("  read-only: {}, multi-conn: {}", yes(ro), yes(mc)));
        }
        if let Some(err) = &e.error {
            out.push(format!("  error: {err}"));
        }
    }
    for t in l.targets.iter().flatten() {
        out.push(format!("target {}", t.name));
        for p in &t.portals {
            out.push(format!("  portal {p}"));
        }
        for lun in &t.luns {
            match (lun.size, &lun.error) {
                (Some(s), _) => out.push(format!(
                    "  lun {}: {} ({}, blocks of {} bytes, {} {})",
                    lun.lun,
                    lun.uri,
                    human(s),
                    lun.block_length.unwrap_or(0),
                    lun.vendor.as_deref().unwrap_or(""),
                    lun.product.as_deref().unwrap_or("")
                )),
                (None, Some(e)) => out.push(format!("  lun {}: {e}", lun.lun)),
                (None, None) => out.push(format!("  lun {}", lun.lun)),
            }
        }
        if let Some(e) = &t.error {
            out.push(format!("  error: {e}"));
        }
    }
    if out.is_empty() {
        out.push(format!("{}: nothing offered", l.location));
    }
    out.join("\n")
}
