//! Progress for people and for programs, fed from completions (never from
//! submissions): bytes finished, rate, ETA, active sessions and phase.
//!
//! - On a terminal: a bar on stderr.
//! - Off a terminal: one line of text on stderr every few seconds (or to
//!   any file descriptor, `--progress=FD`), so a log or a cron mail shows
//!   how far a copy got.
//! - For orchestrators: one JSON object per line ([`Line`], `--progress-json`).
//!
//! Rates are in Mbit/s (10^6 bits per second) everywhere, as in the
//! summary and the report.

use std::collections::VecDeque;
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::engine::Progress;

/// What the copy is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Connecting to the stores.
    Opening,
    /// Moving data.
    Copying,
    /// Flushing and closing the destination.
    Finishing,
    /// Done: every byte copied.
    Done,
    /// Stopped on an error (or stopped early).
    Failed,
}

impl Phase {
    fn from_u8(v: u8) -> Phase {
        match v {
            0 => Phase::Opening,
            1 => Phase::Copying,
            2 => Phase::Finishing,
            3 => Phase::Done,
            _ => Phase::Failed,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Phase::Opening => "opening",
            Phase::Copying => "copying",
            Phase::Finishing => "finishing",
            Phase::Done => "done",
            Phase::Failed => "failed",
        }
    }
}

/// The phase, shared between the command and the display.
#[derive(Debug)]
pub struct PhaseCell(AtomicU8);

impl Default for PhaseCell {
    fn default() -> Self {
        PhaseCell(AtomicU8::new(Phase::Opening as u8))
    }
}

impl PhaseCell {
    /// Sets the phase.
    pub fn set(&self, p: Phase) {
        self.0.store(p as u8, Ordering::Relaxed);
    }

    /// The phase now.
    pub fn get(&self) -> Phase {
        Phase::from_u8(self.0.load(Ordering::Relaxed))
    }
}

/// One progress line of `--progress-json` (the schema: every field is
/// always present; `eta_s` is `null` while unknown).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Line {
    /// Seconds since the copy started.
    pub t_s: f64,
    /// What the copy is doing.
    pub phase: Phase,
    /// Bytes of the image finished (copied, zeroed or skipped).
    pub bytes_done: u64,
    /// Bytes to copy (for standard input: at most this, the destination's size).
    pub bytes_total: u64,
    /// `bytes_done` of `bytes_total`, 0 to 100.
    pub percent: f64,
    /// Data moved per second since the previous line, Mbit/s.
    pub rate_mbps: f64,
    /// Data moved per second since the start, Mbit/s.
    pub average_mbps: f64,
    /// Seconds left at the average rate of the image finished.
    pub eta_s: Option<f64>,
    /// Active sessions per network store.
    pub sessions: usize,
}

impl Line {
    /// The line as text, as off a terminal: `wanblk: progress ...`.
    pub fn text(&self) -> String {
        let eta = self.eta_s.map_or_else(|| "?".to_string(), fmt_duration);
        format!(
            "wanblk: progress {}: {:.1}% ({} of {} bytes), {:.1} Mbit/s now, {:.1} Mbit/s average, ETA {eta}, {} session(s), {:.0} s",
            self.phase.as_str(),
            self.percent,
            self.bytes_done,
            self.bytes_total,
            self.rate_mbps,
            self.average_mbps,
            self.sessions,
            self.t_s
        )
    }
}

fn fmt_duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Where progress goes and how.
pub enum Display {
    /// Nowhere.
    Off,
    /// A bar on stderr (meant for a terminal).
    Bar,
    /// A line of text every `every` (and one at the end).
    Text {
        /// Where the lines go.
        out: Box<dyn Write + Send>,
        /// Time between lines.
        every: Duration,
    },
    /// A [`Line`] as JSON every `every` (and one at the end).
    Json {
        /// Where the lines go.
        out: Box<dyn Write + Send>,
        /// Time between lines.
        every: Duration,
    },
}

impl std::fmt::Debug for Display {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Display::Off => write!(f, "Off"),
            Display::Bar => write!(f, "Bar"),
            Display::Text { every, .. } => write!(f, "Text every {every:?}"),
            Display::Json { every, .. } => write!(f, "Json every {every:?}"),
        }
    }
}

impl Display {
    /// The default on stderr: the bar on a terminal, else a text line
    /// every `every`.
    pub fn stderr_default(every: Duration) -> Display {
        if std::io::stderr().is_terminal() {
            Display::Bar
        } else {
            Display::Text { out: Box::new(std::io::stderr()), every }
        }
    }
}

/// Computes [`Line`]s from the counters: rates between two readings.
#[derive(Debug)]
struct Meter {
    started: Instant,
    last: (Instant, u64),
    /// Readings of the last few seconds, for the bar's rate.
    recent: VecDeque<(Instant, u64)>,
}

impl Meter {
    fn new(now: Instant) -> Meter {
        Meter { started: now, last: (now, 0), recent: VecDeque::new() }
    }

    /// A line at `now`; `data` counts bytes moved as data (the rate),
    /// `done` bytes finished (progress and ETA).
    fn line(&mut self, now: Instant, p: &Progress, phase: Phase, sessions: usize) -> Line {
        let data = p.data.load(Ordering::Relaxed);
        let done = p.done.load(Ordering::Relaxed);
        let total = p.total.load(Ordering::Relaxed);
        let t = now.saturating_duration_since(self.started).as_secs_f64();
        let dt = now.saturating_duration_since(self.last.0).as_secs_f64();
        let mbps = |bytes: u64, secs: f64| if secs > 0.0 { bytes as f64 * 8.0 / secs / 1e6 } else { 0.0 };
        let rate = mbps(data.saturating_sub(self.last.1), dt);
        self.last = (now, data);
        let eta = (done > 0 && t > 0.0 && total >= done).then(|| (total - done) as f64 * t / done as f64);
        Line {
            t_s: t,
            phase,
            bytes_done: done,
            bytes_total: total,
            percent: if total > 0 { (done as f64 * 100.0 / total as f64).min(100.0) } else { 100.0 },
            rate_mbps: rate,
            average_mbps: mbps(data, t),
            eta_s: if phase == Phase::Done { Some(0.0) } else { eta },
            sessions,
        }
    }

    /// Data rate over the last two seconds or so, Mbit/s.
    fn recent_mbps(&mut self, now: Instant, data: u64) -> f64 {
        self.recent.push_back((now, data));
        while self.recent.len() > 2
            && now.saturating_duration_since(self.recent[1].0) >= Duration::from_secs(2)
        {
            self.recent.pop_front();
        }
        let (t0, d0) = self.recent[0];
        let dt = now.saturating_duration_since(t0).as_secs_f64();
        if dt > 0.0 { data.saturating_sub(d0) as f64 * 8.0 / dt / 1e6 } else { 0.0 }
    }
}

/// A running progress display; call [`Reporter::finish`] at the end.
pub struct Reporter {
    mode: Mode,
    bar: Option<ProgressBar>,
    /// The display task; hands the line writer back when stopped.
    task: Option<tokio::task::JoinHandle<Option<Box<dyn Write + Send>>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    meter: Arc<std::sync::Mutex<Meter>>,
    progress: Arc<Progress>,
    phase: Arc<PhaseCell>,
    active: Arc<dyn Fn() -> usize + Send + Sync>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    Bar,
    Text,
    Json,
}

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reporter").field("mode", &self.mode).finish()
    }
}

/// Writes one line; false once the output is gone.
fn write_line(out: &mut dyn Write, mode: Mode, line: &Line) -> bool {
    let text = match mode {
        Mode::Json => serde_json::to_string(line).unwrap_or_default(),
        _ => line.text(),
    };
    writeln!(out, "{text}").and_then(|()| out.flush()).is_ok()
}

impl Reporter {
    /// Starts showing `progress` on `display`; `phase` says what the copy
    /// does, `active` the active sessions per store, `status` what went
    /// wrong so far (empty when nothing did; shown on the bar).
    pub fn start(
        display: Display,
        progress: Arc<Progress>,
        phase: Arc<PhaseCell>,
        active: impl Fn() -> usize + Send + Sync + 'static,
        status: impl Fn() -> String + Send + 'static,
    ) -> Reporter {
        let active: Arc<dyn Fn() -> usize + Send + Sync> = Arc::new(active);
        let meter = Arc::new(std::sync::Mutex::new(Meter::new(Instant::now())));
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (mode, bar, task) = match display {
            Display::Off => (Mode::Off, None, None),
            Display::Bar => {
                let bar = ProgressBar::with_draw_target(
                    Some(progress.total.load(Ordering::Relaxed)),
                    ProgressDrawTarget::stderr(),
                );
                bar.set_style(
                    ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} {msg} ETA {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                );
                let (b, m, p, a) =
                    (bar.clone(), Arc::clone(&meter), Arc::clone(&progress), Arc::clone(&active));
                let task = tokio::spawn(async move {
                    loop {
                        let mbps = m
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .recent_mbps(Instant::now(), p.data.load(Ordering::Relaxed));
                        b.set_length(p.total.load(Ordering::Relaxed));
                        b.set_position(p.done.load(Ordering::Relaxed));
                        let status = status();
                        let sep = if status.is_empty() { "" } else { " " };
                        b.set_message(format!("{mbps:.1} Mbit/s N={}{sep}{status}", a()));
                        tokio::select! {
                            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                            _ = &mut stopped => return None,
                        }
                    }
                });
                (Mode::Bar, Some(bar), Some(task))
            }
            Display::Text { out, every } => {
                let task = lines(out, Mode::Text, every, &meter, &progress, &phase, &active, stopped);
                (Mode::Text, None, Some(task))
            }
            Display::Json { out, every } => {
                let task = lines(out, Mode::Json, every, &meter, &progress, &phase, &active, stopped);
                (Mode::Json, None, Some(task))
            }
        };
        Reporter { mode, bar, task, stop: Some(stop), meter, progress, phase, active }
    }

    /// Stops updating and shows the final state: the bar stays on screen;
    /// lines end with one for the phase set last (done or failed).
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let out = match self.task.take() {
            Some(t) => t.await.ok().flatten(),
            None => None,
        };
        if let Some(bar) = &self.bar {
            bar.set_position(self.progress.done.load(Ordering::Relaxed));
            bar.finish();
        }
        if let Some(mut out) = out {
            let line = self.meter.lock().unwrap_or_else(|e| e.into_inner()).line(
                Instant::now(),
                &self.progress,
                self.phase.get(),
                (self.active)(),
            );
            write_line(&mut *out, self.mode, &line);
        }
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// The task that writes a line every `every`; returns the writer when
/// stopped (or `None` once the output is gone).
#[allow(clippy::too_many_arguments)]
fn lines(
    mut out: Box<dyn Write + Send>,
    mode: Mode,
    every: Duration,
    meter: &Arc<std::sync::Mutex<Meter>>,
    progress: &Arc<Progress>,
    phase: &Arc<PhaseCell>,
    active: &Arc<dyn Fn() -> usize + Send + Sync>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Option<Box<dyn Write + Send>>> {
    let (m, p, ph, a) = (Arc::clone(meter), Arc::clone(progress), Arc::clone(phase), Arc::clone(active));
    let every = every.max(Duration::from_millis(100));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = &mut stopped => return Some(out),
            }
            let line = m.lock().unwrap_or_else(|e| e.into_inner()).line(Instant::now(), &p, ph.get(), a());
            if !write_line(&mut *out, mode, &line) {
                return None;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Kept(Arc<std::sync::Mutex<Vec<u8>>>);

    impl Write for Kept {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_line_has_rates_in_mbit_and_an_eta() {
        let t0 = Instant::now();
        let mut m = Meter::new(t0);
        let p = Progress::default();
        p.total.store(100_000_000, Ordering::Relaxed);
        p.done.store(25_000_000, Ordering::Relaxed);
        p.data.store(25_000_000, Ordering::Relaxed);
        let l = m.line(t0 + Duration::from_secs(2), &p, Phase::Copying, 4);
        assert_eq!((l.bytes_done, l.bytes_total, l.sessions), (25_000_000, 100_000_000, 4));
        assert!((l.percent - 25.0).abs() < 1e-9);
        assert!((l.rate_mbps - 100.0).abs() < 1e-9, "25 MB in 2 s = 100 Mbit/s: {l:?}");
        assert!((l.eta_s.unwrap() - 6.0).abs() < 1e-9);
        p.done.store(50_000_000, Ordering::Relaxed);
        p.data.store(30_000_000, Ordering::Relaxed);
        let l = m.line(t0 + Duration::from_secs(3), &p, Phase::Copying, 4);
        assert!((l.rate_mbps - 40.0).abs() < 1e-9, "the rate since the previous line: {l:?}");
        assert!((l.average_mbps - 80.0).abs() < 1e-9);
        let text = l.text();
        assert!(text.starts_with("wanblk: progress copying: 50.0%") && text.contains("Mbit/s"), "{text}");
        let json: Line = serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
        assert_eq!(json, l);
    }

    #[tokio::test(start_paused = true)]
    async fn lines_come_every_interval_and_at_the_end() {
        let kept = Kept::default();
        let p = Arc::new(Progress::default());
        p.total.store(1000, Ordering::Relaxed);
        let phase = Arc::new(PhaseCell::default());
        phase.set(Phase::Copying);
        let every = Duration::from_secs(10);
        let r = Reporter::start(
            Display::Json { out: Box::new(kept.clone()), every },
            Arc::clone(&p),
            Arc::clone(&phase),
            || 2,
            String::new,
        );
        for i in 1..=3u64 {
            p.done.store(i * 100, Ordering::Relaxed);
            tokio::time::sleep(every + Duration::from_millis(1)).await;
        }
        p.done.store(1000, Ordering::Relaxed);
        phase.set(Phase::Done);
        r.finish().await;
        let text = String::from_utf8(kept.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<Line> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines.iter().map(|l| l.bytes_done).collect::<Vec<_>>(), vec![100, 200, 300, 1000]);
        assert_eq!(lines[3].phase, Phase::Done);
        assert!(lines[..3].iter().all(|l| l.phase == Phase::Copying && l.sessions == 2));
    }
}
