//! Read data into the request's buffer: replies cut at every byte boundary,
//! data and hole chunks in any order, error chunks, a connection that ends
//! inside the data, and the driver receiving the data straight into the
//! buffer it borrows ([`Client::lend_payload`]).

use bytes::{BufMut, BytesMut};
use proptest::prelude::*;

use crate::client::*;
use crate::codec::Codec;
use crate::consts::*;
use crate::error::*;
use crate::tests::{chunk, data_payload, scripted_client};
use crate::wire::*;

/// Request offset used throughout.
const AT: u64 = 8192;

/// How the test driver feeds input to the client.
#[derive(Debug, Clone, Copy)]
enum Feed {
    /// Everything through `handle_input_buf` (the copying path).
    Copy,
    /// Like a socket driver: borrows the request's buffer whenever the
    /// client lends it and appends to it directly.
    Lend,
}

/// What a fed reply produced: the events and how many data bytes the
/// driver appended to lent buffers.
struct Fed {
    events: Vec<Event>,
    lent_bytes: usize,
}

/// Feeds `input` to `c` in reads of the sizes in `reads` (cycled; each
/// read is cut short where the client wants less), as a driver would.
fn feed(c: &mut Client, input: &[u8], reads: &[usize], how: Feed) -> Result<Fed, ClientError> {
    let mut staging = BytesMut::new();
    let mut pos = 0;
    let mut lent_bytes = 0;
    let mut events = Vec::new();
    let mut i = 0;
    while pos < input.len() {
        let size = reads[i % reads.len()].max(1);
        i += 1;
        let lent = match how {
            Feed::Lend if staging.is_empty() => c.lend_payload(),
            _ => None,
        };
        if let Some(mut l) = lent {
            assert!(l.want() > 0, "a lent buffer always wants bytes");
            let n = size.min(l.want()).min(input.len() - pos);
            l.room().put_slice(&input[pos..pos + n]);
            pos += n;
            lent_bytes += n;
            c.return_payload(l)?;
        } else {
            let n = size.min(input.len() - pos);
            staging.extend_from_slice(&input[pos..pos + n]);
            pos += n;
            c.handle_input_buf(&mut staging)?;
        }
        events.extend(std::iter::from_fn(|| c.poll_event()));
    }
    assert!(staging.is_empty(), "the client consumed every complete frame");
    Ok(Fed { events, lent_bytes })
}

/// The data of the one reply among `events`.
fn read_data(events: Vec<Event>) -> Result<BytesMut, ServerError> {
    match <[Event; 1]>::try_from(events) {
        Ok([Event::Reply(Reply { result: Ok(ReplyData::Read(d)), .. })]) => Ok(d),
        Ok([Event::Reply(Reply { result: Err(e), .. })]) => Err(e),
        other => panic!("expected one read reply, got {other:?}"),
    }
}

fn pattern(start: u32, end: u32) -> Vec<u8> {
    (start..end).map(|x| (x % 251) as u8 + 1).collect()
}

/// A structured reply of 1000 bytes: data, hole, data, data (the last
/// with NBD_REPLY_FLAG_DONE), and the bytes it stands for.
fn several_chunks(cookie: u64) -> (Vec<u8>, Vec<u8>) {
    let mut input = chunk(0, chunk::OFFSET_DATA, cookie, &data_payload(AT, &pattern(0, 100)));
    input.extend(chunk(
        0,
        chunk::OFFSET_HOLE,
        cookie,
        &OffsetHole { offset: AT + 100, length: 200 }.to_bytes(),
    ));
    input.extend(chunk(0, chunk::OFFSET_DATA, cookie, &data_payload(AT + 300, &pattern(300, 400))));
    input.extend(chunk(
        REPLY_FLAG_DONE,
        chunk::OFFSET_DATA,
        cookie,
        &data_payload(AT + 400, &pattern(400, 1000)),
    ));
    let mut expected = pattern(0, 1000);
    expected[100..300].fill(0);
    (input, expected)
}

fn simple_reply(cookie: u64, error: u32, data: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    SimpleReplyHeader { error, cookie }.encode(&mut b);
    b.put_slice(data);
    b.to_vec()
}

#[test]
fn replies_cut_at_every_byte_boundary_give_the_same_bytes() {
    for how in [Feed::Copy, Feed::Lend] {
        // A structured reply in several data chunks with a hole.
        let (input, expected) = several_chunks(1);
        for cut in 1..input.len() {
            let mut c = scripted_client();
            let k = c.send_request(Request::Read { offset: AT, length: 1000 }).unwrap();
            assert_eq!(k, 1);
            let fed = feed(&mut c, &input, &[cut, input.len()], how).unwrap();
            assert_eq!(read_data(fed.events).unwrap()[..], expected[..], "{how:?}, cut at {cut}");
            assert_eq!(c.in_flight(), 0);
        }
        // A simple reply.
        let data = pattern(0, 300);
        let input = simple_reply(1, 0, &data);
        for cut in 1..input.len() {
            let mut c = scripted_client();
            c.send_request(Request::Read { offset: AT, length: 300 }).unwrap();
            let fed = feed(&mut c, &input, &[cut, input.len()], how).unwrap();
            assert_eq!(read_data(fed.events).unwrap()[..], data[..], "{how:?}, cut at {cut}");
        }
    }
}

#[test]
fn a_lending_driver_receives_the_data_without_the_staging_buffer() {
    let (input, expected) = several_chunks(1);
    let mut c = scripted_client();
    c.send_request(Request::Read { offset: AT, length: 1000 }).unwrap();
    // Staging reads that never run past a header: every data byte goes
    // to a lent buffer.
    let fed = feed(&mut c, &input, &[1], Feed::Lend).unwrap();
    assert_eq!(fed.lent_bytes, 800, "all data bytes, none through the staging buffer");
    assert_eq!(read_data(fed.events).unwrap()[..], expected[..]);
}

#[test]
fn read_into_appends_to_the_callers_buffer_in_place() {
    for how in [Feed::Copy, Feed::Lend] {
        let mut whole = BytesMut::with_capacity(2000);
        whole.put_slice(b"head");
        // Two parts of one allocation, as the pool splits a read.
        let second = whole.split_off(1004);
        let (first_ptr, second_ptr) = (whole.as_ptr(), second.as_ptr());
        let mut c = scripted_client();
        let k1 = c.send_request(Request::ReadInto { offset: AT, length: 1000, buf: whole }).unwrap();
        let k2 = c.send_request(Request::ReadInto { offset: AT + 1000, length: 996, buf: second }).unwrap();
        let (mut input, expected) = several_chunks(k1);
        input.extend(simple_reply(k2, 0, &pattern(1000, 1996)));
        let fed = feed(&mut c, &input, &[7, 100, 3], how).unwrap();
        let mut parts = fed.events.into_iter().map(|e| match e {
            Event::Reply(Reply { result: Ok(ReplyData::Read(d)), .. }) => d,
            e => panic!("{e:?}"),
        });
        let (mut a, b) = (parts.next().unwrap(), parts.next().unwrap());
        assert_eq!(&a[..4], b"head");
        assert_eq!(a[4..], expected[..]);
        assert_eq!(b[..], pattern(1000, 1996)[..]);
        assert_eq!(
            (a.as_ptr(), b.as_ptr()),
            (first_ptr, second_ptr),
            "{how:?}: data went into the given buffers"
        );
        a.unsplit(b);
        assert_eq!(a.as_ptr(), first_ptr, "the parts join without copying");
        assert_eq!(a.len(), 2000);
    }
}

#[test]
fn chunks_out_of_order_land_at_their_offsets() {
    for how in [Feed::Copy, Feed::Lend] {
        let mut c = scripted_client();
        let k = c.send_request(Request::Read { offset: AT, length: 1000 }).unwrap();
        // The end first, then a hole, then the start, which lands before
        // data already in the buffer.
        let mut input = chunk(0, chunk::OFFSET_DATA, k, &data_payload(AT + 600, &pattern(600, 1000)));
        input.extend(chunk(
            0,
            chunk::OFFSET_HOLE,
            k,
            &OffsetHole { offset: AT + 200, length: 400 }.to_bytes(),
        ));
        input.extend(chunk(REPLY_FLAG_DONE, chunk::OFFSET_DATA, k, &data_payload(AT, &pattern(0, 200))));
        let fed = feed(&mut c, &input, &[5, 64], how).unwrap();
        let mut expected = pattern(0, 1000);
        expected[200..600].fill(0);
        assert_eq!(read_data(fed.events).unwrap()[..], expected[..], "{how:?}");
    }
}

#[test]
fn an_error_chunk_between_data_chunks_fails_only_that_request() {
    for how in [Feed::Copy, Feed::Lend] {
        let mut c = scripted_client();
        let k = c.send_request(Request::Read { offset: AT, length: 1000 }).unwrap();
        let mut input = chunk(0, chunk::OFFSET_DATA, k, &data_payload(AT, &pattern(0, 500)));
        input.extend(chunk(
            0,
            chunk::ERROR_OFFSET,
            k,
            &ErrorOffsetChunk { error: 5, message: "bad sector".into(), offset: AT + 600 }.to_bytes(),
        ));
        input.extend(chunk(
            REPLY_FLAG_DONE,
            chunk::OFFSET_DATA,
            k,
            &data_payload(AT + 500, &pattern(500, 1000)),
        ));
        let fed = feed(&mut c, &input, &[13], how).unwrap();
        let e = read_data(fed.events).unwrap_err();
        assert_eq!(e.error, NbdError::Io);
        assert_eq!(e.message, "bad sector");
        assert_eq!(e.offset, Some(AT + 600));
        // The connection goes on.
        let k = c.send_request(Request::Read { offset: AT, length: 4 }).unwrap();
        let fed = feed(&mut c, &simple_reply(k, 0, b"abcd"), &[3], how).unwrap();
        assert_eq!(&read_data(fed.events).unwrap()[..], b"abcd");
    }
}

#[test]
fn a_connection_that_ends_inside_the_data_leaves_the_request_pending() {
    let mut c = scripted_client();
    let k = c.send_request(Request::Read { offset: AT, length: 1000 }).unwrap();
    let (input, _) = several_chunks(k);
    // Input stops in the middle of the last chunk's data.
    let fed = feed(&mut c, &input[..input.len() - 300], &[64], Feed::Lend).unwrap();
    assert!(fed.events.is_empty());
    assert_eq!(c.in_flight(), 1);
    assert_eq!(c.pending(), vec![(k, Command::Read, AT)]);
    assert_eq!(c.bytes_wanted(), 300, "the rest of the data");
    let l = c.lend_payload().expect("the data continues straight into the buffer");
    assert_eq!((l.cookie(), l.want()), (k, 300));
}

#[test]
fn input_waits_while_a_buffer_is_lent() {
    let mut c = scripted_client();
    let k = c.send_request(Request::Read { offset: AT, length: 100 }).unwrap();
    let input = simple_reply(k, 0, &pattern(0, 100));
    c.handle_input(&input[..20]).unwrap();
    let mut l = c.lend_payload().unwrap();
    assert!(c.lend_payload().is_none(), "lent once");
    assert_eq!(l.want(), 96);
    // Bytes given meanwhile stay in the caller's buffer.
    let mut other = BytesMut::from(&b"later"[..]);
    c.handle_input_buf(&mut other).unwrap();
    assert_eq!(&other[..], b"later");
    l.room().put_slice(&input[20..]);
    assert_eq!(l.want(), 0);
    c.return_payload(l).unwrap();
    let Some(Event::Reply(r)) = c.poll_event() else { panic!("no reply") };
    assert_eq!(r.result, Ok(ReplyData::Read(BytesMut::from(&pattern(0, 100)[..]))));
}

#[test]
fn a_server_error_in_a_simple_reply_carries_no_data() {
    for how in [Feed::Copy, Feed::Lend] {
        let mut c = scripted_client();
        let k = c.send_request(Request::Read { offset: AT, length: 100 }).unwrap();
        let fed = feed(&mut c, &simple_reply(k, 5, b""), &[1], how).unwrap();
        assert_eq!(read_data(fed.events).unwrap_err().error, NbdError::Io);
        assert!(c.lend_payload().is_none());
    }
}

#[test]
fn data_chunks_too_short_for_their_offset_are_refused() {
    let mut c = scripted_client();
    let k = c.send_request(Request::Read { offset: AT, length: 100 }).unwrap();
    let e = c.handle_input(&chunk(REPLY_FLAG_DONE, chunk::OFFSET_DATA, k, &AT.to_be_bytes())).unwrap_err();
    assert!(matches!(e, ClientError::Protocol(ProtocolError::Decode(_))), "{e:?}");
}

proptest! {
    /// A read answered in data and hole chunks in any order, received in
    /// reads of any sizes, with and without lending: the same bytes as the
    /// chunks stand for.
    #[test]
    fn any_chunking_and_any_reads_give_the_requested_bytes(
        length in 1u32..=4096,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        holes in prop::collection::vec(any::<bool>(), 12),
        order in any::<prop::sample::Index>(),
        reads in prop::collection::vec(1usize..300, 1..8),
        lend in any::<bool>(),
        simple in any::<bool>(),
    ) {
        let mut c = scripted_client();
        let k = c.send_request(Request::Read { offset: AT, length }).unwrap();
        let mut expected = pattern(0, length);
        let mut input = Vec::new();
        if simple {
            input = simple_reply(k, 0, &expected);
        } else {
            let mut bounds: Vec<u32> = cuts.iter().map(|i| i.index(length as usize) as u32).filter(|&x| x > 0).collect();
            bounds.extend([0, length]);
            bounds.sort_unstable();
            bounds.dedup();
            let mut pieces: Vec<(u32, u32, bool)> =
                bounds.windows(2).enumerate().map(|(i, w)| (w[0], w[1], holes[i % holes.len()])).collect();
            let n = pieces.len();
            pieces.rotate_left(order.index(n));
            for (i, (start, end, hole)) in pieces.into_iter().enumerate() {
                let flags = if i + 1 == n { REPLY_FLAG_DONE } else { 0 };
                let offset = AT + u64::from(start);
                if hole {
                    expected[start as usize..end as usize].fill(0);
                    input.extend(chunk(flags, chunk::OFFSET_HOLE, k, &OffsetHole { offset, length: end - start }.to_bytes()));
                } else {
                    input.extend(chunk(flags, chunk::OFFSET_DATA, k, &data_payload(offset, &pattern(start, end))));
                }
            }
        }
        let how = if lend { Feed::Lend } else { Feed::Copy };
        let fed = feed(&mut c, &input, &reads, how).unwrap();
        if !lend {
            prop_assert_eq!(fed.lent_bytes, 0);
        }
        prop_assert_eq!(&read_data(fed.events).unwrap()[..], &expected[..]);
        prop_assert_eq!(c.in_flight(), 0);
    }
}
