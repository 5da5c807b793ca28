//! One connection in the full feature phase (RFC 7143 section 4.2): SCSI
//! commands matched by initiator task tag, Data-In reassembly with DataSN
//! and buffer-offset checks, R2T -> Data-Out sequences, immediate and
//! unsolicited data, NOP-In/NOP-Out, Reject, Async Message, task
//! management (ABORT TASK, sections 11.5 and 11.6) and logout.
//!
//! A hostile target cannot make this side queue more than a write's own
//! data: MaxOutstandingR2T is enforced (an R2T stays outstanding until its
//! last Data-Out is handed out by [`Connection::poll_transmit`]), an R2T
//! asking again for bytes already sent or requested is a protocol error
//! (ErrorRecoveryLevel is 0), and a write gets at most [`max_r2ts`] R2Ts.
//!
//! Sans-I/O: [`Connection::start_command`] and friends queue PDUs that
//! [`Connection::poll_transmit`] hands out; [`Connection::handle_input`]
//! consumes received bytes and queues [`Event`]s for
//! [`Connection::poll_event`]. The session-wide command window
//! ([`CmdWindow`]) is passed in, so several connections of one MC/S
//! session can share it.

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::{Bytes, BytesMut};

use crate::error::{CommandError, ConnError};
use crate::keys::Params;
use crate::pdu::{
    BHS_LEN, Codec, DataIn, DataOut, Header, LogoutRequest, NopIn, NopOut, OutPdu, Pdu, R2t, RESERVED_TAG,
    Reject, ScsiCommand, ScsiResponse, TaskMgmtRequest, TaskMgmtResponse, logout_reason, reject_reason_text,
    tmf,
};
use crate::scsi::{Cdb, Sense, status};
use crate::serial;

/// Encodes LUN `n` (SAM-5 section 4.7): peripheral addressing below 256,
/// flat space addressing up to 16383.
pub fn encode_lun(n: u16) -> u64 {
    let b: [u8; 2] = if n < 256 { [0, n as u8] } else { [0x40 | ((n >> 8) as u8 & 0x3f), n as u8] };
    u64::from(u16::from_be_bytes(b)) << 48
}

/// The session-wide command window: CmdSN, ExpCmdSN, MaxCmdSN (RFC 7143
/// section 4.2.2.1). In an MC/S session all connections share one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmdWindow {
    next: u32,
    exp: u32,
    max: u32,
}

impl CmdWindow {
    /// A window after login: the next CmdSN to use and the target's
    /// ExpCmdSN and MaxCmdSN from the final Login Response.
    pub fn new(cmd_sn: u32, exp_cmd_sn: u32, max_cmd_sn: u32) -> CmdWindow {
        let mut w = CmdWindow { next: cmd_sn, exp: exp_cmd_sn, max: exp_cmd_sn.wrapping_sub(1) };
        w.update(exp_cmd_sn, max_cmd_sn);
        w
    }

    /// A non-immediate command may be sent now (CmdSN <= MaxCmdSN).
    pub fn is_open(&self) -> bool {
        serial::le(self.next, self.max)
    }

    /// Takes the next CmdSN if the window is open.
    pub fn take(&mut self) -> Option<u32> {
        if !self.is_open() {
            return None;
        }
        let sn = self.next;
        self.next = self.next.wrapping_add(1);
        Some(sn)
    }

    /// The CmdSN an immediate PDU carries (not advanced).
    pub fn current(&self) -> u32 {
        self.next
    }

    /// ExpCmdSN and MaxCmdSN.
    pub fn bounds(&self) -> (u32, u32) {
        (self.exp, self.max)
    }

    /// Applies ExpCmdSN/MaxCmdSN from a target PDU. Returns whether the
    /// window opened further. Values that go backwards are ignored, and so
    /// is a MaxCmdSN below ExpCmdSN - 1 (RFC 7143 section 4.2.2.1).
    pub fn update(&mut self, exp: u32, max: u32) -> bool {
        if serial::lt(max, exp.wrapping_sub(1)) {
            return false;
        }
        if serial::gt(exp, self.exp) {
            self.exp = exp;
        }
        if serial::gt(max, self.max) {
            self.max = max;
            return true;
        }
        false
    }
}

/// Data direction and payload of a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataDir {
    /// No data.
    None,
    /// Read up to this many bytes.
    Read(u32),
    /// Write these bytes.
    Write(Bytes),
}

/// One SCSI command to issue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The CDB.
    pub cdb: Cdb,
    /// Data direction.
    pub dir: DataDir,
}

/// A command that completed with GOOD status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Data read (possibly less than asked for, see `residual`).
    pub data: Bytes,
    /// Residual underflow count reported by the target.
    pub residual: u32,
}

/// What the connection reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A command finished.
    Completed {
        /// Its initiator task tag.
        itt: u32,
        /// Its outcome.
        result: Result<Outcome, CommandError>,
    },
    /// A NOP-Out ping was answered.
    Pong {
        /// The ping's task tag.
        itt: u32,
    },
    /// The logout finished; the transport may be closed.
    LoggedOut {
        /// Logout response code (0: success).
        response: u8,
    },
    /// The target asks for a logout (Async Message event 1).
    LogoutRequested,
    /// The target rejected a PDU that belongs to no command.
    Rejected {
        /// Reason text.
        reason: &'static str,
    },
    /// A task management request was answered (RFC 7143 section 11.6).
    TaskManagement {
        /// The request's task tag.
        itt: u32,
        /// The referenced task's tag.
        task: u32,
        /// The response code (0: function complete, 1: task does not exist).
        response: u8,
    },
}

#[derive(Debug)]
struct Task {
    expected_len: u32,
    /// Its CmdSN (the RefCmdSN of an ABORT TASK for it).
    cmd_sn: u32,
    kind: TaskKind,
}

#[derive(Debug)]
enum TaskKind {
    /// Read or no-data command: Data-In comes in order.
    Read { segments: Vec<Bytes>, received: u32, next_data_sn: u32 },
    /// Write command: R2Ts ask for the rest after the unsolicited burst.
    Write(WriteTask),
}

/// A write's data and what the target asked for so far (RFC 7143 sections
/// 11.8, 13.17). Every byte is sent at most once: at ErrorRecoveryLevel 0
/// an R2T may not ask again for data already sent or requested, so the
/// Data-Out a target can make this side queue is bounded by the write.
#[derive(Debug)]
struct WriteTask {
    data: Bytes,
    next_r2t_sn: u32,
    /// R2Ts whose last Data-Out has not been handed out by `poll_transmit`.
    outstanding_r2t: u32,
    /// R2Ts received.
    r2ts: u32,
    /// Byte ranges sent unsolicited or requested by an R2T, adjacent ones
    /// merged (start -> end).
    requested: BTreeMap<u32, u32>,
}

impl WriteTask {
    /// Records `[from, to)` as requested; `Err` with the overlapping range
    /// if any of it was sent or requested before.
    fn request(&mut self, from: u32, to: u32) -> Result<(), (u32, u32)> {
        let prev = self.requested.range(..=from).next_back().map(|(&s, &e)| (s, e));
        let next = self.requested.range(from..).next().map(|(&s, &e)| (s, e));
        if let Some((s, e)) = prev
            && e > from
        {
            return Err((s, e));
        }
        if let Some((s, e)) = next
            && s < to
        {
            return Err((s, e));
        }
        let mut merged = (from, to);
        if let Some((s, e)) = prev
            && e == from
        {
            self.requested.remove(&s);
            merged.0 = s;
        }
        if let Some((s, e)) = next
            && s == to
        {
            self.requested.remove(&s);
            merged.1 = e;
        }
        self.requested.insert(merged.0, merged.1);
        Ok(())
    }
}

/// The most R2Ts one write of `len` bytes may get: [`R2T_ALLOWANCE`] plus
/// one per 512 bytes (the smallest MaxBurstLength RFC 7143 allows), so the
/// bookkeeping of a write stays proportional to it.
pub fn max_r2ts(len: u32) -> u32 {
    R2T_ALLOWANCE + len / 512
}

/// R2Ts every write may get on top of one per 512 bytes.
pub const R2T_ALLOWANCE: u32 = 16;

/// What a queued Data-Out PDU belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TxTag {
    /// The write task of a Data-Out PDU (dropped if the task ends first).
    task: u32,
    /// The last Data-Out answering an R2T: handing it out ends that R2T.
    ends_r2t: bool,
}

/// Phases of the connection after login (RFC 7143 section 8.1.3).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    /// Full feature phase.
    FullFeature,
    /// Logout Request sent (section 11.14): no new commands.
    LoggingOut { itt: u32 },
    /// Logout Response received.
    LoggedOut,
    /// A fatal error ended the connection.
    Failed(ConnError),
}

/// The largest data segment this side emits, whatever the target declared
/// (a write is never bigger than one command's data anyway).
const MAX_OUT_SEGMENT: u32 = 16 << 20;

/// With [`Connection::with_short_segments`], the largest Data-Out segment:
/// a SCSI Command queued on the connection overtakes queued Data-Out (see
/// [`Connection::poll_transmit`]), so it waits behind at most one segment
/// being written, not behind a whole write.
const SHORT_SEGMENT: u32 = 256 << 10;

/// With [`Connection::with_short_segments`], the most immediate data a SCSI
/// Command carries: each command a connection sends holds back the rest of
/// its queue by this much at most; the rest of the first burst follows as
/// unsolicited Data-Out.
const SHORT_IMMEDIATE: usize = 64 << 10;

/// The task tag of the login of connection `cid`: the last tag of the
/// CID's range (see [`Connection::with_cid`]), which no other connection of
/// the session uses; the connection's own commands start at the range's
/// first tag once the login is over. `cid` 0xFFFF would give the reserved
/// tag, so CIDs stay below it.
#[must_use]
pub fn login_tag(cid: u16) -> u32 {
    tag_range(cid) | 0xFFFF
}

/// The first tag of connection `cid`'s range: the CID in the high 16 bits.
fn tag_range(cid: u16) -> u32 {
    u32::from(cid) << 16
}

/// One full-feature connection.
#[derive(Debug)]
pub struct Connection {
    codec: Codec,
    params: Params,
    lun: u64,
    exp_stat_sn: u32,
    /// The connection's part of the session's task tags (its CID in the
    /// high 16 bits, see [`Connection::with_cid`]).
    itt_base: u32,
    next_itt: u16,
    /// Short segments and little immediate data (see
    /// [`Connection::with_short_segments`]).
    short: bool,
    tasks: HashMap<u32, Task>,
    pings: HashMap<u32, ()>,
    /// Task management requests in flight: their tag -> the referenced task.
    tmfs: HashMap<u32, u32>,
    /// Queued PDUs other than Data-Out (commands, pings, task management,
    /// logout), sent first.
    tx: VecDeque<OutPdu>,
    /// Queued Data-Out PDUs, tagged with their task, so they can be
    /// dropped if the task ends first (a target may answer a write early).
    data_out: VecDeque<(TxTag, OutPdu)>,
    /// Wire bytes of the PDUs in `tx` and `data_out` ([`Connection::queued_bytes`]).
    queued: u64,
    events: VecDeque<Event>,
    phase: Phase,
}

impl Connection {
    /// A connection after a successful login with `params`, talking to
    /// `lun` (encoded, see [`encode_lun`]).
    pub fn new(params: Params, lun: u64, exp_stat_sn: u32) -> Connection {
        Connection {
            codec: Codec {
                header_digest: params.header_digest,
                data_digest: params.data_digest,
                max_recv_data: params.max_recv_data_segment,
            },
            params,
            lun,
            exp_stat_sn,
            itt_base: 0,
            next_itt: 1,
            short: false,
            tasks: HashMap::new(),
            pings: HashMap::new(),
            tmfs: HashMap::new(),
            tx: VecDeque::new(),
            data_out: VecDeque::new(),
            queued: 0,
            events: VecDeque::new(),
            phase: Phase::FullFeature,
        }
    }

    /// Tags this connection's tasks as connection `cid` of its session:
    /// an initiator task tag must name one task across the whole session
    /// (RFC 7143 section 11.2.1.8), and a target looks Data-Out up by it
    /// session-wide, so each connection of an MC/S session takes its tags
    /// from its own range (the CID in the high 16 bits).
    /// A connection's login takes [`login_tag`] (the last tag of the
    /// range), so it overlaps no other connection's tasks either.
    #[must_use]
    pub fn with_cid(mut self, cid: u16) -> Connection {
        self.itt_base = tag_range(cid);
        self
    }

    /// Writes go out as a command with at most [`SHORT_IMMEDIATE`] bytes of
    /// immediate data and Data-Out segments of at most [`SHORT_SEGMENT`], so
    /// a command queued behind them is sent soon (commands overtake queued
    /// Data-Out). For the connections of an MC/S session, where a command
    /// sent late holds back the session's later commands on every
    /// connection; otherwise a write is as few PDUs as the target allows,
    /// which costs the target less.
    #[must_use]
    pub fn with_short_segments(mut self) -> Connection {
        self.short = true;
        self
    }

    /// The negotiated values in force.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// New commands may be started (full feature phase, not logging out).
    pub fn is_usable(&self) -> bool {
        self.phase == Phase::FullFeature
    }

    /// Commands in flight.
    pub fn in_flight(&self) -> usize {
        self.tasks.len()
    }

    /// The error that ended the connection, if one did.
    pub fn error(&self) -> Option<&ConnError> {
        match &self.phase {
            Phase::Failed(e) => Some(e),
            Phase::LoggedOut => Some(&ConnError::LoggedOut),
            _ => None,
        }
    }

    fn alloc_itt(&mut self) -> u32 {
        loop {
            let itt = self.itt_base | u32::from(self.next_itt);
            self.next_itt = self.next_itt.wrapping_add(1);
            if itt != RESERVED_TAG
                && !self.tasks.contains_key(&itt)
                && !self.pings.contains_key(&itt)
                && !self.tmfs.contains_key(&itt)
            {
                return itt;
            }
        }
    }

    fn check_usable(&self) -> Result<(), ConnError> {
        match &self.phase {
            Phase::FullFeature => Ok(()),
            Phase::LoggingOut { .. } | Phase::LoggedOut => Err(ConnError::LoggedOut),
            Phase::Failed(e) => Err(e.clone()),
        }
    }

    fn max_out_segment(&self) -> usize {
        let most = if self.short { SHORT_SEGMENT } else { MAX_OUT_SEGMENT };
        self.params.max_send_data_segment.clamp(512, most) as usize
    }

    /// Queues `cmd` with CmdSN `cmd_sn` (taken from the session's
    /// [`CmdWindow`]) and returns its initiator task tag. Immediate data and
    /// unsolicited Data-Out are queued as negotiated (RFC 7143 sections 4.2.5,
    /// 13.10, 13.11, 13.14).
    ///
    /// # Errors
    /// The connection is failed or logging out; or a write over 4 GiB.
    pub fn start_command(&mut self, cmd: Command, cmd_sn: u32) -> Result<u32, ConnError> {
        self.check_usable()?;
        let itt = self.alloc_itt();
        let (read, write, expected_len) = match &cmd.dir {
            DataDir::None => (false, false, 0),
            DataDir::Read(n) => (true, false, *n),
            DataDir::Write(d) => (
                false,
                true,
                u32::try_from(d.len()).map_err(|_| ConnError::Closed("write over 4 GiB".into()))?,
            ),
        };
        let seg = self.max_out_segment();
        let (immediate, unsolicited) = match &cmd.dir {
            DataDir::Write(d) => {
                let first = (self.params.first_burst as usize).min(d.len());
                let most = if self.short { SHORT_IMMEDIATE } else { usize::MAX };
                let imm = if self.params.immediate_data { first.min(seg).min(most) } else { 0 };
                let unsol = if self.params.initial_r2t { imm } else { first };
                (imm, unsol)
            }
            _ => (0, 0),
        };
        let header = Header::ScsiCommand(ScsiCommand {
            immediate: false,
            final_: unsolicited == immediate,
            read,
            write,
            attr: 1, // SIMPLE
            lun: self.lun,
            itt,
            expected_len,
            cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            cdb: cmd.cdb,
        });
        let (kind, imm_data) = match cmd.dir {
            DataDir::Write(data) => {
                let imm = data.slice(..immediate);
                let mut w = WriteTask {
                    data,
                    next_r2t_sn: 0,
                    outstanding_r2t: 0,
                    r2ts: 0,
                    requested: BTreeMap::new(),
                };
                if unsolicited > 0 {
                    w.request(0, unsolicited as u32).expect("nothing requested yet");
                }
                (TaskKind::Write(w), imm)
            }
            _ => (TaskKind::Read { segments: Vec::new(), received: 0, next_data_sn: 0 }, Bytes::new()),
        };
        self.push_tx(self.codec.encode(&header, imm_data));
        if let TaskKind::Write(w) = &kind
            && unsolicited > immediate
        {
            let data = w.data.clone();
            self.queue_data_out(itt, None, &data, immediate, unsolicited);
        }
        self.tasks.insert(itt, Task { expected_len, cmd_sn, kind });
        Ok(itt)
    }

    /// Queues an ABORT TASK request (immediate, RFC 7143 section 11.5) for
    /// every command in flight; returns how many. A [`Event::TaskManagement`]
    /// reports each answer; when the target says the function completed
    /// (or that it does not know the task), the command completes with
    /// [`CommandError::Aborted`]. Commands keep answering R2Ts meanwhile
    /// (section 4.2.3.3).
    ///
    /// # Errors
    /// The connection is failed or logging out.
    pub fn abort_tasks(&mut self, window: &CmdWindow) -> Result<usize, ConnError> {
        self.check_usable()?;
        let mut itts: Vec<u32> =
            self.tasks.keys().copied().filter(|t| !self.tmfs.values().any(|r| r == t)).collect();
        itts.sort_unstable();
        for task in &itts {
            let ref_cmd_sn = self.tasks.get(task).map_or(0, |t| t.cmd_sn);
            let itt = self.alloc_itt();
            self.tmfs.insert(itt, *task);
            let h = Header::TaskMgmtRequest(TaskMgmtRequest {
                immediate: true,
                function: tmf::ABORT_TASK,
                lun: self.lun,
                itt,
                rtt: *task,
                cmd_sn: window.current(),
                exp_stat_sn: self.exp_stat_sn,
                ref_cmd_sn,
                exp_data_sn: 0,
            });
            self.push_tx(self.codec.encode(&h, Bytes::new()));
        }
        Ok(itts.len())
    }

    /// Task management requests not answered yet.
    pub fn pending_task_management(&self) -> usize {
        self.tmfs.len()
    }

    /// Gives up on every command in flight without asking the target
    /// (after [`Connection::abort_tasks`] went unanswered, before a
    /// logout): each completes with [`CommandError::Aborted`].
    pub fn forget_tasks(&mut self) {
        let mut itts: Vec<u32> = self.tasks.keys().copied().collect();
        itts.sort_unstable();
        for itt in itts {
            self.tasks.remove(&itt);
            self.drop_pending_data(itt);
            self.events.push_back(Event::Completed { itt, result: Err(CommandError::Aborted("given up")) });
        }
        self.tmfs.clear();
    }

    /// Queues Data-Out PDUs for `data[from..to]`, one sequence (RFC 7143
    /// section 11.7): unsolicited (`r2t_ttt` None) or answering the R2T with
    /// that target transfer tag.
    fn queue_data_out(&mut self, itt: u32, r2t_ttt: Option<u32>, data: &Bytes, from: usize, to: usize) {
        let ttt = r2t_ttt.unwrap_or(RESERVED_TAG);
        let seg = self.max_out_segment();
        let mut off = from;
        let mut data_sn = 0u32;
        while off < to {
            let n = seg.min(to - off);
            let h = Header::DataOut(DataOut {
                final_: off + n == to,
                lun: self.lun,
                itt,
                ttt,
                exp_stat_sn: self.exp_stat_sn,
                data_sn,
                buffer_offset: off as u32,
            });
            // The last PDU of a solicited sequence ends its R2T.
            let tag = TxTag { task: itt, ends_r2t: off + n == to && r2t_ttt.is_some() };
            let pdu = self.codec.encode(&h, data.slice(off..off + n));
            self.queued += pdu.wire_len() as u64;
            self.data_out.push_back((tag, pdu));
            off += n;
            data_sn = data_sn.wrapping_add(1);
        }
    }

    /// Queues a NOP-Out ping (immediate, CmdSN not advanced) and returns its
    /// task tag; a [`Event::Pong`] reports the answer.
    ///
    /// # Errors
    /// The connection is failed or logging out.
    pub fn ping(&mut self, window: &CmdWindow) -> Result<u32, ConnError> {
        self.check_usable()?;
        let itt = self.alloc_itt();
        self.pings.insert(itt, ());
        let h = Header::NopOut(NopOut {
            immediate: true,
            lun: 0,
            itt,
            ttt: RESERVED_TAG,
            cmd_sn: window.current(),
            exp_stat_sn: self.exp_stat_sn,
        });
        self.push_tx(self.codec.encode(&h, Bytes::new()));
        Ok(itt)
    }

    /// Queues a Logout Request (immediate): `close_session` closes the whole
    /// session, otherwise only connection `cid` (RFC 7143 section 11.14).
    /// Commands still in flight complete first on the target's side; call
    /// this once none remain (iSCSI-APT: a connection closes only after its
    /// outstanding commands finish).
    ///
    /// # Errors
    /// The connection is failed or already logging out.
    pub fn logout(&mut self, window: &CmdWindow, close_session: bool, cid: u16) -> Result<(), ConnError> {
        self.check_usable()?;
        let itt = self.alloc_itt();
        let h = Header::LogoutRequest(LogoutRequest {
            immediate: true,
            reason: if close_session {
                logout_reason::CLOSE_SESSION
            } else {
                logout_reason::CLOSE_CONNECTION
            },
            itt,
            cid,
            cmd_sn: window.current(),
            exp_stat_sn: self.exp_stat_sn,
        });
        self.push_tx(self.codec.encode(&h, Bytes::new()));
        self.phase = Phase::LoggingOut { itt };
        Ok(())
    }

    /// The next PDU to write: every other queued PDU before any Data-Out,
    /// in the order each kind was queued. A command so reaches the target
    /// without waiting for the data of writes queued before it on this
    /// connection (RFC 7143 section 3.2.2.1: the target runs a session's
    /// commands in CmdSN order, so a command held back on one connection of
    /// an MC/S session holds back every later command on the others). A
    /// task's own Data-Out still follows its command, in offset order.
    /// Handing out the last Data-Out of an R2T ends that R2T (it no longer
    /// counts against MaxOutstandingR2T).
    pub fn poll_transmit(&mut self) -> Option<OutPdu> {
        if let Some(pdu) = self.tx.pop_front() {
            self.queued = self.queued.saturating_sub(pdu.wire_len() as u64);
            return Some(pdu);
        }
        let (tag, pdu) = self.data_out.pop_front()?;
        self.queued = self.queued.saturating_sub(pdu.wire_len() as u64);
        if tag.ends_r2t
            && let Some(Task { kind: TaskKind::Write(w), .. }) = self.tasks.get_mut(&tag.task)
        {
            w.outstanding_r2t = w.outstanding_r2t.saturating_sub(1);
        }
        Some(pdu)
    }

    /// Bytes queued to be written (PDUs, headers included): what the
    /// driver reports as the session's send backlog, so a session whose
    /// window is behind takes no more writes. The part of a write the
    /// target has not asked for yet is not counted: it waits for the
    /// target's R2T, not for this connection's window.
    pub fn queued_bytes(&self) -> u64 {
        self.queued
    }

    /// [`Connection::queued_bytes`] counted over the queues.
    fn queued_now(&self) -> u64 {
        let tx: usize = self.tx.iter().map(OutPdu::wire_len).sum();
        let data: usize = self.data_out.iter().map(|(_, p)| p.wire_len()).sum();
        (tx + data) as u64
    }

    /// Queues a PDU other than Data-Out.
    fn push_tx(&mut self, pdu: OutPdu) {
        self.queued += pdu.wire_len() as u64;
        self.tx.push_back(pdu);
    }

    /// PDUs waiting to be written.
    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty() || !self.data_out.is_empty()
    }

    /// The next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Ends the connection with `err` (transport failure or protocol
    /// violation): every command in flight completes with it.
    pub fn fail(&mut self, err: ConnError) {
        if matches!(self.phase, Phase::Failed(_)) {
            return;
        }
        let mut itts: Vec<u32> = self.tasks.keys().copied().collect();
        itts.sort_unstable();
        for itt in itts {
            self.tasks.remove(&itt);
            self.events
                .push_back(Event::Completed { itt, result: Err(CommandError::Connection(err.clone())) });
        }
        self.pings.clear();
        self.tmfs.clear();
        self.tx.clear();
        self.data_out.clear();
        self.queued = 0;
        self.phase = Phase::Failed(err);
    }

    /// Consumes every complete PDU at the front of `buf`.
    ///
    /// # Errors
    /// The first protocol violation; the connection is then failed (every
    /// command in flight completed with the error) and must be closed.
    pub fn handle_input(&mut self, buf: &mut BytesMut, window: &mut CmdWindow) -> Result<(), ConnError> {
        if let Phase::Failed(e) = &self.phase {
            return Err(e.clone());
        }
        loop {
            let r = match self.codec.decode(buf) {
                Ok(Some(pdu)) => self.handle_pdu(pdu, window),
                Ok(None) => return Ok(()),
                Err(e) => Err(ConnError::Pdu(e)),
            };
            if let Err(e) = r {
                self.fail(e.clone());
                return Err(e);
            }
        }
    }

    /// Drops Data-Out PDUs still queued for a task that ended.
    fn drop_pending_data(&mut self, itt: u32) {
        if self.data_out.iter().any(|(t, _)| t.task == itt) {
            self.data_out.retain(|(t, _)| t.task != itt);
            self.queued = self.queued_now();
        }
    }

    fn stat_sn(&mut self, stat_sn: u32) {
        let next = stat_sn.wrapping_add(1);
        if serial::gt(next, self.exp_stat_sn) {
            self.exp_stat_sn = next;
        }
    }

    fn handle_pdu(&mut self, pdu: Pdu, window: &mut CmdWindow) -> Result<(), ConnError> {
        match pdu.header {
            Header::DataIn(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.data_in(h, pdu.data)
            }
            Header::ScsiResponse(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.stat_sn(h.stat_sn);
                self.scsi_response(h, &pdu.data)
            }
            Header::R2t(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.r2t(h)
            }
            Header::NopIn(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.nop_in(h, pdu.data, window)
            }
            Header::Reject(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.stat_sn(h.stat_sn);
                self.reject(h, &pdu.data)
            }
            Header::AsyncMessage(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.stat_sn(h.stat_sn);
                match h.event {
                    1 => self.events.push_back(Event::LogoutRequested),
                    2 | 3 => return Err(ConnError::TargetDrop(h.event)),
                    _ => {} // SCSI async events, renegotiation requests, vendor events: ignored
                }
                Ok(())
            }
            Header::TaskMgmtResponse(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.stat_sn(h.stat_sn);
                self.task_management(h)
            }
            Header::LogoutResponse(h) => {
                window.update(h.exp_cmd_sn, h.max_cmd_sn);
                self.stat_sn(h.stat_sn);
                match self.phase {
                    Phase::LoggingOut { itt } if itt == h.itt => {
                        self.phase = Phase::LoggedOut;
                        self.events.push_back(Event::LoggedOut { response: h.response });
                        Ok(())
                    }
                    _ => Err(ConnError::UnknownItt { opcode: pdu.header.opcode(), itt: h.itt }),
                }
            }
            h => Err(ConnError::Unexpected(h.opcode())),
        }
    }

    /// A Task Management Function Response (RFC 7143 section 11.6): after
    /// "function complete" or "task does not exist" the aborted command
    /// completes here (the target sends nothing more for it).
    fn task_management(&mut self, h: TaskMgmtResponse) -> Result<(), ConnError> {
        let task = self
            .tmfs
            .remove(&h.itt)
            .ok_or(ConnError::UnknownItt { opcode: crate::pdu::Opcode::TaskMgmtResponse, itt: h.itt })?;
        if matches!(h.response, 0 | 1) && self.tasks.remove(&task).is_some() {
            self.drop_pending_data(task);
            self.events
                .push_back(Event::Completed { itt: task, result: Err(CommandError::Aborted("ABORT TASK")) });
        }
        self.events.push_back(Event::TaskManagement { itt: h.itt, task, response: h.response });
        Ok(())
    }

    fn data_in(&mut self, h: DataIn, data: Bytes) -> Result<(), ConnError> {
        let itt = h.itt;
        let unknown = ConnError::UnknownItt { opcode: crate::pdu::Opcode::DataIn, itt };
        let task = self.tasks.get_mut(&itt).ok_or(unknown.clone())?;
        let expected_len = task.expected_len;
        let TaskKind::Read { segments, received, next_data_sn } = &mut task.kind else {
            return Err(ConnError::BadResponse { itt, message: "Data-In for a write command".into() });
        };
        if h.data_sn != *next_data_sn {
            return Err(ConnError::DataSn { itt, expected: *next_data_sn, received: h.data_sn });
        }
        if h.buffer_offset != *received {
            return Err(ConnError::BufferOffset { itt, expected: *received, received: h.buffer_offset });
        }
        let len = data.len() as u32;
        if u64::from(h.buffer_offset) + u64::from(len) > u64::from(expected_len) {
            return Err(ConnError::BeyondTransferLength {
                itt,
                what: "Data-In",
                offset: h.buffer_offset,
                len,
                expected: expected_len,
            });
        }
        *next_data_sn = next_data_sn.wrapping_add(1);
        *received += len;
        if !data.is_empty() {
            segments.push(data);
        }
        if h.has_status {
            self.stat_sn(h.stat_sn);
            let task = self.tasks.remove(&itt).ok_or(unknown)?;
            let result = if h.status == status::GOOD {
                Ok(Outcome { data: take_data(task), residual: if h.underflow { h.residual } else { 0 } })
            } else {
                Err(CommandError::Status { status: h.status, sense: None })
            };
            self.events.push_back(Event::Completed { itt, result });
        }
        Ok(())
    }

    fn scsi_response(&mut self, h: ScsiResponse, data: &[u8]) -> Result<(), ConnError> {
        let itt = h.itt;
        let task = self
            .tasks
            .remove(&itt)
            .ok_or(ConnError::UnknownItt { opcode: crate::pdu::Opcode::ScsiResponse, itt })?;
        if matches!(task.kind, TaskKind::Write(_)) {
            self.drop_pending_data(itt);
        }
        let result = if h.response != 0 {
            Err(CommandError::TargetFailure(h.response))
        } else if h.status != status::GOOD {
            Err(CommandError::Status { status: h.status, sense: Sense::from_response_data(data) })
        } else {
            Ok(Outcome { data: take_data(task), residual: if h.underflow { h.residual } else { 0 } })
        };
        self.events.push_back(Event::Completed { itt, result });
        Ok(())
    }

    /// An R2T (RFC 7143 section 11.8): checked against the task, the burst
    /// limit, MaxOutstandingR2T (section 13.17) and what was already sent or
    /// requested, then answered with Data-Out.
    fn r2t(&mut self, h: R2t) -> Result<(), ConnError> {
        let itt = h.itt;
        let max_burst = self.params.max_burst;
        let max_outstanding = self.params.max_outstanding_r2t.max(1);
        let task =
            self.tasks.get_mut(&itt).ok_or(ConnError::UnknownItt { opcode: crate::pdu::Opcode::R2t, itt })?;
        let expected_len = task.expected_len;
        let TaskKind::Write(w) = &mut task.kind else {
            return Err(ConnError::BadR2t { itt, message: "R2T for a command without write data".into() });
        };
        let bad = |message: String| ConnError::BadR2t { itt, message };
        if h.r2t_sn != w.next_r2t_sn {
            return Err(bad(format!("R2TSN {} where {} was due", h.r2t_sn, w.next_r2t_sn)));
        }
        if u64::from(h.buffer_offset) + u64::from(h.desired_len) > u64::from(expected_len) {
            return Err(ConnError::BeyondTransferLength {
                itt,
                what: "R2T",
                offset: h.buffer_offset,
                len: h.desired_len,
                expected: expected_len,
            });
        }
        if h.desired_len > max_burst {
            return Err(bad(format!("desired length {} over MaxBurstLength {max_burst}", h.desired_len)));
        }
        if w.outstanding_r2t >= max_outstanding {
            return Err(bad(format!(
                "more than MaxOutstandingR2T={max_outstanding} R2Ts outstanding (their data not yet sent)"
            )));
        }
        let max = max_r2ts(expected_len);
        if w.r2ts >= max {
            return Err(bad(format!("more than {max} R2Ts for a write of {expected_len} bytes")));
        }
        let (from, to) = (h.buffer_offset, h.buffer_offset + h.desired_len);
        if let Err((s, e)) = w.request(from, to) {
            return Err(bad(format!(
                "R2T for bytes [{from}, {to}) asks again for [{s}, {e}), already sent or requested"
            )));
        }
        w.next_r2t_sn = w.next_r2t_sn.wrapping_add(1);
        w.outstanding_r2t += 1;
        w.r2ts += 1;
        let data = w.data.clone();
        self.queue_data_out(itt, Some(h.ttt), &data, from as usize, to as usize);
        Ok(())
    }

    fn nop_in(&mut self, h: NopIn, data: Bytes, window: &CmdWindow) -> Result<(), ConnError> {
        if h.itt != RESERVED_TAG {
            // The answer to our ping (RFC 7143 section 11.19.1).
            self.stat_sn(h.stat_sn);
            if self.pings.remove(&h.itt).is_none() {
                return Err(ConnError::UnknownItt { opcode: crate::pdu::Opcode::NopIn, itt: h.itt });
            }
            self.events.push_back(Event::Pong { itt: h.itt });
            return Ok(());
        }
        // Unsolicited: StatSN is the next one and not advanced (section 11.19.2).
        if h.ttt != RESERVED_TAG && matches!(self.phase, Phase::FullFeature | Phase::LoggingOut { .. }) {
            // The target pings: answer with the same TTT and data (section 11.18).
            let out = Header::NopOut(NopOut {
                immediate: true,
                lun: h.lun,
                itt: RESERVED_TAG,
                ttt: h.ttt,
                cmd_sn: window.current(),
                exp_stat_sn: self.exp_stat_sn,
            });
            self.push_tx(self.codec.encode(&out, data));
        }
        Ok(())
    }

    fn reject(&mut self, h: Reject, data: &[u8]) -> Result<(), ConnError> {
        let reason = reject_reason_text(h.reason);
        if data.len() < BHS_LEN {
            return Err(ConnError::Pdu(crate::error::PduError::BadLength {
                opcode: crate::pdu::Opcode::Reject,
                len: data.len() as u32,
            }));
        }
        let itt = u32::from_be_bytes([data[16], data[17], data[18], data[19]]);
        let opcode = data[0] & 0x3f;
        let is_task_pdu =
            opcode == crate::pdu::Opcode::ScsiCommand as u8 || opcode == crate::pdu::Opcode::DataOut as u8;
        if is_task_pdu && self.tasks.remove(&itt).is_some() {
            self.drop_pending_data(itt);
            self.events.push_back(Event::Completed { itt, result: Err(CommandError::Rejected(reason)) });
        } else {
            if opcode == crate::pdu::Opcode::NopOut as u8 {
                self.pings.remove(&itt);
            }
            self.events.push_back(Event::Rejected { reason });
        }
        Ok(())
    }
}

fn take_data(task: Task) -> Bytes {
    match task.kind {
        TaskKind::Read { mut segments, received, .. } => match segments.len() {
            0 => Bytes::new(),
            1 => segments.pop().unwrap_or_default(),
            _ => {
                let mut b = BytesMut::with_capacity(received as usize);
                for s in &segments {
                    b.extend_from_slice(s);
                }
                b.freeze()
            }
        },
        TaskKind::Write(_) => Bytes::new(),
    }
}

#[cfg(test)]
mod tests;
