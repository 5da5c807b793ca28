//! Property test: random sequences of writes, write-zeroes, reads
//! (single, sequential and concurrent), flushes and pauses through the
//! front end, over a remote with random latency, compared with a plain
//! byte array. Every read must return the model's bytes; after every flush
//! (and after close) the remote itself must hold the model's bytes.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::{Remote, remote_bytes, sim};
use proptest::prelude::*;
use wanblk_blockdev::Endpoint;
use wanblk_frontend::{Config, FrontEnd};

const SIZE: u64 = 1 << 20;

#[derive(Debug, Clone)]
enum Op {
    Write {
        off: u64,
        len: u64,
        byte: u8,
    },
    Zero {
        off: u64,
        len: u64,
    },
    Read {
        off: u64,
        len: u64,
    },
    SeqRead {
        off: u64,
        count: u64,
        len: u64,
    },
    Concurrent(Vec<(u64, u64)>),
    /// Sequential reads, each followed by a write a little ahead of the reader.
    ReadWrite {
        off: u64,
        count: u64,
        len: u64,
        ahead: u64,
        byte: u8,
    },
    Flush,
    Sleep {
        ms: u64,
    },
}

fn range() -> impl Strategy<Value = (u64, u64)> {
    (0..SIZE, 1u64..40_000).prop_map(|(off, len)| (off, len.min(SIZE - off).max(1).min(SIZE - off)))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (range(), any::<u8>()).prop_map(|((off, len), byte)| Op::Write { off, len, byte }),
        1 => range().prop_map(|(off, len)| Op::Zero { off, len }),
        4 => range().prop_map(|(off, len)| Op::Read { off, len }),
        2 => (0..SIZE / 2, 2u64..20, 1u64..32_768).prop_map(|(off, count, len)| Op::SeqRead { off, count, len }),
        1 => proptest::collection::vec(range(), 1..8).prop_map(Op::Concurrent),
        2 => (0..SIZE / 2, 4u64..30, 1024u64..16_384, 0u64..200_000, any::<u8>())
            .prop_map(|(off, count, len, ahead, byte)| Op::ReadWrite { off, count, len, ahead, byte }),
        1 => Just(Op::Flush),
        2 => (0u64..30).prop_map(|ms| Op::Sleep { ms }),
    ]
}

fn cfg(write_through: bool) -> Config {
    Config {
        cache_size: 128 * 1024,
        write_back_limit: 64 * 1024,
        write_through,
        max_window: 128 * 1024,
        min_depth: 32 * 1024,
        prefetch_request: 16 * 1024,
        write_request: 32 * 1024,
        coalesce_delay_us: 5_000,
        max_streams: 4,
        // Both ends of the disk are read into the cache at the start, while
        // the operations already run.
        edge_prefetch: 16 * 1024,
    }
}

async fn run(ops: Vec<Op>, seed: u64, write_through: bool) {
    let remote = Remote::new(SIZE, (0, 20_000), seed);
    let fe = Arc::new(FrontEnd::new(Arc::clone(&remote) as Arc<dyn Endpoint>, cfg(write_through)));
    let mut model = remote_bytes(&remote).await;
    for (i, op) in ops.into_iter().enumerate() {
        match op {
            Op::Write { off, len, byte } => {
                let data: Vec<u8> = (0..len).map(|k| byte.wrapping_add(k as u8)).collect();
                model[off as usize..(off + len) as usize].copy_from_slice(&data);
                fe.write(off, Bytes::from(data), false).await.unwrap();
            }
            Op::Zero { off, len } => {
                model[off as usize..(off + len) as usize].fill(0);
                fe.write_zeroes(off, len, true).await.unwrap();
            }
            Op::Read { off, len } => {
                let got = fe.read(off, len as u32).await.unwrap();
                assert_eq!(&got[..], &model[off as usize..(off + len) as usize], "op {i}: read {off}+{len}");
            }
            Op::SeqRead { off, count, len } => {
                for k in 0..count {
                    let o = off + k * len;
                    if o + len > SIZE {
                        break;
                    }
                    let got = fe.read(o, len as u32).await.unwrap();
                    assert_eq!(
                        &got[..],
                        &model[o as usize..(o + len) as usize],
                        "op {i}: seq read {o}+{len}"
                    );
                }
            }
            Op::ReadWrite { off, count, len, ahead, byte } => {
                for k in 0..count {
                    let o = off + k * len;
                    let w = o + ahead;
                    if w + len > SIZE {
                        break;
                    }
                    let got = fe.read(o, len as u32).await.unwrap();
                    assert_eq!(
                        &got[..],
                        &model[o as usize..(o + len) as usize],
                        "op {i}: read {o}+{len} of a mixed stream"
                    );
                    let data = vec![byte.wrapping_add(k as u8); (len / 2) as usize];
                    model[w as usize..(w + len / 2) as usize].copy_from_slice(&data);
                    fe.write(w, Bytes::from(data), false).await.unwrap();
                    if k % 3 == 0 {
                        tokio::time::sleep(std::time::Duration::from_millis(k % 7)).await;
                    }
                }
            }
            Op::Concurrent(ranges) => {
                let tasks: Vec<_> = ranges
                    .iter()
                    .map(|&(off, len)| {
                        let fe = Arc::clone(&fe);
                        tokio::spawn(async move { fe.read(off, len as u32).await.unwrap() })
                    })
                    .collect();
                for (t, (off, len)) in tasks.into_iter().zip(ranges) {
                    let got = t.await.unwrap();
                    assert_eq!(
                        &got[..],
                        &model[off as usize..(off + len) as usize],
                        "op {i}: concurrent read"
                    );
                }
            }
            Op::Flush => {
                fe.flush().await.unwrap();
                assert!(remote_bytes(&remote).await == model, "op {i}: remote differs after flush");
            }
            Op::Sleep { ms } => tokio::time::sleep(std::time::Duration::from_millis(ms)).await,
        }
    }
    fe.close().await.unwrap();
    assert!(remote_bytes(&remote).await == model, "remote differs after close");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn front_end_matches_a_plain_disk(ops in proptest::collection::vec(op(), 1..60), seed in any::<u64>()) {
        sim(run(ops, seed, false));
    }

    #[test]
    fn write_through_matches_a_plain_disk(ops in proptest::collection::vec(op(), 1..30), seed in any::<u64>()) {
        sim(run(ops, seed, true));
    }
}
