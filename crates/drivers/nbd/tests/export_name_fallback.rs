//! A server without NBD_OPT_GO (answers NBD_REP_ERR_UNSUP): the client
//! falls back to NBD_OPT_EXPORT_NAME and works.

mod common;

use bytes::{BufMut, BytesMut};
use common::hostile::{read_request, simple};
use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wanblk_blockdev::Endpoint;
use wanblk_nbd_proto::consts::*;
use wanblk_nbd_proto::wire::{Greeting, OptionHeader, OptionReplyHeader};
use wanblk_nbd_proto::{Codec, Reader};

#[tokio::test]
async fn falls_back_to_export_name_when_go_is_unsupported() {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri = format!("nbd://127.0.0.1:{}/old", l.local_addr().unwrap().port());
    let server = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        s.write_all(&Greeting::Newstyle { flags: FLAG_FIXED_NEWSTYLE }.to_bytes()).await.unwrap();
        let mut flags = [0u8; 4];
        s.read_exact(&mut flags).await.unwrap();
        let mut seen = Vec::new();
        loop {
            let mut h = [0u8; 16];
            s.read_exact(&mut h).await.unwrap();
            let h = OptionHeader::decode(&mut Reader::new(&h, "opt")).unwrap();
            let mut data = vec![0u8; h.length as usize];
            s.read_exact(&mut data).await.unwrap();
            seen.push(h.option);
            if h.option == opt::EXPORT_NAME {
                assert_eq!(data, b"old");
                let mut b = BytesMut::new();
                b.put_u64(1 << 20);
                b.put_u16(tflags::HAS_FLAGS | tflags::SEND_FLUSH);
                b.put_bytes(0, 124); // the client did not ask for NO_ZEROES
                s.write_all(&b).await.unwrap();
                break;
            }
            let r = OptionReplyHeader { option: h.option, reply: rep::ERR_UNSUP, length: 0 };
            s.write_all(&r.to_bytes()).await.unwrap();
        }
        let r = read_request(&mut s).await;
        let mut reply = simple(r.cookie, 0);
        reply.extend(vec![0x5a; r.length as usize]);
        s.write_all(&reply).await.unwrap();
        seen
    });
    let sess = connect(&uri).await;
    let n = sess.negotiated();
    assert!(n.used_export_name && !n.structured_replies);
    assert_eq!(sess.size(), 1 << 20);
    let data = within(10, sess.read(0, 4)).await.unwrap();
    assert_eq!(&data[..], &[0x5a; 4]);
    let seen = within(5, server).await.unwrap();
    assert_eq!(seen, vec![opt::STRUCTURED_REPLY, opt::SET_META_CONTEXT, opt::GO, opt::EXPORT_NAME]);
}
