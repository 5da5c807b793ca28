//! Several copies on one host: one session budget per path.
//!
//! Two copies started on the same machine towards the same server each
//! tune N as if alone, and each reads the share it takes from the other
//! as "more N, more goodput", so together they open far more sessions
//! than the path needs. The copies of one host therefore register with a
//! coordinator (one of them, over a Unix socket; the socket layer lives in
//! `wanblk-remote`) and it splits one budget between them.
//!
//! The rule ([`HostBudget`]):
//! - The budget of a path is the N one copy tuned to while it was the
//!   only copy on that path (the tuner had converged); alone, a copy only
//!   raises a budget the path already has.
//! - Alone, a copy gets no ceiling (it tunes, and sets the budget).
//! - With k copies and a known budget B, the copies get ceilings B/k, at
//!   least 1 each, and B mod k of them one more: together about the N of
//!   one copy. The sessions left over go to the copies with the most bytes
//!   left (in the order they joined when none says), and move to another
//!   copy once it has [`HANDOVER_S`] of one session's bytes more left than
//!   one that holds an extra session, so copies of one size end together.
//!   Held for a whole copy, a budget of 5 gave two 2 GiB copies 3 and 2
//!   sessions (570 against 424 Mbit/s on the share path), and the second
//!   ran alone for its last 10 s, taking its share over a step at a time.
//! - The copies' own governors often hold them under their grants, and
//!   unevenly: each cuts on the queue the copies make together, and the
//!   one that cut first stays lower (two 2 GiB copies on a budget of 8 ran
//!   2 and 3 sessions for 10-20 s, and one ran alone at the end). Once
//!   every copy has settled and together they run fewer sessions than the
//!   budget, the coordinator takes turns: a copy with two sessions more
//!   than another, or one more and fewer bytes left by the margin above,
//!   is capped one session lower ([`Grant::ceiling`]) and the other is told
//!   to take it ([`Grant::take`]) above its own governor's ceiling, both
//!   at once, and the next turn waits until both did. The path carries as
//!   many sessions as before, so the queue the governors held stays as it
//!   was. A `take` the copy has not carried out after [`TAKE_REPORTS`]
//!   reports (its own limit on sessions) ends the turns on the path, and
//!   no turn gives that copy more than it took again.
//! - With k copies started together (no budget yet), the first copy (the
//!   leader) tunes without a ceiling while the others are held at one
//!   session; the leader's N once its search found where more sessions
//!   stop helping (converged, or the best point of a search past its
//!   climb: [`settled_point`]) plus the sessions the others held meanwhile
//!   (the leader tuned beside them) becomes the budget, and it is split.
//!   Waiting for the leader to converge held three of four copies at one
//!   session for the leader's whole copy on the share path (its search
//!   read 8, 6, 7 beside them for 19 s and never ended).
//! - A budget grows by a quarter (at least one session) when every copy on
//!   the path reports room: it has run near its ceiling for a few intervals
//!   with no standing queue (the path is not full at that N). It doubles
//!   instead when the growth before gained at least half in proportion
//!   (the copies' goodput together rose by half the share the budget did):
//!   the copies are on the ramp, as the bracket search's jump reads it. On
//!   the share path with 0.01 % random loss a leader settled at 4-5 beside
//!   a held copy where ~30 sessions fill the path, and quarters took the
//!   budget from 6 to 32 over 12-16 s of a 45 s pair of copies. A copy's
//!   room counts only intervals since the budget last changed
//!   ([`Governor::room_under`](crate::share::Governor::room_under)):
//!   counted over growths, copies reported it again on their first
//!   interval after one and the budget grew an interval at a time (two
//!   copies of a rate-limited server, each allowed 8, ran 8 + 8). Under
//!   random loss the goodput a growth brings erodes within seconds, so
//!   there it mostly grows by quarters still (11, 13, 16, 20, 25, 4-5 s
//!   apart). A leader's
//!   search beside held copies can end low (on a path with random loss
//!   two copies split a budget of 9 where one copy alone ends at 23, and
//!   moved 0.43 of the link together); nothing else would ever raise it.
//!   The room flags are cleared with every raise, so each step waits for
//!   fresh reports. The copies' tuners pace the growth: a copy reports
//!   room only while its N is within a quarter of its ceiling, and a tuner
//!   stops short of a ceiling where more sessions add no goodput (bbr
//!   keeps the queue near empty on a full path too). A check of the
//!   goodput between raises was tried and dropped: under random loss the
//!   goodput of a constant N falls for tens of seconds after slow start
//!   (9 sessions: 772 to 300 Mbit/s over 12 s), which blocked every raise
//!   after the first.
//! - When the last copy on a path leaves, its budget is forgotten (the
//!   next copy tunes again).
//! - Every grant carries the path's budget, and a copy tells it to the
//!   next coordinator in its `hello`: when the copy serving the
//!   coordinator ends, the one that takes over starts from that budget
//!   (without it, a new leader tuned again while the others were held at
//!   one session each: four copies on the share path ended at 0.83 of the
//!   link).
//!
//! The wire protocol ([`Message`], [`Decoder`]) is one line of ASCII per
//! message, at most [`MAX_LINE`] bytes:
//! - copy to coordinator: `hello 1 KEY [BUDGET]` (protocol version 1, the
//!   path key, the budget last heard if any) then `report N GOODPUT
//!   SETTLED [ROOM [LEFT]]` after every interval (active sessions, bytes per
//!   second, 1 if the tuner has settled, 1 if the copy has room near its
//!   ceiling, sent only when 1 or before LEFT; the bytes the copy has left,
//!   when known);
//! - coordinator to copy: `grant CEILING COPIES [BUDGET [TAKE]]` (`-`: no
//!   ceiling; the budget once there is one; the sessions to take at once
//!   when another copy gave one up for this one).
//!
//! The optional last fields keep lines of builds without them valid.
//!
//! Sans-I/O: bytes in, messages out; the decoder never panics on what a
//! peer sends and bounds every line.

use std::collections::BTreeMap;
use std::fmt;

use crate::Tuner;

/// The protocol version this build speaks.
pub const VERSION: u32 = 1;

/// The longest line accepted, newline included.
pub const MAX_LINE: usize = 512;

/// The longest path key.
pub const MAX_KEY: usize = 256;

/// The most a budget grows to by the copies' reports of room.
pub const MAX_BUDGET: usize = 1024;

/// A session left over by an even split of the budget moves to a copy that
/// has more bytes left than one holding it by this many seconds of one
/// session's goodput: about twice as long between moves, each move costing
/// a session's ramp (a second at 100 ms).
pub const HANDOVER_S: f64 = 3.0;

/// The least margin of bytes left before a left-over session moves, when
/// the copies' goodput is not known yet.
const HANDOVER_MIN_BYTES: u64 = 16 << 20;

/// Reports a copy granted a `take` may send without carrying it out before
/// the turns on its path end (caps and takes dropped).
pub const TAKE_REPORTS: usize = 4;

/// One message of the host protocol.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A copy registers for `key` (the path: the server's host and port).
    Hello {
        /// Protocol version of the sender.
        version: u32,
        /// The path key: printable ASCII without spaces.
        key: String,
        /// The path's budget as this copy last heard it from a
        /// coordinator (`None`: never), so that a coordinator taking over
        /// from one that ended does not start from nothing.
        budget: Option<usize>,
    },
    /// A copy's state after an interval.
    Report(CopyReport),
    /// The coordinator's answer: the copy's ceiling on N, how many copies
    /// share the path now, the budget, and a session handed to this copy.
    Grant(Grant),
}

/// One copy's state after an interval, as told to the coordinator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CopyReport {
    /// Active sessions.
    pub n: usize,
    /// Goodput, bytes per second.
    pub goodput: u64,
    /// The tuner has settled (N is what this copy tunes to:
    /// [`settled_point`]).
    pub settled: bool,
    /// The copy has run near its ceiling for a few intervals with no
    /// standing queue: more sessions would fill idle capacity
    /// ([`Governor::room_under`](crate::share::Governor::room_under)).
    pub room: bool,
    /// Bytes the copy has left to move (`None`: unknown): the sessions an
    /// even split of the budget leaves over go to the copies with the most
    /// left.
    pub left: Option<u64>,
}

/// What is wrong with a line a peer sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// No newline within [`MAX_LINE`] bytes.
    #[error("line longer than {MAX_LINE} bytes")]
    Overlong,
    /// Not ASCII text.
    #[error("line is not ASCII text")]
    NotText,
    /// An unknown message name.
    #[error("unknown message {0:?}")]
    Unknown(String),
    /// A known message with missing, extra or malformed fields.
    #[error("malformed {0} message")]
    Malformed(&'static str),
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_KEY && key.bytes().all(|b| b.is_ascii_graphic())
}

impl Message {
    /// A `Hello` for `key` with the `budget` last heard, the key's spaces
    /// and control characters replaced and cut to [`MAX_KEY`] bytes so it
    /// always encodes.
    pub fn hello(key: &str, budget: Option<usize>) -> Message {
        let mut k: String =
            key.chars().map(|c| if c.is_ascii_graphic() { c } else { '_' }).take(MAX_KEY).collect();
        if k.is_empty() {
            k.push('_');
        }
        Message::Hello { version: VERSION, key: k, budget }
    }

    /// The message as one line, newline included.
    pub fn encode(&self) -> Vec<u8> {
        format!("{self}\n").into_bytes()
    }

    fn parse(line: &str) -> Result<Message, DecodeError> {
        let mut words = line.split(' ');
        let name = words.next().unwrap_or("");
        let fields: Vec<&str> = words.collect();
        let num = |s: &str| -> Option<u64> {
            (!s.is_empty() && s.len() <= 20 && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())?
        };
        let small = |s: &str| num(s).and_then(|v| usize::try_from(v).ok()).filter(|v| *v <= 1 << 20);
        // The optional budget that ends `hello` and `grant`.
        let budget = |rest: &[&str], what: &'static str| match rest {
            [b] => small(b).map(Some).ok_or(DecodeError::Malformed(what)),
            _ => Ok(None),
        };
        match (name, fields.as_slice()) {
            ("hello", [v, key, rest @ ..]) if rest.len() <= 1 => {
                let version =
                    num(v).and_then(|v| u32::try_from(v).ok()).ok_or(DecodeError::Malformed("hello"))?;
                if !valid_key(key) {
                    return Err(DecodeError::Malformed("hello"));
                }
                Ok(Message::Hello { version, key: (*key).to_string(), budget: budget(rest, "hello")? })
            }
            ("report", [n, g, s, rest @ ..]) if rest.len() <= 2 => {
                let flag = |s: &str| match s {
                    "0" => Ok(false),
                    "1" => Ok(true),
                    _ => Err(DecodeError::Malformed("report")),
                };
                let settled = flag(s)?;
                let room = rest.first().map_or(Ok(false), |r| flag(r))?;
                let left = match rest.get(1) {
                    Some(l) => Some(num(l).ok_or(DecodeError::Malformed("report"))?),
                    None => None,
                };
                match (small(n), num(g)) {
                    (Some(n), Some(goodput)) => {
                        Ok(Message::Report(CopyReport { n, goodput, settled, room, left }))
                    }
                    _ => Err(DecodeError::Malformed("report")),
                }
            }
            ("grant", [c, k, rest @ ..]) if rest.len() <= 2 => {
                let ceiling = match *c {
                    "-" => None,
                    c => Some(small(c).ok_or(DecodeError::Malformed("grant"))?),
                };
                let copies = small(k).ok_or(DecodeError::Malformed("grant"))?;
                let budget = budget(&rest[..rest.len().min(1)], "grant")?;
                let take = match rest.get(1) {
                    Some(t) => Some(small(t).ok_or(DecodeError::Malformed("grant"))?),
                    None => None,
                };
                Ok(Message::Grant(Grant { ceiling, copies, budget, take }))
            }
            ("hello" | "report" | "grant", _) => Err(DecodeError::Malformed(match name {
                "hello" => "hello",
                "report" => "report",
                _ => "grant",
            })),
            _ => Err(DecodeError::Unknown(name.chars().take(32).collect())),
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Hello { version, key, budget } => {
                write!(f, "hello {version} {key}")?;
                budget.map_or(Ok(()), |b| write!(f, " {b}"))
            }
            Message::Report(CopyReport { n, goodput, settled, room, left }) => {
                write!(f, "report {n} {goodput} {}", u8::from(*settled))?;
                match left {
                    Some(l) => write!(f, " {} {l}", u8::from(*room)),
                    None if *room => write!(f, " 1"),
                    None => Ok(()),
                }
            }
            Message::Grant(Grant { ceiling, copies, budget, take }) => {
                match ceiling {
                    Some(c) => write!(f, "grant {c} {copies}")?,
                    None => write!(f, "grant - {copies}")?,
                }
                // A session handed over comes with a budget only.
                match (budget, take) {
                    (Some(b), Some(t)) => write!(f, " {b} {t}"),
                    (Some(b), None) => write!(f, " {b}"),
                    (None, _) => Ok(()),
                }
            }
        }
    }
}

/// Cuts a byte stream into messages. Feed it what the socket read
/// ([`feed`](Self::feed)), then take messages ([`next`](Self::next)) until
/// `None`. After an error the connection should be closed.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    /// An empty decoder.
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Appends bytes read from the peer.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete message, an error for a bad line (that line is
    /// consumed), or `None` until more bytes arrive.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Message, DecodeError>> {
        let Some(end) = self.buf.iter().position(|b| *b == b'\n') else {
            if self.buf.len() >= MAX_LINE {
                self.buf.clear();
                return Some(Err(DecodeError::Overlong));
            }
            return None;
        };
        let line: Vec<u8> = self.buf.drain(..=end).collect();
        if end + 1 > MAX_LINE {
            return Some(Err(DecodeError::Overlong));
        }
        let line = &line[..end];
        if !line.is_ascii() {
            return Some(Err(DecodeError::NotText));
        }
        let text = String::from_utf8_lossy(line);
        Some(Message::parse(text.trim_end_matches('\r')))
    }
}

/// A copy registered with a [`HostBudget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MemberId(u64);

#[derive(Debug, Clone)]
struct Member {
    key: String,
    n: usize,
    goodput: u64,
    /// Room near its ceiling, reported since the budget last grew.
    room: bool,
    /// Bytes left to move, if known.
    left: Option<u64>,
    /// Holds one of the sessions an even split leaves over.
    extra: bool,
    /// The tuner has settled.
    settled: bool,
    /// At most this many sessions: the copy gave one up in a turn.
    cap: Option<usize>,
    /// This many sessions to take at once: a turn gave one to it.
    take: Option<usize>,
    /// Reports since `take` was granted without the copy there.
    take_waits: usize,
    /// The most sessions the copy was seen to take: it let a `take` above
    /// this lapse (its own limit), and no turn gives it more again.
    most: Option<usize>,
}

/// What the coordinator gives one copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Ceiling on N (`None`: none).
    pub ceiling: Option<usize>,
    /// Copies on the path, this one included.
    pub copies: usize,
    /// The path's budget (`None`: none yet).
    pub budget: Option<usize>,
    /// A session another copy gave up, for this one: it takes this many
    /// sessions at once, above its own governor's ceiling (see
    /// [`HostBudget`]'s turns). Sent only with a budget.
    pub take: Option<usize>,
}

impl Grant {
    /// A copy alone on its path: no ceiling, no budget yet.
    pub const ALONE: Grant = Grant { ceiling: None, copies: 1, budget: None, take: None };

    /// The N a copy at `n` takes at once when this grant came after other
    /// copies left the path: its new share of the budget (the whole budget
    /// alone). The copies that left held the rest of a path the budget
    /// filled, so their sessions' room is there now; climbing to it a
    /// measured step at a time left the copy that stayed at 2 sessions,
    /// 0.4 of the link, for 5 s (share bench, two copies). `None` when no
    /// budget is known or the share is no more than `n`.
    pub fn share_after_leave(&self, n: usize) -> Option<usize> {
        self.ceiling.or(self.budget).filter(|s| *s > n)
    }
}

/// What a copy at `n` sessions reports to the coordinator as its N and
/// whether it settled, from its `tuner`, with `copies` on the path (its
/// last grant). Alone, settled means converged: the N one copy needs.
/// Beside others, the search counts as settled once it is past its climb
/// ([`Tuner::best_known`]): only the leader's settled report sets a budget,
/// and its search beside held copies may never converge. The N it then
/// reports is the lower of that best point and the N it moves to next: a
/// knee search's best is the fewest sessions seen full, an upper bound
/// (32 where 5 fill the share path), and a budget taken too low grows
/// while one taken too high is never cut.
///
/// Unless the interval lost segments with no standing queue
/// (`lossy_room`): random loss, and the path is not full at this N, so the
/// higher of the two. On the share path with 0.01 % loss a leader read 16
/// sessions full in slow start (913 Mbit/s, a queue), its knee search
/// probed 8 from that reading, and the budget set at 8 + 1 held both
/// copies at 4-5 sessions (the leader's search went on down to 3 under
/// its share) for 10-12 s where ~30 fill the path.
///
/// A converged search reports the N it holds, not the interval's `n`: a
/// search can end away from the point it last measured (the loss rate's N
/// above the plateau's fewest sessions, the erosion rule's above a knee
/// probe), and reporting the interval's N set the budget at 17 where the
/// leader held 64 (two copies, 0.01 % loss).
///
/// Under random loss with room, beside other copies, at least the N its
/// best point needs at the loss rate read ([`Tuner::loss_need`]): a leader
/// whose first points had a queue (the copies' slow starts) searched down
/// to 9 before its loss rate was known, and held there by its share of
/// the budget it could not climb to the 41 the rate then said; the
/// budget grew by quarters from 18 to 33 over 15 s (0.01 %, share bench).
pub fn settled_point(tuner: Option<&Tuner>, n: usize, copies: usize, lossy_room: bool) -> (usize, bool) {
    let (point, settled) = match tuner {
        Some(t) if let Some(held) = t.converged() => (held, true),
        Some(t) if copies > 1 => t.best_known().map_or((n, false), |b| {
            let c = t.current();
            (if lossy_room { b.max(c) } else { b.min(c) }, true)
        }),
        _ => (n, false),
    };
    let need = tuner.filter(|_| settled && lossy_room && copies > 1).and_then(Tuner::loss_need);
    (need.map_or(point, |k| point.max(k)), settled)
}

/// How a copy's search starts again after an interval, if it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// From this N, as the governor asked (a ceiling it lifted):
    /// [`Controller::restart_search`](crate::Controller::restart_search).
    Search(usize),
    /// At this N at once, searching only above it (the share of copies
    /// that left): [`Controller::take_over`](crate::Controller::take_over).
    TakeOver(usize),
}

/// The governor's `restart` and a `take_over` after copies left often come
/// in the same interval (the queue the copies that left kept went with
/// them, and the governor lifts its ceiling on that too): the take-over
/// holds when it asks for at least as many sessions (on the share bench a
/// restart from the 2 sessions the copy held displaced a take-over of 8).
pub fn restart_after(restart: Option<usize>, take_over: Option<usize>) -> Option<Restart> {
    match (restart, take_over) {
        (Some(r), Some(t)) if r > t => Some(Restart::Search(r)),
        (_, Some(t)) => Some(Restart::TakeOver(t)),
        (r, None) => r.map(Restart::Search),
    }
}

/// A copy's count of the copies on its path, from the grant it holds after
/// each interval: tells when some of them left, and when the copy was
/// handed a session left over by an even split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopiesSeen {
    seen: usize,
    fewer: bool,
    last: Grant,
    handed: bool,
}

impl Default for CopiesSeen {
    fn default() -> CopiesSeen {
        CopiesSeen { seen: 1, fewer: false, last: Grant::ALONE, handed: false }
    }
}

impl CopiesSeen {
    /// Takes this interval's grant; true once fewer copies than before
    /// share the path in two grants in a row. One is not enough: when the
    /// copy that served the coordinator ends, the others hear nobody (alone)
    /// for a moment, and the first back at the new coordinator is alone
    /// there until the others rejoin; taking the whole budget on that
    /// would send one copy to every session of the path for an interval.
    pub fn left(&mut self, g: Grant) -> bool {
        let last = std::mem::replace(&mut self.last, g);
        // The same copies and a higher ceiling: a session left over by
        // the even split moved to this copy, or the budget was set or grew.
        self.handed = g.copies == last.copies
            && g.budget.is_some()
            && matches!((g.ceiling, last.ceiling), (Some(now), Some(before)) if now > before);
        if g.copies >= self.seen {
            self.seen = g.copies;
            self.fewer = false;
            return false;
        }
        if !self.fewer {
            self.fewer = true;
            return false;
        }
        self.seen = g.copies;
        self.fewer = false;
        true
    }

    /// The N a copy at `n` takes at once when the grant [`left`](Self::left)
    /// last took raised its ceiling with the same copies on the path (the
    /// split's left-over moved here, or the budget was set or grew), and
    /// the ceiling it runs under rose from `applied` to `ceiling` with it,
    /// while it ran within a quarter of the old one. It moves there as it
    /// takes the share of copies that left
    /// ([`Controller::take_over`](crate::Controller::take_over)). A raise
    /// taken as a ceiling only is searched for first, and a search beside
    /// the copy that just gave the session up often ends where it started
    /// (a turn of the left-over every 20 reports did not turn the sessions).
    pub fn take_at_once(&self, n: usize, ceiling: Option<usize>, applied: Option<usize>) -> Option<usize> {
        match (ceiling, applied) {
            (Some(now), Some(before)) if self.handed && now > before && n * 4 >= before * 3 => Some(now),
            _ => None,
        }
    }
}

/// The coordinator's state: the copies of one host and the budget of each
/// path. See the module docs for the rule.
#[derive(Debug, Default)]
pub struct HostBudget {
    next: u64,
    members: BTreeMap<MemberId, Member>,
    budgets: BTreeMap<String, usize>,
    /// Each path's last growth of the budget.
    grown: BTreeMap<String, Growth>,
}

/// A growth of a path's budget: the budget before it and the goodput of
/// its copies together then, bytes per second.
#[derive(Debug, Clone, Copy)]
struct Growth {
    from: usize,
    goodput: u64,
}

impl HostBudget {
    /// No copies yet.
    pub fn new() -> HostBudget {
        HostBudget::default()
    }

    /// Registers a copy on path `key`, with the `budget` it last heard
    /// from a coordinator: taken when this one has none for the path (it
    /// took over from one that ended).
    pub fn join(&mut self, key: &str, budget: Option<usize>) -> MemberId {
        self.next += 1;
        let id = MemberId(self.next);
        self.members.insert(
            id,
            Member {
                key: key.to_string(),
                n: 0,
                goodput: 0,
                room: false,
                left: None,
                extra: false,
                settled: false,
                cap: None,
                take: None,
                take_waits: 0,
                most: None,
            },
        );
        if let Some(b) = budget.filter(|b| *b > 0)
            && !self.budgets.contains_key(key)
        {
            self.budgets.insert(key.to_string(), b);
        }
        self.end_turns(key);
        self.place_left_over(key);
        id
    }

    /// A copy ended (or its connection did); forgets the path's budget
    /// with its last copy.
    pub fn leave(&mut self, id: MemberId) {
        if let Some(m) = self.members.remove(&id) {
            self.end_turns(&m.key);
            if self.members.values().any(|o| o.key == m.key) {
                self.place_left_over(&m.key);
            } else {
                self.budgets.remove(&m.key);
                self.grown.remove(&m.key);
            }
        }
    }

    /// The copies on `key`, in the order they joined.
    fn peers(&self, key: &str) -> Vec<MemberId> {
        self.members.iter().filter(|(_, m)| m.key == key).map(|(id, _)| *id).collect()
    }

    /// Takes a copy's report; returns its grant (unknown ids get none).
    pub fn report(&mut self, id: MemberId, r: CopyReport) -> Grant {
        let CopyReport { n, goodput, settled, room, left } = r;
        let Some(m) = self.members.get_mut(&id) else { return Grant::ALONE };
        m.n = n;
        m.goodput = goodput;
        m.room = room;
        m.left = left;
        m.settled = settled;
        let key = m.key.clone();
        // A take the copy does not carry out (its own limit on sessions is
        // below it) would hold its turn, and the giver's cap, for good.
        if m.most.is_some_and(|most| n > most) {
            m.most = None;
        }
        let stuck = match m.take {
            Some(t) if n < t => {
                m.take_waits += 1;
                m.take_waits > TAKE_REPORTS
            }
            _ => {
                m.take_waits = 0;
                false
            }
        };
        if stuck {
            m.most = Some(n);
            self.end_turns(&key);
        }
        let peers = self.peers(&key);
        // Alone, or the leader of copies started together: its converged N
        // is what one copy needs.
        let sets_budget =
            peers.len() == 1 || (peers.first() == Some(&id) && !self.budgets.contains_key(&key));
        if settled && n > 0 && sets_budget {
            // The leader tuned beside the others' sessions: the path was
            // full with all of them (four copies on the share path: the
            // leader settled at 2 beside three single sessions, and a
            // budget of 2 left the three at one session each, 0.7 of the
            // link, once the leader was done).
            // The others count at the one session they are held at: one
            // that has not reported since it was held still says the N it
            // started with (a budget of 5 + 6 where 5 + 1 filled the path).
            let others: usize = peers
                .iter()
                .filter(|p| **p != id)
                .filter_map(|p| self.members.get(p))
                .map(|m| m.n.min(1))
                .sum();
            let total = n + others;
            // Alone, a copy only raises the budget: the first copy back
            // at a coordinator that took over is alone for a moment, and
            // its tuner converged under the ceiling it had beside the
            // others (one session; the budget of 10 it brought was cut to
            // 1 and the three copies left held one session each).
            let total = match self.budgets.get(&key) {
                Some(&b) if peers.len() == 1 => b.max(total),
                _ => total,
            };
            self.set_budget(&key, total);
        }
        // Every copy near its ceiling with no queue: the path is not full
        // at this budget, so it grows (and waits for fresh reports).
        if peers.len() > 1
            && let Some(&b) = self.budgets.get(&key)
            && peers.iter().all(|p| self.members.get(p).is_some_and(|m| m.room))
        {
            let goodput = peers.iter().filter_map(|p| self.members.get(p)).map(|m| m.goodput).sum();
            let step = match self.grown.get(&key) {
                Some(g) if g.from < b && Self::on_the_ramp(*g, b, goodput) => b,
                _ => (b / 4).max(1),
            };
            self.set_budget(&key, (b + step).min(MAX_BUDGET));
            self.grown.insert(key.clone(), Growth { from: b, goodput });
            for p in &peers {
                if let Some(m) = self.members.get_mut(p) {
                    m.room = false;
                }
            }
        }
        self.place_left_over(&key);
        self.take_turns(&key);
        self.grant(id)
    }

    /// Sets `key`'s budget; a new one ends the turns of its copies (and
    /// the record of its growth: the caller records a growth after).
    fn set_budget(&mut self, key: &str, b: usize) {
        if self.budgets.insert(key.to_string(), b) != Some(b) {
            self.grown.remove(key);
            self.end_turns(key);
        }
    }

    /// Whether growing a budget from `g.from` to `b` raised the copies'
    /// goodput from `g.goodput` to `goodput` by at least half as much in
    /// proportion (the path carried more sessions at about their rate).
    fn on_the_ramp(g: Growth, b: usize, goodput: u64) -> bool {
        let more_n = b as f64 / g.from as f64 - 1.0;
        let more = goodput as f64 / g.goodput.max(1) as f64 - 1.0;
        more >= 0.5 * more_n
    }

    /// Ends the turns on `key`: no caps, no takes (the copies or the
    /// budget changed).
    fn end_turns(&mut self, key: &str) {
        for m in self.members.values_mut().filter(|m| m.key == key) {
            m.cap = None;
            m.take = None;
            m.take_waits = 0;
        }
    }

    /// The copies on `key` with their state, in the order they joined.
    fn copies_on(&self, key: &str) -> Vec<(MemberId, Member)> {
        self.members.iter().filter(|(_, m)| m.key == key).map(|(id, m)| (*id, m.clone())).collect()
    }

    /// Copy `m`'s share of a budget `b` split between `k` copies: an even
    /// part, one more if it holds a left-over session, at least one.
    fn share_of(b: usize, k: usize, m: &Member) -> usize {
        (b / k + usize::from(m.extra)).max(1)
    }

    /// How many more bytes left a copy must have than another before a
    /// session moves to it: [`HANDOVER_S`] of one session's goodput.
    fn handover_margin(copies: &[(MemberId, Member)]) -> u64 {
        let (sessions, goodput) =
            copies.iter().fold((0, 0u64), |(n, g), (_, m)| (n + m.n, g.saturating_add(m.goodput)));
        let per_session = if sessions > 0 { goodput as f64 / sessions as f64 } else { 0.0 };
        ((per_session * HANDOVER_S) as u64).max(HANDOVER_MIN_BYTES)
    }

    /// Moves sessions between the copies on `key` when their own
    /// governors hold them under the budget together and unevenly (see
    /// the module docs): one turn at a time, each done (the giver under
    /// its cap, the taker at its new N) before the next.
    fn take_turns(&mut self, key: &str) {
        for m in self.members.values_mut().filter(|m| m.key == key) {
            if m.take.is_some_and(|t| m.n >= t) {
                m.take = None;
            }
        }
        let copies = self.copies_on(key);
        let k = copies.len();
        let Some(&b) = self.budgets.get(key) else { return };
        let busy = |m: &Member| m.take.is_some() || m.cap.is_some_and(|c| m.n > c);
        if k < 2 || copies.iter().any(|(_, m)| busy(m) || !m.settled || m.n == 0) {
            return;
        }
        let total: usize = copies.iter().map(|(_, m)| m.n).sum();
        if total >= b {
            // At the budget: its left-over moves by the grants.
            return;
        }
        let left = |m: &Member| m.left.unwrap_or(0);
        // The most sessions, the least left among them; the fewest, the
        // most left among them.
        let Some((giver, g)) = copies.iter().max_by_key(|(_, m)| (m.n, std::cmp::Reverse(left(m)))) else {
            return;
        };
        let Some((taker, t)) = copies.iter().min_by_key(|(_, m)| (m.n, std::cmp::Reverse(left(m)))) else {
            return;
        };
        let share = Self::share_of(b, k, t);
        let uneven = g.n >= t.n + 2
            || (g.n == t.n + 1 && left(t) > left(g).saturating_add(Self::handover_margin(&copies)));
        if !uneven || t.n + 1 > share.min(t.most.unwrap_or(usize::MAX)) {
            return;
        }
        // Both at once: a giver that went first left the path a session
        // short for an interval or two, and the taker's governor read the
        // queue that went as the other traffic leaving (its ceiling lifted,
        // its search climbed to 4 beside the giver's 2).
        if let Some(m) = self.members.get_mut(giver) {
            m.cap = Some(g.n - 1);
        }
        if let Some(m) = self.members.get_mut(taker) {
            m.take = Some(t.n + 1);
            m.cap = None;
        }
    }

    /// Gives the sessions an even split of `key`'s budget leaves over to
    /// the copies with the most bytes left (see the module docs).
    fn place_left_over(&mut self, key: &str) {
        let mut copies = self.copies_on(key);
        let k = copies.len();
        let over = match self.budgets.get(key) {
            Some(&b) if k > 1 => b % k,
            _ => 0,
        };
        let holders = copies.iter().filter(|(_, m)| m.extra).count();
        let mut give = |id: MemberId, extra: bool| {
            if let Some(m) = self.members.get_mut(&id) {
                m.extra = extra;
            }
        };
        if holders != over {
            // Placed anew: the most left first, in the order the copies
            // joined among equals (a stable sort; unknown counts as none).
            copies.sort_by_key(|(_, m)| std::cmp::Reverse(m.left.unwrap_or(0)));
            for (i, (id, _)) in copies.iter().enumerate() {
                give(*id, i < over);
            }
            return;
        }
        let margin = Self::handover_margin(&copies);
        // Unknown counts as nothing left, as when placed anew.
        let left = |extra: bool| {
            copies.iter().filter(move |(_, m)| m.extra == extra).map(|(id, m)| (*id, m.left.unwrap_or(0)))
        };
        let least = left(true).min_by_key(|(_, l)| *l);
        let most = left(false).max_by_key(|(_, l)| *l);
        if let (Some((holder, held)), Some((other, more))) = (least, most)
            && more > held.saturating_add(margin)
        {
            give(holder, false);
            give(other, true);
        }
    }

    /// The grant of copy `id` now.
    pub fn grant(&self, id: MemberId) -> Grant {
        let Some(m) = self.members.get(&id) else { return Grant::ALONE };
        let peers = self.peers(&m.key);
        let k = peers.len().max(1);
        let i = peers.iter().position(|p| *p == id).unwrap_or(0);
        let ceiling = if k == 1 {
            None
        } else {
            match self.budgets.get(&m.key) {
                Some(&b) => Some(Self::share_of(b, k, m).min(m.cap.unwrap_or(usize::MAX))),
                None if i == 0 => None,
                None => Some(1),
            }
        };
        let budget = self.budgets.get(&m.key).copied();
        Grant { ceiling, copies: k, budget, take: m.take.filter(|_| budget.is_some()) }
    }

    /// The copies on every path now, with their last N and goodput (for
    /// the log).
    pub fn members(&self) -> impl Iterator<Item = (MemberId, &str, usize, u64)> {
        self.members.iter().map(|(id, m)| (*id, m.key.as_str(), m.n, m.goodput))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_knee_probe_with_room_under_random_loss_reports_the_plateau_point() {
        use crate::{Sample, Signals, TunerConfig};
        let cfg = TunerConfig { discard_after_change: false, resample: None, ..TunerConfig::default() };
        let mut t = Tuner::new(cfg.clone()).unwrap();
        let at = |n: usize, mbit: f64| Sample { n, goodput_bytes_per_s: mbit * 1e6 / 8.0, duration_s: 1.0 };
        let signals =
            |queue: bool| Signals { standing_queue: Some(queue), losses: Some(true), ..Signals::default() };
        // 4 with room, then 16 full in slow start: the knee search probes
        // below 16.
        assert_eq!(t.observe_with(at(4, 496.0), signals(false)).next_n, 16);
        let probe = t.observe_with(at(16, 913.0), signals(true)).next_n;
        assert!(probe < 16, "a knee probe: {probe}");
        assert_eq!(t.best_known(), Some(16));
        assert_eq!(settled_point(Some(&t), probe, 2, false), (probe, true), "the lower of the two");
        assert_eq!(settled_point(Some(&t), probe, 2, true), (16, true), "random loss with room: the higher");
        assert_eq!(settled_point(Some(&t), probe, 1, true), (probe, false), "alone: not converged");
        // The same with the loss rate known: the search holds 64 from 16's
        // reading, and that is what it reports, not the 16 it measured.
        let mut t = Tuner::new(cfg.clone()).unwrap();
        let signals = |queue: bool| Signals { loss_cap: Some(20e6 / 8.0), ..signals(queue) };
        assert_eq!(t.observe_with(at(4, 496.0), signals(false)).next_n, 16);
        assert_eq!(t.observe_with(at(16, 913.0), signals(true)).next_n, 45);
        assert_eq!(settled_point(Some(&t), 16, 2, false), (45, true));
        // A leader whose points had a queue searched down before it knew
        // the loss rate (share bench: 4 full, 8 with room, 32 full at 875,
        // then 9 under its share). Once the rate is read, with room and
        // losses its report says what 875 needs at it; without losses
        // with room, or alone, what it holds.
        let mut t = Tuner::new(cfg).unwrap();
        let plain =
            |queue: bool| Signals { standing_queue: Some(queue), losses: Some(true), ..Signals::default() };
        let mut n = t.observe_with(at(4, 510.0), plain(true)).next_n;
        let trail = [(419.0, false), (875.0, true)];
        for (g, q) in trail {
            n = t.observe_with(at(n, g), plain(q)).next_n;
        }
        assert_eq!(t.loss_need(), None, "no loss rate yet");
        t.set_ceiling(Some(9));
        for _ in 0..10 {
            let step = t.observe_with(at(t.current(), 250.0), signals(false));
            if t.converged().is_some() {
                break;
            }
            assert!(step.next_n <= 9);
        }
        let held = t.converged().expect("held under the ceiling");
        assert!(held <= 9, "{held}");
        // 0.97 x 875 / 20 = 42.4.
        assert_eq!(t.loss_need(), Some(43));
        assert_eq!(settled_point(Some(&t), held, 2, true), (43, true));
        assert_eq!(settled_point(Some(&t), held, 2, false), (held, true));
        assert_eq!(settled_point(Some(&t), held, 1, true), (held, true));
        // Held below the peak with room and losses, the search starts
        // again under the share and forgets its points; the need does not.
        for _ in 0..10 {
            if t.converged().is_none() {
                break;
            }
            t.observe_with(at(t.current(), 150.0), signals(false));
        }
        assert_eq!(t.converged(), None, "the hold searched again");
        assert_eq!(t.loss_need(), Some(43));
    }

    /// A report with nothing said of the bytes left.
    fn rep(n: usize, goodput: u64, settled: bool, room: bool) -> CopyReport {
        CopyReport { n, goodput, settled, room, left: None }
    }

    fn decode_all(bytes: &[u8]) -> Vec<Result<Message, DecodeError>> {
        let mut d = Decoder::new();
        d.feed(bytes);
        std::iter::from_fn(|| d.next()).collect()
    }

    #[test]
    fn messages_round_trip() {
        for m in [
            Message::hello("nbd 10.0.0.2:10809", None),
            Message::hello("h:1", Some(9)),
            Message::Report(rep(9, 123_456_789, true, false)),
            Message::Report(rep(9, 1, false, true)),
            Message::Report(CopyReport { left: Some(0), ..rep(3, 1, true, false) }),
            Message::Report(CopyReport { left: Some(u64::MAX), ..rep(3, 1, false, true) }),
            Message::Grant(Grant { ceiling: Some(4), copies: 2, budget: Some(9), take: None }),
            Message::Grant(Grant { ceiling: None, copies: 1, budget: None, take: None }),
            Message::Grant(Grant { ceiling: Some(2), copies: 2, budget: Some(5), take: Some(3) }),
        ] {
            assert_eq!(decode_all(&m.encode()), vec![Ok(m.clone())], "{m}");
        }
        assert_eq!(
            Message::hello("a b", None),
            Message::Hello { version: 1, key: "a_b".into(), budget: None }
        );
        // Lines of a build before the budget field still read.
        assert_eq!(
            decode_all(b"grant 3 2\nhello 1 h:1\n"),
            vec![
                Ok(Message::Grant(Grant { ceiling: Some(3), copies: 2, budget: None, take: None })),
                Ok(Message::Hello { version: 1, key: "h:1".into(), budget: None })
            ]
        );
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        assert_eq!(decode_all(b"nope 1\n"), vec![Err(DecodeError::Unknown("nope".into()))]);
        assert_eq!(decode_all(b"report 1 2\n"), vec![Err(DecodeError::Malformed("report"))]);
        assert_eq!(decode_all(b"report 1 2 7\n"), vec![Err(DecodeError::Malformed("report"))]);
        assert_eq!(decode_all(b"report 1 2 1 2\n"), vec![Err(DecodeError::Malformed("report"))]);
        assert_eq!(decode_all(b"report 1 2 1 1 x\n"), vec![Err(DecodeError::Malformed("report"))]);
        assert_eq!(decode_all(b"report 1 2 1 1 -1\n"), vec![Err(DecodeError::Malformed("report"))]);
        assert_eq!(decode_all(b"report 1 2 1 1 1 1\n"), vec![Err(DecodeError::Malformed("report"))]);
        assert_eq!(
            decode_all(b"report 1 2 1 1 7\n"),
            vec![Ok(Message::Report(CopyReport { left: Some(7), ..rep(1, 2, true, true) }))]
        );
        assert_eq!(decode_all(b"report 1 2 1 0\n"), vec![Ok(Message::Report(rep(1, 2, true, false)))]);
        assert_eq!(decode_all(b"grant -1 2\n"), vec![Err(DecodeError::Malformed("grant"))]);
        assert_eq!(decode_all(b"grant 1 2 x\n"), vec![Err(DecodeError::Malformed("grant"))]);
        assert_eq!(decode_all(b"grant 1 2 3 4 5\n"), vec![Err(DecodeError::Malformed("grant"))]);
        assert_eq!(decode_all(b"grant 1 2 3 x\n"), vec![Err(DecodeError::Malformed("grant"))]);
        assert_eq!(decode_all(b"hello 1 k -\n"), vec![Err(DecodeError::Malformed("hello"))]);
        assert_eq!(
            decode_all(b"report 99999999999999999999999 2 1\n"),
            vec![Err(DecodeError::Malformed("report"))]
        );
        assert_eq!(decode_all(&[b'x'; MAX_LINE]), vec![Err(DecodeError::Overlong)]);
        assert_eq!(decode_all(b"hello 1 \xff\n"), vec![Err(DecodeError::NotText)]);
        assert_eq!(decode_all(b"report 1 2"), vec![], "incomplete: wait for more");
    }

    #[test]
    fn the_session_left_over_goes_to_the_copy_with_the_most_left() {
        const MB: u64 = 1 << 20;
        let mut h = HostBudget::new();
        let a = h.join("p", Some(5));
        let b = h.join("p", Some(5));
        let at = |n, left| CopyReport { left: Some(left * MB), ..rep(n, 50 * MB, true, false) };
        // Placed by bytes left; the order of joining among equals.
        assert_eq!(h.report(b, at(2, 1000)).ceiling, Some(3));
        assert_eq!(h.report(a, at(2, 1000)).ceiling, Some(2));
        // Within the margin (3 s of one session's 20 MB/s), it stays.
        assert_eq!(h.report(b, at(3, 950)).ceiling, Some(3));
        assert_eq!(h.grant(a).ceiling, Some(2));
        // Past it, it moves, and the grant says so to both.
        assert_eq!(h.report(b, at(3, 930)).ceiling, Some(2));
        assert_eq!(h.grant(a).ceiling, Some(3));
        // A copy that does not say what it has left counts as having
        // nothing left, and an even budget leaves nothing over.
        let mut g = HostBudget::new();
        let (c, d) = (g.join("q", Some(4)), g.join("q", Some(4)));
        assert_eq!(g.report(c, at(2, 10)).ceiling, Some(2));
        assert_eq!(g.report(d, rep(2, 50 * MB, true, false)).ceiling, Some(2));
        let e = g.join("q", None);
        assert_eq!(g.report(e, rep(1, 0, false, false)).ceiling, Some(1));
        assert_eq!(g.grant(c).ceiling, Some(2), "4 over 3 copies: the one with bytes left holds the extra");
        assert_eq!(g.grant(d).ceiling, Some(1));
        g.leave(c);
        assert_eq!(g.report(d, rep(2, 50 * MB, true, false)).ceiling, Some(2));
        assert_eq!(g.grant(e).ceiling, Some(2));
    }

    #[test]
    fn copies_held_unevenly_under_the_budget_take_turns() {
        const MB: u64 = 1 << 20;
        let mut h = HostBudget::new();
        let (a, b) = (h.join("p", Some(8)), h.join("p", Some(8)));
        let at = |n, left| CopyReport { left: Some(left * MB), ..rep(n, 50 * MB, true, false) };
        // 3 + 2 under a budget of 8: the governors hold them. Within the
        // margin (3 s of one session's 20 MB/s) nothing moves.
        assert_eq!(
            h.report(a, at(3, 1000)),
            Grant { ceiling: Some(4), copies: 2, budget: Some(8), take: None }
        );
        assert_eq!(h.report(b, at(2, 1000)).take, None);
        // Past it: the copy with more sessions and less left gives one up,
        // and the other takes it, at once.
        assert_eq!(h.report(a, at(3, 900)).ceiling, Some(2));
        assert_eq!(h.grant(b), Grant { ceiling: Some(4), copies: 2, budget: Some(8), take: Some(3) });
        // No other turn until both did.
        assert_eq!(
            h.report(b, at(3, 990)),
            Grant { ceiling: Some(4), copies: 2, budget: Some(8), take: None }
        );
        assert_eq!(h.report(a, at(2, 890)).ceiling, Some(2), "the giver stays capped");
        // Two sessions apart: a turn whatever is left; the capped copy
        // takes, and its cap goes.
        assert_eq!(h.report(b, at(4, 970)).ceiling, Some(3));
        assert_eq!(h.grant(a), Grant { ceiling: Some(4), copies: 2, budget: Some(8), take: Some(3) });
        // Searching copies, or the budget full: no turns.
        let mut g = HostBudget::new();
        let (c, d) = (g.join("q", Some(5)), g.join("q", Some(5)));
        g.report(c, at(3, 10));
        assert_eq!(g.report(d, CopyReport { settled: false, ..at(1, 1000) }).take, None);
        assert_eq!(g.report(c, at(3, 10)).ceiling, Some(2), "the left-over went to the copy with more left");
        assert_eq!(g.report(d, at(2, 1000)).take, None, "at the budget the left-over moves instead");
        assert_eq!(g.grant(d).ceiling, Some(3));
        // A copy that leaves ends the turns: caps go.
        let mut e = HostBudget::new();
        let ids: Vec<_> = (0..3).map(|_| e.join("r", Some(9))).collect();
        e.report(ids[0], at(3, 10));
        e.report(ids[1], at(1, 10));
        assert_eq!(e.report(ids[2], at(1, 10)).ceiling, Some(3));
        assert_eq!(e.grant(ids[0]).ceiling, Some(2));
        e.leave(ids[2]);
        assert_eq!(e.grant(ids[0]).ceiling, Some(5));
        // A take the copy does not carry out ends the turns after a few
        // reports: the giver's cap goes with it.
        let mut f = HostBudget::new();
        let (x, y) = (f.join("s", Some(8)), f.join("s", Some(8)));
        f.report(x, at(1, 10));
        assert_eq!(f.report(y, at(3, 10)).ceiling, Some(2));
        for _ in 0..TAKE_REPORTS {
            assert_eq!(f.report(x, at(1, 10)).take, Some(2));
        }
        assert_eq!(f.report(x, at(1, 10)).take, None, "and no turn gives it more again");
        assert_eq!(f.grant(y).ceiling, Some(4));
        assert_eq!(f.report(y, at(3, 10)).ceiling, Some(4));
    }

    #[test]
    fn alone_a_copy_tunes_and_sets_the_budget() {
        let mut h = HostBudget::new();
        let a = h.join("p", None);
        assert_eq!(
            h.report(a, rep(4, 0, false, false)),
            Grant { ceiling: None, copies: 1, budget: None, take: None }
        );
        assert_eq!(
            h.report(a, rep(9, 0, true, false)),
            Grant { ceiling: None, copies: 1, budget: Some(9), take: None }
        );
        let b = h.join("p", None);
        assert_eq!(h.grant(a), Grant { ceiling: Some(5), copies: 2, budget: Some(9), take: None });
        assert_eq!(
            h.report(b, rep(4, 0, false, false)),
            Grant { ceiling: Some(4), copies: 2, budget: Some(9), take: None }
        );
        // Held at their ceilings the copies do not move the budget.
        assert_eq!(
            h.report(a, rep(5, 0, true, false)),
            Grant { ceiling: Some(5), copies: 2, budget: Some(9), take: None }
        );
        assert_eq!(
            h.report(b, rep(4, 0, true, false)),
            Grant { ceiling: Some(4), copies: 2, budget: Some(9), take: None }
        );
        let other = h.join("q", None);
        assert_eq!(
            h.grant(other),
            Grant { ceiling: None, copies: 1, budget: None, take: None },
            "another path is not shared"
        );
        h.leave(a);
        assert_eq!(
            h.grant(b),
            Grant { ceiling: None, copies: 1, budget: Some(9), take: None },
            "alone again: tunes again"
        );
        h.leave(b);
        let c = h.join("p", None);
        let d = h.join("p", None);
        assert_eq!(
            (h.grant(c).ceiling, h.grant(d).ceiling),
            (None, Some(1)),
            "budget forgotten with the last copy"
        );
    }

    #[test]
    fn a_coordinator_that_takes_over_starts_from_the_budget_the_copies_heard() {
        // The copy that served the coordinator ended; the three others
        // reconnect to the next one with the budget of 10 they last heard.
        let mut h = HostBudget::new();
        let ids: Vec<MemberId> = (0..3).map(|_| h.join("p", Some(10))).collect();
        let ceilings: Vec<Option<usize>> = ids.iter().map(|id| h.grant(*id).ceiling).collect();
        assert_eq!(ceilings, vec![Some(4), Some(3), Some(3)], "split at once, no new leader");
        assert_eq!(h.grant(ids[0]).budget, Some(10));
        // The coordinator's own budget stands against a copy's memory.
        let late = h.join("p", Some(40));
        assert_eq!(h.grant(late).budget, Some(10));
        // The first copy back is alone for a moment, converged at the one
        // session it was held to: the budget it brought stands.
        let mut h = HostBudget::new();
        let first = h.join("p", Some(10));
        assert_eq!(
            h.report(first, rep(1, 0, true, false)),
            Grant { ceiling: None, copies: 1, budget: Some(10), take: None }
        );
        let others: Vec<MemberId> = (0..2).map(|_| h.join("p", Some(10))).collect();
        let ceilings: Vec<Option<usize>> =
            std::iter::once(first).chain(others).map(|id| h.grant(id).ceiling).collect();
        assert_eq!(ceilings, vec![Some(4), Some(3), Some(3)]);
        // Without one (a build before the field, or a first start): a
        // leader tunes, as before.
        let mut h = HostBudget::new();
        let ids: Vec<MemberId> = (0..2).map(|_| h.join("p", None)).collect();
        assert_eq!((h.grant(ids[0]).ceiling, h.grant(ids[1]).ceiling), (None, Some(1)));
    }

    #[test]
    fn copies_started_together_follow_the_leader() {
        let mut h = HostBudget::new();
        let ids: Vec<MemberId> = (0..4).map(|_| h.join("p", None)).collect();
        assert_eq!(h.report(ids[0], rep(4, 0, false, false)).ceiling, None);
        for &id in &ids[1..] {
            assert_eq!(h.report(id, rep(4, 0, false, false)).ceiling, Some(1));
        }
        // Held at one session each while the leader tunes beside them.
        for &id in &ids[1..] {
            assert_eq!(h.report(id, rep(1, 0, false, false)).ceiling, Some(1));
        }
        // The leader settles at 7 with the three others' sessions on the
        // path too: the budget is the 10 sessions that filled it.
        assert_eq!(h.report(ids[0], rep(7, 0, true, false)).ceiling, Some(3));
        let ceilings: Vec<usize> = ids.iter().map(|id| h.grant(*id).ceiling.unwrap()).collect();
        assert_eq!(ceilings, vec![3, 3, 2, 2]);
        // A follower's settled N never sets the budget.
        h.report(ids[3], rep(2, 0, true, false));
        assert_eq!(h.grant(ids[0]).ceiling, Some(3));
        // The leader is done first: the others share the whole budget.
        h.leave(ids[0]);
        let ceilings: Vec<usize> = ids[1..].iter().map(|id| h.grant(*id).ceiling.unwrap()).collect();
        assert_eq!(ceilings, vec![4, 3, 3]);
        // The copies that stay take their new share at once (a copy held
        // below its share by its own governor too), never less than they run.
        assert_eq!(h.grant(ids[1]).share_after_leave(2), Some(4));
        assert_eq!(h.grant(ids[1]).share_after_leave(4), None);
        for id in &ids[1..3] {
            h.leave(*id);
        }
        // The last one alone takes the whole budget.
        assert_eq!(h.grant(ids[3]).share_after_leave(3), Some(10));
        // Without a budget (the leader left while tuning) nothing is known.
        let mut h = HostBudget::new();
        let (lead, other) = (h.join("p", None), h.join("p", None));
        h.leave(lead);
        assert_eq!(h.grant(other).share_after_leave(1), None);
        // A follower not yet back since it was held counts at one session.
        let mut g = HostBudget::new();
        let (lead, late) = (g.join("p", None), g.join("p", None));
        g.report(late, rep(6, 0, false, false));
        assert_eq!(g.report(lead, rep(5, 0, true, false)).budget, Some(6));
    }

    #[test]
    fn a_budget_grows_when_every_copy_has_room_at_its_ceiling() {
        // The leader settled at 8 beside one held session: a budget of 9,
        // split 5 + 4, where the path (random loss) holds far more.
        let mut h = HostBudget::new();
        let (a, b) = (h.join("p", None), h.join("p", None));
        h.report(b, rep(1, 0, false, false));
        assert_eq!(h.report(a, rep(8, 0, true, false)).ceiling, Some(5));
        assert_eq!(h.grant(b).ceiling, Some(4));
        // One copy with room is not enough: the other may be full.
        assert_eq!(h.report(a, rep(5, 0, true, true)).ceiling, Some(5));
        assert_eq!(h.report(b, rep(4, 0, true, false)).budget, Some(9));
        // Both: a quarter more.
        assert_eq!(
            h.report(b, rep(4, 0, true, true)),
            Grant { ceiling: Some(5), copies: 2, budget: Some(11), take: None }
        );
        assert_eq!(h.grant(a).ceiling, Some(6));
        // The flags went with the raise: the next step waits for both again.
        assert_eq!(h.report(a, rep(6, 0, true, true)).budget, Some(11));
        assert_eq!(h.report(b, rep(5, 0, true, true)).budget, Some(13));
        // A small budget grows by one session at least.
        let mut h = HostBudget::new();
        let first = h.join("p", Some(2));
        let second = h.join("p", Some(2));
        h.report(first, rep(1, 0, true, true));
        assert_eq!(h.report(second, rep(1, 0, true, true)).budget, Some(3));
        // Alone, room is nobody's ceiling: the copy tunes.
        h.leave(second);
        assert_eq!(
            h.report(first, rep(3, 0, true, true)),
            Grant { ceiling: None, copies: 1, budget: Some(3), take: None }
        );
    }

    #[test]
    fn a_budget_doubles_after_a_growth_that_gained_in_proportion() {
        // Budget 8, split 4 + 4, both with room at 100 each: a quarter.
        let mut h = HostBudget::new();
        let (a, b) = (h.join("p", Some(8)), h.join("p", Some(8)));
        h.report(a, rep(4, 100, true, true));
        assert_eq!(h.report(b, rep(4, 100, true, true)).budget, Some(10));
        // The 10 moved 230 together (+15 % for +25 %: more than half in
        // proportion): the copies are on the ramp, the budget doubles.
        h.report(a, rep(5, 115, true, true));
        assert_eq!(h.report(b, rep(5, 115, true, true)).budget, Some(20));
        // The 20 moved 250 (+9 % for +100 %): a quarter again.
        h.report(a, rep(10, 125, true, true));
        assert_eq!(h.report(b, rep(10, 125, true, true)).budget, Some(25));
        // A budget set anew (the copies left and one came back) forgets
        // the growths before it: a quarter first.
        h.leave(a);
        h.leave(b);
        let (c, d) = (h.join("p", Some(8)), h.join("p", Some(8)));
        h.report(c, rep(4, 100, true, true));
        assert_eq!(h.report(d, rep(4, 100, true, true)).budget, Some(10));
    }

    #[test]
    fn a_take_over_holds_over_a_restart_from_fewer_sessions() {
        assert_eq!(restart_after(Some(2), Some(8)), Some(Restart::TakeOver(8)));
        assert_eq!(restart_after(None, Some(8)), Some(Restart::TakeOver(8)));
        assert_eq!(restart_after(Some(12), Some(8)), Some(Restart::Search(12)));
        assert_eq!(restart_after(Some(3), None), Some(Restart::Search(3)));
        assert_eq!(restart_after(None, None), None);
    }

    #[test]
    fn a_copy_counts_copies_left_on_the_second_grant_that_says_so() {
        let g = |copies| Grant { ceiling: None, copies, budget: Some(8), take: None };
        let mut seen = CopiesSeen::default();
        assert!(!seen.left(g(4)));
        // The coordinator went: alone for a moment, then three again.
        assert!(!seen.left(g(1)));
        assert!(seen.left(g(3)), "three of four are left");
        assert!(!seen.left(g(3)));
        // One more left for good.
        assert!(!seen.left(g(2)));
        assert!(seen.left(g(2)));
        // More copies never count as left.
        assert!(!seen.left(g(4)));
        assert!(!seen.left(g(4)));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..700), 0..8)) {
            let mut d = Decoder::new();
            for c in &chunks {
                d.feed(c);
                while let Some(r) = d.next() {
                    if let Ok(m) = r {
                        // Whatever decodes encodes back to the same message.
                        prop_assert_eq!(decode_all(&m.encode()), vec![Ok(m.clone())]);
                    }
                }
                prop_assert!(d.buf.len() < MAX_LINE);
            }
        }

        #[test]
        fn reports_round_trip(n in 0usize..(1 << 20), goodput: u64, settled: bool, room: bool, left: Option<u64>, t in proptest::option::of(0usize..1000), c in proptest::option::of(0usize..1000), k in 0usize..1000, b in proptest::option::of(0usize..1000)) {
            for m in [Message::Report(CopyReport { n, goodput, settled, room, left }), Message::Grant(Grant { ceiling: c, copies: k, budget: b, take: b.and(t) }), Message::hello("h:1", b)] {
                prop_assert_eq!(decode_all(&m.encode()), vec![Ok(m.clone())]);
            }
        }

        #[test]
        fn the_split_stays_near_one_budget(budget in 1usize..64, k in 2usize..9) {
            let mut h = HostBudget::new();
            let first = h.join("p", None);
            h.report(first, rep(budget, 0, true, false));
            let ids: Vec<MemberId> = std::iter::once(first).chain((1..k).map(|_| h.join("p", None))).collect();
            let total: usize = ids.iter().map(|id| h.grant(*id).ceiling.unwrap()).sum();
            prop_assert_eq!(total, budget.max(k));
        }
    }
}
