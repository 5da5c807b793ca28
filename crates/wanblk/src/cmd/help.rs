//! The long help texts: what each subcommand does, the location forms it
//! takes, and examples. clap shows a subcommand's one-line doc comment in
//! `wanblk --help` and these in `wanblk SUBCOMMAND --help` (and the man
//! pages); `tests/help.rs` checks that every location form is named.
//!
//! One macro per block of text, so the forms are written once.

/// The location forms, as a help section (`$($extra)*` is appended).
macro_rules! locations {
    () => {
        "LOCATIONS:
  nbd://HOST[:PORT]/EXPORT
      An NBD export over TCP (port 10809 if none). e.g. nbd://san.example/disk,
      nbd://10.0.0.5:10810/vm1, nbd://[fd00::5]/disk
  nbd+unix:///EXPORT?socket=PATH
      An NBD export on a local Unix socket. e.g. nbd+unix:///?socket=/run/disk.sock
  nbds://HOST[:PORT]/EXPORT, nbds+unix:///EXPORT?socket=PATH
      NBD over TLS: the server's certificate is verified (the system's CAs, or ca-cert.pem
      in --tls-certificates DIR or ?tls-certificates=DIR; a client certificate from there
      too). e.g. nbds://san.example/disk?tls-certificates=/etc/pki/wanblk
  nbd+vsock://CID[:PORT]/EXPORT
      NBD over vsock: not supported (refused with a clear error).
  iscsi://[USER[%PASSWORD]@]HOST[:PORT]/TARGET-IQN/LUN
      An iSCSI LUN (port 3260 if none; CHAP login with USER; better than a PASSWORD in
      the URI, which `ps` shows: --secret-file FILE or WANBLK_ISCSI_PASSWORD; mutual CHAP
      with --target-user and --target-secret-file; --initiator-name for the target's ACL).
      e.g. iscsi://san.example/iqn.2024-01.example.san:disk/1
  FILE or DEVICE (also file:///PATH)
      A local image file or block device, read and written as raw bytes. e.g. disk.img,
      /dev/vdb. A file in a disk image format (qcow2, vmdk, vhdx, vdi...) is named as such:
      use the [ CMD ] form below to read or write the disk it holds.
  null:[SIZE]
      Destination: a sink that discards everything. Source: SIZE bytes of zeroes.
  random:SIZE[:SEED]
      Source: SIZE bytes of pseudo-random data (for benchmarks).
  -
      Standard input (source) or standard output (destination), read or written in order
      as one stream; nothing else is written to stdout then. From stdin the copy ends at
      the end of the input (or of the destination, or at --length).
  [ CMD ARGS ... ]
      A local NBD server started for the command and stopped at its end (socket activation,
      as nbdcopy does; qemu-nbd and nbdkit support it). [ and ] are words of their own;
      CMD's flags stay CMD's (a `--` before it, as nbdcopy wants, is accepted too).
      e.g. [ qemu-nbd -f qcow2 disk.qcow2 ] (the disk a qcow2 file holds),
      [ qemu-nbd -r -f vmdk disk.vmdk ], [ nbdkit -r curl https://example.com/disk.img ]
"
    };
}

/// The pointer to the full usage guide.
macro_rules! see_also {
    () => {
        "
More: `man wanblk` (or `wanblk man`), and the README's sections \"Using it\" and \"For storage
administrators\" (install, prepare an export, back up and restore, troubleshooting)."
    };
}

/// `wanblk --help`, after the subcommand list.
pub(crate) const MAIN_AFTER: &str = concat!(
    "Each subcommand's --help lists the locations it takes (nbd://, nbd+unix://, iscsi://, files,
null:, random:, -, [ CMD ]) with examples:
  wanblk copy nbd://san.example/disk disk.img        # restore an export to a local image
  wanblk copy disk.img iscsi://san/iqn.x:disk/1 -C 8 # back up over 8 sessions
  wanblk info nbd://san.example/disk                 # size, block sizes, flags, allocation
  wanblk serve iscsi://san/iqn.x:disk/1 --socket /run/disk.sock
",
    see_also!()
);

/// `wanblk copy --help`, before the options.
pub(crate) const COPY_ABOUT: &str = "\
Copy a disk or image between any two locations: back up, restore, migrate, target to target.

Network stores are reached over N parallel sessions (TCP connections or iSCSI sessions),
N tuned automatically while copying (-C auto, the default: more sessions while goodput grows,
then the fewest that keep it) or fixed (-C N). The copy is cut into requests of at most
--request-size; every session keeps up to --requests of them in flight and takes the next as
soon as one completes, so a slow connection never holds the others back. Holes and runs of
zeroes are not carried as data (block status, zero detection).

Sessions that fail or stop answering are replaced (--retry-for, --io-timeout) and their
requests sent again; the copy goes on.

A new destination file is written as FILE.wanblk-part and renamed when the copy completes;
an existing destination (file, device, NBD or iSCSI) is written in place. The copy ends with
a flush of the destination to stable storage (unless --no-flush).

Resuming: a copy to a file keeps a journal of the ranges it completed and flushed beside it
(FILE.wanblk-journal; --state FILE for any destination). If the copy is interrupted (Ctrl-C,
SIGTERM, an error, a crash), running the same command again checks that source and
destination are the same ones and copies only what is missing.";

/// `wanblk copy --help`, after the options.
pub(crate) const COPY_AFTER: &str = concat!(
    locations!(),
    "
EXAMPLES:
  wanblk copy nbd://san.example/disk disk.img --checksum # restore; prints the image's sha256
  wanblk copy disk.img nbd://san.example/disk --verify   # back up, then read it back and compare
  wanblk copy /dev/vdb iscsi://san/iqn.2024-01.example:disk/1 -C 8 --report r.json   # back up
  wanblk copy nbd://a/x nbd+unix:///y?socket=/run/y.sock # target to target
  wanblk copy nbds://san/disk?tls-certificates=/etc/pki/wanblk disk.img   # over TLS
  wanblk copy --rate 200M disk.img nbd://san/disk         # at most 200 Mbit/s on a shared link
  cat disk.img | wanblk copy - nbd://san/disk             # from a pipe
  wanblk copy nbd://san/disk - | gzip > disk.img.gz       # to a pipe
  wanblk copy [ qemu-nbd -r -f qcow2 vm.qcow2 ] nbd://san/vm   # the disk inside a qcow2 file
  wanblk copy nbd://san/vm [ qemu-nbd -f qcow2 vm.qcow2 ]      # into an existing qcow2 file
      (create it first: qemu-img create -f qcow2 vm.qcow2 SIZE)

PROGRESS:
  On a terminal a bar shows bytes, rate (Mbit/s), ETA and sessions; otherwise a line goes to
  stderr every --progress-interval seconds (and one at the end). --progress=FD sends the lines
  to another file descriptor, --progress-json makes them JSON objects, --no-progress stops
  them. The summary and --report give the rate in Mbit/s (10^6 bit/s) too.

EXIT CODES:
  0 success; 1 failure (an error, or --verify found a difference); 2 usage (bad option or
  location, or a journal written for another copy); 3 incomplete (interrupted by SIGINT or
  SIGTERM: run the same command again to resume). A --stop-after run exits 0.
",
    see_also!()
);

/// `wanblk info --help`, before the options.
pub(crate) const INFO_ABOUT: &str = "\
Show what a store is: size, block sizes, whether it is read-only, whether several sessions see
one consistent disk (multi-conn), what it supports (flush, FUA, trim, zeroing, block status),
and how much of it is allocated (data, zeroes, holes: scanned with block status for at most
--scan-time).

With --list: the exports an NBD server offers (NBD_OPT_LIST, each with its size), or the
targets an iSCSI portal offers (SendTargets discovery) with their portals and LUNs (REPORT
LUNS, each with its capacity). An iSCSI location for --list needs only the portal
(iscsi://HOST[:PORT]).

--json prints one JSON object whose layout is described in docs/info-schema.md (it carries a
schema_version).";

/// `wanblk info --help`, after the options.
pub(crate) const INFO_AFTER: &str = concat!(
    locations!(),
    "  (info takes nbd://, nbd+unix://, iscsi://, FILE and [ CMD ]; null:, random: and - are
  for wanblk copy.)

EXAMPLES:
  wanblk info nbd://san.example/disk
  wanblk info --list nbd://san.example
  wanblk info --list iscsi://san.example
  wanblk info --json iscsi://san.example/iqn.2024-01.example:disk/1 | jq .size
  wanblk info [ qemu-nbd -r -f qcow2 vm.qcow2 ]
",
    see_also!()
);

/// `wanblk serve --help`, before the options.
pub(crate) const SERVE_ABOUT: &str = "\
Serve a remote store to local NBD clients (qemu, nbdfuse, nbd-client, nbdcopy...) through N
tuned parallel sessions, so every application gets the long-fat-network speed-up without
knowing it.

The store is opened as `wanblk copy` opens a network store (-C N|auto, --requests,
--request-size...). Local clients connect to the address or socket given here. Their requests
go through a cache shared by all clients: sequential reads are prefetched far ahead, data read
is kept (--cache-size), and writes are acknowledged once held in memory (--write-back-limit)
and sent in large requests; a flush (or a FUA write) returns once the remote has every earlier
write, so a crash of wanblk loses only writes no flush covered, like a disk's volatile cache.
Straggling reads are duplicated on idle sessions; writes never are. Runs until SIGINT or
SIGTERM, then writes back what is pending. Each local URI is printed on stdout when listening;
under systemd (Type=notify) it also tells the service manager it is ready.

An nbds:// store takes its TLS settings from the URI (libnbd's ?tls-certificates=DIR etc.);
the --tls* options here are for the local side. The Unix socket is created 0600, so only this
user can reach the remote store through it.";

/// `wanblk serve --help`, after the options.
pub(crate) const SERVE_AFTER: &str = concat!(
    locations!(),
    "  (serve takes a network store: nbd://, nbd+unix:// or iscsi://. FILE, null:, random:, -
  and [ CMD ] are for wanblk copy.)

EXAMPLES:
  wanblk serve iscsi://san/iqn.x:disk/1 --socket /run/disk.sock
  nbdfuse /mnt/disk nbd+unix:///?socket=/run/disk.sock
  qemu-system-x86_64 -drive file=nbd+unix:///?socket=/run/disk.sock,format=raw,cache=none
  A systemd unit: docs/systemd/wanblk-serve.service.
",
    see_also!()
);

/// `wanblk mount --help`, before the options.
pub(crate) const MOUNT_ABOUT: &str = "\
Show a remote disk as the regular file MOUNTPOINT/disk (FUSE), with read-ahead and write-back,
over N tuned sessions, so losetup, mkfs, mount and dd work on it.";

/// `wanblk mount --help`, after the options.
pub(crate) const MOUNT_AFTER: &str = concat!(
    "The disk appears as MOUNTPOINT/disk, a regular file of the remote's size; its path is printed
on stdout once mounted. Reads and writes of up to 1 MiB arrive many at once; sequential reads
are prefetched far ahead, writes are acknowledged once held in memory and sent in large
requests. fsync (and sync, and a file system's journal commits through a loop device) returns
once the remote has every earlier write: a crash of wanblk loses only writes no fsync covered,
like a disk's volatile write cache.

SIGINT or SIGTERM writes back what is pending, then unmounts. If a loop device or an open file
still uses the disk, the mount stays (wanblk says so) until it is released and wanblk is
stopped again, or until `umount MOUNTPOINT`.

Mounting needs root (or the fusermount3 helper of the fuse3 package) and /dev/fuse.

",
    locations!(),
    "  (mount takes a network store: nbd://, nbd+unix:// or iscsi://. FILE, null:, random:, -
  and [ CMD ] are for wanblk copy.)

EXAMPLE:
  wanblk mount nbd://san.example/disk /mnt/wan &
  dev=$(losetup -f --show /mnt/wan/disk)
  mkfs.ext4 $dev && mount $dev /srv/data
  ...
  umount /srv/data && losetup -d $dev && kill %1
",
    see_also!()
);

/// `wanblk target --help`, after the options.
pub(crate) const TARGET_AFTER: &str = concat!(
    "Each served URI is printed on stdout on its own line as soon as the target listens, e.g.
  nbd://127.0.0.1:10809/disk
  nbd+unix:///disk?socket=/tmp/disk.sock
Scripts can read these lines to connect: they are locations for wanblk copy, info, serve and
mount (and for nbdinfo, nbdcopy, qemu). The target runs until SIGINT or SIGTERM, then stops
accepting, lets requests in flight finish, removes its socket and pid file, and exits 0. Under
systemd (Type=notify) it tells the service manager when it is ready and when it stops.

Security: a Unix socket is created mode 0600 (--socket-mode); listening beyond loopback without
TLS is refused unless --insecure is given, because anyone who can reach the port can read and
write the disk. With --tls require every client must start TLS (NBD_OPT_STARTTLS) and verify
this target's certificate (clients then use nbds://); client certificates are checked when
--tls-certificates holds a ca-cert.pem (required with --tls-verify-peer or --tls-allow).

EXAMPLES:
  wanblk target --size 4G --export disk
  wanblk target --file disk.img --create 10G --listen 127.0.0.1:0 --socket /tmp/t.sock
  wanblk target --size 1T --fill random:7 --read-only
  wanblk target --file disk.img --listen 0.0.0.0:10809 --tls require --tls-certificates /etc/pki/wanblk
",
    see_also!()
);
