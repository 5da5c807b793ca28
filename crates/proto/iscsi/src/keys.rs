//! Operational text keys and their negotiation (RFC 7143 sections 6.2 and 13).
//!
//! The initiator offers every key it cares about in its first operational
//! Login Request; the target answers each one. [`Negotiation`] checks every
//! answer against the key's result function (numerical minimum or maximum,
//! boolean OR or AND, list selection), maps `NotUnderstood`, `Irrelevant`
//! and `Reject` to the key's default, records declarative keys, and answers
//! keys the target offers on its own.

use std::collections::BTreeMap;

use crate::error::{LoginError, TextError};
use crate::text::{self, Pairs, special};

/// The largest value of the 24-bit length keys (RFC 7143 sections 13.12-13.14).
pub const MAX_LENGTH_KEY: u32 = 16_777_215;

/// How a key's result is computed (RFC 7143 section 6.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Each side declares its own value; no answer.
    Declarative,
    /// Numerical, declared (MaxRecvDataSegmentLength) with a valid range.
    DeclarativeNumber {
        /// Smallest valid value.
        lo: u64,
        /// Largest valid value.
        hi: u64,
    },
    /// Numerical, result is the minimum of both values.
    Min {
        /// Smallest valid value.
        lo: u64,
        /// Largest valid value.
        hi: u64,
    },
    /// Numerical, result is the maximum of both values.
    Max {
        /// Smallest valid value.
        lo: u64,
        /// Largest valid value.
        hi: u64,
    },
    /// Boolean, result is OR.
    Or,
    /// Boolean, result is AND.
    And,
    /// A list of values in order of preference; the responder picks one.
    List,
}

/// One key of RFC 7143 section 13.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyDef {
    /// The key name.
    pub name: &'static str,
    /// Result function.
    pub kind: Kind,
    /// The value both sides assume when the key is not negotiated.
    pub default: &'static str,
    /// Negotiated only on the leading connection of a session (session-wide).
    pub leading_only: bool,
}

const fn k(name: &'static str, kind: Kind, default: &'static str, leading_only: bool) -> KeyDef {
    KeyDef { name, kind, default, leading_only }
}

const LEN: Kind = Kind::Min { lo: 512, hi: MAX_LENGTH_KEY as u64 };

/// The operational and declarative keys this initiator knows.
pub const KEYS: &[KeyDef] = &[
    k("HeaderDigest", Kind::List, "None", false),
    k("DataDigest", Kind::List, "None", false),
    k("MaxConnections", Kind::Min { lo: 1, hi: 65535 }, "1", true),
    k("InitialR2T", Kind::Or, "Yes", true),
    k("ImmediateData", Kind::And, "Yes", true),
    k(
        "MaxRecvDataSegmentLength",
        Kind::DeclarativeNumber { lo: 512, hi: MAX_LENGTH_KEY as u64 },
        "8192",
        false,
    ),
    k("MaxBurstLength", LEN, "262144", true),
    k("FirstBurstLength", LEN, "65536", true),
    k("DefaultTime2Wait", Kind::Max { lo: 0, hi: 3600 }, "2", true),
    k("DefaultTime2Retain", Kind::Min { lo: 0, hi: 3600 }, "20", true),
    k("MaxOutstandingR2T", Kind::Min { lo: 1, hi: 65535 }, "1", true),
    k("DataPDUInOrder", Kind::Or, "Yes", true),
    k("DataSequenceInOrder", Kind::Or, "Yes", true),
    k("ErrorRecoveryLevel", Kind::Min { lo: 0, hi: 2 }, "0", true),
    k("IFMarker", Kind::And, "No", false),
    k("OFMarker", Kind::And, "No", false),
    k("SessionType", Kind::Declarative, "Normal", true),
    k("TargetName", Kind::Declarative, "", false),
    k("InitiatorName", Kind::Declarative, "", false),
    k("TargetAlias", Kind::Declarative, "", false),
    k("InitiatorAlias", Kind::Declarative, "", false),
    k("TargetAddress", Kind::Declarative, "", false),
    k("TargetPortalGroupTag", Kind::Declarative, "", false),
];

/// Looks a key up.
pub fn key_def(name: &str) -> Option<&'static KeyDef> {
    KEYS.iter().find(|d| d.name == name)
}

/// The values of one negotiated session/connection, as both sides use them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Params {
    /// CRC32C header digests.
    pub header_digest: bool,
    /// CRC32C data digests.
    pub data_digest: bool,
    /// Connections the session may have.
    pub max_connections: u32,
    /// The first burst of a write waits for an R2T.
    pub initial_r2t: bool,
    /// Write data may ride in the command PDU.
    pub immediate_data: bool,
    /// The data segment limit this initiator declared (Data-In PDU size).
    pub max_recv_data_segment: u32,
    /// The data segment limit the target declared (Data-Out PDU size).
    pub max_send_data_segment: u32,
    /// Largest solicited burst (one R2T, or one Data-In sequence).
    pub max_burst: u32,
    /// Largest unsolicited burst (immediate plus unsolicited Data-Out).
    pub first_burst: u32,
    /// DefaultTime2Wait, seconds.
    pub default_time2wait: u32,
    /// DefaultTime2Retain, seconds.
    pub default_time2retain: u32,
    /// R2Ts the target may have outstanding per task.
    pub max_outstanding_r2t: u32,
    /// Data PDUs come in increasing offset order.
    pub data_pdu_in_order: bool,
    /// Data sequences come in increasing offset order.
    pub data_sequence_in_order: bool,
    /// ErrorRecoveryLevel.
    pub error_recovery_level: u32,
    /// TargetAlias, if declared.
    pub target_alias: Option<String>,
    /// TargetPortalGroupTag, if declared.
    pub target_portal_group_tag: Option<u32>,
}

impl Default for Params {
    /// RFC 7143 defaults.
    fn default() -> Self {
        Params {
            header_digest: false,
            data_digest: false,
            max_connections: 1,
            initial_r2t: true,
            immediate_data: true,
            max_recv_data_segment: 8192,
            max_send_data_segment: 8192,
            max_burst: 262_144,
            first_burst: 65_536,
            default_time2wait: 2,
            default_time2retain: 20,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: 0,
            target_alias: None,
            target_portal_group_tag: None,
        }
    }
}

/// The MaxRecvDataSegmentLength we declare by default: the size of the
/// Data-In PDUs a target sends us. Not the RFC maximum: tgt 1.0.85 writes
/// one PDU at a time and retries on a full socket without waiting
/// (`do_send` loops on EAGAIN), so while it pushes one PDU its other
/// connections get nothing. With 16 MiB (and 4 MiB) PDUs that spin took
/// 82 % of a core and capped a 4-session restore at 325 Mbit/s on a
/// 1 Gbit/s, 100 ms RTT path; with 1 MiB PDUs it still serialised the
/// start: a fresh connection in slow start needs ~5 round trips to take
/// 1 MiB, so 8 sessions carried ~20 Mbit/s for the first ~3 s, one after
/// another. 64 KiB fits the send buffer of a fresh Linux socket
/// (~68 KiB), so no connection waits on another: 2 GiB restores ran
/// 754-810 Mbit/s against 677-746 with 1 MiB, steady state alike, less
/// client CPU (docs/results/iscsi). Bursts stay at the maximum, so one
/// READ of many MiB still needs no extra round trip.
pub const DEFAULT_RECV_SEGMENT: u32 = 64 << 10;

/// The operational keys offered on a leading connection by default, tuned
/// for long-fat networks (the iSCSI remote-write study's table 1, the iSCSI read-latency study's section 5): no initial
/// R2T, immediate data, bursts as large as RFC 7143 allows (the target
/// lowers them to its own limits), receive segments of
/// [`DEFAULT_RECV_SEGMENT`], many R2Ts outstanding.
pub fn long_fat_network_offer(max_connections: u32) -> Pairs {
    let m = MAX_LENGTH_KEY.to_string();
    [
        ("HeaderDigest", "None".to_string()),
        ("DataDigest", "None".to_string()),
        ("MaxConnections", max_connections.to_string()),
        ("InitialR2T", "No".to_string()),
        ("ImmediateData", "Yes".to_string()),
        ("MaxRecvDataSegmentLength", DEFAULT_RECV_SEGMENT.to_string()),
        ("MaxBurstLength", m.clone()),
        ("FirstBurstLength", m),
        ("DefaultTime2Wait", "0".to_string()),
        ("DefaultTime2Retain", "0".to_string()),
        ("MaxOutstandingR2T", "65535".to_string()),
        ("DataPDUInOrder", "Yes".to_string()),
        ("DataSequenceInOrder", "Yes".to_string()),
        ("ErrorRecoveryLevel", "0".to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Applies `overrides` (`--iscsi-param KEY=VALUE`) to `offer`: replaces the
/// value of a key already offered, appends others.
///
/// # Errors
/// [`LoginError::Config`] for a bad key name or a value out of the key's range.
pub fn apply_overrides(offer: &mut Pairs, overrides: &[(String, String)]) -> Result<(), LoginError> {
    for (key, value) in overrides {
        text::check_pair(key, value).map_err(|e| LoginError::Config(e.to_string()))?;
        if let Some(def) = key_def(key) {
            validate_offer(def, value).map_err(|e| LoginError::Config(e.to_string()))?;
        }
        if let Some(slot) = offer.iter_mut().find(|(k, _)| k == key) {
            slot.1 = value.clone();
        } else {
            offer.push((key.clone(), value.clone()));
        }
    }
    Ok(())
}

fn validate_offer(def: &KeyDef, value: &str) -> Result<(), TextError> {
    match def.kind {
        Kind::Min { lo, hi } | Kind::Max { lo, hi } | Kind::DeclarativeNumber { lo, hi } => {
            let v = text::parse_number(def.name, value)?;
            if v < lo || v > hi {
                return Err(TextError::BadValue { key: def.name.to_string(), value: value.to_string() });
            }
        }
        Kind::Or | Kind::And => {
            text::parse_bool(def.name, value)?;
        }
        Kind::List => {
            if def.name.ends_with("Digest") {
                for item in value.split(',') {
                    if item != "None" && item != "CRC32C" {
                        return Err(TextError::BadValue {
                            key: def.name.to_string(),
                            value: value.to_string(),
                        });
                    }
                }
            }
        }
        Kind::Declarative => {}
    }
    Ok(())
}

/// One login's operational negotiation: what was offered, what was agreed,
/// and answers owed to keys the target offered.
#[derive(Debug, Clone)]
pub struct Negotiation {
    offered: BTreeMap<String, String>,
    agreed: BTreeMap<String, String>,
    answered: BTreeMap<String, bool>,
    replies: Pairs,
    leading: bool,
}

impl Negotiation {
    /// Starts a negotiation of `offer` on a leading (`leading`) or an added
    /// connection. Session-wide keys are dropped from the offer of an added
    /// connection (RFC 7143 section 6.3: they are leading-only).
    pub fn new(offer: &Pairs, leading: bool) -> Negotiation {
        let offered = offer
            .iter()
            .filter(|(k, _)| leading || key_def(k).is_none_or(|d| !d.leading_only))
            .cloned()
            .collect();
        Negotiation {
            offered,
            agreed: BTreeMap::new(),
            answered: BTreeMap::new(),
            replies: Vec::new(),
            leading,
        }
    }

    /// The keys to send in the first operational PDU.
    pub fn offer(&self) -> Pairs {
        self.offered.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }

    /// Answers owed to the target's own offers; to send in the next PDU.
    pub fn take_replies(&mut self) -> Pairs {
        std::mem::take(&mut self.replies)
    }

    /// Processes the target's keys from one Login Response.
    ///
    /// # Errors
    /// [`LoginError::Negotiation`] when an answer breaks the key's result
    /// function or range.
    pub fn handle(&mut self, pairs: &[(String, String)]) -> Result<(), LoginError> {
        for (key, value) in pairs {
            self.handle_one(key, value)?;
        }
        Ok(())
    }

    fn err(key: &str, message: impl Into<String>) -> LoginError {
        LoginError::Negotiation { key: key.to_string(), message: message.into() }
    }

    fn handle_one(&mut self, key: &str, value: &str) -> Result<(), LoginError> {
        let def = key_def(key);
        if let Some(d) = def {
            match d.kind {
                Kind::Declarative => {
                    self.agreed.insert(key.to_string(), value.to_string());
                    return Ok(());
                }
                Kind::DeclarativeNumber { lo, hi } => {
                    let v = text::parse_number(key, value)?;
                    if v < lo || v > hi {
                        return Err(Self::err(key, format!("declared {v}, outside {lo}..={hi}")));
                    }
                    // The target's own MaxRecvDataSegmentLength, stored apart from ours.
                    self.agreed.insert(format!("Target{key}"), v.to_string());
                    return Ok(());
                }
                _ => {}
            }
        }
        if let Some(ours) = self.offered.get(key).cloned() {
            if self.answered.get(key).copied().unwrap_or(false) {
                // Answered already (a target repeating itself): keep the first answer
                // unless the value differs, which breaks RFC 7143 section 6.2.
                if self.agreed.get(key).map(String::as_str) != Some(value) {
                    return Err(Self::err(
                        key,
                        format!("answered twice, with {value:?} after {:?}", self.agreed[key]),
                    ));
                }
                return Ok(());
            }
            self.answered.insert(key.to_string(), true);
            let Some(def) = def else {
                // A key we offered but do not know (an override): take the answer as is.
                self.agreed.insert(key.to_string(), value.to_string());
                return Ok(());
            };
            if matches!(value, special::NOT_UNDERSTOOD | special::IRRELEVANT | special::REJECT) {
                // RFC 7143 section 6.2: the key keeps its default value.
                self.agreed.insert(key.to_string(), def.default.to_string());
                return Ok(());
            }
            let result = Self::check_answer(def, &ours, value)?;
            self.agreed.insert(key.to_string(), result);
            return Ok(());
        }
        let Some(def) = def else {
            if !key.starts_with("X-") && !key.starts_with("X#") && !key.starts_with("Y-") {
                self.replies.push((key.to_string(), special::NOT_UNDERSTOOD.to_string()));
            }
            return Ok(());
        };
        if def.leading_only && !self.leading {
            // Some targets (tgt) repeat session-wide keys on added
            // connections; they do not apply there.
            return Ok(());
        }
        // The target offers a key we did not: answer with the result of its
        // value and our preference (the default).
        let result = Self::result_of(def, def.default, value)?;
        self.agreed.insert(key.to_string(), result.clone());
        self.replies.push((key.to_string(), result));
        Ok(())
    }

    /// Checks the target's answer `theirs` to our offer `ours`.
    fn check_answer(def: &KeyDef, ours: &str, theirs: &str) -> Result<String, LoginError> {
        match def.kind {
            Kind::Min { lo, hi } | Kind::Max { lo, hi } => {
                let o = text::parse_number(def.name, ours)?;
                let t = text::parse_number(def.name, theirs)?;
                if t < lo || t > hi {
                    return Err(Self::err(def.name, format!("answer {t} outside {lo}..={hi}")));
                }
                let is_min = matches!(def.kind, Kind::Min { .. });
                if (is_min && t > o) || (!is_min && t < o) {
                    return Err(Self::err(
                        def.name,
                        format!(
                            "answer {t} breaks the {} function (offered {o})",
                            if is_min { "minimum" } else { "maximum" }
                        ),
                    ));
                }
                Ok(t.to_string())
            }
            Kind::Or | Kind::And => {
                let o = text::parse_bool(def.name, ours)?;
                let t = text::parse_bool(def.name, theirs)?;
                let or = def.kind == Kind::Or;
                if or && o && !t {
                    return Err(Self::err(def.name, "answered No to Yes under the OR function"));
                }
                if !or && !o && t {
                    return Err(Self::err(def.name, "answered Yes to No under the AND function"));
                }
                Ok(text::yes_no(t).to_string())
            }
            Kind::List => {
                if theirs.contains(',') || !ours.split(',').any(|o| o == theirs) {
                    return Err(Self::err(
                        def.name,
                        format!("answer {theirs:?} is not one of the offered {ours:?}"),
                    ));
                }
                Ok(theirs.to_string())
            }
            Kind::Declarative | Kind::DeclarativeNumber { .. } => Ok(ours.to_string()),
        }
    }

    /// The result of the target's offer `theirs` and our value `ours`.
    fn result_of(def: &KeyDef, ours: &str, theirs: &str) -> Result<String, LoginError> {
        Ok(match def.kind {
            Kind::Min { lo, hi } | Kind::Max { lo, hi } => {
                let o = text::parse_number(def.name, ours)?;
                let t = text::parse_number(def.name, theirs)?;
                if t < lo || t > hi {
                    return Err(Self::err(def.name, format!("offer {t} outside {lo}..={hi}")));
                }
                if matches!(def.kind, Kind::Min { .. }) { o.min(t) } else { o.max(t) }.to_string()
            }
            Kind::Or => {
                text::yes_no(text::parse_bool(def.name, ours)? || text::parse_bool(def.name, theirs)?)
                    .to_string()
            }
            Kind::And => {
                text::yes_no(text::parse_bool(def.name, ours)? && text::parse_bool(def.name, theirs)?)
                    .to_string()
            }
            Kind::List => {
                // Our only value for list keys offered by the target is "None".
                if theirs.split(',').any(|t| t == "None") {
                    "None".to_string()
                } else {
                    special::REJECT.to_string()
                }
            }
            Kind::Declarative | Kind::DeclarativeNumber { .. } => theirs.to_string(),
        })
    }

    /// The agreed value of `key`: the answer, the implicit result, or the default.
    fn value(&self, key: &str) -> Option<String> {
        if let Some(v) = self.agreed.get(key) {
            return Some(v.clone());
        }
        let def = key_def(key)?;
        if let Some(o) = self.offered.get(key) {
            // RFC 7143 section 6.2.2: an answer is optional for OR offered
            // Yes and for AND offered No; the offer is then the result.
            let implicit = match def.kind {
                Kind::Or => o == "Yes",
                Kind::And => o == "No",
                Kind::Declarative | Kind::DeclarativeNumber { .. } => true,
                _ => false,
            };
            if implicit {
                return Some(o.clone());
            }
        }
        Some(def.default.to_string())
    }

    fn number(&self, key: &str) -> Result<u32, LoginError> {
        let v = self.value(key).unwrap_or_default();
        let n = text::parse_number(key, &v)?;
        u32::try_from(n).map_err(|_| Self::err(key, format!("{n} out of range")))
    }

    fn boolean(&self, key: &str) -> Result<bool, LoginError> {
        Ok(text::parse_bool(key, &self.value(key).unwrap_or_default())?)
    }

    /// The negotiated values. On an added connection the session-wide
    /// values come from `session` (the leading connection's).
    ///
    /// # Errors
    /// [`LoginError::Negotiation`] if a value is unusable.
    pub fn finish(&self, session: Option<&Params>) -> Result<Params, LoginError> {
        let digest = |k: &str| -> Result<bool, LoginError> {
            match self.value(k).as_deref() {
                Some("CRC32C") => Ok(true),
                Some("None") | None => Ok(false),
                Some(v) => Err(Self::err(k, format!("unusable value {v:?}"))),
            }
        };
        let target_mrdsl = match self.agreed.get("TargetMaxRecvDataSegmentLength") {
            Some(v) => text::parse_number("MaxRecvDataSegmentLength", v)? as u32,
            None => 8192,
        };
        let mut p = match (self.leading, session) {
            (false, Some(s)) => s.clone(),
            _ => Params {
                max_connections: self.number("MaxConnections")?,
                initial_r2t: self.boolean("InitialR2T")?,
                immediate_data: self.boolean("ImmediateData")?,
                max_burst: self.number("MaxBurstLength")?,
                first_burst: self.number("FirstBurstLength")?,
                default_time2wait: self.number("DefaultTime2Wait")?,
                default_time2retain: self.number("DefaultTime2Retain")?,
                max_outstanding_r2t: self.number("MaxOutstandingR2T")?,
                data_pdu_in_order: self.boolean("DataPDUInOrder")?,
                data_sequence_in_order: self.boolean("DataSequenceInOrder")?,
                error_recovery_level: self.number("ErrorRecoveryLevel")?,
                ..Params::default()
            },
        };
        p.header_digest = digest("HeaderDigest")?;
        p.data_digest = digest("DataDigest")?;
        p.max_recv_data_segment = self.number("MaxRecvDataSegmentLength")?;
        p.max_send_data_segment = target_mrdsl;
        p.target_alias = self.agreed.get("TargetAlias").cloned().or(p.target_alias);
        p.target_portal_group_tag = match self.agreed.get("TargetPortalGroupTag") {
            Some(v) => Some(text::parse_number("TargetPortalGroupTag", v)? as u32),
            None => p.target_portal_group_tag,
        };
        // RFC 7143 section 13.14: FirstBurstLength never exceeds MaxBurstLength.
        if p.first_burst > p.max_burst {
            p.first_burst = p.max_burst;
        }
        if !p.data_pdu_in_order || !p.data_sequence_in_order {
            return Err(Self::err("DataPDUInOrder", "out-of-order data is not supported"));
        }
        if p.error_recovery_level != 0 {
            return Err(Self::err("ErrorRecoveryLevel", "only level 0 is supported"));
        }
        Ok(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(v: &[(&str, &str)]) -> Pairs {
        v.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn tgt_defaults_lower_our_offer() {
        let mut n = Negotiation::new(&long_fat_network_offer(1), true);
        n.handle(&pairs(&[
            ("HeaderDigest", "None"),
            ("DataDigest", "None"),
            ("MaxConnections", "1"),
            ("InitialR2T", "Yes"),
            ("ImmediateData", "Yes"),
            ("MaxRecvDataSegmentLength", "8192"),
            ("MaxBurstLength", "262144"),
            ("FirstBurstLength", "65536"),
            ("MaxOutstandingR2T", "1"),
            ("DefaultTime2Wait", "2"),
            ("DefaultTime2Retain", "0"),
            ("ErrorRecoveryLevel", "0"),
        ]))
        .unwrap();
        let p = n.finish(None).unwrap();
        assert!(p.initial_r2t);
        assert!(p.immediate_data);
        assert_eq!(p.max_burst, 262144);
        assert_eq!(p.first_burst, 65536);
        assert_eq!(p.max_send_data_segment, 8192);
        assert_eq!(p.max_recv_data_segment, DEFAULT_RECV_SEGMENT);
        assert_eq!(p.default_time2wait, 2);
        // DataPDUInOrder was not answered: OR offered Yes is implicit.
        assert!(p.data_pdu_in_order);
    }

    #[test]
    fn answers_breaking_result_functions_fail() {
        let offer = long_fat_network_offer(1);
        for (k, v) in [
            ("MaxBurstLength", "16777216"),
            ("MaxConnections", "2"),
            ("DataPDUInOrder", "No"),
            ("HeaderDigest", "CRC32C"),
            ("DefaultTime2Wait", "nope"),
        ] {
            let mut n = Negotiation::new(&offer, true);
            assert!(n.handle(&pairs(&[(k, v)])).is_err(), "{k}={v}");
        }
    }

    #[test]
    fn special_answers_mean_default() {
        let mut n = Negotiation::new(&long_fat_network_offer(1), true);
        n.handle(&pairs(&[("InitialR2T", "Reject"), ("MaxBurstLength", "NotUnderstood")])).unwrap();
        let p = n.finish(None).unwrap();
        assert!(p.initial_r2t);
        assert_eq!(p.max_burst, 262144);
    }

    #[test]
    fn target_offers_are_answered() {
        let mut n = Negotiation::new(&pairs(&[("MaxRecvDataSegmentLength", "65536")]), true);
        n.handle(&pairs(&[("MaxOutstandingR2T", "4"), ("X-foo", "1"), ("Bogus", "1")])).unwrap();
        assert_eq!(n.take_replies(), pairs(&[("MaxOutstandingR2T", "1"), ("Bogus", "NotUnderstood")]));
    }

    #[test]
    fn added_connection_ignores_session_keys() {
        let session = Params { max_burst: 1 << 20, ..Params::default() };
        let mut n = Negotiation::new(&long_fat_network_offer(4), false);
        assert!(n.offer().iter().all(|(k, _)| !key_def(k).unwrap().leading_only));
        n.handle(&pairs(&[("MaxBurstLength", "4096"), ("MaxRecvDataSegmentLength", "262144")])).unwrap();
        let p = n.finish(Some(&session)).unwrap();
        assert_eq!(p.max_burst, 1 << 20);
        assert_eq!(p.max_send_data_segment, 262144);
    }

    #[test]
    fn overrides() {
        let mut o = long_fat_network_offer(1);
        apply_overrides(&mut o, &pairs(&[("HeaderDigest", "CRC32C"), ("X-a", "b")])).unwrap();
        assert_eq!(text::get(&o, "HeaderDigest"), Some("CRC32C"));
        assert!(apply_overrides(&mut o, &pairs(&[("MaxBurstLength", "1")])).is_err());
        assert!(apply_overrides(&mut o, &pairs(&[("HeaderDigest", "MD5")])).is_err());
        assert!(apply_overrides(&mut o, &pairs(&[("bad key", "1")])).is_err());
    }
}
