#!/usr/bin/env python3
"""Writes the iSCSI seeds under seeds/<target>/: the SCSI parser and
discovery seeds, and crafted malformed inputs for every iSCSI target (the
valid login, connection, PDU and text seeds were written from the protocol
crate's encoders and are kept as they are).

The first byte of most inputs holds flags (see the bodies in
crates/proto/iscsi/src/fuzzing.rs); 0 means no digests."""
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))


def seed(target, name):
    with open(os.path.join(here, "seeds", target, name), "rb") as f:
        return f.read()


def bhs(opcode, flags=0, b2=0, b3=0, dsl=0, lun=0, itt=0, f20=0, f24=0, f28=0, f32=0, f36=0, f40=0, f44=0):
    return (
        struct.pack(">BBBBB", opcode, flags, b2, b3, 0)
        + dsl.to_bytes(3, "big")
        + struct.pack(">QIIIIIIII", lun, itt, f20, f24, f28, f32, f36, f40, f44)
    )


def pdu(header, data=b""):
    assert len(header) == 48
    return header + data + bytes((4 - len(data) % 4) % 4)


def text_rsp(final, cont, itt, ttt, stat_sn, data):
    flags = (0x80 if final else 0) | (0x40 if cont else 0)
    return pdu(bhs(0x24, flags, dsl=len(data), itt=itt, f20=ttt, f24=stat_sn, f28=2, f32=3), data)


def logout_rsp(itt, stat_sn):
    return pdu(bhs(0x26, 0x80, itt=itt, f24=stat_sn, f28=2, f32=3))


def r2t(itt, ttt, sn, offset, length):
    return pdu(bhs(0x31, 0x80, itt=itt, f20=ttt, f24=1, f28=2, f32=9, f36=sn, f40=offset, f44=length))


def data_in(itt, data_sn, offset, data, status=False):
    flags = 0x80 | (0x01 if status else 0)
    return pdu(bhs(0x25, flags, dsl=len(data), itt=itt, f20=0xFFFFFFFF, f24=1, f28=2, f32=9, f36=data_sn, f40=offset), data)


def sense_fixed(key, asc, ascq, info=None):
    s = bytearray(18)
    s[0] = 0x70 | (0x80 if info is not None else 0)
    s[2] = key
    if info is not None:
        s[3:7] = struct.pack(">I", info)
    s[7] = 10
    s[12], s[13] = asc, ascq
    return bytes(s)


def sense_descriptor(key, asc, ascq, descriptors=b"", additional=None):
    n = len(descriptors) if additional is None else additional
    return bytes([0x72, key, asc, ascq, 0, 0, 0, n]) + descriptors


def vpd(page, payload, length=None):
    return bytes([0, page]) + struct.pack(">H", len(payload) if length is None else length) + payload


targets = b"TargetName=iqn.2024-01.invalid:a\0TargetAddress=127.0.0.1:3260,1\0TargetAddress=[::1]:3260,1\0" \
    b"TargetName=iqn.2024-01.invalid:b\0TargetAddress=10.0.0.2:3260,2\0"
inquiry = bytes([0, 0, 6, 2, 31, 0, 0, 0]) + b"LIO-ORG " + b"disk            " + b"4.0 "
seeds = {
    "iscsi_scsi": {
        "sense_fixed_illegal_request": sense_fixed(0x5, 0x24, 0, info=4096),
        "sense_fixed_short": bytes([0x70, 0, 0x6]),
        "sense_descriptor_information": sense_descriptor(
            0x3, 0x11, 0, bytes([0, 10, 0x80, 0]) + struct.pack(">Q", 123456)),
        "sense_in_response_data": struct.pack(">H", 18) + sense_fixed(0x6, 0x29, 0),
        "inquiry": inquiry,
        "vpd_supported": vpd(0x00, bytes([0x00, 0x80, 0x83, 0xB0, 0xB2])),
        "vpd_block_limits": vpd(0xB0, bytes([0, 0, 0, 8]) + struct.pack(">IIIIIIIQ", 16384, 2048, 0, 8192, 64, 8, 0, 65536)[:56]),
        "vpd_provisioning": vpd(0xB2, bytes([0, 0xE4, 0x02, 0])),
        "read_capacity16": struct.pack(">QIBBB", (1 << 21) - 1, 512, 0, 0, 0xC0) + bytes(17),
        "cdb_fields": struct.pack(">QIB", 0x0123456789ABCDEF, 0xFEDCBA98, 1),
        # LUN 0 and 1 (peripheral), 300 (flat space)
        "report_luns": struct.pack(">II", 24, 0) + bytes([0, 0]) + bytes(6) + bytes([0, 1]) + bytes(6)
        + bytes([0x41, 0x2C]) + bytes(6),
        # malformed, tolerated by the lenient parsers (odd_*: no verdict, no panic)
        "odd_descriptor_additional_length": sense_descriptor(0x5, 0x20, 0, bytes([0, 10, 0x80]), additional=250),
        "odd_descriptor_overrunning_length": sense_descriptor(0x5, 0x20, 0, bytes([7, 200, 1, 2])),
        "odd_vpd_length_beyond_data": vpd(0xB0, bytes(6), length=0xFFFF),
        "odd_vpd_wrong_page": vpd(0xB2, bytes([0, 0xE4, 0x02, 0]))[:1] + b"\xb0" + vpd(0xB2, bytes([0, 0xE4, 0x02, 0]))[2:],
        "odd_capacity_block_len": struct.pack(">QI", 100, 3) + bytes(20),
        "odd_capacity_overflow": struct.pack(">QI", 0xFFFFFFFFFFFFFFFF, 4096) + bytes(20),
        "odd_report_luns_cut": struct.pack(">II", 4096, 0) + bytes([0, 7]) + bytes(6),
        "odd_response_data_sense_length": struct.pack(">H", 0xFFFF) + bytes([0x72, 5]),
    },
    "iscsi_discovery": {
        # flag byte: pieces of (flags >> 3) * 8 + 1 bytes
        "one_answer": b"\xf8" + text_rsp(True, False, 9, 0xFFFFFFFF, 2, targets) + logout_rsp(10, 3),
        "continued_answer": b"\x20" + text_rsp(False, True, 9, 77, 2, targets[:40])
        + text_rsp(True, False, 9, 0xFFFFFFFF, 3, targets[40:]) + logout_rsp(10, 4),
        "empty_answer": b"\x00" + text_rsp(True, False, 9, 0xFFFFFFFF, 2, b"") + logout_rsp(10, 3),
        # malformed, tolerated by the lenient parsers (odd_*: no verdict, no panic)
        "bad_address_before_name": b"\xf8" + text_rsp(True, False, 9, 0xFFFFFFFF, 2, b"TargetAddress=1.2.3.4:3260,1\0"),
        "bad_continue_without_ttt": b"\xf8" + text_rsp(False, True, 9, 0xFFFFFFFF, 2, targets[:10]),
        "bad_final_and_continue": b"\xf8" + text_rsp(True, True, 9, 5, 2, targets),
        "bad_unknown_task": b"\xf8" + text_rsp(True, False, 1234, 0xFFFFFFFF, 2, targets),
        "bad_text_no_equals": b"\xf8" + text_rsp(True, False, 9, 0xFFFFFFFF, 2, b"TargetName\0"),
        "bad_reject": b"\xf8" + pdu(bhs(0x3F, 0x80, b2=4, dsl=48, itt=0xFFFFFFFF, f24=2, f28=2, f32=3), bytes(48)),
        "bad_endless_empty_continuation": b"\xf8" + b"".join(
            text_rsp(False, True, 9, 77, 2 + i, b"") for i in range(40)),
        "bad_logout_for_another_task": b"\xf8" + text_rsp(True, False, 9, 0xFFFFFFFF, 2, targets) + logout_rsp(99, 3),
    },
    "iscsi_connection": {
        # flags 0x03: InitialR2T, ImmediateData, MaxOutstandingR2T 1; the
        # write is ITT 2 (16384 bytes, 4096 sent immediately).
        "bad_r2t_same_range_again": b"\x03" + r2t(2, 5, 0, 4096, 4096) + r2t(2, 6, 1, 4096, 4096),
        "bad_r2t_over_outstanding": b"\x03" + r2t(2, 5, 0, 4096, 4096) + r2t(2, 6, 1, 8192, 4096),
        "bad_r2t_tiny_flood": b"\xf3" + b"".join(r2t(2, 5 + i, i, 4096 + i, 1) for i in range(60)),
        "bad_data_in_sequence": b"\x03" + data_in(1, 1, 0, bytes(512)),
        "bad_data_in_beyond_length": b"\x03" + data_in(1, 0, 0, bytes(8192)) + data_in(1, 1, 8192, bytes(4), True),
        "bad_unknown_itt": b"\x03" + r2t(77, 5, 0, 0, 512),
    },
}


def corrupt(data, offset, value):
    b = bytearray(data)
    b[offset] = value
    return bytes(b)


def pdus(stream):
    """Splits a stream of PDUs without digests into whole PDUs."""
    out = []
    while stream:
        dsl = int.from_bytes(stream[5:8], "big")
        n = 48 + dsl + (4 - dsl % 4) % 4
        out.append(stream[:n])
        stream = stream[n:]
    return out


def with_data(p, data):
    """PDU `p` with its data segment replaced by `data`."""
    return pdu(p[:5] + len(data).to_bytes(3, "big") + p[8:48], data)


def mutual_chap(response):
    """The CHAP seed with mutual CHAP on (flags bit 3) and the target's
    CHAP_N/CHAP_R in its answer to ours; the body's target secret is
    fedcba9876543210, its CHAP_I 3, its challenge bytes 0..15."""
    chap = seed("iscsi_login", "chap")
    p = pdus(chap[1:])
    keys = b"CHAP_N=t\0CHAP_R=0x" + response.hex().encode() + b"\0"
    return bytes([chap[0] | 8]) + p[0] + p[1] + with_data(p[2], keys) + b"".join(p[3:])


md5 = __import__("hashlib").md5
good_response = md5(bytes([3]) + b"fedcba9876543210" + bytes(range(16))).digest()
login_none = seed("iscsi_login", "none")
datain = seed("iscsi_pdu_decoder", "datain")
seeds["iscsi_login"] = {
    # byte 0 is the flags, the BHS follows: status class at BHS byte 36, ITT at 16.
    "bad_status_class": corrupt(login_none, 1 + 36, 0x02),
    "bad_redirect": corrupt(login_none, 1 + 36, 0x01),
    "bad_itt": corrupt(login_none, 1 + 19, 0x99),
    "bad_not_a_login_response": corrupt(login_none, 1, 0x21),
    "truncated_response": login_none[: 1 + 48 + 7],
    "mutual_chap": mutual_chap(good_response),
    "bad_mutual_chap_response": mutual_chap(md5(b"a target that does not know the secret").digest()),
}
seeds["iscsi_pdu_decoder"] = {
    "bad_unknown_opcode": corrupt(datain, 1, 0x1C),
    "bad_segment_over_limit": b"\x04" + datain[1:6] + b"\x00\x10\x00" + datain[9:],
    "bad_reject_length": b"\x00" + pdu(bhs(0x3F, 0x80, dsl=12), bytes(12)),
    "bad_header_digest": b"\x01" + datain[1:49] + b"\xde\xad\xbe\xef" + datain[49:],
    "truncated_ahs": b"\x00" + corrupt(datain[1:49], 4, 0xFF),
}
seeds["iscsi_text_keys"] = {
    "bad_no_equals": b"HeaderDigest\0",
    "bad_key_too_long": b"X-" + b"k" * 70 + b"=1\0",
    "bad_not_utf8": b"X-foo=\xff\xfe\0",
    "bad_numbers": b"MaxBurstLength=99999999999999999999\0FirstBurstLength=-1\0MaxRecvDataSegmentLength=0x\0",
    "odd_binary": b"CHAP_C=0xZZ\0CHAP_R=0b!!!!\0CHAP_I=\0",
    "bad_booleans": b"InitialR2T=Maybe\0ImmediateData=\0DataPDUInOrder=No\0ErrorRecoveryLevel=2\0",
}
for target, files in seeds.items():
    d = os.path.join(here, "seeds", target)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
