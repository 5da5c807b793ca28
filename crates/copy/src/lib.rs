//! Copy engine behind `wanblk copy`.
