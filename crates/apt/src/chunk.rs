//! Adaptive chunk size (seed 002, section IV): size each chunk so that it
//! takes about Delta to transfer, predicting the next goodput from the last.

use serde::{Deserialize, Serialize};

use crate::config::ConfigError;

/// Parameters of a [`ChunkSizer`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChunkConfig {
    /// Delta: the target transfer time of one chunk, in seconds.
    pub target_s: f64,
    /// Size of the first chunk, before any measurement.
    pub initial_bytes: u64,
    /// Smallest chunk.
    pub min_bytes: u64,
    /// Largest chunk.
    pub max_bytes: u64,
    /// Chunks are rounded up to a multiple of this (the request size), then
    /// clamped; 1 for no rounding.
    pub align_bytes: u64,
}

impl Default for ChunkConfig {
    /// Delta = 3 s as in seed 002's Table I; the first chunk is 128 KiB as in
    /// seed 000's Table 1; 1 MiB requests; at most 64 GiB.
    fn default() -> Self {
        ChunkConfig {
            target_s: 3.0,
            initial_bytes: 128 << 10,
            min_bytes: 128 << 10,
            max_bytes: 64 << 30,
            align_bytes: 1 << 20,
        }
    }
}

/// Sizes the byte budget of the next chunk (interval) as
/// `clamp(round_up(G_last * Delta, align), min, max)`, where `G_last` is the
/// goodput of the last chunk (bytes / transfer time, measured from its first
/// to its last PDU).
///
/// A measurement with zero bytes, or a duration that is not finite and
/// positive, is ignored: the size stays as it was.
#[derive(Debug, Clone)]
pub struct ChunkSizer {
    cfg: ChunkConfig,
    current: u64,
}

impl ChunkSizer {
    /// A sizer starting at `cfg.initial_bytes` (clamped to the range).
    ///
    /// # Errors
    /// [`ConfigError::BadChunk`] when `target_s` is not finite and positive,
    /// `min_bytes` is 0 or above `max_bytes`, or `align_bytes` is 0.
    pub fn new(cfg: ChunkConfig) -> Result<Self, ConfigError> {
        if !(cfg.target_s.is_finite() && cfg.target_s > 0.0) {
            return Err(ConfigError::BadChunk("target_s must be finite and positive"));
        }
        if cfg.min_bytes == 0 || cfg.min_bytes > cfg.max_bytes {
            return Err(ConfigError::BadChunk("need 0 < min_bytes <= max_bytes"));
        }
        if cfg.align_bytes == 0 {
            return Err(ConfigError::BadChunk("align_bytes must be at least 1"));
        }
        let current = cfg.initial_bytes.clamp(cfg.min_bytes, cfg.max_bytes);
        Ok(ChunkSizer { cfg, current })
    }

    /// The size of the next chunk in bytes.
    pub fn chunk_bytes(&self) -> u64 {
        self.current
    }

    /// The chunk size for a predicted goodput in bytes per second; a
    /// non-finite or negative goodput gives the minimum.
    pub fn size_for(&self, goodput_bytes_per_s: f64) -> u64 {
        let c = &self.cfg;
        let want = goodput_bytes_per_s * c.target_s;
        if !(want.is_finite() && want > 0.0) {
            return c.min_bytes;
        }
        // Saturating float-to-int cast; u64::MAX for anything above.
        let bytes = want.ceil() as u64;
        let aligned = bytes.div_ceil(c.align_bytes).saturating_mul(c.align_bytes);
        aligned.clamp(c.min_bytes, c.max_bytes)
    }

    /// Feeds the last chunk (`bytes` moved in `duration_s` seconds) and
    /// returns the size of the next one.
    pub fn observe(&mut self, bytes: u64, duration_s: f64) -> u64 {
        if bytes > 0 && duration_s.is_finite() && duration_s > 0.0 {
            self.current = self.size_for(bytes as f64 / duration_s);
        }
        self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizer() -> ChunkSizer {
        ChunkSizer::new(ChunkConfig { align_bytes: 1, ..ChunkConfig::default() }).unwrap()
    }

    #[test]
    fn chunk_takes_about_delta_at_the_last_goodput() {
        let mut s = sizer();
        assert_eq!(s.chunk_bytes(), 128 << 10);
        // 10 MB in 0.5 s = 20 MB/s -> 60 MB for 3 s.
        assert_eq!(s.observe(10_000_000, 0.5), 60_000_000);
        // Goodput halves: the chunk halves.
        assert_eq!(s.observe(60_000_000, 6.0), 30_000_000);
    }

    #[test]
    fn converges_to_delta_on_a_steady_path() {
        // A path at 1 Gbit/s: each chunk then takes exactly Delta.
        let mut s = sizer();
        let rate = 125e6;
        for _ in 0..3 {
            let bytes = s.chunk_bytes();
            s.observe(bytes, bytes as f64 / rate);
        }
        let t = s.chunk_bytes() as f64 / rate;
        assert!((t - 3.0).abs() < 1e-6, "{t}");
    }

    #[test]
    fn clamps_aligns_and_ignores_bad_measurements() {
        let mut s = ChunkSizer::new(ChunkConfig::default()).unwrap();
        // A trickle: one request (the alignment) is the floor.
        assert_eq!(s.observe(1, 1000.0), 1 << 20);
        assert_eq!(s.observe(1 << 40, 1e-9), 64 << 30);
        let before = s.chunk_bytes();
        for d in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(s.observe(1 << 20, d), before);
        }
        assert_eq!(s.observe(0, 1.0), before);
        // 1.5 MiB/s * 3 s = 4.5 MiB, rounded up to 5 MiB.
        assert_eq!(s.observe(3 << 19, 1.0), 5 << 20);
        assert_eq!(s.size_for(f64::NAN), 128 << 10);
    }

    #[test]
    fn rejects_bad_config() {
        let d = ChunkConfig::default();
        assert!(ChunkSizer::new(ChunkConfig { target_s: 0.0, ..d }).is_err());
        assert!(ChunkSizer::new(ChunkConfig { min_bytes: 0, ..d }).is_err());
        assert!(ChunkSizer::new(ChunkConfig { min_bytes: 2, max_bytes: 1, ..d }).is_err());
        assert!(ChunkSizer::new(ChunkConfig { align_bytes: 0, ..d }).is_err());
    }
}
