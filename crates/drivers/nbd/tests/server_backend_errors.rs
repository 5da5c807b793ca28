//! Backend errors reach NBD clients as NBD error numbers, and the
//! connection keeps serving.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use common::*;
use wanblk_blockdev::{Capabilities, Endpoint, EndpointError, ErrorKind, Result};
use wanblk_nbd::ServeOptions;

/// A backend that fails writes past 1 MiB with "no space" and reads at 0 with EIO.
struct Failing;

#[async_trait]
impl Endpoint for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    fn size(&self) -> u64 {
        4 << 20
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { can_flush: true, ..Default::default() }
    }
    async fn read(&self, offset: u64, len: u32) -> Result<Bytes> {
        if offset == 0 {
            return Err(EndpointError::io("failing", Some(offset), "Input/output error (os error 5)"));
        }
        Ok(Bytes::from(vec![1u8; len as usize]))
    }
    async fn write(&self, offset: u64, _data: Bytes, _fua: bool) -> Result<()> {
        if offset >= 1 << 20 {
            return Err(EndpointError::io("failing", Some(offset), "No space left on device (os error 28)"));
        }
        Ok(())
    }
    async fn write_zeroes(&self, offset: u64, _len: u64, _may_trim: bool) -> Result<()> {
        Err(EndpointError::config("failing", Some(offset), "store is read-only"))
    }
    async fn trim(&self, _offset: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    async fn flush(&self) -> Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn backend_errors_map_to_nbd_errors() {
    for structured in [true, false] {
        let srv = TestServer::start(
            Arc::new(Failing),
            ServeOptions { export_name: "f".into(), structured_replies: structured, ..Default::default() },
        )
        .await;
        let s = connect(&srv.uri).await;
        let code = |e: EndpointError| match e.kind {
            ErrorKind::Server { code, .. } => code,
            k => panic!("{k:?}"),
        };
        let e = s.read(0, 512).await.unwrap_err();
        assert_eq!(e.offset, Some(0));
        assert_eq!(code(e), 5);
        assert_eq!(code(s.write(2 << 20, Bytes::from_static(b"x"), false).await.unwrap_err()), 28);
        assert_eq!(code(s.write_zeroes(0, 512, false).await.unwrap_err()), 1);
        // still serving
        s.write(0, Bytes::from_static(b"x"), false).await.unwrap();
        assert_eq!(s.read(512, 4).await.unwrap(), Bytes::from_static(&[1, 1, 1, 1]));
        s.close().await.unwrap();
        srv.stop().await;
    }
}
