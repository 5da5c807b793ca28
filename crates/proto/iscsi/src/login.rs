//! The login phase of one connection (RFC 7143 section 6.3): security
//! negotiation, then login operational negotiation, then the full feature
//! phase. Bytes in, PDUs out:
//!
//! ```text
//! Login::new(cfg) -> first Login Request
//! loop { target's Login Response -> Login::handle_pdu -> Send(next request) | Done(outcome) }
//! ```
//!
//! Authentication is `AuthMethod=None` or CHAP with MD5 (RFC 7143 section
//! 12.1.3), the initiator answering the target's challenge, and with
//! [`LoginConfig::target_auth`] mutual CHAP: the initiator sends its own
//! `CHAP_I`/`CHAP_C` with its answer and checks the target's
//! `CHAP_N`/`CHAP_R` before going on.

use bytes::{Bytes, BytesMut};

use crate::error::LoginError;
use crate::keys::{Negotiation, Params};
use crate::md5::md5;
use crate::pdu::{Codec, Header, LoginRequest, LoginResponse, OutPdu, Pdu, Stage, reject_reason_text};
use crate::text::{self, Pairs};

/// The most Login Responses one login may take before it is abandoned.
const MAX_ROUNDS: u32 = 32;
/// Largest CHAP challenge accepted, bytes (RFC 7143 section 12.1.3 allows up to 1024).
const MAX_CHALLENGE: usize = 1024;
/// The data segment limit of the login phase (RFC 7143 section 13.12:
/// MaxRecvDataSegmentLength is not in force until the full feature phase).
pub const LOGIN_MAX_DATA: u32 = 8192;

/// How the initiator authenticates (RFC 7143 section 12).
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// `AuthMethod=None`.
    None,
    /// `AuthMethod=CHAP` with MD5; the target challenges the initiator.
    Chap {
        /// CHAP_N.
        user: String,
        /// The shared secret.
        secret: Vec<u8>,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Auth::None => write!(f, "None"),
            Auth::Chap { user, .. } => write!(f, "Chap {{ user: {user:?}, secret: <hidden> }}"),
        }
    }
}

/// Mutual CHAP: what the target must prove (RFC 7143 section 12.1.3).
#[derive(Clone, PartialEq, Eq)]
pub struct TargetAuth {
    /// The CHAP_N the target must answer with (any, if `None`).
    pub user: Option<String>,
    /// The target's secret.
    pub secret: Vec<u8>,
    /// Our CHAP_I.
    pub id: u8,
    /// Our CHAP_C: random bytes from the caller (this crate reads no
    /// random source); at least 16.
    pub challenge: Vec<u8>,
}

impl std::fmt::Debug for TargetAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TargetAuth {{ user: {:?}, secret: <hidden> }}", self.user)
    }
}

/// What one connection's login needs to know.
#[derive(Debug, Clone)]
pub struct LoginConfig {
    /// InitiatorName (an iqn/eui/naa name).
    pub initiator_name: String,
    /// TargetName; `None` for a discovery session.
    pub target_name: Option<String>,
    /// Initiator session id (the same on every connection of a session).
    pub isid: [u8; 6],
    /// 0 for a new session; the target's TSIH to add a connection to it.
    pub tsih: u16,
    /// Connection id, unique within the session.
    pub cid: u16,
    /// Initiator task tag of the login.
    pub itt: u32,
    /// The session's current CmdSN (login requests do not advance it).
    pub cmd_sn: u32,
    /// ExpStatSN (0 on a new connection).
    pub exp_stat_sn: u32,
    /// Authentication.
    pub auth: Auth,
    /// Mutual CHAP (with [`Auth::Chap`]): authenticate the target too.
    pub target_auth: Option<TargetAuth>,
    /// Operational keys to offer (see [`crate::keys::long_fat_network_offer`]).
    pub offer: Pairs,
    /// The leading connection's values when adding a connection (MC/S).
    pub session: Option<Params>,
}

/// The result of a successful login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginOutcome {
    /// Negotiated values.
    pub params: Params,
    /// The session's TSIH.
    pub tsih: u16,
    /// ExpStatSN for the first full-feature PDU.
    pub exp_stat_sn: u32,
    /// ExpCmdSN from the final Login Response.
    pub exp_cmd_sn: u32,
    /// MaxCmdSN from the final Login Response.
    pub max_cmd_sn: u32,
}

/// What to do after a Login Response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginStep {
    /// Send this Login Request and wait for the next response.
    Send(OutPdu),
    /// The connection is in the full feature phase.
    Done(LoginOutcome),
}

/// Login states, one per step of RFC 7143 sections 6.3 and 12.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Section 6.3.1: first request sent with `AuthMethod` offered.
    SecurityStart,
    /// Section 12.1.3: `CHAP_A` sent; waiting for `CHAP_I` and `CHAP_C`.
    ChapAlgorithm,
    /// Section 12.1.3: `CHAP_N` and `CHAP_R` sent; waiting for the transit to
    /// operational negotiation.
    ChapResponse,
    /// Section 6.3.2 and 13: operational keys sent, answers being checked.
    Operational,
    /// Full feature phase reached, or the login failed.
    Finished,
}

/// The login state machine of one connection.
#[derive(Debug)]
pub struct Login {
    cfg: LoginConfig,
    state: State,
    neg: Negotiation,
    codec: Codec,
    /// Text of a response split over several PDUs (C bit).
    partial: Vec<u8>,
    exp_stat_sn: u32,
    rounds: u32,
}

/// Meaning of a login Status-Class/Status-Detail (RFC 7143 section 11.13.5).
pub fn status_message(class: u8, detail: u8) -> &'static str {
    match (class, detail) {
        (1, 1) => "target moved temporarily",
        (1, 2) => "target moved permanently",
        (2, 0) => "initiator error",
        (2, 1) => "authentication failed",
        (2, 2) => "authorization failure (initiator not allowed)",
        (2, 3) => "target not found",
        (2, 4) => "target removed",
        (2, 5) => "unsupported version",
        (2, 6) => "too many connections",
        (2, 7) => "missing parameter",
        (2, 8) => "cannot include the connection in the session",
        (2, 9) => "session type not supported",
        (2, 10) => "session does not exist",
        (2, 11) => "invalid request during login",
        (3, 0) => "target error",
        (3, 1) => "service unavailable",
        (3, 2) => "out of resources",
        (1, _) => "redirection",
        (2, _) => "initiator error",
        (3, _) => "target error",
        _ => "unknown status",
    }
}

impl Login {
    /// Starts a login; returns the state machine and the first Login Request.
    ///
    /// # Errors
    /// [`LoginError::Config`] for bad names or keys.
    pub fn new(cfg: LoginConfig) -> Result<(Login, OutPdu), LoginError> {
        let leading = cfg.tsih == 0;
        for (k, v) in &cfg.offer {
            text::check_pair(k, v).map_err(|e| LoginError::Config(e.to_string()))?;
        }
        if cfg.initiator_name.is_empty() {
            return Err(LoginError::Config("empty InitiatorName".into()));
        }
        if let Some(t) = &cfg.target_auth {
            let Auth::Chap { secret, .. } = &cfg.auth else {
                return Err(LoginError::Config("authenticating the target (mutual CHAP) needs CHAP".into()));
            };
            // RFC 7143 section 12.1.3: a secret authenticates one direction only.
            if *secret == t.secret {
                return Err(LoginError::Config(
                    "the target's secret must differ from the initiator's (RFC 7143 section 12.1.3)".into(),
                ));
            }
            if t.challenge.len() < 16 || t.challenge.len() > MAX_CHALLENGE {
                return Err(LoginError::Config(
                    "the CHAP challenge for the target must be 16 to 1024 bytes".into(),
                ));
            }
        }
        let neg = Negotiation::new(&cfg.offer, leading);
        let login = Login {
            exp_stat_sn: cfg.exp_stat_sn,
            cfg,
            state: State::SecurityStart,
            neg,
            codec: Codec { header_digest: false, data_digest: false, max_recv_data: LOGIN_MAX_DATA },
            partial: Vec::new(),
            rounds: 0,
        };
        let mut keys: Pairs = vec![("InitiatorName".into(), login.cfg.initiator_name.clone())];
        match &login.cfg.target_name {
            Some(t) => {
                keys.push(("TargetName".into(), t.clone()));
                keys.push(("SessionType".into(), "Normal".into()));
            }
            None => keys.push(("SessionType".into(), "Discovery".into())),
        }
        let chap = matches!(login.cfg.auth, Auth::Chap { .. });
        keys.push(("AuthMethod".into(), if chap { "CHAP" } else { "None" }.into()));
        for (k, v) in &keys {
            text::check_pair(k, v).map_err(|e| LoginError::Config(e.to_string()))?;
        }
        // With AuthMethod=None the initiator may ask to move on at once.
        let first = login.request(Stage::Security, !chap, Stage::Operational, &keys)?;
        Ok((login, first))
    }

    /// The codec of the login phase (no digests; 8192-byte segments).
    pub fn codec(&self) -> Codec {
        self.codec
    }

    fn request(&self, csg: Stage, transit: bool, nsg: Stage, keys: &Pairs) -> Result<OutPdu, LoginError> {
        let data = text::encode(keys);
        if data.len() > LOGIN_MAX_DATA as usize {
            return Err(LoginError::Config(format!(
                "login text of {} bytes exceeds {LOGIN_MAX_DATA} bytes",
                data.len()
            )));
        }
        let h = Header::LoginRequest(LoginRequest {
            transit,
            cont: false,
            csg,
            nsg,
            version_max: 0,
            version_min: 0,
            isid: self.cfg.isid,
            tsih: self.cfg.tsih,
            itt: self.cfg.itt,
            cid: self.cfg.cid,
            cmd_sn: self.cfg.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        });
        Ok(self.codec.encode(&h, Bytes::from(data)))
    }

    /// Decodes and handles every complete PDU at the front of `buf`.
    ///
    /// # Errors
    /// As [`Login::handle_pdu`], plus framing errors.
    pub fn handle_input(&mut self, buf: &mut BytesMut) -> Result<Option<LoginStep>, LoginError> {
        match self.codec.decode(buf)? {
            Some(pdu) => self.handle_pdu(pdu).map(Some),
            None => Ok(None),
        }
    }

    /// Handles one PDU from the target.
    ///
    /// # Errors
    /// Any [`LoginError`]; the connection must then be closed.
    pub fn handle_pdu(&mut self, pdu: Pdu) -> Result<LoginStep, LoginError> {
        let r = self.handle_pdu_inner(pdu);
        if r.is_err() {
            self.state = State::Finished;
        }
        r
    }

    fn handle_pdu_inner(&mut self, pdu: Pdu) -> Result<LoginStep, LoginError> {
        if self.state == State::Finished {
            return Err(LoginError::Protocol("PDU after the login ended".into()));
        }
        let rsp = match pdu.header {
            Header::LoginResponse(r) => r,
            Header::Reject(r) => return Err(LoginError::Rejected(reject_reason_text(r.reason))),
            h => return Err(LoginError::Unexpected(h.opcode())),
        };
        self.rounds += 1;
        if self.rounds > MAX_ROUNDS {
            return Err(LoginError::Protocol(format!(
                "no full feature phase after {MAX_ROUNDS} login responses"
            )));
        }
        self.check_response(&rsp)?;
        if rsp.status_class != 0 {
            if rsp.status_class == 1 {
                let pairs = text::parse(&pdu.data).unwrap_or_default();
                let to = text::get(&pairs, "TargetAddress").unwrap_or("an unnamed address").to_string();
                return Err(LoginError::Redirect(to));
            }
            return Err(LoginError::Status {
                class: rsp.status_class,
                detail: rsp.status_detail,
                message: status_message(rsp.status_class, rsp.status_detail),
            });
        }
        self.exp_stat_sn = rsp.stat_sn.wrapping_add(1);
        if self.partial.len() + pdu.data.len() > text::MAX_TEXT_LEN {
            return Err(text_too_long(self.partial.len() + pdu.data.len()));
        }
        self.partial.extend_from_slice(&pdu.data);
        if rsp.cont {
            // RFC 7143 section 6.3: answer a partial text with an empty request.
            if rsp.transit {
                return Err(LoginError::Protocol("Login Response with both T and C bits".into()));
            }
            return Ok(LoginStep::Send(self.request(rsp.csg, false, rsp.csg, &Vec::new())?));
        }
        let pairs = text::parse(&std::mem::take(&mut self.partial))?;
        match self.state {
            State::SecurityStart | State::ChapAlgorithm | State::ChapResponse => self.security(&rsp, &pairs),
            State::Operational => self.operational(&rsp, &pairs),
            State::Finished => unreachable!("checked above"),
        }
    }

    fn check_response(&self, rsp: &LoginResponse) -> Result<(), LoginError> {
        if rsp.itt != self.cfg.itt {
            return Err(LoginError::Protocol(format!(
                "Login Response for task {:#x}, expected {:#x}",
                rsp.itt, self.cfg.itt
            )));
        }
        if rsp.status_class != 0 {
            return Ok(());
        }
        if rsp.isid != self.cfg.isid {
            return Err(LoginError::Protocol("Login Response with another ISID".into()));
        }
        if rsp.version_active != 0 {
            return Err(LoginError::Protocol(format!("unsupported version {}", rsp.version_active)));
        }
        let expected = match self.state {
            State::Operational => Stage::Operational,
            _ => Stage::Security,
        };
        if rsp.csg != expected {
            return Err(LoginError::Protocol(format!(
                "Login Response in stage {:?}, expected {expected:?}",
                rsp.csg
            )));
        }
        Ok(())
    }

    /// Security negotiation (RFC 7143 sections 6.3.1, 12).
    fn security(&mut self, rsp: &LoginResponse, pairs: &Pairs) -> Result<LoginStep, LoginError> {
        // Keys other than authentication ones (TargetPortalGroupTag, TargetAlias...)
        // go to the operational negotiation.
        let (auth_keys, other): (Pairs, Pairs) =
            pairs.iter().cloned().partition(|(k, _)| k == "AuthMethod" || k.starts_with("CHAP_"));
        self.neg.handle(&other)?;
        match (&self.state, self.cfg.auth.clone()) {
            (State::SecurityStart, auth) => {
                let method = text::get(&auth_keys, "AuthMethod");
                match (method, &auth) {
                    (Some("CHAP"), Auth::Chap { .. }) => {
                        if rsp.transit {
                            return Err(LoginError::Auth("target chose CHAP and skipped it".into()));
                        }
                        self.state = State::ChapAlgorithm;
                        let keys = vec![("CHAP_A".to_string(), "5".to_string())];
                        Ok(LoginStep::Send(self.request(
                            Stage::Security,
                            false,
                            Stage::Operational,
                            &keys,
                        )?))
                    }
                    (Some("None") | None, Auth::None) => self.after_security(rsp),
                    (Some(m), Auth::Chap { .. }) => {
                        Err(LoginError::Auth(format!("target answered AuthMethod={m} to an offer of CHAP")))
                    }
                    (None, Auth::Chap { .. }) => {
                        Err(LoginError::Auth("target did not answer AuthMethod=CHAP".into()))
                    }
                    (Some(m), Auth::None) => Err(LoginError::AuthRequired(m.to_string())),
                }
            }
            (State::ChapAlgorithm, Auth::Chap { user, secret }) => {
                let alg =
                    text::get(&auth_keys, "CHAP_A").ok_or_else(|| LoginError::Auth("no CHAP_A".into()))?;
                if alg != "5" {
                    return Err(LoginError::Auth(format!("CHAP algorithm {alg} is not MD5 (5)")));
                }
                let id =
                    text::get(&auth_keys, "CHAP_I").ok_or_else(|| LoginError::Auth("no CHAP_I".into()))?;
                let id = text::parse_number("CHAP_I", id)?;
                let id =
                    u8::try_from(id).map_err(|_| LoginError::Auth(format!("CHAP_I {id} out of range")))?;
                let c =
                    text::get(&auth_keys, "CHAP_C").ok_or_else(|| LoginError::Auth("no CHAP_C".into()))?;
                let challenge = text::parse_binary("CHAP_C", c)?;
                if challenge.is_empty() || challenge.len() > MAX_CHALLENGE {
                    return Err(LoginError::Auth(format!("CHAP_C of {} bytes", challenge.len())));
                }
                let response = chap_response(id, &secret, &challenge);
                self.state = State::ChapResponse;
                let mut keys =
                    vec![("CHAP_N".to_string(), user), ("CHAP_R".to_string(), text::hex(&response))];
                if let Some(t) = &self.cfg.target_auth {
                    // RFC 7143 section 12.1.3: never the challenge the other side sent.
                    if t.challenge == challenge {
                        return Err(LoginError::TargetAuth("it sent our own CHAP challenge back".into()));
                    }
                    keys.push(("CHAP_I".to_string(), t.id.to_string()));
                    keys.push(("CHAP_C".to_string(), text::hex(&t.challenge)));
                }
                Ok(LoginStep::Send(self.request(Stage::Security, true, Stage::Operational, &keys)?))
            }
            (State::ChapResponse, _) => {
                if let Some(t) = &self.cfg.target_auth {
                    check_target(t, &auth_keys)?;
                }
                self.after_security(rsp)
            }
            _ => Err(LoginError::Protocol("unexpected security negotiation state".into())),
        }
    }

    /// The target accepted authentication; move to operational negotiation
    /// once it sets the transit bit.
    fn after_security(&mut self, rsp: &LoginResponse) -> Result<LoginStep, LoginError> {
        if !rsp.transit {
            // Not there yet: ask again to move on.
            return Ok(LoginStep::Send(self.request(
                Stage::Security,
                true,
                Stage::Operational,
                &Vec::new(),
            )?));
        }
        match rsp.nsg {
            Stage::Operational => {
                self.state = State::Operational;
                let keys = self.neg.offer();
                Ok(LoginStep::Send(self.request(Stage::Operational, true, Stage::FullFeature, &keys)?))
            }
            Stage::FullFeature => self.finish(rsp),
            Stage::Security => {
                Err(LoginError::Protocol("target transits to the security stage again".into()))
            }
        }
    }

    /// Login operational negotiation (RFC 7143 sections 6.3.2, 13).
    fn operational(&mut self, rsp: &LoginResponse, pairs: &Pairs) -> Result<LoginStep, LoginError> {
        for (k, _) in pairs {
            if k == "AuthMethod" || k.starts_with("CHAP_") {
                return Err(LoginError::Protocol(format!("{k} in operational negotiation")));
            }
        }
        self.neg.handle(pairs)?;
        if rsp.transit {
            if rsp.nsg != Stage::FullFeature {
                return Err(LoginError::Protocol(format!("target transits to {:?}", rsp.nsg)));
            }
            return self.finish(rsp);
        }
        // The target stays (it offered keys of its own, or wants another
        // round): send our answers and ask again to move on.
        let replies = self.neg.take_replies();
        Ok(LoginStep::Send(self.request(Stage::Operational, true, Stage::FullFeature, &replies)?))
    }

    fn finish(&mut self, rsp: &LoginResponse) -> Result<LoginStep, LoginError> {
        let params = self.neg.finish(self.cfg.session.as_ref())?;
        if self.cfg.target_name.is_some() && rsp.tsih == 0 {
            return Err(LoginError::Protocol("final Login Response without a TSIH".into()));
        }
        if self.cfg.tsih != 0 && rsp.tsih != self.cfg.tsih {
            return Err(LoginError::Protocol(format!(
                "target answered TSIH {} when adding a connection to session {}",
                rsp.tsih, self.cfg.tsih
            )));
        }
        self.state = State::Finished;
        Ok(LoginStep::Done(LoginOutcome {
            params,
            tsih: rsp.tsih,
            exp_stat_sn: self.exp_stat_sn,
            exp_cmd_sn: rsp.exp_cmd_sn,
            max_cmd_sn: rsp.max_cmd_sn,
        }))
    }
}

/// Mutual CHAP: the target's CHAP_N and CHAP_R (RFC 7143 section 12.1.3).
fn check_target(t: &TargetAuth, keys: &Pairs) -> Result<(), LoginError> {
    let (Some(name), Some(r)) = (text::get(keys, "CHAP_N"), text::get(keys, "CHAP_R")) else {
        return Err(LoginError::TargetAuth(
            "it did not authenticate itself (no CHAP_N/CHAP_R): does it have an outgoing account \
             (tgtadm --op bind --mode account --outgoing)?"
                .into(),
        ));
    };
    if let Some(want) = &t.user
        && want != name
    {
        return Err(LoginError::TargetAuth(format!("it answered as CHAP user {name:?}, expected {want:?}")));
    }
    let got = text::parse_binary("CHAP_R", r)?;
    let want = chap_response(t.id, &t.secret, &t.challenge);
    // Compared in full whatever the first difference.
    let same =
        got.len() == want.len() && got.iter().zip(want.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0;
    if !same {
        return Err(LoginError::TargetAuth(
            "its CHAP response is wrong: it does not know the target secret".into(),
        ));
    }
    Ok(())
}

fn text_too_long(n: usize) -> LoginError {
    LoginError::Text(crate::error::TextError::TooLong(n))
}

/// The CHAP response: MD5 over identifier, secret and challenge (RFC 1994
/// section 4.1).
pub fn chap_response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    md5(&[&[id], secret, challenge])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::long_fat_network_offer;
    use crate::pdu::{BHS_LEN, Reject};

    pub(crate) fn cfg(auth: Auth) -> LoginConfig {
        LoginConfig {
            initiator_name: "iqn.2024-01.test:init".into(),
            target_name: Some("iqn.2024-01.test:tgt".into()),
            isid: [0x80, 1, 2, 3, 0, 1],
            tsih: 0,
            cid: 0,
            itt: 0x1000,
            cmd_sn: 1,
            exp_stat_sn: 0,
            auth,
            target_auth: None,
            offer: long_fat_network_offer(1),
            session: None,
        }
    }

    fn response(transit: bool, csg: Stage, nsg: Stage, keys: &[(&str, &str)], stat_sn: u32) -> Pdu {
        let pairs: Vec<(String, String)> = keys.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Pdu {
            header: Header::LoginResponse(LoginResponse {
                transit,
                cont: false,
                csg,
                nsg,
                version_max: 0,
                version_active: 0,
                isid: [0x80, 1, 2, 3, 0, 1],
                tsih: if nsg == Stage::FullFeature && transit { 7 } else { 0 },
                itt: 0x1000,
                stat_sn,
                exp_cmd_sn: 1,
                max_cmd_sn: 2,
                status_class: 0,
                status_detail: 0,
            }),
            ahs: Bytes::new(),
            data: Bytes::from(text::encode(&pairs)),
        }
    }

    fn request_of(out: &OutPdu) -> (LoginRequest, Pairs) {
        let mut b = BytesMut::from(&out.to_vec()[..]);
        let pdu = Codec::default().decode(&mut b).unwrap().unwrap();
        let Header::LoginRequest(r) = pdu.header else { panic!("not a login request") };
        (r, text::parse(&pdu.data).unwrap())
    }

    #[test]
    fn none_login_with_extra_operational_round() {
        let (mut l, first) = Login::new(cfg(Auth::None)).unwrap();
        let (r, keys) = request_of(&first);
        assert!(r.transit && r.csg == Stage::Security && r.nsg == Stage::Operational);
        assert_eq!(text::get(&keys, "AuthMethod"), Some("None"));
        let LoginStep::Send(op) = l
            .handle_pdu(response(
                true,
                Stage::Security,
                Stage::Operational,
                &[("AuthMethod", "None"), ("TargetPortalGroupTag", "1")],
                5,
            ))
            .unwrap()
        else {
            panic!()
        };
        let (r, keys) = request_of(&op);
        assert_eq!(r.csg, Stage::Operational);
        assert_eq!(r.exp_stat_sn, 6);
        assert_eq!(text::get(&keys, "InitialR2T"), Some("No"));
        // tgt: answers without the transit bit when it declares its own keys.
        let LoginStep::Send(again) = l
            .handle_pdu(response(
                false,
                Stage::Operational,
                Stage::Operational,
                &[
                    ("InitialR2T", "No"),
                    ("MaxRecvDataSegmentLength", "262144"),
                    ("MaxBurstLength", "1048576"),
                ],
                6,
            ))
            .unwrap()
        else {
            panic!()
        };
        let (r, keys) = request_of(&again);
        assert!(r.transit && r.nsg == Stage::FullFeature);
        assert!(keys.is_empty());
        let LoginStep::Done(out) =
            l.handle_pdu(response(true, Stage::Operational, Stage::FullFeature, &[], 7)).unwrap()
        else {
            panic!()
        };
        assert_eq!(out.tsih, 7);
        assert_eq!(out.exp_stat_sn, 8);
        assert!(!out.params.initial_r2t);
        assert_eq!(out.params.max_burst, 1 << 20);
        assert_eq!(out.params.max_send_data_segment, 262144);
        assert_eq!(out.params.target_portal_group_tag, Some(1));
    }

    #[test]
    fn chap_login() {
        let (mut l, first) =
            Login::new(cfg(Auth::Chap { user: "u".into(), secret: b"secretsecret".to_vec() })).unwrap();
        let (r, keys) = request_of(&first);
        assert!(!r.transit);
        assert_eq!(text::get(&keys, "AuthMethod"), Some("CHAP"));
        let LoginStep::Send(a) = l
            .handle_pdu(response(false, Stage::Security, Stage::Security, &[("AuthMethod", "CHAP")], 1))
            .unwrap()
        else {
            panic!()
        };
        assert_eq!(text::get(&request_of(&a).1, "CHAP_A"), Some("5"));
        let LoginStep::Send(n) = l
            .handle_pdu(response(
                false,
                Stage::Security,
                Stage::Security,
                &[("CHAP_A", "5"), ("CHAP_I", "7"), ("CHAP_C", "0x0102030405")],
                2,
            ))
            .unwrap()
        else {
            panic!()
        };
        let (r, keys) = request_of(&n);
        assert!(r.transit);
        assert_eq!(text::get(&keys, "CHAP_N"), Some("u"));
        let expect = text::hex(&chap_response(7, b"secretsecret", &[1, 2, 3, 4, 5]));
        assert_eq!(text::get(&keys, "CHAP_R"), Some(expect.as_str()));
        let step = l.handle_pdu(response(true, Stage::Security, Stage::Operational, &[], 3)).unwrap();
        assert!(matches!(step, LoginStep::Send(_)));
    }

    fn mutual(user: Option<&str>) -> LoginConfig {
        LoginConfig {
            target_auth: Some(TargetAuth {
                user: user.map(str::to_string),
                secret: b"target-secret-1".to_vec(),
                id: 9,
                challenge: (0u8..16).collect(),
            }),
            ..cfg(Auth::Chap { user: "u".into(), secret: b"secretsecret".to_vec() })
        }
    }

    /// Runs a CHAP login up to the target's answer to CHAP_N/CHAP_R.
    fn mutual_until_answer(l: &mut Login) -> Pairs {
        l.handle_pdu(response(false, Stage::Security, Stage::Security, &[("AuthMethod", "CHAP")], 1))
            .unwrap();
        let LoginStep::Send(n) = l
            .handle_pdu(response(
                false,
                Stage::Security,
                Stage::Security,
                &[("CHAP_A", "5"), ("CHAP_I", "7"), ("CHAP_C", "0x0102030405")],
                2,
            ))
            .unwrap()
        else {
            panic!()
        };
        request_of(&n).1
    }

    #[test]
    fn mutual_chap_checks_the_target() {
        let (mut l, _) = Login::new(mutual(Some("tgt"))).unwrap();
        let keys = mutual_until_answer(&mut l);
        assert_eq!(text::get(&keys, "CHAP_I"), Some("9"));
        let challenge: Vec<u8> = (0u8..16).collect();
        assert_eq!(text::get(&keys, "CHAP_C"), Some(text::hex(&challenge).as_str()));
        let good = text::hex(&chap_response(9, b"target-secret-1", &challenge));
        let step = l
            .handle_pdu(response(
                true,
                Stage::Security,
                Stage::Operational,
                &[("CHAP_N", "tgt"), ("CHAP_R", &good)],
                3,
            ))
            .unwrap();
        assert!(matches!(step, LoginStep::Send(_)));

        // A wrong response, a wrong name, or none at all fail.
        let bad = text::hex(&chap_response(9, b"guess", &challenge));
        for keys in [
            vec![("CHAP_N", "tgt"), ("CHAP_R", bad.as_str())],
            vec![("CHAP_N", "other"), ("CHAP_R", &good)],
            vec![],
        ] {
            let (mut l, _) = Login::new(mutual(Some("tgt"))).unwrap();
            mutual_until_answer(&mut l);
            let e = l.handle_pdu(response(true, Stage::Security, Stage::Operational, &keys, 3)).unwrap_err();
            assert!(matches!(e, LoginError::TargetAuth(_)), "{e}");
        }
    }

    #[test]
    fn mutual_chap_configuration_is_checked() {
        let mut c = mutual(None);
        c.target_auth.as_mut().unwrap().secret = b"secretsecret".to_vec();
        assert!(matches!(Login::new(c), Err(LoginError::Config(_))), "same secret both ways");
        let mut c = mutual(None);
        c.auth = Auth::None;
        assert!(matches!(Login::new(c), Err(LoginError::Config(_))));
        let mut c = mutual(None);
        c.target_auth.as_mut().unwrap().challenge = vec![1; 4];
        assert!(matches!(Login::new(c), Err(LoginError::Config(_))));
        // The target reflecting our challenge is refused.
        let (mut l, _) = Login::new(mutual(None)).unwrap();
        l.handle_pdu(response(false, Stage::Security, Stage::Security, &[("AuthMethod", "CHAP")], 1))
            .unwrap();
        let ours = text::hex(&(0u8..16).collect::<Vec<u8>>());
        let e = l
            .handle_pdu(response(
                false,
                Stage::Security,
                Stage::Security,
                &[("CHAP_A", "5"), ("CHAP_I", "7"), ("CHAP_C", &ours)],
                2,
            ))
            .unwrap_err();
        assert!(e.to_string().contains("our own CHAP challenge"), "{e}");
    }

    #[test]
    fn failures_are_typed() {
        let (mut l, _) = Login::new(cfg(Auth::None)).unwrap();
        let mut p = response(false, Stage::Security, Stage::Security, &[], 0);
        if let Header::LoginResponse(r) = &mut p.header {
            r.status_class = 2;
            r.status_detail = 3;
        }
        let e = l.handle_pdu(p).unwrap_err();
        assert!(matches!(e, LoginError::Status { class: 2, detail: 3, .. }), "{e}");
        assert!(e.to_string().contains("target not found"));

        let (mut l, _) = Login::new(cfg(Auth::None)).unwrap();
        let e = l
            .handle_pdu(Pdu {
                header: Header::Reject(Reject {
                    reason: 4,
                    stat_sn: 0,
                    exp_cmd_sn: 0,
                    max_cmd_sn: 0,
                    data_sn: 0,
                }),
                ahs: Bytes::new(),
                data: Bytes::from(vec![0u8; BHS_LEN]),
            })
            .unwrap_err();
        assert!(matches!(e, LoginError::Rejected(_)));

        let (mut l, _) = Login::new(cfg(Auth::None)).unwrap();
        let e =
            l.handle_pdu(response(true, Stage::Security, Stage::Operational, &[("AuthMethod", "CHAP")], 0));
        assert!(matches!(e, Err(LoginError::AuthRequired(_))));
    }
}
