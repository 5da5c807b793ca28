//! Schedules of parameter changes over time ("profiles") and their text format.
//!
//! One change per line, `#` starts a comment:
//!
//! ```text
//! at 10s rate 500mbit          # both directions
//! at 20s fwd delay 100ms       # client -> server only
//! at 25s back loss 0.01        # server -> client only
//! at 30s blackout 2s           # link loses everything that arrives for 2 s
//! at 35s blackout 1s hold      # link serves nothing for 1 s; arrivals wait (drop-tail still applies)
//! at 40s loss 0.001
//! at 50s queue 500             # drop-tail limit in packets
//! at 55s queue-bytes 1M        # drop-tail limit in bytes
//! ```
//!
//! Times are offsets from the emulator's start. Changes are absolute (they set a
//! value, they do not add to it) and stay in force until the next change.

use std::fmt;

use crate::units::{format_rate, parse_duration_ns, parse_probability, parse_rate, parse_size};
use crate::{Direction, ParseError, QueueLimit};

/// Which directions a change applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Scope {
    /// Both directions.
    Both,
    /// Client to server only (`fwd`).
    Forward,
    /// Server to client only (`back`).
    Back,
}

impl Scope {
    /// Whether the change applies to `dir`.
    pub fn includes(self, dir: Direction) -> bool {
        matches!(
            (self, dir),
            (Scope::Both, _) | (Scope::Forward, Direction::Forward) | (Scope::Back, Direction::Back)
        )
    }
}

/// What happens to traffic during a blackout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BlackoutMode {
    /// Every packet that reaches the bottleneck during the window is dropped
    /// (reason [`DropReason::Blackout`](crate::DropReason::Blackout)); packets
    /// queued before the window are still served. The default.
    Drop,
    /// The bottleneck serves nothing during the window: packets wait in the
    /// drop-tail queue (and overflow it) and leave after the window ends.
    Hold,
}

/// One parameter change.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Change {
    /// Bottleneck rate, bit/s (0: unlimited).
    Rate(u64),
    /// One-way propagation delay, ns.
    Delay(u64),
    /// Random loss probability.
    Loss(f64),
    /// Drop-tail queue limit.
    Queue(QueueLimit),
    /// A blackout of the given length, ns.
    Blackout {
        /// Length of the window, ns.
        duration: u64,
        /// Whether traffic is dropped or held.
        mode: BlackoutMode,
    },
}

/// A change at a time (ns after the emulator's start) for some directions.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Offset from the start, ns.
    pub at: u64,
    /// Directions it applies to.
    pub scope: Scope,
    /// The change.
    pub change: Change,
}

/// A schedule of changes, sorted by time (stable: equal times keep file order).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    events: Vec<Event>,
}

impl Profile {
    /// A profile from events in any order.
    pub fn new(mut events: Vec<Event>) -> Profile {
        events.sort_by_key(|e| e.at);
        Profile { events }
    }

    /// All events, sorted by time.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The `(offset, change)` pairs that apply to `dir`, sorted by time.
    pub fn for_direction(&self, dir: Direction) -> Vec<(u64, Change)> {
        self.events.iter().filter(|e| e.scope.includes(dir)).map(|e| (e.at, e.change)).collect()
    }

    /// Parses the text format described in the [module docs](self).
    ///
    /// # Errors
    /// A [`ParseError`] naming the line and what is wrong with it.
    pub fn parse(text: &str) -> Result<Profile, ParseError> {
        let mut events = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let ev = parse_line(line)
                .map_err(|e| ParseError::new(format!("line {}: `{line}`: {}", i + 1, e.message())))?;
            events.push(ev);
        }
        Ok(Profile::new(events))
    }
}

fn parse_line(line: &str) -> Result<Event, ParseError> {
    let mut w = line.split_whitespace();
    if w.next() != Some("at") {
        return Err(ParseError::new("expected `at TIME [fwd|back] WHAT VALUE`"));
    }
    let at = parse_duration_ns(w.next().ok_or_else(|| ParseError::new("missing time"))?)?;
    let mut what = w.next().ok_or_else(|| ParseError::new("missing parameter"))?;
    let scope = match what {
        "fwd" | "forward" => Scope::Forward,
        "back" | "backward" | "rev" => Scope::Back,
        "both" => Scope::Both,
        _ => Scope::Both,
    };
    if matches!(what, "fwd" | "forward" | "back" | "backward" | "rev" | "both") {
        what = w.next().ok_or_else(|| ParseError::new("missing parameter"))?;
    }
    let value = w.next().ok_or_else(|| ParseError::new(format!("missing value after `{what}`")))?;
    let change = match what {
        "rate" => Change::Rate(parse_rate(value)?),
        "delay" => Change::Delay(parse_duration_ns(value)?),
        "loss" => Change::Loss(parse_probability(value)?),
        "queue" => {
            let n: u32 = value
                .parse()
                .map_err(|_| ParseError::new(format!("`{value}`: queue wants a packet count")))?;
            Change::Queue(QueueLimit::Packets(n))
        }
        "queue-bytes" => Change::Queue(QueueLimit::Bytes(parse_size(value)?)),
        "blackout" => {
            let duration = parse_duration_ns(value)?;
            let mode = match w.next() {
                None | Some("drop") => BlackoutMode::Drop,
                Some("hold") => BlackoutMode::Hold,
                Some(m) => return Err(ParseError::new(format!("`{m}`: blackout mode is `drop` or `hold`"))),
            };
            Change::Blackout { duration, mode }
        }
        other => {
            return Err(ParseError::new(format!(
                "unknown parameter `{other}` (rate, delay, loss, queue, queue-bytes, blackout)"
            )));
        }
    };
    if let Some(extra) = w.next() {
        return Err(ParseError::new(format!("unexpected `{extra}`")));
    }
    Ok(Event { at, scope, change })
}

impl fmt::Display for Profile {
    /// Writes the text format back ([`Profile::parse`] reads it).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.events {
            write!(f, "at {}ns ", e.at)?;
            match e.scope {
                Scope::Both => {}
                Scope::Forward => write!(f, "fwd ")?,
                Scope::Back => write!(f, "back ")?,
            }
            match e.change {
                Change::Rate(r) => writeln!(f, "rate {}", format_rate(r))?,
                Change::Delay(d) => writeln!(f, "delay {d}ns")?,
                Change::Loss(p) => writeln!(f, "loss {p}")?,
                Change::Queue(QueueLimit::Packets(n)) => writeln!(f, "queue {n}")?,
                Change::Queue(QueueLimit::Bytes(n)) => writeln!(f, "queue-bytes {n}")?,
                Change::Queue(QueueLimit::Unlimited) => writeln!(f, "queue 4294967295")?,
                Change::Blackout { duration, mode } => {
                    let m = if mode == BlackoutMode::Hold { " hold" } else { "" };
                    writeln!(f, "blackout {duration}ns{m}")?
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_documented_example() {
        let p = Profile::parse(
            "# comment\nat 40s loss 0.001\nat 10s rate 500mbit\n\nat 20s fwd delay 100ms\nat 30s blackout 2s\n\
             at 35s back blackout 1s hold\nat 50s queue 500\nat 55s queue-bytes 1M\n",
        )
        .unwrap();
        let e = p.events();
        assert_eq!(e.len(), 7);
        assert_eq!(e[0], Event { at: 10_000_000_000, scope: Scope::Both, change: Change::Rate(500_000_000) });
        assert_eq!(e[1].scope, Scope::Forward);
        assert_eq!(e[1].change, Change::Delay(100_000_000));
        assert_eq!(e[2].change, Change::Blackout { duration: 2_000_000_000, mode: BlackoutMode::Drop });
        assert_eq!(e[3].change, Change::Blackout { duration: 1_000_000_000, mode: BlackoutMode::Hold });
        assert_eq!(e[4].change, Change::Loss(0.001));
        assert_eq!(p.for_direction(Direction::Forward).len(), 6);
        assert_eq!(p.for_direction(Direction::Back).len(), 6);
        // Display round-trips.
        assert_eq!(Profile::parse(&p.to_string()).unwrap(), p);
    }

    #[test]
    fn errors_name_the_line() {
        let err = Profile::parse("at 1s rate 1gbit\nat 2s speed 5\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        assert!(Profile::parse("rate 1gbit").is_err());
        assert!(Profile::parse("at 1s blackout 1s sometimes").is_err());
        assert!(Profile::parse("at 1s loss 2").is_err());
        assert!(Profile::parse("at 1s rate 1gbit extra").is_err());
    }
}
