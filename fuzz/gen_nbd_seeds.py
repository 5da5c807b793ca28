#!/usr/bin/env python3
"""Writes the NBD seeds under seeds/<target>/: valid conversations and
crafted malformed ones (named bad_*).

The first byte of every input is the chunk size the targets split the rest
into (see src/nbd.rs `pieces`)."""
import os
import struct

NBDMAGIC, IHAVEOPT, REPLYMAGIC = 0x4E42444D41474943, 0x49484156454F5054, 0x3E889045565A9


def opt_reply(opt, rep, data=b""):
    return struct.pack(">QIII", REPLYMAGIC, opt, rep, len(data)) + data


def opt(o, data=b""):
    return struct.pack(">QII", IHAVEOPT, o, len(data)) + data


def simple(cookie, err=0, data=b""):
    return struct.pack(">IIQ", 0x67446698, err, cookie) + data


def chunk(flags, kind, cookie, payload):
    return struct.pack(">IHHQI", 0x668E33EF, flags, kind, cookie, len(payload)) + payload


def request(flags, cmd, cookie, offset, length, data=b""):
    return struct.pack(">IHHQQI", 0x25609513, flags, cmd, cookie, offset, length) + data


greeting = struct.pack(">QQH", NBDMAGIC, IHAVEOPT, 3)
go_ok = (
    opt_reply(8, 1)
    + opt_reply(10, 4, struct.pack(">I", 1) + b"base:allocation")
    + opt_reply(10, 1)
    + opt_reply(7, 3, struct.pack(">HQH", 0, 1 << 20, 0x1FD))
    + opt_reply(7, 3, struct.pack(">HIII", 3, 1, 4096, 65536))
    + opt_reply(7, 1)
)
seeds = {
    "nbd_client_handshake": {
        "go": b"\x00" + greeting + go_ok,
        "go_unsup_fallback": b"\x06" + greeting + opt_reply(8, 0x80000001) + opt_reply(10, 0x80000001)
        + opt_reply(7, 0x80000001)
        + struct.pack(">QH", 1 << 20, 1),
        "list": b"\x02" + greeting + opt_reply(3, 2, struct.pack(">I", 4) + b"diskdesc") + opt_reply(3, 1),
        "oldstyle": b"\x00" + struct.pack(">QQQI", NBDMAGIC, 0x420281861253, 1 << 20, 1) + bytes(124),
    },
    "nbd_client_replies": {
        "read_data": b"\xff" + chunk(1, 1, 1, struct.pack(">Q", 0) + bytes(64)),
        "read_split": b"\x05" + chunk(0, 1, 2, struct.pack(">Q", 4096) + bytes(100))
        + chunk(0, 2, 2, struct.pack(">QI", 4196, 3996)) + chunk(1, 0, 2, b""),
        "simple_ok": b"\xff" + simple(3) + simple(4) + simple(5) + simple(6),
        "block_status": b"\xff" + chunk(1, 5, 7, struct.pack(">IIIII", 1, 4096, 0, 4096, 3)),
        "errors": b"\xff" + chunk(1, 0x8001, 1, struct.pack(">IH", 5, 4) + b"oops")
        + chunk(0, 0x8002, 2, struct.pack(">IH", 5, 0) + struct.pack(">Q", 4100)) + chunk(1, 0, 2, b""),
    },
    "nbd_server_options": {
        "go": b"\xff" + opt(8) + opt(10, struct.pack(">I", 4) + b"disk" + struct.pack(">II", 1, 15)
        + b"base:allocation") + opt(7, struct.pack(">I", 4) + b"disk" + struct.pack(">HH", 1, 3)),
        "list_info_abort": b"\x03" + opt(3) + opt(6, struct.pack(">I", 0) + struct.pack(">H", 0)) + opt(9, struct.pack(">II", 0, 0)) + opt(2),
        "export_name": b"\xff" + opt(1, b"disk"),
        "unknown": b"\xff" + opt(99, b"xyz") + opt(5),
    },
    "nbd_server_requests": {
        "rw": b"\xff" + request(1, 1, 1, 0, 4, b"abcd") + request(0, 0, 2, 0, 4) + request(0, 3, 3, 0, 0),
        "misc": b"\x09" + request(2, 6, 4, 0, 512) + request(0, 4, 5, 512, 512) + request(8, 7, 6, 0, 8192)
        + request(4, 0, 7, 0, 100) + request(0, 2, 8, 0, 0),
        "refused_requests": b"\xff" + request(0, 0, 9, (1 << 20) - 1, 2) + request(0, 42, 10, 0, 1) + request(0x40, 0, 11, 0, 1),
    },
}
# Crafted malformed inputs: bad_* break the protocol (the machine must fail
# with a typed error); refused_* are requests or options a server answers
# with an error reply, as the spec says, and goes on.
one_byte_chunks = b"".join(chunk(0, 1, 2, struct.pack(">Q", 4096 + i) + b"x") for i in range(40))
seeds["nbd_client_handshake"].update({
    "bad_greeting_magic": b"\xff" + struct.pack(">QQH", NBDMAGIC, 0x1234, 3),
    "bad_option_reply_too_long": b"\x00" + greeting + struct.pack(">QIII", REPLYMAGIC, 8, 1, 1 << 20),
    "bad_reply_for_other_option": b"\x00" + greeting + opt_reply(3, 1),
    "bad_block_sizes": b"\x00" + greeting + opt_reply(8, 1) + opt_reply(10, 1)
    + opt_reply(7, 3, struct.pack(">HQH", 0, 1 << 20, 1)) + opt_reply(7, 3, struct.pack(">HIII", 3, 3, 4096, 65536))
    + opt_reply(7, 1),
    "bad_go_without_export_info": b"\x00" + greeting + opt_reply(8, 1) + opt_reply(10, 1) + opt_reply(7, 1),
    "bad_list_entry": b"\x02" + greeting + opt_reply(3, 2, struct.pack(">I", 99) + b"x") + opt_reply(3, 1),
})
seeds["nbd_client_replies"].update({
    # cookie 2 is a 4096-byte read: at most 16 + 4096/512 = 24 chunks.
    "bad_one_byte_chunks": b"\xff" + one_byte_chunks,
    "bad_overlapping_chunks": b"\xff" + chunk(0, 1, 1, struct.pack(">Q", 0) + bytes(40))
    + chunk(1, 1, 1, struct.pack(">Q", 32) + bytes(32)),
    "bad_unknown_cookie": b"\xff" + simple(99),
    "bad_chunk_too_long": b"\xff" + struct.pack(">IHHQI", 0x668E33EF, 1, 1, 1, 1 << 30),
    "bad_simple_reply_to_block_status": b"\xff" + simple(7),
    "bad_reply_magic": b"\xff" + struct.pack(">IIQ", 0x12345678, 0, 1),
    "bad_duplicate_done": b"\xff" + simple(3) + simple(3),
})
seeds["nbd_server_options"].update({
    "refused_oversized_option": b"\xff" + struct.pack(">QII", IHAVEOPT, 99, 1 << 20) + bytes(64) + opt(3),
    "bad_export_name_too_long": b"\xff" + struct.pack(">QII", IHAVEOPT, 1, 1 << 20),
    "bad_option_magic": b"\xff" + struct.pack(">QII", 0x1122334455667788, 3, 0),
    "refused_meta_context_truncated": b"\xff" + opt(8) + opt(10, struct.pack(">I", 400) + b"disk"),
    "refused_info_request_counts": b"\xff" + opt(6, struct.pack(">I", 4) + b"disk" + struct.pack(">H", 300)),
})
# NBD_OPT_STARTTLS: with a first byte from 0x80 to 0xbf the client asks for
# TLS and splits input into (byte & 0x3f) + 1 bytes; 0xa5 ends the first
# piece right after the server's ACK (greeting 18 + reply 20 bytes).
seeds["nbd_client_handshake"].update({
    "starttls_go": b"\xa5" + greeting + opt_reply(5, 1) + go_ok,
    "bad_starttls_injection": b"\xbf" + greeting + opt_reply(5, 1) + go_ok,
    "bad_starttls_unsupported": b"\xa5" + greeting + opt_reply(5, 0x80000001),
    "bad_starttls_oldstyle": b"\xa5" + struct.pack(">QQQI", NBDMAGIC, 0x420281861253, 1 << 20, 1) + bytes(124),
})
seeds["nbd_server_options"].update({
    "starttls_then_go": b"\x10" + opt(5) + opt(8) + opt(7, struct.pack(">I", 4) + b"disk" + struct.pack(">H", 0)),
    "bad_data_after_starttls": b"\xff" + opt(5) + opt(3),
})
seeds["nbd_server_requests"].update({
    "bad_write_above_max_payload": b"\xff" + request(0, 1, 1, 0, 1 << 30),
    "bad_request_magic": b"\xff" + struct.pack(">IHHQQI", 0xDEADBEEF, 0, 0, 1, 0, 512),
    "refused_zero_length_and_beyond_end": b"\xff" + request(0, 0, 2, 0, 0) + request(0, 0, 3, 1 << 40, 512),
    "refused_flags_and_commands": b"\xff" + request(0xFFFF, 0, 4, 0, 512) + request(0, 0xFFFF, 5, 0, 512),
    "ignored_after_disc": b"\xff" + request(0, 2, 6, 0, 0) + request(0, 0, 7, 0, 512),
})
here = os.path.dirname(os.path.abspath(__file__))
for target, files in seeds.items():
    d = os.path.join(here, "seeds", target)
    os.makedirs(d, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
