//! The one encode/decode trait every wire type implements, and the bounded
//! reader decoders use.

use bytes::{BufMut, Bytes, BytesMut};

/// A malformed wire value. Every decoder returns this instead of panicking.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended before the value did.
    #[error("{what}: truncated ({needed} more bytes needed)")]
    Truncated {
        /// The value being decoded.
        what: &'static str,
        /// Bytes missing.
        needed: usize,
    },
    /// A magic number did not match.
    #[error("{what}: bad magic {got:#x} (expected {expected:#x})")]
    BadMagic {
        /// The value being decoded.
        what: &'static str,
        /// The magic the spec requires.
        expected: u64,
        /// The magic received.
        got: u64,
    },
    /// A length field exceeds what this side accepts.
    #[error("{what}: length {len} is above the limit of {max}")]
    TooLong {
        /// The value being decoded.
        what: &'static str,
        /// The length received.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// A field holds a value the spec forbids.
    #[error("{what}: {detail}")]
    Invalid {
        /// The value being decoded.
        what: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// Bytes were left over after a value whose length was fixed by a header.
    #[error("{what}: {extra} unexpected trailing bytes")]
    Trailing {
        /// The value being decoded.
        what: &'static str,
        /// How many bytes were left.
        extra: usize,
    },
}

/// A cursor over a byte slice whose every read is bounds-checked.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader over `buf`; `what` names the value in errors.
    pub fn new(buf: &'a [u8], what: &'static str) -> Self {
        Reader { buf, pos: 0, what }
    }

    /// Renames the value being decoded (used in error messages).
    pub fn set_what(&mut self, what: &'static str) {
        self.what = what;
    }

    /// The name used in errors.
    pub fn what(&self) -> &'static str {
        self.what
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Takes the next `n` bytes.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] if fewer remain.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::Truncated { what: self.what, needed: n - self.remaining() });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Takes everything left.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    /// Reads a byte.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`].
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    /// Reads a big-endian u16.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`].
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }

    /// Reads a big-endian u32.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`].
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let s = self.take(4)?;
        Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    /// Reads a big-endian u64.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`].
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_be_bytes(a))
    }

    /// Reads a u64 magic and checks it.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] or [`DecodeError::BadMagic`].
    pub fn magic64(&mut self, expected: u64) -> Result<(), DecodeError> {
        let got = self.u64()?;
        if got != expected {
            return Err(DecodeError::BadMagic { what: self.what, expected, got });
        }
        Ok(())
    }

    /// Reads a u32 magic and checks it.
    ///
    /// # Errors
    /// [`DecodeError::Truncated`] or [`DecodeError::BadMagic`].
    pub fn magic32(&mut self, expected: u32) -> Result<(), DecodeError> {
        let got = self.u32()?;
        if got != expected {
            return Err(DecodeError::BadMagic {
                what: self.what,
                expected: expected.into(),
                got: got.into(),
            });
        }
        Ok(())
    }

    /// Reads `len` bytes of UTF-8 text, at most `max` long.
    ///
    /// # Errors
    /// [`DecodeError::TooLong`], [`DecodeError::Truncated`] or
    /// [`DecodeError::Invalid`] for bad UTF-8.
    pub fn string(&mut self, len: usize, max: usize) -> Result<String, DecodeError> {
        if len > max {
            return Err(DecodeError::TooLong { what: self.what, len: len as u64, max: max as u64 });
        }
        let s = self.take(len)?;
        String::from_utf8(s.to_vec())
            .map_err(|_| DecodeError::Invalid { what: self.what, detail: "string is not UTF-8".into() })
    }

    /// Fails unless every byte was read.
    ///
    /// # Errors
    /// [`DecodeError::Trailing`].
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.remaining() != 0 {
            return Err(DecodeError::Trailing { what: self.what, extra: self.remaining() });
        }
        Ok(())
    }

    /// An [`DecodeError::Invalid`] naming the current value.
    pub fn invalid(&self, detail: impl Into<String>) -> DecodeError {
        DecodeError::Invalid { what: self.what, detail: detail.into() }
    }
}

/// Encoding and decoding of one wire type.
///
/// `decode` reads exactly one value from the reader and leaves the rest;
/// values whose length comes from an enclosing header are decoded from a
/// reader over exactly that many bytes and check they used them all.
pub trait Codec: Sized {
    /// Appends the wire form of `self` to `out`.
    fn encode(&self, out: &mut BytesMut);

    /// Reads one value.
    ///
    /// # Errors
    /// A [`DecodeError`] for any malformed input; never panics.
    fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// The wire form as bytes.
    fn to_bytes(&self) -> Bytes {
        let mut b = BytesMut::new();
        self.encode(&mut b);
        b.freeze()
    }

    /// Decodes a value that must fill `buf` exactly.
    ///
    /// # Errors
    /// As [`Codec::decode`], plus [`DecodeError::Trailing`].
    fn decode_exact(buf: &[u8], what: &'static str) -> Result<Self, DecodeError> {
        let mut r = Reader::new(buf, what);
        let v = Self::decode(&mut r)?;
        r.finish()?;
        Ok(v)
    }
}

pub(crate) fn put_string(out: &mut BytesMut, s: &str) {
    out.put_u32(s.len() as u32);
    out.put_slice(s.as_bytes());
}
