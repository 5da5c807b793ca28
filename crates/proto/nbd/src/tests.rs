//! In-memory tests: a client and a server machine driven against each other,
//! scripted hostile servers, and property tests.

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;

use crate::client::*;
use crate::codec::{Codec, Reader};
use crate::consts::*;
use crate::error::*;
use crate::server::*;
use crate::wire::*;

const SIZE: u64 = 1 << 20;

fn export(flags: u16) -> ExportConfig {
    ExportConfig {
        name: "disk".into(),
        description: "test disk".into(),
        size: SIZE,
        flags,
        block_sizes: BlockSizes { minimum: 1, preferred: 4096, maximum: 65536 },
        base_allocation: true,
    }
}

fn all_flags() -> u16 {
    tflags::SEND_FLUSH
        | tflags::SEND_FUA
        | tflags::SEND_TRIM
        | tflags::SEND_WRITE_ZEROES
        | tflags::CAN_MULTI_CONN
}

/// A client, a server and a toy disk the test serves requests from.
struct Pair {
    c: Client,
    s: Server,
    disk: Vec<u8>,
    events: Vec<Event>,
    server_events: Vec<ServerEvent>,
    /// Serve reads as data/hole chunk pairs instead of one chunk.
    split_reads: bool,
}

impl Pair {
    fn new(ccfg: ClientConfig, scfg: ServerConfig) -> Pair {
        Pair {
            c: Client::new(ccfg),
            s: Server::new(scfg),
            disk: vec![0; SIZE as usize],
            events: Vec::new(),
            server_events: Vec::new(),
            split_reads: false,
        }
    }

    fn go(flags: u16) -> Pair {
        let mut p = Pair::new(
            ClientConfig { export_name: "disk".into(), ..Default::default() },
            ServerConfig { exports: vec![export(flags)], structured_replies: true, ..Default::default() },
        );
        p.pump();
        p
    }

    /// Moves bytes both ways (one byte at a time every other round, to
    /// exercise partial frames) until nothing moves.
    fn pump(&mut self) {
        let mut round = 0;
        loop {
            round += 1;
            let mut moved = false;
            while let Some(seg) = self.s.poll_transmit() {
                moved = true;
                if round % 2 == 0 {
                    for b in seg.iter() {
                        self.c.handle_input(&[*b]).unwrap();
                    }
                } else {
                    self.c.handle_input(&seg).unwrap();
                }
            }
            while let Some(seg) = self.c.poll_transmit() {
                moved = true;
                self.s.handle_input(&seg).unwrap();
            }
            while let Some(ev) = self.s.poll_event() {
                moved = true;
                match &ev {
                    ServerEvent::Request(r) => self.serve(r.clone()),
                    // The TLS handshake itself is the driver's; here it is instant.
                    ServerEvent::StartTls => self.s.tls_established(),
                    _ => {}
                }
                self.server_events.push(ev);
            }
            while let Some(ev) = self.c.poll_event() {
                if ev == Event::StartTls {
                    self.c.tls_established();
                    moved = true;
                }
                self.events.push(ev);
            }
            if !moved {
                break;
            }
        }
    }

    fn serve(&mut self, r: ServerRequest) {
        let range = r.offset as usize..r.offset as usize + r.length as usize;
        match r.command {
            Command::Read if self.split_reads && r.length >= 2 => {
                let half = r.length / 2;
                let data = Bytes::copy_from_slice(&self.disk[range.start..range.start + half as usize]);
                self.s.reply_read_chunks(
                    r.cookie,
                    vec![
                        ReadChunk::Data(r.offset, data),
                        ReadChunk::Hole(r.offset + u64::from(half), r.length - half),
                    ],
                );
            }
            Command::Read => {
                let d = Bytes::copy_from_slice(&self.disk[range]);
                self.s.reply_read(r.cookie, r.offset, d)
            }
            Command::Write => {
                self.disk[range].copy_from_slice(&r.data);
                self.s.reply_ok(r.cookie)
            }
            Command::Trim | Command::WriteZeroes => {
                self.disk[range].fill(0);
                self.s.reply_ok(r.cookie)
            }
            Command::Flush => self.s.reply_ok(r.cookie),
            Command::BlockStatus => {
                let half = (r.length / 2).max(1);
                let mut d = vec![BlockDescriptor { length: half, flags: 0 }];
                if r.length > half {
                    d.push(BlockDescriptor { length: r.length - half, flags: STATE_HOLE | STATE_ZERO });
                }
                self.s.reply_block_status(r.cookie, d)
            }
            _ => self.s.reply_error(r.cookie, NbdError::Inval, "no"),
        }
    }

    fn ready(&self) -> Negotiated {
        self.events
            .iter()
            .find_map(|e| if let Event::Ready(n) = e { Some(n.clone()) } else { None })
            .expect("handshake finished")
    }

    fn reply(&mut self, cookie: u64) -> Reply {
        let i = self
            .events
            .iter()
            .position(|e| matches!(e, Event::Reply(r) if r.cookie == cookie))
            .expect("reply arrived");
        match self.events.remove(i) {
            Event::Reply(r) => r,
            _ => unreachable!(),
        }
    }

    fn run(&mut self, req: Request) -> Result<ReplyData, ServerError> {
        let cookie = self.c.send_request(req).unwrap();
        self.pump();
        self.reply(cookie).result
    }
}

#[test]
fn handshake_negotiates_go_structured_and_base_allocation() {
    let p = Pair::go(all_flags());
    let n = p.ready();
    assert_eq!(n.size, SIZE);
    assert!(n.structured_replies);
    assert_eq!(n.base_allocation, Some(BASE_ALLOCATION_ID));
    assert_eq!(n.block_sizes, BlockSizes { minimum: 1, preferred: 4096, maximum: 65536 });
    assert!(n.block_sizes_from_server);
    assert!(n.has(tflags::CAN_MULTI_CONN));
    assert!(!n.used_export_name);
    assert!(matches!(
        p.server_events[0],
        ServerEvent::Selected { export: 0, structured_replies: true, base_allocation: true }
    ));
}

#[test]
fn write_read_flush_trim_zero_round_trip() {
    let mut p = Pair::go(all_flags());
    let data: Bytes = (0..10_000u32).map(|i| (i % 251) as u8).collect::<Vec<_>>().into();
    assert_eq!(p.run(Request::Write { offset: 4096, data: data.clone(), fua: true }), Ok(ReplyData::None));
    assert_eq!(
        p.run(Request::Read { offset: 4096, length: 10_000 }),
        Ok(ReplyData::Read(BytesMut::from(&data[..])))
    );
    assert_eq!(p.run(Request::Flush), Ok(ReplyData::None));
    assert_eq!(p.run(Request::Trim { offset: 4096, length: 100, fua: false }), Ok(ReplyData::None));
    assert_eq!(
        p.run(Request::WriteZeroes { offset: 4196, length: 100, no_hole: true, fua: false }),
        Ok(ReplyData::None)
    );
    let Ok(ReplyData::Read(back)) = p.run(Request::Read { offset: 4096, length: 10_000 }) else { panic!() };
    assert!(back[..200].iter().all(|b| *b == 0));
    assert_eq!(back[200..], data[200..]);
}

#[test]
fn split_reads_are_reassembled_with_holes_zeroed() {
    let mut p = Pair::go(all_flags());
    p.disk.fill(7);
    p.split_reads = true;
    let Ok(ReplyData::Read(d)) = p.run(Request::Read { offset: 0, length: 1000 }) else { panic!() };
    assert_eq!(d.len(), 1000);
    assert!(d[..500].iter().all(|b| *b == 7));
    assert!(d[500..].iter().all(|b| *b == 0));
}

#[test]
fn block_status_descriptors_are_returned() {
    let mut p = Pair::go(all_flags());
    let r = p.run(Request::BlockStatus { offset: 0, length: 8192, req_one: false });
    assert_eq!(
        r,
        Ok(ReplyData::BlockStatus(vec![
            BlockDescriptor { length: 4096, flags: 0 },
            BlockDescriptor { length: 4096, flags: STATE_HOLE | STATE_ZERO },
        ]))
    );
}

#[test]
fn many_requests_in_flight_complete_in_any_order() {
    let mut p = Pair::go(all_flags());
    let cookies: Vec<u64> = (0..64)
        .map(|i| p.c.send_request(Request::Read { offset: i * 4096, length: 4096 }).unwrap())
        .collect();
    assert_eq!(p.c.in_flight(), 64);
    p.pump();
    for c in cookies {
        assert!(p.reply(c).result.is_ok());
    }
    assert_eq!(p.c.in_flight(), 0);
}

#[test]
fn simple_replies_when_structured_disabled() {
    let mut p = Pair::new(
        ClientConfig { export_name: "disk".into(), structured_replies: false, ..Default::default() },
        ServerConfig { exports: vec![export(all_flags())], structured_replies: true, ..Default::default() },
    );
    p.pump();
    let n = p.ready();
    assert!(!n.structured_replies);
    assert_eq!(n.base_allocation, None);
    p.disk[..4].copy_from_slice(b"abcd");
    assert_eq!(
        p.run(Request::Read { offset: 0, length: 4 }),
        Ok(ReplyData::Read(BytesMut::from(&b"abcd"[..])))
    );
    assert_eq!(
        p.c.send_request(Request::BlockStatus { offset: 0, length: 1, req_one: false }),
        Err(RequestError::Unsupported("NBD_CMD_BLOCK_STATUS (base:allocation not negotiated)"))
    );
}

#[test]
fn server_refusing_structured_replies_gives_simple_replies() {
    let mut p = Pair::new(
        ClientConfig { export_name: "disk".into(), ..Default::default() },
        ServerConfig { exports: vec![export(all_flags())], structured_replies: false, ..Default::default() },
    );
    p.pump();
    assert!(!p.ready().structured_replies);
    assert!(p.run(Request::Read { offset: 0, length: 4 }).is_ok());
}

#[test]
fn server_errors_reach_the_client() {
    let mut p = Pair::go(tflags::READ_ONLY | tflags::SEND_TRIM);
    // The client refuses locally...
    assert_eq!(
        p.c.send_request(Request::Write { offset: 0, data: Bytes::from_static(b"x"), fua: false }),
        Err(RequestError::ReadOnly)
    );
    // ...and a request beyond the end is refused locally too.
    assert!(matches!(
        p.c.send_request(Request::Read { offset: SIZE, length: 1 }),
        Err(RequestError::OutOfRange { .. })
    ));
    assert_eq!(
        p.c.send_request(Request::Read { offset: 0, length: 65537 }),
        Err(RequestError::TooLarge { length: 65537, max: 65536 })
    );
}

#[test]
fn unknown_export_is_refused() {
    let mut p = Pair::new(
        ClientConfig { export_name: "nope".into(), ..Default::default() },
        ServerConfig { exports: vec![export(0)], structured_replies: true, ..Default::default() },
    );
    let mut err = None;
    for _ in 0..10 {
        while let Some(seg) = p.s.poll_transmit() {
            if let Err(e) = p.c.handle_input(&seg) {
                err = Some(e);
            }
        }
        while let Some(seg) = p.c.poll_transmit() {
            p.s.handle_input(&seg).unwrap();
        }
    }
    match err {
        Some(ClientError::Refused { option: "NBD_OPT_GO", reply, .. }) => assert!(reply.contains("UNKNOWN")),
        e => panic!("{e:?}"),
    }
}

#[test]
fn info_and_list_goals_abort_cleanly() {
    let mut p = Pair::new(
        ClientConfig { export_name: "disk".into(), goal: Goal::Info, ..Default::default() },
        ServerConfig { exports: vec![export(0)], structured_replies: true, ..Default::default() },
    );
    p.pump();
    assert!(
        matches!(&p.events[0], Event::Info(n) if n.size == SIZE && n.description.as_deref() == Some("test disk"))
    );
    assert!(p.s.is_closed());
    let mut p = Pair::new(
        ClientConfig { goal: Goal::List, ..Default::default() },
        ServerConfig { exports: vec![export(0)], structured_replies: true, ..Default::default() },
    );
    p.pump();
    assert!(matches!(&p.events[0], Event::Exports(e) if e[0].name == "disk"));
    assert!(matches!(p.server_events.last(), Some(ServerEvent::Close(_))));
}

#[test]
fn disconnect_sends_disc() {
    let mut p = Pair::go(0);
    p.c.disconnect().unwrap();
    assert!(matches!(p.c.send_request(Request::Flush), Err(RequestError::NotReady(_))));
    p.pump();
    assert!(matches!(p.server_events.last(), Some(ServerEvent::Close(m)) if m.contains("DISC")));
}

// ---- scripted servers -------------------------------------------------

fn opt_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    OptionReplyHeader { option, reply, length: data.len() as u32 }.encode(&mut b);
    b.put_slice(data);
    b.to_vec()
}

fn greeting() -> Vec<u8> {
    Greeting::Newstyle { flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES }.to_bytes().to_vec()
}

fn drain(c: &mut Client) -> Vec<u8> {
    let mut v = Vec::new();
    while let Some(s) = c.poll_transmit() {
        v.extend_from_slice(&s);
    }
    v
}

#[test]
fn go_unsupported_falls_back_to_export_name() {
    let mut c = Client::new(ClientConfig { export_name: "e".into(), ..Default::default() });
    c.handle_input(&greeting()).unwrap();
    c.handle_input(&opt_reply(opt::STRUCTURED_REPLY, rep::ERR_UNSUP, b"")).unwrap();
    // (pipelined: the meta context request was sent too, and is refused)
    c.handle_input(&opt_reply(opt::SET_META_CONTEXT, rep::ERR_INVALID, b"")).unwrap();
    c.handle_input(&opt_reply(opt::GO, rep::ERR_UNSUP, b"old server")).unwrap();
    let sent = drain(&mut c);
    // flags, STRUCTURED_REPLY, GO, EXPORT_NAME "e"
    assert_eq!(&sent[sent.len() - 17..sent.len() - 9], &IHAVEOPT.to_be_bytes());
    assert_eq!(&sent[sent.len() - 9..sent.len() - 5], &opt::EXPORT_NAME.to_be_bytes());
    assert_eq!(&sent[sent.len() - 1..], b"e");
    c.handle_input(&ExportNameReply { size: 4096, flags: tflags::HAS_FLAGS | tflags::READ_ONLY }.to_bytes())
        .unwrap();
    let Some(Event::Ready(n)) = c.poll_event() else { panic!() };
    assert!(n.used_export_name && n.read_only() && n.size == 4096 && !n.structured_replies);
}

fn sent_options(bytes: &[u8]) -> Vec<u32> {
    // client flags, then option headers with data
    let mut r = Reader::new(&bytes[4..], "options");
    let mut v = Vec::new();
    while r.remaining() > 0 {
        let h = OptionHeader::decode(&mut r).unwrap();
        r.take(h.length as usize).unwrap();
        v.push(h.option);
    }
    v
}

#[test]
fn options_are_pipelined_after_the_greeting() {
    let mut c = Client::new(ClientConfig { export_name: "e".into(), ..Default::default() });
    c.handle_input(&greeting()).unwrap();
    assert_eq!(sent_options(&drain(&mut c)), vec![opt::STRUCTURED_REPLY, opt::SET_META_CONTEXT, opt::GO]);
}

#[test]
fn options_one_round_trip_each_without_pipelining() {
    let mut p = Pair::new(
        ClientConfig { export_name: "disk".into(), pipeline_options: false, ..Default::default() },
        ServerConfig { exports: vec![export(all_flags())], structured_replies: true, ..Default::default() },
    );
    p.c.handle_input(&{
        let mut v = Vec::new();
        while let Some(b) = p.s.poll_transmit() {
            v.extend_from_slice(&b);
        }
        v
    })
    .unwrap();
    assert_eq!(sent_options(&drain(&mut p.c)), vec![opt::STRUCTURED_REPLY]);
    let mut p = Pair::new(
        ClientConfig { export_name: "disk".into(), pipeline_options: false, ..Default::default() },
        ServerConfig { exports: vec![export(all_flags())], structured_replies: true, ..Default::default() },
    );
    p.pump();
    let n = p.ready();
    assert!(n.structured_replies && n.base_allocation.is_some());
}

#[test]
fn oldstyle_server_is_accepted() {
    let mut c = Client::new(ClientConfig::default());
    c.handle_input(&Greeting::Oldstyle { size: 512, flags: 1 }.to_bytes()).unwrap();
    let Some(Event::Ready(n)) = c.poll_event() else { panic!() };
    assert!(n.oldstyle && n.size == 512);
}

/// A client in transmission with structured replies and base:allocation,
/// driven by hand.
pub(crate) fn scripted_client() -> Client {
    let mut c = Client::new(ClientConfig { export_name: "e".into(), ..Default::default() });
    let mut input = greeting();
    input.extend(opt_reply(opt::STRUCTURED_REPLY, rep::ACK, b""));
    input.extend(opt_reply(
        opt::SET_META_CONTEXT,
        rep::META_CONTEXT,
        &MetaContextReply { id: 9, name: BASE_ALLOCATION.into() }.to_bytes(),
    ));
    input.extend(opt_reply(opt::SET_META_CONTEXT, rep::ACK, b""));
    input.extend(opt_reply(opt::GO, rep::INFO, &Info::Export { size: SIZE, flags: 1 }.to_bytes()));
    input.extend(opt_reply(opt::GO, rep::ACK, b""));
    c.handle_input(&input).unwrap();
    assert!(matches!(c.poll_event(), Some(Event::Ready(_))));
    drain(&mut c);
    c
}

pub(crate) fn chunk(flags: u16, kind: u16, cookie: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    ChunkHeader { flags, kind, cookie, length: payload.len() as u32 }.encode(&mut b);
    b.put_slice(payload);
    b.to_vec()
}

pub(crate) fn data_payload(offset: u64, data: &[u8]) -> Vec<u8> {
    let mut v = offset.to_be_bytes().to_vec();
    v.extend_from_slice(data);
    v
}

fn expect_err(c: &mut Client, input: &[u8]) -> ProtocolError {
    match c.handle_input(input) {
        Err(ClientError::Protocol(e)) => e,
        r => panic!("expected protocol error, got {r:?}"),
    }
}

#[test]
fn hostile_replies_are_typed_errors() {
    let read = |c: &mut Client| c.send_request(Request::Read { offset: 100, length: 10 }).unwrap();
    // unknown cookie
    let mut c = scripted_client();
    assert_eq!(expect_err(&mut c, &chunk(1, chunk::NONE, 77, b"")), ProtocolError::UnknownCookie(77));
    // bad magic
    let mut c = scripted_client();
    assert!(matches!(expect_err(&mut c, b"garbage!"), ProtocolError::Decode(_)));
    // chunk outside the request
    let mut c = scripted_client();
    let k = read(&mut c);
    assert!(matches!(
        expect_err(&mut c, &chunk(1, chunk::OFFSET_DATA, k, &data_payload(95, &[0; 10]))),
        ProtocolError::ChunkOutOfRange { offset: 95, .. }
    ));
    // data beyond the request
    let mut c = scripted_client();
    let k = read(&mut c);
    assert!(matches!(
        expect_err(&mut c, &chunk(1, chunk::OFFSET_DATA, k, &data_payload(100, &[0; 11]))),
        ProtocolError::TooLong { .. }
    ));
    // duplicate DONE
    let mut c = scripted_client();
    let k = read(&mut c);
    c.handle_input(&chunk(1, chunk::OFFSET_DATA, k, &data_payload(100, &[1; 10]))).unwrap();
    assert_eq!(expect_err(&mut c, &chunk(1, chunk::NONE, k, b"")), ProtocolError::ReplyAfterDone(k));
    // total length mismatch
    let mut c = scripted_client();
    let k = read(&mut c);
    assert_eq!(
        expect_err(&mut c, &chunk(1, chunk::OFFSET_DATA, k, &data_payload(100, &[1; 5]))),
        ProtocolError::LengthMismatch { expected: 10, got: 5 }
    );
    // overlapping chunks
    let mut c = scripted_client();
    let k = read(&mut c);
    c.handle_input(&chunk(0, chunk::OFFSET_DATA, k, &data_payload(100, &[1; 6]))).unwrap();
    assert_eq!(
        expect_err(&mut c, &chunk(1, chunk::OFFSET_DATA, k, &data_payload(104, &[1; 6]))),
        ProtocolError::OverlappingChunk(104)
    );
    // reply type not allowed for the command
    let mut c = scripted_client();
    let k = c.send_request(Request::Flush).unwrap_or(0);
    let k = if k == 0 {
        c.send_request(Request::Write { offset: 0, data: Bytes::from_static(b"x"), fua: false }).unwrap()
    } else {
        k
    };
    assert!(matches!(
        expect_err(&mut c, &chunk(1, chunk::OFFSET_DATA, k, &data_payload(0, b"x"))),
        ProtocolError::UnexpectedChunk { .. }
    ));
    // NONE without DONE
    let mut c = scripted_client();
    let k = read(&mut c);
    assert_eq!(expect_err(&mut c, &chunk(0, chunk::NONE, k, b"")), ProtocolError::BadNoneChunk);
    // block status for another context
    let mut c = scripted_client();
    let k = c.send_request(Request::BlockStatus { offset: 0, length: 10, req_one: false }).unwrap();
    let mut p = 3u32.to_be_bytes().to_vec();
    p.extend(10u32.to_be_bytes());
    p.extend(0u32.to_be_bytes());
    assert_eq!(expect_err(&mut c, &chunk(1, chunk::BLOCK_STATUS, k, &p)), ProtocolError::UnknownContext(3));
    // errors are sticky
    assert!(c.handle_input(b"").is_err());
}

#[test]
fn one_byte_read_chunks_hit_the_chunk_bound_before_their_payload_is_buffered() {
    let mut c = scripted_client();
    let length = 64 * 1024;
    let k = c.send_request(Request::Read { offset: 0, length }).unwrap();
    let max = max_reply_chunks(length);
    assert_eq!(max, CHUNK_ALLOWANCE + length / MIN_AVERAGE_CHUNK);
    let mut input = Vec::new();
    for i in 0..u64::from(max) {
        input.extend(chunk(0, chunk::OFFSET_DATA, k, &data_payload(i, &[0xa5])));
    }
    c.handle_input(&input).unwrap();
    assert_eq!(c.in_flight(), 1);
    // The next chunk header alone is refused: its payload is never waited for.
    let next = chunk(0, chunk::OFFSET_DATA, k, &data_payload(u64::from(max), &[0xa5]));
    let e = expect_err(&mut c, &next[..STRUCTURED_REPLY_HEADER_LEN]);
    assert_eq!(e, ProtocolError::TooManyChunks { cookie: k, command: Command::Read, length, max });
    let msg = e.to_string();
    assert!(msg.contains("more than 144 chunks") && msg.contains("one per 512 bytes"), "{msg}");
}

#[test]
fn error_and_none_chunks_count_towards_the_bound() {
    let mut c = scripted_client();
    let k = c.send_request(Request::Read { offset: 0, length: 1 }).unwrap();
    let e = ErrorChunk { error: 5, message: String::new() }.to_bytes();
    for _ in 0..max_reply_chunks(1) {
        c.handle_input(&chunk(0, chunk::ERROR, k, &e)).unwrap();
    }
    assert!(matches!(
        expect_err(&mut c, &chunk(1, chunk::NONE, k, b"")),
        ProtocolError::TooManyChunks { .. }
    ));
}

#[test]
fn error_chunks_become_server_errors() {
    let mut c = scripted_client();
    let k = c.send_request(Request::Read { offset: 100, length: 10 }).unwrap();
    let e = ErrorOffsetChunk { error: 5, message: "disk on fire".into(), offset: 105 }.to_bytes();
    c.handle_input(&chunk(0, chunk::ERROR_OFFSET, k, &e)).unwrap();
    c.handle_input(&chunk(1, chunk::NONE, k, b"")).unwrap();
    let Some(Event::Reply(r)) = c.poll_event() else { panic!() };
    assert_eq!(
        r.result,
        Err(ServerError { error: NbdError::Io, message: "disk on fire".into(), offset: Some(105) })
    );
}

#[test]
fn truncated_frames_wait_for_more_input() {
    let mut c = scripted_client();
    let k = c.send_request(Request::Read { offset: 0, length: 4 }).unwrap();
    let reply = chunk(1, chunk::OFFSET_DATA, k, &data_payload(0, b"wxyz"));
    c.handle_input(&reply[..reply.len() - 1]).unwrap();
    assert!(c.poll_event().is_none());
    assert_eq!(c.bytes_wanted(), 1, "the last byte of the data");
    c.handle_input(&reply[reply.len() - 1..]).unwrap();
    assert!(
        matches!(c.poll_event(), Some(Event::Reply(r)) if r.result == Ok(ReplyData::Read(BytesMut::from(&b"wxyz"[..]))))
    );
}

// ---- server hostile input ---------------------------------------------

fn server_in_options() -> Server {
    let mut s = Server::new(ServerConfig {
        exports: vec![export(all_flags())],
        structured_replies: true,
        ..Default::default()
    });
    s.handle_input(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).unwrap();
    while s.poll_transmit().is_some() {}
    s
}

fn server_replies(s: &mut Server) -> Vec<u8> {
    let mut v = Vec::new();
    while let Some(b) = s.poll_transmit() {
        v.extend_from_slice(&b);
    }
    v
}

#[test]
fn server_refuses_unknown_and_oversized_options() {
    let mut s = server_in_options();
    let mut b = BytesMut::new();
    OptionHeader { option: 99, length: 0 }.encode(&mut b);
    s.handle_input(&b).unwrap();
    let r = server_replies(&mut s);
    let h = OptionReplyHeader::decode(&mut Reader::new(&r, "t")).unwrap();
    assert_eq!((h.option, h.reply), (99, rep::ERR_UNSUP));

    let mut b = BytesMut::new();
    OptionHeader { option: opt::GO, length: MAX_OPTION_PAYLOAD + 1 }.encode(&mut b);
    b.put_bytes(0, MAX_OPTION_PAYLOAD as usize + 1);
    s.handle_input(&b).unwrap();
    let r = server_replies(&mut s);
    let h = OptionReplyHeader::decode(&mut Reader::new(&r, "t")).unwrap();
    assert_eq!(h.reply, rep::ERR_TOO_BIG);
    // Still in sync: a LIST works afterwards.
    let mut b = BytesMut::new();
    OptionHeader { option: opt::LIST, length: 0 }.encode(&mut b);
    s.handle_input(&b).unwrap();
    let r = server_replies(&mut s);
    let h = OptionReplyHeader::decode(&mut Reader::new(&r, "t")).unwrap();
    assert_eq!(h.reply, rep::SERVER);
}

#[test]
fn server_checks_requests() {
    let mut p = Pair::go(all_flags());
    let mut b = BytesMut::new();
    RequestHeader { flags: 0, command: Command::Write, cookie: 5, offset: SIZE - 1, length: 2 }
        .encode(&mut b);
    b.put_slice(b"ab");
    p.s.handle_input(&b).unwrap();
    let r = server_replies(&mut p.s);
    let h = ChunkHeader::decode(&mut Reader::new(&r, "t")).unwrap();
    assert_eq!(h.kind, chunk::ERROR);
    assert_eq!(ErrorChunk::decode(&mut Reader::new(&r[20..], "t")).unwrap().error, 28);
    // bad magic is fatal
    assert!(matches!(p.s.handle_input(&[0u8; 28]), Err(ProtocolError::Decode(_))));
    // an oversized write is fatal before its payload is buffered
    let mut p = Pair::go(all_flags());
    let mut b = BytesMut::new();
    RequestHeader { flags: 0, command: Command::Write, cookie: 5, offset: 0, length: u32::MAX }
        .encode(&mut b);
    assert!(matches!(p.s.handle_input(&b), Err(ProtocolError::TooLong { .. })));
}

// ---- property tests ---------------------------------------------------

fn roundtrip<T: Codec + PartialEq + std::fmt::Debug>(v: T) {
    let b = v.to_bytes();
    assert_eq!(T::decode_exact(&b, "roundtrip").unwrap(), v);
}

fn name() -> impl Strategy<Value = String> {
    "[a-z0-9:/ ]{0,40}"
}

proptest! {
    #[test]
    fn wire_types_round_trip(
        a in any::<u64>(), b in any::<u64>(), x in any::<u32>(), y in any::<u32>(), z in any::<u32>(),
        f in any::<u16>(), cmdv in any::<u16>(), n in name(), m in name(), reqs in prop::collection::vec(any::<u16>(), 0..8),
        qs in prop::collection::vec(name(), 0..5), descs in prop::collection::vec((1u32.., any::<u32>()), 1..20),
        data in prop::collection::vec(any::<u8>(), 1..100),
    ) {
        roundtrip(Greeting::Newstyle { flags: f });
        roundtrip(Greeting::Oldstyle { size: a, flags: x });
        roundtrip(ClientFlags(x));
        roundtrip(OptionHeader { option: x, length: y });
        roundtrip(OptionReplyHeader { option: x, reply: y, length: z });
        roundtrip(ExportNameReply { size: a, flags: f });
        roundtrip(InfoRequest { name: n.clone(), requests: reqs });
        roundtrip(Info::Export { size: a, flags: f });
        roundtrip(Info::Name(n.clone()));
        roundtrip(Info::Description(m.clone()));
        roundtrip(Info::BlockSize { minimum: x, preferred: y, maximum: z });
        roundtrip(MetaContextRequest { export: n.clone(), queries: qs });
        roundtrip(MetaContextReply { id: x, name: m.clone() });
        roundtrip(ServerReply { name: n.clone(), description: m.clone() });
        roundtrip(ErrorText(m.clone()));
        roundtrip(RequestHeader { flags: f, command: Command::from(cmdv), cookie: a, offset: b, length: x });
        roundtrip(SimpleReplyHeader { error: x, cookie: a });
        roundtrip(ChunkHeader { flags: f, kind: cmdv, cookie: a, length: x });
        roundtrip(OffsetData { offset: a, data: Bytes::from(data) });
        roundtrip(OffsetHole { offset: a, length: x.max(1) });
        roundtrip(BlockStatusChunk { context: x, descriptors: descs.into_iter().map(|(length, flags)| BlockDescriptor { length, flags }).collect() });
        roundtrip(ErrorChunk { error: x.max(1), message: m.clone() });
        roundtrip(ErrorOffsetChunk { error: y.max(1), message: m, offset: b });
        prop_assert_eq!(Command::from(u16::from(Command::from(cmdv))), Command::from(cmdv));
        prop_assert_eq!(NbdError::from_code(NbdError::from_code(x).code()), NbdError::from_code(x));
    }

    #[test]
    fn arbitrary_bytes_never_panic_decoders(data in prop::collection::vec(any::<u8>(), 0..200)) {
        macro_rules! all { ($($t:ty),*) => { $( let _ = <$t>::decode_exact(&data, "fuzz"); )* } }
        all!(Greeting, ClientFlags, OptionHeader, OptionReplyHeader, ExportNameReply, InfoRequest, Info,
             MetaContextRequest, MetaContextReply, ServerReply, ErrorText, RequestHeader, SimpleReplyHeader,
             ChunkHeader, OffsetData, OffsetHole, BlockStatusChunk, ErrorChunk, ErrorOffsetChunk);
    }

    #[test]
    fn arbitrary_bytes_never_panic_client_handshake(data in prop::collection::vec(any::<u8>(), 0..300), split in 0usize..300) {
        let mut c = Client::new(ClientConfig::default());
        let mut input = greeting();
        input.extend(&data);
        let split = split.min(input.len());
        let _ = c.handle_input(&input[..split]).and_then(|_| c.handle_input(&input[split..]));
        while c.poll_transmit().is_some() {}
        while c.poll_event().is_some() {}
    }

    #[test]
    fn arbitrary_bytes_never_panic_client_replies(data in prop::collection::vec(any::<u8>(), 0..400), cookie_bytes in any::<bool>()) {
        let mut c = scripted_client();
        for i in 0..4u64 {
            c.send_request(Request::Read { offset: i * 8, length: 16 }).unwrap();
        }
        c.send_request(Request::BlockStatus { offset: 0, length: 64, req_one: cookie_bytes }).unwrap();
        let _ = c.handle_input(&data);
        while c.poll_event().is_some() {}
    }

    #[test]
    fn structured_replies_with_valid_cookies_never_panic(
        chunks in prop::collection::vec((any::<u16>(), 0u16..8, 1u64..4, prop::collection::vec(any::<u8>(), 0..40)), 0..10)
    ) {
        let mut c = scripted_client();
        for i in 0..3u64 {
            c.send_request(Request::Read { offset: i * 8, length: 16 }).unwrap();
        }
        for (flags, kind, cookie, payload) in chunks {
            let kind = if kind >= 6 { chunk::ERR_BIT | (kind - 5) } else { kind };
            if c.handle_input(&chunk(flags, kind, cookie, &payload)).is_err() { break; }
        }
        while c.poll_event().is_some() {}
    }

    /// A read answered in any number of data and hole chunks, in any order:
    /// accepted with the right bytes exactly when the count is within
    /// [`max_reply_chunks`], a typed error otherwise.
    #[test]
    fn read_replies_in_many_chunks_are_bounded(
        length in 1u32..=16384,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..200),
        holes in prop::collection::vec(any::<bool>(), 200),
        order in any::<prop::sample::Index>(),
    ) {
        let mut c = scripted_client();
        let k = c.send_request(Request::Read { offset: 4096, length }).unwrap();
        let mut bounds: Vec<u32> = cuts.iter().map(|i| i.index(length as usize) as u32).filter(|&x| x > 0).collect();
        bounds.push(0);
        bounds.push(length);
        bounds.sort_unstable();
        bounds.dedup();
        let mut pieces: Vec<(u32, u32, bool)> = bounds.windows(2).enumerate().map(|(i, w)| (w[0], w[1], holes[i % holes.len()])).collect();
        let n = pieces.len();
        pieces.rotate_left(order.index(n));
        let mut expected = vec![0u8; length as usize];
        let mut input = Vec::new();
        for (i, (start, end, hole)) in pieces.iter().copied().enumerate() {
            let flags = if i + 1 == n { REPLY_FLAG_DONE } else { 0 };
            let offset = 4096 + u64::from(start);
            if hole {
                input.extend(chunk(flags, chunk::OFFSET_HOLE, k, &OffsetHole { offset, length: end - start }.to_bytes()));
            } else {
                let data: Vec<u8> = (start..end).map(|x| (x % 251) as u8 + 1).collect();
                expected[start as usize..end as usize].copy_from_slice(&data);
                input.extend(chunk(flags, chunk::OFFSET_DATA, k, &data_payload(offset, &data)));
            }
        }
        let r = c.handle_input(&input);
        if n as u32 <= max_reply_chunks(length) {
            prop_assert!(r.is_ok(), "{:?}", r);
            let Some(Event::Reply(reply)) = c.poll_event() else { panic!("no reply") };
            prop_assert_eq!(reply.result, Ok(ReplyData::Read(BytesMut::from(&expected[..]))));
        } else {
            let is_too_many = matches!(r, Err(ClientError::Protocol(ProtocolError::TooManyChunks { .. })));
            prop_assert!(is_too_many, "{:?}", r);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic_server(data in prop::collection::vec(any::<u8>(), 0..400), in_tx in any::<bool>()) {
        let mut s = if in_tx {
            let p = Pair::go(all_flags());
            p.s
        } else {
            server_in_options()
        };
        let _ = s.handle_input(&data);
        while s.poll_transmit().is_some() {}
        while s.poll_event().is_some() {}
    }
}

// NBD_OPT_STARTTLS (spec "TLS support"): the machines pause for the
// driver's TLS handshake, which is instant here.

fn tls_server(policy: TlsPolicy) -> ServerConfig {
    ServerConfig { exports: vec![export(all_flags())], structured_replies: true, tls: policy }
}

fn tls_client(tls: bool) -> ClientConfig {
    ClientConfig { export_name: "disk".into(), tls, ..Default::default() }
}

/// Runs the handshake, returning the client's error if it failed.
fn pump_result(p: &mut Pair) -> Result<(), ClientError> {
    for _ in 0..32 {
        let mut moved = false;
        while let Some(seg) = p.s.poll_transmit() {
            moved = true;
            p.c.handle_input(&seg)?;
        }
        while let Some(seg) = p.c.poll_transmit() {
            moved = true;
            p.s.handle_input(&seg).expect("server");
        }
        while let Some(ev) = p.s.poll_event() {
            moved = true;
            if ev == ServerEvent::StartTls {
                p.s.tls_established();
            }
            p.server_events.push(ev);
        }
        while let Some(ev) = p.c.poll_event() {
            if ev == Event::StartTls {
                p.c.tls_established();
                moved = true;
            }
            p.events.push(ev);
        }
        if !moved {
            break;
        }
    }
    Ok(())
}

#[test]
fn starttls_then_go_under_forced_tls() {
    let mut p = Pair::new(tls_client(true), tls_server(TlsPolicy::Required));
    pump_result(&mut p).unwrap();
    assert_eq!(p.events[0], Event::StartTls);
    assert!(matches!(&p.events[1], Event::Ready(n) if n.structured_replies && n.base_allocation.is_some()));
    assert!(p.s.tls_active() && p.s.is_transmission());
    assert_eq!(p.server_events[0], ServerEvent::StartTls);
}

#[test]
fn starttls_with_optional_tls_and_clear_text_client() {
    let mut p = Pair::new(tls_client(true), tls_server(TlsPolicy::Optional));
    pump_result(&mut p).unwrap();
    assert!(matches!(&p.events[1], Event::Ready(_)));
    let mut p = Pair::new(tls_client(false), tls_server(TlsPolicy::Optional));
    pump_result(&mut p).unwrap();
    assert!(matches!(&p.events[0], Event::Ready(_)));
    assert!(!p.s.tls_active());
}

#[test]
fn clear_text_client_refused_by_forced_tls() {
    let mut p = Pair::new(tls_client(false), tls_server(TlsPolicy::Required));
    let e = pump_result(&mut p).unwrap_err();
    assert!(matches!(&e, ClientError::Refused { .. }), "{e}");
    assert!(e.to_string().contains("NBD_REP_ERR_TLS_REQD") && e.to_string().contains("nbds://"), "{e}");
    // Every option is refused before TLS: LIST too.
    let mut p =
        Pair::new(ClientConfig { goal: Goal::List, ..tls_client(false) }, tls_server(TlsPolicy::Required));
    assert!(pump_result(&mut p).unwrap_err().to_string().contains("TLS_REQD"));
}

#[test]
fn tls_client_refused_by_server_without_tls() {
    let mut p = Pair::new(tls_client(true), tls_server(TlsPolicy::Off));
    let e = pump_result(&mut p).unwrap_err();
    assert!(
        e.to_string().contains("NBD_OPT_STARTTLS") && e.to_string().contains("does not offer TLS"),
        "{e}"
    );
}

#[test]
fn export_name_before_tls_closes_under_forced_tls() {
    let mut s = Server::new(tls_server(TlsPolicy::Required));
    while s.poll_transmit().is_some() {}
    let mut input = BytesMut::new();
    input.put_u32(FLAG_C_FIXED_NEWSTYLE);
    input.put_u64(IHAVEOPT);
    input.put_u32(opt::EXPORT_NAME);
    input.put_u32(4);
    input.put_slice(b"disk");
    s.handle_input(&input).unwrap();
    assert!(s.is_closed());
    assert!(matches!(s.poll_event(), Some(ServerEvent::Close(_))));
}

#[test]
fn clear_text_after_starttls_is_refused_both_ways() {
    // Server: the client pipelines an option after STARTTLS in clear text.
    let mut s = Server::new(tls_server(TlsPolicy::Required));
    let mut input = BytesMut::new();
    input.put_u32(FLAG_C_FIXED_NEWSTYLE);
    for o in [opt::STARTTLS, opt::LIST] {
        input.put_u64(IHAVEOPT);
        input.put_u32(o);
        input.put_u32(0);
    }
    let e = s.handle_input(&input).unwrap_err();
    assert!(e.to_string().contains("after NBD_OPT_STARTTLS"), "{e}");
    // Client: something on the path appends bytes to the server's ACK.
    let mut c = Client::new(tls_client(true));
    let mut input = BytesMut::new();
    Greeting::Newstyle { flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES }.encode(&mut input);
    OptionReplyHeader { option: opt::STARTTLS, reply: rep::ACK, length: 0 }.encode(&mut input);
    input.put_slice(b"injected");
    let e = c.handle_input(&input).unwrap_err();
    assert!(e.to_string().contains("clear text"), "{e}");
}

#[test]
fn starttls_forgets_what_was_negotiated_before() {
    let mut s = Server::new(tls_server(TlsPolicy::Optional));
    let mut input = BytesMut::new();
    input.put_u32(FLAG_C_FIXED_NEWSTYLE);
    for o in [opt::STRUCTURED_REPLY, opt::STARTTLS] {
        input.put_u64(IHAVEOPT);
        input.put_u32(o);
        input.put_u32(0);
    }
    s.handle_input(&input).unwrap();
    assert!(s.structured_replies());
    assert_eq!(s.poll_event(), Some(ServerEvent::StartTls));
    s.tls_established();
    assert!(!s.structured_replies());
    // A second STARTTLS inside TLS is refused, not acknowledged.
    let mut input = BytesMut::new();
    input.put_u64(IHAVEOPT);
    input.put_u32(opt::STARTTLS);
    input.put_u32(0);
    s.handle_input(&input).unwrap();
    assert_eq!(s.poll_event(), None);
}

#[test]
fn denied_client_gets_policy_errors() {
    let mut p = Pair::new(tls_client(true), tls_server(TlsPolicy::Required));
    p.s.deny("client certificate subject CN=mallory is not allowed");
    let e = pump_result(&mut p).unwrap_err();
    assert!(e.to_string().contains("NBD_REP_ERR_POLICY") && e.to_string().contains("CN=mallory"), "{e}");
}
