//! SendTargets discovery (RFC 7143 section 13.3 and appendix C): after a
//! login with `SessionType=Discovery`, a Text Request `SendTargets=All`
//! returns every target name with its addresses. A long answer arrives in
//! several Text Responses (C bit), each fetched with an empty Text Request
//! echoing the target transfer tag.

use bytes::{Bytes, BytesMut};

use crate::error::{LoginError, TextError};
use crate::login::LoginOutcome;
use crate::pdu::{
    Codec, Header, LogoutRequest, OutPdu, Pdu, RESERVED_TAG, TextRequest, logout_reason, reject_reason_text,
};
use crate::text;

/// One target of a SendTargets answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredTarget {
    /// TargetName.
    pub name: String,
    /// TargetAddress values (`host:port,tpgt`).
    pub addresses: Vec<String>,
}

/// What to do after a PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiscoveryStep {
    /// Send this PDU and wait for the next answer.
    Send(OutPdu),
    /// The whole answer arrived; send the logout PDU and wait for its answer.
    Targets(Vec<DiscoveredTarget>, OutPdu),
    /// The logout finished.
    LoggedOut,
}

/// Phases of a discovery session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Text exchange in progress (section 11.10).
    Text,
    /// Logout sent (section 11.14), with this task tag.
    LoggingOut {
        /// The Logout Request's initiator task tag.
        itt: u32,
    },
    /// Finished.
    Done,
}

/// Text Responses in a row without data that a target may send before the
/// exchange is a protocol error (each one costs a round trip and makes no
/// progress; the answer itself is bounded by [`text::MAX_TEXT_LEN`]).
pub const MAX_EMPTY_CONTINUATIONS: u32 = 16;

/// The SendTargets exchange of a discovery session.
#[derive(Debug)]
pub struct Discovery {
    codec: Codec,
    itt: u32,
    cmd_sn: u32,
    exp_stat_sn: u32,
    partial: Vec<u8>,
    /// Partial Text Responses in a row that carried no data.
    empty_streak: u32,
    phase: Phase,
}

impl Discovery {
    /// Starts after a discovery login; returns the first Text Request.
    pub fn new(login: &LoginOutcome, cmd_sn: u32, itt: u32) -> (Discovery, OutPdu) {
        let mut d = Discovery {
            codec: Codec {
                header_digest: login.params.header_digest,
                data_digest: login.params.data_digest,
                max_recv_data: login.params.max_recv_data_segment,
            },
            itt,
            cmd_sn,
            exp_stat_sn: login.exp_stat_sn,
            partial: Vec::new(),
            empty_streak: 0,
            phase: Phase::Text,
        };
        let first = d.text_request(RESERVED_TAG, &text::encode(&[("SendTargets", "All")]));
        (d, first)
    }

    /// The codec in force.
    pub fn codec(&self) -> Codec {
        self.codec
    }

    fn text_request(&mut self, ttt: u32, data: &[u8]) -> OutPdu {
        let h = Header::TextRequest(TextRequest {
            immediate: false,
            final_: true,
            cont: false,
            lun: 0,
            itt: self.itt,
            ttt,
            cmd_sn: self.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
        });
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        self.codec.encode(&h, Bytes::copy_from_slice(data))
    }

    /// Decodes and handles one PDU from `buf`, if complete.
    ///
    /// # Errors
    /// As [`Discovery::handle_pdu`].
    pub fn handle_input(&mut self, buf: &mut BytesMut) -> Result<Option<DiscoveryStep>, LoginError> {
        match self.codec.decode(buf)? {
            Some(p) => self.handle_pdu(p).map(Some),
            None => Ok(None),
        }
    }

    /// Handles one PDU from the target.
    ///
    /// # Errors
    /// Protocol violations and malformed text.
    pub fn handle_pdu(&mut self, pdu: Pdu) -> Result<DiscoveryStep, LoginError> {
        match (self.phase, pdu.header) {
            (Phase::Text, Header::TextResponse(h)) => {
                if h.itt != self.itt {
                    return Err(LoginError::Protocol(format!("Text Response for unknown task {:#x}", h.itt)));
                }
                self.exp_stat_sn = h.stat_sn.wrapping_add(1);
                if self.partial.len() + pdu.data.len() > text::MAX_TEXT_LEN {
                    return Err(LoginError::Text(TextError::TooLong(self.partial.len() + pdu.data.len())));
                }
                self.partial.extend_from_slice(&pdu.data);
                if h.cont || !h.final_ {
                    self.empty_streak = if pdu.data.is_empty() { self.empty_streak + 1 } else { 0 };
                    if self.empty_streak > MAX_EMPTY_CONTINUATIONS {
                        return Err(LoginError::Protocol(format!(
                            "more than {MAX_EMPTY_CONTINUATIONS} partial Text Responses in a row without data"
                        )));
                    }
                    if h.ttt == RESERVED_TAG {
                        return Err(LoginError::Protocol(
                            "partial Text Response without a target transfer tag".into(),
                        ));
                    }
                    return Ok(DiscoveryStep::Send(self.text_request(h.ttt, &[])));
                }
                let pairs = text::parse(&std::mem::take(&mut self.partial))?;
                let mut targets: Vec<DiscoveredTarget> = Vec::new();
                for (k, v) in pairs {
                    match k.as_str() {
                        "TargetName" => targets.push(DiscoveredTarget { name: v, addresses: Vec::new() }),
                        "TargetAddress" => match targets.last_mut() {
                            Some(t) => t.addresses.push(v),
                            None => {
                                return Err(LoginError::Protocol(
                                    "TargetAddress before any TargetName".into(),
                                ));
                            }
                        },
                        _ => {}
                    }
                }
                let itt = self.itt.wrapping_add(1);
                self.phase = Phase::LoggingOut { itt };
                let h = Header::LogoutRequest(LogoutRequest {
                    immediate: true,
                    reason: logout_reason::CLOSE_SESSION,
                    itt,
                    cid: 0,
                    cmd_sn: self.cmd_sn,
                    exp_stat_sn: self.exp_stat_sn,
                });
                Ok(DiscoveryStep::Targets(targets, self.codec.encode(&h, Bytes::new())))
            }
            (Phase::LoggingOut { itt }, Header::LogoutResponse(h)) => {
                if h.itt != itt {
                    return Err(LoginError::Protocol(format!(
                        "Logout Response for unknown task {:#x} (the logout is {itt:#x})",
                        h.itt
                    )));
                }
                self.phase = Phase::Done;
                Ok(DiscoveryStep::LoggedOut)
            }
            (_, Header::Reject(r)) => Err(LoginError::Rejected(reject_reason_text(r.reason))),
            (_, Header::NopIn(_)) | (_, Header::AsyncMessage(_)) => {
                Err(LoginError::Protocol("NOP-In or Async Message during discovery is not handled".into()))
            }
            (_, h) => Err(LoginError::Unexpected(h.opcode())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Params;
    use crate::pdu::TextResponse;

    fn rsp(final_: bool, cont: bool, ttt: u32, body: &[u8]) -> Pdu {
        Pdu {
            header: Header::TextResponse(TextResponse {
                final_,
                cont,
                lun: 0,
                itt: 9,
                ttt,
                stat_sn: 3,
                exp_cmd_sn: 2,
                max_cmd_sn: 3,
            }),
            ahs: Bytes::new(),
            data: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn continued_answer() {
        let login =
            LoginOutcome { params: Params::default(), tsih: 1, exp_stat_sn: 2, exp_cmd_sn: 1, max_cmd_sn: 2 };
        let (mut d, _) = Discovery::new(&login, 1, 9);
        let all = b"TargetName=iqn.a\0TargetAddress=127.0.0.1:3260,1\0TargetName=iqn.b\0TargetAddress=[::1]:3260,1\0";
        let (a, b) = all.split_at(20); // split inside a value
        let DiscoveryStep::Send(next) = d.handle_pdu(rsp(false, true, 77, a)).unwrap() else { panic!() };
        let mut buf = BytesMut::from(&next.to_vec()[..]);
        let p = Codec::default().decode(&mut buf).unwrap().unwrap();
        let Header::TextRequest(t) = p.header else { panic!() };
        assert_eq!(t.ttt, 77);
        assert!(p.data.is_empty());
        let DiscoveryStep::Targets(ts, _) = d.handle_pdu(rsp(true, false, RESERVED_TAG, b)).unwrap() else {
            panic!()
        };
        assert_eq!(ts.len(), 2);
        assert_eq!(ts[1].name, "iqn.b");
        assert_eq!(ts[1].addresses, vec!["[::1]:3260,1".to_string()]);
    }

    #[test]
    fn empty_continuations_and_a_foreign_logout_are_refused() {
        let login =
            LoginOutcome { params: Params::default(), tsih: 1, exp_stat_sn: 2, exp_cmd_sn: 1, max_cmd_sn: 2 };
        let (mut d, _) = Discovery::new(&login, 1, 9);
        for _ in 0..MAX_EMPTY_CONTINUATIONS {
            assert!(matches!(d.handle_pdu(rsp(false, true, 77, b"")), Ok(DiscoveryStep::Send(_))));
        }
        // Data resets the count.
        assert!(matches!(
            d.handle_pdu(rsp(false, true, 77, b"TargetName=iqn.a")),
            Ok(DiscoveryStep::Send(_))
        ));
        for _ in 0..MAX_EMPTY_CONTINUATIONS {
            assert!(matches!(d.handle_pdu(rsp(false, true, 77, b"")), Ok(DiscoveryStep::Send(_))));
        }
        let e = d.handle_pdu(rsp(false, true, 77, b"")).unwrap_err();
        assert!(e.to_string().contains("without data"), "{e}");

        let (mut d, _) = Discovery::new(&login, 1, 9);
        let DiscoveryStep::Targets(ts, logout) =
            d.handle_pdu(rsp(true, false, RESERVED_TAG, b"TargetName=iqn.a\0")).unwrap()
        else {
            panic!()
        };
        assert_eq!(ts.len(), 1);
        let mut buf = BytesMut::from(&logout.to_vec()[..]);
        let itt = Codec::default().decode(&mut buf).unwrap().unwrap().header.itt();
        let answer = |itt| Pdu {
            header: Header::LogoutResponse(crate::pdu::LogoutResponse {
                response: 0,
                itt,
                stat_sn: 3,
                exp_cmd_sn: 2,
                max_cmd_sn: 3,
                time2wait: 0,
                time2retain: 0,
            }),
            ahs: Bytes::new(),
            data: Bytes::new(),
        };
        let e = d.handle_pdu(answer(itt ^ 1)).unwrap_err();
        assert!(e.to_string().contains("Logout Response for unknown task"), "{e}");
        let (mut d, _) = Discovery::new(&login, 1, 9);
        d.handle_pdu(rsp(true, false, RESERVED_TAG, b"TargetName=iqn.a\0")).unwrap();
        assert_eq!(d.handle_pdu(answer(itt)), Ok(DiscoveryStep::LoggedOut));
    }
}
